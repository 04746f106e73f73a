package resources

import (
	"context"
	"crypto/sha1" //nolint:gosec // net-contour's label, not security
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"knative.dev/networking/pkg/apis/networking"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	netcfg "knative.dev/networking/pkg/config"
	"knative.dev/networking/pkg/http/header"
	"knative.dev/pkg/kmeta"

	"github.com/hitless/hitless/pkg/config"
	"github.com/hitless/hitless/pkg/probekey"
	"github.com/hitless/hitless/pkg/resources/names"
)

const ns = "ns"

func svc(name string, ports ...corev1.ServicePort) *corev1.Service {
	if len(ports) == 0 {
		ports = []corev1.ServicePort{{Name: "http", Port: 80}}
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{Ports: ports},
	}
}

// resolverOf resolves against a fixed set of Services, like the lister would.
func resolverOf(svcs ...*corev1.Service) Resolver {
	return func(namespace, name string, port intstr.IntOrString) (Backend, error) {
		for _, s := range svcs {
			if s.Namespace == namespace && s.Name == name {
				return ResolveFromService(s, port)
			}
		}
		return Backend{}, &BackendError{Reason: "ServiceNotFound", Message: namespace + "/" + name + " not found"}
	}
}

// challengePath is the path Serving's auto-TLS puts in front of the
// external rule for a pending ACME HTTP-01 challenge.
func challengePath(token string) netv1alpha1.HTTPIngressPath {
	return netv1alpha1.HTTPIngressPath{
		Path: "/.well-known/acme-challenge/" + token,
		Splits: []netv1alpha1.IngressBackendSplit{{
			IngressBackend: netv1alpha1.IngressBackend{ServiceNamespace: ns, ServiceName: "cm-acme-http-solver", ServicePort: intstr.FromInt(8089)},
			Percent:        100,
		}},
	}
}

func kingress(mods ...func(*netv1alpha1.Ingress)) *netv1alpha1.Ingress {
	ing := &netv1alpha1.Ingress{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   ns,
			Name:        "hello",
			UID:         "uid-1",
			Generation:  3,
			Annotations: map[string]string{networking.IngressClassAnnotationKey: "contour.ingress.networking.knative.dev"},
		},
		Spec: netv1alpha1.IngressSpec{Rules: []netv1alpha1.IngressRule{{
			Hosts:      []string{"hello.example.com"},
			Visibility: netv1alpha1.IngressVisibilityExternalIP,
			HTTP: &netv1alpha1.HTTPIngressRuleValue{Paths: []netv1alpha1.HTTPIngressPath{{
				Splits: []netv1alpha1.IngressBackendSplit{{
					IngressBackend: netv1alpha1.IngressBackend{ServiceNamespace: ns, ServiceName: "blue", ServicePort: intstr.FromInt(80)},
					Percent:        100,
				}},
			}}},
		}}},
	}
	for _, m := range mods {
		m(ing)
	}
	return ing
}

func hashOf(t *testing.T, ing *netv1alpha1.Ingress) string {
	t.Helper()
	h, err := Hash(ing)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func meta(ing *netv1alpha1.Ingress, class, host string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Namespace: ns,
		Name:      names.ServingProxy(ing.Name, class, host),
		Labels: map[string]string{LabelIngress: ing.Name, LabelRole: RoleServing,
			"contour.networking.knative.dev/parent":     ing.Name,
			"contour.networking.knative.dev/generation": "3",
			"contour.networking.knative.dev/domainHash": fmt.Sprintf("%x", sha1.Sum([]byte(host))),
			"projectcontour.io/ingress.class":           class,
		},
		Annotations: withIngressAnnotations(ing, map[string]string{
			AnnotationHash:                    "",
			AnnotationGeneration:              "3",
			"projectcontour.io/ingress.class": class,
		}),
		OwnerReferences: []metav1.OwnerReference{*kmeta.NewControllerRef(ing)},
	}
}

// withIngressAnnotations adds the KIngress's annotations under the given
// ones, which win, as a serving proxy carries them.
func withIngressAnnotations(ing *netv1alpha1.Ingress, own map[string]string) map[string]string {
	out := make(map[string]string, len(ing.Annotations)+len(own))
	for k, v := range ing.Annotations {
		out[k] = v
	}
	for k, v := range own {
		out[k] = v
	}
	return out
}

var infinite = &contourv1.TimeoutPolicy{Response: "infinity", Idle: "infinity"}

// probeRoute is hitless's probe route of a prefix: only the prober's
// token opens it; Knative's hash of the spec to the backend, the served
// hash in Envoy's answer, the token removed on the way.
func probeRoute(ing *netv1alpha1.Ingress, prefix, hash string, services ...contourv1.Service) contourv1.Route {
	return contourv1.Route{
		Conditions: []contourv1.MatchCondition{
			{Prefix: prefix},
			{Header: &contourv1.HeaderMatchCondition{Name: header.HashKey, Exact: header.HashValueOverride}},
			{Header: &contourv1.HeaderMatchCondition{Name: probekey.Header, Exact: testToken}},
		},
		Services:         services,
		EnableWebsockets: true,
		TimeoutPolicy:    infinite,
		RequestHeadersPolicy: &contourv1.HeadersPolicy{
			Set:    []contourv1.HeaderValue{{Name: header.HashKey, Value: specHash(ing)}},
			Remove: []string{probekey.Header},
		},
		ResponseHeadersPolicy: servedHashAnswer(hash),
	}
}

// withKnativeProbes adds, after the user routes of want and before
// hitless's probe routes (those matching the token), Knative's probe route
// of each user route but ACME challenges' (ingress.InsertProbe): the user
// route itself, matching K-Network-Hash: override too and setting Knative's
// hash of the spec. TestKnativeProbeRoutesKeepTheUserRoute spells one out.
func withKnativeProbes(ing *netv1alpha1.Ingress, want []*contourv1.HTTPProxy) []*contourv1.HTTPProxy {
	for _, p := range want {
		var user, own, knative []contourv1.Route
		for _, r := range p.Spec.Routes {
			isOwn := false
			for _, c := range r.Conditions {
				if c.Header != nil && c.Header.Name == probekey.Header {
					isOwn = true
				}
			}
			if isOwn {
				own = append(own, r)
				continue
			}
			user = append(user, r)
			if isChallengePath(r.Conditions[0].Prefix) {
				continue
			}
			k := *r.DeepCopy()
			k.Conditions = append(k.Conditions, contourv1.MatchCondition{Header: &contourv1.HeaderMatchCondition{Name: header.HashKey, Exact: header.HashValueOverride}})
			set := []contourv1.HeaderValue{{Name: header.HashKey, Value: specHash(ing)}}
			var host []contourv1.HeaderValue
			if k.RequestHeadersPolicy != nil {
				for _, h := range k.RequestHeadersPolicy.Set {
					if h.Name == "Host" {
						host = append(host, h)
					} else {
						set = append(set, h)
					}
				}
			}
			sort.Slice(set, func(i, j int) bool { return set[i].Name < set[j].Name })
			k.RequestHeadersPolicy = &contourv1.HeadersPolicy{Set: append(set, host...)}
			knative = append(knative, k)
		}
		p.Spec.Routes = append(append(user, knative...), own...)
	}
	return want
}

func specHash(ing *netv1alpha1.Ingress) string {
	h, err := Hash(ing)
	if err != nil {
		panic(err)
	}
	return h
}

func servedHashAnswer(hash string) *contourv1.HeadersPolicy {
	return &contourv1.HeadersPolicy{Set: []contourv1.HeaderValue{{Name: probekey.HashHeader, Value: hash}}}
}

func TestMakeServing(t *testing.T) {
	blue := contourv1.Service{Name: "blue", Port: 80, Weight: 100}
	tests := []struct {
		name    string
		ing     *netv1alpha1.Ingress
		cfg     *config.Contour
		network map[string]string // config-network's data
		svcs    []*corev1.Service
		want    func(ing *netv1alpha1.Ingress, hash string) []*contourv1.HTTPProxy
		backend ClassBackends
	}{{
		name: "one external host with one backend maps to one proxy with a probe route",
		ing:  kingress(),
		svcs: []*corev1.Service{svc("blue")},
		want: func(ing *netv1alpha1.Ingress, hash string) []*contourv1.HTTPProxy {
			m := meta(ing, "contour-external", "hello.example.com")
			m.Annotations[AnnotationHash] = hash
			return []*contourv1.HTTPProxy{{
				ObjectMeta: m,
				Spec: contourv1.HTTPProxySpec{
					IngressClassName: "contour-external",
					VirtualHost:      &contourv1.VirtualHost{Fqdn: "hello.example.com"},
					Routes: []contourv1.Route{{
						Conditions:       []contourv1.MatchCondition{{Prefix: "/"}},
						Services:         []contourv1.Service{blue},
						EnableWebsockets: true,
						TimeoutPolicy:    infinite,
						RetryPolicy:      config.DefaultRetryPolicy(),
					}, probeRoute(ing, "/", hash, blue)},
				},
			}}
		},
		backend: ClassBackends{"contour-external": setOf(Backend{Namespace: ns, Name: "blue", Port: 80})},
	}, {
		name: "the KIngress's annotations reach its serving proxy, except kubectl's last-applied record; class annotations name the proxy's class and hitless's own win",
		ing: kingress(func(ing *netv1alpha1.Ingress) {
			ing.Annotations["example.com/team"] = "payments"
			ing.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = `{"kind":"Ingress"}`
			ing.Annotations["kubernetes.io/ingress.class"] = "somebody-else"
			ing.Annotations[AnnotationHash] = "forged"
		}),
		svcs: []*corev1.Service{svc("blue")},
		want: func(ing *netv1alpha1.Ingress, hash string) []*contourv1.HTTPProxy {
			m := meta(ing, "contour-external", "hello.example.com")
			m.Annotations = map[string]string{
				networking.IngressClassAnnotationKey: "contour.ingress.networking.knative.dev",
				"example.com/team":                   "payments",
				"kubernetes.io/ingress.class":        "contour-external",
				"projectcontour.io/ingress.class":    "contour-external",
				AnnotationHash:                       hash,
				AnnotationGeneration:                 "3",
			}
			return []*contourv1.HTTPProxy{{
				ObjectMeta: m,
				Spec: contourv1.HTTPProxySpec{
					IngressClassName: "contour-external",
					VirtualHost:      &contourv1.VirtualHost{Fqdn: "hello.example.com"},
					Routes: []contourv1.Route{{
						Conditions:       []contourv1.MatchCondition{{Prefix: "/"}},
						Services:         []contourv1.Service{blue},
						EnableWebsockets: true,
						TimeoutPolicy:    infinite,
						RetryPolicy:      config.DefaultRetryPolicy(),
					}, probeRoute(ing, "/", hash, blue)},
				},
			}}
		},
		backend: ClassBackends{"contour-external": setOf(Backend{Namespace: ns, Name: "blue", Port: 80})},
	}, {
		name: "a host of an ExternalIP rule in the cluster's domain is served by the internal fleet, expanded like a cluster-local host; the rule's other hosts stay external",
		ing: kingress(func(ing *netv1alpha1.Ingress) {
			ing.Spec.Rules[0].Hosts = []string{"hello.example.com", "hello.ns.svc.cluster.local"}
		}),
		svcs: []*corev1.Service{svc("blue")},
		want: func(ing *netv1alpha1.Ingress, hash string) []*contourv1.HTTPProxy {
			var out []*contourv1.HTTPProxy
			for _, ch := range []struct{ class, host string }{
				{"contour-external", "hello.example.com"},
				{"contour-internal", "hello.ns"},
				{"contour-internal", "hello.ns.svc"},
				{"contour-internal", "hello.ns.svc.cluster.local"},
			} {
				m := meta(ing, ch.class, ch.host)
				m.Annotations[AnnotationHash] = hash
				out = append(out, &contourv1.HTTPProxy{
					ObjectMeta: m,
					Spec: contourv1.HTTPProxySpec{
						IngressClassName: ch.class,
						VirtualHost:      &contourv1.VirtualHost{Fqdn: ch.host},
						Routes: []contourv1.Route{{
							Conditions:       []contourv1.MatchCondition{{Prefix: "/"}},
							Services:         []contourv1.Service{blue},
							EnableWebsockets: true,
							TimeoutPolicy:    infinite,
							RetryPolicy:      config.DefaultRetryPolicy(),
						}, probeRoute(ing, "/", hash, blue)},
					},
				})
			}
			return out
		},
		backend: ClassBackends{
			"contour-external": setOf(Backend{Namespace: ns, Name: "blue", Port: 80}),
			"contour-internal": setOf(Backend{Namespace: ns, Name: "blue", Port: 80}),
		},
	}, {
		name: "an ACME challenge path is served over plain HTTP/1.1 to the solver, with no probe route, and its backend is neither warmed nor held",
		ing: kingress(func(ing *netv1alpha1.Ingress) {
			ing.Spec.Rules[0].HTTP.Paths = append([]netv1alpha1.HTTPIngressPath{challengePath("tok")}, ing.Spec.Rules[0].HTTP.Paths...)
		}),
		// A solver port named http2 would otherwise make the cluster h2c.
		svcs: []*corev1.Service{svc("blue"), svc("cm-acme-http-solver", corev1.ServicePort{Name: "http2", Port: 8089})},
		want: func(ing *netv1alpha1.Ingress, hash string) []*contourv1.HTTPProxy {
			m := meta(ing, "contour-external", "hello.example.com")
			m.Annotations[AnnotationHash] = hash
			return []*contourv1.HTTPProxy{{
				ObjectMeta: m,
				Spec: contourv1.HTTPProxySpec{
					IngressClassName: "contour-external",
					VirtualHost:      &contourv1.VirtualHost{Fqdn: "hello.example.com"},
					Routes: []contourv1.Route{{
						Conditions:       []contourv1.MatchCondition{{Prefix: "/.well-known/acme-challenge/tok"}},
						Services:         []contourv1.Service{{Name: "cm-acme-http-solver", Port: 8089, Weight: 100}},
						EnableWebsockets: true,
						TimeoutPolicy:    infinite,
						RetryPolicy:      config.DefaultRetryPolicy(),
					}, {
						Conditions:       []contourv1.MatchCondition{{Prefix: "/"}},
						Services:         []contourv1.Service{blue},
						EnableWebsockets: true,
						TimeoutPolicy:    infinite,
						RetryPolicy:      config.DefaultRetryPolicy(),
					}, probeRoute(ing, "/", hash, blue)},
				},
			}}
		},
		backend: ClassBackends{"contour-external": setOf(Backend{Namespace: ns, Name: "blue", Port: 80})},
	}, {
		name:    "system-internal-tls: backends are reached over tls (h2 for HTTP/2 ports) and validated against Serving's routing CA; a DomainMapping's route to the internal Envoy stays h2c, an ACME solver plain",
		network: map[string]string{"system-internal-tls": "enabled"},
		ing: kingress(func(ing *netv1alpha1.Ingress) {
			main := ing.Spec.Rules[0].HTTP.Paths[0]
			main.Splits = append(main.Splits, netv1alpha1.IngressBackendSplit{
				IngressBackend: netv1alpha1.IngressBackend{ServiceNamespace: ns, ServiceName: "grpc", ServicePort: intstr.FromInt(81)}, Percent: 50})
			main.Splits[0].Percent = 50
			mapped := netv1alpha1.HTTPIngressPath{
				Path:        "/mapped",
				RewriteHost: "hello.ns.svc.cluster.local",
				Splits: []netv1alpha1.IngressBackendSplit{{
					IngressBackend: netv1alpha1.IngressBackend{ServiceNamespace: ns, ServiceName: "internal-lb", ServicePort: intstr.FromInt(80)},
					Percent:        100,
					AppendHeaders:  map[string]string{"K-Original-Host": "hello.example.com"},
				}},
			}
			ing.Spec.Rules[0].HTTP.Paths = []netv1alpha1.HTTPIngressPath{challengePath("tok"), mapped, main}
		}),
		svcs: []*corev1.Service{svc("blue"), svc("grpc", corev1.ServicePort{Name: "http2", Port: 81}),
			svc("internal-lb", corev1.ServicePort{Name: "http2", Port: 80}), svc("cm-acme-http-solver", corev1.ServicePort{Name: "http", Port: 8089})},
		want: func(ing *netv1alpha1.Ingress, hash string) []*contourv1.HTTPProxy {
			m := meta(ing, "contour-external", "hello.example.com")
			m.Annotations[AnnotationHash] = hash
			validated := &contourv1.UpstreamValidation{
				CACertificate: "knative-testing/hitless-routing-ca",
				SubjectName:   "kn-user-ns",
				SubjectNames:  []string{"kn-user-ns", "kn-routing"},
			}
			tls, h2, h2c := "tls", "h2", "h2c"
			split := []contourv1.Service{
				{Name: "blue", Port: 80, Weight: 50, Protocol: &tls, UpstreamValidation: validated},
				{Name: "grpc", Port: 81, Weight: 50, Protocol: &h2, UpstreamValidation: validated},
			}
			mapped := []contourv1.Service{{Name: "internal-lb", Port: 80, Weight: 100, Protocol: &h2c,
				RequestHeadersPolicy: &contourv1.HeadersPolicy{Set: []contourv1.HeaderValue{{Name: "K-Original-Host", Value: "hello.example.com"}}}}}
			rewrite := &contourv1.HeadersPolicy{Set: []contourv1.HeaderValue{{Name: "Host", Value: "hello.ns.svc.cluster.local"}}}
			mappedProbe := probeRoute(ing, "/mapped", hash, mapped...)
			mappedProbe.RequestHeadersPolicy.Set = append(mappedProbe.RequestHeadersPolicy.Set, rewrite.Set...)
			return []*contourv1.HTTPProxy{{
				ObjectMeta: m,
				Spec: contourv1.HTTPProxySpec{
					IngressClassName: "contour-external",
					VirtualHost:      &contourv1.VirtualHost{Fqdn: "hello.example.com"},
					Routes: []contourv1.Route{{
						Conditions:       []contourv1.MatchCondition{{Prefix: "/.well-known/acme-challenge/tok"}},
						Services:         []contourv1.Service{{Name: "cm-acme-http-solver", Port: 8089, Weight: 100}},
						EnableWebsockets: true,
						TimeoutPolicy:    infinite,
						RetryPolicy:      config.DefaultRetryPolicy(),
					}, {
						Conditions:           []contourv1.MatchCondition{{Prefix: "/mapped"}},
						Services:             mapped,
						EnableWebsockets:     true,
						TimeoutPolicy:        infinite,
						RequestHeadersPolicy: rewrite,
						RetryPolicy:          config.DefaultRetryPolicy(),
					}, {
						Conditions:       []contourv1.MatchCondition{{Prefix: "/"}},
						Services:         split,
						EnableWebsockets: true,
						TimeoutPolicy:    infinite,
						RetryPolicy:      config.DefaultRetryPolicy(),
					}, mappedProbe, probeRoute(ing, "/", hash, split...)},
				},
			}}
		},
		backend: ClassBackends{"contour-external": setOf(
			Backend{Namespace: ns, Name: "blue", Port: 80, Protocol: "tls"},
			Backend{Namespace: ns, Name: "grpc", Port: 81, Protocol: "h2"},
			Backend{Namespace: ns, Name: "internal-lb", Port: 80, Protocol: "h2c", HostRewrite: "hello.ns.svc.cluster.local"},
		)},
	}, {
		name: "weighted splits keep their weights, a 0% split gets no route, and headers are set before and after the split",
		ing: kingress(func(ing *netv1alpha1.Ingress) {
			p := &ing.Spec.Rules[0].HTTP.Paths[0]
			p.Path = "/api"
			p.AppendHeaders = map[string]string{"X-Pre": "1"}
			p.RewriteHost = "rewritten.example.com"
			p.Splits = []netv1alpha1.IngressBackendSplit{
				{IngressBackend: netv1alpha1.IngressBackend{ServiceNamespace: ns, ServiceName: "blue", ServicePort: intstr.FromInt(80)}, Percent: 70, AppendHeaders: map[string]string{"X-Rev": "blue"}},
				{IngressBackend: netv1alpha1.IngressBackend{ServiceNamespace: ns, ServiceName: "green", ServicePort: intstr.FromString("http2")}, Percent: 30},
				{IngressBackend: netv1alpha1.IngressBackend{ServiceNamespace: ns, ServiceName: "gone", ServicePort: intstr.FromInt(80)}, Percent: 0},
			}
		}),
		svcs: []*corev1.Service{svc("blue"), svc("green", corev1.ServicePort{Name: "http2", Port: 81})},
		want: func(ing *netv1alpha1.Ingress, hash string) []*contourv1.HTTPProxy {
			m := meta(ing, "contour-external", "hello.example.com")
			m.Annotations[AnnotationHash] = hash
			services := []contourv1.Service{
				{Name: "blue", Port: 80, Weight: 70, RequestHeadersPolicy: &contourv1.HeadersPolicy{Set: []contourv1.HeaderValue{{Name: "X-Rev", Value: "blue"}}}},
				{Name: "green", Port: 81, Weight: 30, Protocol: ptr.To("h2c")},
			}
			return []*contourv1.HTTPProxy{{
				ObjectMeta: m,
				Spec: contourv1.HTTPProxySpec{
					IngressClassName: "contour-external",
					VirtualHost:      &contourv1.VirtualHost{Fqdn: "hello.example.com"},
					Routes: []contourv1.Route{{
						Conditions:       []contourv1.MatchCondition{{Prefix: "/api"}},
						Services:         services,
						EnableWebsockets: true,
						TimeoutPolicy:    infinite,
						RetryPolicy:      config.DefaultRetryPolicy(),
						RequestHeadersPolicy: &contourv1.HeadersPolicy{Set: []contourv1.HeaderValue{
							{Name: "X-Pre", Value: "1"}, {Name: "Host", Value: "rewritten.example.com"}}},
					}, {
						Conditions: []contourv1.MatchCondition{
							{Prefix: "/api"},
							{Header: &contourv1.HeaderMatchCondition{Name: header.HashKey, Exact: header.HashValueOverride}},
							{Header: &contourv1.HeaderMatchCondition{Name: probekey.Header, Exact: testToken}},
						},
						Services:         services,
						EnableWebsockets: true,
						TimeoutPolicy:    infinite,
						RequestHeadersPolicy: &contourv1.HeadersPolicy{Set: []contourv1.HeaderValue{
							{Name: header.HashKey, Value: specHash(ing)}, {Name: "X-Pre", Value: "1"}, {Name: "Host", Value: "rewritten.example.com"}},
							Remove: []string{probekey.Header}},
						ResponseHeadersPolicy: servedHashAnswer(hash),
					}},
				},
			}}
		},
		// Contour names each cluster by the Host too (its SNI).
		backend: ClassBackends{"contour-external": setOf(
			Backend{Namespace: ns, Name: "blue", Port: 80, HostRewrite: "rewritten.example.com"},
			Backend{Namespace: ns, Name: "green", Port: 81, Protocol: "h2c", HostRewrite: "rewritten.example.com"})},
	}, {
		name: "a cluster-local host expands to its short forms on the internal class",
		ing: kingress(func(ing *netv1alpha1.Ingress) {
			ing.Spec.Rules[0].Hosts = []string{"hello.ns.svc.cluster.local"}
			ing.Spec.Rules[0].Visibility = netv1alpha1.IngressVisibilityClusterLocal
		}),
		svcs: []*corev1.Service{svc("blue", corev1.ServicePort{Port: 80, AppProtocol: ptr.To("kubernetes.io/h2c")})},
		want: func(ing *netv1alpha1.Ingress, hash string) []*contourv1.HTTPProxy {
			var out []*contourv1.HTTPProxy
			h2c := contourv1.Service{Name: "blue", Port: 80, Weight: 100, Protocol: ptr.To("h2c")}
			for _, host := range []string{"hello.ns", "hello.ns.svc", "hello.ns.svc.cluster.local"} {
				m := meta(ing, "contour-internal", host)
				m.Annotations[AnnotationHash] = hash
				out = append(out, &contourv1.HTTPProxy{
					ObjectMeta: m,
					Spec: contourv1.HTTPProxySpec{
						IngressClassName: "contour-internal",
						VirtualHost:      &contourv1.VirtualHost{Fqdn: host},
						Routes: []contourv1.Route{{
							Conditions:       []contourv1.MatchCondition{{Prefix: "/"}},
							Services:         []contourv1.Service{h2c},
							EnableWebsockets: true,
							TimeoutPolicy:    infinite,
							RetryPolicy:      config.DefaultRetryPolicy(),
						}, probeRoute(ing, "/", hash, h2c)},
					},
				})
			}
			return out
		},
		backend: ClassBackends{"contour-internal": setOf(Backend{Namespace: ns, Name: "blue", Port: 80, Protocol: "h2c"})},
	}, {
		name: "rules sharing a host are merged into one proxy, a repeated path kept once, header matches kept on user routes only",
		ing: kingress(func(ing *netv1alpha1.Ingress) {
			r := ing.Spec.Rules[0]
			r2 := *r.DeepCopy()
			r2.HTTP.Paths[0].Headers = map[string]netv1alpha1.HeaderMatch{"X-Tag": {Exact: "a"}}
			ing.Spec.Rules = append(ing.Spec.Rules, r2, *r.DeepCopy())
		}),
		svcs: []*corev1.Service{svc("blue")},
		want: func(ing *netv1alpha1.Ingress, hash string) []*contourv1.HTTPProxy {
			m := meta(ing, "contour-external", "hello.example.com")
			m.Annotations[AnnotationHash] = hash
			return []*contourv1.HTTPProxy{{
				ObjectMeta: m,
				Spec: contourv1.HTTPProxySpec{
					IngressClassName: "contour-external",
					VirtualHost:      &contourv1.VirtualHost{Fqdn: "hello.example.com"},
					Routes: []contourv1.Route{{
						Conditions:       []contourv1.MatchCondition{{Prefix: "/"}},
						Services:         []contourv1.Service{blue},
						EnableWebsockets: true,
						TimeoutPolicy:    infinite,
						RetryPolicy:      config.DefaultRetryPolicy(),
					}, {
						Conditions:       []contourv1.MatchCondition{{Prefix: "/"}, {Header: &contourv1.HeaderMatchCondition{Name: "X-Tag", Exact: "a"}}},
						Services:         []contourv1.Service{blue},
						EnableWebsockets: true,
						TimeoutPolicy:    infinite,
						RetryPolicy:      config.DefaultRetryPolicy(),
					}, probeRoute(ing, "/", hash, blue)},
				},
			}}
		},
		backend: ClassBackends{"contour-external": setOf(Backend{Namespace: ns, Name: "blue", Port: 80})},
	}, {
		name: "TLS from spec.tls with httpOption Redirected: user routes redirect, probe routes stay plain",
		ing: kingress(func(ing *netv1alpha1.Ingress) {
			ing.Spec.TLS = []netv1alpha1.IngressTLS{{Hosts: []string{"hello.example.com"}, SecretName: "cert", SecretNamespace: "certs"}}
			ing.Spec.HTTPOption = netv1alpha1.HTTPOptionRedirected
		}),
		svcs: []*corev1.Service{svc("blue")},
		want: func(ing *netv1alpha1.Ingress, hash string) []*contourv1.HTTPProxy {
			m := meta(ing, "contour-external", "hello.example.com")
			m.Annotations[AnnotationHash] = hash
			probe := probeRoute(ing, "/", hash, blue)
			probe.PermitInsecure = true
			return []*contourv1.HTTPProxy{{
				ObjectMeta: m,
				Spec: contourv1.HTTPProxySpec{
					IngressClassName: "contour-external",
					VirtualHost:      &contourv1.VirtualHost{Fqdn: "hello.example.com", TLS: &contourv1.TLS{SecretName: "certs/cert"}},
					Routes: []contourv1.Route{{
						Conditions:       []contourv1.MatchCondition{{Prefix: "/"}},
						Services:         []contourv1.Service{blue},
						EnableWebsockets: true,
						TimeoutPolicy:    infinite,
						RetryPolicy:      config.DefaultRetryPolicy(),
					}, probe},
				},
			}}
		},
		backend: ClassBackends{"contour-external": setOf(Backend{Namespace: ns, Name: "blue", Port: 80})},
	}, {
		// Serving hands over the host's certificate and the renewal's
		// challenge together while a certificate renews.
		name: "a renewal's ACME challenge on a TLS host with httpOption Redirected is served over plain HTTP while the user routes redirect",
		ing: kingress(func(ing *netv1alpha1.Ingress) {
			ing.Spec.TLS = []netv1alpha1.IngressTLS{{Hosts: []string{"hello.example.com"}, SecretName: "cert", SecretNamespace: "certs"}}
			ing.Spec.HTTPOption = netv1alpha1.HTTPOptionRedirected
			ing.Spec.Rules[0].HTTP.Paths = append([]netv1alpha1.HTTPIngressPath{challengePath("tok")}, ing.Spec.Rules[0].HTTP.Paths...)
		}),
		svcs: []*corev1.Service{svc("blue"), svc("cm-acme-http-solver", corev1.ServicePort{Name: "http", Port: 8089})},
		want: func(ing *netv1alpha1.Ingress, hash string) []*contourv1.HTTPProxy {
			m := meta(ing, "contour-external", "hello.example.com")
			m.Annotations[AnnotationHash] = hash
			probe := probeRoute(ing, "/", hash, blue)
			probe.PermitInsecure = true
			return []*contourv1.HTTPProxy{{
				ObjectMeta: m,
				Spec: contourv1.HTTPProxySpec{
					IngressClassName: "contour-external",
					VirtualHost:      &contourv1.VirtualHost{Fqdn: "hello.example.com", TLS: &contourv1.TLS{SecretName: "certs/cert"}},
					Routes: []contourv1.Route{{
						Conditions:       []contourv1.MatchCondition{{Prefix: "/.well-known/acme-challenge/tok"}},
						Services:         []contourv1.Service{{Name: "cm-acme-http-solver", Port: 8089, Weight: 100}},
						EnableWebsockets: true,
						TimeoutPolicy:    infinite,
						RetryPolicy:      config.DefaultRetryPolicy(),
						PermitInsecure:   true,
					}, {
						Conditions:       []contourv1.MatchCondition{{Prefix: "/"}},
						Services:         []contourv1.Service{blue},
						EnableWebsockets: true,
						TimeoutPolicy:    infinite,
						RetryPolicy:      config.DefaultRetryPolicy(),
					}, probe},
				},
			}}
		},
		backend: ClassBackends{"contour-external": setOf(Backend{Namespace: ns, Name: "blue", Port: 80})},
	}, {
		// What Serving writes for http-protocol Disabled or a value it does
		// not know; net-contour redirects such a host, and a cluster moving
		// over keeps that.
		name: "TLS with an empty httpOption redirects plain HTTP, as Redirected does",
		ing: kingress(func(ing *netv1alpha1.Ingress) {
			ing.Spec.TLS = []netv1alpha1.IngressTLS{{Hosts: []string{"hello.example.com"}, SecretName: "cert", SecretNamespace: "certs"}}
		}),
		svcs: []*corev1.Service{svc("blue")},
		want: func(ing *netv1alpha1.Ingress, hash string) []*contourv1.HTTPProxy {
			m := meta(ing, "contour-external", "hello.example.com")
			m.Annotations[AnnotationHash] = hash
			probe := probeRoute(ing, "/", hash, blue)
			probe.PermitInsecure = true
			return []*contourv1.HTTPProxy{{
				ObjectMeta: m,
				Spec: contourv1.HTTPProxySpec{
					IngressClassName: "contour-external",
					VirtualHost:      &contourv1.VirtualHost{Fqdn: "hello.example.com", TLS: &contourv1.TLS{SecretName: "certs/cert"}},
					Routes: []contourv1.Route{{
						Conditions:       []contourv1.MatchCondition{{Prefix: "/"}},
						Services:         []contourv1.Service{blue},
						EnableWebsockets: true,
						TimeoutPolicy:    infinite,
						RetryPolicy:      config.DefaultRetryPolicy(),
					}, probe},
				},
			}}
		},
		backend: ClassBackends{"contour-external": setOf(Backend{Namespace: ns, Name: "blue", Port: 80})},
	}, {
		// cluster-local-domain-tls with http-protocol Redirected: in-cluster
		// callers use http://, and a redirected POST loses its body
		// (net-contour#848), so cluster-local hosts serve both.
		name: "a cluster-local TLS host is never redirected, even under Redirected",
		ing: kingress(func(ing *netv1alpha1.Ingress) {
			ing.Spec.Rules[0].Hosts = []string{"hello.ns.svc.cluster.local"}
			ing.Spec.Rules[0].Visibility = netv1alpha1.IngressVisibilityClusterLocal
			ing.Spec.TLS = []netv1alpha1.IngressTLS{{Hosts: []string{"hello.ns.svc.cluster.local"}, SecretName: "local-cert"}}
			ing.Spec.HTTPOption = netv1alpha1.HTTPOptionRedirected
		}),
		svcs: []*corev1.Service{svc("blue")},
		want: func(ing *netv1alpha1.Ingress, hash string) []*contourv1.HTTPProxy {
			var out []*contourv1.HTTPProxy
			for _, host := range []string{"hello.ns", "hello.ns.svc", "hello.ns.svc.cluster.local"} {
				m := meta(ing, "contour-internal", host)
				m.Annotations[AnnotationHash] = hash
				var tls *contourv1.TLS
				if host == "hello.ns.svc.cluster.local" {
					tls = &contourv1.TLS{SecretName: "local-cert"}
				}
				probe := probeRoute(ing, "/", hash, blue)
				probe.PermitInsecure = tls != nil
				out = append(out, &contourv1.HTTPProxy{
					ObjectMeta: m,
					Spec: contourv1.HTTPProxySpec{
						IngressClassName: "contour-internal",
						VirtualHost:      &contourv1.VirtualHost{Fqdn: host, TLS: tls},
						Routes: []contourv1.Route{{
							Conditions:       []contourv1.MatchCondition{{Prefix: "/"}},
							Services:         []contourv1.Service{blue},
							EnableWebsockets: true,
							TimeoutPolicy:    infinite,
							RetryPolicy:      config.DefaultRetryPolicy(),
							PermitInsecure:   tls != nil,
						}, probe},
					},
				})
			}
			return out
		},
		backend: ClassBackends{"contour-internal": setOf(Backend{Namespace: ns, Name: "blue", Port: 80})},
	}, {
		name: "extension-service annotations put the host behind the authorization server, and every route, probes too, behind HTTPS",
		ing: kingress(func(ing *netv1alpha1.Ingress) {
			ing.Annotations[AnnotationExtensionService] = "authz"
			ing.Annotations[AnnotationExtensionServiceNamespace] = "auth-system"
			ing.Spec.TLS = []netv1alpha1.IngressTLS{{Hosts: []string{"hello.example.com"}, SecretName: "cert", SecretNamespace: ns}}
			// Enabled would serve plain HTTP, which Contour never authorizes.
			ing.Spec.HTTPOption = netv1alpha1.HTTPOptionEnabled
		}),
		svcs: []*corev1.Service{svc("blue")},
		want: func(ing *netv1alpha1.Ingress, hash string) []*contourv1.HTTPProxy {
			m := meta(ing, "contour-external", "hello.example.com")
			m.Annotations[AnnotationHash] = hash
			// Only the prober's token opens it: the authorization server
			// is for users.
			ownProbe := probeRoute(ing, "/", hash, blue)
			ownProbe.AuthPolicy = &contourv1.AuthorizationPolicy{Disabled: true}
			return []*contourv1.HTTPProxy{{
				ObjectMeta: m,
				Spec: contourv1.HTTPProxySpec{
					IngressClassName: "contour-external",
					VirtualHost: &contourv1.VirtualHost{
						Fqdn: "hello.example.com",
						TLS:  &contourv1.TLS{SecretName: "cert"},
						Authorization: &contourv1.AuthorizationServer{ExtensionServiceRef: contourv1.ExtensionServiceReference{
							Namespace: "auth-system", Name: "authz",
						}},
					},
					Routes: []contourv1.Route{{
						Conditions:       []contourv1.MatchCondition{{Prefix: "/"}},
						Services:         []contourv1.Service{blue},
						EnableWebsockets: true,
						TimeoutPolicy:    infinite,
						RetryPolicy:      config.DefaultRetryPolicy(),
					}, ownProbe},
				},
			}}
		},
		backend: ClassBackends{"contour-external": setOf(Backend{Namespace: ns, Name: "blue", Port: 80})},
	}, {
		name: "default-tls-secret, timeouts and CORS come from config-contour; httpOption Enabled serves plain HTTP too",
		ing: kingress(func(ing *netv1alpha1.Ingress) {
			ing.Spec.HTTPOption = netv1alpha1.HTTPOptionEnabled
		}),
		cfg: func() *config.Contour {
			c := config.DefaultContour()
			c.DefaultTLSSecret = &types.NamespacedName{Namespace: ns, Name: "wildcard"}
			c.TimeoutPolicyResponse = "60s"
			c.TimeoutPolicyIdle = "5m"
			c.RetryPolicy = &contourv1.RetryPolicy{NumRetries: 1, RetryOn: []contourv1.RetryOn{"reset"}}
			c.CORSPolicy = &contourv1.CORSPolicy{AllowOrigin: []string{"*"}, AllowMethods: []contourv1.CORSHeaderValue{"GET"}}
			return c
		}(),
		svcs: []*corev1.Service{svc("blue")},
		want: func(ing *netv1alpha1.Ingress, hash string) []*contourv1.HTTPProxy {
			m := meta(ing, "contour-external", "hello.example.com")
			m.Annotations[AnnotationHash] = hash
			timeouts := &contourv1.TimeoutPolicy{Response: "60s", Idle: "5m"}
			probe := probeRoute(ing, "/", hash, blue)
			probe.PermitInsecure = true
			probe.TimeoutPolicy = timeouts
			return []*contourv1.HTTPProxy{{
				ObjectMeta: m,
				Spec: contourv1.HTTPProxySpec{
					IngressClassName: "contour-external",
					VirtualHost: &contourv1.VirtualHost{
						Fqdn:       "hello.example.com",
						TLS:        &contourv1.TLS{SecretName: "wildcard"},
						CORSPolicy: &contourv1.CORSPolicy{AllowOrigin: []string{"*"}, AllowMethods: []contourv1.CORSHeaderValue{"GET"}},
					},
					Routes: []contourv1.Route{{
						Conditions:       []contourv1.MatchCondition{{Prefix: "/"}},
						Services:         []contourv1.Service{blue},
						EnableWebsockets: true,
						PermitInsecure:   true,
						TimeoutPolicy:    timeouts,
						RetryPolicy:      &contourv1.RetryPolicy{NumRetries: 1, RetryOn: []contourv1.RetryOn{"reset"}},
					}, probe},
				},
			}}
		},
		backend: ClassBackends{"contour-external": setOf(Backend{Namespace: ns, Name: "blue", Port: 80})},
	}, {
		name: "an ExternalName Service is a backend like any other (Contour decides whether it may be used), its port name picks h2c",
		ing: kingress(func(ing *netv1alpha1.Ingress) {
			ing.Spec.Rules[0].HTTP.Paths[0].RewriteHost = "private.ns.svc.cluster.local"
		}),
		svcs: []*corev1.Service{{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "blue"},
			Spec: corev1.ServiceSpec{
				Type:         corev1.ServiceTypeExternalName,
				ExternalName: "envoy.contour-internal.svc.cluster.local",
				Ports:        []corev1.ServicePort{{Name: "http2", Port: 80}},
			},
		}},
		want: func(ing *netv1alpha1.Ingress, hash string) []*contourv1.HTTPProxy {
			m := meta(ing, "contour-external", "hello.example.com")
			m.Annotations[AnnotationHash] = hash
			h2c := contourv1.Service{Name: "blue", Port: 80, Weight: 100, Protocol: ptr.To("h2c")}
			host := contourv1.HeaderValue{Name: "Host", Value: "private.ns.svc.cluster.local"}
			probe := probeRoute(ing, "/", hash, h2c)
			probe.RequestHeadersPolicy.Set = append(probe.RequestHeadersPolicy.Set, host)
			return []*contourv1.HTTPProxy{{
				ObjectMeta: m,
				Spec: contourv1.HTTPProxySpec{
					IngressClassName: "contour-external",
					VirtualHost:      &contourv1.VirtualHost{Fqdn: "hello.example.com"},
					Routes: []contourv1.Route{{
						Conditions:           []contourv1.MatchCondition{{Prefix: "/"}},
						Services:             []contourv1.Service{h2c},
						EnableWebsockets:     true,
						TimeoutPolicy:        infinite,
						RetryPolicy:          config.DefaultRetryPolicy(),
						RequestHeadersPolicy: &contourv1.HeadersPolicy{Set: []contourv1.HeaderValue{host}},
					}, probe},
				},
			}}
		},
		backend: ClassBackends{"contour-external": setOf(Backend{Namespace: ns, Name: "blue", Port: 80, Protocol: "h2c", HostRewrite: "private.ns.svc.cluster.local"})},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := bg()
			if tc.cfg != nil || tc.network != nil {
				cc := tc.cfg
				if cc == nil {
					cc = config.DefaultContour()
				}
				network, err := netcfg.NewConfigFromMap(tc.network)
				if err != nil {
					t.Fatal(err)
				}
				ctx = config.ToContext(ctx, &config.Config{Contour: cc, Network: network})
			}
			got, err := MakeServing(ctx, tc.ing, resolverOf(tc.svcs...))
			if err != nil {
				t.Fatalf("MakeServing() = %v", err)
			}
			// The hash is the digest of the proxies as they are without it.
			if want := servedHash(withKnativeProbes(tc.ing, tc.want(tc.ing, pendingHash))); got.Hash != want {
				t.Errorf("Hash = %q, want %q", got.Hash, want)
			}
			if diff := cmp.Diff(withKnativeProbes(tc.ing, tc.want(tc.ing, got.Hash)), got.Proxies); diff != "" {
				t.Errorf("proxies (-want, +got):\n%s", diff)
			}
			if !got.Backends.Equal(tc.backend) {
				t.Errorf("Backends = %v, want %v", got.Backends, tc.backend)
			}
		})
	}
}

// TestServedHashFollowsWhatIsServed: the hash the probe routes carry changes
// with anything that changes what Envoy serves for the KIngress, its spec or
// not, and with nothing else; so a probe round confirms exactly the routes
// being switched to.
func TestServedHashFollowsWhatIsServed(t *testing.T) {
	hashOf := func(ctx context.Context, ing *netv1alpha1.Ingress, svcs ...*corev1.Service) string {
		t.Helper()
		got, err := MakeServing(ctx, ing, resolverOf(svcs...))
		if err != nil {
			t.Fatal(err)
		}
		return got.Hash
	}
	noRetries := config.DefaultContour()
	noRetries.RetryPolicy = nil
	base := hashOf(bg(), kingress(), svc("blue"))
	for _, tc := range []struct {
		name string
		hash string
		same bool
	}{{
		name: "the same KIngress and configuration",
		hash: hashOf(bg(), kingress(), svc("blue")),
		same: true,
	}, {
		name: "an annotation of the KIngress alone (copied to the proxies' metadata, not their routes)",
		hash: hashOf(bg(), kingress(func(ing *netv1alpha1.Ingress) { ing.Annotations["example.com/team"] = "a" }), svc("blue")),
		same: true,
	}, {
		name: "another generation of the same spec",
		hash: hashOf(bg(), kingress(func(ing *netv1alpha1.Ingress) { ing.Generation++ }), svc("blue")),
		same: true,
	}, {
		name: "a header the spec adds",
		hash: hashOf(bg(), kingress(func(ing *netv1alpha1.Ingress) {
			ing.Spec.Rules[0].HTTP.Paths[0].AppendHeaders = map[string]string{"X-A": "1"}
		}), svc("blue")),
	}, {
		name: "config-contour's retry policy",
		hash: hashOf(config.ToContext(bg(), &config.Config{Contour: noRetries}), kingress(), svc("blue")),
	}, {
		name: "the backend Service's port renamed http2 (the upstream protocol becomes h2c)",
		hash: hashOf(bg(), kingress(), svc("blue", corev1.ServicePort{Name: "http2", Port: 80})),
	}} {
		if same := tc.hash == base; same != tc.same {
			t.Errorf("%s: hash equal to the base's = %v, want %v", tc.name, same, tc.same)
		}
	}
}

func TestMakeServingBadInput(t *testing.T) {
	tests := []struct {
		name   string
		ing    *netv1alpha1.Ingress
		svcs   []*corev1.Service
		reason string
	}{{
		name:   "a missing Service is bad input naming the Service",
		ing:    kingress(),
		reason: "ServiceNotFound",
	}, {
		name:   "a split to a port the Service lacks is refused",
		ing:    kingress(),
		svcs:   []*corev1.Service{svc("blue", corev1.ServicePort{Name: "http", Port: 8080})},
		reason: "ServicePortNotFound",
	}, {
		name: "a backend in another namespace is refused",
		ing: kingress(func(ing *netv1alpha1.Ingress) {
			ing.Spec.Rules[0].HTTP.Paths[0].Splits[0].ServiceNamespace = "other"
		}),
		reason: "CrossNamespaceBackend",
	}, {
		name:   "a rule without http is refused",
		ing:    kingress(func(ing *netv1alpha1.Ingress) { ing.Spec.Rules[0].HTTP = nil }),
		reason: "RuleWithoutHTTP",
	}, {
		name:   "an invalid host is refused",
		ing:    kingress(func(ing *netv1alpha1.Ingress) { ing.Spec.Rules[0].Hosts = []string{"Not_A_Host"} }),
		svcs:   []*corev1.Service{svc("blue")},
		reason: "InvalidHost",
	}, {
		name:   "a host in the reserved warm domain is refused",
		ing:    kingress(func(ing *netv1alpha1.Ingress) { ing.Spec.Rules[0].Hosts = []string{"x." + names.WarmDomain} }),
		svcs:   []*corev1.Service{svc("blue")},
		reason: "InvalidHost",
	}, {
		// The attack tried on the stack: namespace ns claims b's Service
		// name and takes its in-cluster traffic.
		name: "another namespace's cluster-local host is refused",
		ing: kingress(func(ing *netv1alpha1.Ingress) {
			ing.Spec.Rules[0].Hosts = []string{"victim.b.svc.cluster.local"}
			ing.Spec.Rules[0].Visibility = netv1alpha1.IngressVisibilityClusterLocal
		}),
		svcs:   []*corev1.Service{svc("blue")},
		reason: "HostOfAnotherNamespace",
	}, {
		name: "another namespace's short cluster-local host is refused",
		ing: kingress(func(ing *netv1alpha1.Ingress) {
			ing.Spec.Rules[0].Hosts = []string{"victim.b"}
			ing.Spec.Rules[0].Visibility = netv1alpha1.IngressVisibilityClusterLocal
		}),
		svcs:   []*corev1.Service{svc("blue")},
		reason: "HostOfAnotherNamespace",
	}, {
		// An external rule's host in the cluster domain is served by the
		// internal fleet all the same.
		name:   "another namespace's cluster-domain host on an external rule is refused",
		ing:    kingress(func(ing *netv1alpha1.Ingress) { ing.Spec.Rules[0].Hosts = []string{"victim.b.svc.cluster.local"} }),
		svcs:   []*corev1.Service{svc("blue")},
		reason: "HostOfAnotherNamespace",
	}, {
		name:   "a rule without hosts is refused",
		ing:    kingress(func(ing *netv1alpha1.Ingress) { ing.Spec.Rules[0].Hosts = nil }),
		reason: "RuleWithoutHosts",
	}, {
		name:   "an unknown visibility is refused",
		ing:    kingress(func(ing *netv1alpha1.Ingress) { ing.Spec.Rules[0].Visibility = "Mesh" }),
		reason: "UnknownVisibility",
	}, {
		name:   "a path without splits is refused",
		ing:    kingress(func(ing *netv1alpha1.Ingress) { ing.Spec.Rules[0].HTTP.Paths[0].Splits = nil }),
		reason: "PathWithoutSplits",
	}, {
		name: "a TLS entry without a secret is refused",
		ing: kingress(func(ing *netv1alpha1.Ingress) {
			ing.Spec.TLS = []netv1alpha1.IngressTLS{{Hosts: []string{"hello.example.com"}}}
		}),
		svcs:   []*corev1.Service{svc("blue")},
		reason: "InvalidTLS",
	}, {
		name: "authorization asked for a host without TLS is refused, not served open",
		ing: kingress(func(ing *netv1alpha1.Ingress) {
			ing.Annotations[AnnotationExtensionService] = "authz"
		}),
		svcs:   []*corev1.Service{svc("blue")},
		reason: "AuthorizationWithoutTLS",
	}, {
		name: "an empty extension-service annotation is refused, not served open",
		ing: kingress(func(ing *netv1alpha1.Ingress) {
			ing.Annotations[AnnotationExtensionService] = ""
			ing.Spec.TLS = []netv1alpha1.IngressTLS{{Hosts: []string{"hello.example.com"}, SecretName: "cert"}}
		}),
		svcs:   []*corev1.Service{svc("blue")},
		reason: "InvalidAuthorization",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := MakeServing(bg(), tc.ing, resolverOf(tc.svcs...))
			var se *SpecError
			var be *BackendError
			switch {
			case errors.As(err, &se):
				if se.Reason != tc.reason {
					t.Errorf("reason = %q (%s), want %q", se.Reason, se.Message, tc.reason)
				}
			case errors.As(err, &be):
				if be.Reason != tc.reason {
					t.Errorf("reason = %q (%s), want %q", be.Reason, be.Message, tc.reason)
				}
			default:
				t.Fatalf("MakeServing() = %v, want bad input %s", err, tc.reason)
			}
		})
	}
}

func TestProbeTargets(t *testing.T) {
	ing := kingress(func(ing *netv1alpha1.Ingress) {
		ing.Spec.Rules[0].HTTP.Paths = append(ing.Spec.Rules[0].HTTP.Paths, netv1alpha1.HTTPIngressPath{
			Path:   "/v2",
			Splits: ing.Spec.Rules[0].HTTP.Paths[0].Splits,
		})
		// Copied to secure.example.com below: challenge paths are never probed.
		ing.Spec.Rules[0].HTTP.Paths = append([]netv1alpha1.HTTPIngressPath{challengePath("tok")}, ing.Spec.Rules[0].HTTP.Paths...)
		ing.Spec.Rules = append(ing.Spec.Rules, netv1alpha1.IngressRule{
			Hosts:      []string{"hello.ns.svc.cluster.local"},
			Visibility: netv1alpha1.IngressVisibilityClusterLocal,
			HTTP:       ing.Spec.Rules[0].HTTP.DeepCopy(),
		}, netv1alpha1.IngressRule{
			Hosts:      []string{"secure.example.com"},
			Visibility: netv1alpha1.IngressVisibilityExternalIP,
			HTTP:       ing.Spec.Rules[0].HTTP.DeepCopy(),
		})
		// Only secure.example.com terminates TLS: it is probed over HTTPS too.
		ing.Spec.TLS = []netv1alpha1.IngressTLS{{Hosts: []string{"secure.example.com"}, SecretName: "cert", SecretNamespace: ing.Namespace}}
	})
	got, err := ProbeTargets(bg(), ing)
	if err != nil {
		t.Fatal(err)
	}
	want := []ProbeTarget{
		{Class: "contour-external", Host: "hello.example.com", Path: "/"},
		{Class: "contour-external", Host: "hello.example.com", Path: "/v2"},
		{Class: "contour-external", Host: "secure.example.com", Path: "/", TLS: true},
		{Class: "contour-external", Host: "secure.example.com", Path: "/v2", TLS: true},
		{Class: "contour-internal", Host: "hello.ns", Path: "/"},
		{Class: "contour-internal", Host: "hello.ns", Path: "/v2"},
		{Class: "contour-internal", Host: "hello.ns.svc", Path: "/"},
		{Class: "contour-internal", Host: "hello.ns.svc", Path: "/v2"},
		{Class: "contour-internal", Host: "hello.ns.svc.cluster.local", Path: "/"},
		{Class: "contour-internal", Host: "hello.ns.svc.cluster.local", Path: "/v2"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ProbeTargets (-want, +got):\n%s", diff)
	}

	// Behind an authorization server every host is served over HTTPS only.
	authorized := kingress(func(ing *netv1alpha1.Ingress) {
		ing.Annotations[AnnotationExtensionService] = "authz"
		ing.Spec.TLS = []netv1alpha1.IngressTLS{{Hosts: []string{"hello.example.com"}, SecretName: "cert"}}
	})
	got, err = ProbeTargets(bg(), authorized)
	if err != nil {
		t.Fatal(err)
	}
	want = []ProbeTarget{{Class: "contour-external", Host: "hello.example.com", Path: "/", TLS: true, SecureOnly: true}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ProbeTargets of an authorized KIngress (-want, +got):\n%s", diff)
	}
}

func TestProxyNamesAreValidForAnyKIngressName(t *testing.T) {
	for _, name := range []string{"a", strings.Repeat("x", 63), strings.Repeat("long-name.", 25) + "end"} {
		ing := kingress(func(ing *netv1alpha1.Ingress) { ing.Name = name })
		got, err := MakeServing(bg(), ing, resolverOf(svc("blue")))
		if err != nil {
			t.Fatalf("MakeServing(%q) = %v", name, err)
		}
		for _, p := range got.Proxies {
			if len(p.Name) > 63 {
				t.Errorf("name %q of KIngress %q is %d characters", p.Name, name, len(p.Name))
			}
			for k, v := range p.Labels {
				if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
					t.Errorf("label %s=%q of KIngress %q: %v", k, v, name, errs)
				}
			}
		}
	}
}

func TestClusterLocalNamespace(t *testing.T) {
	for host, want := range map[string]string{
		"hello.ns.svc.cluster.local": "ns",
		"hello.ns.svc":               "ns",
		"hello.ns":                   "ns",
		"pod.sub.ns.svc":             "ns",
		"hello.example.com":          "",
		"localhost":                  "",
	} {
		got, ok := clusterLocalNamespace(host)
		if got != want || ok != (want != "") {
			t.Errorf("clusterLocalNamespace(%q) = %q, %v; want %q", host, got, ok, want)
		}
	}
}

// TestWhatEachProxyCarries: a serving proxy carries hitless's two labels,
// net-contour's four lookup labels and the KIngress's annotations; a warm
// proxy hitless's labels and its hash alone. No label of the KIngress
// reaches either: a selector written for the KIngress's objects (Serving's
// route labels, a network policy, external-dns's filter) must not pick a
// proxy, least of all a warm one that serves no user host.
func TestWhatEachProxyCarries(t *testing.T) {
	ing := kingress(func(ing *netv1alpha1.Ingress) {
		ing.Labels = map[string]string{"serving.knative.dev/route": "hello", "team": "payments"}
		ing.Annotations["external-dns.alpha.kubernetes.io/hostname"] = "hello.example.com"
	})
	s, err := MakeServing(bg(), ing, resolverOf(svc("blue")))
	if err != nil {
		t.Fatal(err)
	}
	w, err := MakeWarm(bg(), ing, s.Backends, s.Backends, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := s.Proxies[0]
	wantServing := map[string]string{
		LabelIngress: ing.Name, LabelRole: RoleServing,
		"contour.networking.knative.dev/parent":     ing.Name,
		"contour.networking.knative.dev/generation": "3",
		"contour.networking.knative.dev/domainHash": fmt.Sprintf("%x", sha1.Sum([]byte("hello.example.com"))),
		"projectcontour.io/ingress.class":           "contour-external",
	}
	if diff := cmp.Diff(wantServing, p.Labels); diff != "" {
		t.Errorf("serving proxy labels (-want, +got):\n%s", diff)
	}
	if got := p.Annotations["external-dns.alpha.kubernetes.io/hostname"]; got != "hello.example.com" {
		t.Errorf("serving proxy lost the KIngress's annotation: %q", got)
	}
	for _, wp := range w.Proxies {
		if diff := cmp.Diff(map[string]string{LabelIngress: ing.Name, LabelRole: RoleWarm}, wp.Labels); diff != "" {
			t.Errorf("warm proxy %s labels (-want, +got):\n%s", wp.Name, diff)
		}
		if diff := cmp.Diff(map[string]string{AnnotationHash: w.Hash}, wp.Annotations); diff != "" {
			t.Errorf("warm proxy %s annotations (-want, +got):\n%s", wp.Name, diff)
		}
	}
}
