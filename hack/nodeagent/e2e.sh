#!/usr/bin/env bash
# End-to-end check of the node agent against a private, throw-away control
# plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler from
# hack/build-deps.sh) on its own ports and its own bridge, so it never touches
# the stack of hack/stack.sh. Needs root. Prints timings and "N passed, N failed".
#
#   hack/nodeagent/e2e.sh [NODEAGENT_BINARY]
#
# Everything it starts is stopped and everything it creates is removed on exit.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BIN=${HITLESS_CACHE:-$HOME/.cache/hitless}/bin
AGENT=${1:-}
WORK=$(mktemp -d /tmp/hitless-nodeagent-e2e.XXXXXX)
BRIDGE=hitless-test0
GW=10.250.0.1
NODE=hitless-e2e-node
ETCD_PORT=12379
API_PORT=16443
KCFG=$WORK/kubeconfig
PIDS=()
PASS=0
FAIL=0

log() { printf '%s e2e: %s\n' "$(date +%H:%M:%S.%3N)" "$*" >&2; }
now() { echo "${EPOCHREALTIME/,/.}"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.2f", b-a}'; }
kubectl() { "$BIN/kubectl" --kubeconfig "$KCFG" "$@"; }
check() {
  local what=$1
  shift
  if "$@" >/dev/null 2>&1; then
    PASS=$((PASS + 1))
    log "ok   $what"
  else
    FAIL=$((FAIL + 1))
    log "FAIL $what"
  fi
}
# wait_for SECONDS CMD... : polls CMD every 50 ms
wait_for() {
  local deadline=$(($(date +%s) + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    (($(date +%s) < deadline)) || return 1
    sleep 0.05
  done
}
start() {
  local name=$1
  shift
  "$@" >>"$WORK/$name.log" 2>&1 &
  PIDS+=("$!")
  eval "PID_${name//-/_}=$!"
}
stop_pid() {
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 200; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}
cleanup() {
  local i
  set +e
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do stop_pid "${PIDS[i]}"; done
  # whatever an agent killed with SIGKILL left (its own start-up cleanup is tested above)
  for ns in /run/netns/hitless-*; do
    [[ -e $ns ]] || continue
    grep -qs "\"$(basename "$ns")\"" "$WORK"/state/pods/*/record.json || continue
    ip netns pids "$(basename "$ns")" | xargs -r kill -KILL
    ip netns del "$(basename "$ns")"
  done
  ip link del "$BRIDGE" 2>/dev/null
  # keep the logs of the last run for a look
  rm -rf /tmp/hitless-nodeagent-e2e-logs && mkdir -p /tmp/hitless-nodeagent-e2e-logs
  cp "$WORK"/*.log /tmp/hitless-nodeagent-e2e-logs/ 2>/dev/null
  cp -r "$WORK"/logs /tmp/hitless-nodeagent-e2e-logs/pods 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

[[ $(id -u) == 0 ]] || { log "must run as root"; exit 1; }
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl cni/bridge; do
  [[ -x $BIN/$b ]] || { log "$BIN/$b missing: run hack/build-deps.sh"; exit 1; }
done
if [[ -z $AGENT ]]; then
  AGENT=$WORK/nodeagent
  (cd "$HERE" && go build -o "$AGENT" .)
fi

# ---- a private control plane
mkdir -p "$WORK/pki" "$WORK/state" "$WORK/logs"
openssl genrsa -out "$WORK/pki/sa.key" 2048 2>/dev/null
openssl rsa -in "$WORK/pki/sa.key" -pubout -out "$WORK/pki/sa.pub" 2>/dev/null
TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
echo "$TOKEN,admin,admin,system:masters" >"$WORK/tokens.csv"
cat >"$KCFG" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: "https://127.0.0.1:$API_PORT", insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: "$TOKEN"}}]
contexts: [{name: e2e, context: {cluster: e2e, user: admin}}]
current-context: e2e
EOF
# the bridge first: the apiserver advertises its address. The CNI plugin adopts
# it; isGateway stays false so that it changes no sysctl (net.ipv4.ip_forward).
ip link add "$BRIDGE" type bridge
ip addr add "$GW/24" dev "$BRIDGE"
ip link set "$BRIDGE" up
cat >"$WORK/net.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "hitless-e2e", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": false, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$WORK/ipam",
            "ranges": [[{"subnet": "10.250.0.0/24", "rangeStart": "10.250.0.10", "gateway": "$GW"}]]}},
  {"type": "loopback"}]}
EOF
# python runs from the host as given (empty mapping)
echo "{\"selftest\": \"$AGENT\", \"python\": \"\"}" >"$WORK/images.json"

T=$(now)
start etcd "$BIN/etcd" --name e2e --data-dir "$WORK/etcd" --unsafe-no-fsync \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls http://127.0.0.1:12380 --initial-advertise-peer-urls http://127.0.0.1:12380 \
  --initial-cluster e2e=http://127.0.0.1:12380 --log-level warn
start apiserver "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address 127.0.0.1 --secure-port "$API_PORT" --advertise-address "$GW" --cert-dir "$WORK/pki" \
  --token-auth-file "$WORK/tokens.csv" --authorization-mode RBAC --service-cluster-ip-range 10.97.0.0/16 \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$WORK/pki/sa.pub" --service-account-signing-key-file "$WORK/pki/sa.key"
wait_for 60 kubectl get --raw /readyz || { log "apiserver not ready: $(tail -5 "$WORK/apiserver.log")"; exit 1; }
log "apiserver ready after $(since "$T")s"
start kcm "$BIN/kube-controller-manager" --kubeconfig "$KCFG" --leader-elect=false \
  --controllers='*,-nodeipam,-nodelifecycle,-cloud-node-lifecycle' --bind-address 127.0.0.1 --secure-port 20257 \
  --service-account-private-key-file "$WORK/pki/sa.key" --root-ca-file "$WORK/pki/apiserver.crt" --use-service-account-credentials=false
start scheduler "$BIN/kube-scheduler" --kubeconfig "$KCFG" --leader-elect=false --bind-address 127.0.0.1 --secure-port 20259

agent_up() {
  T=$(now)
  start agent "$AGENT" --kubeconfig "$KCFG" --node-name "$NODE" --node-ip "$GW" --pod-cidr 10.250.0.0/24 \
    --cni-conf "$WORK/net.conflist" --cni-bin-dir "$BIN/cni" --image-map "$WORK/images.json" \
    --state-dir "$WORK/state" --log-dir "$WORK/logs" --dns-ip "$GW" --kubernetes-service-host 10.97.0.1
  wait_for 30 node_ready || { log "node not Ready: $(tail -5 "$WORK/agent.log")"; exit 1; }
}
# pod_is POD JSONPATH VALUE: the pod's JSONPATH renders as VALUE (re-read at every call)
pod_is() { [[ $(kubectl -n e2e get pod "$1" -o jsonpath="$2") == "$3" ]]; }
node_ready() { [[ $(kubectl get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]; }
agent_up
log "node Ready $(since "$T")s after the agent started"
check "node has InternalIP $GW, podCIDR and no taints" \
  test "$(kubectl get node "$NODE" -o jsonpath='{.status.addresses[0].address} {.spec.podCIDR} {.spec.taints}')" == "$GW 10.250.0.0/24 "
kubectl get node "$NODE" -o yaml >"$WORK/node.log"
check "node lease is renewed" kubectl -n kube-node-lease get lease "$NODE"
wait_for 30 kubectl -n default get serviceaccount default

# ---- a Deployment behind a Service
kubectl create namespace e2e >/dev/null
wait_for 30 kubectl -n e2e get serviceaccount default
kubectl -n e2e create secret generic creds --from-literal=token=s3cr3t >/dev/null
kubectl -n e2e create configmap cfg --from-literal=greeting=hello >/dev/null
T=$(now)
kubectl apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: e2e}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 10
      initContainers:
      - name: setup
        image: ko.local/hitless/selftest:latest
        args: ["__selftest-write", "/data/init.txt", "hello from init of \$(POD_NAME)"]
        env: [{name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]
        volumeMounts: [{name: data, mountPath: /data}]
      containers:
      - name: server
        image: ko.local/hitless/selftest:latest@sha256:0123
        args: ["__selftest-server", "--port", "8080"]
        ports: [{name: http, containerPort: 8080}]
        env:
        - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
        - {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
        - {name: TOKEN, valueFrom: {secretKeyRef: {name: creds, key: token}}}
        - {name: GREETING, valueFrom: {configMapKeyRef: {name: cfg, key: greeting}}}
        - {name: MESSAGE, value: "\$(GREETING) from \$(POD_NAME) at \$(POD_IP) with \$(TOKEN)"}
        volumeMounts:
        - {name: data, mountPath: /data}
        - {name: podinfo, mountPath: /etc/podinfo, readOnly: true}
        readinessProbe:
          periodSeconds: 1
          httpGet: {path: /healthz, port: http, httpHeaders: [{name: X-Probe, value: selftest}]}
        lifecycle:
          preStop: {exec: {command: ["selftest", "__selftest-write", "/data/prestop.txt", "bye"]}}
      volumes:
      - {name: data, emptyDir: {}}
      - name: podinfo
        downwardAPI: {items: [{path: labels, fieldRef: {fieldPath: metadata.labels}}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: e2e}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
EOF
ready_endpoints() {
  [[ $(kubectl -n e2e get endpointslices -l kubernetes.io/service-name=web \
    -o jsonpath='{range .items[*].endpoints[?(@.conditions.ready==true)]}{.addresses[0]}{"\n"}{end}' | grep -c .) == "$1" ]]
}
wait_for 60 kubectl -n e2e wait --for=condition=Ready pod -l app=web --timeout=1s || true
log "deployment pods Ready $(since "$T")s after apply (includes scheduling, ReplicaSet, init container, 1 s probe period)"
check "two ready endpoints in the Service's EndpointSlice" wait_for 10 ready_endpoints 2
log "EndpointSlice has both endpoints ready $(since "$T")s after apply"
kubectl -n e2e get pods -o wide >&2
POD=$(kubectl -n e2e get pods -l app=web -o jsonpath='{.items[0].metadata.name}')
UID_=$(kubectl -n e2e get pod "$POD" -o jsonpath='{.metadata.uid}')
IP=$(kubectl -n e2e get pod "$POD" -o jsonpath='{.status.podIP}')
BODY=$(curl -s --max-time 2 "http://$IP:8080/")
log "GET http://$IP:8080/ -> $BODY"
check "pod answers from the host with its hostname" grep -q "\"hostname\":\"$POD\"" <<<"$BODY"
check "env: fieldRefs, secretKeyRef, configMapKeyRef and \$(VAR) expansion" \
  grep -q "\"MESSAGE\":\"hello from $POD at $IP with s3cr3t\"" <<<"$BODY"
check "init container ran first and wrote the shared emptyDir" grep -q "\"init\":\"hello from init of $POD\"" <<<"$BODY"
check "downwardAPI volume at /etc/podinfo" grep -q 'app=\\"web\\"' <<<"$BODY"
check "resolv.conf points at cluster DNS with the namespace search path" \
  grep -q 'nameserver 10.250.0.1\\nsearch e2e.svc.cluster.local svc.cluster.local cluster.local\\noptions ndots:5' <<<"$BODY"
check "projected service account token is mounted" \
  kubectl -n e2e exec "$POD" -c server -- test -s /var/run/secrets/kubernetes.io/serviceaccount/token
check "kube-root-ca.crt is projected too" \
  kubectl -n e2e exec "$POD" -c server -- test -s /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
check "the host has no /var/run/secrets/kubernetes.io" test ! -e /var/run/secrets/kubernetes.io
check "kubectl logs reads the container log" grep -q "listening on 8080" <(kubectl -n e2e logs "$POD" -c server)
check "kubectl exec runs in the pod's network namespace" \
  grep -q "$IP" <(kubectl -n e2e exec "$POD" -c server -- cat /etc/hosts)
check "container status is running with a start time and ready" test \
  "$(kubectl -n e2e get pod "$POD" -o jsonpath='{.status.containerStatuses[0].ready} {.status.containerStatuses[0].started} {.status.phase} {.status.hostIP}')" \
  == "true true Running $GW"

# ---- readiness follows the probe: a pod that never gets ready stays out of the EndpointSlice
kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: unready, namespace: e2e, labels: {app: web}}
spec:
  containers:
  - name: server
    image: selftest
    args: ["__selftest-server", "--port", "8080"]
    readinessProbe: {periodSeconds: 1, httpGet: {path: /healthz, port: 8080}}
EOF
wait_for 20 pod_is unready '{.status.phase}' Running
sleep 3
check "a pod failing its readiness probe is Running but not Ready" \
  test "$(kubectl -n e2e get pod unready -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == False
check "and is not a ready endpoint" ready_endpoints 2

# ---- timing of a bare pod, a host network pod, a liveness probe
T=$(now)
kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: bare, namespace: e2e}
spec:
  containers: [{name: main, image: selftest, args: ["__selftest-server", "--port", "8080"]}]
EOF
wait_for 20 pod_is bare '{.status.conditions[?(@.type=="Ready")].status}' True
log "a pod without probes is Ready $(since "$T")s after kubectl apply returned"
kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: hostnet, namespace: e2e}
spec:
  hostNetwork: true
  containers:
  - name: main
    image: selftest
    args: ["__selftest-server", "--port", "18080"]
    readinessProbe: {periodSeconds: 1, tcpSocket: {port: 18080}}
---
apiVersion: v1
kind: Pod
metadata: {name: liveness, namespace: e2e}
spec:
  containers:
  - name: main
    image: selftest
    args: ["__selftest-server", "--port", "8080"]
    livenessProbe: {periodSeconds: 1, failureThreshold: 1, httpGet: {path: /healthz, port: 8080}}
EOF
check "host network pod: podIP is the node IP and it is Ready (tcpSocket probe)" wait_for 20 pod_is hostnet \
  '{.status.podIP} {.status.conditions[?(@.type=="Ready")].status}' "$GW True"
check "host network pod answers on the node IP" wait_for 5 curl -sf --max-time 1 "http://$GW:18080/"
liveness_restarted() { (($(kubectl -n e2e get pod liveness -o jsonpath='{.status.containerStatuses[0].restartCount}') >= 1)); }
check "a failing liveness probe restarts the container" wait_for 20 liveness_restarted
kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: sidecar, namespace: e2e}
spec:
  restartPolicy: Never
  initContainers:
  - name: side
    image: selftest
    restartPolicy: Always
    args: ["__selftest-server", "--port", "9090"]
    readinessProbe: {periodSeconds: 1, exec: {command: ["selftest", "__selftest-exit", "0"]}}
  containers:
  - name: main
    image: selftest
    command: ["/ko-app/selftest"]
    args: ["__selftest-exit", "0"]
EOF
check "a pod with a sidecar init container (exec readiness probe) completes: Succeeded" wait_for 20 pod_is sidecar \
  '{.status.phase} {.status.containerStatuses[0].state.terminated.exitCode}' "Succeeded 0"
check "and its sidecar was stopped" wait_for 15 pod_is sidecar '{.status.initContainerStatuses[0].state.terminated.reason}' Error
kubectl -n e2e delete pod bare hostnet liveness sidecar --wait=true >/dev/null

# ---- a Never pod that fails, an unmapped image
kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: job, namespace: e2e}
spec:
  restartPolicy: Never
  containers: [{name: main, image: selftest, args: ["__selftest-exit", "3"], terminationMessagePolicy: FallbackToLogsOnError}]
---
apiVersion: v1
kind: Pod
metadata: {name: unmapped, namespace: e2e}
spec:
  containers: [{name: main, image: docker.io/library/nginx:1.27}]
---
apiVersion: v1
kind: Pod
metadata: {name: crash, namespace: e2e}
spec:
  containers: [{name: main, image: selftest, args: ["__selftest-exit", "1"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: oom, namespace: e2e}
spec:
  containers:
  - name: main
    image: example.local/python:3
    command: [python3, -c, "b = bytearray(200*1024*1024); import time; time.sleep(30)"]
    resources: {limits: {memory: 64Mi}}
EOF
check "restartPolicy Never pod exiting 3 is Failed with exit code 3" wait_for 20 pod_is job \
  '{.status.phase} {.status.containerStatuses[0].state.terminated.exitCode}' "Failed 3"
check "FallbackToLogsOnError puts the log tail in the termination message" pod_is job \
  '{.status.containerStatuses[0].state.terminated.message}' "exiting with 3"
check "unmapped image waits with reason ErrImagePull" wait_for 20 pod_is unmapped \
  '{.status.containerStatuses[0].state.waiting.reason}' ErrImagePull
restarted_twice() { (($(kubectl -n e2e get pod crash -o jsonpath='{.status.containerStatuses[0].restartCount}') >= 2)); }
check "a crashing container is restarted with back-off" wait_for 20 restarted_twice
# the memory cgroup the agent logged at start-up ("" when limits are not enforced)
CG_ROOT=$(grep -o 'limits enforced" cgroup=[^ ]*' "$WORK/agent.log" | head -1 | cut -d= -f2)
if [[ -n $CG_ROOT ]]; then
  oom_restarted() {
    pod_is oom '{.status.containerStatuses[0].lastState.terminated.reason} {.status.containerStatuses[0].lastState.terminated.exitCode}' \
      "OOMKilled 137" && (($(kubectl -n e2e get pod oom -o jsonpath='{.status.containerStatuses[0].restartCount}') >= 1))
  }
  check "a container over its 64Mi memory limit is OOMKilled (137) and restarted" wait_for 20 oom_restarted
else
  log "skip: memory limits are not enforced on this host"
fi
kubectl -n e2e get pod job unmapped crash oom >&2

# ---- deletion
T=$(now)
kubectl -n e2e delete pod "$POD" --wait=true >/dev/null
log "pod $POD deleted (kubectl delete --wait returned) after $(since "$T")s"
check "deleted pod's netns is gone" test ! -e "/run/netns/hitless-$UID_"
check "its preStop exec hook ran without error" bash -c "! grep -q 'preStop hook failed' '$WORK/agent.log'"
check "deleted pod no longer answers" bash -c "! curl -s --max-time 1 http://$IP:8080/"
T=$(now)
kubectl -n e2e delete pod job unmapped crash unready oom --wait=true >/dev/null
log "four more pods deleted after $(since "$T")s"
check "the Deployment replaced the pod and both are ready endpoints again" wait_for 30 ready_endpoints 2

# ---- agent shutdown stops everything; a SIGKILLed agent's leftovers are cleaned at start
# pod_netns: how many network namespaces of this API server's pods exist
pod_netns() {
  local uid n=0
  for uid in $(kubectl get pods -A -o jsonpath='{.items[*].metadata.uid}'); do
    [[ -e /run/netns/hitless-$uid ]] && n=$((n + 1))
  done
  echo "$n"
}
UIDS_BEFORE=$(kubectl get pods -A -o jsonpath='{.items[*].metadata.uid}')
check "before shutdown: one netns per pod" test "$(pod_netns)" == 2
stop_pid "$PID_agent"
check "SIGTERM: the agent stopped its pods and removed their netns" test "$(pod_netns)" == 0
check "SIGTERM: no pod process is left" bash -c "! pgrep -f __selftest-serve[r]"
agent_up
check "after the agent stopped, no endpoint is ready" ready_endpoints 0
T=$(now)
wait_for 30 ready_endpoints 2
log "after a restart both pods are ready endpoints again after $(since "$T")s"
container_ids() { kubectl -n e2e get pods -l app=web -o jsonpath='{.items[*].status.containerStatuses[0].containerID}'; }
OLD_IDS=$(container_ids)
kill -KILL "$PID_agent"
sleep 0.5
check "SIGKILL leaves the pod processes running" pgrep -f __selftest-serve[r]
agent_up
restarted_all() {
  local id
  for id in $OLD_IDS; do grep -qw "$id" <<<"$(container_ids)" && return 1; done
  ready_endpoints 2
}
T=$(now)
check "a restarted agent cleaned up the previous run and runs the pods again" wait_for 30 restarted_all
log "pods Ready again $(since "$T")s after the agent restarted"
check "one netns per pod after the restart" test "$(pod_netns)" == 2
check "the previous run's netns and processes are gone" test "$(pgrep -fc __selftest-serve[r])" == 2
# cgroup_procs: how many processes are in the agent's container cgroups
cgroup_procs() { cat "$CG_ROOT"/*/*/cgroup.procs 2>/dev/null | wc -l; }
[[ -z $CG_ROOT ]] || check "only the two new containers are in memory cgroups" test "$(cgroup_procs)" == 2
stop_pid "$PID_agent"
check "final shutdown leaves no pod process" bash -c "! pgrep -f __selftest-serve[r]"
[[ -z $CG_ROOT ]] || check "final shutdown leaves no container cgroup" bash -c "! compgen -G '$CG_ROOT/*/'"

printf '%d passed, %d failed\n' "$PASS" "$FAIL"
((FAIL == 0))
