#!/usr/bin/env bash
# The layers of `make test` that need the local stack: brings it up (or
# reuses a running one), runs the controller on it, runs the integration
# tests, Knative's ingress conformance suite and the release check (and, with --with-serving,
# hack/test-serving.sh --all: Serving's conformance and e2e suites and our
# Serving-level tests), and stops everything it started, whatever the outcome.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"
repo=$REPO
cd "$repo"

stack_was_up=false
if hack/stack.sh status >/dev/null 2>&1; then stack_was_up=true; fi

# Each step's output is kept too, so that a failure is summed up as the very
# last lines printed (after the stack's shutdown lines): CI shows only the
# tail of a run.
out=$(mktemp -d)
step="bringing up the stack"
# failures FILE...: what a failed step said of itself: each failing test with
# the lines just before it (a sequential test's own t.Fatal), panics, the
# conformance table's FAIL rows.
failures() {
  grep -h -B6 -E -e '^\s*--- FAIL' -e 'panic:' -e ' (FAIL|NOT RUN)( |$)' -e 'iteration [0-9]+ failed' "$@" 2>/dev/null |
    grep -v -E '^(=== (RUN|PAUSE|CONT|NAME)|I[0-9]{4} )' | tail -n 40
}
cleanup() {
  local rc=$?
  set +e # the summary is best effort; nothing in here may end it early
  hack/controller.sh stop || true
  if [ "$rc" -ne 0 ]; then
    failures "$out"/*.log >"$out/summary"
    # the conformance suite's own logs: the newest run's iterations
    local conf
    conf=$(ls -1dt .stack/logs/conformance/*/ 2>/dev/null | head -n 1)
    if [ "$step" = "Knative's ingress conformance suite" ] && [ -n "$conf" ]; then
      failures "$conf"iteration-*.log >>"$out/summary"
    fi
  fi
  if [ "$stack_was_up" = false ] && [ -z "${KEEP_STACK:-}" ]; then hack/stack.sh down || true; fi
  if [ "$rc" -ne 0 ]; then
    echo "=== make test failed (exit $rc) in: $step"
    cat "$out/summary"
  fi
  rm -rf "$out"
}
trap cleanup EXIT

hack/stack.sh up
hack/controller.sh start
eval "$(hack/stack.sh env)"
export KUBECONFIG INGRESS_ADDRESS
# run NAME CMD...: one step, its output printed and kept for the summary.
run() {
  step=$1; shift
  echo "--- $step"
  "$@" 2>&1 | tee "$out/$(echo "$step" | tr -c 'a-zA-Z0-9\n' -).log"
}
# E2E_RUN selects tests (make test-faults sets it); by default all run.
run "integration tests on the local stack" \
  go test -count=1 -tags=e2e -timeout 40m -v -run "${E2E_RUN:-.}" ./test/e2e/...
if [ -z "${E2E_RUN:-}" ]; then
  run "Knative's ingress conformance suite" env REUSE_CONTROLLER=1 KEEP_STACK=1 hack/conformance.sh
  run "make release, and its manifests and controller image on the stack" \
    bash -c 'hack/release.sh && hack/release.sh check'
  run "make release from a checkout whose path has capitals and a space" hack/release.sh any-path
fi
if [ "${1:-}" = --with-serving ]; then
  # on the same stack; it removes Serving afterwards, the trap above the rest
  run "Knative Serving on the stack (make test-serving)" hack/test-serving.sh --all
fi
step="stopping"
