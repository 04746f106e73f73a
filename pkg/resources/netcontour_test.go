package resources

import (
	"crypto/sha1" //nolint:gosec // net-contour's label, not security
	"fmt"
	"testing"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
)

func TestProxyClass(t *testing.T) {
	tests := []struct {
		name string
		p    contourv1.HTTPProxy
		want string
	}{{
		name: "ours: spec.ingressClassName",
		p:    contourv1.HTTPProxy{Spec: contourv1.HTTPProxySpec{IngressClassName: "contour-external"}},
		want: "contour-external",
	}, {
		name: "net-contour's: the annotation",
		p:    contourv1.HTTPProxy{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{ContourClassAnnotation: "contour-internal"}}},
		want: "contour-internal",
	}, {
		name: "the spec wins over an annotation, as in Contour",
		p: contourv1.HTTPProxy{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{ContourClassAnnotation: "contour-internal"}},
			Spec: contourv1.HTTPProxySpec{IngressClassName: "contour-external"}},
		want: "contour-external",
	}, {
		name: "the older annotation",
		p:    contourv1.HTTPProxy{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"kubernetes.io/ingress.class": "contour-external"}}},
		want: "contour-external",
	}, {
		name: "none",
	}}
	for _, tt := range tests {
		if got := ProxyClass(&tt.p); got != tt.want {
			t.Errorf("%s: ProxyClass = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestIsNetContourEndpointProbe(t *testing.T) {
	parent := &netv1alpha1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "hello", UID: "u"}}
	ref := metav1.OwnerReference{APIVersion: "networking.internal.knative.dev/v1alpha1", Kind: "Ingress", Name: "hello", UID: "u", Controller: ptr.To(true)}
	annotated := map[string]string{NetContourEndpointsProbe: "true"}
	tests := []struct {
		name string
		meta metav1.ObjectMeta
		want bool
	}{
		{"net-contour's child: annotated and controlled by a KIngress", metav1.ObjectMeta{Annotations: annotated, OwnerReferences: []metav1.OwnerReference{ref}}, true},
		{"annotated by a user, no parent: an ordinary KIngress", metav1.ObjectMeta{Annotations: annotated}, false},
		{"controlled by a KIngress, not annotated", metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{ref}}, false},
		{"the parent itself", parent.ObjectMeta, false},
	}
	for _, tt := range tests {
		if got := IsNetContourEndpointProbe(&netv1alpha1.Ingress{ObjectMeta: tt.meta}); got != tt.want {
			t.Errorf("%s: IsNetContourEndpointProbe = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestNetContourFindsServingProxies replays how upstream net-contour finds
// the proxy of a host when it starts on a cluster hitless served
// (knative-extensions/net-contour, pkg/reconciler/contour/contour.go; the
// e2e TestMigrateBackToNetContour checks the same labels against what
// net-contour was recorded keeping): it lists proxies
// by its parent, domain-hash and class labels and updates the first match,
// and skips its endpoint probe when one carries the KIngress's generation.
// Each (class, host) net-contour serves must find exactly hitless's serving
// proxy of that host, or net-contour would create a second one (Contour
// invalidates both) or fail on the existing name.
func TestNetContourFindsServingProxies(t *testing.T) {
	ing := kingress(func(ing *netv1alpha1.Ingress) {
		ing.Spec.Rules = append(ing.Spec.Rules, netv1alpha1.IngressRule{
			Hosts:      []string{"hello.ns.svc.cluster.local"},
			Visibility: netv1alpha1.IngressVisibilityClusterLocal,
			HTTP:       ing.Spec.Rules[0].HTTP.DeepCopy(),
		})
	})
	got, err := MakeServing(bg(), ing, resolverOf(svc("blue")))
	if err != nil {
		t.Fatal(err)
	}
	// What net-contour serves for this KIngress: the external host on the
	// external class, the cluster-local host expanded on the internal one.
	want := map[string]string{
		"hello.example.com":          "contour-external",
		"hello.ns":                   "contour-internal",
		"hello.ns.svc":               "contour-internal",
		"hello.ns.svc.cluster.local": "contour-internal",
	}
	proxies := got.Proxies
	if len(proxies) != len(want) {
		t.Fatalf("%d serving proxies, want %d", len(proxies), len(want))
	}
	for host, class := range want {
		selector := labels.SelectorFromSet(labels.Set{
			"contour.networking.knative.dev/parent":     ing.Name,
			"contour.networking.knative.dev/domainHash": fmt.Sprintf("%x", sha1.Sum([]byte(host))),
			"projectcontour.io/ingress.class":           class,
		})
		var found []*contourv1.HTTPProxy
		for _, p := range proxies {
			if selector.Matches(labels.Set(p.Labels)) {
				found = append(found, p)
			}
		}
		if len(found) != 1 {
			t.Errorf("net-contour's selector %s finds %d proxies, want 1", selector, len(found))
			continue
		}
		if p := found[0]; p.Spec.VirtualHost.Fqdn != host || p.Spec.IngressClassName != class {
			t.Errorf("net-contour's selector for %s on %s finds the proxy of %s on %s", host, class, p.Spec.VirtualHost.Fqdn, p.Spec.IngressClassName)
		}
	}
	current := labels.SelectorFromSet(labels.Set{
		"contour.networking.knative.dev/parent":     ing.Name,
		"contour.networking.knative.dev/generation": "3",
	})
	for _, p := range proxies {
		if !current.Matches(labels.Set(p.Labels)) {
			t.Errorf("proxy of %s does not match %s: net-contour would run its endpoint probe before taking it over", p.Spec.VirtualHost.Fqdn, current)
		}
	}

	warm, err := MakeWarm(bg(), ing, got.Backends, got.Backends, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range warm.Proxies {
		if _, ok := p.Labels["contour.networking.knative.dev/parent"]; ok {
			t.Errorf("warm proxy %s carries net-contour's parent label: net-contour would count it as one of its own", p.Name)
		}
	}
}
