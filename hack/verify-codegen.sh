#!/usr/bin/env bash
# Fails when pkg/client differs from what hack/update-codegen.sh would
# generate now: regenerates into a temporary directory and diffs the trees.
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"
REPO_ROOT=$REPO
GENERATED="${REPO_ROOT}/pkg/client"

tmp=$(mktemp -d)
trap 'rm -rf "${tmp}"' EXIT

CODEGEN_OUTPUT_DIR="${tmp}/client" "${REPO_ROOT}/hack/update-codegen.sh"

# Only the generated subtrees are compared, so hand-written files elsewhere in
# pkg/client do not count as drift.
status=0
for d in clientset listers informers injection; do
  if ! diff -ur "${GENERATED}/${d}" "${tmp}/client/${d}" >"${tmp}/${d}.diff"; then
    sed -e "s|${tmp}/client|pkg/client (regenerated)|g" -e "s|${REPO_ROOT}/||g" "${tmp}/${d}.diff"
    status=1
  fi
done

if [ "${status}" -ne 0 ]; then
  echo >&2
  echo "pkg/client is out of date with its generators. Run 'make codegen' and commit the result." >&2
  exit 1
fi
echo "pkg/client is up to date." >&2
