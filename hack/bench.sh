#!/usr/bin/env bash
# Runs a benchmark on the local stack: brings the stack up if it is not
# (and down again afterwards), (re)starts the controller, runs the
# benchmark command with the given flags.
#   hack/bench.sh rollout [flags]   -> go run ./test/bench/rollout
#   hack/bench.sh scale [flags]     -> go run ./test/bench/scale
# REPLICAS=N runs N controller replicas (hack/controller.sh replicas N)
# sharing the buckets of config-leader-election-hitless; by default one.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"
repo=$REPO
cd "$repo"
which=${1:?usage: hack/bench.sh rollout|scale [flags]}; shift

stack_was_up=false
if hack/stack.sh status >/dev/null 2>&1; then stack_was_up=true; fi
cleanup() {
  # back to the one replica every other command expects
  if [ "${REPLICAS:-1}" -gt 1 ]; then hack/controller.sh replicas 1 >&2 || true; fi
  if [ "$stack_was_up" = false ] && [ -z "${KEEP_STACK:-}" ]; then
    hack/controller.sh stop || true
    hack/stack.sh down || true
  fi
}
trap cleanup EXIT
hack/stack.sh up >&2
if [ "${REPLICAS:-1}" -gt 1 ]; then
  hack/controller.sh replicas "$REPLICAS" >&2
else
  hack/controller.sh start >&2
fi
eval "$(hack/stack.sh env)"
export KUBECONFIG INGRESS_ADDRESS
go build -o "$repo/.stack/bin/bench-$which" "./test/bench/$which"
"$repo/.stack/bin/bench-$which" "$@"
if [ "${REPLICAS:-1}" -gt 1 ]; then
  # who led what: the split of the buckets is the engine's, not ours
  echo "buckets led (count, replica): $(hack/controller.sh leaders | awk '{print $2}' | sort | uniq -c | xargs)"
fi
