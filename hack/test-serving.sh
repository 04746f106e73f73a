#!/usr/bin/env bash
# `make test-serving`: Knative Serving v0.50.0 on the local stack with hitless
# as its ingress, then
#   1. Serving's own API conformance suite (knative.dev/serving/test/conformance/api/v1),
#      run unmodified from the binary hack/build-deps.sh --serving compiles;
#   2. our Serving-level rollout tests (test/serving): 20 Revisions under load,
#      a tagged split, scale to zero and back through the activator; then 10
#      gradual rollouts (rollout-duration 30s: Serving moves the traffic in
#      steps, a KIngress generation each) under load;
#   3. with --e2e (make test-serving-e2e): Serving's e2e suite
#      (knative.dev/serving/test/e2e, unmodified, -tags=e2e), a row per test.
#      With --e2e alone, only the e2e suite runs.
#   4. with --tls (make test-serving-tls): Serving's encryption suites
#      (test/e2e/clusterlocaldomaintls, systeminternaltls, externaldomaintls,
#      unmodified) with cert-manager on the stack (hack/certmanager.sh), each
#      in the configuration Serving's own CI gives it (test/e2e-tests.sh,
#      test/e2e-external-domain-tls-tests.sh), external-domain-tls twice: with
#      Serving's self-signed issuer and with HTTP-01 against the stack's ACME
#      server. With --tls alone, only these run.
# It brings up what was not up (stack, controller, Serving) and takes down
# what it brought up, whatever the outcome.
#
# Knobs: SERVING_PARALLEL (-test.parallel of Serving's suites, default 4),
# SERVING_RUN (a -run filter for the conformance suite), SERVING_E2E_RUN and
# SERVING_E2E_SKIP (-run and -skip for the e2e suite; empty SERVING_E2E_SKIP
# runs every test), ROLLOUT_UPDATES, GRADUAL_UPDATES, GRADUAL_DURATION.
set -euo pipefail
suites="conformance rollout"
case "${1:-}" in
  --e2e) suites=e2e ;;
  --tls) suites=tls ;;
  --all) suites="conformance rollout e2e tls" ;;
  "") ;;
  *) echo "usage: hack/test-serving.sh [--e2e | --tls | --all]" >&2; exit 2 ;;
esac
has() { [[ " $suites " == *" $1 "* ]]; }
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"
repo=$REPO
cd "$repo"
logs=$STACK/logs

stack_was_up=false
if hack/stack.sh status >/dev/null 2>&1; then stack_was_up=true; fi
serving_was_up=false
if [ "$stack_was_up" = true ] && kubectl --kubeconfig "$STACK/kubeconfig" \
  get deploy -n knative-serving activator >/dev/null 2>&1; then serving_was_up=true; fi

cleanup() {
  if [ -n "${KEEP_STACK:-}" ]; then return; fi
  if [ "$stack_was_up" = false ]; then
    hack/controller.sh stop || true
    hack/stack.sh down || true
  elif [ "$serving_was_up" = false ]; then
    hack/serving.sh down || true
  fi
}
trap cleanup EXIT

hack/serving.sh up
# hitless's config/ must never replace an object of Serving's
hack/serving.sh apart
eval "$(hack/serving.sh env)"
export KUBECONFIG SYSTEM_NAMESPACE GATEWAY_OVERRIDE GATEWAY_NAMESPACE_OVERRIDE KO_DOCKER_REPO SERVING_DOMAIN
# As Serving's own e2e runs (test/config/ytt/core/overlay-config-deployment.yaml):
# a Revision whose pods never become available fails after 120 s rather than
# 600 s, which TestContainerExitingMsg waits for (a crash alone changes no
# Deployment status, so nothing else re-reconciles the Revision).
kubectl -n "$SYSTEM_NAMESPACE" patch configmap config-deployment --type=merge \
  -p '{"data":{"progress-deadline":"120s"}}' >/dev/null
# What Serving's own e2e set-up applies before its suites (test/e2e-common.sh):
# the test namespaces, the ConfigMap and Secret some tests mount, and the
# ResourceQuota of rq-test that TestResourceQuotaError runs into.
serving_dir=$(cd hack/tools/serving && go list -m -f '{{.Dir}}' knative.dev/serving)
# (kubectl warns about the namespaces an earlier version of this script created)
if ! out=$(kubectl apply -f "$serving_dir/test/config/cluster-resources.yaml" \
  -f "$serving_dir/test/config/test-resources.yaml" -f "$serving_dir/test/config/resource-quota/resource-quota.yaml" 2>&1); then
  echo "$out" >&2
  exit 1
fi

conf_rc=0 rollout_rc=0 e2e_rc=0 tls_rc=0
mkdir -p "$logs"
if has conformance; then
  echo "--- Knative Serving API conformance (knative.dev/serving/test/conformance/api/v1@v0.50.0)"
  conf_log=$logs/serving-conformance.log
  # -enable-beta: the two tests gated on it (several containers, emptyDir) are
  # features the stack supports, so they run rather than skip.
  # -disable-logstream: the suite would otherwise tail Serving's pods into each
  # test's output; those logs are in .stack/logs/pods/ anyway.
  (cd "$(dirname "$SERVING_CONFORMANCE_TEST")" &&
    "$SERVING_CONFORMANCE_TEST" -test.v -test.timeout 30m -test.parallel "${SERVING_PARALLEL:-4}" \
      ${SERVING_RUN:+-test.run "$SERVING_RUN"} \
      -ingress-class contour.ingress.networking.knative.dev -enable-beta -disable-logstream) >"$conf_log" 2>&1 || conf_rc=$?
  # one line per top-level test, then the totals
  grep -E '^--- (PASS|FAIL|SKIP)' "$conf_log" | sort -k3 || true
  printf 'serving-conformance: passed=%d failed=%d skipped=%d (full log: %s)\n' \
    "$(grep -c '^--- PASS' "$conf_log" || true)" "$(grep -c '^--- FAIL' "$conf_log" || true)" \
    "$(grep -c '^--- SKIP' "$conf_log" || true)" "$conf_log"
fi

if has rollout; then
  echo "--- Serving rollout under load (test/serving)"
  go test -count=1 -tags=e2e -timeout 30m -v ./test/serving/... || rollout_rc=$?
fi

if has e2e; then
  echo "--- Knative Serving e2e suite (knative.dev/serving/test/e2e@v0.50.0)"
  # test2json framing, so that the output of four parallel tests is told apart
  # (the table's reasons) while the plain log stays readable
  e2e_log=$logs/serving-e2e.log e2e_json=$logs/serving-e2e.json
  # Tests that need what this machine has not, skipped rather than failed (each
  # with its cause; docs/serving-e2e.md has the whole table):
  # - TestEgressTraffic fetches www.google.com from a pod: no internet here.
  # (The HPA tests are behind the hpa build tag, not built: the stack runs no
  # metrics server and not Serving's HPA class.)
  e2e_skip=${SERVING_E2E_SKIP-^TestEgressTraffic$}
  (cd "$(dirname "$SERVING_E2E_TEST")" &&
    "$SERVING_E2E_TEST" -test.v=test2json -test.timeout 60m -test.parallel "${SERVING_PARALLEL:-4}" \
      ${SERVING_E2E_RUN:+-test.run "$SERVING_E2E_RUN"} ${e2e_skip:+-test.skip "$e2e_skip"} \
      -ingress-class contour.ingress.networking.knative.dev -enable-beta -disable-logstream 2>&1) |
    tee "$e2e_log" | go tool test2json -t -p knative.dev/serving/test/e2e >"$e2e_json" || e2e_rc=$?
  go run ./test/testtable "$e2e_json" || true
  echo "serving-e2e: full log $e2e_log"
fi

if has tls; then
  echo "--- Knative Serving's encryption suites (knative.dev/serving/test/e2e/*tls@v0.50.0) with cert-manager"
  hack/test-serving-tls.sh || tls_rc=$?
fi

if [ "$conf_rc" != 0 ]; then
  echo "Serving conformance failed (exit $conf_rc); failures:" >&2
  grep -E -B30 '^--- FAIL' "$conf_log" | grep -E '^\s+\S+\.go:[0-9]+:' | cut -c1-300 | tail -40 >&2 || true
fi
[ "$conf_rc" = 0 ] && [ "$rollout_rc" = 0 ] && [ "$e2e_rc" = 0 ] && [ "$tls_rc" = 0 ]
