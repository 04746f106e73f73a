package resources

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"knative.dev/networking/pkg/apis/networking"
)

// Each row is a route as Contour reads it; the backends must be the
// clusters Contour builds for it, which it names by Service, port,
// protocol and SNI, the SNI being the Host the Service or else the route
// rewrites to.
func TestBackendsOfProxy(t *testing.T) {
	set := func(kv ...string) *contourv1.HeadersPolicy {
		hp := &contourv1.HeadersPolicy{}
		for i := 0; i < len(kv); i += 2 {
			hp.Set = append(hp.Set, contourv1.HeaderValue{Name: kv[i], Value: kv[i+1]})
		}
		return hp
	}
	tests := []struct {
		name  string
		route contourv1.Route
		want  []Backend
	}{{
		name:  "no headers: Service, port and protocol",
		route: contourv1.Route{Services: []contourv1.Service{{Name: "blue", Port: 80}, {Name: "green", Port: 81, Protocol: ptr.To("h2c")}}},
		want:  []Backend{{Namespace: ns, Name: "blue", Port: 80}, {Namespace: ns, Name: "green", Port: 81, Protocol: "h2c"}},
	}, {
		name: "a route's Host rewrite is every one of its Services' (other headers are not part of the cluster)",
		route: contourv1.Route{
			Services:             []contourv1.Service{{Name: "blue", Port: 80, RequestHeadersPolicy: set("X-Rev", "blue")}, {Name: "green", Port: 80}},
			RequestHeadersPolicy: set("X-Pre", "1", "host", "private.ns.svc.cluster.local"),
		},
		want: []Backend{
			{Namespace: ns, Name: "blue", Port: 80, HostRewrite: "private.ns.svc.cluster.local"},
			{Namespace: ns, Name: "green", Port: 80, HostRewrite: "private.ns.svc.cluster.local"},
		},
	}, {
		name: "a Service's own Host wins over the route's, as it does for Contour's SNI",
		route: contourv1.Route{
			Services:             []contourv1.Service{{Name: "blue", Port: 80, RequestHeadersPolicy: set("Host", "mine.example.com")}, {Name: "green", Port: 80}},
			RequestHeadersPolicy: set("Host", "route.example.com"),
		},
		want: []Backend{
			{Namespace: ns, Name: "blue", Port: 80, HostRewrite: "mine.example.com"},
			{Namespace: ns, Name: "green", Port: 80, HostRewrite: "route.example.com"},
		},
	}, {
		name:  "the last Host set wins within a policy",
		route: contourv1.Route{Services: []contourv1.Service{{Name: "blue", Port: 80}}, RequestHeadersPolicy: set("Host", "first", "HOST", "last")},
		want:  []Backend{{Namespace: ns, Name: "blue", Port: 80, HostRewrite: "last"}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &contourv1.HTTPProxy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}, Spec: contourv1.HTTPProxySpec{Routes: []contourv1.Route{tc.route}}}
			got := SortedBackends(BackendsOfProxy(p))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("BackendsOfProxy (-want, +got):\n%s", diff)
			}
		})
	}
}

// The same Service behind another rewrite is another Envoy cluster, so it is
// another backend with another warm path: holding one never holds the other.
func TestBackendKeyTellsRewritesApart(t *testing.T) {
	plain := Backend{Namespace: ns, Name: "blue", Port: 80}
	a := plain
	a.HostRewrite = "a.ns.svc.cluster.local"
	b := plain
	b.HostRewrite = "b.ns.svc.cluster.local"
	keys := map[string]bool{plain.Key(): true, a.Key(): true, b.Key(): true}
	if len(keys) != 3 {
		t.Errorf("keys %q, %q, %q are not distinct", plain.Key(), a.Key(), b.Key())
	}
	// Warm paths written before rewrites were part of the key stay valid.
	if want := "ns/blue/80/"; plain.Key() != want {
		t.Errorf("Key() = %q, want %q", plain.Key(), want)
	}
	if want := "ns/blue:80 as Host a.ns.svc.cluster.local"; a.String() != want {
		t.Errorf("String() = %q, want %q", a.String(), want)
	}
}

// TestResolveFromService: the rows are the Services Serving makes for a
// revision (named by knative.dev/networking's port constants, as Serving's
// own builders name them) and the port its KIngress names.
func TestResolveFromService(t *testing.T) {
	revision := func(first string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rev"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
				{Name: first, Port: networking.ServiceHTTPPort},
				{Name: networking.ServicePortNameHTTPS, Port: networking.ServiceHTTPSPort},
			}},
		}
	}
	tests := []struct {
		name      string
		svc       *corev1.Service
		port      intstr.IntOrString
		want      string // protocol
		encrypted string // protocol under system-internal-tls
	}{{
		name: "an HTTP/1 revision on its http port", svc: revision(networking.ServicePortNameHTTP1),
		port: intstr.FromInt(networking.ServiceHTTPPort), want: "", encrypted: ProtocolTLS,
	}, {
		name: "an HTTP/2 revision on its http2 port", svc: revision(networking.ServicePortNameH2C),
		port: intstr.FromInt(networking.ServiceHTTPPort), want: ProtocolH2C, encrypted: ProtocolH2,
	}, {
		// What Serving's KIngress names under system-internal-tls: gRPC
		// needs h2 over TLS, never HTTP/1.1.
		name: "an HTTP/2 revision on its https port", svc: revision(networking.ServicePortNameH2C),
		port: intstr.FromInt(networking.ServiceHTTPSPort), want: ProtocolH2C, encrypted: ProtocolH2,
	}, {
		name: "an HTTP/1 revision on its https port", svc: revision(networking.ServicePortNameHTTP1),
		port: intstr.FromInt(networking.ServiceHTTPSPort), want: "", encrypted: ProtocolTLS,
	}, {
		name: "a port whose appProtocol is kubernetes.io/h2c",
		svc: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "grpc"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "grpc", Port: 9000, AppProtocol: ptr.To("kubernetes.io/h2c")}}}},
		port: intstr.FromString("grpc"), want: ProtocolH2C, encrypted: ProtocolH2,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := ResolveFromService(tc.svc, tc.port)
			if err != nil {
				t.Fatal(err)
			}
			if b.Protocol != tc.want {
				t.Errorf("protocol = %q, want %q", b.Protocol, tc.want)
			}
			if got := b.encrypted().Protocol; got != tc.encrypted {
				t.Errorf("protocol under system-internal-tls = %q, want %q", got, tc.encrypted)
			}
		})
	}
}
