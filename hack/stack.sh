#!/usr/bin/env bash
# The local stack: a one-node Kubernetes control plane, service networking,
# cluster DNS, two Contour fleets and their Envoy pods, all as processes on this
# machine (no Docker). Pods run through the node agent (hack/nodeagent), each in
# its own network namespace on the bridge cni0.
#
#   hack/stack.sh up [--envoy-replicas N] [--demo]
#                                           build deps, bring everything up (idempotent);
#                                           --demo (make run) builds and starts no CoreDNS
#                                           unless it is already built
#   hack/stack.sh down                      stop and remove everything (idempotent)
#   hack/stack.sh env                       print KUBECONFIG and INGRESS_ADDRESS exports
#   hack/stack.sh status                    what runs, what is ready
#   hack/stack.sh restart NAME [--down S] [--kill]
#                                           stop (--kill: SIGKILL) a component (kube-apiserver, a
#                                           Contour: contour-external[-2],
#                                           contour-internal[-2]), keep it down
#                                           S seconds (default 0), start it and
#                                           wait until it serves
#   hack/stack.sh scale-envoy FLEET N       scale a fleet's Envoy pods to N and wait
#                                           until exactly N are Ready and serve
#   hack/stack.sh cut-xds IP                drop the xDS traffic between the Envoy
#                                           pod IP and Contour: it keeps serving
#                                           what it has and gets no update
#   hack/stack.sh mend-xds                  undo every cut-xds
#   hack/stack.sh fail-ready IP             make an Envoy pod's readiness probe
#                                           fail while it keeps serving
#   hack/stack.sh mend-ready                undo every fail-ready
#   hack/stack.sh add-image REPO BINARY     pods of image repository REPO run BINARY
#                                           (hack/release.sh check: the released image)
#   hack/stack.sh proxy-protocol FLEET on|off
#                                           restart the fleet's Contours with (on) or
#                                           without (off) --use-proxy-protocol and wait
#                                           until every Envoy pod of it serves again
#                                           (on: only to clients that send a PROXY
#                                           protocol header); `up` turns every fleet off
# (restart, scale-envoy, cut-xds and fail-ready are for the fault tests: test/e2e/faults_*_test.go;
# proxy-protocol for test/e2e/proxyprotocol_test.go)
#
# State lives in $HITLESS_STACK_DIR (default <repo>/.stack): certs, kubeconfig,
# pid files, logs/<component>.log, logs/pods/*.log, proxy-protocol-<fleet>
# (present while that fleet is on PROXY protocol). Binaries come from
# ${HITLESS_CACHE:-$HOME/.cache/hitless}/bin (hack/build-deps.sh).
#
# Addresses (nothing here ever routes off the machine):
#   bridge cni0 10.244.0.1/16  pods 10.244.0.10-10.244.255.254  apiserver 10.244.0.1:6443
#   services 10.96.0.0/16 (kubernetes 10.96.0.1, kube-dns 10.96.0.10)
#   load balancers 10.245.0.0/24 (contour-external/envoy 10.245.0.10)
# An nft table (inet hitless) drops anything forwarded between cni0 and any
# other interface, and no masquerade is set up. `down` also restores sysctls.
#
# Choices, and how this differs from a real cluster:
# - every component (and CoreDNS, Contour, the node agent) uses the admin
#   client certificate (system:masters): no per-component identities;
# - the controller manager holds the service-account signing key, so the token
#   controller runs and the ServiceAccount admission plugin stays on (pods get
#   the usual kube-api-access projected volume; the node agent decides what it
#   makes of it); kube-scheduler runs so Deployments' pods get bound;
# - no node lifecycle controller (a missed heartbeat taints or evicts nothing),
#   hence the TaintNodesByCondition admission plugin is off too;
# - no cloud provider: this script writes contour-external/envoy's
#   status.loadBalancer (10.245.0.10), which kube-proxy then programs;
# - CoreDNS serves only cluster.local and the reverse zones (no forwarding);
# - Contour runs on the host, $HITLESS_CONTOUR_REPLICAS (default 2) per fleet
#   as a cluster operator runs it: replica 1 (contour-<fleet>) serves xDS on
#   10.244.0.1:8001 (external) / 8002 (internal), replica 2
#   (contour-<fleet>-2) on 8011 / 8012, plain gRPC; Contour's own leader
#   election (Lease leader-elect in the fleet's namespace) picks the one that
#   writes status, and every replica serves xDS. Each Envoy's bootstrap names
#   every replica of its fleet, so a Contour restart leaves it a live xDS
#   source. Envoy runs as pods whose admin API is the abstract socket
#   @envoy-admin inside each pod's network namespace;
# - each fleet has an HTTPProxy hitless-stack-probe (host
#   stack-probe.<fleet>.hitless.local, a direct 200): it gives Envoy its HTTP
#   listener (Contour builds none without a virtual host) and lets `up` check
#   Contour -> xDS -> Envoy -> kube-proxy end to end.
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
KCFG=$STACK/kubeconfig
HACK_KUBECONFIG=$KCFG
PIDS=$STACK/pids
LOGS=$STACK/logs
PKI=$STACK/pki
# what the machine looked like before the first `up` since boot (sysctls, nft
# tables), shared by every checkout's stack; /run is emptied on reboot, as are
# sysctls and tables
RUN_STATE=/run/hitless-stack

BRIDGE=cni0
GW=10.244.0.1
# A /16 for the one node: host-local hands addresses out round-robin from
# the last one it gave, so an address a deleted pod released comes back only
# after ~65,000 others, never seconds later. On the /24 this used to be, busy
# suites (conformance at 5-6 copies) wrapped the range and a new pod got the
# address of one deleted 1-2 s earlier, while Envoy still had the old
# endpoint (issue 13). A real cluster avoids reuse the same way.
POD_PREFIX=16
POD_CIDR=10.244.0.0/$POD_PREFIX
POD_RANGE_START=10.244.0.10
SVC_CIDR=10.96.0.0/16
SVC_KUBERNETES_IP=10.96.0.1
DNS_SVC_IP=10.96.0.10
LB_CIDR=10.245.0.0/24
LB_IP=10.245.0.10
NODE=hitless-node
CLUSTER_DOMAIN=cluster.local
NFT_TABLE=hitless
NETNS_PREFIX=hitless-
CNI_NETWORK=hitless
CONTOUR_VERSION=v1.33.8
FLEETS=(contour-external contour-internal)
# image repositories of Knative Serving's components and test images (hack/serving.sh)
SERVING_CMD_REPO=ko.local/knative-serving
SERVING_TEST_REPO=ko.local/serving-test
declare -A XDS_PORT=([contour-external]=8001 [contour-internal]=8002)
declare -A CONTOUR_PORT_BASE=([contour-external]=8100 [contour-internal]=8200)
CONTOUR_REPLICAS=${HITLESS_CONTOUR_REPLICAS:-2}
[[ $CONTOUR_REPLICAS =~ ^[12]$ ]] || { echo "HITLESS_CONTOUR_REPLICAS must be 1 or 2" >&2; exit 2; }
SYSCTLS=(net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1)
# in start order (`down` stops them in reverse, the apiserver before etcd)
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler nodeagent kube-proxy coredns)
for _fleet in "${FLEETS[@]}"; do
  COMPONENTS+=("$_fleet")
  ((CONTOUR_REPLICAS < 2)) || COMPONENTS+=("$_fleet-2")
done
unset _fleet

# contours FLEET: the component names of the fleet's Contour replicas
contours() {
  echo "$1"
  ((CONTOUR_REPLICAS < 2)) || echo "$1-2"
}
# fleet_of NAME: the fleet a Contour replica serves (contour-external-2 -> contour-external)
fleet_of() { echo "${1%-2}"; }
# replica ports: replica 2 of a fleet serves xDS 10 above replica 1 and its
# HTTP, health and debug ports 50 above
second() { [[ $1 == *-2 ]]; }
xds_port() { local f; f=$(fleet_of "$1"); if second "$1"; then echo $((XDS_PORT[$f] + 10)); else echo "${XDS_PORT[$f]}"; fi; }
port_base() { local f; f=$(fleet_of "$1"); if second "$1"; then echo $((CONTOUR_PORT_BASE[$f] + 50)); else echo "${CONTOUR_PORT_BASE[$f]}"; fi; }
# all_xds_ports: every xDS port of every replica, comma-separated
all_xds_ports() {
  local f c out=()
  for f in "${FLEETS[@]}"; do for c in $(contours "$f"); do out+=("$(xds_port "$c")"); done; done
  (IFS=,; echo "${out[*]}")
}

# ---------------------------------------------------------------- processes

pid_of() { [[ -f $PIDS/$1.pid ]] && cat "$PIDS/$1.pid"; }

# running PID: exists and is not a zombie waiting for its (new) parent to reap it
running() { [[ -r /proc/$1/stat ]] && [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]; }

# alive NAME: the pid recorded for NAME runs the binary recorded with it (or
# an older build of it, since replaced on disk: see stale)
alive() {
  local pid exe
  pid=$(pid_of "$1" 2>/dev/null) || return 1
  [[ -n $pid ]] && running "$pid" || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  [[ ${exe% (deleted)} == "$(cat "$PIDS/$1.exe" 2>/dev/null)" ]]
}

# stale NAME: alive, but its binary was rebuilt since it started
stale() {
  alive "$1" && [[ $(readlink "/proc/$(pid_of "$1")/exe" 2>/dev/null) == *" (deleted)" ]]
}

# restart_stale NAME...: stops each component whose binary was rebuilt, so the
# caller starts the new build
restart_stale() {
  local name
  for name in "$@"; do
    if stale "$name"; then
      log "$name: binary rebuilt since it started; restarting it"
      stop "$name"
    fi
  done
}

# start NAME BINARY ARG... : runs BINARY in its own session, output to logs/NAME.log
start() {
  local name=$1 bin=$2
  shift 2
  [[ -x $bin ]] || die "$bin is missing (run hack/build-deps.sh)"
  mkdir -p "$PIDS" "$LOGS"
  rm -f "$PIDS/$name.pid"
  readlink -f "$bin" >"$PIDS/$name.exe"
  printf '\n==== %s starting %s\n' "$(date -Is)" "$name" >>"$LOGS/$name.log"
  # the pid file is written by the process itself before it execs the binary
  # shellcheck disable=SC2016 # expanded by the inner bash
  setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$PIDS/$name.pid" "$bin" "$@" \
    </dev/null >>"$LOGS/$name.log" 2>&1 9>&- &
  retry 5 test -s "$PIDS/$name.pid" || die "$name did not start"
  retry 5 alive "$name" || die "$name exited at once; see $LOGS/$name.log: $(tail -n 5 "$LOGS/$name.log")"
  log "$name started (pid $(pid_of "$name"))"
}

# stop [-g GRACE_SECONDS | -k] NAME... : SIGTERM to all, wait, SIGKILL what
# is left; -k: SIGKILL at once (a crash)
stop() {
  local grace=15 sig=TERM name pid i left
  local -A pids=()
  if [[ $1 == -g ]]; then grace=$2; shift 2; fi
  if [[ $1 == -k ]]; then sig=KILL grace=5; shift; fi
  for name in "$@"; do
    if alive "$name"; then
      pids[$name]=$(pid_of "$name")
      kill -"$sig" "${pids[$name]}" 2>/dev/null || true
    fi
  done
  for ((i = 0; i < grace * 10; i++)); do
    left=0
    for name in "${!pids[@]}"; do running "${pids[$name]}" && left=1; done
    ((left)) || break
    sleep 0.1
  done
  for name in "${!pids[@]}"; do
    pid=${pids[$name]}
    if running "$pid"; then
      log "$name (pid $pid) ignored SIGTERM for ${grace}s; killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    log "$name stopped"
  done
  for name in "$@"; do rm -f "$PIDS/$name.pid" "$PIDS/$name.exe"; done
}

# ---------------------------------------------------------------- networking

cni_conflist() {
  cat <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$STACK/cni/ipam",
        "ranges": [[{ "subnet": "$POD_CIDR", "rangeStart": "$POD_RANGE_START", "gateway": "$GW" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "loopback" }
  ]
}
EOF
}

nft_rules() {
  # Only traffic between pods, and between pods and this host, is allowed:
  # nothing is forwarded from the bridge to another interface or back.
  cat <<EOF
table inet $NFT_TABLE {
  chain forward {
    type filter hook forward priority filter - 10; policy accept;
    iifname "$BRIDGE" oifname != "$BRIDGE" counter drop comment "hitless: nothing leaves the pod bridge"
    iifname != "$BRIDGE" oifname "$BRIDGE" counter drop comment "hitless: nothing enters the pod bridge from outside"
  }
}
EOF
}

net_up() {
  local kv key val
  mkdir -p "$STACK/cni" "$RUN_STATE"
  # sysctls: remember the values found before the first change
  [[ -d /proc/sys/net/bridge ]] || modprobe br_netfilter 2>/dev/null || true
  [[ -d /proc/sys/net/bridge ]] || die "br_netfilter is not available (needed for net.bridge.bridge-nf-call-iptables)"
  if [[ ! -f $RUN_STATE/sysctl.orig ]]; then
    for kv in "${SYSCTLS[@]}"; do
      key=${kv%%=*}
      echo "$key=$(sysctl -n "$key")"
    done >"$RUN_STATE/sysctl.orig.tmp"
    mv "$RUN_STATE/sysctl.orig.tmp" "$RUN_STATE/sysctl.orig"
  fi
  for kv in "${SYSCTLS[@]}"; do
    key=${kv%%=*} val=${kv#*=}
    [[ $(sysctl -n "$key") == "$val" ]] || sysctl -qw "$key=$val"
  done
  [[ -f $RUN_STATE/nft-tables.orig ]] || nft_tables >"$RUN_STATE/nft-tables.orig"
  # the firewall first, so nothing can be forwarded before it is in place
  nft -f - <<EOF
table inet $NFT_TABLE
delete table inet $NFT_TABLE
$(nft_rules)
EOF
  # the bridge, created here so that host processes can bind 10.244.0.1 before
  # any pod exists (the CNI bridge plugin adopts it)
  ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
  if ! ip addr show dev "$BRIDGE" | grep "inet $GW/$POD_PREFIX " >/dev/null; then
    # a bridge left with another prefix (an older stack) is re-addressed
    ip addr flush dev "$BRIDGE"
    ip addr add "$GW/$POD_PREFIX" dev "$BRIDGE"
  fi
  ip link set "$BRIDGE" up
  # virtual IPs route to the bridge, so an unprogrammed one never takes the default route
  ip route replace "$SVC_CIDR" dev "$BRIDGE" src "$GW"
  ip route replace "$LB_CIDR" dev "$BRIDGE" src "$GW"
  cni_conflist >"$STACK/cni/10-hitless.conflist"
  log "network: $BRIDGE $GW/$POD_PREFIX, routes $SVC_CIDR $LB_CIDR, nft table inet $NFT_TABLE"
}

# processes still running in our pods' network namespaces
netns_pids() {
  local ns
  for ns in /run/netns/"$NETNS_PREFIX"*; do
    [[ -e $ns ]] || continue
    ip netns pids "$(basename "$ns")" 2>/dev/null || true
  done
}

net_down() {
  local ns link pids key val line
  # pods the node agent left behind: their processes, then their namespaces
  pids=$(netns_pids | sort -u | tr '\n' ' ')
  if [[ -n ${pids// /} ]]; then
    log "killing leftover pod processes: $pids"
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    sleep 1
    pids=$(netns_pids | sort -u | tr '\n' ' ')
    # shellcheck disable=SC2086
    [[ -z ${pids// /} ]] || kill -KILL $pids 2>/dev/null || true
  fi
  for ns in /run/netns/"$NETNS_PREFIX"*; do
    [[ -e $ns ]] || continue
    ip netns delete "$(basename "$ns")" 2>/dev/null || { umount "$ns" 2>/dev/null; rm -f "$ns"; }
    log "deleted netns $(basename "$ns")"
  done
  # per-namespace files (resolv.conf) that `ip netns exec` bind-mounts
  rm -rf /etc/netns/"$NETNS_PREFIX"* 2>/dev/null || true
  # veths still attached to the bridge (their peers were in the namespaces)
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    for link in $(ip -o link show master "$BRIDGE" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
      if ip link delete "$link" 2>/dev/null; then log "deleted $link"; fi
    done
  fi
  ip route del "$SVC_CIDR" dev "$BRIDGE" 2>/dev/null || true
  ip route del "$LB_CIDR" dev "$BRIDGE" 2>/dev/null || true
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link delete "$BRIDGE" && log "deleted bridge $BRIDGE"
  fi
  # our firewall table, kube-proxy's, and the empty iptables-nft tables its
  # --cleanup leaves: every table that did not exist before the first `up`
  nft_tables_down
  # CNI state of our network
  rm -rf "$STACK/cni/ipam" /var/lib/cni/results/"$CNI_NETWORK"-* 2>/dev/null || true
  # sysctls back to what they were
  if [[ -f $RUN_STATE/sysctl.orig ]]; then
    while IFS= read -r line; do
      key=${line%%=*} val=${line#*=}
      [[ -n $key ]] || continue
      [[ $(sysctl -n "$key" 2>/dev/null) == "$val" ]] || sysctl -qw "$key=$val" 2>/dev/null || true
    done <"$RUN_STATE/sysctl.orig"
    rm -f "$RUN_STATE/sysctl.orig"
    log "sysctls restored"
  fi
  rmdir "$RUN_STATE" 2>/dev/null || true
}

nft_tables() { nft list tables 2>/dev/null | sed 's/^table //' | sort; }

# nft_rule_count "FAMILY NAME"
nft_rule_count() {
  # shellcheck disable=SC2086
  nft -j list table $1 2>/dev/null | python3 -c 'import json,sys
print(sum(1 for o in json.load(sys.stdin)["nftables"] if "rule" in o))' 2>/dev/null || echo 0
}

nft_tables_down() {
  local t before=""
  [[ -f $RUN_STATE/nft-tables.orig ]] && before=$(cat "$RUN_STATE/nft-tables.orig")
  while IFS= read -r t; do
    [[ -n $t ]] || continue
    case $t in
      "inet $NFT_TABLE" | "ip kube-proxy" | "ip6 kube-proxy") ;;
      *)
        # a table that was there before us is not ours
        grep -qxF "$t" <<<"$before" && continue
        [[ -f $RUN_STATE/nft-tables.orig ]] || continue
        if [[ $(nft_rule_count "$t") != 0 ]]; then
          log "WARNING: nft table $t appeared while the stack ran but has rules; left alone"
          continue
        fi
        ;;
    esac
    # shellcheck disable=SC2086
    nft delete table $t && log "deleted nft table $t"
  done < <(nft_tables)
  rm -f "$RUN_STATE/nft-tables.orig"
}

# ---------------------------------------------------------------- certs

certs() {
  [[ -f $PKI/admin.crt && -f $PKI/front-proxy-client.crt && -f $KCFG ]] && return 0
  mkdir -p "$PKI"
  (
    cd "$PKI"
    local ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    # shellcheck disable=SC2086
    openssl req -x509 $ec -keyout ca.key -out ca.crt -days 3650 -subj "/CN=hitless-stack-ca" 2>/dev/null
    cat >apiserver.ext <<EOF
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:$GW,IP:$SVC_KUBERNETES_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.$CLUSTER_DOMAIN
EOF
    cat >client.ext <<EOF
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth
EOF
    # shellcheck disable=SC2086
    openssl req $ec -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile apiserver.ext -out apiserver.crt 2>/dev/null
    # shellcheck disable=SC2086
    openssl req $ec -keyout admin.key -out admin.csr -subj "/O=system:masters/CN=kubernetes-admin" 2>/dev/null
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile client.ext -out admin.crt 2>/dev/null
    # front proxy (aggregation layer): its own CA, as in a kubeadm cluster
    # shellcheck disable=SC2086
    openssl req -x509 $ec -keyout front-proxy-ca.key -out front-proxy-ca.crt -days 3650 -subj "/CN=hitless-front-proxy-ca" 2>/dev/null
    # shellcheck disable=SC2086
    openssl req $ec -keyout front-proxy-client.key -out front-proxy-client.csr -subj "/CN=front-proxy-client" 2>/dev/null
    openssl x509 -req -in front-proxy-client.csr -CA front-proxy-ca.crt -CAkey front-proxy-ca.key -CAcreateserial -days 3650 -extfile client.ext -out front-proxy-client.crt 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    rm -f ./*.csr ./*.ext
    chmod 600 ./*.key
  )
  cat >"$KCFG.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: hitless
  cluster:
    server: https://$GW:6443
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: admin
  user:
    client-certificate-data: $(base64 -w0 <"$PKI/admin.crt")
    client-key-data: $(base64 -w0 <"$PKI/admin.key")
contexts:
- name: hitless
  context:
    cluster: hitless
    user: admin
current-context: hitless
EOF
  chmod 600 "$KCFG.tmp"
  mv "$KCFG.tmp" "$KCFG"
  log "certs and kubeconfig written to $PKI, $KCFG"
}

# ---------------------------------------------------------------- control plane

apiserver_ready() {
  curl -fsS --max-time 2 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://$GW:6443/readyz" >/dev/null 2>&1
}

control_plane_up() {
  local t
  restart_stale kube-scheduler kube-controller-manager kube-apiserver
  if stale etcd; then
    stop kube-apiserver
    stop etcd
    log "etcd: binary rebuilt since it started; restarting it with its data"
  elif ! alive etcd; then
    # a new etcd means a new cluster: nothing the old one knew is still running
    rm -rf "$STACK/etcd" "$STACK/nodeagent" "$LOGS/pods"
  fi
  if ! alive etcd; then
    start etcd "$BIN/etcd" --name hitless --data-dir "$STACK/etcd" \
      --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
      --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
      --initial-cluster hitless=http://127.0.0.1:2380 --initial-cluster-state new \
      --listen-metrics-urls http://127.0.0.1:2381 \
      --unsafe-no-fsync --quota-backend-bytes=$((4 * 1024 * 1024 * 1024)) --log-level warn
    retry 30 curl -fsS --max-time 1 http://127.0.0.1:2379/health || die "etcd is not healthy; see $LOGS/etcd.log"
  fi
  if ! alive kube-apiserver; then
    t=$(now)
    start kube-apiserver "$BIN/kube-apiserver" \
      --etcd-servers=http://127.0.0.1:2379 \
      --bind-address="$GW" --secure-port=6443 --advertise-address="$GW" \
      --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
      --client-ca-file="$PKI/ca.crt" \
      --requestheader-client-ca-file="$PKI/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
      --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
      --requestheader-extra-headers-prefix=X-Remote-Extra- \
      --proxy-client-cert-file="$PKI/front-proxy-client.crt" --proxy-client-key-file="$PKI/front-proxy-client.key" \
      --kubelet-client-certificate="$PKI/admin.crt" --kubelet-client-key="$PKI/admin.key" \
      --service-cluster-ip-range="$SVC_CIDR" \
      --service-account-issuer="https://kubernetes.default.svc.$CLUSTER_DOMAIN" \
      --service-account-key-file="$PKI/sa.pub" \
      --service-account-signing-key-file="$PKI/sa.key" \
      --authorization-mode=RBAC --allow-privileged=true \
      --disable-admission-plugins=TaintNodesByCondition \
      --profiling=false --v=1
    retry 60 apiserver_ready || die "kube-apiserver is not ready; see $LOGS/kube-apiserver.log"
    log "kube-apiserver ready after $(elapsed "$t")s"
  fi
  # The controller manager signs service-account tokens (token controller) and
  # runs garbage collection, EndpointSlices, namespace deletion, Deployments...
  alive kube-controller-manager || start kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig="$KCFG" --authentication-kubeconfig="$KCFG" --authorization-kubeconfig="$KCFG" \
    --controllers='*,-nodeipam,-nodelifecycle,-cloud-node-lifecycle' --leader-elect=false \
    --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
    --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
    --bind-address=127.0.0.1 --secure-port=10257 --profiling=false --v=1
  # Pods must be bound to the node before the node agent runs them.
  alive kube-scheduler || start kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig="$KCFG" --authentication-kubeconfig="$KCFG" --authorization-kubeconfig="$KCFG" \
    --leader-elect=false --bind-address=127.0.0.1 --secure-port=10259 --profiling=false --v=1
}

# ---------------------------------------------------------------- node agent

images_json() {
  local name first=1
  printf '{\n'
  for f in "$BIN"/images/*; do
    [[ -x $f ]] || continue
    name=$(basename "$f")
    ((first)) || printf ',\n'
    first=0
    printf '  "%s": "%s"' "$name" "$f"
  done
  # Knative Serving, once hack/build-deps.sh --serving built it: its components
  # and test images by full repository (hack/serving.sh names them so), since
  # some test images share a short name with the networking ones above
  for f in "$BIN"/serving/cmd/* "$BIN"/serving/images/*; do
    [[ -x $f ]] || continue
    ((first)) || printf ',\n'
    first=0
    case $f in
      */cmd/*) printf '  "%s/%s": "%s"' "$SERVING_CMD_REPO" "$(basename "$f")" "$f" ;;
      *) printf '  "%s/%s": "%s"' "$SERVING_TEST_REPO" "$(basename "$f")" "$f" ;;
    esac
  done
  # images added by hand (add-image: the release check's controller image)
  local repo exe
  if [[ -f $STACK/images.extra ]]; then
    while read -r repo exe; do
      [[ -n $repo && -x $exe ]] || continue
      ((first)) || printf ',\n'
      first=0
      printf '  "%s": "%s"' "$repo" "$exe"
    done <"$STACK/images.extra"
  fi
  ((first)) || printf ',\n'
  printf '  "envoy": "%s"\n}\n' "$(readlink -f "$BIN/envoy")"
}

# add-image REPOSITORY BINARY: pods of that image run BINARY from now on (the
# node agent reads the image map for every container it starts)
cmd_add_image() {
  local repo=${1:?usage: add-image REPOSITORY BINARY} exe=${2:?usage: add-image REPOSITORY BINARY}
  [[ -x $exe ]] || die "$exe is not an executable"
  [[ -d $STACK ]] || die "no stack in $STACK: hack/stack.sh up first"
  exe=$(readlink -f "$exe")
  touch "$STACK/images.extra"
  { grep -v "^$repo " "$STACK/images.extra" || true; echo "$repo $exe"; } >"$STACK/images.extra.tmp"
  mv "$STACK/images.extra.tmp" "$STACK/images.extra"
  images_json >"$STACK/images.json.tmp" && mv "$STACK/images.json.tmp" "$STACK/images.json"
  log "image $repo runs $exe"
}

node_ready() {
  [[ $(kubectl get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

nodeagent_up() {
  [[ -x $BIN/nodeagent ]] || die "node agent binary $BIN/nodeagent is missing: hack/nodeagent must build (hack/build-deps.sh builds it)"
  images_json >"$STACK/images.json.tmp" && mv "$STACK/images.json.tmp" "$STACK/images.json"
  mkdir -p "$STACK/nodeagent" "$LOGS/pods"
  # a rebuilt node agent replaces the running one (on SIGTERM it stops its pods;
  # their controllers recreate them)
  restart_stale nodeagent
  alive nodeagent || start nodeagent "$BIN/nodeagent" --kubeconfig "$KCFG" --node-name "$NODE" \
    --cni-conf "$STACK/cni/10-hitless.conflist" --cni-bin-dir "$BIN/cni" \
    --image-map "$STACK/images.json" --state-dir "$STACK/nodeagent" \
    --pod-cidr "$POD_CIDR" --dns-ip "$GW" --cluster-domain "$CLUSTER_DOMAIN"
  retry 60 node_ready || die "node $NODE is not Ready; see $LOGS/nodeagent.log"
  # The node lifecycle controller, which lifts this taint once a node is Ready,
  # does not run here (it would also evict pods on a missed heartbeat); the
  # admission plugin that sets it is off, this covers a node from before that.
  if kubectl get node "$NODE" -o jsonpath='{.spec.taints[*].key}' | grep -w node.kubernetes.io/not-ready >/dev/null; then
    kubectl taint node "$NODE" node.kubernetes.io/not-ready- >/dev/null
  fi
  log "node $NODE Ready"
}

# ---------------------------------------------------------------- services and DNS

corefile() {
  cat <<EOF
.:53 {
    bind $GW
    errors
    health 127.0.0.1:10280
    ready 127.0.0.1:10281
    kubernetes $CLUSTER_DOMAIN in-addr.arpa ip6.arpa {
        kubeconfig $KCFG
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
    cache 5
}
EOF
}

kube_dns_manifest() {
  cat <<EOF
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/name: CoreDNS, app.kubernetes.io/part-of: hitless-stack}
spec:
  clusterIP: $DNS_SVC_IP
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: 53}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-host
  namespace: kube-system
  labels:
    kubernetes.io/service-name: kube-dns
    endpointslice.kubernetes.io/managed-by: hitless-stack
    app.kubernetes.io/part-of: hitless-stack
addressType: IPv4
endpoints:
- addresses: [$GW]
  conditions: {ready: true, serving: true, terminating: false}
  nodeName: $NODE
ports:
- {name: dns, port: 53, protocol: UDP}
- {name: dns-tcp, port: 53, protocol: TCP}
EOF
}

services_up() {
  restart_stale kube-proxy coredns
  if ! alive kube-proxy; then
    # rules of an earlier kube-proxy run would otherwise linger until resync
    "$BIN/kube-proxy" --cleanup --proxy-mode=nftables >>"$LOGS/kube-proxy.log" 2>&1 || true
    start kube-proxy "$BIN/kube-proxy" --kubeconfig="$KCFG" --proxy-mode=nftables \
      --hostname-override="$NODE" --cluster-cidr="$POD_CIDR" \
      --metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256 \
      --conntrack-max-per-core=0 --conntrack-min=0 \
      --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 \
      --nodeport-addresses="$GW/32" --v=1
  fi
  kube_dns_manifest | kubectl apply -f - >/dev/null
  if [[ -x $BIN/coredns ]]; then
    corefile >"$STACK/Corefile"
    alive coredns || start coredns "$BIN/coredns" -conf "$STACK/Corefile" -dns.port 53
    retry 30 curl -fsS --max-time 1 http://127.0.0.1:10281/ready || die "CoreDNS is not ready; see $LOGS/coredns.log"
  else
    # Only after `up --demo` (hack/build-deps.sh --demo builds no CoreDNS):
    # nothing the demo runs resolves a name. A plain `up` builds and starts it.
    log "CoreDNS not built (up --demo): pods resolve no names until hack/stack.sh up"
  fi
  retry 60 curl -fsS --max-time 1 http://127.0.0.1:10256/livez || die "kube-proxy is not healthy; see $LOGS/kube-proxy.log"
  log "kube-proxy ready; CoreDNS $(alive coredns && echo ready || echo absent) (kube-dns $DNS_SVC_IP -> $GW)"
}

# ---------------------------------------------------------------- CRDs

crds_up() {
  local f
  for f in "$REPO/third_party/contour-$CONTOUR_VERSION/01-crds.yaml" "$REPO"/third_party/knative-networking/{ingress,certificate,serverlessservice,domain-claim}.yaml; do
    [[ -f $f ]] || die "$f is missing (hack/build-deps.sh copies it from the pinned module)"
    kubectl apply --server-side --force-conflicts --field-manager=hitless-stack -f "$f" >/dev/null
  done
  kubectl wait --for=condition=Established --timeout=60s crd --all >/dev/null
  log "CRDs established: $(kubectl get crd -o name | wc -l)"
}

# ---------------------------------------------------------------- Contour and Envoy

contour_config() {
  cat <<EOF
# Contour configuration for the $1 fleet of the local stack.
disablePermitInsecure: false
accesslog-format: envoy
# On here only for Knative's ingress conformance suite; off by default in
# Contour, and users should leave it off. The suite's host-rewrite test routes
# a KIngress to an ExternalName Service naming the internal Envoy Service (the
# way DomainMapping does). Contour refuses ExternalName upstreams unless this
# is set, because a Service pointing at Envoy's own admin listener, or at a
# Service in a namespace its author cannot read, makes Envoy a way in
# (GHSA-5ph6-qq5x-7jwc, kubernetes/kubernetes#103675). test/e2e's rewrite-host
# test covers the same routing without it.
enableExternalNameService: true
EOF
}

# envoy_bootstrap FLEET: Envoy's bootstrap from `contour bootstrap` (xDS over plain
# gRPC to this fleet's Contour), as one JSON document quoted as a YAML string
envoy_bootstrap() {
  local out
  out=$(mktemp -d)
  # The admin socket is abstract (leading @): it lives in the pod's network
  # namespace, so every Envoy pod has its own without a shared filesystem path.
  "$BIN/contour" bootstrap "$out/bootstrap.json" --xds-address="$GW" --xds-port="${XDS_PORT[$1]}" \
    --xds-resource-version=v3 --admin-address=@envoy-admin --namespace="$1" >/dev/null 2>>"$LOGS/contour-bootstrap.log"
  local ports=() c
  for c in $(contours "$1"); do ports+=("$(xds_port "$c")"); done
  python3 - "$out/bootstrap.json" "${ports[@]}" <<'EOF'
import json, sys

def fix(o):
    # Envoy refuses a file mode on an abstract socket
    if isinstance(o, dict):
        pipe = o.get("pipe")
        if isinstance(pipe, dict) and pipe.get("path", "").startswith("@"):
            pipe.pop("mode", None)
        for v in o.values():
            fix(v)
    elif isinstance(o, list):
        for v in o:
            fix(v)

b = json.load(open(sys.argv[1]))
fix(b)
# Every Contour replica of the fleet is an endpoint of the xDS cluster: each
# xDS stream picks one, and a stream whose Contour goes away reconnects to
# one that is up, which has its whole state built.
for c in b["static_resources"]["clusters"]:
    if c["name"] != "contour":
        continue
    lbs = c["load_assignment"]["endpoints"][0]["lb_endpoints"]
    first = lbs[0]["endpoint"]["address"]["socket_address"]
    c["load_assignment"]["endpoints"][0]["lb_endpoints"] = [
        {"endpoint": {"address": {"socket_address": {"address": first["address"], "port_value": int(p)}}}}
        for p in sys.argv[2:]]
print(json.dumps(json.dumps(b, separators=(",", ":"))))
EOF
  rm -rf "$out"
}

fleet_manifest() {
  local ns=$1 replicas=$2 bootstrap svc_type
  bootstrap=$(envoy_bootstrap "$ns")
  svc_type=ClusterIP
  [[ $ns == contour-external ]] && svc_type=LoadBalancer
  cat <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: $ns
  labels: {app.kubernetes.io/part-of: hitless-stack}
---
apiVersion: v1
kind: Service
metadata:
  name: envoy
  namespace: $ns
  labels: {app: envoy, app.kubernetes.io/part-of: hitless-stack}
spec:
  type: $svc_type
  selector: {app: envoy}
  ports:
  - {name: http, port: 80, protocol: TCP, targetPort: 8080}
  - {name: https, port: 443, protocol: TCP, targetPort: 8443}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: envoy
  namespace: $ns
  labels: {app: envoy, app.kubernetes.io/part-of: hitless-stack}
spec:
  replicas: $replicas
  selector:
    matchLabels: {app: envoy}
  template:
    metadata:
      labels: {app: envoy}
    spec:
      terminationGracePeriodSeconds: 10
      containers:
      - name: envoy
        image: envoy
        args:
        - --config-yaml
        - $bootstrap
        - --service-cluster
        - $ns
        - --service-node
        - \$(POD_NAME)
        - --log-level
        - info
        - --disable-hot-restart
        env:
        - name: POD_NAME
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        - name: POD_NAMESPACE
          valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
        ports:
        - {name: http, containerPort: 8080, protocol: TCP}
        - {name: https, containerPort: 8443, protocol: TCP}
        - {name: metrics, containerPort: 8002, protocol: TCP}
        readinessProbe:
          httpGet: {path: /ready, port: 8002}
          periodSeconds: 2
          failureThreshold: 2
---
# A fixed route on every Envoy of the fleet, so that its HTTP listener exists
# (Contour builds none without a virtual host) and the stack can check the whole
# path: Contour -> xDS -> Envoy -> kube-proxy.
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata:
  name: hitless-stack-probe
  namespace: $ns
  labels: {app.kubernetes.io/part-of: hitless-stack}
spec:
  ingressClassName: $ns
  virtualhost: {fqdn: stack-probe.$ns.hitless.local}
  routes:
  - conditions: [{prefix: /}]
    directResponsePolicy: {statusCode: 200, body: "hitless-stack $ns"}
EOF
}

# Contour's client defaults (5 requests/s) make its HTTPProxy status writes
# lag minutes behind at a thousand proxies; hitless reads that status back.
contour_up() {
  local c
  for c in $(contours "$1"); do contour_up_one "$c"; done
}

# contour_up_one NAME: one Contour replica; the replicas of a fleet share its
# configuration file and class, each has its own ports and pid
contour_up_one() {
  local name=$1 ns base cfg args
  ns=$(fleet_of "$name")
  base=$(port_base "$name")
  cfg=$STACK/contour-$ns.yaml
  contour_config "$ns" >"$cfg"
  args=(serve --kubeconfig="$KCFG" --config-path="$cfg"
    --xds-address="$GW" --xds-port="$(xds_port "$name")" --insecure
    --leader-election-resource-namespace="$ns" --ingress-class-name="$ns"
    --envoy-service-namespace="$ns" --envoy-service-name=envoy
    --http-address=127.0.0.1 --http-port="$base"
    --health-address=127.0.0.1 --health-port="$((base + 1))"
    --debug-http-address=127.0.0.1 --debug-http-port="$((base + 2))"
    --kubernetes-client-qps=100 --kubernetes-client-burst=200)
  # every Envoy listener of the fleet then wants a PROXY protocol header
  # (an AWS NLB in front of Envoy); the stats and health listener does not
  if proxy_protocol "$ns"; then args+=(--use-proxy-protocol); fi
  { printf '%s\n' "${args[@]}"; cat "$cfg"; } >"$STACK/$name.applied.new"
  if ! cmp -s "$STACK/$name.applied.new" "$STACK/$name.applied" && alive "$name"; then
    # Contour reads its flags and configuration file only when it starts
    log "$name: flags or configuration changed; restarting it"
    stop "$name"
  fi
  mv "$STACK/$name.applied.new" "$STACK/$name.applied"
  restart_stale "$name"
  alive "$name" || start "$name" "$BIN/contour" "${args[@]}"
}

# contour_serving NAME: its xDS server accepts connections, which Contour
# starts only once its informers have synced and its first DAG is built
contour_serving() {
  timeout 1 bash -c "exec 3<>/dev/tcp/$GW/$(xds_port "$1")" 2>/dev/null
}

envoy_pods_ready() {
  local ns=$1 want=$2 ready
  ready=$(kubectl get pods -n "$ns" -l app=envoy -o jsonpath='{range .items[*]}{.metadata.deletionTimestamp}{" "}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c '^ True$' || true)
  [[ $ready -eq $want ]]
}

# envoy_pod_ips FLEET: the pod IPs of its Envoy pods that are not terminating
envoy_pod_ips() {
  kubectl get pods -n "$1" -l app=envoy \
    -o jsonpath='{range .items[*]}{.status.podIP}{" "}{.metadata.deletionTimestamp}{"\n"}{end}' | awk 'NF == 1 {print $1}'
}

# proxy_protocol FLEET: the fleet's Contours run with --use-proxy-protocol
# (hack/stack.sh proxy-protocol FLEET on)
proxy_protocol() { [[ -f $STACK/proxy-protocol-$1 ]]; }

# probe_envoy IP FLEET: the stack's own route answers through that Envoy,
# to a client that sends a PROXY protocol header when the fleet wants one
probe_envoy() {
  local pp=()
  if proxy_protocol "$2"; then pp=(--haproxy-protocol); fi
  [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "${pp[@]}" -H "Host: stack-probe.$2.hitless.local" "http://$1/") == 200 ]]
}

fleets_up() {
  local replicas=$1 ns ip
  for ns in "${FLEETS[@]}"; do
    fleet_manifest "$ns" "$replicas" | kubectl apply --server-side --force-conflicts --field-manager=hitless-stack -f - >/dev/null
    contour_up "$ns"
  done
  # no cloud controller here: the stack publishes the load-balancer address itself
  kubectl patch service envoy -n contour-external --subresource=status --type=merge \
    -p "{\"status\":{\"loadBalancer\":{\"ingress\":[{\"ip\":\"$LB_IP\",\"ipMode\":\"VIP\"}]}}}" >/dev/null
  for ns in "${FLEETS[@]}"; do
    # a changed manifest (a new bootstrap) rolls the pods: wait for the new ones
    kubectl rollout status deployment/envoy -n "$ns" --timeout=120s >/dev/null ||
      die "Envoy Deployment of $ns did not roll out: $(kubectl get pods -n "$ns" -o wide 2>&1)"
    retry 120 envoy_settled "$ns" "$replicas" || die "Envoy pods of $ns are not Ready: $(kubectl get pods -n "$ns" -o wide 2>&1)"
    for ip in $(envoy_pod_ips "$ns"); do
      retry 30 probe_envoy "$ip:8080" "$ns" || die "Envoy pod $ip of $ns does not serve the stack's probe route"
    done
    log "$ns: $CONTOUR_REPLICAS Contours up, $replicas Envoy pods Ready ($(envoy_pod_ips "$ns" | tr '\n' ' '))"
  done
  retry 30 probe_envoy "$LB_IP" contour-external || die "http://$LB_IP/ does not answer"
  log "http://$LB_IP/ answers (probe host 200, any other host: $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://$LB_IP/"))"
}

# ---------------------------------------------------------------- commands

# one up or down at a time
lock() {
  [[ -n ${LOCKED:-} ]] && return 0
  exec 9>"$STACK/.lock"
  flock -w 120 9 || die "another hack/stack.sh up/down holds $STACK/.lock"
  LOCKED=1
}

# refuse to tear down a stack that another checkout is running
other_stack_check() {
  local port pids ours
  ours=$(cat "$PIDS"/*.pid 2>/dev/null | tr '\n' '|' || true)
  for port in 2379 6443; do
    pids=$(ss -Htlnp "sport = :$port" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u |
      grep -vxE "${ours%|}" | tr '\n' ' ' || true)
    if [[ -n ${pids// /} ]]; then
      die "port $port is in use by pid(s) $pids, which this stack ($STACK) did not start: another stack running from another directory? Stop it with its own hack/stack.sh down."
    fi
  done
}

cmd_env() {
  echo "export KUBECONFIG=$KCFG"
  echo "export INGRESS_ADDRESS=$LB_IP:80"
}

cmd_up() {
  local replicas=2 deps_flags=()
  while (($#)); do
    case $1 in
      --demo) deps_flags=(--demo); shift ;;
      --envoy-replicas) replicas=${2:?--envoy-replicas needs a number}; shift 2 ;;
      --envoy-replicas=*) replicas=${1#*=}; shift ;;
      *) die "unknown flag for up: $1" ;;
    esac
  done
  [[ $replicas =~ ^[0-9]+$ && $replicas -ge 1 ]] || die "--envoy-replicas must be a positive number"
  [[ $(id -u) == 0 ]] || die "the stack needs root (network namespaces, bridge, nftables)"
  local t_deps
  "$REPO/hack/build-deps.sh" "${deps_flags[@]}"
  t_deps=$(elapsed)
  T0=$(now)
  mkdir -p "$STACK"
  lock
  echo '*' >"$STACK/.gitignore"
  if ! alive etcd; then
    # Not running (or only in part): clear what an earlier stack left behind,
    # from this directory or another checkout (pods' namespaces, the bridge,
    # tables), so that the new one starts clean.
    other_stack_check
    if [[ -d $PIDS ]] || ip link show "$BRIDGE" >/dev/null 2>&1 || compgen -G "/run/netns/$NETNS_PREFIX*" >/dev/null; then
      log "no running stack; removing what an earlier one left behind"
      cmd_down
      T0=$(now)
    fi
  fi
  mkdir -p "$LOGS" "$PIDS"
  # every fleet back to plain connections, whatever a test that was killed
  # before it could switch back left (contour_up_one restarts the Contours)
  rm -f "$STACK"/proxy-protocol-*
  net_up
  certs
  control_plane_up
  nodeagent_up
  services_up
  crds_up
  fleets_up "$replicas"
  log "stack up in $(elapsed)s (plus ${t_deps}s in hack/build-deps.sh)"
  cmd_env
}

cmd_down() {
  [[ $(id -u) == 0 ]] || die "the stack needs root"
  mkdir -p "$LOGS"
  lock
  # The controller replicas hack/controller.sh started (make run leaves one
  # running), while the API server is still there to take their Leases
  # back: a controller outliving its stack retries against nothing.
  local f pid i
  for f in "$STACK"/controller*.pid; do
    [[ -f $f ]] || continue
    pid=$(cat "$f")
    # a stale pid file may name another process by now
    if [[ $(cat "/proc/$pid/comm" 2>/dev/null) == controller ]] && kill "$pid" 2>/dev/null; then
      for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -9 "$pid" 2>/dev/null || true
      log "controller $(basename "$f" .pid) stopped (pid $pid)"
    fi
    rm -f "$f"
  done
  # every Contour replica, of either replica count (a stack brought up with
  # two and taken down with one set stops both)
  stop contour-internal-2 contour-internal contour-external-2 contour-external coredns kube-proxy
  if [[ -x $BIN/kube-proxy ]]; then
    "$BIN/kube-proxy" --cleanup --proxy-mode=nftables >>"$LOGS/kube-proxy.log" 2>&1 || true
  fi
  # the node agent stops its pods and removes their namespaces on SIGTERM
  stop -g 45 nodeagent
  stop kube-scheduler kube-controller-manager
  stop kube-apiserver
  stop etcd
  net_down
  rm -rf "$STACK/etcd" "$STACK/nodeagent" "$PIDS"
  rm -f "$STACK"/proxy-protocol-*
  log "stack down in $(elapsed)s"
}

cmd_status() {
  local name rc=0 ns
  for name in "${COMPONENTS[@]}"; do
    if alive "$name"; then
      printf '%-24s running  pid %-7s rss %s MiB\n' "$name" "$(pid_of "$name")" "$(($(awk '/VmRSS/{print $2}' "/proc/$(pid_of "$name")/status") / 1024))"
    else
      printf '%-24s stopped\n' "$name"
      rc=1
    fi
  done
  if apiserver_ready; then
    echo "apiserver: ready at https://$GW:6443"
    kubectl get nodes -o wide 2>/dev/null || true
    for ns in "${FLEETS[@]}"; do
      kubectl get pods -n "$ns" -o wide 2>/dev/null || true
    done
    kubectl get svc -A 2>/dev/null || true
  else
    echo "apiserver: not ready"
    rc=1
  fi
  echo "pod network namespaces: $(compgen -G "/run/netns/$NETNS_PREFIX*" | wc -l)"
  local pp=()
  for ns in "${FLEETS[@]}"; do if proxy_protocol "$ns"; then pp+=("$ns"); fi; done
  echo "PROXY protocol (--use-proxy-protocol): ${pp[*]:-no fleet}"
  return $rc
}

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

# envoy_settled FLEET N: exactly N Envoy pods, all Ready, none terminating
envoy_settled() {
  envoy_pods_ready "$1" "$2" && [[ $(kubectl get pods -n "$1" -l app=envoy -o name | wc -l) -eq $2 ]]
}

# cut-xds IP: an Envoy pod that no longer hears from Contour, the way a pod
# behind a stalled connection is: its gRPC stream stays open (nothing is
# refused, both directions are dropped), so it keeps its configuration and
# stays Ready while every update passes it by. The chains live in the
# stack's own nft table, so `down` removes them with it.
# need_pod_ip CMD IP: IP is a pod address of the stack's pod range, and the
# stack is up
need_pod_ip() {
  [[ ${2:-} =~ ^10\.244\.[0-9]+\.[0-9]+$ ]] || die "$1: IP must be a pod IP (in $POD_CIDR), not ${2:-nothing}"
  alive etcd || die "the stack is not up"
}

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
# 8002 of the Envoy manifest above) is dropped.
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
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  env) cmd_env ;;
  status) cmd_status ;;
  restart) shift; cmd_restart "$@" ;;
  scale-envoy) shift; cmd_scale_envoy "$@" ;;
  cut-xds) shift; cmd_cut_xds "$@" ;;
  mend-xds) cmd_mend_xds ;;
  fail-ready) shift; cmd_fail_ready "$@" ;;
  mend-ready) cmd_mend_ready ;;
  add-image) shift; cmd_add_image "$@" ;;
  proxy-protocol) shift; cmd_proxy_protocol "$@" ;;
  *) echo "usage: $0 up [--envoy-replicas N] [--demo] | down | env | status | restart NAME [--down S] [--kill] | scale-envoy FLEET N | cut-xds IP | mend-xds | fail-ready IP | mend-ready | add-image REPOSITORY BINARY | proxy-protocol FLEET on|off" >&2; exit 2 ;;
esac
