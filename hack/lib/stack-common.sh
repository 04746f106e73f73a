# shellcheck shell=bash disable=SC2034 # its variables are read by the scripts that source it
# The local stack's layout and the parts of it that both hack/stack.sh (up,
# down) and hack/faults.sh (the fault tests' restarts, scaling, cuts) run:
# paths, addresses and ports, process handling (start, stop, pid files), the
# control plane's start, Contour's start and Envoy's readiness. Sourced after
# hack/lib.sh.

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
# image repository of cert-manager's ACME HTTP-01 solver (hack/certmanager.sh)
CERTMANAGER_IMAGE_REPO=ko.local/cert-manager
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

# ---------------------------------------------------------------- Contour and Envoy

contour_config() {
  render "$REPO/hack/manifests/contour-config.yaml" FLEET="$1"
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
# (hack/faults.sh proxy-protocol FLEET on)
proxy_protocol() { [[ -f $STACK/proxy-protocol-$1 ]]; }

# probe_envoy IP FLEET: the stack's own route answers through that Envoy,
# to a client that sends a PROXY protocol header when the fleet wants one
probe_envoy() {
  local pp=()
  if proxy_protocol "$2"; then pp=(--haproxy-protocol); fi
  [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "${pp[@]}" -H "Host: stack-probe.$2.hitless.local" "http://$1/") == 200 ]]
}

# envoy_settled FLEET N: exactly N Envoy pods, all Ready, none terminating
envoy_settled() {
  envoy_pods_ready "$1" "$2" && [[ $(kubectl get pods -n "$1" -l app=envoy -o name | wc -l) -eq $2 ]]
}

# ---------------------------------------------------------------- locking

# one up, down, restart or proxy-protocol at a time
lock() {
  [[ -n ${LOCKED:-} ]] && return 0
  exec 9>"$STACK/.lock"
  flock -w 120 9 || die "another hack/stack.sh up/down or hack/faults.sh command holds $STACK/.lock"
  LOCKED=1
}
