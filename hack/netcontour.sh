#!/usr/bin/env bash
# Runs net-contour, the peer controller, as a process on the local stack, the
# way hack/controller.sh runs hitless: the migration tests hand KIngresses
# over between the two and the benchmarks measure them side by side.
#   hack/netcontour.sh available  exit 0 when its source tarball is there (hack/build-deps.sh --net-contour)
#   hack/netcontour.sh build      build it into the cache (once per tarball and Go version)
#   hack/netcontour.sh start      build, start it; idempotent
#   hack/netcontour.sh stop       stop it (SIGTERM: it releases its leases)
#   hack/netcontour.sh status     running or not
#
# It reads the same config-contour, config-network and ingress class as
# hitless, so the two must not run at once: each would rewrite the other's
# HTTPProxies. Its leader election is Serving's config-leader-election (hitless
# has its own), its Leases are its own. Its ports are moved off hitless's
# (metrics 127.0.0.1:9190, profiling 8107); knative.dev/pkg's health-probe
# server is on :8080 as in hitless's first replica, one more reason they run
# one at a time. Its log: .stack/logs/net-contour.log.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
state=${HITLESS_STACK_DIR:-$repo/.stack}
cache=${HITLESS_CACHE:-$HOME/.cache/hitless}
bin=$cache/bin/net-contour
pidfile=$state/net-contour.pid
log=$state/logs/net-contour.log
tarball=${NET_CONTOUR_TARBALL:-$repo/../shared/peers/net-contour-c48dabab.tar.gz}

running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }
kubectl() { "$cache/bin/kubectl" "$@"; }

build() { NET_CONTOUR_TARBALL=$tarball "$repo/hack/build-deps.sh" --net-contour; }

start() {
  build
  eval "$("$repo/hack/stack.sh" env)"
  export KUBECONFIG
  mkdir -p "$state/logs"
  kubectl get namespace knative-serving >/dev/null 2>&1 || kubectl create namespace knative-serving >/dev/null
  # the same config hitless's controller.sh installs (config-contour,
  # config-network); net-contour needs nothing else of it
  kubectl apply -f "$repo/config/config-contour.yaml" >/dev/null
  kubectl apply -f "$repo/third_party/knative-networking/config-network.yaml" >/dev/null
  if running; then
    echo "net-contour running (pid $(cat "$pidfile")), log: $log"; return 0
  fi
  local offset=0
  [ -f "$log" ] && offset=$(stat -c %s "$log")
  SYSTEM_NAMESPACE=knative-serving METRICS_PROMETHEUS_HOST=127.0.0.1 METRICS_PROMETHEUS_PORT=9190 \
    PROFILING_PORT=8107 nohup "$bin" --kubeconfig "$KUBECONFIG" >>"$log" 2>&1 &
  echo $! >"$pidfile"
  for _ in $(seq 1 100); do
    if tail -c +"$((offset + 1))" "$log" 2>/dev/null | grep "Starting controllers\|Starting Reconciler\|Started workers" >/dev/null; then
      echo "net-contour running (pid $(cat "$pidfile")), log: $log"; return 0
    fi
    running || { echo "net-contour exited; last lines of $log:" >&2; tail -20 "$log" >&2; exit 1; }
    sleep 0.2
  done
  echo "net-contour did not report start within 20s; see $log" >&2; exit 1
}

stop() {
  if running; then
    local pid
    pid=$(cat "$pidfile")
    kill "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    echo "net-contour stopped"
  fi
  rm -f "$pidfile"
}

case ${1:-} in
  available)
    [ -f "$tarball" ] || { echo "net-contour's source is not at $tarball (NET_CONTOUR_TARBALL)" >&2; exit 1; } ;;
  build) build ;;
  start) start ;;
  stop) stop ;;
  status) if running; then echo "net-contour running (pid $(cat "$pidfile"))"; else echo "net-contour stopped"; exit 1; fi ;;
  *) echo "usage: hack/netcontour.sh available|build|start|stop|status" >&2; exit 2 ;;
esac
