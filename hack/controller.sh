#!/usr/bin/env bash
# Runs the hitless controller as a process on the local stack (the stack has
# no image registry, so the Deployment in config/ is not used here; the RBAC
# and config-contour are).
#   hack/controller.sh start [N]   build, install config, start replica N (default 1); idempotent
#   hack/controller.sh stop [N]    stop replica N (SIGTERM: it hands its lease over at once)
#   hack/controller.sh kill [N]    SIGKILL replica N (fault tests: its lease must expire)
#   hack/controller.sh leader      print the number of the replica that holds the lease
#
# Replicas elect a leader through the Lease of config-leader-election; each
# process has a unique identity (hostname_uuid), logged at start. Replica 1
# is the one `make run` and the tests use; replica N > 1 keeps its pid and
# log in controller-N.pid and logs/controller-N.log, and its profiling server
# on port 8007+N. Processes on one machine share a network namespace, unlike
# pods: knative.dev/pkg's health-probe server (fixed port 8080) and the
# metrics endpoint of config-observability bind only in the first replica
# started; the other replicas run without them (nothing here reads them but
# the benchmarks, which use replica 1).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
state=${HITLESS_STACK_DIR:-$repo/.stack}
ns=knative-serving
lease=hitless-controller.github.com.hitless.hitless.pkg.reconciler.contour.reconciler.00-of-01

replica=1 pidfile='' log=''
set_replica() {
  replica=${1:-1}
  [[ $replica =~ ^[1-9][0-9]*$ ]] || { echo "replica must be a positive number, not $replica" >&2; exit 2; }
  pidfile=$state/controller.pid log=$state/logs/controller.log
  if ((replica > 1)); then
    pidfile=$state/controller-$replica.pid log=$state/logs/controller-$replica.log
  fi
}

running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

kubectl() { "${HITLESS_CACHE:-$HOME/.cache/hitless}/bin/kubectl" "$@"; }

start() {
  eval "$("$repo/hack/stack.sh" env)"
  export KUBECONFIG
  mkdir -p "$state/bin" "$state/logs"
  (cd "$repo" && go build -o "$state/bin/controller" ./cmd/controller)
  kubectl get namespace "$ns" >/dev/null 2>&1 || kubectl create namespace "$ns" >/dev/null
  kubectl apply -f "$repo/config/config-contour.yaml" -f "$repo/config/config-leader-election.yaml" >/dev/null
  kubectl apply -f "$repo/third_party/knative-networking/config-network.yaml" >/dev/null
  # Metrics as Prometheus on loopback, for the benchmarks to read.
  kubectl create configmap config-observability -n "$ns" \
    --from-literal=metrics-protocol=prometheus --from-literal=metrics-endpoint=127.0.0.1:9091 \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null
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
  # GOGC as config/500-controller.yaml sets it (say why there).
  SYSTEM_NAMESPACE=$ns PROBE_MAX_RETRY_DELAY_SECONDS=1 PROFILING_PORT=$((8007 + replica)) GOGC=${GOGC:-50} \
    nohup "$state/bin/controller" --kubeconfig "$KUBECONFIG" >>"$log" 2>&1 &
  echo $! >"$pidfile"
  for _ in $(seq 1 100); do
    if tail -c +"$((offset + 1))" "$log" 2>/dev/null | grep "Starting controllers\|Starting Reconciler\|Started workers" >/dev/null; then
      echo "controller replica $replica running (pid $(cat "$pidfile")), log: $log"; return 0
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

# leader prints the replica whose identity holds the lease: the identity each
# replica logged when it last started ("... with id \"<identity>\"").
leader() {
  eval "$("$repo/hack/stack.sh" env)"
  export KUBECONFIG
  local holder f id n
  holder=$(kubectl get lease "$lease" -n "$ns" -o jsonpath='{.spec.holderIdentity}')
  [[ -n $holder ]] || { echo "lease $ns/$lease has no holder" >&2; exit 1; }
  for f in "$state"/controller*.pid; do
    [[ -f $f ]] || continue
    n=$(basename "$f" .pid); n=${n#controller}; n=${n#-}; n=${n:-1}
    set_replica "$n"
    running || continue
    id=$(grep -o 'leader-elected mode with id \\"[^\\]*' "$log" | tail -1 | sed 's/.*id \\"//')
    if [[ $id == "$holder" ]]; then echo "$n"; return 0; fi
  done
  echo "lease holder $holder is none of the running replicas" >&2; exit 1
}

case "${1:-}" in
  start) set_replica "${2:-}"; start ;;
  stop) set_replica "${2:-}"; stop ;;
  kill) set_replica "${2:-}"; kill_now ;;
  leader) set_replica; leader ;;
  *) echo "usage: $0 start|stop|kill [REPLICA] | leader" >&2; exit 2 ;;
esac
