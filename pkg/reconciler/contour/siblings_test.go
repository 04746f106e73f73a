package contour

import (
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/hitless/hitless/pkg/resources"
)

// proxyIndexer is an indexer as the proxies informer has it.
func proxyIndexer() cache.Indexer {
	return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{controllerIndex: indexController})
}

// samePart tells whether two slices or maps are one in memory.
func samePart(a, b interface{}) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	return va.Len() > 0 && va.Pointer() == vb.Pointer()
}

// trimmed is what trimForCache keeps of a decoded proxy.
func trimmed(p *contourv1.HTTPProxy) *contourv1.HTTPProxy {
	p = p.DeepCopy()
	p.ManagedFields = nil
	p.Status.LoadBalancer = corev1.LoadBalancerStatus{}
	return p
}

// transformed is decoded as the sharer puts it in the cache, which must be
// equal to it as trimForCache leaves it.
func transformed(t *testing.T, s *siblingSharer, decoded *contourv1.HTTPProxy) *contourv1.HTTPProxy {
	t.Helper()
	want := trimmed(decoded)
	out, err := s.transform(decoded)
	if err != nil {
		t.Fatal(err)
	}
	cached := out.(*contourv1.HTTPProxy)
	if diff := cmp.Diff(want, cached); diff != "" {
		t.Errorf("%s cached differs from what was decoded (-want +got):\n%s", want.Name, diff)
	}
	return cached
}

// TestSiblingsShare: the proxies of one KIngress, entering the cache one
// after another (watch events: each in the indexer before the next comes)
// or in one list (none in the indexer yet), share their routes,
// annotations, owner and Contour's verdict, and each is still equal to the
// proxy as decoded.
func TestSiblingsShare(t *testing.T) {
	for _, listed := range []bool{false, true} {
		name := map[bool]string{false: "watched", true: "listed"}[listed]
		t.Run(name, func(t *testing.T) {
			indexer := proxyIndexer()
			s := newSiblingSharer(indexer)
			var got []*contourv1.HTTPProxy
			for _, p := range serving(t, benchIngress(3)).Proxies {
				cached := transformed(t, s, cachedProxy(t, p))
				if !listed {
					if err := indexer.Add(cached); err != nil {
						t.Fatal(err)
					}
				}
				got = append(got, cached)
			}
			if len(got) != 4 {
				t.Fatalf("%d proxies, want 4 (one per host)", len(got))
			}
			first := got[0]
			// The cluster-local proxies' annotations are one map; the
			// external one's differ (its Contour class).
			byClass := map[string]*contourv1.HTTPProxy{}
			for _, p := range got {
				class := resources.ProxyClass(p)
				if c := byClass[class]; c == nil {
					byClass[class] = p
				} else if !samePart(p.Annotations, c.Annotations) {
					t.Errorf("%s does not share its annotations with %s, of its class %s", p.Name, c.Name, class)
				}
			}
			if len(byClass) != 2 {
				t.Errorf("proxies of %d classes, want 2 (one external host, three cluster-local)", len(byClass))
			}
			for _, p := range got[1:] {
				for part, same := range map[string]bool{
					"routes":     samePart(p.Spec.Routes, first.Spec.Routes),
					"owner":      samePart(p.OwnerReferences, first.OwnerReferences),
					"conditions": samePart(p.Status.Conditions, first.Status.Conditions),
				} {
					if !same {
						t.Errorf("%s does not share its %s with %s", p.Name, part, first.Name)
					}
				}
				if samePart(p.Labels, first.Labels) {
					t.Errorf("%s shares its labels with %s: they differ (the host's hash)", p.Name, first.Name)
				}
			}
		})
	}
}

// TestSiblingsShareOnlyWhatIsEqual: mid-rollout a KIngress's proxies
// differ (one written, the others not yet); a proxy of another KIngress is
// no sibling. Each cached proxy is exactly what was decoded.
func TestSiblingsShareOnlyWhatIsEqual(t *testing.T) {
	indexer := proxyIndexer()
	s := newSiblingSharer(indexer)
	add := func(p *contourv1.HTTPProxy) *contourv1.HTTPProxy {
		t.Helper()
		cached := transformed(t, s, p)
		if err := indexer.Add(cached); err != nil {
			t.Fatal(err)
		}
		return cached
	}
	old := serving(t, benchIngress(5)).Proxies
	rolled := benchIngress(5)
	rolled.Spec.Rules[0].HTTP.Paths[0].Splits[0].ServiceName = "svc-next"
	rolled.Spec.Rules[1].HTTP.Paths[0].Splits[0].ServiceName = "svc-next"
	next := serving(t, rolled).Proxies

	a := add(cachedProxy(t, old[0]))
	b := add(cachedProxy(t, next[1]))
	if samePart(a.Spec.Routes, b.Spec.Routes) || samePart(a.Annotations, b.Annotations) {
		t.Errorf("%s shares routes or annotations with %s, though they route differently", b.Name, a.Name)
	}
	other := add(cachedProxy(t, serving(t, benchIngress(6)).Proxies[0]))
	if samePart(other.OwnerReferences, a.OwnerReferences) {
		t.Errorf("%s (of ks6) shares its owner with %s (of ks5)", other.Name, a.Name)
	}
	// A sharer with no indexer (as at the first list) still shares with
	// the proxy before; a non-proxy passes through.
	if out, err := newSiblingSharer(nil).transform("x"); err != nil || out != "x" {
		t.Errorf("transform(\"x\") = %v, %v", out, err)
	}
}
