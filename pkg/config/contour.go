// Package config holds the typed configuration of hitless: the keys of the
// config-contour ConfigMap (the same keys, with the same meaning, as
// net-contour, plus our own additions) and a store that keeps the parsed
// config-contour and config-network current.
package config

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/pkg/configmap"
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
	// CORSPolicyKey is the CORS policy of external (ExternalIP) virtual
	// hosts; net-contour reads the same key.
	CORSPolicyKey = "cors-policy"
	// corsPolicyKeyLegacy is a spelling hitless has documented and read
	// (net-contour's own _example shows it, but net-contour does not read
	// it). It is still read, so that a config-contour written for hitless
	// keeps its CORS policy, with a warning to rename it: after a move back
	// to net-contour the policy would silently be gone.
	corsPolicyKeyLegacy = "corsPolicy"
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
	// UseProxyProtocol says that the fleet's Contour runs with
	// --use-proxy-protocol (a load balancer such as an AWS NLB in front of
	// Envoy): every Envoy listener then expects a PROXY protocol header on
	// each connection, so the prober sends one.
	UseProxyProtocol bool `json:"use-proxy-protocol,omitempty"`
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
	// Warnings name what the ConfigMap holds that is ignored (a key, or a
	// field inside a key's YAML value, that hitless does not know) or read
	// under a spelling to be changed. net-contour loads a config-contour
	// with such content, so hitless must load it too rather than refuse it;
	// the store reports each warning where an operator looks instead.
	Warnings []string
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

// knownKeys are the keys of config-contour that hitless reads, besides
// corsPolicyKeyLegacy; configmap.ExampleKey, which documents them, is read
// by no one.
var knownKeys = []string{
	VisibilityKey, DefaultTLSSecretKey, TimeoutPolicyResponseKey, TimeoutPolicyIdleKey,
	CORSPolicyKey, ReleaseHoldKey, RetryPolicyKey,
}

// NewContourFromMap parses the data of config-contour, one
// configmap.ParseFunc per key. A malformed value refuses the whole
// ConfigMap; unknown keys and fields are ignored and listed in Warnings. A
// key whose value is blank counts as unset (net-contour's examples write
// default-tls-secret: ""), except visibility.
func NewContourFromMap(data map[string]string) (*Contour, error) {
	c := DefaultContour()
	c.Warnings = unknownKeys(data)
	if err := configmap.Parse(withoutBlank(data, VisibilityKey),
		c.asVisibility,
		asOptionalSecret(DefaultTLSSecretKey, &c.DefaultTLSSecret),
		asTimeout(TimeoutPolicyResponseKey, &c.TimeoutPolicyResponse),
		asTimeout(TimeoutPolicyIdleKey, &c.TimeoutPolicyIdle),
		c.asCORS,
		asHold(ReleaseHoldKey, &c.ReleaseHold),
		c.asRetryPolicy,
	); err != nil {
		return nil, err
	}
	return c, nil
}

// withoutBlank is data without the keys whose value is blank, but for keep,
// and with every value trimmed.
func withoutBlank(data map[string]string, keep ...string) map[string]string {
	out := make(map[string]string, len(data))
	for k, v := range data {
		if v = strings.TrimSpace(v); v != "" || slices.Contains(keep, k) {
			out[k] = v
		}
	}
	return out
}

// asVisibility parses visibility. net-contour refuses a visibility without
// both entries, an empty one included; hitless does too rather than fall
// back to the default fleets, which may be the wrong ones or not exist.
func (c *Contour) asVisibility(data map[string]string) error {
	raw, ok := data[VisibilityKey]
	if !ok {
		return nil
	}
	if raw == "" {
		return fmt.Errorf("%s: the value is empty; delete the key to use the default fleets "+
			"(contour-external/envoy, contour-internal/envoy), or give %s and %s each a class and a service",
			VisibilityKey, netv1alpha1.IngressVisibilityExternalIP, netv1alpha1.IngressVisibilityClusterLocal)
	}
	vis, warnings, err := parseVisibility(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", VisibilityKey, err)
	}
	c.Visibility = vis
	c.Warnings = append(c.Warnings, prefixed(VisibilityKey, warnings)...)
	return nil
}

// asOptionalSecret parses a namespace/name into target, if the key is set.
func asOptionalSecret(key string, target **types.NamespacedName) configmap.ParseFunc {
	return func(data map[string]string) error {
		raw, ok := data[key]
		if !ok {
			return nil
		}
		nn, err := parseNamespacedName(raw)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		*target = &nn
		return nil
	}
}

// asTimeout parses a Contour timeout: a non-negative duration or Infinity.
func asTimeout(key string, target *string) configmap.ParseFunc {
	return func(data map[string]string) error {
		raw, ok := data[key]
		if !ok || raw == Infinity {
			if ok {
				*target = raw
			}
			return nil
		}
		d, err := time.ParseDuration(raw)
		if err != nil {
			return fmt.Errorf("%s: %q is neither a duration (e.g. 30s) nor %q: %w", key, raw, Infinity, err)
		}
		if d < 0 {
			return fmt.Errorf("%s: %q must not be negative", key, raw)
		}
		*target = raw
		return nil
	}
}

// asHold parses a non-negative duration.
func asHold(key string, target *time.Duration) configmap.ParseFunc {
	return func(data map[string]string) error {
		d := *target
		if err := configmap.AsDuration(key, &d)(data); err != nil {
			return fmt.Errorf("%s: %q is not a duration (e.g. 5s): %w", key, data[key], err)
		}
		if d < 0 {
			return fmt.Errorf("%s: %q must not be negative", key, data[key])
		}
		*target = d
		return nil
	}
}

// asCORS parses cors-policy, or the spelling hitless once documented
// (corsPolicyKeyLegacy) with a warning to rename it.
func (c *Contour) asCORS(data map[string]string) error {
	key := CORSPolicyKey
	raw, ok := data[CORSPolicyKey]
	if _, legacy := data[corsPolicyKeyLegacy]; legacy {
		if ok {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s is ignored: %s is set and wins; delete %s",
				corsPolicyKeyLegacy, CORSPolicyKey, corsPolicyKeyLegacy))
		} else {
			key, raw, ok = corsPolicyKeyLegacy, data[corsPolicyKeyLegacy], true
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s is read as %s; rename it to %s, the key net-contour reads (net-contour ignores %s)",
				corsPolicyKeyLegacy, CORSPolicyKey, CORSPolicyKey, corsPolicyKeyLegacy))
		}
	}
	if !ok {
		return nil
	}
	cors, warnings, err := parseCORS(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	c.CORSPolicy = cors
	c.Warnings = append(c.Warnings, prefixed(key, warnings)...)
	return nil
}

// asRetryPolicy parses retry-policy.
func (c *Contour) asRetryPolicy(data map[string]string) error {
	raw, ok := data[RetryPolicyKey]
	if !ok {
		return nil
	}
	rp, warnings, err := parseRetryPolicy(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", RetryPolicyKey, err)
	}
	c.RetryPolicy = rp
	c.Warnings = append(c.Warnings, prefixed(RetryPolicyKey, warnings)...)
	return nil
}

// unknownKeys warns of each key of data that hitless does not read, in
// key order: a misspelt key, or one a newer net-contour or hitless reads.
func unknownKeys(data map[string]string) []string {
	var warnings []string
	for key := range data {
		if key == configmap.ExampleKey || key == corsPolicyKeyLegacy || slices.Contains(knownKeys, key) {
			continue
		}
		warnings = append(warnings, fmt.Sprintf("%q is not a key hitless reads and is ignored (the keys are %s)",
			key, strings.Join(knownKeys, ", ")))
	}
	sort.Strings(warnings)
	return warnings
}

// prefixed names key as the place of each of its warnings.
func prefixed(key string, warnings []string) []string {
	out := make([]string, 0, len(warnings))
	for _, w := range warnings {
		out = append(out, key+": "+w)
	}
	return out
}

// ignoredFields words the unknown fields decodeLenient returns as warnings.
func ignoredFields(fields []string) []string {
	out := make([]string, 0, len(fields))
	for _, f := range fields {
		out = append(out, fmt.Sprintf("field %q is unknown and ignored", f))
	}
	return out
}

// retryOnValues are the retryOn conditions Contour accepts (its CRD's enum).
var retryOnValues = map[contourv1.RetryOn]bool{
	"5xx": true, "gateway-error": true, "reset": true, "reset-before-request": true, "connect-failure": true,
	"envoy-ratelimited": true, "retriable-4xx": true, "refused-stream": true, "retriable-status-codes": true,
	"retriable-headers": true, "http3-post-connect-failure": true, "cancelled": true, "deadline-exceeded": true,
	"internal": true, "resource-exhausted": true, "unavailable": true,
}

// parseRetryPolicy reads a retry-policy value; unknown fields (a newer
// Contour's) are ignored and returned as warnings.
func parseRetryPolicy(raw string) (*contourv1.RetryPolicy, []string, error) {
	if strings.TrimSpace(raw) == RetryPolicyNone {
		return nil, nil, nil
	}
	var p contourv1.RetryPolicy
	unknown, err := decodeLenient(raw, &p)
	if err != nil {
		return nil, nil, fmt.Errorf("neither %q nor a Contour retry policy (count, retryOn, retriableStatusCodes, perTryTimeout): %w", RetryPolicyNone, err)
	}
	if p.NumRetries < 1 {
		// Contour reads 0 as Envoy's default of one retry and -1 as
		// none; say which instead.
		return nil, nil, fmt.Errorf("count must be at least 1 (for no retries, set the key to %q)", RetryPolicyNone)
	}
	for _, on := range p.RetryOn {
		if !retryOnValues[on] {
			return nil, nil, fmt.Errorf("retryOn %q is not one Contour knows", on)
		}
	}
	for _, code := range p.RetriableStatusCodes {
		if code < 100 || code > 599 {
			return nil, nil, fmt.Errorf("retriableStatusCodes: %d is not an HTTP status code", code)
		}
	}
	if p.PerTryTimeout != "" && p.PerTryTimeout != Infinity {
		if d, err := time.ParseDuration(p.PerTryTimeout); err != nil || d < 0 {
			return nil, nil, fmt.Errorf("perTryTimeout %q is not a duration (e.g. 1s)", p.PerTryTimeout)
		}
	}
	return &p, ignoredFields(unknown), nil
}

// visibilityEntry is the value of one visibility in the visibility key.
type visibilityEntry struct {
	Class   string `json:"class"`
	Service string `json:"service"`
	// UseProxyProtocol is hitless's, named after Contour's flag;
	// net-contour ignores it, as it ignores any field it does not know.
	UseProxyProtocol bool `json:"use-proxy-protocol"`
}

// parseVisibility reads a visibility value. Fields of an entry other than
// class, service and use-proxy-protocol are ignored and returned as
// warnings naming the entry.
func parseVisibility(raw string) (map[netv1alpha1.IngressVisibility]Fleet, []string, error) {
	// Each entry is kept as raw JSON first, so that its unknown fields can
	// be found and named.
	var entries map[netv1alpha1.IngressVisibility]json.RawMessage
	if err := yaml.Unmarshal([]byte(raw), &entries); err != nil {
		return nil, nil, fmt.Errorf("not a map of visibility to {class, service}: %w", err)
	}
	var warnings []string
	out := make(map[netv1alpha1.IngressVisibility]Fleet, len(entries))
	for v, rawEntry := range entries {
		switch v {
		case netv1alpha1.IngressVisibilityExternalIP, netv1alpha1.IngressVisibilityClusterLocal:
		default:
			return nil, nil, fmt.Errorf("unknown visibility %q (want %s or %s)", v,
				netv1alpha1.IngressVisibilityExternalIP, netv1alpha1.IngressVisibilityClusterLocal)
		}
		var e visibilityEntry
		unknown, err := decodeLenient(string(rawEntry), &e)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: not a {class, service, use-proxy-protocol}: %w", v, err)
		}
		warnings = append(warnings, prefixed(string(v), ignoredFields(unknown))...)
		if e.Class == "" {
			return nil, nil, fmt.Errorf("%s: class is empty", v)
		}
		if errs := validation.IsDNS1123Subdomain(e.Class); len(errs) > 0 {
			return nil, nil, fmt.Errorf("%s: class %q: %s", v, e.Class, strings.Join(errs, "; "))
		}
		nn, err := parseNamespacedName(e.Service)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: service: %w", v, err)
		}
		out[v] = Fleet{Class: e.Class, Service: nn, UseProxyProtocol: e.UseProxyProtocol}
	}
	for _, v := range []netv1alpha1.IngressVisibility{netv1alpha1.IngressVisibilityExternalIP, netv1alpha1.IngressVisibilityClusterLocal} {
		if _, ok := out[v]; !ok {
			return nil, nil, fmt.Errorf("%s is missing: both %s and %s need a class and a service",
				v, netv1alpha1.IngressVisibilityExternalIP, netv1alpha1.IngressVisibilityClusterLocal)
		}
	}
	ext, local := out[netv1alpha1.IngressVisibilityExternalIP], out[netv1alpha1.IngressVisibilityClusterLocal]
	if ext.Class == local.Class && ext.UseProxyProtocol != local.UseProxyProtocol {
		// One class is one Contour, whose listeners either all expect
		// the header or none does.
		with, without := netv1alpha1.IngressVisibilityExternalIP, netv1alpha1.IngressVisibilityClusterLocal
		if local.UseProxyProtocol {
			with, without = without, with
		}
		return nil, nil, fmt.Errorf("%s and %s both name class %s, one Contour, but only %s sets use-proxy-protocol: "+
			"set use-proxy-protocol: true on %s too if that Contour runs with --use-proxy-protocol, or remove it from %s",
			netv1alpha1.IngressVisibilityExternalIP, netv1alpha1.IngressVisibilityClusterLocal, ext.Class, with, without, with)
	}
	// Map order is random; warnings are compared and shown in order.
	sort.Strings(warnings)
	return out, warnings, nil
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
