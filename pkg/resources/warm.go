package resources

import (
	"context"
	"sort"
	"strings"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/networking/pkg/http/header"

	"github.com/hitless/hitless/pkg/config"
	"github.com/hitless/hitless/pkg/probe"
	"github.com/hitless/hitless/pkg/probekey"
	"github.com/hitless/hitless/pkg/resources/names"
)

const (
	// WarmSuffix turns a KIngress name into the key of its warm set in the
	// prober. A colon never occurs in a Kubernetes name, so the key cannot
	// collide with a real KIngress.
	WarmSuffix = ":warm"
	// AnnotationProbe lists, on the in-memory warm KIngress only, the
	// host+path of each backend that must be probed: new backends are,
	// held ones are only referenced.
	AnnotationProbe = "hitless.knative.dev/probe"
)

// Warm is the warm set of a KIngress: a proxy per class that references
// every backend to keep (each on its own path), and the in-memory KIngress
// whose hash those proxies set, for the networking prober.
type Warm struct {
	Proxies []*contourv1.HTTPProxy
	Hash    string
	// Probe is handed to the prober; it is never written to the API.
	Probe *netv1alpha1.Ingress
}

// MakeWarm builds the warm proxies that reference every backend of keep,
// per class, and the probe KIngress that asks for the backends of probed
// (a subset of keep) on every Envoy pod of their class. The upstream
// settings that decide Contour's cluster (service, port, protocol, Host
// rewrite) are the ones the serving routes use, so the warmed cluster is the
// served one.
func MakeWarm(ctx context.Context, ing *netv1alpha1.Ingress, keep, probed ClassBackends) (*Warm, error) {
	cfg := config.FromContextOrDefaults(ctx).Contour
	token, err := probekey.FromContext(ctx).Token(ing.Namespace)
	if err != nil {
		return nil, err
	}
	synthetic := &netv1alpha1.Ingress{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   ing.Namespace,
			Name:        ing.Name + WarmSuffix,
			Annotations: map[string]string{},
		},
	}
	var probes []string
	for _, class := range keep.Classes() {
		fleet, ok := cfg.FleetByClass(class)
		if !ok {
			// The class left config-contour while its backends are still
			// held: keep nothing on a fleet we can no longer name.
			continue
		}
		host := names.WarmHost(ing.Namespace, ing.Name, class)
		rule := netv1alpha1.IngressRule{
			Hosts:      []string{host},
			Visibility: visibilityOfClass(cfg, fleet.Class),
			HTTP:       &netv1alpha1.HTTPIngressRuleValue{},
		}
		for _, b := range SortedBackends(keep[class]) {
			path := names.BackendPath(b.Key())
			rule.HTTP.Paths = append(rule.HTTP.Paths, netv1alpha1.HTTPIngressPath{
				Path: path,
				// A route to another ingress (an ExternalName Service
				// naming a Knative load balancer, as DomainMapping does)
				// reaches the Knative backend that answers the probe only
				// with the rewritten Host; and the Host is part of
				// Contour's cluster, so it is set to warm the served one.
				RewriteHost: b.HostRewrite,
				Splits: []netv1alpha1.IngressBackendSplit{{
					IngressBackend: netv1alpha1.IngressBackend{
						ServiceNamespace: b.Namespace,
						ServiceName:      b.Name,
						// The protocol is part of the path (b.Key), so the
						// hash changes when only the protocol does.
						ServicePort: intstr.FromInt32(b.Port),
					},
					Percent: 100,
				}},
			})
			if probed[class].Has(b) {
				probes = append(probes, host+path)
			}
		}
		synthetic.Spec.Rules = append(synthetic.Spec.Rules, rule)
	}
	sort.Strings(probes)
	hash, err := Hash(synthetic)
	if err != nil {
		return nil, err
	}
	synthetic.Annotations[AnnotationProbe] = strings.Join(probes, ",")

	w := &Warm{Hash: hash, Probe: synthetic}
	for _, class := range keep.Classes() {
		if _, ok := cfg.FleetByClass(class); !ok {
			continue
		}
		p := &contourv1.HTTPProxy{
			ObjectMeta: objectMeta(ing, names.WarmProxy(ing.Name, class), RoleWarm, hash),
			Spec: contourv1.HTTPProxySpec{
				IngressClassName: class,
				VirtualHost:      &contourv1.VirtualHost{Fqdn: names.WarmHost(ing.Namespace, ing.Name, class)},
			},
		}
		for _, b := range SortedBackends(keep[class]) {
			svc := contourService(b, 100)
			p.Spec.Routes = append(p.Spec.Routes, contourv1.Route{
				// Only hitless's prober matches: the warm host, whose
				// name anyone can compute, has no TLS and so no
				// authorization server, and its routes reach the backends
				// of protected hosts; the token (probekey) keeps everyone
				// else out. K-Network-Probe is asked for too, so whatever
				// reaches a Knative backend this way is answered by its
				// probe handler (activator, queue-proxy), never by the
				// user's container.
				Conditions: []contourv1.MatchCondition{
					{Prefix: names.BackendPath(b.Key())},
					hashOverride(),
					{Header: &contourv1.HeaderMatchCondition{Name: header.ProbeKey, Exact: header.ProbeValue}},
					tokenMatch(token),
				},
				Services:              []contourv1.Service{svc},
				PermitInsecure:        true,
				RequestHeadersPolicy:  withoutToken(headersPolicy(map[string]string{header.HashKey: hash}, b.HostRewrite)),
				ResponseHeadersPolicy: headersPolicy(map[string]string{probe.HashHeader: hash}, ""),
			})
		}
		w.Proxies = append(w.Proxies, p)
	}
	return w, nil
}

// WarmProbeTargets filters the probe targets of a warm KIngress down to the
// backends it asks to probe.
func WarmProbeTargets(ctx context.Context, synthetic *netv1alpha1.Ingress) ([]ProbeTarget, error) {
	all, err := ProbeTargets(ctx, synthetic)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, s := range strings.Split(synthetic.Annotations[AnnotationProbe], ",") {
		if s != "" {
			want[s] = true
		}
	}
	out := all[:0]
	for _, t := range all {
		if want[t.Host+t.Path] {
			// Warm proxies are plain HTTP only (MakeWarm gives them no TLS,
			// nor authorization).
			t.TLS = false
			t.SecureOnly = false
			out = append(out, t)
		}
	}
	return out, nil
}

// IsWarmKey tells whether a prober key names a warm set, and of which KIngress.
func IsWarmKey(name string) (string, bool) {
	return strings.CutSuffix(name, WarmSuffix)
}

func visibilityOfClass(cfg *config.Contour, class string) netv1alpha1.IngressVisibility {
	for _, v := range []netv1alpha1.IngressVisibility{netv1alpha1.IngressVisibilityExternalIP, netv1alpha1.IngressVisibilityClusterLocal} {
		if f, ok := cfg.FleetFor(v); ok && f.Class == class {
			return v
		}
	}
	return netv1alpha1.IngressVisibilityExternalIP
}
