//go:build tools

// Package tools pins what hack/build-serving.sh builds from this module.
package tools

import (
	_ "knative.dev/serving/cmd/activator"
	_ "knative.dev/serving/cmd/autoscaler"
	_ "knative.dev/serving/cmd/controller"
	_ "knative.dev/serving/cmd/queue"
	_ "knative.dev/serving/cmd/webhook"
	// the e2e suite's helpers (its tests are built with go test -c -tags=e2e):
	// importing them here keeps their modules in go.sum
	_ "knative.dev/serving/test/e2e"
)
