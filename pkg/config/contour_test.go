package config

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	"sigs.k8s.io/yaml"
)

func TestNewContourFromMap(t *testing.T) {
	tests := []struct {
		name string
		data map[string]string
		want func(*Contour)
	}{{
		name: "an empty config-contour gives net-contour's defaults",
		want: func(*Contour) {},
	}, {
		name: "visibility maps each visibility to a class and an Envoy Service",
		data: map[string]string{VisibilityKey: `
ExternalIP:
  class: ext
  service: ingress/envoy-ext
ClusterLocal:
  class: int
  service: ingress/envoy-int
`},
		want: func(c *Contour) {
			c.Visibility = map[netv1alpha1.IngressVisibility]Fleet{
				netv1alpha1.IngressVisibilityExternalIP:   {Class: "ext", Service: types.NamespacedName{Namespace: "ingress", Name: "envoy-ext"}},
				netv1alpha1.IngressVisibilityClusterLocal: {Class: "int", Service: types.NamespacedName{Namespace: "ingress", Name: "envoy-int"}},
			}
		},
	}, {
		name: "use-proxy-protocol marks the fleet of a visibility whose Contour runs with --use-proxy-protocol",
		data: map[string]string{VisibilityKey: `
ExternalIP:
  class: ext
  service: ingress/envoy-ext
  use-proxy-protocol: true
ClusterLocal:
  class: int
  service: ingress/envoy-int
`},
		want: func(c *Contour) {
			c.Visibility = map[netv1alpha1.IngressVisibility]Fleet{
				netv1alpha1.IngressVisibilityExternalIP:   {Class: "ext", Service: types.NamespacedName{Namespace: "ingress", Name: "envoy-ext"}, UseProxyProtocol: true},
				netv1alpha1.IngressVisibilityClusterLocal: {Class: "int", Service: types.NamespacedName{Namespace: "ingress", Name: "envoy-int"}},
			}
		},
	}, {
		name: "use-proxy-protocol false is the default, written out",
		data: map[string]string{VisibilityKey: `
ExternalIP:
  class: ext
  service: ingress/envoy-ext
  use-proxy-protocol: false
ClusterLocal:
  class: int
  service: ingress/envoy-int
`},
		want: func(c *Contour) {
			c.Visibility = map[netv1alpha1.IngressVisibility]Fleet{
				netv1alpha1.IngressVisibilityExternalIP:   {Class: "ext", Service: types.NamespacedName{Namespace: "ingress", Name: "envoy-ext"}},
				netv1alpha1.IngressVisibilityClusterLocal: {Class: "int", Service: types.NamespacedName{Namespace: "ingress", Name: "envoy-int"}},
			}
		},
	}, {
		name: "two visibilities on one class that both set use-proxy-protocol share one fleet that sends the header",
		data: map[string]string{VisibilityKey: `
ExternalIP:
  class: shared
  service: ingress/envoy
  use-proxy-protocol: true
ClusterLocal:
  class: shared
  service: ingress/envoy
  use-proxy-protocol: true
`},
		want: func(c *Contour) {
			f := Fleet{Class: "shared", Service: types.NamespacedName{Namespace: "ingress", Name: "envoy"}, UseProxyProtocol: true}
			c.Visibility = map[netv1alpha1.IngressVisibility]Fleet{
				netv1alpha1.IngressVisibilityExternalIP:   f,
				netv1alpha1.IngressVisibilityClusterLocal: f,
			}
		},
	}, {
		name: "timeouts, default certificate, release hold",
		data: map[string]string{
			TimeoutPolicyResponseKey: "60s",
			TimeoutPolicyIdleKey:     "infinity",
			DefaultTLSSecretKey:      "certs/wildcard",
			ReleaseHoldKey:           "30s",
		},
		want: func(c *Contour) {
			c.TimeoutPolicyResponse = "60s"
			c.DefaultTLSSecret = &types.NamespacedName{Namespace: "certs", Name: "wildcard"}
			c.ReleaseHold = 30 * time.Second
		},
	}, {
		name: "a config shaped like net-contour's example (visibility, default-tls-secret, timeouts, cors-policy) is read with its meaning and no warning",
		data: map[string]string{
			VisibilityKey: `
ExternalIP:
  class: contour-external
  service: contour-external/envoy
ClusterLocal:
  class: contour-internal
  service: contour-internal/envoy
`,
			DefaultTLSSecretKey:      "ingress-certs/wildcard",
			TimeoutPolicyResponseKey: "infinity",
			TimeoutPolicyIdleKey:     "infinity",
			CORSPolicyKey: `
allowCredentials: true
allowOrigin:
  - https://app.example.org
allowMethods:
  - GET
  - PUT
  - OPTIONS
allowHeaders:
  - authorization
  - content-type
exposeHeaders:
  - ETag
  - Content-Length
maxAge: "5m"
`,
		},
		want: func(c *Contour) {
			c.DefaultTLSSecret = &types.NamespacedName{Namespace: "ingress-certs", Name: "wildcard"}
			c.CORSPolicy = &contourv1.CORSPolicy{
				AllowCredentials: true,
				AllowOrigin:      []string{"https://app.example.org"},
				AllowMethods:     []contourv1.CORSHeaderValue{"GET", "PUT", "OPTIONS"},
				AllowHeaders:     []contourv1.CORSHeaderValue{"authorization", "content-type"},
				ExposeHeaders:    []contourv1.CORSHeaderValue{"ETag", "Content-Length"},
				MaxAge:           "5m",
			}
		},
	}, {
		name: "net-contour's ConfigMap as installed, only an _example, gives the defaults and no warning",
		data: map[string]string{"_example": "# timeout-policy-idle sets the route idle timeout\ntimeout-policy-idle: \"infinity\"\n"},
		want: func(*Contour) {},
	}, {
		name: "a bare host in allowOrigin, as net-contour's example writes it, is accepted: Contour reads it as a regular expression",
		data: map[string]string{CORSPolicyKey: "allowOrigin: [example.org]\nallowMethods: [GET, POST, OPTIONS]\nallowHeaders: [cache-control]\nexposeHeaders: [Content-Range]\nmaxAge: 10m\n"},
		want: func(c *Contour) {
			c.CORSPolicy = &contourv1.CORSPolicy{AllowOrigin: []string{"example.org"}, AllowMethods: []contourv1.CORSHeaderValue{"GET", "POST", "OPTIONS"},
				AllowHeaders: []contourv1.CORSHeaderValue{"cache-control"}, ExposeHeaders: []contourv1.CORSHeaderValue{"Content-Range"}, MaxAge: "10m"}
		},
	}, {
		name: "cors-policy takes every origin form and maxAge Contour accepts, and every field of Contour's CORS policy",
		data: map[string]string{CORSPolicyKey: `
allowOrigin: ["*", "https://a.example.org", "http://b.example.org:8080", 'https://.*\.example\.org']
allowMethods: [GET, PATCH, X-Custom_Verb]
allowHeaders: ["x-request-id", "x-b3-traceid", "if-none-match"]
maxAge: "1h30m"
allowPrivateNetwork: true
`},
		want: func(c *Contour) {
			c.CORSPolicy = &contourv1.CORSPolicy{
				AllowOrigin:         []string{"*", "https://a.example.org", "http://b.example.org:8080", `https://.*\.example\.org`},
				AllowMethods:        []contourv1.CORSHeaderValue{"GET", "PATCH", "X-Custom_Verb"},
				AllowHeaders:        []contourv1.CORSHeaderValue{"x-request-id", "x-b3-traceid", "if-none-match"},
				MaxAge:              "1h30m",
				AllowPrivateNetwork: true,
			}
		},
	}, {
		name: "cors-policy field names are matched ignoring case, as net-contour's decoder matches them",
		data: map[string]string{CORSPolicyKey: "AllowOrigin: ['*']\nAllowMethods: [GET]\n"},
		want: func(c *Contour) {
			c.CORSPolicy = &contourv1.CORSPolicy{AllowOrigin: []string{"*"}, AllowMethods: []contourv1.CORSHeaderValue{"GET"}}
		},
	}, {
		name: "corsPolicy, the spelling hitless documented, is still read, with a warning to rename it",
		data: map[string]string{corsPolicyKeyLegacy: "allowOrigin: ['*']\nallowMethods: [GET, POST]\nmaxAge: 10m\n"},
		want: func(c *Contour) {
			c.CORSPolicy = &contourv1.CORSPolicy{AllowOrigin: []string{"*"}, AllowMethods: []contourv1.CORSHeaderValue{"GET", "POST"}, MaxAge: "10m"}
			c.Warnings = []string{"corsPolicy is read as cors-policy; rename it to cors-policy, the key net-contour reads (net-contour ignores corsPolicy)"}
		},
	}, {
		name: "with both spellings cors-policy wins and corsPolicy is ignored with a warning, even when it would be refused",
		data: map[string]string{
			CORSPolicyKey:       "allowOrigin: ['*']\nallowMethods: [GET]\n",
			corsPolicyKeyLegacy: "allowOrigin: ['*']\nallowMethods: ['GET POST']\n",
		},
		want: func(c *Contour) {
			c.CORSPolicy = &contourv1.CORSPolicy{AllowOrigin: []string{"*"}, AllowMethods: []contourv1.CORSHeaderValue{"GET"}}
			c.Warnings = []string{"corsPolicy is ignored: cors-policy is set and wins; delete corsPolicy"}
		},
	}, {
		name: "unknown keys (a typo, a newer release's key) are ignored and each named in a warning",
		data: map[string]string{
			"visbility":              "ExternalIP: {class: x, service: ns/x}",
			"http-protocol":          "Redirected",
			TimeoutPolicyResponseKey: "30s",
		},
		want: func(c *Contour) {
			c.TimeoutPolicyResponse = "30s"
			c.Warnings = []string{
				`"http-protocol" is not a key hitless reads and is ignored (the keys are visibility, default-tls-secret, timeout-policy-response, timeout-policy-idle, cors-policy, release-hold, retry-policy)`,
				`"visbility" is not a key hitless reads and is ignored (the keys are visibility, default-tls-secret, timeout-policy-response, timeout-policy-idle, cors-policy, release-hold, retry-policy)`,
			}
		},
	}, {
		name: "unknown fields of visibility entries are ignored and named with their visibility",
		data: map[string]string{VisibilityKey: `
ExternalIP:
  class: ext
  service: ingress/envoy-ext
  namespace: ingress
ClusterLocal:
  class: int
  service: ingress/envoy-int
  port: 8080
  weight: 1
`},
		want: func(c *Contour) {
			c.Visibility = map[netv1alpha1.IngressVisibility]Fleet{
				netv1alpha1.IngressVisibilityExternalIP:   {Class: "ext", Service: types.NamespacedName{Namespace: "ingress", Name: "envoy-ext"}},
				netv1alpha1.IngressVisibilityClusterLocal: {Class: "int", Service: types.NamespacedName{Namespace: "ingress", Name: "envoy-int"}},
			}
			c.Warnings = []string{
				`visibility: ClusterLocal: field "port" is unknown and ignored`,
				`visibility: ClusterLocal: field "weight" is unknown and ignored`,
				`visibility: ExternalIP: field "namespace" is unknown and ignored`,
			}
		},
	}, {
		name: "a CORS field a newer Contour has is ignored and named",
		data: map[string]string{CORSPolicyKey: "allowOrigin: ['*']\nallowMethods: [GET]\nallowOriginPatterns: ['^https://']\n"},
		want: func(c *Contour) {
			c.CORSPolicy = &contourv1.CORSPolicy{AllowOrigin: []string{"*"}, AllowMethods: []contourv1.CORSHeaderValue{"GET"}}
			c.Warnings = []string{`cors-policy: field "allowOriginPatterns" is unknown and ignored`}
		},
	}, {
		name: "a retry field a newer Contour has is ignored and named",
		data: map[string]string{RetryPolicyKey: "count: 1\nretryOn: [reset]\nretryBackOff: {baseInterval: 10ms}\n"},
		want: func(c *Contour) {
			c.RetryPolicy = &contourv1.RetryPolicy{NumRetries: 1, RetryOn: []contourv1.RetryOn{"reset"}}
			c.Warnings = []string{`retry-policy: field "retryBackOff" is unknown and ignored`}
		},
	}, {
		name: "retry-policy none turns net-contour's retries off",
		data: map[string]string{RetryPolicyKey: "none"},
		want: func(c *Contour) { c.RetryPolicy = nil },
	}, {
		name: "retry-policy is a Contour retry policy",
		data: map[string]string{RetryPolicyKey: "count: 3\nretryOn: [reset, retriable-status-codes]\nretriableStatusCodes: [503]\nperTryTimeout: 2s\n"},
		want: func(c *Contour) {
			c.RetryPolicy = &contourv1.RetryPolicy{NumRetries: 3, RetryOn: []contourv1.RetryOn{"reset", "retriable-status-codes"},
				RetriableStatusCodes: []uint32{503}, PerTryTimeout: "2s"}
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NewContourFromMap(tc.data)
			if err != nil {
				t.Fatalf("NewContourFromMap() = %v", err)
			}
			want := DefaultContour()
			tc.want(want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("config (-want, +got):\n%s", diff)
			}
		})
	}
}

func TestNewContourFromMapErrorsNameTheKey(t *testing.T) {
	const cors = "allowOrigin: ['*']\nallowMethods: [GET]\n"
	tests := []struct {
		name string
		data map[string]string
		key  string
		// mention, when set, is text the error must also hold: the
		// entry at fault, or what to write instead.
		mention string
	}{
		{"visibility is not YAML", map[string]string{VisibilityKey: "{"}, VisibilityKey, ""},
		{"visibility lacks ClusterLocal", map[string]string{VisibilityKey: "ExternalIP: {class: a, service: ns/envoy}"}, VisibilityKey, ""},
		{"visibility names an unknown visibility", map[string]string{VisibilityKey: "ExternalIP: {class: a, service: ns/e}\nClusterLocal: {class: b, service: ns/i}\nMesh: {class: c, service: ns/m}"}, VisibilityKey, ""},
		{"visibility service is not namespace/name", map[string]string{VisibilityKey: "ExternalIP: {class: a, service: envoy}\nClusterLocal: {class: b, service: ns/i}"}, VisibilityKey, ""},
		{"visibility class is empty", map[string]string{VisibilityKey: "ExternalIP: {service: ns/e}\nClusterLocal: {class: b, service: ns/i}"}, VisibilityKey, ""},
		{"response timeout is no duration", map[string]string{TimeoutPolicyResponseKey: "forever"}, TimeoutPolicyResponseKey, ""},
		{"idle timeout is negative", map[string]string{TimeoutPolicyIdleKey: "-1s"}, TimeoutPolicyIdleKey, ""},
		{"default certificate lacks a namespace", map[string]string{DefaultTLSSecretKey: "wildcard"}, DefaultTLSSecretKey, ""},
		{"cors policy without origins", map[string]string{CORSPolicyKey: "allowMethods: [GET]"}, CORSPolicyKey, ""},
		{"cors policy without methods", map[string]string{CORSPolicyKey: "allowOrigin: ['*']"}, CORSPolicyKey, ""},
		{"visibility present but empty", map[string]string{VisibilityKey: ""}, VisibilityKey, "delete the key to use the default fleets"},
		{"visibility of blanks only", map[string]string{VisibilityKey: " \n "}, VisibilityKey, "give ExternalIP and ClusterLocal each a class and a service"},
		{"visibility entry that is no map", map[string]string{VisibilityKey: "ExternalIP: contour-external\nClusterLocal: {class: b, service: ns/i}"}, VisibilityKey, "ExternalIP: not a {class, service, use-proxy-protocol}"},
		{"use-proxy-protocol that is no boolean", map[string]string{VisibilityKey: "ExternalIP: {class: a, service: ns/e, use-proxy-protocol: sometimes}\nClusterLocal: {class: b, service: ns/i}"}, VisibilityKey, "ExternalIP: not a {class, service, use-proxy-protocol}"},
		{"use-proxy-protocol on one of two visibilities of the same class", map[string]string{VisibilityKey: "ExternalIP: {class: a, service: ns/e}\nClusterLocal: {class: a, service: ns/e, use-proxy-protocol: true}"}, VisibilityKey,
			"ExternalIP and ClusterLocal both name class a, one Contour, but only ClusterLocal sets use-proxy-protocol: set use-proxy-protocol: true on ExternalIP too if that Contour runs with --use-proxy-protocol, or remove it from ClusterLocal"},
		{"cors policy that is no YAML map", map[string]string{CORSPolicyKey: "allowOrigin: ["}, CORSPolicyKey, "not a Contour CORS policy"},
		{"cors method list written as one entry", map[string]string{CORSPolicyKey: "allowOrigin: ['*']\nallowMethods: ['GET POST']"}, CORSPolicyKey, `allowMethods[0] "GET POST" is not an HTTP token`},
		{"cors method that is empty", map[string]string{CORSPolicyKey: "allowOrigin: ['*']\nallowMethods: [GET, '']"}, CORSPolicyKey, `allowMethods[1] ""`},
		{"cors header with a space", map[string]string{CORSPolicyKey: cors + "allowHeaders: [authorization, 'x header']"}, CORSPolicyKey, `allowHeaders[1] "x header"`},
		{"cors header that is not ASCII", map[string]string{CORSPolicyKey: cors + "allowHeaders: [x-grüße]"}, CORSPolicyKey, `allowHeaders[0] "x-grüße"`},
		{"cors exposed headers as a comma list", map[string]string{CORSPolicyKey: cors + "exposeHeaders: ['Content-Length, ETag']"}, CORSPolicyKey, `exposeHeaders[0] "Content-Length, ETag"`},
		{"cors origin as a glob", map[string]string{CORSPolicyKey: "allowOrigin: ['*.example.org']\nallowMethods: [GET]"}, CORSPolicyKey, `allowOrigin[0] "*.example.org" is neither`},
		{"cors max age negative, which Go parses", map[string]string{CORSPolicyKey: cors + "maxAge: -1s"}, CORSPolicyKey, `maxAge "-1s"`},
		{"cors max age with a plus sign", map[string]string{CORSPolicyKey: cors + "maxAge: +5s"}, CORSPolicyKey, `maxAge "+5s"`},
		{"cors max age in days", map[string]string{CORSPolicyKey: cors + "maxAge: 1d"}, CORSPolicyKey, `maxAge "1d"`},
		{"cors max age of a unit without a number, which the CRD lets through", map[string]string{CORSPolicyKey: cors + "maxAge: s"}, CORSPolicyKey, `maxAge "s"`},
		{"cors max age with a Greek mu, which Go parses", map[string]string{CORSPolicyKey: cors + "maxAge: 5\u03bcs"}, CORSPolicyKey, "maxAge \"5\u03bcs\""},
		{"cors max age with a space", map[string]string{CORSPolicyKey: cors + "maxAge: 10 m"}, CORSPolicyKey, `maxAge "10 m"`},
		{"cors policy under the legacy spelling names that key", map[string]string{corsPolicyKeyLegacy: "allowOrigin: ['*']\nallowMethods: ['GET,POST']"}, corsPolicyKeyLegacy, `allowMethods[0] "GET,POST"`},
		{"release hold is no duration", map[string]string{ReleaseHoldKey: "soon"}, ReleaseHoldKey, ""},
		{"retry policy is neither none nor YAML", map[string]string{RetryPolicyKey: "off"}, RetryPolicyKey, ""},
		{"retry policy of no retries by count", map[string]string{RetryPolicyKey: "count: 0"}, RetryPolicyKey, ""},
		{"retry policy retries on what Contour does not know", map[string]string{RetryPolicyKey: "count: 2\nretryOn: [sometimes]"}, RetryPolicyKey, ""},
		{"retry policy with a status code out of range", map[string]string{RetryPolicyKey: "count: 2\nretriableStatusCodes: [42]"}, RetryPolicyKey, ""},
		{"retry policy with a per-try timeout that is no duration", map[string]string{RetryPolicyKey: "count: 2\nperTryTimeout: soon"}, RetryPolicyKey, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewContourFromMap(tc.data)
			if err == nil {
				t.Fatal("NewContourFromMap() = nil, want an error")
			}
			if !strings.HasPrefix(err.Error(), tc.key+":") {
				t.Errorf("error %q does not start with the key %q", err, tc.key)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not say %q", err, tc.mention)
			}
		})
	}
}

func TestFleets(t *testing.T) {
	c := DefaultContour()
	got := c.Fleets()
	if len(got) != 2 || got[0].Class != "contour-external" || got[1].Class != "contour-internal" {
		t.Errorf("Fleets() = %v", got)
	}
	if f, ok := c.FleetByClass("contour-internal"); !ok || f.Service.Name != "envoy" {
		t.Errorf("FleetByClass(contour-internal) = %v, %v", f, ok)
	}
}

// TestShippedExampleParses: every key the shipped config-contour documents
// in its _example parses, and the example's values are the defaults where
// it says so (the retry policy is net-contour's).
func TestShippedExampleParses(t *testing.T) {
	raw, err := os.ReadFile("../../config/config-contour.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal(raw, &cm); err != nil {
		t.Fatal(err)
	}
	data := map[string]string{}
	if err := yaml.Unmarshal([]byte(cm.Data["_example"]), &data); err != nil {
		t.Fatalf("_example is not a map of keys: %v", err)
	}
	for _, key := range []string{VisibilityKey, DefaultTLSSecretKey, TimeoutPolicyResponseKey, TimeoutPolicyIdleKey, CORSPolicyKey, ReleaseHoldKey, RetryPolicyKey} {
		if _, ok := data[key]; !ok {
			t.Errorf("_example does not document %s", key)
		}
	}
	got, err := NewContourFromMap(data)
	if err != nil {
		t.Fatalf("the shipped example does not parse: %v", err)
	}
	if diff := cmp.Diff(DefaultRetryPolicy(), got.RetryPolicy); diff != "" {
		t.Errorf("the example's retry-policy is not the default (-want, +got):\n%s", diff)
	}
}
