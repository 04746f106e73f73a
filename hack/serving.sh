#!/usr/bin/env bash
# Knative Serving v0.50.0 on the local stack, with hitless as its ingress.
#
#   hack/serving.sh up     build Serving (hack/build-deps.sh --serving), bring the
#                          stack and the hitless controller up, install Serving
#                          from its module's config/core, wait until it serves
#   hack/serving.sh down   remove Serving (its namespace, CRDs, webhooks, roles)
#   hack/serving.sh env    exports for Serving's test suites and our tests
#   hack/serving.sh apart  fail if applying hitless's config/ would replace an
#                          object of Serving's config/core (kind, namespace, name)
#
# What is installed, and from where:
# - knative.dev/serving@v0.50.0 config/core, every file as released except the
#   two HorizontalPodAutoscalers (the stack runs no metrics server, so they
#   would only log errors) and the ConfigMap the stack's hitless controller
#   shares with Serving in knative-serving (config-observability, which
#   hack/controller.sh sets to Prometheus on loopback): it is created from
#   Serving's copy only when absent, never overwritten. hitless's own
#   config/ shares no object with Serving's (`hack/serving.sh apart` checks).
#   `ko://knative.dev/serving/cmd/<name>` becomes ko.local/knative-serving/<name>,
#   which the node agent maps to the binary built from the module (hack/stack.sh
#   writes the image map); ko.local is one of the registries Serving never
#   resolves tags against, as on a ko-based dev cluster.
# - the Image CRD from knative.dev/caching (Serving's 999-cache.yaml needs it);
#   the networking CRDs and config-network come from knative.dev/networking
#   (hack/stack.sh and hack/controller.sh apply them).
# - config-network ingress-class: contour.ingress.networking.knative.dev, so
#   Serving's KIngresses go to hitless; config-domain: $SERVING_DOMAIN.
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
HACK_KUBECONFIG=$STACK/kubeconfig
MOD=$REPO/hack/tools/serving
NS=knative-serving
INGRESS_CLASS=contour.ingress.networking.knative.dev
SERVING_DOMAIN=${SERVING_DOMAIN:-example.com}
CMD_REPO=ko.local/knative-serving   # hack/stack.sh SERVING_CMD_REPO
TEST_REPO=ko.local/serving-test     # hack/stack.sh SERVING_TEST_REPO
# shared with the hitless controller (hack/controller.sh): never overwritten
SHARED_CONFIGMAPS=(observability.yaml)

module_dir() { (cd "$MOD" && go list -m -f '{{.Dir}}' "$1"); }

apply_core() { render_core | kubectl apply -f - >/dev/null; }

# object_ids prints kind/namespace/name of each object of a manifest stream.
object_ids() {
  kubectl create --dry-run=client -f - \
    -o go-template='{{.kind}}/{{or .metadata.namespace ""}}/{{.metadata.name}}{{"\n"}}' | LC_ALL=C sort -u
}

# cmd_apart: `kubectl apply -f config/` next to Serving must leave every
# object of Serving's alone. A ConfigMap of the same name in knative-serving
# (as config-leader-election once was) would replace Serving's settings
# with hitless's, for every Serving component.
cmd_apart() {
  local ours theirs both f
  ours=$(for f in "$REPO"/config/*.yaml; do printf -- '---\n'; cat "$f"; printf '\n'; done | object_ids)
  theirs=$(render_core | object_ids)
  [[ -n $ours && -n $theirs ]] || die "could not list the objects of config/ or of Serving's config/core"
  both=$(LC_ALL=C comm -12 <(printf '%s\n' "$ours") <(printf '%s\n' "$theirs"))
  if [[ -n $both ]]; then
    die "config/ would replace objects of Serving's config/core: $(tr '\n' ' ' <<<"$both")"
  fi
  log "config/ ($(wc -l <<<"$ours") objects) shares none with Serving's config/core ($(wc -l <<<"$theirs") objects)"
}

# render_core [--no-namespace] prints Serving's config/core as one stream, images
# replaced (without the namespace, which `down` keeps: the hitless controller's
# config lives in it too).
render_core() {
  local dir f base
  dir=$(module_dir knative.dev/serving)/config/core
  while IFS= read -r f; do
    base=$(basename "$f")
    case $base in
      *-hpa.yaml) continue ;;
      100-namespace.yaml) [[ ${1:-} != --no-namespace ]] || continue ;;
    esac
    [[ $f == */configmaps/* ]] && [[ " ${SHARED_CONFIGMAPS[*]} " == *" $base "* ]] && continue
    printf -- '---\n'
    sed -E "s#ko://knative.dev/serving/cmd/([a-z-]+)#$CMD_REPO/\1#g" "$f"
    printf '\n'
  done < <(find "$dir" -name '*.yaml' | LC_ALL=C sort)
}

serving_ready() {
  local d
  for d in controller webhook activator autoscaler; do
    [[ $(kubectl -n "$NS" get deploy "$d" -o jsonpath='{.status.availableReplicas}' 2>/dev/null) -ge 1 ]] || return 1
  done
}

# webhook_serves: the API server reaches Serving's webhook (defaulting a
# Knative Service through a server-side dry run)
webhook_serves() {
  render "$REPO/hack/manifests/serving-webhook-check.yaml" IMAGE="$TEST_REPO/helloworld" |
    kubectl apply --dry-run=server -f - >/dev/null 2>&1
}

cmd_up() {
  local t0=$SECONDS dir cm
  "$REPO/hack/build-deps.sh" --no-apt --serving
  "$REPO/hack/stack.sh" up # rewrites the image map with Serving's binaries
  "$REPO/hack/controller.sh" start

  kubectl apply -f "$(module_dir knative.dev/caching)/config/image.yaml" >/dev/null
  kubectl wait --for=condition=Established --timeout=60s crd/images.caching.internal.knative.dev >/dev/null
  dir=$(module_dir knative.dev/serving)/config/core
  for cm in "${SHARED_CONFIGMAPS[@]}"; do
    kubectl get -f "$dir/configmaps/$cm" >/dev/null 2>&1 || kubectl create -f "$dir/configmaps/$cm" >/dev/null
  done
  # CRDs must be Established before the objects of their kinds; a first pass
  # may fail on those, the second after the wait does not
  render_core | kubectl apply -f - >/dev/null 2>&1 || true
  kubectl wait --for=condition=Established --timeout=60s \
    crd/services.serving.knative.dev crd/revisions.serving.knative.dev crd/routes.serving.knative.dev \
    crd/configurations.serving.knative.dev >/dev/null
  # Writes made while Serving starts are retried for up to 120 s: Serving's
  # webhook registers the rules of its ConfigMap validation as soon as it runs,
  # which can be before its pod answers on its Service; until it does the API
  # server refuses every write those rules cover ("failed calling webhook
  # config.webhook.serving.knative.dev ... connection refused").
  retry -i 2 -v 120 apply_core
  retry -i 2 -v 120 kubectl -n "$NS" patch configmap config-network --type=merge \
    -p "{\"data\":{\"ingress-class\":\"$INGRESS_CLASS\"}}"
  retry -i 2 -v 120 kubectl -n "$NS" patch configmap config-domain --type=merge \
    -p "{\"data\":{\"$SERVING_DOMAIN\":\"\"}}"

  log "waiting for Serving's controller, webhook, activator and autoscaler"
  local deadline=$((SECONDS + 300))
  until serving_ready && webhook_serves; do
    ((SECONDS < deadline)) || die "Serving is not ready after 300s: kubectl -n $NS get pods; logs in $STACK/logs/pods/${NS}_*"
    sleep 1
  done
  log "Serving $(cd "$MOD" && go list -m -f '{{.Version}}' knative.dev/serving) ready in $((SECONDS - t0))s (domain $SERVING_DOMAIN, ingress class $INGRESS_CLASS)"
}

cmd_down() {
  [[ -f $STACK/kubeconfig ]] || return 0
  kubectl get namespace "$NS" >/dev/null 2>&1 || return 0
  # Knative Services first, while Serving's controllers still run, so their
  # KIngresses and the HTTPProxies made from them go the normal way.
  kubectl delete ksvc --all -A --wait=true --timeout=120s >/dev/null 2>&1 || true
  kubectl delete validatingwebhookconfigurations,mutatingwebhookconfigurations \
    -l app.kubernetes.io/name=knative-serving --ignore-not-found >/dev/null
  render_core --no-namespace | kubectl delete --ignore-not-found --wait=false -f - >/dev/null 2>&1 || true
  log "Serving removed (the hitless controller and the stack keep running)"
}

cmd_env() {
  cat <<EOF
export KUBECONFIG=$STACK/kubeconfig
export SYSTEM_NAMESPACE=$NS
export GATEWAY_OVERRIDE=envoy
export GATEWAY_NAMESPACE_OVERRIDE=contour-external
export KO_DOCKER_REPO=$TEST_REPO
export SERVING_DOMAIN=$SERVING_DOMAIN
export SERVING_CONFORMANCE_TEST=$BIN/serving/conformance-api-v1.test
export SERVING_E2E_TEST=$BIN/serving/e2e.test
EOF
}

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  env) cmd_env ;;
  render) render_core ;;
  apart) cmd_apart ;;
  *) echo "usage: $0 up | down | env | render | apart" >&2; exit 2 ;;
esac
