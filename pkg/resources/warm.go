package resources

import (
	"context"
	"fmt"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/networking/pkg/http/header"

	"github.com/hitless/hitless/pkg/config"
	"github.com/hitless/hitless/pkg/probekey"
	"github.com/hitless/hitless/pkg/resources/names"
)

// Warm is the warm set of a KIngress: a proxy per class that references
// every backend to keep (each on its own path), the hash those proxies
// answer probes with, and what the prober must confirm of them.
type Warm struct {
	Proxies []*contourv1.HTTPProxy
	Hash    string
	// Probes are the paths of the backends to confirm: the new ones (held
	// ones are only referenced).
	Probes []ProbeTarget
}

// MakeWarm builds the warm proxies that reference every backend of keep,
// per class, and the probe targets of the backends of probed (a subset of
// keep) on every Envoy pod of their class. The upstream settings that
// decide Contour's cluster (service, port, protocol, Host rewrite) are the
// ones the serving routes use, so the warmed cluster is the served one. The
// hash is, as for the serving proxies (servedHash), a digest of the warm
// proxies themselves.
//
// A warm proxy is plain HTTP, except on the classes of httpsOnly, whose
// Envoy Service has an HTTPS port and no HTTP one (an HTTPS-only load
// balancer): the prober can reach their pods over HTTPS only, so their warm
// proxy terminates TLS too, with a certificate the KIngress already uses on
// that class (see warmSecret), and is probed over HTTPS only.
func MakeWarm(ctx context.Context, ing *netv1alpha1.Ingress, keep, probed ClassBackends, httpsOnly sets.Set[string]) (*Warm, error) {
	cfg := config.FromContextOrDefaults(ctx).Contour
	token, err := probekey.FromContext(ctx).Token(ing.Namespace)
	if err != nil {
		return nil, err
	}
	w := &Warm{}
	for _, class := range keep.Classes() {
		if _, ok := cfg.FleetByClass(class); !ok {
			// The class left config-contour while its backends are still
			// held: keep nothing on a fleet we can no longer name.
			continue
		}
		host := names.WarmHost(ing.Namespace, ing.Name, class)
		p := &contourv1.HTTPProxy{
			ObjectMeta: objectMeta(ing, names.WarmProxy(ing.Name, class), RoleWarm, pendingHash),
			Spec: contourv1.HTTPProxySpec{
				IngressClassName: class,
				VirtualHost:      &contourv1.VirtualHost{Fqdn: host},
			},
		}
		tls := httpsOnly.Has(class)
		if tls {
			secret, err := warmSecret(cfg, ing, class)
			if err != nil {
				return nil, err
			}
			p.Spec.VirtualHost.TLS = &contourv1.TLS{SecretName: secretRef(ing.Namespace, secret.Namespace, secret.Name)}
		}
		for _, b := range SortedBackends(keep[class]) {
			path := names.BackendPath(b.Key())
			p.Spec.Routes = append(p.Spec.Routes, contourv1.Route{
				// Only hitless's prober matches: the warm host, whose
				// name anyone can compute, has no authorization server,
				// and its routes reach the backends of protected hosts;
				// the token (probekey) keeps everyone else out.
				// K-Network-Probe is asked for too, so whatever reaches a
				// Knative backend this way is answered by its probe
				// handler (activator, queue-proxy), never by the user's
				// container.
				Conditions: []contourv1.MatchCondition{
					{Prefix: path},
					hashOverride(),
					{Header: &contourv1.HeaderMatchCondition{Name: header.ProbeKey, Exact: header.ProbeValue}},
					tokenMatch(token),
				},
				Services:       []contourv1.Service{contourService(b, 100)},
				PermitInsecure: true,
				// A route to another ingress (an ExternalName Service
				// naming a Knative load balancer, as DomainMapping does)
				// reaches the Knative backend that answers the probe only
				// with the rewritten Host; and the Host is part of
				// Contour's cluster, so it is set to warm the served one.
				RequestHeadersPolicy:  withoutToken(headersPolicy(map[string]string{header.HashKey: pendingHash}, b.HostRewrite)),
				ResponseHeadersPolicy: headersPolicy(map[string]string{probekey.HashHeader: pendingHash}, ""),
			})
			if probed[class].Has(b) {
				w.Probes = append(w.Probes, ProbeTarget{Class: class, Host: host, Path: path, TLS: tls, SecureOnly: tls})
			}
		}
		w.Proxies = append(w.Proxies, p)
	}
	w.Hash = servedHash(w.Proxies)
	for _, p := range w.Proxies {
		setHash(p, w.Hash)
	}
	return w, nil
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
