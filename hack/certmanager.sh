#!/usr/bin/env bash
# cert-manager v1.21.2 and an ACME server on the local stack, for Knative's
# encryption (system-internal-tls, cluster-local-domain-tls, external-domain-tls
# with HTTP-01).
#
#   hack/certmanager.sh up     build them (hack/build-deps.sh --certmanager),
#                              apply cert-manager's CRDs, start the ACME server
#                              and cert-manager's controllers (the stack must be up)
#   hack/certmanager.sh down   stop them, remove cert-manager's CRDs (and with
#                              them every Certificate, Issuer and Challenge) and
#                              its namespace
#   hack/certmanager.sh env    exports for tests: ACME_DIRECTORY (pebble's
#                              directory URL) and ACME_CA_BUNDLE (the PEM file
#                              its HTTPS listener is signed by)
#
# What runs, and from where (every binary built from hack/tools/certmanager):
# - cert-manager: its controllers (pkg/controller, every controller a
#   self-signed, CA or ACME issuer needs) as the stack component cert-manager,
#   a host process with the stack's kubeconfig; ClusterIssuers' Secrets live
#   in the namespace cert-manager, as in cert-manager's own install. Its
#   HTTP-01 solver pods run the image $CERTMANAGER_IMAGE_REPO/acmesolver,
#   which the node agent maps to cert-manager's solver (pkg/issuer/acme/http/solver).
#   Its CRDs are deploy/crds of the same module. No webhook: the stack runs
#   none of cert-manager's validation.
# - pebble (letsencrypt's ACME test server) on 127.0.0.1:14000 over HTTPS with
#   a CA of its own made here, validating HTTP-01 on port 80 of whatever its DNS
#   server answers; pebble-challtestsrv as that DNS server on 127.0.0.1:8053,
#   answering every A query with the external Envoy fleet's address ($LB_IP),
#   as a wildcard DNS record for the ingress does. cert-manager's HTTP-01
#   self-check resolves with the same server.
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=hack/lib/stack-common.sh
source "$REPO/hack/lib/stack-common.sh"
CM_BIN=$BIN/certmanager
CM_MOD=$REPO/hack/tools/certmanager
CM_NS=cert-manager
PEBBLE_DIR=$STACK/pebble
PEBBLE_ADDR=127.0.0.1:14000
DNS_ADDR=127.0.0.1:8053

module_dir() { (cd "$CM_MOD" && go list -m -f '{{.Dir}}' "$1"); }

# pebble_certs: a CA and pebble's serving certificate for 127.0.0.1, made
# once per stack directory (cert-manager's ACME issuers trust the CA through
# their caBundle)
pebble_certs() {
  mkdir -p "$PEBBLE_DIR"
  [[ -s $PEBBLE_DIR/ca.pem && -s $PEBBLE_DIR/cert.pem && -s $PEBBLE_DIR/key.pem ]] && return 0
  (
    cd "$PEBBLE_DIR"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
      -subj "/CN=hitless stack ACME CA" -keyout ca.key -out ca.pem 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
      -subj "/CN=pebble" -keyout key.pem -out cert.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >ext.cnf
    openssl x509 -req -in cert.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile ext.cnf -out cert.pem 2>/dev/null
    rm -f cert.csr ext.cnf
  )
  log "pebble: CA and serving certificate written to $PEBBLE_DIR"
}

# pebble_config: pebble's settings; HTTP-01 is validated on port 80, where
# Envoy listens, and certificates live 3 minutes, so cert-manager renews each
# 2 minutes after its issue (at two thirds of its life, its default): renewals
# happen during the tests, as they would over months on a cluster, and
# TestServingCertificateRenewal waits for one
pebble_config() {
  cat >"$PEBBLE_DIR/pebble.json" <<EOF
{
  "pebble": {
    "listenAddress": "$PEBBLE_ADDR",
    "managementListenAddress": "127.0.0.1:15000",
    "certificate": "$PEBBLE_DIR/cert.pem",
    "privateKey": "$PEBBLE_DIR/key.pem",
    "httpPort": 80,
    "tlsPort": 443,
    "ocspResponderURL": "",
    "externalAccountBindingRequired": false,
    "retryAfter": {"authz": 1, "order": 1},
    "keyAlgorithm": "ecdsa",
    "profiles": {"default": {"description": "3 minutes", "validityPeriod": 180}}
  }
}
EOF
}

acme_up() {
  pebble_certs
  pebble_config
  restart_stale pebble-challtestsrv pebble
  alive pebble-challtestsrv || start pebble-challtestsrv "$CM_BIN/pebble-challtestsrv" \
    -dnsserver "$DNS_ADDR" -defaultIPv4 "$LB_IP" -defaultIPv6 "" \
    -http01 "" -https01 "" -tlsalpn01 "" -doh "" -management 127.0.0.1:8055
  # No random sleeps before a validation and no random nonce rejections: the
  # stack's tests time what the ingress does, not pebble's chaos. No reuse of
  # an earlier authorization: every order, a renewal's too, is validated
  # through the ingress again.
  alive pebble || PEBBLE_VA_NOSLEEP=1 PEBBLE_WFE_NONCEREJECT=0 PEBBLE_AUTHZREUSE=0 start pebble "$CM_BIN/pebble" \
    -config "$PEBBLE_DIR/pebble.json" -dnsserver "$DNS_ADDR"
  retry 20 curl -fsS --cacert "$PEBBLE_DIR/ca.pem" "https://$PEBBLE_ADDR/dir" ||
    die "pebble does not serve https://$PEBBLE_ADDR/dir; see $LOGS/pebble.log"
}

crds_up() {
  local dir
  dir=$(module_dir github.com/cert-manager/cert-manager)/deploy/crds
  [[ -d $dir ]] || die "cert-manager's CRDs are not at $dir"
  kubectl apply --server-side --force-conflicts -f "$dir" >/dev/null
  kubectl wait --for=condition=Established --timeout=60s \
    crd/certificates.cert-manager.io crd/certificaterequests.cert-manager.io crd/issuers.cert-manager.io \
    crd/clusterissuers.cert-manager.io crd/orders.acme.cert-manager.io crd/challenges.acme.cert-manager.io >/dev/null
  kubectl get namespace "$CM_NS" >/dev/null 2>&1 || kubectl create namespace "$CM_NS" >/dev/null
}

cmd_up() {
  "$REPO/hack/build-deps.sh" --no-apt --certmanager
  apiserver_ready || die "the stack is not up (make stack-up)"
  crds_up
  "$REPO/hack/stack.sh" add-image "$CERTMANAGER_IMAGE_REPO/acmesolver" "$CM_BIN/images/acmesolver"
  acme_up
  restart_stale cert-manager
  if ! alive cert-manager; then
    start cert-manager "$CM_BIN/controller" --kubeconfig "$KCFG" --cluster-resource-namespace "$CM_NS" \
      --acme-http01-solver-image "$CERTMANAGER_IMAGE_REPO/acmesolver" \
      --acme-http01-solver-nameservers "$DNS_ADDR"
    retry 60 grep -q 'starting controllers' "$LOGS/cert-manager.log" ||
      die "cert-manager did not start its controllers; see $LOGS/cert-manager.log"
  fi
  log "cert-manager up in $(elapsed)s; ACME directory https://$PEBBLE_ADDR/dir"
}

cmd_down() {
  stop cert-manager pebble pebble-challtestsrv
  if apiserver_ready; then
    local dir
    dir=$(module_dir github.com/cert-manager/cert-manager)/deploy/crds
    kubectl delete --ignore-not-found --wait=false -f "$dir" >/dev/null 2>&1 || true
    kubectl delete namespace "$CM_NS" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  fi
  log "cert-manager down"
}

cmd_env() {
  echo "export ACME_DIRECTORY=https://$PEBBLE_ADDR/dir"
  echo "export ACME_CA_BUNDLE=$PEBBLE_DIR/ca.pem"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  env) cmd_env ;;
  *) echo "usage: $0 up | down | env" >&2; exit 2 ;;
esac
