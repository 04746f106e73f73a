// Package resources holds the pure builders of hitless: a KIngress in, the
// HTTPProxies that serve it out; the backend set of a rollout in, the warm
// proxies that keep it referenced out. No clients, no listers: configuration
// comes from the context and Services through a Resolver.
package resources

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"knative.dev/networking/pkg/apis/networking"
	"knative.dev/networking/pkg/certificates"
	"knative.dev/pkg/system"
)

// Contour's upstream protocols: cleartext HTTP/2, and HTTP/1.1 (tls) or
// HTTP/2 (h2) over TLS; none is cleartext HTTP/1.1.
const (
	ProtocolH2C = "h2c"
	ProtocolTLS = "tls"
	ProtocolH2  = "h2"
)

// encrypted is the backend reached over TLS, as Knative's system-internal-tls
// asks of the ingress: HTTP/2 backends over h2, the others over tls (the
// activator and queue-proxy serve both on their TLS ports).
func (b Backend) encrypted() Backend {
	if b.Protocol == ProtocolH2C {
		b.Protocol = ProtocolH2
	} else {
		b.Protocol = ProtocolTLS
	}
	return b
}

// RoutingCASecret is the Secret, in Serving's namespace, that holds Serving's
// routing CA certificate alone (the controller copies it from
// routing-serving-certs, whose key must not be delegated), and which the
// TLSCertificateDelegation of config/ lets every namespace's proxies name.
const RoutingCASecret = "hitless-routing-ca"

// upstreamValidation is how Envoy verifies the certificate of a backend it
// reaches over TLS: signed by Serving's routing CA (RoutingCASecret)
// and issued to the backend's namespace (kn-user-<namespace>, the
// queue-proxy) or to Knative's routing (kn-routing, the activator). It
// follows from the backend alone, so the warm route of a backend validates
// exactly as its serving route does: validation is part of Contour's
// cluster, and a warm route validating otherwise would warm another one.
func upstreamValidation(b Backend) *contourv1.UpstreamValidation {
	if b.Protocol != ProtocolTLS && b.Protocol != ProtocolH2 {
		return nil
	}
	user := certificates.DataPlaneUserSAN(b.Namespace)
	return &contourv1.UpstreamValidation{
		CACertificate: system.Namespace() + "/" + RoutingCASecret,
		SubjectName:   user,
		SubjectNames:  []string{user, certificates.DataPlaneRoutingSAN},
	}
}

// contourService is a backend as a route names it: the fields Contour makes
// the backend's cluster of, so a serving route and a warm route of one
// Backend share a cluster.
func contourService(b Backend, weight int64) contourv1.Service {
	svc := contourv1.Service{Name: b.Name, Port: int(b.Port), Weight: weight, UpstreamValidation: upstreamValidation(b)}
	if b.Protocol != "" {
		proto := b.Protocol
		svc.Protocol = &proto
	}
	return svc
}

// Backend is one upstream as Contour turns it into an Envoy cluster: a port
// of a Service, the upstream protocol, and the Host the route rewrites to.
// Two routes that name the same Backend share one cluster; that is what
// makes warming it ahead of the switch, and holding it after, meaningful.
type Backend struct {
	Namespace string
	Name      string
	Port      int32
	Protocol  string
	// HostRewrite is the Host a route sends to this Service with, if any.
	// Contour makes it the cluster's SNI and the SNI part of the cluster's
	// name, so the same Service behind another rewrite is another cluster:
	// holding it without the rewrite holds nothing, and Envoy pods still
	// routing to the served cluster answer 503 NC once it is gone.
	HostRewrite string
}

// String renders a backend for conditions and events:
// ns/name:port[ (h2c)][ as Host h].
func (b Backend) String() string {
	s := b.Namespace + "/" + b.Name + ":" + strconv.Itoa(int(b.Port))
	if b.Protocol != "" {
		s += " (" + b.Protocol + ")"
	}
	if b.HostRewrite != "" {
		s += " as Host " + b.HostRewrite
	}
	return s
}

// Key identifies a backend in paths and hashes. A backend without a Host
// rewrite keeps the key it had before rewrites were part of it, so warm
// paths written by an older controller stay the same.
func (b Backend) Key() string {
	k := b.Namespace + "/" + b.Name + "/" + strconv.Itoa(int(b.Port)) + "/" + b.Protocol
	if b.HostRewrite != "" {
		k += "/" + b.HostRewrite
	}
	return k
}

// SortedBackends returns the backends of a set in a stable order.
func SortedBackends(s sets.Set[Backend]) []Backend {
	out := s.UnsortedList()
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out
}

// ClassBackends is a set of backends per Contour class.
type ClassBackends map[string]sets.Set[Backend]

// Add inserts backends for a class.
func (c ClassBackends) Add(class string, bs ...Backend) {
	if c[class] == nil {
		c[class] = sets.New[Backend]()
	}
	c[class].Insert(bs...)
}

// Union returns a new ClassBackends holding every backend of c and o.
func (c ClassBackends) Union(o ClassBackends) ClassBackends {
	out := ClassBackends{}
	for class, s := range c {
		out.Add(class, s.UnsortedList()...)
	}
	for class, s := range o {
		out.Add(class, s.UnsortedList()...)
	}
	return out
}

// Difference returns the backends of c that o lacks, per class.
func (c ClassBackends) Difference(o ClassBackends) ClassBackends {
	out := ClassBackends{}
	for class, s := range c {
		d := s.Difference(o[class])
		if d.Len() > 0 {
			out[class] = d
		}
	}
	return out
}

// Empty tells whether no class has a backend.
func (c ClassBackends) Empty() bool {
	for _, s := range c {
		if s.Len() > 0 {
			return false
		}
	}
	return true
}

// Equal tells whether both hold the same backends per class.
func (c ClassBackends) Equal(o ClassBackends) bool {
	return c.Difference(o).Empty() && o.Difference(c).Empty()
}

// Classes returns the classes that have backends, sorted.
func (c ClassBackends) Classes() []string {
	out := make([]string, 0, len(c))
	for class, s := range c {
		if s.Len() > 0 {
			out = append(out, class)
		}
	}
	sort.Strings(out)
	return out
}

// BackendsOfProxy returns the backends a proxy's routes reference. Services
// of an HTTPProxy always live in the proxy's namespace. It is the one place
// a Backend is read off a route, for the proxies we build and the ones we
// observe alike, so both agree on which cluster a route uses.
func BackendsOfProxy(p *contourv1.HTTPProxy) sets.Set[Backend] {
	out := sets.New[Backend]()
	for _, r := range p.Spec.Routes {
		if isChallengeRoute(r) {
			continue // never warmed nor held, see isChallengePath
		}
		for _, s := range r.Services {
			b := Backend{Namespace: p.Namespace, Name: s.Name, Port: int32(s.Port), HostRewrite: hostRewriteOf(r, s)}
			if s.Protocol != nil {
				b.Protocol = *s.Protocol
			}
			out.Insert(b)
		}
	}
	return out
}

// isChallengeRoute tells whether a route serves an ACME challenge path.
func isChallengeRoute(r contourv1.Route) bool {
	for _, c := range r.Conditions {
		if c.Prefix != "" {
			return isChallengePath(c.Prefix)
		}
	}
	return false
}

// hostRewriteOf is the Host a route sends to one of its Services with, as
// Contour decides it for the cluster's SNI: the Service's own Host header
// first, else the route's; the last one set wins within a policy.
func hostRewriteOf(r contourv1.Route, s contourv1.Service) string {
	if h := hostSetBy(s.RequestHeadersPolicy); h != "" {
		return h
	}
	return hostSetBy(r.RequestHeadersPolicy)
}

func hostSetBy(p *contourv1.HeadersPolicy) string {
	if p == nil {
		return ""
	}
	host := ""
	for _, h := range p.Set {
		if http.CanonicalHeaderKey(h.Name) == "Host" {
			host = h.Value
		}
	}
	return host
}

// Resolver turns a KIngress backend reference into the Backend Contour will
// build a cluster for. It fails for references a user must fix.
type Resolver func(namespace, name string, port intstr.IntOrString) (Backend, error)

// BackendError is bad input in a backend reference: the Service is missing,
// of the wrong type, or lacks the port. The reconciler surfaces it as a
// condition instead of retrying.
type BackendError struct {
	Reason  string
	Message string
}

func (e *BackendError) Error() string { return e.Message }

// ResolveFromService resolves a port reference against a Service.
//
// The protocol is the port's, except for Serving's HTTPS port: with
// system-internal-tls a KIngress names port 443 (https) of a revision's
// Service, whose first port (http on 80, or http2 on 81) tells whether the revision
// speaks HTTP/2. An http2 first port makes the https port HTTP/2 too (h2
// once encrypted, as net-contour reads it); without that, Envoy would speak
// HTTP/1.1 over TLS to a gRPC revision, and every call would fail.
//
// A Service of type ExternalName resolves like any other: whether Envoy may
// route to it is Contour's decision (its enableExternalNameService setting,
// off by default), and Contour's verdict on the proxy is read back. Knative
// names such a Service with rewriteHost to reach another KIngress through its
// load balancer (DomainMapping does); the probes then reach the Knative
// backend behind it, which echoes the hash like any other.
func ResolveFromService(svc *corev1.Service, port intstr.IntOrString) (Backend, error) {
	ref := svc.Namespace + "/" + svc.Name
	for _, p := range svc.Spec.Ports {
		if (port.Type == intstr.Int && p.Port == port.IntVal) || (port.Type == intstr.String && p.Name == port.StrVal) {
			b := Backend{Namespace: svc.Namespace, Name: svc.Name, Port: p.Port}
			if isH2C(p) || (p.Name == networking.ServicePortNameHTTPS && len(svc.Spec.Ports) > 0 && isH2C(svc.Spec.Ports[0])) {
				b.Protocol = ProtocolH2C
			}
			return b, nil
		}
	}
	return Backend{}, &BackendError{Reason: "ServicePortNotFound", Message: fmt.Sprintf(
		"Service %s has no port %s: add the port to the Service or fix servicePort in the KIngress", ref, port.String())}
}

// isH2C tells whether a Service port speaks cleartext HTTP/2, the way
// Knative marks it: the port name http2 (or h2c) or the appProtocol
// kubernetes.io/h2c.
func isH2C(p corev1.ServicePort) bool {
	if p.Name == "http2" || p.Name == "h2c" {
		return true
	}
	return p.AppProtocol != nil && *p.AppProtocol == "kubernetes.io/h2c"
}
