#!/usr/bin/env bash
# The layers of `make test` that need the local stack: brings it up (or
# reuses a running one), runs the controller on it, runs the integration
# tests, Knative's ingress conformance suite and the release check (and, with --with-serving,
# hack/test-serving.sh --all: Serving's conformance and e2e suites and our
# Serving-level tests), and stops everything it started, whatever the outcome.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

stack_was_up=false
if hack/stack.sh status >/dev/null 2>&1; then stack_was_up=true; fi

cleanup() {
  hack/controller.sh stop || true
  if [ "$stack_was_up" = false ] && [ -z "${KEEP_STACK:-}" ]; then hack/stack.sh down || true; fi
}
trap cleanup EXIT

hack/stack.sh up
hack/controller.sh start
eval "$(hack/stack.sh env)"
export KUBECONFIG INGRESS_ADDRESS
echo "--- integration tests on the local stack"
# E2E_RUN selects tests (make test-faults sets it); by default all run.
go test -count=1 -tags=e2e -timeout 40m -v -run "${E2E_RUN:-.}" ./test/e2e/...
if [ -z "${E2E_RUN:-}" ]; then
  echo "--- Knative's ingress conformance suite"
  REUSE_CONTROLLER=1 KEEP_STACK=1 hack/conformance.sh
  echo "--- make release, and its manifests and controller image on the stack"
  hack/release.sh
  hack/release.sh check
  echo "--- make release from a checkout whose path has capitals and a space"
  hack/release.sh any-path
fi
if [ "${1:-}" = --with-serving ]; then
  # on the same stack; it removes Serving afterwards, the trap above the rest
  echo "--- Knative Serving on the stack (make test-serving)"
  hack/test-serving.sh --all
fi
