// Package operator checks config/operator/knativeserving.yaml, the
// KnativeServing docs/install.md tells operator users to apply, against the
// Knative Operator's own API types and ingress code at the version go.mod
// pins: every field must be one the operator reads, the operator must
// install no ingress of its own, and the network config it writes must name
// hitless's class.
package operator

import (
	"context"
	"os"
	"testing"

	"knative.dev/operator/pkg/apis/operator/v1beta1"
	"knative.dev/operator/pkg/reconciler/knativeserving/ingress"
	"sigs.k8s.io/yaml"
)

const hitlessClass = "contour.ingress.networking.knative.dev"

func TestKnativeServingForHitless(t *testing.T) {
	raw, err := os.ReadFile("../../../config/operator/knativeserving.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ks v1beta1.KnativeServing
	// Strict: a field the operator does not know would be ignored by it.
	if err := yaml.UnmarshalStrict(raw, &ks); err != nil {
		t.Fatalf("config/operator/knativeserving.yaml is not a KnativeServing the operator reads: %v", err)
	}
	if ks.Spec.Ingress == nil {
		t.Fatal("spec.ingress is missing: the operator then installs Istio")
	}
	if path := ingress.GetIngressPath("1.20.0", &ks); path != "" {
		t.Errorf("the operator would install an ingress of its own: %q", path)
	}
	if tr := ingress.Transformers(context.Background(), &ks); len(tr) != 0 {
		t.Errorf("the operator would transform the manifests for %d ingresses", len(tr))
	}
	if got := ks.Spec.Config["network"]["ingress-class"]; got != hitlessClass {
		t.Errorf("spec.config.network.ingress-class = %q, want %q", got, hitlessClass)
	}
}
