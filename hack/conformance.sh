#!/usr/bin/env bash
# Knative's ingress conformance suite (RunConformance of the pinned
# knative.dev/networking, called from test/conformance, never copied) against
# hitless on the local stack: every stable, beta and alpha test, none skipped.
#
#   hack/conformance.sh [--iterations N] [--parallel P] [-- TEST-BINARY-ARGS...]
#
#   --iterations N  run N copies of the suite at once (soak; default 1,
#                   or $CONFORMANCE_ITERATIONS); each gets its own log
#   --parallel P    tests run in parallel within one copy (default 12)
#   -- ARGS         passed to the test binary, e.g. -test.run 'TestIngressConformance/update'
#                   (then the check that every test ran is skipped)
#
# Brings the stack up if needed (and down again at the end if it was not up,
# unless KEEP_STACK is set), (re)starts the controller from this checkout
# with hack/controller.sh (and stops it at the end if none was running;
# REUSE_CONTROLLER=1 keeps a running one as it is), runs the suite, prints one
# row per test and the wall time. Logs:
# .stack/logs/conformance/<time>/iteration-<i>.log.
#
# How the suite meets the stack: the test images are named ko.local/<name>,
# which the node agent maps to the binaries built from the networking module
# (.stack/images.json); the suite dials the external Envoy Service's
# load-balancer address (10.245.0.10) read from the KIngress status; the
# cluster suffix is the stack's cluster.local; the namespace is the suite's
# fixed serving-tests. The suite's host-rewrite test needs Contour's
# enableExternalNameService, which the stack's Contour config turns on
# explicitly (see hack/manifests/contour-config.yaml and the README).
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"
repo=$REPO
cd "$repo"
state=$STACK

iterations=${CONFORMANCE_ITERATIONS:-1}
parallel=12
extra=()
while (($#)); do
  case $1 in
    --iterations) iterations=${2:?--iterations needs a number}; shift 2 ;;
    --iterations=*) iterations=${1#*=}; shift ;;
    --parallel) parallel=${2:?--parallel needs a number}; shift 2 ;;
    --parallel=*) parallel=${1#*=}; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "unknown flag: $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
[[ $iterations =~ ^[1-9][0-9]*$ ]] || { echo "--iterations must be a positive number" >&2; exit 2; }
[[ $parallel =~ ^[1-9][0-9]*$ ]] || { echo "--parallel must be a positive number" >&2; exit 2; }

# Every test of RunConformance at the pinned networking: stable, beta, alpha.
expected=(basics basics/http2 grpc grpc/split headers/pre-split headers/post-split headers/probe
  hosts/multiple dispatch/path dispatch/percentage dispatch/path_and_percentage dispatch/rule retry timeout
  tls update visibility visibility/split visibility/path ingressclass websocket websocket/split
  headers/tags host-rewrite httpoption)

stack_was_up=false
if hack/stack.sh status >/dev/null 2>&1; then stack_was_up=true; fi
controller_was_running=false
if [[ -f $state/controller.pid ]] && kill -0 "$(cat "$state/controller.pid")" 2>/dev/null; then
  controller_was_running=true
fi
cleanup() {
  [[ $controller_was_running == true ]] || hack/controller.sh stop || true
  if [[ $stack_was_up == false && -z ${KEEP_STACK:-} ]]; then hack/stack.sh down || true; fi
}
trap cleanup EXIT

hack/stack.sh up >/dev/null
if [[ $controller_was_running == true && -n ${REUSE_CONTROLLER:-} ]]; then
  echo "reusing the running controller (pid $(cat "$state/controller.pid"))"
else
  hack/controller.sh start
fi
eval "$(hack/stack.sh env)"
export KUBECONFIG
kubectl get namespace serving-tests >/dev/null 2>&1 || kubectl create namespace serving-tests >/dev/null
# Pods are refused until the token controller has made the namespace's
# default ServiceAccount, and the suite does not retry that refusal: every
# test of a copy started right after the namespace was created failed with
# "serviceaccount default not found".
kubectl wait -n serving-tests --for=create serviceaccount/default --timeout=60s >/dev/null ||
  { echo "namespace serving-tests has no default ServiceAccount after 60 s (is kube-controller-manager running?)" >&2; exit 1; }

bin=$state/bin/conformance.test
go test -c -tags=e2e -o "$bin" ./test/conformance

logs=$state/logs/conformance/$(date +%Y%m%d-%H%M%S)
mkdir -p "$logs"
echo "--- conformance: $iterations iteration(s) at once, -test.parallel=$parallel, logs in $logs"
t0=$SECONDS
pids=()
for i in $(seq 1 "$iterations"); do
  (
    cd test/conformance
    exec "$bin" -test.v -test.count=1 -test.timeout=45m -test.parallel="$parallel" \
      --kubeconfig="$KUBECONFIG" \
      --ingressClass=contour.ingress.networking.knative.dev \
      --enable-alpha --enable-beta \
      --cluster-suffix=cluster.local \
      --dockerrepo=ko.local --tag=latest \
      "${extra[@]}"
  ) >"$logs/iteration-$i.log" 2>&1 &
  pids+=($!)
done
rc=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    rc=1
    echo "iteration $((i + 1)) failed; see $logs/iteration-$((i + 1)).log"
  fi
done
wall=$((SECONDS - t0))

# One row per test of the suite (the subtests RunConformance starts are
# indented by four spaces in -v output; theirs by eight).
python3 - "$logs" "$iterations" "${#extra[@]}" "${expected[@]}" <<'EOF' || rc=1
import re, sys
logs, n, filtered, expected = sys.argv[1], int(sys.argv[2]), sys.argv[3] != "0", sys.argv[4:]
row = re.compile(r"^    --- (PASS|FAIL|SKIP): TestIngressConformance/(\S+) \(([\d.]+)s\)")
results = {}
for i in range(1, n + 1):
    for line in open(f"{logs}/iteration-{i}.log", errors="replace"):
        m = row.match(line)
        if m:
            results.setdefault(m.group(2), []).append((m.group(1), float(m.group(3))))
bad = False
names = sorted(set(results) | (set() if filtered else set(expected)))
print(f"{'test':32} {'result':>10} {'slowest':>9}")
for name in names:
    rs = results.get(name, [])
    passed = sum(1 for r, _ in rs if r == "PASS")
    if not rs:
        verdict = "NOT RUN"
    elif passed == n and len(rs) == n:
        verdict = "PASS" if n == 1 else f"PASS {passed}/{n}"
    else:
        verdict = ("FAIL" if n == 1 else f"FAIL {n - passed}/{n}") + (" (skipped)" if any(r == "SKIP" for r, _ in rs) else "")
    if verdict.startswith(("FAIL", "NOT")):
        bad = True
    slowest = max((d for _, d in rs), default=0)
    print(f"{name:32} {verdict:>10} {slowest:8.1f}s")
sys.exit(1 if bad else 0)
EOF
echo "--- conformance wall time: ${wall}s for $iterations iteration(s)"
exit $rc
