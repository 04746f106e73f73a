package resources

import (
	"context"
	"fmt"
	"sort"
	"strings"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
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
//
// A warm proxy is plain HTTP, except on the classes of httpsOnly, whose
// Envoy Service has an HTTPS port and no HTTP one (an HTTPS-only load
// balancer): the prober can reach their pods over HTTPS only, so their warm
// proxy terminates TLS too, with a certificate the KIngress already uses on
// that class (see warmSecret).
func MakeWarm(ctx context.Context, ing *netv1alpha1.Ingress, keep, probed ClassBackends, httpsOnly sets.Set[string]) (*Warm, error) {
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
		if httpsOnly.Has(class) {
			secret, err := warmSecret(cfg, ing, class)
			if err != nil {
				return nil, err
			}
			synthetic.Spec.TLS = append(synthetic.Spec.TLS, netv1alpha1.IngressTLS{
				Hosts: []string{host}, SecretNamespace: secret.Namespace, SecretName: secret.Name,
			})
		}
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
		for _, t := range synthetic.Spec.TLS {
			if t.Hosts[0] == p.Spec.VirtualHost.Fqdn {
				p.Spec.VirtualHost.TLS = &contourv1.TLS{SecretName: secretRef(ing.Namespace, t.SecretNamespace, t.SecretName)}
			}
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
	// A warm proxy terminates TLS only on a class without an HTTP port
	// (MakeWarm lists its host in spec.tls), and is then probed over HTTPS
	// only; the default certificate never applies to warm hosts.
	secure := sets.New[string]()
	for _, t := range synthetic.Spec.TLS {
		secure.Insert(t.Hosts...)
	}
	out := all[:0]
	for _, t := range all {
		if want[t.Host+t.Path] {
			t.TLS = secure.Has(t.Host)
			t.SecureOnly = t.TLS
			out = append(out, t)
		}
	}
	return out, nil
}

// warmSecret is the certificate of a warm proxy on an HTTPS-only class:
// the first (in host order) that a serving host of the KIngress uses on
// that class, else config-contour's default-tls-secret. Envoy serves it
// under the warm host, whose name it does not carry; the prober does not
// verify certificates (it confirms by the token and the hash), and using a
// certificate the KIngress's proxies already may use needs no new secret
// nor delegation.
func warmSecret(cfg *config.Contour, ing *netv1alpha1.Ingress, class string) (types.NamespacedName, error) {
	keys, _, err := vhostsOf(cfg, ing)
	if err != nil {
		return types.NamespacedName{}, err
	}
	for _, k := range keys {
		if k.class != class {
			continue
		}
		for _, t := range ing.Spec.TLS {
			if t.SecretName != "" && sets.New(t.Hosts...).Has(k.host) {
				ns := t.SecretNamespace
				if ns == "" {
					ns = ing.Namespace
				}
				return types.NamespacedName{Namespace: ns, Name: t.SecretName}, nil
			}
		}
	}
	if cfg.DefaultTLSSecret != nil {
		return *cfg.DefaultTLSSecret, nil
	}
	fleet, _ := cfg.FleetByClass(class)
	return types.NamespacedName{}, &SpecError{Reason: "NoCertificateForHTTPSOnlyFleet", Message: fmt.Sprintf(
		"the Envoy Service %s of class %s has an HTTPS port and no HTTP port, so new backends are warmed over HTTPS, "+
			"and no host of this KIngress on that class has a certificate (spec.tls), nor does config-contour set default-tls-secret: "+
			"give a host a certificate, set default-tls-secret, or add port 80 to the Envoy Service", fleet.Service, class)}
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
