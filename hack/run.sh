#!/usr/bin/env bash
# `make run`: the local stack, the controller on it, and the demo KIngress.
# `make run-serving` (--serving): the stack, Knative Serving v0.50.0 with the
# controller as its ingress, and a helloworld Knative Service.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"
repo=$REPO
cd "$repo"
if [ "${1:-}" = --serving ]; then
  hack/serving.sh up
  eval "$(hack/serving.sh env)"
  kubectl=$BIN/kubectl # named in the hints printed below
  kubectl apply -f hack/demo/helloworld.yaml >/dev/null
  echo "waiting for the helloworld Knative Service to be Ready..."
  kubectl wait -n demo ksvc/helloworld --for=condition=Ready --timeout=180s >/dev/null
  url=$(kubectl get -n demo ksvc/helloworld -o jsonpath='{.status.url}')
  host=${url#http://}
  eval "$(hack/stack.sh env)"
  echo "curl -H 'Host: $host' http://$INGRESS_ADDRESS/"
  curl -sS -H "Host: $host" "http://$INGRESS_ADDRESS/"
  cat <<EOT

Knative Serving runs on the stack with hitless as its ingress; helloworld is Ready on every Envoy pod.
Roll it to a new Revision and watch the KIngress phases (Warming, Switching) while it never drops a request:

  eval "\$(hack/serving.sh env)"
  $kubectl patch ksvc -n demo helloworld --type=merge -p '{"spec":{"template":{"metadata":{"annotations":{"rollout":"'\$RANDOM'"}}}}}'
  $kubectl get kingress -n demo helloworld -w

Pod logs: .stack/logs/pods/; Serving's e2e knobs: hack/serving.sh env; \`make stack-down\` stops everything.
EOT
  exit 0
fi
hack/build-deps.sh --demo
# The controller compiles while the stack starts (that is mostly waiting on
# processes); hack/controller.sh start then finds it built.
hack/controller.sh build &
build=$!
hack/stack.sh up --demo
wait "$build" || { echo "building the controller failed" >&2; exit 1; }
hack/controller.sh start
eval "$(hack/stack.sh env)"
kubectl=$BIN/kubectl # named in the hints printed below
kubectl apply -f hack/demo/demo.yaml >/dev/null
echo "waiting for the demo KIngress to be Ready..."
kubectl wait -n demo kingress/demo --for=condition=Ready --timeout=180s >/dev/null
echo "curl -H 'Host: demo.example.com' http://$INGRESS_ADDRESS/"
curl -fsS --max-time 5 -H 'Host: demo.example.com' "http://$INGRESS_ADDRESS/" |
  python3 -c 'import json,sys; r=json.load(sys.stdin)["request"]; print("answered by backend", r["headers"]["X-Backend"][0])'
echo "make run: the demo answered $(elapsed "$T0" 0) s after it started"

cat <<EOT

The demo KIngress is Ready on every Envoy pod. Try it:

  eval "\$(make -s stack-env)"
  for i in 1 2 3 4 5 6; do curl -s -H 'Host: demo.example.com' http://\$INGRESS_ADDRESS/ | python3 -c 'import json,sys; print(json.load(sys.stdin)["request"]["headers"]["X-Backend"][0])'; done

Watch a rollout (the Ready reason tells the phase: Warming, Switching):

  $kubectl get kingress -n demo demo -w -o custom-columns=GEN:.metadata.generation,READY:.status.conditions[?\(@.type==\"Ready\"\)].status,REASON:.status.conditions[?\(@.type==\"Ready\"\)].reason &
  $kubectl patch kingress -n demo demo --type=json -p '[{"op":"replace","path":"/spec/rules/0/http/paths/0/splits/0/percent","value":100},{"op":"remove","path":"/spec/rules/0/http/paths/0/splits/1"}]'
  $kubectl get httpproxy -n demo -L hitless.knative.dev/role

The controller logs to .stack/logs/controller.log; \`make stack-down\` stops everything.
EOT
