#!/usr/bin/env bash
# Runs the hitless controller as a process on the local stack (the stack has
# no image registry, so the Deployment in config/ is not used here; the RBAC
# and config-contour are).
#   hack/controller.sh build       compile the controller into .stack/bin (start does it too)
#   hack/controller.sh start [N]   build, install config, start replica N (default 1); idempotent
#   hack/controller.sh stop [N]    stop replica N (SIGTERM: it hands its leases over at once)
#   hack/controller.sh kill [N]    SIGKILL replica N (fault tests: its leases must expire)
#   hack/controller.sh replicas N  run replicas 1..N (started at once), stop any above N
#   hack/controller.sh leaders     print each bucket's Lease and the replica that holds it
#   hack/controller.sh identity [N]  print the leader-election identity of replica N
#
# Replicas share the KIngresses through knative.dev/pkg's bucketed leader
# election (config-leader-election-hitless: buckets): each bucket is a Lease, each
# replica leads the buckets it won and reconciles (and probes) only the
# KIngresses that hash into them. Each process has a unique identity
# (hostname_uuid), logged at start. Replica 1 is the one `make run` and the
# tests use; replica N > 1 keeps its pid and log in controller-N.pid and
# logs/controller-N.log. Processes on one machine share a network namespace,
# unlike pods, so each replica gets ports of its own: Prometheus metrics on
# 127.0.0.1:9090+N (METRICS_PROMETHEUS_PORT overrides config-observability's
# port), profiling on 8007+N. knative.dev/pkg's health-probe server has a
# fixed port (8080) and binds only in the first replica started; the others
# run without it (nothing here reads it).
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"
repo=$REPO
state=$STACK
ns=knative-serving
# every bucket's Lease is named <component>.<queue>.NN-of-MM
lease_prefix=hitless-controller.github.com.hitless.hitless.pkg.reconciler.contour.reconciler.

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

# CONTROLLER_BIN=path runs that binary instead of building this tree's (a
# benchmark of an older commit's controller on the same stack).
build() {
  mkdir -p "$state/bin"
  if [[ -n ${CONTROLLER_BIN:-} ]]; then
    cp "$CONTROLLER_BIN" "$state/bin/controller.new" && mv "$state/bin/controller.new" "$state/bin/controller"
    return
  fi
  (cd "$repo" && go build -o "$state/bin/controller" ./cmd/controller)
}

# replica_of PIDFILE: the replica number a pid file belongs to
# (controller.pid is 1, controller-N.pid is N)
replica_of() {
  local n
  n=$(basename "$1" .pid); n=${n#controller}; n=${n#-}
  echo "${n:-1}"
}

prepare() {
  eval "$("$repo/hack/stack.sh" env)"
  export KUBECONFIG
  mkdir -p "$state/logs"
  build
  kubectl get namespace "$ns" >/dev/null 2>&1 || kubectl create namespace "$ns" >/dev/null
  kubectl apply -f "$repo/config/config-contour.yaml" -f "$repo/config/config-leader-election-hitless.yaml" \
    -f "$repo/config/300-routing-ca-delegation.yaml" >/dev/null
  kubectl apply -f "$repo/third_party/knative-networking/config-network.yaml" >/dev/null
  # Metrics as Prometheus on loopback, for the benchmarks to read.
  kubectl create configmap config-observability -n "$ns" \
    --from-literal=metrics-protocol=prometheus --from-literal=metrics-endpoint=127.0.0.1:9091 \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null
}

# start_process starts the replica's process (replacing a running one) and
# leaves in OFFSET where this start's lines begin in its log.
OFFSET=0
start_process() {
  if running; then
    # A new binary replaces the old process; rollouts resume from the objects.
    kill "$(cat "$pidfile")"; sleep 1
  fi
  OFFSET=0
  [ -f "$log" ] && OFFSET=$(stat -c %s "$log")
  # The prober's settings are its defaults (pkg/probe; PROBE_* variables
  # override them). GOGC as config/500-controller.yaml sets it (say why there).
  SYSTEM_NAMESPACE=$ns GOGC=${GOGC:-50} \
    PROFILING_PORT=$((8007 + replica)) METRICS_PROMETHEUS_PORT=$((9090 + replica)) \
    nohup "$state/bin/controller" --kubeconfig "$KUBECONFIG" >>"$log" 2>&1 &
  echo $! >"$pidfile"
}

# wait_started OFFSET: until the replica's log, past OFFSET, says it started
wait_started() {
  local offset=$1
  for _ in $(seq 1 100); do
    if tail -c +"$((offset + 1))" "$log" 2>/dev/null | grep "Starting controllers\|Starting Reconciler\|Started workers" >/dev/null; then
      echo "controller replica $replica running (pid $(cat "$pidfile")), log: $log"; return 0
    fi
    running || { echo "controller exited; last lines of $log:" >&2; tail -20 "$log" >&2; exit 1; }
    sleep 0.2
  done
  echo "controller did not report start within 20s; see $log" >&2; exit 1
}

start() {
  prepare
  start_process
  wait_started "$OFFSET"
}

# replicas N: one build, then replicas 1..N started at the same moment (the
# way a Deployment's pods start), each competing for the buckets' Leases
# from the start; replicas above N are stopped. The race decides who leads
# what: often one replica wins every bucket (docs/architecture.md).
replicas() {
  local n=${1:?usage: replicas N} i f offsets=()
  [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "replicas: N must be a positive number, not $n" >&2; exit 2; }
  prepare
  # Every running replica stops first (handing its Leases over), so that
  # none starts out already holding buckets.
  for f in "$state"/controller*.pid; do
    [[ -f $f ]] || continue
    set_replica "$(replica_of "$f")"
    stop
  done
  sleep 1
  for i in $(seq 1 "$n"); do
    set_replica "$i"
    start_process
    offsets[i]=$OFFSET
  done
  for i in $(seq 1 "$n"); do
    set_replica "$i"
    wait_started "${offsets[i]}"
  done
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

# identity prints the leader-election identity replica N logged when it last
# started ("... will run in leader-elected mode with id \"<identity>\"").
identity() {
  [[ -f $log ]] || { echo "replica $replica has no log $log" >&2; exit 1; }
  grep -o 'leader-elected mode with id \\"[^\\]*' "$log" | tail -1 | sed 's/.*id \\"//'
}

# leaders prints one line per bucket Lease: its name and the number of the
# running replica that holds it ("-" when none does: expired, or held by a
# process this script did not start).
leaders() {
  eval "$("$repo/hack/stack.sh" env)"
  export KUBECONFIG
  local -A replica_of=()
  local f n id lease holder
  for f in "$state"/controller*.pid; do
    [[ -f $f ]] || continue
    n=$(replica_of "$f")
    set_replica "$n"
    running || continue
    id=$(identity) || continue
    [[ -n $id ]] && replica_of[$id]=$n
  done
  local buckets
  buckets=$(kubectl get configmap config-leader-election-hitless -n "$ns" -o jsonpath='{.data.buckets}')
  buckets=$(printf '%02d' "${buckets:-1}")
  kubectl get lease -n "$ns" -o jsonpath='{range .items[*]}{.metadata.name} {.spec.holderIdentity}{"\n"}{end}' |
    while read -r lease holder; do
      # Leases of an earlier bucket count stay behind; only today's count.
      [[ $lease == "$lease_prefix"*"-of-$buckets" ]] || continue
      echo "$lease ${replica_of[${holder:-none}]:--}"
    done
}

case "${1:-}" in
  build) build ;;
  start) set_replica "${2:-}"; start ;;
  stop) set_replica "${2:-}"; stop ;;
  kill) set_replica "${2:-}"; kill_now ;;
  replicas) replicas "${2:-}" ;;
  leaders) leaders ;;
  identity) set_replica "${2:-}"; identity ;;
  *) echo "usage: $0 build | start|stop|kill|identity [REPLICA] | replicas N | leaders" >&2; exit 2 ;;
esac
