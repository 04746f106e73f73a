package resources

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/networking/pkg/http/header"
)

// path0 is the first path of the first rule of a KIngress built by kingress.
func path0(ing *netv1alpha1.Ingress) *netv1alpha1.HTTPIngressPath {
	return &ing.Spec.Rules[0].HTTP.Paths[0]
}

func split(service string, percent int) netv1alpha1.IngressBackendSplit {
	return netv1alpha1.IngressBackendSplit{
		IngressBackend: netv1alpha1.IngressBackend{ServiceNamespace: ns, ServiceName: service, ServicePort: intstr.FromInt(80)},
		Percent:        percent,
	}
}

func TestValidateSpecRefuses(t *testing.T) {
	const p0 = "spec.rules[0].http.paths[0]"
	tests := []struct {
		name   string
		mod    func(*netv1alpha1.Ingress)
		reason string
		field  string // the message must name it
	}{{
		name:   "a newline in an appendHeaders value, which Envoy refuses with the fleet's whole route configuration",
		mod:    func(ing *netv1alpha1.Ingress) { path0(ing).AppendHeaders = map[string]string{"X-Evil": "a\nb"} },
		reason: "InvalidHeader",
		field:  p0 + `.appendHeaders["X-Evil"]`,
	}, {
		name: "a carriage return in an appendHeaders value",
		mod: func(ing *netv1alpha1.Ingress) {
			path0(ing).AppendHeaders = map[string]string{"X-Evil": "a\rSet-Cookie: x"}
		},
		reason: "InvalidHeader",
		field:  p0 + `.appendHeaders["X-Evil"]`,
	}, {
		name: "a NUL in a split's appendHeaders value",
		mod: func(ing *netv1alpha1.Ingress) {
			path0(ing).Splits[0].AppendHeaders = map[string]string{"X-Evil": "a\x00"}
		},
		reason: "InvalidHeader",
		field:  p0 + `.splits[0].appendHeaders["X-Evil"]`,
	}, {
		name:   "a colon in an appendHeaders name, which makes Contour refuse the proxy",
		mod:    func(ing *netv1alpha1.Ingress) { path0(ing).AppendHeaders = map[string]string{"X:Bad": "v"} },
		reason: "InvalidHeader",
		field:  p0 + `.appendHeaders["X:Bad"]`,
	}, {
		name: "a pseudo-header in appendHeaders",
		mod: func(ing *netv1alpha1.Ingress) {
			path0(ing).AppendHeaders = map[string]string{":authority": "other.example.com"}
		},
		reason: "InvalidHeader",
		field:  p0 + `.appendHeaders[":authority"]`,
	}, {
		name:   "a space in an appendHeaders name",
		mod:    func(ing *netv1alpha1.Ingress) { path0(ing).AppendHeaders = map[string]string{"X Bad": "v"} },
		reason: "InvalidHeader",
		field:  p0 + `.appendHeaders["X Bad"]`,
	}, {
		name:   "an underscore in an appendHeaders name, which Contour's header name check refuses",
		mod:    func(ing *netv1alpha1.Ingress) { path0(ing).AppendHeaders = map[string]string{"X_Bad": "v"} },
		reason: "InvalidHeader",
		field:  p0 + `.appendHeaders["X_Bad"]`,
	}, {
		name:   "an empty appendHeaders name",
		mod:    func(ing *netv1alpha1.Ingress) { path0(ing).AppendHeaders = map[string]string{"": "v"} },
		reason: "InvalidHeader",
		field:  p0 + `.appendHeaders[""]`,
	}, {
		name:   "an empty appendHeaders value, which the HTTPProxy CRD refuses",
		mod:    func(ing *netv1alpha1.Ingress) { path0(ing).AppendHeaders = map[string]string{"X-Empty": ""} },
		reason: "InvalidHeader",
		field:  p0 + `.appendHeaders["X-Empty"]`,
	}, {
		name: "two spellings of one appendHeaders name, a duplicate to Contour",
		mod: func(ing *netv1alpha1.Ingress) {
			path0(ing).AppendHeaders = map[string]string{"X-Rev": "a", "x-rev": "b"}
		},
		reason: "InvalidHeader",
		field:  p0 + `.appendHeaders["x-rev"]`,
	}, {
		name: "Host in appendHeaders, a Host rewrite through the back door",
		mod: func(ing *netv1alpha1.Ingress) {
			path0(ing).AppendHeaders = map[string]string{"host": "internal.example.com"}
		},
		reason: "InvalidHeader",
		field:  p0 + `.appendHeaders["host"]`,
	}, {
		name:   "K-Network-Hash in appendHeaders, which the probe route of the path sets",
		mod:    func(ing *netv1alpha1.Ingress) { path0(ing).AppendHeaders = map[string]string{"k-network-hash": "x"} },
		reason: "InvalidHeader",
		field:  p0 + `.appendHeaders["k-network-hash"]`,
	}, {
		// Found by TestFuzzSpecsThroughContourAndEnvoy: the path's Knative
		// probe route matched K-Network-Hash twice, and Contour refused the
		// whole proxy.
		name: "a header match on K-Network-Hash, which the path's probe route matches too",
		mod: func(ing *netv1alpha1.Ingress) {
			path0(ing).Headers = map[string]netv1alpha1.HeaderMatch{"k-network-hash": {Exact: "100"}}
		},
		reason: "InvalidHeader",
		field:  p0 + `.headers["k-network-hash"]`,
	}, {
		name: "a header match on the prober's token",
		mod: func(ing *netv1alpha1.Ingress) {
			path0(ing).Headers = map[string]netv1alpha1.HeaderMatch{"Hitless-Probe-Token": {Exact: "guess"}}
		},
		reason: "InvalidHeader",
		field:  p0 + `.headers["Hitless-Probe-Token"]`,
	}, {
		name: "the prober's token in appendHeaders",
		mod: func(ing *netv1alpha1.Ingress) {
			path0(ing).AppendHeaders = map[string]string{"Hitless-Probe-Token": "x"}
		},
		reason: "InvalidHeader",
		field:  p0 + `.appendHeaders["Hitless-Probe-Token"]`,
	}, {
		name: "an Envoy variable in an appendHeaders value, substituted instead of sent",
		mod: func(ing *netv1alpha1.Ingress) {
			path0(ing).AppendHeaders = map[string]string{"X-Copy": "%REQ(Authorization)%"}
		},
		reason: "InvalidHeader",
		field:  p0 + `.appendHeaders["X-Copy"]`,
	}, {
		name: "Contour's namespace variable in a split's appendHeaders value",
		mod: func(ing *netv1alpha1.Ingress) {
			path0(ing).Splits[0].AppendHeaders = map[string]string{"X-Ns": "%CONTOUR_NAMESPACE%"}
		},
		reason: "InvalidHeader",
		field:  p0 + `.splits[0].appendHeaders["X-Ns"]`,
	}, {
		name:   "a space in a split's appendHeaders name",
		mod:    func(ing *netv1alpha1.Ingress) { path0(ing).Splits[0].AppendHeaders = map[string]string{"X Bad": "v"} },
		reason: "InvalidHeader",
		field:  p0 + `.splits[0].appendHeaders["X Bad"]`,
	}, {
		name: "a space in a header match name",
		mod: func(ing *netv1alpha1.Ingress) {
			path0(ing).Headers = map[string]netv1alpha1.HeaderMatch{"X Tag": {Exact: "v"}}
		},
		reason: "InvalidHeader",
		field:  p0 + `.headers["X Tag"]`,
	}, {
		name: "an empty header match name",
		mod: func(ing *netv1alpha1.Ingress) {
			path0(ing).Headers = map[string]netv1alpha1.HeaderMatch{"": {Exact: "v"}}
		},
		reason: "InvalidHeader",
		field:  p0 + `.headers[""]`,
	}, {
		name:   "an empty exact header match, which Contour drops, opening the route to every request",
		mod:    func(ing *netv1alpha1.Ingress) { path0(ing).Headers = map[string]netv1alpha1.HeaderMatch{"X-Tag": {}} },
		reason: "InvalidHeader",
		field:  p0 + `.headers["X-Tag"]`,
	}, {
		name: "a newline in an exact header match",
		mod: func(ing *netv1alpha1.Ingress) {
			path0(ing).Headers = map[string]netv1alpha1.HeaderMatch{"X-Tag": {Exact: "a\nb"}}
		},
		reason: "InvalidHeader",
		field:  p0 + `.headers["X-Tag"]`,
	}, {
		name: "trailing whitespace in an exact header match, which Envoy strips from requests",
		mod: func(ing *netv1alpha1.Ingress) {
			path0(ing).Headers = map[string]netv1alpha1.HeaderMatch{"X-Tag": {Exact: "v "}}
		},
		reason: "InvalidHeader",
		field:  p0 + `.headers["X-Tag"]`,
	}, {
		name: "two spellings of one header match, which Contour refuses",
		mod: func(ing *netv1alpha1.Ingress) {
			path0(ing).Headers = map[string]netv1alpha1.HeaderMatch{"X-Tag": {Exact: "a"}, "x-tag": {Exact: "b"}}
		},
		reason: "InvalidHeader",
		field:  p0 + `.headers["x-tag"]`,
	}, {
		name:   "a path with '//', which Contour merges into another path",
		mod:    func(ing *netv1alpha1.Ingress) { path0(ing).Path = "/a//b" },
		reason: "InvalidPath",
		field:  p0 + ".path",
	}, {
		name:   "a path with a dot segment, which Envoy removes from requests",
		mod:    func(ing *netv1alpha1.Ingress) { path0(ing).Path = "/a/../admin" },
		reason: "InvalidPath",
		field:  p0 + ".path",
	}, {
		name:   "a path with a space",
		mod:    func(ing *netv1alpha1.Ingress) { path0(ing).Path = "/a b" },
		reason: "InvalidPath",
		field:  p0 + ".path",
	}, {
		name:   "a path with a newline",
		mod:    func(ing *netv1alpha1.Ingress) { path0(ing).Path = "/a\n" },
		reason: "InvalidPath",
		field:  p0 + ".path",
	}, {
		name:   "a path with a query",
		mod:    func(ing *netv1alpha1.Ingress) { path0(ing).Path = "/a?b=c" },
		reason: "InvalidPath",
		field:  p0 + ".path",
	}, {
		name:   "a path with a fragment",
		mod:    func(ing *netv1alpha1.Ingress) { path0(ing).Path = "/a#b" },
		reason: "InvalidPath",
		field:  p0 + ".path",
	}, {
		name:   "a path with a stray '%'",
		mod:    func(ing *netv1alpha1.Ingress) { path0(ing).Path = "/100%" },
		reason: "InvalidPath",
		field:  p0 + ".path",
	}, {
		name:   "a path escaping an unreserved character, which Envoy decodes in requests",
		mod:    func(ing *netv1alpha1.Ingress) { path0(ing).Path = "/%41dmin" },
		reason: "InvalidPath",
		field:  p0 + ".path",
	}, {
		name:   "a path with a raw non-ASCII byte",
		mod:    func(ing *netv1alpha1.Ingress) { path0(ing).Path = "/café" },
		reason: "InvalidPath",
		field:  p0 + ".path",
	}, {
		name:   "a path with a backslash",
		mod:    func(ing *netv1alpha1.Ingress) { path0(ing).Path = `/a\b` },
		reason: "InvalidPath",
		field:  p0 + ".path",
	}, {
		name:   "a rewriteHost with a space",
		mod:    func(ing *netv1alpha1.Ingress) { path0(ing).RewriteHost = "a b.example.com" },
		reason: "InvalidRewriteHost",
		field:  p0 + ".rewriteHost",
	}, {
		name:   "a rewriteHost with a newline",
		mod:    func(ing *netv1alpha1.Ingress) { path0(ing).RewriteHost = "a.example.com\nX-Evil: 1" },
		reason: "InvalidRewriteHost",
		field:  p0 + ".rewriteHost",
	}, {
		name:   "a rewriteHost with a port out of range",
		mod:    func(ing *netv1alpha1.Ingress) { path0(ing).RewriteHost = "a.example.com:70000" },
		reason: "InvalidRewriteHost",
		field:  p0 + ".rewriteHost",
	}, {
		name: "a split of 150 percent",
		mod: func(ing *netv1alpha1.Ingress) {
			path0(ing).Splits = []netv1alpha1.IngressBackendSplit{split("blue", 150), split("green", -50)}
		},
		reason: "InvalidSplit",
		field:  p0 + ".splits[0].percent",
	}, {
		name: "a split of -50 percent",
		mod: func(ing *netv1alpha1.Ingress) {
			path0(ing).Splits = []netv1alpha1.IngressBackendSplit{split("blue", 50), split("green", -50)}
		},
		reason: "InvalidSplit",
		field:  p0 + ".splits[1].percent",
	}, {
		name:   "a single split of 150 percent",
		mod:    func(ing *netv1alpha1.Ingress) { path0(ing).Splits[0].Percent = 150 },
		reason: "InvalidSplit",
		field:  p0 + ".splits[0].percent",
	}, {
		name: "splits summing over 100",
		mod: func(ing *netv1alpha1.Ingress) {
			path0(ing).Splits = []netv1alpha1.IngressBackendSplit{split("blue", 80), split("green", 80)}
		},
		reason: "InvalidSplit",
		field:  p0 + ".splits",
	}, {
		name: "splits summing under 100, which Contour would scale up",
		mod: func(ing *netv1alpha1.Ingress) {
			path0(ing).Splits = []netv1alpha1.IngressBackendSplit{split("blue", 30), split("green", 20)}
		},
		reason: "InvalidSplit",
		field:  p0 + ".splits",
	}, {
		name:   "an unknown httpOption, which would be served as Enabled",
		mod:    func(ing *netv1alpha1.Ingress) { ing.Spec.HTTPOption = "Disabled" },
		reason: "InvalidHTTPOption",
		field:  "spec.httpOption",
	}, {
		name:   "an extension-service name that no object can have",
		mod:    func(ing *netv1alpha1.Ingress) { ing.Annotations[AnnotationExtensionService] = "Auth Z" },
		reason: "InvalidAuthorization",
		field:  AnnotationExtensionService,
	}, {
		name:   "an empty extension-service name",
		mod:    func(ing *netv1alpha1.Ingress) { ing.Annotations[AnnotationExtensionService] = "" },
		reason: "InvalidAuthorization",
		field:  AnnotationExtensionService,
	}, {
		name: "an extension-service namespace that no namespace can have",
		mod: func(ing *netv1alpha1.Ingress) {
			ing.Annotations[AnnotationExtensionService] = "authz"
			ing.Annotations[AnnotationExtensionServiceNamespace] = "a/b"
		},
		reason: "InvalidAuthorization",
		field:  AnnotationExtensionServiceNamespace,
	}, {
		name: "a TLS secret name with a '/', which the proxy's namespace/name reference would split",
		mod: func(ing *netv1alpha1.Ingress) {
			ing.Spec.TLS = []netv1alpha1.IngressTLS{{Hosts: []string{"hello.example.com"}, SecretName: "other/cert"}}
		},
		reason: "InvalidTLS",
		field:  "spec.tls[0].secretName",
	}, {
		name: "a TLS entry without a secret name names the field and its host",
		mod: func(ing *netv1alpha1.Ingress) {
			ing.Spec.TLS = []netv1alpha1.IngressTLS{{Hosts: []string{"hello.example.com"}}}
		},
		reason: "InvalidTLS",
		field:  `spec.tls[0].secretName: is empty: name the Secret holding the certificate of hosts ["hello.example.com"]`,
	}, {
		name: "a TLS secret namespace that no namespace can have",
		mod: func(ing *netv1alpha1.Ingress) {
			ing.Spec.TLS = []netv1alpha1.IngressTLS{{Hosts: []string{"hello.example.com"}, SecretName: "cert", SecretNamespace: "Bad NS"}}
		},
		reason: "InvalidTLS",
		field:  "spec.tls[0].secretNamespace",
	}, {
		name: "a bad header on the second path of the second rule is named there",
		mod: func(ing *netv1alpha1.Ingress) {
			bad := *path0(ing).DeepCopy()
			bad.AppendHeaders = map[string]string{"X-Evil": "\n"}
			ing.Spec.Rules = append(ing.Spec.Rules, netv1alpha1.IngressRule{
				Hosts: []string{"other.example.com"},
				HTTP:  &netv1alpha1.HTTPIngressRuleValue{Paths: []netv1alpha1.HTTPIngressPath{*path0(ing), bad}},
			})
		},
		reason: "InvalidHeader",
		field:  `spec.rules[1].http.paths[1].appendHeaders["X-Evil"]`,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ing := kingress(tc.mod)
			err := ValidateSpec(ing)
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("ValidateSpec() = %v, want a *SpecError", err)
			}
			if se.Reason != tc.reason {
				t.Errorf("Reason = %q (%s), want %q", se.Reason, se.Message, tc.reason)
			}
			if !strings.Contains(se.Message, tc.field) {
				t.Errorf("Message = %q, does not name %s", se.Message, tc.field)
			}
			// The builder refuses it the same way, before writing anything.
			_, err = MakeServing(bg(), ing, resolverOf(svc("blue"), svc("green")))
			var me *SpecError
			if !errors.As(err, &me) || *me != *se {
				t.Errorf("MakeServing() = %v, want the error of ValidateSpec", err)
			}
		})
	}
}

// TestValidateSpecAccepts holds what Knative Serving writes (and what the
// conformance suite sends): none of it may be refused.
func TestValidateSpecAccepts(t *testing.T) {
	revision := func(ing *netv1alpha1.Ingress) {
		path0(ing).Splits = []netv1alpha1.IngressBackendSplit{split("hello-00001", 90), split("hello-00002", 10)}
		for i, rev := range []string{"hello-00001", "hello-00002"} {
			path0(ing).Splits[i].AppendHeaders = map[string]string{
				"Knative-Serving-Revision":  rev,
				"Knative-Serving-Namespace": ns,
			}
		}
	}
	tests := []struct {
		name string
		mod  func(*netv1alpha1.Ingress)
	}{{
		name: "a revision split 90/10 with Serving's revision and namespace headers",
		mod:  revision,
	}, {
		name: "a tag route: a Knative-Serving-Tag match and the tag set on the path",
		mod: func(ing *netv1alpha1.Ingress) {
			revision(ing)
			tagged := *path0(ing).DeepCopy()
			tagged.Headers = map[string]netv1alpha1.HeaderMatch{header.RouteTagKey: {Exact: "candidate"}}
			tagged.AppendHeaders = map[string]string{header.RouteTagKey: "candidate"}
			ing.Spec.Rules[0].HTTP.Paths = append([]netv1alpha1.HTTPIngressPath{tagged}, *path0(ing))
		},
	}, {
		name: "a DomainMapping: rewriteHost to the cluster-local host, K-Original-Host on the split",
		mod: func(ing *netv1alpha1.Ingress) {
			path0(ing).RewriteHost = "hello.ns.svc.cluster.local"
			path0(ing).Splits[0].AppendHeaders = map[string]string{header.OriginalHostKey: "mapped.example.com"}
		},
	}, {
		name: "a cluster-local rule with an empty path",
		mod: func(ing *netv1alpha1.Ingress) {
			ing.Spec.Rules[0].Hosts = []string{"hello.ns", "hello.ns.svc", "hello.ns.svc.cluster.local"}
			ing.Spec.Rules[0].Visibility = netv1alpha1.IngressVisibilityClusterLocal
			path0(ing).Path = ""
		},
	}, {
		name: "the root path",
		mod:  func(ing *netv1alpha1.Ingress) { path0(ing).Path = "/" },
	}, {
		name: "an ACME challenge path in front of the rule's paths",
		mod: func(ing *netv1alpha1.Ingress) {
			ing.Spec.Rules[0].HTTP.Paths = append([]netv1alpha1.HTTPIngressPath{challengePath("Ab-9_xYz")}, *path0(ing))
		},
	}, {
		name: "a path with escapes of reserved characters and sub-delimiters",
		mod:  func(ing *netv1alpha1.Ingress) { path0(ing).Path = "/a%20b/c%2Fd/e;v=1/@x:y/~u" },
	}, {
		name: "httpOption Enabled with TLS from a secret of another namespace",
		mod: func(ing *netv1alpha1.Ingress) {
			ing.Spec.HTTPOption = netv1alpha1.HTTPOptionEnabled
			ing.Spec.TLS = []netv1alpha1.IngressTLS{{Hosts: []string{"hello.example.com"}, SecretName: "route-1234", SecretNamespace: "knative-serving"}}
		},
	}, {
		name: "httpOption Redirected",
		mod:  func(ing *netv1alpha1.Ingress) { ing.Spec.HTTPOption = netv1alpha1.HTTPOptionRedirected },
	}, {
		name: "an empty httpOption, which Serving writes when unset",
		mod:  func(ing *netv1alpha1.Ingress) { ing.Spec.HTTPOption = "" },
	}, {
		name: "an authorization server in the KIngress's own namespace and in another",
		mod: func(ing *netv1alpha1.Ingress) {
			ing.Annotations[AnnotationExtensionService] = "authz"
			ing.Annotations[AnnotationExtensionServiceNamespace] = "auth-system"
		},
	}, {
		name: "splits that are all 0, which Contour shares evenly",
		mod: func(ing *netv1alpha1.Ingress) {
			path0(ing).Splits = []netv1alpha1.IngressBackendSplit{split("blue", 0), split("green", 0)}
		},
	}, {
		name: "a single split without a percent, which takes everything",
		mod:  func(ing *netv1alpha1.Ingress) { path0(ing).Splits[0].Percent = 0 },
	}, {
		name: "a header value with a literal percent and an unknown %NAME%",
		mod: func(ing *netv1alpha1.Ingress) {
			path0(ing).AppendHeaders = map[string]string{"X-Discount": "50% off, %NOT_A_VARIABLE%"}
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := ValidateSpec(kingress(tc.mod)); err != nil {
				t.Errorf("ValidateSpec() = %v, want nil", err)
			}
		})
	}
}
