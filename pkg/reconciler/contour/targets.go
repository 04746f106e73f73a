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
	"knative.dev/networking/pkg/apis/networking/v1alpha1"

	"github.com/hitless/hitless/pkg/config"
	"github.com/hitless/hitless/pkg/probe"
	"github.com/hitless/hitless/pkg/resources"
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
// still sends requests to the old backend, which Knative then deletes (the
// e2e test TestFaultNotReadyEnvoyPodStillServes: 100 of 1,176 requests
// failed so). So a not ready pod must confirm too, as long as it accepts
// connections; one that refuses them serves nobody and cannot hold a
// rollout up.
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

// pods returns the ready Envoy pods of a fleet.
func (t *envoyTargets) pods(fleet config.Fleet) (fleetPods, error) {
	svc, err := t.services.Services(fleet.Service.Namespace).Get(fleet.Service.Name)
	if apierrs.IsNotFound(err) {
		return fleetPods{}, fmt.Errorf("Envoy Service %s of class %s does not exist: %w", fleet.Service, fleet.Class, errNoEnvoyPods)
	} else if err != nil {
		return fleetPods{}, fmt.Errorf("failed to get Envoy Service %s: %w", fleet.Service, err)
	}
	portName, ok := httpPortName(svc)
	if !ok {
		return fleetPods{}, fmt.Errorf("Envoy Service %s has no port 80 or port named http: %w", fleet.Service, errNoEnvoyPods)
	}
	tlsPortName, hasTLS := httpsPortName(svc)
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
		port := ""
		for _, p := range s.Ports {
			if p.Name == nil || p.Port == nil {
				continue
			}
			if *p.Name == portName {
				port = fmt.Sprint(*p.Port)
			}
			if hasTLS && *p.Name == tlsPortName {
				out.TLSPort = fmt.Sprint(*p.Port)
			}
		}
		if port == "" {
			continue
		}
		out.Port = port
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
	for _, ip := range sets.List(notReady.Difference(out.IPs)) {
		if t.accepts != nil && t.accepts(net.JoinHostPort(ip, out.Port)) {
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

// ListProbeTargets implements probe.TargetLister for serving KIngresses
// and for the in-memory warm KIngress of a rollout. Every host is probed
// over plain HTTP (its probe routes permit it whatever httpOption says);
// a host that terminates TLS is probed over HTTPS as well, with its SNI,
// since Envoy routes it through a route table of its own. A host behind
// an authorization server is served over HTTPS only, and probed so. Every
// probe to a fleet with use-proxy-protocol starts its connection with a
// PROXY protocol header.
func (t *envoyTargets) ListProbeTargets(ctx context.Context, ing *v1alpha1.Ingress) ([]probe.Target, error) {
	var targets []resources.ProbeTarget
	var err error
	if _, warm := resources.IsWarmKey(ing.Name); warm {
		targets, err = resources.WarmProbeTargets(ctx, ing)
	} else {
		targets, err = resources.ProbeTargets(ctx, ing)
	}
	if err != nil {
		return nil, err
	}
	cfg := config.FromContextOrDefaults(ctx).Contour
	plain, secure := map[string][]*url.URL{}, map[string][]*url.URL{}
	classSet := sets.New[string]()
	secureOnly := map[string]bool{}
	for _, tg := range targets {
		classSet.Insert(tg.Class)
		if tg.SecureOnly {
			secureOnly[tg.Class] = true
		} else {
			plain[tg.Class] = append(plain[tg.Class], probe.URL("http", tg.Host, tg.Path))
		}
		if tg.TLS {
			secure[tg.Class] = append(secure[tg.Class], probe.URL("https", tg.Host, tg.Path))
		}
	}
	classes := sets.List(classSet)
	out := make([]probe.Target, 0, len(classes))
	for _, class := range classes {
		fleet, ok := cfg.FleetByClass(class)
		if !ok {
			return nil, fmt.Errorf("class %s has no fleet in config-contour", class)
		}
		pods, err := t.pods(fleet)
		if err != nil {
			return nil, err
		}
		if len(plain[class]) > 0 {
			out = append(out, probe.Target{Class: class, PodIPs: pods.IPs, PodPort: pods.Port, URLs: plain[class],
				ProxyProtocol: fleet.UseProxyProtocol})
		}
		if secureOnly[class] && pods.TLSPort == "" {
			// With nothing to send its probes to, a host served over
			// HTTPS only would pass for confirmed unasked.
			return nil, fmt.Errorf("the Envoy Service %s has no HTTPS port (443, or one named https), and a host of the KIngress is served over HTTPS only (it is behind an authorization server)", fleet.Service)
		}
		if len(secure[class]) > 0 && pods.TLSPort != "" {
			out = append(out, probe.Target{Class: class, PodIPs: pods.IPs, PodPort: pods.TLSPort, URLs: secure[class],
				ProxyProtocol: fleet.UseProxyProtocol})
		}
	}
	return out, nil
}
