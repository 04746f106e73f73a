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
		name: "cors-policy, and net-contour's corsPolicy spelling",
		data: map[string]string{corsPolicyKeyNetContour: "allowOrigin: ['*']\nallowMethods: [GET, POST]\nmaxAge: 10m\n"},
		want: func(c *Contour) {
			c.CORSPolicy = &contourv1.CORSPolicy{AllowOrigin: []string{"*"}, AllowMethods: []contourv1.CORSHeaderValue{"GET", "POST"}, MaxAge: "10m"}
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
	tests := []struct {
		name string
		data map[string]string
		key  string
	}{
		{"visibility is not YAML", map[string]string{VisibilityKey: "{"}, VisibilityKey},
		{"visibility lacks ClusterLocal", map[string]string{VisibilityKey: "ExternalIP: {class: a, service: ns/envoy}"}, VisibilityKey},
		{"visibility names an unknown visibility", map[string]string{VisibilityKey: "ExternalIP: {class: a, service: ns/e}\nClusterLocal: {class: b, service: ns/i}\nMesh: {class: c, service: ns/m}"}, VisibilityKey},
		{"visibility service is not namespace/name", map[string]string{VisibilityKey: "ExternalIP: {class: a, service: envoy}\nClusterLocal: {class: b, service: ns/i}"}, VisibilityKey},
		{"visibility class is empty", map[string]string{VisibilityKey: "ExternalIP: {service: ns/e}\nClusterLocal: {class: b, service: ns/i}"}, VisibilityKey},
		{"response timeout is no duration", map[string]string{TimeoutPolicyResponseKey: "forever"}, TimeoutPolicyResponseKey},
		{"idle timeout is negative", map[string]string{TimeoutPolicyIdleKey: "-1s"}, TimeoutPolicyIdleKey},
		{"default certificate lacks a namespace", map[string]string{DefaultTLSSecretKey: "wildcard"}, DefaultTLSSecretKey},
		{"cors policy without origins", map[string]string{CORSPolicyKey: "allowMethods: [GET]"}, CORSPolicyKey},
		{"cors policy without methods", map[string]string{CORSPolicyKey: "allowOrigin: ['*']"}, CORSPolicyKey},
		{"cors policy with an unknown field", map[string]string{CORSPolicyKey: "allowOrigin: ['*']\nallowMethods: [GET]\nbogus: 1"}, CORSPolicyKey},
		{"release hold is no duration", map[string]string{ReleaseHoldKey: "soon"}, ReleaseHoldKey},
		{"retry policy is neither none nor YAML", map[string]string{RetryPolicyKey: "off"}, RetryPolicyKey},
		{"retry policy of no retries by count", map[string]string{RetryPolicyKey: "count: 0"}, RetryPolicyKey},
		{"retry policy retries on what Contour does not know", map[string]string{RetryPolicyKey: "count: 2\nretryOn: [sometimes]"}, RetryPolicyKey},
		{"retry policy with a status code out of range", map[string]string{RetryPolicyKey: "count: 2\nretriableStatusCodes: [42]"}, RetryPolicyKey},
		{"retry policy with a per-try timeout that is no duration", map[string]string{RetryPolicyKey: "count: 2\nperTryTimeout: soon"}, RetryPolicyKey},
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
