package resources

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/networking/pkg/http/header"
	"knative.dev/networking/pkg/ingress"
	"knative.dev/pkg/network"

	"github.com/hitless/hitless/pkg/config"
	"github.com/hitless/hitless/pkg/probekey"
	"github.com/hitless/hitless/pkg/resources/names"
)

// Serving is what a KIngress maps to: its serving proxies, the backends they
// reference per class, and the K-Network-Hash their probe routes set.
type Serving struct {
	Proxies  []*contourv1.HTTPProxy
	Backends ClassBackends
	Hash     string
	// Probes are what confirms the proxies on every Envoy pod: each path
	// prefix of each host (ProbeTargets).
	Probes []ProbeTarget
}

// SpecError is bad input in a KIngress spec that no retry can fix.
type SpecError struct {
	Reason  string
	Message string
}

func (e *SpecError) Error() string { return e.Message }

// vhostKey identifies one serving proxy: a host on a class.
type vhostKey struct {
	class, host string
}

type vhost struct {
	// visibility is the fleet's: where the host is served.
	visibility netv1alpha1.IngressVisibility
	// externalRule tells that an ExternalIP rule asks for the host. It
	// decides what net-contour gives ExternalIP rules (the default TLS
	// certificate, the CORS policy) even for a host in the cluster's domain,
	// which the internal fleet serves (hostVisibility).
	externalRule bool
	paths        []netv1alpha1.HTTPIngressPath
}

// MakeServing builds the serving HTTPProxies of a KIngress: one per
// (class, host), rules sharing a host merged, with the probe routes of
// ingress.InsertProbe. Backends are resolved through resolve; its errors are
// returned as they are so the caller can tell bad input from a failed read.
func MakeServing(ctx context.Context, ing *netv1alpha1.Ingress, resolve Resolver) (*Serving, error) {
	if err := ValidateSpec(ing); err != nil {
		return nil, err
	}
	full := config.FromContextOrDefaults(ctx)
	cfg := full.Contour
	internalTLS := full.Network != nil && full.Network.SystemInternalTLSEnabled()

	// The probe routes pass Knative's hash of the spec to the backend,
	// which echoes it (Knative's contract, checked by its conformance
	// suite), and answer with the hash of the proxies themselves in
	// probekey.HashHeader (what hitless's prober confirms, see servedHash).
	specHash, err := Hash(ing)
	if err != nil {
		return nil, err
	}
	keys, vhosts, err := vhostsOf(cfg, ing)
	if err != nil {
		return nil, err
	}
	auth, err := authorizationOf(ing)
	if err != nil {
		return nil, err
	}
	token, err := probekey.FromContext(ctx).Token(ing.Namespace)
	if err != nil {
		return nil, err
	}

	out := &Serving{Backends: ClassBackends{}, Hash: pendingHash}
	for _, k := range keys {
		v := vhosts[k]
		tls, err := tlsFor(ing, cfg, k.host, v.externalRule)
		if err != nil {
			return nil, err
		}
		if auth != nil && tls == nil {
			return nil, authorizationNeedsTLS(ing, k.host)
		}
		routes, err := makeRoutes(ing, cfg, v.paths, routeOptions{
			tls: tls != nil, authorized: auth != nil, clusterLocal: v.visibility == netv1alpha1.IngressVisibilityClusterLocal,
			internalTLS: internalTLS, specHash: specHash, token: token,
		}, resolve)
		if err != nil {
			return nil, err
		}
		p := &contourv1.HTTPProxy{
			ObjectMeta: objectMeta(ing, names.ServingProxy(ing.Name, k.class, k.host), RoleServing, pendingHash),
			Spec: contourv1.HTTPProxySpec{
				IngressClassName: k.class,
				VirtualHost: &contourv1.VirtualHost{
					Fqdn:          k.host,
					TLS:           tls,
					CORSPolicy:    corsFor(cfg, v.externalRule),
					Authorization: auth.DeepCopy(),
				},
				Routes: routes,
			},
		}
		copyIngressAnnotations(p.Annotations, ing, k.class)
		p.Annotations[AnnotationGeneration] = strconv.FormatInt(ing.Generation, 10)
		setNetContourLabels(p.Labels, ing, k.class, k.host)
		out.Proxies = append(out.Proxies, p)
		// Read back off the proxy, as observed proxies are, so that a
		// backend served now and the same one desired compare equal.
		out.Backends.Add(k.class, BackendsOfProxy(p).UnsortedList()...)
		out.Probes = append(out.Probes, probeTargetsOf(k, v, tls != nil, auth != nil)...)
	}
	out.Hash = servedHash(out.Proxies)
	for _, p := range out.Proxies {
		setHash(p, out.Hash)
	}
	return out, nil
}

// pendingHash stands in for the served hash in the probe routes until the
// proxies it is computed from are complete.
const pendingHash = "hitless-pending-hash"

// servedHash is what a KIngress's probe routes answer with in
// probekey.HashHeader: a digest of everything Envoy is asked to serve for it
// (each proxy's spec, with the hash itself left out). Knative's hash of the
// KIngress spec (K-Network-Hash, which the routes still pass to the backend
// for it to echo) misses what
// else shapes the routes: config-contour (timeouts, retries, classes),
// config-network (internal TLS), a backend Service's port names (its
// protocol). With that hash, a change of those alone would be confirmed by
// the probe round of the unchanged spec, which every Envoy pod still
// answered with the old routes, and the old backends released after the
// hold without any pod having confirmed the switch. With this one, every
// change of what is served is a new hash, probed on every pod.
func servedHash(proxies []*contourv1.HTTPProxy) string {
	h := sha256.New()
	for _, p := range proxies {
		b, err := json.Marshal(p.Spec)
		if err != nil {
			// A spec of plain strings, numbers and slices always
			// marshals; its name keeps the hash distinct regardless.
			b = []byte(p.Name)
		}
		h.Write(b)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// setHash puts the served hash in the proxy's annotation and wherever its
// routes' header policies hold pendingHash: the probe routes' answers, and
// the K-Network-Hash the warm routes pass to the backend.
func setHash(p *contourv1.HTTPProxy, hash string) {
	p.Annotations[AnnotationHash] = hash
	for i := range p.Spec.Routes {
		for _, hp := range []*contourv1.HeadersPolicy{p.Spec.Routes[i].RequestHeadersPolicy, p.Spec.Routes[i].ResponseHeadersPolicy} {
			if hp == nil {
				continue
			}
			for j := range hp.Set {
				if hp.Set[j].Value == pendingHash {
					hp.Set[j].Value = hash
				}
			}
		}
	}
}

// Hash is Knative's K-Network-Hash of a KIngress (ingress.ComputeHash): what
// its probe routes pass to the backend, which echoes it.
func Hash(ing *netv1alpha1.Ingress) (string, error) {
	h, err := ingress.ComputeHash(ing)
	if err != nil {
		return "", &SpecError{Reason: "InvalidSpec", Message: err.Error()}
	}
	return hex.EncodeToString(h[:]), nil
}

// vhostsOf groups the paths of a KIngress by (class, host), expanding
// cluster-local hosts, in a stable order.
func vhostsOf(cfg *config.Contour, ing *netv1alpha1.Ingress) ([]vhostKey, map[vhostKey]*vhost, error) {
	vhosts := map[vhostKey]*vhost{}
	for i, r := range ing.Spec.Rules {
		if r.HTTP == nil {
			return nil, nil, &SpecError{Reason: "RuleWithoutHTTP", Message: fmt.Sprintf("spec.rules[%d] has no http block: every rule needs http.paths", i)}
		}
		if len(r.Hosts) == 0 {
			return nil, nil, &SpecError{Reason: "RuleWithoutHosts", Message: fmt.Sprintf("spec.rules[%d] has no hosts", i)}
		}
		for _, ruleHost := range sets.List(sets.New(r.Hosts...)) {
			vis := hostVisibility(r, ruleHost)
			fleet, ok := cfg.FleetFor(vis)
			if !ok {
				return nil, nil, &SpecError{Reason: "UnknownVisibility", Message: fmt.Sprintf(
					"spec.rules[%d]: host %q is served %s, which has no class in config-contour's visibility key", i, ruleHost, vis)}
			}
			hosts := sets.New(ruleHost)
			if vis == netv1alpha1.IngressVisibilityClusterLocal {
				hosts = ingress.ExpandedHosts(hosts)
			}
			for _, h := range sets.List(hosts) {
				if err := validHost(h); err != nil {
					return nil, nil, &SpecError{Reason: "InvalidHost", Message: fmt.Sprintf("spec.rules[%d]: host %q: %v", i, h, err)}
				}
				if vis == netv1alpha1.IngressVisibilityClusterLocal {
					if owner, ok := clusterLocalNamespace(h); ok && owner != ing.Namespace {
						return nil, nil, &SpecError{Reason: "HostOfAnotherNamespace", Message: fmt.Sprintf(
							"spec.rules[%d]: host %q is the in-cluster name of a Service of namespace %q, and this KIngress is in namespace %q: "+
								"only a KIngress of %q may serve it; use a host of namespace %q",
							i, h, owner, ing.Namespace, owner, ing.Namespace)}
					}
				}
				k := vhostKey{class: fleet.Class, host: h}
				v := vhosts[k]
				if v == nil {
					v = &vhost{visibility: vis}
					vhosts[k] = v
				}
				v.paths = append(v.paths, r.HTTP.Paths...)
				v.externalRule = v.externalRule || visibilityOf(r) == netv1alpha1.IngressVisibilityExternalIP
			}
		}
	}

	keys := make([]vhostKey, 0, len(vhosts))
	for k := range vhosts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].class != keys[j].class {
			return keys[i].class < keys[j].class
		}
		return keys[i].host < keys[j].host
	})
	return keys, vhosts, nil
}

// ProbeTarget is one URL to probe on every Envoy pod of a class.
type ProbeTarget struct {
	Class string
	Host  string
	Path  string
	// TLS tells that the host terminates TLS too: Envoy routes its HTTPS
	// requests through a route table of their own, which must be probed.
	TLS bool
	// SecureOnly tells that the host is served over HTTPS only (it is
	// behind an authorization server, see makeRoutes): its plain HTTP
	// answer is a redirect, which proves nothing, so only HTTPS is probed.
	SecureOnly bool
}

// ProbeTargets lists what to probe to confirm a KIngress is served at its
// hash: every distinct path prefix of every host, each of which has a probe
// route (see makeRoutes). A vhost is one unit in Envoy's RDS, so these
// confirm every route of it, header-matched ones included.
func ProbeTargets(ctx context.Context, ing *netv1alpha1.Ingress) ([]ProbeTarget, error) {
	cfg := config.FromContextOrDefaults(ctx).Contour
	keys, vhosts, err := vhostsOf(cfg, ing)
	if err != nil {
		return nil, err
	}
	auth, err := authorizationOf(ing)
	if err != nil {
		return nil, err
	}
	var out []ProbeTarget
	for _, k := range keys {
		tls, err := tlsFor(ing, cfg, k.host, vhosts[k].externalRule)
		if err != nil {
			return nil, err
		}
		if auth != nil && tls == nil {
			return nil, authorizationNeedsTLS(ing, k.host)
		}
		out = append(out, probeTargetsOf(k, vhosts[k], tls != nil, auth != nil)...)
	}
	return out, nil
}

// probeTargetsOf lists the probe targets of one virtual host: one per path
// prefix, each of which has a probe route (see makeRoutes).
func probeTargetsOf(k vhostKey, v *vhost, tls, authorized bool) []ProbeTarget {
	var out []ProbeTarget
	for _, prefix := range prefixesOf(v.paths) {
		out = append(out, ProbeTarget{Class: k.class, Host: k.host, Path: prefix, TLS: tls, SecureOnly: authorized})
	}
	return out
}

func prefixesOf(paths []netv1alpha1.HTTPIngressPath) []string {
	seen := sets.New[string]()
	var out []string
	for _, p := range paths {
		prefix := prefixOf(p.Path)
		if isChallengePath(p.Path) {
			continue
		}
		if !seen.Has(prefix) {
			seen.Insert(prefix)
			out = append(out, prefix)
		}
	}
	return out
}

// hostVisibility is the fleet a host of a rule is served by: the rule's
// visibility, except that a host in the cluster's own domain
// (name.namespace.svc.cluster.local) is cluster-local whatever the rule
// says. Only the cluster's DNS resolves such a name, to the internal
// fleet's Service, so the external fleet could never receive its requests;
// net-contour sends such hosts of ExternalIP rules to the internal class
// too, and a cluster moving over expects them served there.
func hostVisibility(r netv1alpha1.IngressRule, host string) netv1alpha1.IngressVisibility {
	if strings.HasSuffix(host, "."+network.GetClusterDomainName()) {
		return netv1alpha1.IngressVisibilityClusterLocal
	}
	return visibilityOf(r)
}

func visibilityOf(r netv1alpha1.IngressRule) netv1alpha1.IngressVisibility {
	if r.Visibility == "" {
		return netv1alpha1.IngressVisibilityExternalIP
	}
	return r.Visibility
}

// tlsFor is the certificate of a host: its own from spec.tls, else
// config-contour's default one when an ExternalIP rule asks for the host.
func tlsFor(ing *netv1alpha1.Ingress, cfg *config.Contour, host string, externalRule bool) (*contourv1.TLS, error) {
	for i, t := range ing.Spec.TLS {
		for _, h := range t.Hosts {
			if h != host {
				continue
			}
			if t.SecretName == "" {
				return nil, &SpecError{Reason: "InvalidTLS", Message: fmt.Sprintf("spec.tls[%d] for host %q has no secretName", i, host)}
			}
			ns := t.SecretNamespace
			if ns == "" {
				ns = ing.Namespace
			}
			return &contourv1.TLS{SecretName: secretRef(ing.Namespace, ns, t.SecretName)}, nil
		}
	}
	if cfg.DefaultTLSSecret != nil && externalRule {
		s := cfg.DefaultTLSSecret
		return &contourv1.TLS{SecretName: secretRef(ing.Namespace, s.Namespace, s.Name)}, nil
	}
	return nil, nil
}

// corsFor is config-contour's CORS policy for a host, which net-contour
// puts on the hosts of ExternalIP rules only: in-cluster callers are no
// browsers.
func corsFor(cfg *config.Contour, externalRule bool) *contourv1.CORSPolicy {
	if !externalRule {
		return nil
	}
	return cfg.CORSPolicy.DeepCopy()
}

// secretRef is how an HTTPProxy names a secret: bare in its own namespace,
// namespace/name elsewhere (Contour then requires a TLSCertificateDelegation).
func secretRef(proxyNS, ns, name string) string {
	if ns == proxyNS {
		return name
	}
	return ns + "/" + name
}

// makeRoutes turns the paths of one host into Contour routes. tls tells
// whether the virtual host terminates TLS, which is when httpOption decides
// between serving plain HTTP (Enabled) and redirecting it (Redirected).
// authorized tells that the host is behind an authorization server: Contour
// authorizes only what reaches the HTTPS listener, so no route of it that a
// client can use is served over plain HTTP whatever httpOption says
// (net-contour serves them there unauthorized under Enabled: failing open).
//
// Two kinds of probe routes follow the user's routes:
//   - Knative's (ingress.InsertProbe): each user route again, matching
//     `K-Network-Hash: override` too and passing Knative's hash of the spec
//     (specHash) to the backend, which echoes it. Anyone may send that
//     header (Knative's conformance suite does), so these keep everything of
//     the user route: its header matches, its redirect, its authorization.
//     They reach nothing the user route does not.
//   - hitless's own: one per distinct prefix, matching the prober's token
//     (probekey) besides `K-Network-Hash: override`, so no client can use
//     one. They are served over plain HTTP where the host redirects (a
//     redirect proves nothing about the route), skip the authorization
//     server (the prober is no user of it), never retry (a probe must see
//     what one try gets) and answer with the served hash in
//     probekey.HashHeader (set by setHash once the proxies are complete). They
//     drop the path's own header matches, which a probe does not carry, so
//     every prefix is probeable; Contour orders them before Knative's of the
//     same prefix, having more header conditions.
func makeRoutes(ing *netv1alpha1.Ingress, cfg *config.Contour, paths []netv1alpha1.HTTPIngressPath, o routeOptions, resolve Resolver) ([]contourv1.Route, error) {
	var routes, knativeProbes, ownProbes []contourv1.Route
	seen := sets.New[string]()
	tls, authorized, specHash, token := o.tls, o.authorized, o.specHash, o.token
	userInsecure := o.userInsecure(ing.Spec.HTTPOption)
	for _, p := range paths {
		services, err := makeServices(ing, p, o.internalTLS, resolve)
		if err != nil {
			return nil, err
		}
		conds := pathConditions(p)
		route := contourv1.Route{
			Conditions:       conds,
			Services:         services,
			EnableWebsockets: true,
			TimeoutPolicy: &contourv1.TimeoutPolicy{
				Response: cfg.TimeoutPolicyResponse,
				Idle:     cfg.TimeoutPolicyIdle,
			},
			RequestHeadersPolicy: headersPolicy(p.AppendHeaders, p.RewriteHost),
			// Retries are for user traffic (a backend pod going away
			// mid-request).
			RetryPolicy:    cfg.RetryPolicy.DeepCopy(),
			PermitInsecure: userInsecure || o.challengeInsecure(p.Path),
		}
		// Merged rules may repeat a path; Contour rejects a proxy with two
		// routes of identical conditions, and the first one wins anyway.
		if ck := conditionKey(conds); !seen.Has(ck) {
			seen.Insert(ck)
			routes = append(routes, route)
		}
		if isChallengePath(p.Path) {
			continue // never probed: no probe route
		}

		kp := *route.DeepCopy()
		kp.Conditions = append(kp.Conditions, hashOverride())
		kp.RequestHeadersPolicy = headersPolicy(withHash(p.AppendHeaders, specHash), p.RewriteHost)
		if ck := conditionKey(kp.Conditions); !seen.Has(ck) {
			seen.Insert(ck)
			knativeProbes = append(knativeProbes, kp)
		}

		op := contourv1.Route{
			Conditions:       []contourv1.MatchCondition{{Prefix: prefixOf(p.Path)}, hashOverride(), tokenMatch(token)},
			Services:         route.Services,
			EnableWebsockets: true,
			TimeoutPolicy:    route.TimeoutPolicy.DeepCopy(),
			// Set, not appended: the backend sees Knative's hash alone.
			RequestHeadersPolicy:  withoutToken(headersPolicy(withHash(p.AppendHeaders, specHash), p.RewriteHost)),
			ResponseHeadersPolicy: headersPolicy(map[string]string{probekey.HashHeader: pendingHash}, ""),
			// An authorized host is probed over HTTPS alone: Contour
			// redirects every plain HTTP request of it.
			PermitInsecure: tls && !authorized,
		}
		if authorized {
			op.AuthPolicy = &contourv1.AuthorizationPolicy{Disabled: true}
		}
		if ck := conditionKey(op.Conditions); !seen.Has(ck) {
			seen.Insert(ck)
			ownProbes = append(ownProbes, op)
		}
	}
	routes = append(routes, knativeProbes...)
	return append(routes, ownProbes...), nil
}

// routeOptions are what the routes of one host depend on beside its paths.
type routeOptions struct {
	// tls: the host terminates TLS. authorized: it is behind an
	// authorization server. clusterLocal: it is served by the internal fleet.
	tls, authorized, clusterLocal bool
	// internalTLS: config-network's system-internal-tls is on.
	internalTLS bool
	// specHash is Knative's hash of the KIngress spec; token the prober's.
	specHash, token string
}

// userInsecure tells whether the user's routes of the host are served over
// plain HTTP too, not redirected to HTTPS. A host without TLS has plain
// HTTP alone, and an authorized one HTTPS alone (Contour authorizes only
// its HTTPS listener). Otherwise, as net-contour decides it: only
// httpOption Enabled serves plain HTTP on an external host; Redirected and
// an empty option (what Serving writes for config-network's deprecated
// http-protocol Disabled, or a value it does not know) redirect. A
// cluster-local host is never redirected: in-cluster callers
// use http:// URLs, and a redirected POST loses its body
// (net-contour#848).
func (o routeOptions) userInsecure(opt netv1alpha1.HTTPOption) bool {
	if !o.tls || o.authorized {
		return false
	}
	return o.clusterLocal || opt == netv1alpha1.HTTPOptionEnabled
}

// challengeInsecure tells whether an ACME HTTP-01 challenge path is served
// over plain HTTP on a host whose user routes are redirected. It is on every
// TLS host but an authorized one: HTTP-01 is validated over plain HTTP on
// port 80, and the host of a certificate being renewed already terminates
// TLS, so under httpOption Redirected a redirect of the challenge would
// leave the renewal to whether the ACME server and cert-manager's self-check
// follow it to HTTPS. The route reaches the solver alone, which answers its
// token, public by design, and 404 to anything else: no application path is
// opened to plain HTTP. An authorized host keeps HTTPS alone (Contour
// authorizes only its HTTPS listener).
func (o routeOptions) challengeInsecure(path string) bool {
	return o.tls && !o.authorized && isChallengePath(path)
}

// pathConditions are the match conditions of a KIngress path: its prefix
// and its exact header matches.
func pathConditions(p netv1alpha1.HTTPIngressPath) []contourv1.MatchCondition {
	conds := []contourv1.MatchCondition{{Prefix: prefixOf(p.Path)}}
	for _, name := range sortedKeys(p.Headers) {
		conds = append(conds, contourv1.MatchCondition{Header: &contourv1.HeaderMatchCondition{Name: name, Exact: p.Headers[name].Exact}})
	}
	return conds
}

// hashOverride matches Knative's probe requests (K-Network-Hash: override).
func hashOverride() contourv1.MatchCondition {
	return contourv1.MatchCondition{Header: &contourv1.HeaderMatchCondition{Name: header.HashKey, Exact: header.HashValueOverride}}
}

// tokenMatch matches requests that carry the prober's token.
func tokenMatch(token string) contourv1.MatchCondition {
	return contourv1.MatchCondition{Header: &contourv1.HeaderMatchCondition{Name: probekey.Header, Exact: token}}
}

// withoutToken has Envoy remove the prober's token before the request goes
// upstream: no backend ever sees one.
func withoutToken(hp *contourv1.HeadersPolicy) *contourv1.HeadersPolicy {
	if hp == nil {
		hp = &contourv1.HeadersPolicy{}
	}
	hp.Remove = append(hp.Remove, probekey.Header)
	return hp
}

// withHash is a path's appendHeaders with K-Network-Hash set to hash.
func withHash(set map[string]string, hash string) map[string]string {
	out := make(map[string]string, len(set)+1)
	for k, v := range set {
		out[k] = v
	}
	out[header.HashKey] = hash
	return out
}

// makeServices turns the splits of a path into the Services of its route.
// Under system-internal-tls every backend is reached over TLS and
// validated (Backend.encrypted, upstreamValidation), except two: an ACME
// challenge's solver, which speaks plain HTTP/1.1 whatever its port is
// named (net-contour sends it so too), and a DomainMapping's route to
// Knative's internal load balancer (rewriteHost with K-Original-Host on the
// split), which is Envoy itself, serving h2c and no certificate Serving
// issued.
func makeServices(ing *netv1alpha1.Ingress, p netv1alpha1.HTTPIngressPath, internalTLS bool, resolve Resolver) ([]contourv1.Service, error) {
	splits := p.Splits
	if len(splits) == 0 {
		return nil, &SpecError{Reason: "PathWithoutSplits", Message: "a path of the KIngress has no splits: every path needs at least one backend"}
	}
	total := 0
	for _, s := range splits {
		total += s.Percent
	}
	var services []contourv1.Service
	for _, s := range splits {
		weight := int64(s.Percent)
		switch {
		case len(splits) == 1:
			weight = 100
		case total == 0:
			// No percentages at all: Contour spreads evenly, as the
			// KIngress asks by saying nothing.
			weight = 0
		case s.Percent == 0:
			// A 0 % split gets no traffic and so needs no cluster.
			continue
		}
		ns := s.ServiceNamespace
		if ns == "" {
			ns = ing.Namespace
		}
		if ns != ing.Namespace {
			return nil, &SpecError{Reason: "CrossNamespaceBackend", Message: fmt.Sprintf(
				"backend %s/%s is in another namespace than the KIngress (%s): Contour routes only to Services of the proxy's namespace",
				ns, s.ServiceName, ing.Namespace)}
		}
		b, err := resolve(ns, s.ServiceName, s.ServicePort)
		if err != nil {
			return nil, err
		}
		_, mapped := s.AppendHeaders[header.OriginalHostKey]
		switch {
		case isChallengePath(p.Path):
			b.Protocol = ""
		case internalTLS && p.RewriteHost != "" && mapped:
			b.Protocol = ProtocolH2C
		case internalTLS:
			b = b.encrypted()
		}
		svc := contourService(b, weight)
		svc.RequestHeadersPolicy = headersPolicy(s.AppendHeaders, "")
		services = append(services, svc)
	}
	return services, nil
}

// headersPolicy sets (not appends: a client cannot smuggle a second value)
// the given headers, and the Host header when rewriteHost is set.
func headersPolicy(set map[string]string, rewriteHost string) *contourv1.HeadersPolicy {
	if len(set) == 0 && rewriteHost == "" {
		return nil
	}
	hp := &contourv1.HeadersPolicy{}
	for _, k := range sortedKeys(set) {
		hp.Set = append(hp.Set, contourv1.HeaderValue{Name: k, Value: set[k]})
	}
	if rewriteHost != "" {
		hp.Set = append(hp.Set, contourv1.HeaderValue{Name: "Host", Value: rewriteHost})
	}
	return hp
}

func prefixOf(path string) string {
	if path == "" {
		return "/"
	}
	if !strings.HasPrefix(path, "/") {
		return "/" + path
	}
	return path
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func conditionKey(conds []contourv1.MatchCondition) string {
	var b strings.Builder
	for _, c := range conds {
		b.WriteString(c.Prefix)
		if c.Header != nil {
			b.WriteString("\x00" + c.Header.Name + "=" + c.Header.Exact)
		}
		b.WriteString("\x01")
	}
	return b.String()
}
