//go:build e2e

package e2e

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"

	"github.com/hitless/hitless/test/harness"
)

// TestHTTPOptionAsNetContour: what plain HTTP gets on a host with TLS, as
// net-contour decides it, on every Envoy pod. An external host whose
// httpOption is empty (what Serving writes when config-network leaves it
// unset) is redirected to HTTPS, as under Redirected; a cluster-local host
// is served over plain HTTP even under Redirected (in-cluster callers use
// http://, and a redirected POST loses its body: net-contour#848). Both
// are served over HTTPS.
func TestHTTPOptionAsNetContour(t *testing.T) {
	ctx, c, ns := setup(t, "httpopt")
	if err := c.CreateBackend(ctx, ns, "app"); err != nil {
		t.Fatal(err)
	}
	ext := "empty-option." + ns + ".example.com"
	local := "app." + ns + ".svc.cluster.local"
	if err := c.CreateTLSSecret(ctx, ns, "cert", ext, local); err != nil {
		t.Fatal(err)
	}
	split := []harness.Split{{Backend: "app", Percent: 100}}

	empty := harness.KIngress(ns, "empty-option", harness.Rule{Host: ext, Visibility: v1alpha1.IngressVisibilityExternalIP, Splits: split})
	empty.Spec.TLS = []v1alpha1.IngressTLS{{Hosts: []string{ext}, SecretName: "cert", SecretNamespace: ns}}
	local1 := harness.KIngress(ns, "app", harness.Rule{Host: local, Visibility: v1alpha1.IngressVisibilityClusterLocal, Splits: split})
	local1.Spec.TLS = []v1alpha1.IngressTLS{{Hosts: []string{local}, SecretName: "cert", SecretNamespace: ns}}
	local1.Spec.HTTPOption = v1alpha1.HTTPOptionRedirected
	for _, ing := range []*v1alpha1.Ingress{empty, local1} {
		if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"empty-option", "app"} {
		if _, err := c.WaitReady(ctx, ns, name, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}

	var extPlain, extTLS, localPlain, localTLS []harness.Target
	for _, ip := range c.EnvoyPods(ctx, external) {
		extPlain = append(extPlain, harness.Target{Addr: ip + ":8080", Host: ext})
		extTLS = append(extTLS, harness.Target{Addr: ip + ":8443", Host: ext, TLS: true})
	}
	for _, ip := range c.EnvoyPods(ctx, internal) {
		localPlain = append(localPlain, harness.Target{Addr: ip + ":8080", Host: local})
		localTLS = append(localTLS, harness.Target{Addr: ip + ":8443", Host: local, TLS: true})
	}
	for _, tc := range []struct {
		name    string
		targets []harness.Target
		code    int
	}{
		{"external host, empty httpOption, plain HTTP", extPlain, 301},
		{"external host, empty httpOption, HTTPS", extTLS, 200},
		{"cluster-local host, Redirected, plain HTTP", localPlain, 200},
		{"cluster-local host, Redirected, HTTPS", localTLS, 200},
	} {
		s := burst(ctx, tc.targets, "app")
		t.Logf("%s: %s", tc.name, s)
		if s.Requests == 0 || s.ByCode[tc.code] != s.Requests {
			t.Errorf("%s: %d of %d answers were not %d", tc.name, s.Requests-s.ByCode[tc.code], s.Requests, tc.code)
		}
	}
}
