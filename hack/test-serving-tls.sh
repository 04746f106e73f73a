#!/usr/bin/env bash
# Knative Serving v0.50.0's encryption suites, unmodified, through hitless:
# the part of `make test-serving-tls` (hack/test-serving.sh --tls) that runs
# once Serving is up. Each suite runs in the configuration Serving's own CI
# gives it (test/e2e-tests.sh and test/e2e-external-domain-tls-tests.sh at
# v0.50.0), with cert-manager on the stack (hack/certmanager.sh):
#
#   clusterlocaldomaintls   config-network cluster-local-domain-tls: enabled
#   systeminternaltls       system-internal-tls: enabled, request logs with
#                           "TLS: {{.Request.TLS}}", activator restarted; then
#                           the gRPC and HTTP/2 tests of test/e2e (TestGRPC*,
#                           TestHelloHTTP2*) in the same configuration
#   externaldomaintls       external-domain-tls: Enabled with Serving's
#                           self-signed ClusterIssuer (test/config/externaldomaintls/
#                           certmanager/selfsigned), autocreate-cluster-domain-claims
#                           on (DomainMappings), every test of the package
#   externaldomaintls       the same with HTTP-01 (certmanager/http01's
#     (http01)              config-certmanager): its ClusterIssuer http01-issuer
#                           is an ACME issuer of the stack's pebble in place of
#                           Let's Encrypt, everything else as Serving's; TestTLS
#
# and two of ours (test/serving) where only this configuration can run them:
# a gRPC rollout under streaming load with system-internal-tls, and a
# certificate renewal (HTTP-01 again, on a host already serving TLS and
# redirecting) under HTTPS load.
#
# Serving's controller runs its cert-manager integration only when one of the
# three features is on when it starts, so it is restarted after each switch,
# as Serving's CI does. Everything is switched back at the end, whatever the
# outcome. A row per test, then passed/failed/skipped per suite; logs in
# .stack/logs/serving-tls-<suite>.log.
#
# Needs: the stack, Serving and the hitless controller up, and hack/serving.sh
# env exported (hack/test-serving.sh does both).
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
HACK_KUBECONFIG=$STACK/kubeconfig
NS=${SYSTEM_NAMESPACE:?export hack/serving.sh env first}
INGRESS_CLASS=contour.ingress.networking.knative.dev
TLS_NS=tls # Serving's -tls-test-namespace default; test/config/cluster-resources.yaml creates it
SERVING_BIN=$BIN/serving
logs=$STACK/logs
serving_dir=$(cd "$REPO/hack/tools/serving" && go list -m -f '{{.Dir}}' knative.dev/serving)
certmanager_config=$serving_dir/test/config/externaldomaintls/certmanager

# toggle CONFIGMAP KEY VALUE: Serving's CI's toggle_feature
toggle() {
  local patch
  patch=$(KEY=$2 VALUE=$3 python3 -c 'import json, os; print(json.dumps({"data": {os.environ["KEY"]: os.environ["VALUE"]}}))')
  kubectl -n "$NS" patch configmap "$1" --type=merge -p "$patch" >/dev/null
}

# restart APP...: replace the pods of Serving's deployments (app=APP), as
# Serving's CI restart_pod does, and wait until each serves again
restart() {
  local app
  for app in "$@"; do
    kubectl -n "$NS" delete pod -l "app=$app" --wait=true >/dev/null
  done
  for app in "$@"; do
    retry 180 deployment_available "$app" || die "Serving's $app did not come back after its restart"
  done
  log "restarted ${*}"
}
deployment_available() {
  [[ $(kubectl -n "$NS" get deploy "$1" -o jsonpath='{.status.availableReplicas}') -ge 1 &&
    $(kubectl -n "$NS" get deploy "$1" -o jsonpath='{.status.unavailableReplicas}') == "" ]]
}

issuer_ready() {
  [[ $(kubectl get clusterissuer "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]
}

# suite NAME LABEL [ARG...]: runs Serving's test binary NAME.test (the
# package test/e2e/NAME; e2e: test/e2e itself) with Serving CI's flags, prints
# a row per test and the totals, and records a failure
suite() {
  local name=$1 label=$2 pkg log json rc=0
  shift 2
  pkg=test/e2e/$name
  [[ $name != e2e ]] || pkg=test/e2e
  log=$logs/serving-tls-$label.log json=$logs/serving-tls-$label.json
  echo "--- $label (knative.dev/serving/$pkg@v0.50.0)"
  (cd "$serving_dir/$pkg" &&
    "$SERVING_BIN/$name.test" -test.v=test2json -test.timeout 10m -test.count 1 "$@" \
      -ingress-class "$INGRESS_CLASS" -enable-alpha -enable-beta -disable-logstream 2>&1) |
    tee "$log" | go tool test2json -t -p "knative.dev/serving/$pkg" >"$json" || rc=$?
  (cd "$REPO" && go run ./test/testtable "$json") || true
  if ((rc)); then
    failed+=("$label")
  fi
}

# ours LABEL TEST: one of our Serving-level tests (test/serving) in the
# configuration of the moment
ours() {
  echo "--- $1 (test/serving $2)"
  (cd "$REPO" && go test -count=1 -tags=e2e -timeout 15m -v ./test/serving -run "^$2\$") >"$logs/serving-tls-$1.log" 2>&1 ||
    failed+=("$1")
  grep -E '^(--- |serving-)|_test.go:[0-9]+:' "$logs/serving-tls-$1.log" | cut -c1-400 || true
}

restore() {
  set +e
  toggle config-network cluster-local-domain-tls disabled
  toggle config-network system-internal-tls disabled
  toggle config-network external-domain-tls Disabled
  toggle config-network autocreate-cluster-domain-claims false
  toggle config-observability logging.enable-request-log false
  toggle config-observability logging.request-log-template ''
  kubectl apply -f "$serving_dir/config/core/configmaps/certmanager.yaml" >/dev/null
  kubectl delete kcert --all -n "$TLS_NS" >/dev/null 2>&1
  restart activator controller
  set -e
}

failed=()
"$REPO/hack/certmanager.sh" up
eval "$("$REPO/hack/certmanager.sh" env)"
trap restore EXIT

# Serving's issuers for its own encryption (knative-selfsigned-issuer and
# its CA), as Serving's CI installs them next to cert-manager
kubectl apply -f "$serving_dir/test/config/ytt/certmanager/net-certmanager-config.yaml" >/dev/null
retry 60 kubectl -n cert-manager get secret knative-selfsigned-ca ||
  die "cert-manager did not issue Serving's knative-selfsigned-ca; see $STACK/logs/cert-manager.log"

# 1. cluster-local-domain-tls
toggle config-network cluster-local-domain-tls enabled
restart controller
suite clusterlocaldomaintls cluster-local-domain-tls
toggle config-network cluster-local-domain-tls disabled

# 2. system-internal-tls (the activator reads its certificates once, at start:
# knative/serving#13754)
toggle config-network system-internal-tls enabled
toggle config-observability logging.enable-request-log true
toggle config-observability logging.request-log-template 'TLS: {{.Request.TLS}}'
restart activator controller
suite systeminternaltls system-internal-tls
# Serving's gRPC and HTTP/2 tests of its main e2e suite, with every hop
# encrypted: Envoy reaches an h2c revision over h2 (TLS)
suite e2e system-internal-tls-grpc-http2 -test.run '^(TestGRPC.*|TestHelloHTTP2.*)$' -test.parallel 4
# and a gRPC Knative Service rolled out under streaming load
ours system-internal-tls-grpc-rollout TestServingGRPCStreamingRolloutDropsNothing
toggle config-network system-internal-tls disabled
toggle config-observability logging.enable-request-log false
toggle config-observability logging.request-log-template ''
restart activator

# 3. external-domain-tls, self-signed per Knative Service (as Serving's
# external-domain-tls CI: DomainMappings claim their domains themselves, and
# the suite's namespace is named in TLS_TEST_NAMESPACE)
export TLS_TEST_NAMESPACE=$TLS_NS
toggle config-network external-domain-tls Enabled
toggle config-network autocreate-cluster-domain-claims true
toggle config-network namespace-wildcard-cert-selector ''
kubectl delete kcert --all -n "$TLS_NS" >/dev/null 2>&1 || true
kubectl apply -f "$certmanager_config/selfsigned/" >/dev/null
restart controller
TLS_SERVICE_NAME=self-per-ksvc EXTERNAL_DOMAIN_TLS_TEST_NAME=SelfSignedPerKsvc \
  suite externaldomaintls external-domain-tls-selfsigned

# 4. external-domain-tls with HTTP-01 against the stack's ACME server
kubectl delete kcert --all -n "$TLS_NS" >/dev/null 2>&1 || true
# A new ACME account each run: pebble keeps its accounts in memory, so the
# key of an account a pebble restart forgot would only earn
# accountDoesNotExist (and cert-manager's hour of back-off)
kubectl delete clusterissuer http01-issuer --ignore-not-found >/dev/null
kubectl -n cert-manager delete secret http01-key --ignore-not-found >/dev/null
render "$REPO/hack/manifests/acme-http01-issuer.yaml" ACME_DIRECTORY="$ACME_DIRECTORY" \
  ACME_CA_BUNDLE="$(base64 -w0 "$ACME_CA_BUNDLE")" | kubectl apply -f - >/dev/null
kubectl apply -f "$certmanager_config/http01/config-certmanager.yaml" >/dev/null
retry 60 issuer_ready http01-issuer || die "the ClusterIssuer http01-issuer did not register with $ACME_DIRECTORY"
EXTERNAL_DOMAIN_TLS_TEST_NAME=http01 suite externaldomaintls external-domain-tls-http01 -test.run '^TestTLS$'
# and a renewal of such a certificate under HTTPS load on a redirected host
ours external-domain-tls-http01-renewal TestServingCertificateRenewal

if ((${#failed[@]})); then
  echo "Serving's encryption suites failed: ${failed[*]}" >&2
  exit 1
fi
