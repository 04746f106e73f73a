#!/usr/bin/env bash
# Generates the typed clientset, listers, informers and Knative injection
# packages for Contour's projectcontour.io/v1 API (HTTPProxy and
# TLSCertificateDelegation, the types Contour tags with +genclient) into
# pkg/client/.
#
# The generators are built from hack/tools/codegen, a module of their own, and
# cached under ${HITLESS_CACHE_DIR} keyed by that module's files, so a second
# run skips the build. The API types are read from the contour module that the
# main go.mod requires; nothing of Contour is copied into this repository.
#
# CODEGEN_OUTPUT_DIR redirects the output (hack/verify-codegen.sh uses it);
# the default is pkg/client.
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"
REPO_ROOT=$REPO
TOOLS_DIR="${REPO_ROOT}/hack/tools/codegen"
BOILERPLATE="${REPO_ROOT}/hack/boilerplate.go.txt"
OUTPUT_DIR=${CODEGEN_OUTPUT_DIR:-${REPO_ROOT}/pkg/client}

MODULE=github.com/hitless/hitless
OUTPUT_PKG="${MODULE}/pkg/client"
APIS_BASE=github.com/projectcontour/contour/apis
GROUP_VERSIONS=(projectcontour/v1)

INPUT_PKGS=()
for gv in "${GROUP_VERSIONS[@]}"; do INPUT_PKGS+=("${APIS_BASE}/${gv}"); done
join() { local IFS=,; echo "$*"; }

# Build (or reuse) the generators.
tools_hash=$(cat "${TOOLS_DIR}/go.mod" "${TOOLS_DIR}/go.sum" "${TOOLS_DIR}/tools.go" \
  <(go env GOVERSION) | sha256sum | cut -c1-16)
HITLESS_CACHE_DIR=${HITLESS_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/hitless}
BIN_DIR="${HITLESS_CACHE_DIR}/codegen-${tools_hash}"
GENERATORS=(client-gen lister-gen informer-gen injection-gen)
have_generators() {
  local g
  for g in "${GENERATORS[@]}"; do [ -x "${BIN_DIR}/${g}" ] || return 1; done
}
if ! have_generators; then
  echo "building code generators into ${BIN_DIR}" >&2
  mkdir -p "${HITLESS_CACHE_DIR}"
  tmp_bin=$(mktemp -d "${HITLESS_CACHE_DIR}/.codegen-build.XXXXXX")
  trap 'rm -rf "${tmp_bin}"' EXIT
  (cd "${TOOLS_DIR}" && go build -o "${tmp_bin}/" \
    k8s.io/code-generator/cmd/client-gen \
    k8s.io/code-generator/cmd/lister-gen \
    k8s.io/code-generator/cmd/informer-gen \
    knative.dev/pkg/codegen/cmd/injection-gen)
  rm -rf "${BIN_DIR}"
  mv "${tmp_bin}" "${BIN_DIR}"
fi

# Start from an empty tree so that output for types no longer generated goes.
for d in clientset listers informers injection; do rm -rf "${OUTPUT_DIR:?}/${d}"; done
mkdir -p "${OUTPUT_DIR}"

# The generators load the input packages through the main module's go.mod.
cd "${REPO_ROOT}"

echo "generating clientset" >&2
"${BIN_DIR}/client-gen" \
  --go-header-file "${BOILERPLATE}" \
  --clientset-name versioned \
  --input-base "${APIS_BASE}" \
  --input "$(join "${GROUP_VERSIONS[@]}")" \
  --output-dir "${OUTPUT_DIR}/clientset" \
  --output-pkg "${OUTPUT_PKG}/clientset"

echo "generating listers" >&2
"${BIN_DIR}/lister-gen" \
  --go-header-file "${BOILERPLATE}" \
  --output-dir "${OUTPUT_DIR}/listers" \
  --output-pkg "${OUTPUT_PKG}/listers" \
  "${INPUT_PKGS[@]}"

echo "generating informers" >&2
"${BIN_DIR}/informer-gen" \
  --go-header-file "${BOILERPLATE}" \
  --versioned-clientset-package "${OUTPUT_PKG}/clientset/versioned" \
  --listers-package "${OUTPUT_PKG}/listers" \
  --output-dir "${OUTPUT_DIR}/informers" \
  --output-pkg "${OUTPUT_PKG}/informers" \
  "${INPUT_PKGS[@]}"

echo "generating injection" >&2
"${BIN_DIR}/injection-gen" \
  --go-header-file "${BOILERPLATE}" \
  --input-dirs "$(join "${INPUT_PKGS[@]}")" \
  --versioned-clientset-package "${OUTPUT_PKG}/clientset/versioned" \
  --external-versions-informers-package "${OUTPUT_PKG}/informers/externalversions" \
  --listers-package "${OUTPUT_PKG}/listers" \
  --output-dir "${OUTPUT_DIR}/injection" \
  --output-package "${OUTPUT_PKG}/injection"
