#!/usr/bin/env bash
# Faults for the fault tests (test/e2e/faults_*_test.go,
# test/e2e/proxyprotocol_test.go) to inject into the local stack that
# hack/stack.sh brings up; each command returns once the stack has settled.
#
#   hack/faults.sh restart NAME [--down S] [--kill]
#                                           stop (--kill: SIGKILL) a component (kube-apiserver, a
#                                           Contour: contour-external[-2],
#                                           contour-internal[-2]), keep it down
#                                           S seconds (default 0), start it and
#                                           wait until it serves (kube-apiserver:
#                                           and every Contour that exited meanwhile)
#   hack/faults.sh scale-envoy FLEET N      scale a fleet's Envoy pods to N and wait
#                                           until exactly N are Ready and serve
#   hack/faults.sh cut-xds IP               drop the xDS traffic between the Envoy
#                                           pod IP and Contour: it keeps serving
#                                           what it has and gets no update
#   hack/faults.sh mend-xds                 undo every cut-xds
#   hack/faults.sh fail-ready IP            make an Envoy pod's readiness probe
#                                           fail while it keeps serving
#   hack/faults.sh mend-ready               undo every fail-ready
#   hack/faults.sh proxy-protocol FLEET on|off
#                                           restart the fleet's Contours with (on) or
#                                           without (off) --use-proxy-protocol and wait
#                                           until every Envoy pod of it serves again
#                                           (on: only to clients that send a PROXY
#                                           protocol header)
#
# `hack/stack.sh up` and `down` undo every fault these leave: the cut-xds and
# fail-ready chains live in the stack's nft table, which both replace or
# remove, and `up` turns every fleet's PROXY protocol off.
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=hack/lib/stack-common.sh
source "$REPO/hack/lib/stack-common.sh"

# restart NAME [--down SECONDS] [--kill]: a component stopped (SIGTERM, as a
# rolling update or a node drain would; with --kill, SIGKILL, as a crash or
# an OOM kill would) and brought back by the same code as `up`, which waits
# until it serves again. Envoy keeps the configuration it has
# while its Contour is away; the API server's clients retry.
cmd_restart() {
  local name=${1:-} down=0 kill=0
  shift || true
  while (($#)); do
    case $1 in
      --kill) kill=1; shift ;;
      --down) down=${2:?--down needs seconds}; shift 2 ;;
      --down=*) down=${1#*=}; shift ;;
      *) die "unknown flag for restart: $1" ;;
    esac
  done
  [[ $down =~ ^[0-9]+$ ]] || die "--down must be a whole number of seconds"
  lock
  alive etcd || die "the stack is not up"
  case $name in
    kube-apiserver)
      # One second to drain, then killed: its open watches would otherwise
      # hold it 15 s in graceful shutdown. An outage, not a handover.
      stop -g 1 kube-apiserver
      sleep "$down"
      control_plane_up
      restart_exited_contours
      ;;
    contour-external | contour-internal | contour-external-2 | contour-internal-2)
      local ip fleet
      fleet=$(fleet_of "$name")
      [[ " $(contours "$fleet" | tr '\n' ' ') " == *" $name "* ]] || die "$name does not run (HITLESS_CONTOUR_REPLICAS=$CONTOUR_REPLICAS)"
      if ((kill)); then stop -k "$name"; else stop "$name"; fi
      sleep "$down"
      contour_up_one "$name"
      # Serving again once its xDS server accepts: Contour opens it only
      # after its informers synced and its first DAG is built.
      retry 60 contour_serving "$name" || die "$name does not serve xDS after its restart; see $LOGS/$name.log"
      retry 60 curl -fsS --max-time 1 "http://127.0.0.1:$(($(port_base "$name") + 1))/healthz" ||
        die "$name is not healthy after its restart; see $LOGS/$name.log"
      for ip in $(envoy_pod_ips "$fleet"); do
        retry 30 probe_envoy "$ip:8080" "$fleet" || die "Envoy pod $ip of $fleet does not serve after $name restarted"
      done
      ;;
    *) die "restart knows kube-apiserver and the Contours ($(for f in "${FLEETS[@]}"; do contours "$f"; done | tr '\n' ' ')), not ${name:-nothing}" ;;
  esac
  log "$name restarted (down ${down}s$( ((kill)) && echo ', killed'))"
}

# restart_exited_contours: a Contour that exited while the API server was
# away is started again and waited for, as the kubelet restarts its
# container. Contour exits when it cannot renew its leader Lease within its
# renew deadline (about 10 s), so an outage longer than that ends the
# leading replica of each fleet; nothing in the local stack would restart
# it otherwise.
restart_exited_contours() {
  local fleet c ip restarted=()
  for fleet in "${FLEETS[@]}"; do
    for c in $(contours "$fleet"); do
      alive "$c" && continue
      log "$c exited while kube-apiserver was down (see $LOGS/$c.log); starting it again"
      contour_up_one "$c"
      retry 60 contour_serving "$c" || die "$c does not serve xDS after its restart; see $LOGS/$c.log"
      restarted+=("$c")
    done
  done
  for c in "${restarted[@]}"; do
    for ip in $(envoy_pod_ips "$(fleet_of "$c")"); do
      retry 30 probe_envoy "$ip:8080" "$(fleet_of "$c")" || die "Envoy pod $ip does not serve after $c restarted"
    done
  done
}

# scale-envoy FLEET N: the fleet's Envoy Deployment scaled to N; waits until
# N pods are Ready (none terminating) and each serves the stack's probe route.
# Which pod goes on a scale-down is the ReplicaSet's choice; annotate one
# with controller.kubernetes.io/pod-deletion-cost to choose it.
cmd_scale_envoy() {
  local ns=${1:-} replicas=${2:-} ip
  [[ " ${FLEETS[*]} " == *" $ns "* ]] || die "scale-envoy: unknown fleet ${ns:-''} (one of ${FLEETS[*]})"
  [[ $replicas =~ ^[0-9]+$ && $replicas -ge 1 ]] || die "scale-envoy: N must be a positive number"
  alive etcd || die "the stack is not up"
  kubectl scale deployment/envoy -n "$ns" --replicas="$replicas" >/dev/null
  retry 120 envoy_settled "$ns" "$replicas" || die "Envoy pods of $ns did not settle at $replicas: $(kubectl get pods -n "$ns" -o wide 2>&1)"
  for ip in $(envoy_pod_ips "$ns"); do
    retry 30 probe_envoy "$ip:8080" "$ns" || die "Envoy pod $ip of $ns does not serve the stack's probe route"
  done
  log "$ns: $replicas Envoy pods Ready ($(envoy_pod_ips "$ns" | tr '\n' ' '))"
}

# proxy-protocol FLEET on|off: the fleet's Contours restarted with (on) or
# without (off) --use-proxy-protocol, as a cluster behind an AWS NLB runs
# them; waits until every Envoy pod of the fleet serves the stack's probe
# route again, to a client that sends the header when on. Meanwhile (and
# while on) clients that do not match the setting are refused, those
# through the fleet's Service too. `up` turns every fleet off again.
cmd_proxy_protocol() {
  local ns=${1:-} mode=${2:-} c ip
  [[ " ${FLEETS[*]} " == *" $ns "* ]] || die "proxy-protocol: unknown fleet ${ns:-''} (one of ${FLEETS[*]})"
  [[ $mode == on || $mode == off ]] || die "proxy-protocol: on or off, not ${mode:-nothing}"
  lock
  alive etcd || die "the stack is not up"
  if [[ $mode == on ]]; then touch "$STACK/proxy-protocol-$ns"; else rm -f "$STACK/proxy-protocol-$ns"; fi
  for c in $(contours "$ns"); do
    contour_up_one "$c"
    retry 60 contour_serving "$c" || die "$c does not serve xDS after its restart; see $LOGS/$c.log"
  done
  for ip in $(envoy_pod_ips "$ns"); do
    retry 60 probe_envoy "$ip:8080" "$ns" || die "Envoy pod $ip of $ns does not serve with PROXY protocol $mode"
  done
  log "$ns: PROXY protocol $mode; every Envoy pod serves ($(envoy_pod_ips "$ns" | tr '\n' ' '))"
}

# need_pod_ip CMD IP: IP is a pod address of the stack's pod range, and the
# stack is up
need_pod_ip() {
  [[ ${2:-} =~ ^10\.244\.[0-9]+\.[0-9]+$ ]] || die "$1: IP must be a pod IP (in $POD_CIDR), not ${2:-nothing}"
  alive etcd || die "the stack is not up"
}

# cut-xds IP: an Envoy pod that no longer hears from Contour, the way a pod
# behind a stalled connection is: its gRPC stream stays open (nothing is
# refused, both directions are dropped), so it keeps its configuration and
# stays Ready while every update passes it by. The chains live in the
# stack's own nft table, so `down` removes them with it.
cmd_cut_xds() {
  local ip=${1:-} ports
  need_pod_ip cut-xds "$ip"
  ports=$(all_xds_ports)
  nft -f - <<EOF
table inet $NFT_TABLE {
  chain xds-in { type filter hook input priority filter - 10; policy accept; }
  chain xds-out { type filter hook output priority filter - 10; policy accept; }
}
add rule inet $NFT_TABLE xds-in ip saddr $ip tcp dport { $ports } drop comment "hitless: cut-xds $ip"
add rule inet $NFT_TABLE xds-out ip daddr $ip tcp sport { $ports } drop comment "hitless: cut-xds $ip"
EOF
  log "xDS to and from $ip dropped"
}

cmd_mend_xds() {
  local chain
  for chain in xds-in xds-out; do
    if nft list chain inet $NFT_TABLE $chain >/dev/null 2>&1; then nft delete chain inet $NFT_TABLE $chain; fi
  done
  log "xDS cuts mended"
}

# fail-ready IP: an Envoy pod whose readiness probe fails while Envoy keeps
# serving, the way a pod does whose /ready answers too late under load (the
# node agent's probe times out after 1 s): the EndpointSlice marks it not
# ready, kube-proxy sends it no new connections, but every client connection
# it has stays and is served. Only the probe (host -> pod, the health port
# 8002 of hack/manifests/fleet.yaml) is dropped.
cmd_fail_ready() {
  local ip=${1:-}
  need_pod_ip fail-ready "$ip"
  nft -f - <<EOF
table inet $NFT_TABLE {
  chain ready-out { type filter hook output priority filter - 10; policy accept; }
}
add rule inet $NFT_TABLE ready-out ip daddr $ip tcp dport 8002 drop comment "hitless: fail-ready $ip"
EOF
  log "readiness probes to $ip dropped"
}

cmd_mend_ready() {
  if nft list chain inet $NFT_TABLE ready-out >/dev/null 2>&1; then nft delete chain inet $NFT_TABLE ready-out; fi
  log "readiness probe drops mended"
}

case ${1:-} in
  restart) shift; cmd_restart "$@" ;;
  scale-envoy) shift; cmd_scale_envoy "$@" ;;
  cut-xds) shift; cmd_cut_xds "$@" ;;
  mend-xds) cmd_mend_xds ;;
  fail-ready) shift; cmd_fail_ready "$@" ;;
  mend-ready) cmd_mend_ready ;;
  proxy-protocol) shift; cmd_proxy_protocol "$@" ;;
  *) echo "usage: $0 restart NAME [--down S] [--kill] | scale-envoy FLEET N | cut-xds IP | mend-xds | fail-ready IP | mend-ready | proxy-protocol FLEET on|off" >&2; exit 2 ;;
esac
