package contour

import (
	"encoding/json"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/tools/cache"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
)

// cachedProxy is a serving proxy as the informer decodes it: Contour's
// status on it (a verdict and the load balancer's address), managedFields
// from the API server, through the JSON decoder client-go uses for CRDs.
func cachedProxy(t testing.TB, p *contourv1.HTTPProxy) *contourv1.HTTPProxy {
	t.Helper()
	p = p.DeepCopy()
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "hitless", Operation: metav1.ManagedFieldsOperationUpdate}}
	p.Status = contourv1.HTTPProxyStatus{
		CurrentStatus: "valid", Description: "Valid HTTPProxy",
		Conditions:   []contourv1.DetailedCondition{{Condition: contourv1.Condition{Type: "Valid", Status: "True", Reason: "Valid", Message: "Valid HTTPProxy"}}},
		LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "10.245.0.10"}}},
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	out := &contourv1.HTTPProxy{}
	if err := utiljson.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// benchIngress is a KIngress shaped like the scale bench's: one external
// host, three cluster-local ones.
func benchIngress(i int) *v1alpha1.Ingress {
	name := fmt.Sprint("ks", i)
	in := ing("svc"+fmt.Sprint(i), withHosts(name+"."+testNS+".example.com"))
	in.Name = name
	in.Spec.Rules = append(in.Spec.Rules, *in.Spec.Rules[0].DeepCopy())
	in.Spec.Rules[1].Visibility = v1alpha1.IngressVisibilityClusterLocal
	in.Spec.Rules[1].Hosts = []string{name + "." + testNS, name + "." + testNS + ".svc", name + "." + testNS + ".svc.cluster.local"}
	return in
}

// TestTrimForCache: the cache holds what the controller reads of each
// object, and nothing it does not.
func TestTrimForCache(t *testing.T) {
	decoded := cachedProxy(t, serving(t, benchIngress(0)).Proxies[0])
	want := decoded.DeepCopy()
	want.ManagedFields = nil
	want.Status.LoadBalancer = corev1.LoadBalancerStatus{}

	withManaged := benchIngress(0)
	withManaged.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "controller"}}
	wantIng := benchIngress(0)

	tombstone := cache.DeletedFinalStateUnknown{Key: "default/hello", Obj: decoded.DeepCopy()}
	for _, tc := range []struct {
		name    string
		in, out interface{}
	}{
		{"an HTTPProxy keeps its spec and Contour's verdict", decoded, want},
		{"a KIngress keeps everything but managedFields", withManaged, wantIng},
		{"a tombstone passes as it is", tombstone, tombstone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := trimForCache(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.out, got); diff != "" {
				t.Errorf("trimForCache (-want +got):\n%s", diff)
			}
		})
	}
}

// BenchmarkCachedProxyMemory reports the heap the serving proxies of 1,000
// bench-shaped KIngresses (4,000 HTTPProxies) hold in the informer's cache,
// as decoded, as trimForCache leaves them, and shared with their siblings
// as well (the proxies informer's transform), indexes included.
//
//	go test ./pkg/reconciler/contour -run '^$' -bench CachedProxyMemory -benchtime 1x
func BenchmarkCachedProxyMemory(b *testing.B) {
	const n = 1000
	var decoded []*contourv1.HTTPProxy
	for i := range n {
		for _, p := range serving(b, benchIngress(i)).Proxies {
			decoded = append(decoded, cachedProxy(b, p))
		}
	}
	raw := make([][]byte, len(decoded))
	for i, p := range decoded {
		raw[i], _ = json.Marshal(p)
	}
	decoded = nil
	for _, cached := range []string{"decoded", "trimmed", "siblings"} {
		b.Run(cached, func(b *testing.B) {
			for range b.N {
				before := heapInUse()
				held := make([]interface{}, len(raw))
				// As a watch fills the cache: each proxy indexed before
				// the next comes.
				indexer := proxyIndexer()
				siblings := newSiblingSharer(indexer)
				for i, r := range raw {
					var obj interface{} = &contourv1.HTTPProxy{}
					if err := utiljson.Unmarshal(r, obj); err != nil {
						b.Fatal(err)
					}
					switch cached {
					case "trimmed":
						obj, _ = trimForCache(obj)
					case "siblings":
						obj, _ = siblings.transform(obj)
						if err := indexer.Add(obj); err != nil {
							b.Fatal(err)
						}
					}
					held[i] = obj
				}
				after := heapInUse()
				b.ReportMetric(float64(after-before)/float64(len(raw)), "bytes/proxy")
				b.ReportMetric(float64(after-before)/(1<<20), "MiB")
				runtime.KeepAlive(held)
			}
		})
	}
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestShareStrings: after shareStrings, equal strings of an object (in
// fields, slices and maps alike) are one copy, and the object is equal to
// what it was.
func TestShareStrings(t *testing.T) {
	fresh := func(s string) string { return string([]byte(s)) } // a copy of its own
	hash := strings.Repeat("ab", 32)
	p := &contourv1.HTTPProxy{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"hitless.knative.dev/hash": fresh(hash)}},
		Spec: contourv1.HTTPProxySpec{Routes: []contourv1.Route{{
			ResponseHeadersPolicy: &contourv1.HeadersPolicy{Set: []contourv1.HeaderValue{{Name: "Hitless-Hash", Value: fresh(hash)}}},
			Services:              []contourv1.Service{{Name: fresh("green")}, {Name: fresh("green")}},
		}}},
	}
	want := p.DeepCopy()
	shareStrings(p)
	if diff := cmp.Diff(want, p); diff != "" {
		t.Fatalf("shareStrings changed the object (-want +got):\n%s", diff)
	}
	same := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	route := p.Spec.Routes[0]
	if !same(p.Annotations["hitless.knative.dev/hash"], route.ResponseHeadersPolicy.Set[0].Value) {
		t.Error("the hash in the annotation and in the header are two copies")
	}
	if !same(route.Services[0].Name, route.Services[1].Name) {
		t.Error("the two Services' names are two copies")
	}
}

// TestStringTableIsBounded: the table shared by every object takes short
// strings until it is full, and keeps them.
func TestStringTableIsBounded(t *testing.T) {
	tbl := &stringTable{max: 2, maxLen: 5, m: map[string]string{}}
	for _, s := range []string{"reset", "a-long-hash", "infinity", "/", "X", "reset"} {
		tbl.offer(s)
	}
	var got []string
	for s := range tbl.m {
		got = append(got, s)
	}
	sort.Strings(got)
	if diff := cmp.Diff([]string{"/", "reset"}, got); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}
