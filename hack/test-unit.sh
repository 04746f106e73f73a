#!/usr/bin/env bash
# The fast layers of `make test`: a broken build fails here within a minute
# or two on a warm cache, before anything slow starts.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$REPO"

echo "--- go build"
go build ./...
echo "--- go vet"
go vet ./...
echo "--- gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' | grep -v '^third_party/') 2>/dev/null || true)
if [ -n "$unformatted" ]; then
  echo "gofmt wants to rewrite:"; echo "$unformatted"; exit 1
fi
echo "--- generated code is current"
hack/verify-codegen.sh
echo "--- config/contour/contour.yaml is what hack/release.sh contour makes"
if ! diff -u config/contour/contour.yaml <(hack/release.sh contour); then
  echo "config/contour/contour.yaml is stale: hack/release.sh contour > config/contour/contour.yaml"; exit 1
fi
echo "--- unit and reconciler tests"
go test -count=1 ./...
if [ -f hack/nodeagent/go.mod ]; then
  echo "--- node agent unit tests"
  (cd hack/nodeagent && go vet ./... && go test -count=1 ./...)
fi
echo "--- config/operator/knativeserving.yaml against the Knative Operator's own code"
(cd hack/tools/operator && go vet ./... && go test -count=1 ./...)
echo "--- hitless's builders on what Knative Serving's own code makes"
(cd hack/tools/servingrows && go vet ./... && go test -count=1 ./...)
