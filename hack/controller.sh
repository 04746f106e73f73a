#!/usr/bin/env bash
# Runs the hitless controller as a process on the local stack (the stack has
# no image registry, so the Deployment in config/ is not used here; the RBAC
# and config-contour are).
#   hack/controller.sh start   build, install config, start; idempotent
#   hack/controller.sh stop    stop it
#   hack/controller.sh kill    SIGKILL it (fault tests)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
state=${HITLESS_STACK_DIR:-$repo/.stack}
pidfile=$state/controller.pid
log=$state/logs/controller.log
ns=knative-serving

running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

start() {
  eval "$("$repo/hack/stack.sh" env)"
  local kubectl=${HITLESS_CACHE:-$HOME/.cache/hitless}/bin/kubectl
  mkdir -p "$state/bin" "$state/logs"
  (cd "$repo" && go build -o "$state/bin/controller" ./cmd/controller)
  "$kubectl" get namespace "$ns" >/dev/null 2>&1 || "$kubectl" create namespace "$ns" >/dev/null
  "$kubectl" apply -f "$repo/config/config-contour.yaml" -f "$repo/config/config-leader-election.yaml" >/dev/null
  "$kubectl" apply -f "$repo/third_party/knative-networking/config-network.yaml" >/dev/null
  # Metrics as Prometheus on loopback, for the benchmarks to read.
  "$kubectl" create configmap config-observability -n "$ns" \
    --from-literal=metrics-protocol=prometheus --from-literal=metrics-endpoint=127.0.0.1:9091 \
    --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
  if running; then
    # A new binary replaces the old process; rollouts resume from the objects.
    kill "$(cat "$pidfile")"; sleep 1
  fi
  # Only this start's lines count when waiting for it below.
  local offset=0
  [ -f "$log" ] && offset=$(stat -c %s "$log")
  # PROBE_MAX_RETRY_DELAY_SECONDS caps the networking prober's exponential
  # back-off (default 30s): a route Contour programs a second late must not
  # cost the rollout 30 more. Set the same in config/500-controller.yaml.
  SYSTEM_NAMESPACE=$ns KUBECONFIG=$KUBECONFIG PROBE_MAX_RETRY_DELAY_SECONDS=1 \
    nohup "$state/bin/controller" --kubeconfig "$KUBECONFIG" >>"$log" 2>&1 &
  echo $! >"$pidfile"
  for _ in $(seq 1 100); do
    if tail -c +"$((offset + 1))" "$log" 2>/dev/null | grep "Starting controllers\|Starting Reconciler\|Started workers" >/dev/null; then
      echo "controller running (pid $(cat "$pidfile")), log: $log"; return 0
    fi
    running || { echo "controller exited; last lines of $log:" >&2; tail -20 "$log" >&2; exit 1; }
    sleep 0.2
  done
  echo "controller did not report start within 20s; see $log" >&2; exit 1
}

# kill ends the controller with SIGKILL, as a node failure or an OOM would;
# the fault tests use it.
kill_now() {
  if running; then kill -KILL "$(cat "$pidfile")"; fi
  rm -f "$pidfile"
}

stop() {
  if running; then kill "$(cat "$pidfile")"; fi
  rm -f "$pidfile"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  kill) kill_now ;;
  *) echo "usage: $0 start|stop|kill" >&2; exit 2 ;;
esac
