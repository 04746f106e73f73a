//go:build e2e

// Package conformance runs Knative's ingress conformance suite, as published
// by the pinned knative.dev/networking, against hitless on a cluster. The
// suite is called, never copied: hack/conformance.sh passes its flags.
package conformance

import (
	"testing"

	"knative.dev/networking/test/conformance/ingress"
)

// TestIngressConformance runs every stable, beta and alpha test of the suite
// that the flags enable (hack/conformance.sh enables them all).
func TestIngressConformance(t *testing.T) {
	ingress.RunConformance(t)
}
