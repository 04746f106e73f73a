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
	"github.com/hitless/hitless/pkg/probe"
	"github.com/hitless/hitless/pkg/resources/names"
)

// Serving is what a KIngress maps to: its serving proxies, the backends they
// reference per class, and the K-Network-Hash their probe routes set.
type Serving struct {
	Proxies  []*contourv1.HTTPProxy
	Backends ClassBackends
	Hash     string
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
	visibility netv1alpha1.IngressVisibility
	paths      []netv1alpha1.HTTPIngressPath
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
	// probe.HashHeader (what hitless's prober confirms, see servedHash).
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

	out := &Serving{Backends: ClassBackends{}, Hash: pendingHash}
	for _, k := range keys {
		v := vhosts[k]
		tls, err := tlsFor(ing, cfg, k.host, v.visibility)
		if err != nil {
			return nil, err
		}
		if auth != nil && tls == nil {
			return nil, authorizationNeedsTLS(ing, k.host)
		}
		routes, err := makeRoutes(ing, cfg, v.paths, tls != nil, auth != nil, internalTLS, specHash, resolve)
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
					CORSPolicy:    cfg.CORSPolicy.DeepCopy(),
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
// probe.HashHeader: a digest of everything Envoy is asked to serve for it
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

// setHash puts the served hash in the proxy's annotation and its probe
// routes' answers.
func setHash(p *contourv1.HTTPProxy, hash string) {
	p.Annotations[AnnotationHash] = hash
	for i := range p.Spec.Routes {
		hp := p.Spec.Routes[i].ResponseHeadersPolicy
		if hp == nil {
			continue
		}
		for j := range hp.Set {
			if hp.Set[j].Name == probe.HashHeader && hp.Set[j].Value == pendingHash {
				hp.Set[j].Value = hash
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
	// The in-memory warm KIngress is the one place a reserved host is right.
	_, warm := IsWarmKey(ing.Name)
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
				if err := validHost(h, warm); err != nil {
					return nil, nil, &SpecError{Reason: "InvalidHost", Message: fmt.Sprintf("spec.rules[%d]: host %q: %v", i, h, err)}
				}
				k := vhostKey{class: fleet.Class, host: h}
				v := vhosts[k]
				if v == nil {
					v = &vhost{visibility: vis}
					vhosts[k] = v
				}
				v.paths = append(v.paths, r.HTTP.Paths...)
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
		tls, err := tlsFor(ing, cfg, k.host, vhosts[k].visibility)
		if err != nil {
			return nil, err
		}
		if auth != nil && tls == nil {
			return nil, authorizationNeedsTLS(ing, k.host)
		}
		for _, prefix := range prefixesOf(vhosts[k].paths) {
			out = append(out, ProbeTarget{Class: k.class, Host: k.host, Path: prefix, TLS: tls != nil, SecureOnly: auth != nil})
		}
	}
	return out, nil
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

func tlsFor(ing *netv1alpha1.Ingress, cfg *config.Contour, host string, vis netv1alpha1.IngressVisibility) (*contourv1.TLS, error) {
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
	if cfg.DefaultTLSSecret != nil && vis == netv1alpha1.IngressVisibilityExternalIP {
		s := cfg.DefaultTLSSecret
		return &contourv1.TLS{SecretName: secretRef(ing.Namespace, s.Namespace, s.Name)}, nil
	}
	return nil, nil
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
// authorizes only what reaches the HTTPS listener, so no route of it, probe
// routes included, is served over plain HTTP whatever httpOption says
// (net-contour serves them there unauthorized under Enabled: failing open).
//
// After the user's routes come the probe routes: one per distinct prefix,
// matching the networking prober's `K-Network-Hash: override`, setting
// Knative's hash of the KIngress (specHash), which Knative backends echo, and
// answering with the served hash in probe.HashHeader (set by setHash once
// the proxies are complete). Unlike ingress.InsertProbe
// they drop the path's own header matches, which a probe cannot carry: that
// keeps every prefix probeable.
func makeRoutes(ing *netv1alpha1.Ingress, cfg *config.Contour, paths []netv1alpha1.HTTPIngressPath, tls, authorized, internalTLS bool, specHash string, resolve Resolver) ([]contourv1.Route, error) {
	var routes []contourv1.Route
	seen := sets.New[string]()
	all := make([]netv1alpha1.HTTPIngressPath, 0, 2*len(paths))
	all = append(all, paths...)
	for _, p := range paths {
		if isChallengePath(p.Path) {
			continue // never probed: no probe route
		}
		pp := *p.DeepCopy()
		pp.Headers = map[string]netv1alpha1.HeaderMatch{header.HashKey: {Exact: header.HashValueOverride}}
		if pp.AppendHeaders == nil {
			pp.AppendHeaders = map[string]string{}
		}
		pp.AppendHeaders[header.HashKey] = specHash
		all = append(all, pp)
	}
	for _, p := range all {
		conds := []contourv1.MatchCondition{{Prefix: prefixOf(p.Path)}}
		isProbe := false
		for _, name := range sortedKeys(p.Headers) {
			conds = append(conds, contourv1.MatchCondition{Header: &contourv1.HeaderMatchCondition{Name: name, Exact: p.Headers[name].Exact}})
			if name == header.HashKey && p.Headers[name].Exact == header.HashValueOverride {
				isProbe = true
			}
		}
		// Merged rules may repeat a path; Contour rejects a proxy with two
		// routes of identical conditions, and the first one wins anyway.
		ck := conditionKey(conds)
		if seen.Has(ck) {
			continue
		}
		seen.Insert(ck)

		services, err := makeServices(ing, p, internalTLS, resolve)
		if err != nil {
			return nil, err
		}

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
			// mid-request). A probe must see what one try gets, so that
			// a retry never passes a pod or backend that is not ready.
			RetryPolicy: retryPolicyFor(cfg, isProbe),
			// Probes go over plain HTTP whatever httpOption says, so that a
			// redirect never passes for a ready route; an authorized host is
			// probed over HTTPS alone.
			PermitInsecure: tls && !authorized && (isProbe || ing.Spec.HTTPOption != netv1alpha1.HTTPOptionRedirected),
		}
		if isProbe {
			route.ResponseHeadersPolicy = headersPolicy(map[string]string{probe.HashHeader: pendingHash}, "")
		}
		routes = append(routes, route)
	}
	return routes, nil
}

func retryPolicyFor(cfg *config.Contour, probe bool) *contourv1.RetryPolicy {
	if probe {
		return nil
	}
	return cfg.RetryPolicy.DeepCopy()
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
