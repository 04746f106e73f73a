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
#   hack/stack.sh add-image REPO BINARY     pods of image repository REPO run BINARY
#                                           (hack/release.sh check: the released image)
# The fault tests' commands (restart, scale-envoy, cut-xds, fail-ready,
# proxy-protocol) are hack/faults.sh; `up` and `down` undo what they leave.
#
# State lives in $HITLESS_STACK_DIR (default <repo>/.stack): certs, kubeconfig,
# pid files, logs/<component>.log, logs/pods/*.log, proxy-protocol-<fleet>
# (present while hack/faults.sh has that fleet on PROXY protocol). Binaries
# come from ${HITLESS_CACHE:-$HOME/.cache/hitless}/bin (hack/build-deps.sh).
# Paths, addresses, ports and the process handling are in
# hack/lib/stack-common.sh, shared with hack/faults.sh.
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
# shellcheck source=hack/lib/stack-common.sh
source "$REPO/hack/lib/stack-common.sh"

# ---------------------------------------------------------------- networking

cni_conflist() {
  render "$REPO/hack/manifests/cni.conflist" NETWORK="$CNI_NETWORK" BRIDGE="$BRIDGE" IPAM_DIR="$STACK/cni/ipam" \
    POD_CIDR="$POD_CIDR" RANGE_START="$POD_RANGE_START" GATEWAY="$GW"
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
  render "$REPO/hack/manifests/Corefile" LISTEN_IP="$GW" CLUSTER_DOMAIN="$CLUSTER_DOMAIN" KUBECONFIG="$KCFG"
}

kube_dns_manifest() {
  render "$REPO/hack/manifests/kube-dns.yaml" CLUSTER_IP="$DNS_SVC_IP" HOST_IP="$GW" NODE="$NODE"
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
  render "$REPO/hack/manifests/fleet.yaml" NAMESPACE="$ns" REPLICAS="$replicas" BOOTSTRAP="$bootstrap" SERVICE_TYPE="$svc_type"
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
  # cert-manager and the ACME servers (hack/certmanager.sh), while the API
  # server they talk to is still there
  stop cert-manager pebble pebble-challtestsrv
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

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  env) cmd_env ;;
  status) cmd_status ;;
  add-image) shift; cmd_add_image "$@" ;;
  *) echo "usage: $0 up [--envoy-replicas N] [--demo] | down | env | status | add-image REPOSITORY BINARY" >&2; exit 2 ;;
esac
