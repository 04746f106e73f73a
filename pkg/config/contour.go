// Package config holds the typed configuration of hitless: the keys of the
// config-contour ConfigMap (the same keys, with the same meaning, as
// net-contour, plus our own additions) and a store that keeps the parsed
// config-contour and config-network current.
package config

import (
	"fmt"
	"sort"
	"strings"
	"time"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	"sigs.k8s.io/yaml"
)

const (
	// ContourConfigName is the name of the ConfigMap that configures hitless.
	ContourConfigName = "config-contour"

	// VisibilityKey maps each KIngress visibility to a Contour class and the
	// Envoy Service that fronts that class's fleet.
	VisibilityKey = "visibility"
	// DefaultTLSSecretKey names the certificate (namespace/name) used for
	// hosts that have no entry in the KIngress's spec.tls.
	DefaultTLSSecretKey = "default-tls-secret"
	// TimeoutPolicyResponseKey is the Contour route response timeout.
	TimeoutPolicyResponseKey = "timeout-policy-response"
	// TimeoutPolicyIdleKey is the Contour route idle timeout.
	TimeoutPolicyIdleKey = "timeout-policy-idle"
	// CORSPolicyKey is the CORS policy put on every virtual host.
	CORSPolicyKey = "cors-policy"
	// corsPolicyKeyNetContour is the spelling net-contour reads; accepted so
	// that an existing config-contour keeps working unchanged.
	corsPolicyKeyNetContour = "corsPolicy"
	// ReleaseHoldKey is how long warm proxies outlive a confirmed switch, so
	// requests already in flight to an old backend (long polls, websockets
	// opened just before the switch) finish before Contour drops its cluster.
	ReleaseHoldKey = "release-hold"
	// RetryPolicyKey is the Contour retry policy of every route that carries
	// user traffic: "none" for no retries, or a Contour RetryPolicy in YAML
	// (count, retryOn, retriableStatusCodes, perTryTimeout). Unset, it is
	// net-contour's built-in one (DefaultRetryPolicy).
	RetryPolicyKey = "retry-policy"
	// RetryPolicyNone turns retries off.
	RetryPolicyNone = "none"

	// Infinity disables a Contour timeout.
	Infinity = "infinity"

	// DefaultReleaseHold is the hold applied when release-hold is unset.
	DefaultReleaseHold = 5 * time.Second
)

// Fleet is one Contour class and the Envoy Service of its fleet.
type Fleet struct {
	// Class is the Contour ingress class the HTTPProxies of this fleet carry.
	Class string `json:"class"`
	// Service is the Envoy Service (namespace/name) of this fleet.
	Service types.NamespacedName `json:"-"`
}

// Contour is the parsed config-contour.
type Contour struct {
	// Visibility maps each KIngress visibility to the fleet that serves it.
	Visibility map[netv1alpha1.IngressVisibility]Fleet
	// DefaultTLSSecret is used for hosts without a spec.tls entry; nil when unset.
	DefaultTLSSecret *types.NamespacedName
	// TimeoutPolicyResponse and TimeoutPolicyIdle are Contour durations or "infinity".
	TimeoutPolicyResponse string
	TimeoutPolicyIdle     string
	// CORSPolicy is put on every virtual host; nil when unset.
	CORSPolicy *contourv1.CORSPolicy
	// ReleaseHold is the time warm proxies stay after a confirmed switch.
	ReleaseHold time.Duration
	// RetryPolicy is put on every route that carries user traffic; nil
	// for none.
	RetryPolicy *contourv1.RetryPolicy
}

// DefaultRetryPolicy is net-contour's: two retries of a request that never
// reached the application or was cut before an answer (a backend pod going
// away, a connection reset), as Istio does, plus resets.
func DefaultRetryPolicy() *contourv1.RetryPolicy {
	return &contourv1.RetryPolicy{
		NumRetries: 2,
		RetryOn: []contourv1.RetryOn{
			"cancelled", "connect-failure", "refused-stream", "resource-exhausted", "retriable-status-codes", "reset",
		},
	}
}

// FleetFor returns the fleet of a visibility, and whether one is configured.
func (c *Contour) FleetFor(v netv1alpha1.IngressVisibility) (Fleet, bool) {
	f, ok := c.Visibility[v]
	return f, ok
}

// Fleets returns every configured fleet once, ordered by class.
func (c *Contour) Fleets() []Fleet {
	seen := map[string]bool{}
	var out []Fleet
	for _, f := range c.Visibility {
		if !seen[f.Class] {
			seen[f.Class] = true
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Class < out[j].Class })
	return out
}

// FleetByClass returns the fleet of a Contour class.
func (c *Contour) FleetByClass(class string) (Fleet, bool) {
	for _, f := range c.Visibility {
		if f.Class == class {
			return f, true
		}
	}
	return Fleet{}, false
}

// DefaultContour is the configuration when config-contour is empty: the
// namespaces and classes of net-contour's standard install.
func DefaultContour() *Contour {
	return &Contour{
		Visibility: map[netv1alpha1.IngressVisibility]Fleet{
			netv1alpha1.IngressVisibilityExternalIP: {
				Class:   "contour-external",
				Service: types.NamespacedName{Namespace: "contour-external", Name: "envoy"},
			},
			netv1alpha1.IngressVisibilityClusterLocal: {
				Class:   "contour-internal",
				Service: types.NamespacedName{Namespace: "contour-internal", Name: "envoy"},
			},
		},
		TimeoutPolicyResponse: Infinity,
		TimeoutPolicyIdle:     Infinity,
		ReleaseHold:           DefaultReleaseHold,
		RetryPolicy:           DefaultRetryPolicy(),
	}
}

// NewContourFromConfigMap parses config-contour. Every error names the key
// at fault so that an operator knows what to fix.
func NewContourFromConfigMap(cm *corev1.ConfigMap) (*Contour, error) {
	return NewContourFromMap(cm.Data)
}

// NewContourFromMap parses the data of config-contour.
func NewContourFromMap(data map[string]string) (*Contour, error) {
	c := DefaultContour()

	if raw, ok := data[VisibilityKey]; ok && strings.TrimSpace(raw) != "" {
		vis, err := parseVisibility(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", VisibilityKey, err)
		}
		c.Visibility = vis
	}

	if raw, ok := data[DefaultTLSSecretKey]; ok && strings.TrimSpace(raw) != "" {
		nn, err := parseNamespacedName(strings.TrimSpace(raw))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", DefaultTLSSecretKey, err)
		}
		c.DefaultTLSSecret = &nn
	}

	for key, target := range map[string]*string{
		TimeoutPolicyResponseKey: &c.TimeoutPolicyResponse,
		TimeoutPolicyIdleKey:     &c.TimeoutPolicyIdle,
	} {
		raw, ok := data[key]
		if !ok || strings.TrimSpace(raw) == "" {
			continue
		}
		raw = strings.TrimSpace(raw)
		if raw != Infinity {
			d, err := time.ParseDuration(raw)
			if err != nil {
				return nil, fmt.Errorf("%s: %q is neither a duration (e.g. 30s) nor %q: %w", key, raw, Infinity, err)
			}
			if d < 0 {
				return nil, fmt.Errorf("%s: %q must not be negative", key, raw)
			}
		}
		*target = raw
	}

	corsKey := CORSPolicyKey
	raw, ok := data[CORSPolicyKey]
	if !ok {
		corsKey = corsPolicyKeyNetContour
		raw, ok = data[corsPolicyKeyNetContour]
	}
	if ok && strings.TrimSpace(raw) != "" {
		cors, err := parseCORS(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", corsKey, err)
		}
		c.CORSPolicy = cors
	}

	if raw, ok := data[ReleaseHoldKey]; ok && strings.TrimSpace(raw) != "" {
		d, err := time.ParseDuration(strings.TrimSpace(raw))
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a duration (e.g. 5s): %w", ReleaseHoldKey, raw, err)
		}
		if d < 0 {
			return nil, fmt.Errorf("%s: %q must not be negative", ReleaseHoldKey, raw)
		}
		c.ReleaseHold = d
	}

	if raw, ok := data[RetryPolicyKey]; ok && strings.TrimSpace(raw) != "" {
		rp, err := parseRetryPolicy(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", RetryPolicyKey, err)
		}
		c.RetryPolicy = rp
	}
	return c, nil
}

// retryOnValues are the retryOn conditions Contour accepts (its CRD's enum).
var retryOnValues = map[contourv1.RetryOn]bool{
	"5xx": true, "gateway-error": true, "reset": true, "reset-before-request": true, "connect-failure": true,
	"envoy-ratelimited": true, "retriable-4xx": true, "refused-stream": true, "retriable-status-codes": true,
	"retriable-headers": true, "http3-post-connect-failure": true, "cancelled": true, "deadline-exceeded": true,
	"internal": true, "resource-exhausted": true, "unavailable": true,
}

func parseRetryPolicy(raw string) (*contourv1.RetryPolicy, error) {
	if strings.TrimSpace(raw) == RetryPolicyNone {
		return nil, nil
	}
	var p contourv1.RetryPolicy
	if err := yaml.UnmarshalStrict([]byte(raw), &p); err != nil {
		return nil, fmt.Errorf("neither %q nor a Contour retry policy (count, retryOn, retriableStatusCodes, perTryTimeout): %w", RetryPolicyNone, err)
	}
	if p.NumRetries < 1 {
		// Contour reads 0 as Envoy's default of one retry and -1 as
		// none; say which instead.
		return nil, fmt.Errorf("count must be at least 1 (for no retries, set the key to %q)", RetryPolicyNone)
	}
	for _, on := range p.RetryOn {
		if !retryOnValues[on] {
			return nil, fmt.Errorf("retryOn %q is not one Contour knows", on)
		}
	}
	for _, code := range p.RetriableStatusCodes {
		if code < 100 || code > 599 {
			return nil, fmt.Errorf("retriableStatusCodes: %d is not an HTTP status code", code)
		}
	}
	if p.PerTryTimeout != "" && p.PerTryTimeout != Infinity {
		if d, err := time.ParseDuration(p.PerTryTimeout); err != nil || d < 0 {
			return nil, fmt.Errorf("perTryTimeout %q is not a duration (e.g. 1s)", p.PerTryTimeout)
		}
	}
	return &p, nil
}

func parseVisibility(raw string) (map[netv1alpha1.IngressVisibility]Fleet, error) {
	entries := map[netv1alpha1.IngressVisibility]struct {
		Class   string `json:"class"`
		Service string `json:"service"`
	}{}
	if err := yaml.UnmarshalStrict([]byte(raw), &entries); err != nil {
		return nil, fmt.Errorf("not a map of visibility to {class, service}: %w", err)
	}
	out := make(map[netv1alpha1.IngressVisibility]Fleet, len(entries))
	for v, e := range entries {
		switch v {
		case netv1alpha1.IngressVisibilityExternalIP, netv1alpha1.IngressVisibilityClusterLocal:
		default:
			return nil, fmt.Errorf("unknown visibility %q (want %s or %s)", v,
				netv1alpha1.IngressVisibilityExternalIP, netv1alpha1.IngressVisibilityClusterLocal)
		}
		if e.Class == "" {
			return nil, fmt.Errorf("%s: class is empty", v)
		}
		if errs := validation.IsDNS1123Subdomain(e.Class); len(errs) > 0 {
			return nil, fmt.Errorf("%s: class %q: %s", v, e.Class, strings.Join(errs, "; "))
		}
		nn, err := parseNamespacedName(e.Service)
		if err != nil {
			return nil, fmt.Errorf("%s: service: %w", v, err)
		}
		out[v] = Fleet{Class: e.Class, Service: nn}
	}
	for _, v := range []netv1alpha1.IngressVisibility{netv1alpha1.IngressVisibilityExternalIP, netv1alpha1.IngressVisibilityClusterLocal} {
		if _, ok := out[v]; !ok {
			return nil, fmt.Errorf("%s is missing: both %s and %s need a class and a service",
				v, netv1alpha1.IngressVisibilityExternalIP, netv1alpha1.IngressVisibilityClusterLocal)
		}
	}
	return out, nil
}

func parseNamespacedName(s string) (types.NamespacedName, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
		return types.NamespacedName{}, fmt.Errorf("%q is not of the form namespace/name", s)
	}
	for _, p := range parts {
		if errs := validation.IsDNS1123Subdomain(p); len(errs) > 0 {
			return types.NamespacedName{}, fmt.Errorf("%q: %s", s, strings.Join(errs, "; "))
		}
	}
	return types.NamespacedName{Namespace: parts[0], Name: parts[1]}, nil
}

func parseCORS(raw string) (*contourv1.CORSPolicy, error) {
	var p contourv1.CORSPolicy
	if err := yaml.UnmarshalStrict([]byte(raw), &p); err != nil {
		return nil, fmt.Errorf("not a Contour CORS policy: %w", err)
	}
	if len(p.AllowOrigin) == 0 {
		return nil, fmt.Errorf("allowOrigin must list at least one origin")
	}
	if len(p.AllowMethods) == 0 {
		return nil, fmt.Errorf("allowMethods must list at least one method")
	}
	if p.MaxAge != "" {
		if _, err := time.ParseDuration(p.MaxAge); err != nil && p.MaxAge != "0" {
			return nil, fmt.Errorf("maxAge %q is not a duration: %w", p.MaxAge, err)
		}
	}
	return &p, nil
}
