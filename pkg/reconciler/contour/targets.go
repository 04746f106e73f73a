package contour

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1listers "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"

	"github.com/hitless/hitless/pkg/config"
	"github.com/hitless/hitless/pkg/probe"
)

// fleetPods are the Envoy pods of a fleet that must confirm a generation
// and the port their HTTP listener has inside the pod.
type fleetPods struct {
	// IPs are the ready pods and the not ready ones that still accept
	// connections.
	IPs sets.Set[string]
	// NotReady are the pods of IPs whose endpoint is not ready.
	NotReady sets.Set[string]
	Port     string
	// TLSPort is the pod port of the HTTPS listener, empty when the
	// fleet's Service has none.
	TLSPort string
}

// envoyTargets finds Envoy pods through the EndpointSlices of each fleet's
// Service, so probes go to every pod, never through the Service's VIP.
//
// Not ready is not the same as not serving: an Envoy pod whose readiness
// probe fails (its /ready answers too late under load) or that is
// terminating gets no new connections through the Service, but it keeps
// routing every request of the client connections it has, with whatever
// routes it has. Were it left out, a rollout could be Ready while that pod
// still sends requests to the old backend, which Knative then deletes
// (TestFaultNotReadyEnvoyPodStillServes). So a not ready pod must confirm
// too, as long as it accepts connections; one that refuses them serves
// nobody and cannot hold a rollout up.
type envoyTargets struct {
	services       corev1listers.ServiceLister
	endpointSlices discoverylisters.EndpointSliceLister
	// accepts tells whether a pod's listener (ip:port) accepts connections.
	accepts func(addr string) bool
	// onChange runs (in its own goroutine) when the not ready pods that
	// must confirm change without an EndpointSlice event (one stopped or
	// started accepting), so rollouts in flight restart their probe rounds
	// as they do on a slice change.
	onChange func()

	mu   sync.Mutex
	last map[string]notReadySeen // by fleet Service
}

// notReadySeen is what pods() saw of a fleet's not ready pods last time.
type notReadySeen struct {
	listed, included string // sorted, comma-joined
}

var _ probe.TargetLister = (*envoyTargets)(nil)

// errNoEnvoyPods means a fleet has no ready Envoy pod: nobody can confirm.
var errNoEnvoyPods = errors.New("no ready Envoy pod")

// errNoProbePort means a fleet's Envoy Service has no port a host can be
// probed on: the operator's Service, or the host's TLS, has to change.
var errNoProbePort = errors.New("no port to probe")

// servicePorts are the names of a fleet Service's HTTP and HTTPS ports,
// empty when it has none.
type servicePorts struct{ http, https string }

// ports finds the HTTP and HTTPS ports of a fleet's Envoy Service. One of
// the two is enough: an HTTPS-only Service (a load balancer that takes
// HTTPS only) is probed over HTTPS.
func (t *envoyTargets) ports(fleet config.Fleet) (*corev1.Service, servicePorts, error) {
	svc, err := t.services.Services(fleet.Service.Namespace).Get(fleet.Service.Name)
	if apierrs.IsNotFound(err) {
		return nil, servicePorts{}, fmt.Errorf("Envoy Service %s of class %s does not exist: %w", fleet.Service, fleet.Class, errNoEnvoyPods)
	} else if err != nil {
		return nil, servicePorts{}, fmt.Errorf("failed to get Envoy Service %s: %w", fleet.Service, err)
	}
	var out servicePorts
	out.http, _ = httpPortName(svc)
	out.https, _ = httpsPortName(svc)
	if out.http == "" && out.https == "" {
		return nil, servicePorts{}, fmt.Errorf("Envoy Service %s of class %s has neither an HTTP port (80, or one named http) "+
			"nor an HTTPS port (443, or one named https), and its Envoy pods are probed through one of them: add one: %w",
			fleet.Service, fleet.Class, errNoProbePort)
	}
	return svc, out, nil
}

// httpsOnly returns the classes whose Envoy Service has an HTTPS port and
// no HTTP port. A class whose Service cannot be read is left out: the probe
// round reports it.
func (t *envoyTargets) httpsOnly(cfg *config.Contour, classes []string) sets.Set[string] {
	out := sets.New[string]()
	for _, class := range classes {
		fleet, ok := cfg.FleetByClass(class)
		if !ok {
			continue
		}
		if _, p, err := t.ports(fleet); err == nil && p.http == "" {
			out.Insert(class)
		}
	}
	return out
}

// pods returns the ready Envoy pods of a fleet.
func (t *envoyTargets) pods(fleet config.Fleet) (fleetPods, error) {
	svc, names, err := t.ports(fleet)
	if err != nil {
		return fleetPods{}, err
	}
	slices, err := t.endpointSlices.EndpointSlices(svc.Namespace).List(labels.SelectorFromSet(labels.Set{
		discoveryv1.LabelServiceName: svc.Name,
	}))
	if err != nil {
		return fleetPods{}, fmt.Errorf("failed to list EndpointSlices of %s: %w", fleet.Service, err)
	}
	out := fleetPods{IPs: sets.New[string](), NotReady: sets.New[string]()}
	notReady := sets.New[string]()
	for _, s := range slices {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		port, tlsPort := "", ""
		for _, p := range s.Ports {
			if p.Name == nil || p.Port == nil {
				continue
			}
			if names.http != "" && *p.Name == names.http {
				port = fmt.Sprint(*p.Port)
			}
			if names.https != "" && *p.Name == names.https {
				tlsPort = fmt.Sprint(*p.Port)
			}
		}
		if port == "" && tlsPort == "" {
			continue
		}
		if port != "" {
			out.Port = port
		}
		if tlsPort != "" {
			out.TLSPort = tlsPort
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				notReady.Insert(e.Addresses...)
				continue
			}
			out.IPs.Insert(e.Addresses...)
		}
	}
	if out.IPs.Len() == 0 {
		// Nobody to ask is not a confirmation: a fleet needs a ready pod.
		return fleetPods{}, fmt.Errorf("Envoy Service %s of class %s has no ready endpoints: %w", fleet.Service, fleet.Class, errNoEnvoyPods)
	}
	listener := out.Port
	if listener == "" {
		listener = out.TLSPort
	}
	for _, ip := range sets.List(notReady.Difference(out.IPs)) {
		if t.accepts != nil && t.accepts(net.JoinHostPort(ip, listener)) {
			out.IPs.Insert(ip)
			out.NotReady.Insert(ip)
		}
	}
	t.noteIncluded(fleet.Service.String(), notReady, out.NotReady)
	return out, nil
}

// noteIncluded remembers which not ready pods of a fleet the EndpointSlices
// list and which of them must confirm, and calls onChange when only the
// latter changed: a change of the slices restarts rollouts through the
// slice handler already, and a second restart would cost a probe round.
func (t *envoyTargets) noteIncluded(fleet string, listed, included sets.Set[string]) {
	now := notReadySeen{listed: strings.Join(sets.List(listed), ","), included: strings.Join(sets.List(included), ",")}
	t.mu.Lock()
	if t.last == nil {
		t.last = map[string]notReadySeen{}
	}
	before, seen := t.last[fleet]
	t.last[fleet] = now
	t.mu.Unlock()
	if seen && before.listed == now.listed && before.included != now.included && t.onChange != nil {
		go t.onChange()
	}
}

// listenCheck tells whether something accepts TCP connections at an
// address, remembering each answer for a second: every KIngress in flight
// asks about the same few pods on each reconcile.
type listenCheck struct {
	timeout, ttl time.Duration
	mu           sync.Mutex
	seen         map[string]listenSeen
}

type listenSeen struct {
	at time.Time
	ok bool
}

func newListenCheck() *listenCheck {
	return &listenCheck{timeout: 500 * time.Millisecond, ttl: time.Second, seen: map[string]listenSeen{}}
}

// accepts dials addr. A starved Envoy still accepts (the kernel completes
// the handshake); a pod whose Envoy is gone refuses or does not answer.
func (l *listenCheck) accepts(addr string) bool {
	l.mu.Lock()
	s, ok := l.seen[addr]
	l.mu.Unlock()
	if ok && time.Since(s.at) < l.ttl {
		return s.ok
	}
	c, err := net.DialTimeout("tcp", addr, l.timeout)
	if err == nil {
		c.Close()
	}
	l.mu.Lock()
	// Forget what is old, so pods that left do not pile up.
	for a, s := range l.seen {
		if time.Since(s.at) > 10*l.ttl {
			delete(l.seen, a)
		}
	}
	l.seen[addr] = listenSeen{at: time.Now(), ok: err == nil}
	l.mu.Unlock()
	return err == nil
}

func httpPortName(svc *corev1.Service) (string, bool) {
	return portName(svc, 80, "http")
}

func httpsPortName(svc *corev1.Service) (string, bool) {
	return portName(svc, 443, "https")
}

// portName finds a Service port by number, else by name.
func portName(svc *corev1.Service, number int32, name string) (string, bool) {
	for _, p := range svc.Spec.Ports {
		if p.Port == number {
			return p.Name, true
		}
	}
	for _, p := range svc.Spec.Ports {
		if p.Name == name {
			return p.Name, true
		}
	}
	return "", false
}

// ListProbeTargets implements probe.TargetLister: the paths of a round
// (what MakeServing or MakeWarm listed) on the Envoy pods of their class.
// Every host is probed over plain HTTP (its probe routes permit it whatever
// httpOption says); a host that terminates TLS is probed over HTTPS as
// well, with its SNI, since Envoy routes it through a route table of its
// own. A host behind an authorization server is served over HTTPS only, and
// probed so. On a fleet whose Envoy Service has no HTTP port, a TLS host is
// probed over HTTPS only, and a host without TLS cannot be probed: that is
// an error that names it. Every probe to a fleet with use-proxy-protocol
// starts its connection with a PROXY protocol header.
func (t *envoyTargets) ListProbeTargets(ctx context.Context, targets []probe.Path) ([]probe.Target, error) {
	cfg := config.FromContextOrDefaults(ctx).Contour
	fleets := map[string]config.Fleet{}
	pods := map[string]fleetPods{}
	for _, tg := range targets {
		if _, ok := pods[tg.Class]; ok {
			continue
		}
		fleet, ok := cfg.FleetByClass(tg.Class)
		if !ok {
			return nil, fmt.Errorf("class %s has no fleet in config-contour", tg.Class)
		}
		p, err := t.pods(fleet)
		if err != nil {
			return nil, err
		}
		fleets[tg.Class], pods[tg.Class] = fleet, p
	}
	plain, secure := map[string][]*url.URL{}, map[string][]*url.URL{}
	for _, tg := range targets {
		fleet, p := fleets[tg.Class], pods[tg.Class]
		switch {
		case tg.SecureOnly && p.TLSPort == "":
			// With nothing to send its probes to, a host served over
			// HTTPS only would pass for confirmed unasked.
			return nil, fmt.Errorf("the Envoy Service %s has no HTTPS port (443, or one named https), and host %s of the KIngress "+
				"is served over HTTPS only (it is behind an authorization server): add an HTTPS port to the Service: %w", fleet.Service, tg.Host, errNoProbePort)
		case !tg.TLS && p.Port == "":
			return nil, fmt.Errorf("the Envoy Service %s has no HTTP port (80, or one named http), and host %s of the KIngress "+
				"has no certificate, so it is served over plain HTTP only and cannot be probed: give it a certificate "+
				"(spec.tls, or config-contour's default-tls-secret for an external host), or add an HTTP port to the Service: %w",
				fleet.Service, tg.Host, errNoProbePort)
		}
		if !tg.SecureOnly && p.Port != "" {
			plain[tg.Class] = append(plain[tg.Class], probe.URL("http", tg.Host, tg.Prefix))
		}
		if tg.TLS && p.TLSPort != "" {
			secure[tg.Class] = append(secure[tg.Class], probe.URL("https", tg.Host, tg.Prefix))
		}
	}
	classes := sets.List(sets.KeySet(pods))
	out := make([]probe.Target, 0, 2*len(classes))
	for _, class := range classes {
		p, proxyProtocol := pods[class], fleets[class].UseProxyProtocol
		if len(plain[class]) > 0 {
			out = append(out, probe.Target{Class: class, PodIPs: p.IPs, PodPort: p.Port, URLs: plain[class], ProxyProtocol: proxyProtocol})
		}
		if len(secure[class]) > 0 {
			out = append(out, probe.Target{Class: class, PodIPs: p.IPs, PodPort: p.TLSPort, URLs: secure[class], ProxyProtocol: proxyProtocol})
		}
	}
	return out, nil
}
