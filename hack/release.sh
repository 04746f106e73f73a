#!/usr/bin/env bash
# The install a cluster operator applies (`make release`), and its check.
#
#   hack/release.sh            write dist/: release.yaml (config/ with the
#                              controller image resolved by ko), the image
#                              itself (dist/oci, an OCI layout, and
#                              dist/controller.tar), and
#                              contour.yaml (Contour's CRDs and the layout
#                              hitless expects: config/contour/contour.yaml)
#   hack/release.sh contour    print the Contour layout (config/contour/contour.yaml
#                              is its output; hack/test-unit.sh checks it is current)
#   hack/release.sh check      on the running local stack: server-side dry run of
#                              both manifests, then the controller Deployment of
#                              release.yaml run from the image ko built, until
#                              its replicas have started; removed again after
#   hack/release.sh any-path   make release from a copy of the checkout at a path
#                              with capitals and a space (no stack needed)
#
# Nothing is pushed: KO_DOCKER_REPO (default hitless.local) only names the
# image. ko needs its base image from a registry, and no registry is
# reachable here, so the base is made here (a passwd naming the nonroot user,
# the CA bundle, /tmp) and served from a registry on loopback for the
# duration of the build (crane registry serve). To publish, run ko with your
# registry instead: KO_DOCKER_REPO=<registry>/hitless ko resolve -f config/ > release.yaml
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
DIST=$REPO/dist
CONTOUR_VERSION=v1.33.8
ENVOY_IMAGE=docker.io/envoyproxy/envoy:distroless-v1.38.9
REGISTRY=127.0.0.1:5055
export KO_DOCKER_REPO=${KO_DOCKER_REPO:-hitless.local}

# ---- the Contour side ------------------------------------------------------
# contour_class NS SERVICE_TYPE: one Contour class as hitless expects it (see
# docs/install.md): two Contour replicas behind the xDS Service `contour`
# (each Envoy's streams go to either; Contour's leader election picks the one
# that writes status), and Envoy behind the Service `envoy` that
# config-contour's visibility names.
contour_class() {
  local ns=$1 type=$2 policy=''
  # Keeps the client's address; Envoy sees where each request came from.
  if [[ $type == LoadBalancer ]]; then policy='  externalTrafficPolicy: Local'; fi
  render "$REPO/hack/manifests/release/contour-class.yaml" NAMESPACE="$ns" SERVICE_TYPE="$type" TRAFFIC_POLICY="$policy" \
    CONTOUR_VERSION="$CONTOUR_VERSION" CONTOUR_VERSION_LABEL="${CONTOUR_VERSION//./-}" ENVOY_IMAGE="$ENVOY_IMAGE"
}

contour_manifest() {
  render "$REPO/hack/manifests/release/contour.yaml" CONTOUR_VERSION="$CONTOUR_VERSION" ENVOY_TAG="${ENVOY_IMAGE##*:}"
  contour_class contour-external LoadBalancer
  contour_class contour-internal ClusterIP
}

# ---- the controller image --------------------------------------------------
# base_layer FILE: the base image's one layer, reproducible (owner root,
# mtime 0): /etc/passwd and /etc/group naming nonroot (65532), the system CA
# bundle, /tmp.
base_layer() {
  local ca=/etc/ssl/certs/ca-certificates.crt
  [[ -f $ca ]] || die "$ca is missing (Debian package ca-certificates; hack/build-deps.sh installs it)"
  python3 - "$1" "$ca" <<'EOF'
import io, sys, tarfile
out, ca = sys.argv[1], sys.argv[2]
def add(tar, name, data=None, mode=0o644, dir=False):
    info = tarfile.TarInfo(name)
    info.mtime = 0
    if dir:
        info.type, info.mode = tarfile.DIRTYPE, mode
        tar.addfile(info)
    else:
        info.mode, info.size = mode, len(data)
        tar.addfile(info, io.BytesIO(data))
with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
    for d in ("etc", "etc/ssl", "etc/ssl/certs", "home", "home/nonroot"):
        add(tar, d, mode=0o755, dir=True)
    add(tar, "tmp", mode=0o1777, dir=True)
    add(tar, "etc/passwd", b"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")
    add(tar, "etc/group", b"root:x:0:\nnonroot:x:65532:\n")
    add(tar, "etc/ssl/certs/ca-certificates.crt", open(ca, "rb").read())
EOF
}

REGISTRY_PID='' WORK=''
cleanup() {
  [[ -z $REGISTRY_PID ]] || kill "$REGISTRY_PID" 2>/dev/null || true
  [[ -z $WORK ]] || rm -rf "$WORK"
}
trap cleanup EXIT

build() {
  "$REPO/hack/build-deps.sh" --release >&2
  local base
  WORK=$(mktemp -d)
  mkdir -p "$DIST" "$CACHE/logs"
  "$BIN/crane" registry serve --address "$REGISTRY" >"$CACHE/logs/release-registry.log" 2>&1 &
  REGISTRY_PID=$!
  for _ in $(seq 1 50); do curl -fsS "http://$REGISTRY/v2/" >/dev/null 2>&1 && break; sleep 0.1; done
  curl -fsS "http://$REGISTRY/v2/" >/dev/null || die "crane registry did not start on $REGISTRY; see $CACHE/logs/release-registry.log"
  base_layer "$WORK/base.tar"
  "$BIN/crane" append --oci-empty-base -f "$WORK/base.tar" -t "$REGISTRY/base:layer" >/dev/null
  base=$("$BIN/crane" mutate "$REGISTRY/base:layer" --set-platform linux/amd64 --user 65532:65532 \
    --env PATH=/ko-app:/usr/bin -t "$REGISTRY/base:latest")
  log "base image $base"
  rm -rf "$DIST/oci" "$DIST/controller.tar"
  # -B: the image is named <KO_DOCKER_REPO>/controller. ko writes it twice,
  # as an OCI layout and as a tarball; the manifest takes the name the last
  # of its publishers (the tarball's) gives it: repository and digest.
  # ko also turns the layout's path into an image repository name, which
  # may hold only lower-case letters, digits and _-./: so both paths are
  # given relative to the checkout (dist/...), whatever its own path holds
  # (capitals, spaces: a clone in ~/Projects/hitless or a mktemp folder).
  (cd "$REPO" && KO_DEFAULTBASEIMAGE=$base GOFLAGS=-buildvcs=false "$BIN/ko" resolve --push=false \
    --oci-layout-path dist/oci --tarball dist/controller.tar -B --platform=linux/amd64 \
    -f config/ >"$WORK/release.yaml")
  {
    echo "# hitless: the controller, its RBAC and configuration. Generated by make release"
    echo "# (hack/release.sh) from config/ at $(cd "$REPO" && git rev-parse --short HEAD 2>/dev/null || echo unknown)."
    cat "$WORK/release.yaml"
  } >"$DIST/release.yaml"
  {
    cat "$REPO/third_party/contour-$CONTOUR_VERSION/01-crds.yaml"
    contour_manifest
  } >"$DIST/contour.yaml"
  log "wrote $DIST/release.yaml ($(grep -o "$KO_DOCKER_REPO/controller@sha256:[0-9a-f]*" "$DIST/release.yaml" | head -1)), $DIST/contour.yaml, $DIST/oci"
}

# ---- the check on the local stack -------------------------------------------
# controller_binary OUT: the controller binary from the image in dist/oci
controller_binary() {
  python3 - "$DIST/oci" "$1" <<'EOF'
import json, os, sys, tarfile
layout, out = sys.argv[1], sys.argv[2]
def blob(digest):
    algo, hexd = digest.split(":")
    return os.path.join(layout, "blobs", algo, hexd)
index = json.load(open(os.path.join(layout, "index.json")))
found = False
for m in index["manifests"]:
    manifest = json.load(open(blob(m["digest"])))
    if "layers" not in manifest:
        continue
    for layer in manifest["layers"]:
        with tarfile.open(blob(layer["digest"])) as tar:
            for member in tar.getmembers():
                if member.name.lstrip("./") == "ko-app/controller":
                    with open(out, "wb") as f:
                        f.write(tar.extractfile(member).read())
                    os.chmod(out, 0o755)
                    found = True
if not found:
    sys.exit("no ko-app/controller in any image of " + layout)
EOF
}

check() {
  [[ -f $DIST/release.yaml && -f $DIST/contour.yaml ]] || die "no dist/release.yaml or dist/contour.yaml: run make release first"
  eval "$("$REPO/hack/stack.sh" env)"
  export KUBECONFIG
  local image
  log "server-side dry run of dist/contour.yaml and dist/release.yaml"
  local f
  for f in contour release; do
    # kubectl's warnings about objects the stack created without it are noise here
    kubectl apply --dry-run=server -f "$DIST/$f.yaml" >/dev/null 2>"$CACHE/logs/release-dry-run-$f.log" ||
      die "dist/$f.yaml was refused: $(grep -v '^Warning: resource' "$CACHE/logs/release-dry-run-$f.log")"
  done
  # The stack's node agent runs an image as the binary its image map names:
  # the one ko put into the image, not a fresh build.
  image=$(grep -o "$KO_DOCKER_REPO/controller@sha256:[0-9a-f]*" "$DIST/release.yaml" | head -1)
  [[ -n $image ]] || die "dist/release.yaml names no $KO_DOCKER_REPO/controller image"
  controller_binary "$CACHE/bin/release-controller"
  "$REPO/hack/stack.sh" add-image "${image%@*}" "$CACHE/bin/release-controller"
  log "applying dist/release.yaml: the Deployment runs $image"
  kubectl apply -f "$DIST/release.yaml" >/dev/null
  if ! kubectl rollout status deployment/hitless-controller -n knative-serving --timeout=120s >&2; then
    kubectl get pods -n knative-serving -l app=hitless-controller -o wide >&2 || true
    kubectl delete deployment hitless-controller -n knative-serving --wait=false >/dev/null || true
    die "the controller of dist/release.yaml did not become ready"
  fi
  local pods pod ok=0 n
  pods=$(kubectl get pods -n knative-serving -l app=hitless-controller -o jsonpath='{.items[*].metadata.name}')
  n=$(wc -w <<<"$pods")
  for _ in $(seq 1 60); do
    ok=0
    for pod in $pods; do
      if kubectl logs -n knative-serving "$pod" -c controller 2>/dev/null | grep -q 'Started workers'; then
        ok=$((ok + 1))
      fi
    done
    ((ok < n)) || break
    sleep 1
  done
  # Only the Deployment goes: the RBAC and ConfigMaps are the ones the
  # stack's own controller runs with.
  kubectl delete deployment hitless-controller -n knative-serving --wait=true >/dev/null
  ((ok == n && n > 0)) || die "$ok of $n pods of the release's controller logged that their workers started (pods: $pods)"
  log "release check passed: both manifests accepted by the API server; all $n controller pods of $image started their workers"
}

# any_path: make release from a copy of this checkout in a folder whose path
# has capitals and a space (as ~/Projects/hitless or a mktemp folder does),
# and check that the image its release.yaml names is the one in its dist/oci.
any_path() {
  local parent dst image digest
  parent=$(mktemp -d)
  dst="$parent/Hitless Checkout"
  mkdir -p "$dst"
  # The tracked files as they are in the work tree, and .git, not dist/.
  (cd "$REPO" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) | tar -C "$dst" -xf -
  cp -a "$REPO/.git" "$dst/.git"
  log "make release in '$dst'"
  if ! make -C "$dst" release >"$parent/release.log" 2>&1; then
    tail -20 "$parent/release.log" >&2
    rm -rf "$parent"
    die "make release failed in a checkout at '$dst'"
  fi
  image=$(grep -o "$KO_DOCKER_REPO/controller@sha256:[0-9a-f]*" "$dst/dist/release.yaml" | head -1)
  digest=${image#*@}
  if [[ -z $image || ! -s "$dst/dist/oci/blobs/sha256/${digest#sha256:}" || ! -s "$dst/dist/controller.tar" ]]; then
    rm -rf "$parent"
    die "make release in '$dst' wrote no image, or not the one release.yaml names ($image)"
  fi
  rm -rf "$parent"
  log "any-path check passed: make release in a checkout at a path with capitals and a space wrote $image"
}

case "${1:-build}" in
  build) build ;;
  contour) contour_manifest ;;
  check) check ;;
  any-path) any_path ;;
  *) echo "usage: $0 [build | contour | check | any-path]" >&2; exit 2 ;;
esac
