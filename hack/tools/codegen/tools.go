//go:build tools

// Package tools pins the code generators that hack/update-codegen.sh builds
// from this module: the Kubernetes client, lister and informer generators and
// Knative's injection generator.
package tools

import (
	_ "k8s.io/code-generator/cmd/client-gen"
	_ "k8s.io/code-generator/cmd/informer-gen"
	_ "k8s.io/code-generator/cmd/lister-gen"
	_ "knative.dev/pkg/codegen/cmd/injection-gen"
)
