#!/usr/bin/env bash
# `make test-serving`: Knative Serving v0.50.0 on the local stack with hitless
# as its ingress, then
#   1. Serving's own API conformance suite (knative.dev/serving/test/conformance/api/v1),
#      run unmodified from the binary hack/build-deps.sh --serving compiles;
#   2. our Serving-level rollout test (test/serving): 20 Revisions under load,
#      a tagged split, scale to zero and back through the activator.
# It brings up what was not up (stack, controller, Serving) and takes down
# what it brought up, whatever the outcome.
#
# Knobs: SERVING_PARALLEL (conformance -test.parallel, default 4),
# SERVING_RUN (a -run filter for the conformance suite), ROLLOUT_UPDATES.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
kubectl=${HITLESS_CACHE:-$HOME/.cache/hitless}/bin/kubectl
logs=${HITLESS_STACK_DIR:-$repo/.stack}/logs

stack_was_up=false
if hack/stack.sh status >/dev/null 2>&1; then stack_was_up=true; fi
serving_was_up=false
if [ "$stack_was_up" = true ] && "$kubectl" --kubeconfig "${HITLESS_STACK_DIR:-$repo/.stack}/kubeconfig" \
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
eval "$(hack/serving.sh env)"
export KUBECONFIG SYSTEM_NAMESPACE GATEWAY_OVERRIDE GATEWAY_NAMESPACE_OVERRIDE KO_DOCKER_REPO SERVING_DOMAIN
# As Serving's own e2e runs (test/config/ytt/core/overlay-config-deployment.yaml):
# a Revision whose pods never become available fails after 120 s rather than
# 600 s, which TestContainerExitingMsg waits for (a crash alone changes no
# Deployment status, so nothing else re-reconciles the Revision).
"$kubectl" -n "$SYSTEM_NAMESPACE" patch configmap config-deployment --type=merge \
  -p '{"data":{"progress-deadline":"120s"}}' >/dev/null
for ns in serving-tests serving-tests-alt; do
  "$kubectl" get namespace "$ns" >/dev/null 2>&1 || "$kubectl" create namespace "$ns" >/dev/null
done

echo "--- Knative Serving API conformance (knative.dev/serving/test/conformance/api/v1@v0.50.0)"
mkdir -p "$logs"
conf_log=$logs/serving-conformance.log
# -enable-beta: the two tests gated on it (several containers, emptyDir) are
# features the stack supports, so they run rather than skip.
# -disable-logstream: the suite would otherwise tail Serving's pods into each
# test's output; those logs are in .stack/logs/pods/ anyway.
conf_rc=0
(cd "$(dirname "$SERVING_CONFORMANCE_TEST")" &&
  "$SERVING_CONFORMANCE_TEST" -test.v -test.timeout 30m -test.parallel "${SERVING_PARALLEL:-4}" \
    ${SERVING_RUN:+-test.run "$SERVING_RUN"} \
    -ingress-class contour.ingress.networking.knative.dev -enable-beta -disable-logstream) >"$conf_log" 2>&1 || conf_rc=$?
# one line per top-level test, then the totals
grep -E '^--- (PASS|FAIL|SKIP)' "$conf_log" | sort -k3 || true
printf 'serving-conformance: passed=%d failed=%d skipped=%d (full log: %s)\n' \
  "$(grep -c '^--- PASS' "$conf_log" || true)" "$(grep -c '^--- FAIL' "$conf_log" || true)" \
  "$(grep -c '^--- SKIP' "$conf_log" || true)" "$conf_log"

echo "--- Serving rollout under load (test/serving)"
rollout_rc=0
go test -count=1 -tags=e2e -timeout 30m -v ./test/serving/... || rollout_rc=$?

if [ "$conf_rc" != 0 ]; then
  echo "Serving conformance failed (exit $conf_rc); failures:" >&2
  grep -E -B30 '^--- FAIL' "$conf_log" | grep -E '^\s+\S+\.go:[0-9]+:' | cut -c1-300 | tail -40 >&2 || true
fi
[ "$conf_rc" = 0 ] && [ "$rollout_rc" = 0 ]
