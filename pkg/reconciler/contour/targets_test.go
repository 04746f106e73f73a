package contour

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1listers "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"

	"github.com/hitless/hitless/pkg/config"
	"github.com/hitless/hitless/pkg/probe"
	"github.com/hitless/hitless/pkg/probekey"
	"github.com/hitless/hitless/pkg/resources"
)

// fleetWith builds the envoyTargets of one fleet whose EndpointSlice lists
// the given pods (IP -> ready) on port.
func fleetWith(t *testing.T, port int, pods map[string]bool) (*envoyTargets, config.Fleet) {
	t.Helper()
	return fleetWithTLS(t, port, 0, pods)
}

// fleetWithTLS is fleetWith whose Envoy Service also has an HTTPS port
// (443, to the pods' tlsPort) unless tlsPort is 0, and no HTTP port when
// port is 0.
func fleetWithTLS(t *testing.T, port, tlsPort int, pods map[string]bool) (*envoyTargets, config.Fleet) {
	t.Helper()
	svcs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	slices := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "contour-external", Name: "envoy"},
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "contour-external", Name: "envoy-1", Labels: map[string]string{discoveryv1.LabelServiceName: "envoy"}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	if port != 0 {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "http", Port: 80})
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{Name: ptr.To("http"), Port: ptr.To(int32(port))})
	}
	if tlsPort != 0 {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "https", Port: 443})
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{Name: ptr.To("https"), Port: ptr.To(int32(tlsPort))})
	}
	if err := svcs.Add(svc); err != nil {
		t.Fatal(err)
	}
	for ip, ready := range pods {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}})
	}
	if err := slices.Add(slice); err != nil {
		t.Fatal(err)
	}
	lc := newListenCheck()
	lc.ttl = 0 // every call dials: the table changes listeners between calls
	return &envoyTargets{
			services:       corev1listers.NewServiceLister(svcs),
			endpointSlices: discoverylisters.NewEndpointSliceLister(slices),
			accepts:        lc.accepts,
		}, config.Fleet{Class: "contour-external",
			Service: types.NamespacedName{Namespace: "contour-external", Name: "envoy"}}
}

// TestNotReadyEnvoyPodsThatStillServeMustConfirm runs against real
// listeners on loopback: 127.0.0.1 accepts on the port, 127.0.0.2 refuses.
func TestNotReadyEnvoyPodsThatStillServeMustConfirm(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	const accepting, refusing, ready = "127.0.0.1", "127.0.0.2", "127.0.0.3"

	tests := []struct {
		name         string
		pods         map[string]bool
		want         []string
		wantNotReady []string
		wantErr      error
	}{{
		name: "ready pods only",
		pods: map[string]bool{ready: true},
		want: []string{ready},
	}, {
		name:         "a not ready pod that accepts connections still serves its clients: it must confirm",
		pods:         map[string]bool{ready: true, accepting: false},
		want:         []string{accepting, ready},
		wantNotReady: []string{accepting},
	}, {
		name: "a not ready pod that refuses connections serves nobody: left out",
		pods: map[string]bool{ready: true, refusing: false},
		want: []string{ready},
	}, {
		name:    "no ready pod: nobody to confirm, even if a not ready one accepts",
		pods:    map[string]bool{accepting: false},
		wantErr: errNoEnvoyPods,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			targets, fleet := fleetWith(t, port, tc.pods)
			got, err := targets.pods(fleet)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("pods() error = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr != nil {
				return
			}
			if !got.IPs.Equal(sets.New(tc.want...)) || !got.NotReady.Equal(sets.New(tc.wantNotReady...)) {
				t.Errorf("pods() = %v (not ready %v), want %v (not ready %v)", sets.List(got.IPs), sets.List(got.NotReady), tc.want, tc.wantNotReady)
			}
			if got.Port != strconv.Itoa(port) {
				t.Errorf("port = %s, want %d", got.Port, port)
			}
		})
	}
}

// TestNotReadyEnvoyPodThatStopsAcceptingIsForgotten: a not ready pod whose
// Envoy goes away changes no EndpointSlice; the targets notice it on the
// next look and say so, so the rollouts waiting for it restart their rounds.
func TestNotReadyEnvoyPodThatStopsAcceptingIsForgotten(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	targets, fleet := fleetWith(t, port, map[string]bool{"127.0.0.3": true, "127.0.0.1": false})
	changed := make(chan struct{}, 4)
	targets.onChange = func() { changed <- struct{}{} }
	var calls atomic.Int32
	check := func(wantIncluded bool) {
		t.Helper()
		calls.Add(1)
		got, err := targets.pods(fleet)
		if err != nil {
			t.Fatal(err)
		}
		if got.IPs.Has("127.0.0.1") != wantIncluded {
			t.Fatalf("call %d: 127.0.0.1 included = %v, want %v", calls.Load(), !wantIncluded, wantIncluded)
		}
	}
	check(true)
	check(true)
	select {
	case <-changed:
		t.Fatal("onChange called while nothing changed")
	default:
	}
	l.Close()
	check(false)
	<-changed // a goroutine of its own; the test times out if it never comes
}

// TestAuthorizedHostsAreProbedOverHTTPSOnly: a host behind an authorization
// server answers plain HTTP with a redirect, so only its HTTPS URL is
// probed; a fleet without an HTTPS port could confirm nothing of it and
// says so instead of passing it unasked.
func TestAuthorizedHostsAreProbedOverHTTPSOnly(t *testing.T) {
	ing := helloWithCert()
	ing.Annotations = map[string]string{resources.AnnotationExtensionService: "authz"}
	ctx := context.Background()

	targets, _ := fleetWithTLS(t, 8080, 8443, map[string]bool{"127.0.0.3": true})
	got, err := targets.ListProbeTargets(ctx, servingPaths(t, ctx, ing))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].PodPort != "8443" || len(got[0].URLs) != 1 || got[0].URLs[0].String() != "https://hello.example.com/" {
		t.Errorf("ListProbeTargets = %+v, want one HTTPS target on pod port 8443", got)
	}

	targets, _ = fleetWith(t, 8080, map[string]bool{"127.0.0.3": true})
	if got, err := targets.ListProbeTargets(ctx, servingPaths(t, ctx, ing)); err == nil || !strings.Contains(err.Error(), "no HTTPS port") {
		t.Errorf("ListProbeTargets without an HTTPS port = %+v, %v; want an error naming the missing HTTPS port", got, err)
	}
}

// TestHTTPSOnlyEnvoyService: an Envoy Service with port 443 alone (an
// HTTPS-only load balancer, net-contour#712) is probed over HTTPS: a TLS
// host there, and a warm proxy, which then terminates TLS; a host without
// a certificate cannot be probed and the error names it and the Service.
func TestHTTPSOnlyEnvoyService(t *testing.T) {
	rule := func(host string) v1alpha1.IngressRule {
		return v1alpha1.IngressRule{
			Hosts:      []string{host},
			Visibility: v1alpha1.IngressVisibilityExternalIP,
			HTTP: &v1alpha1.HTTPIngressRuleValue{Paths: []v1alpha1.HTTPIngressPath{{
				Splits: []v1alpha1.IngressBackendSplit{{IngressBackend: v1alpha1.IngressBackend{
					ServiceNamespace: "ns", ServiceName: "blue", ServicePort: intstr.FromInt(80)}, Percent: 100}},
			}}},
		}
	}
	secured := &v1alpha1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "hello"},
		Spec: v1alpha1.IngressSpec{
			Rules: []v1alpha1.IngressRule{rule("hello.example.com")},
			TLS:   []v1alpha1.IngressTLS{{Hosts: []string{"hello.example.com"}, SecretName: "cert"}},
		},
	}
	ctx := probekey.WithKey(context.Background(), testKey)
	targets, fleet := fleetWithTLS(t, 0, 8443, map[string]bool{"127.0.0.3": true})
	cfg := config.DefaultContour()

	if got := targets.httpsOnly(cfg, []string{fleet.Class}); !got.Has(fleet.Class) {
		t.Errorf("httpsOnly = %v, want %s in it", sets.List(got), fleet.Class)
	}
	got, err := targets.ListProbeTargets(ctx, servingPaths(t, ctx, secured))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].PodPort != "8443" || len(got[0].URLs) != 1 || got[0].URLs[0].String() != "https://hello.example.com/" {
		t.Errorf("ListProbeTargets = %+v, want one HTTPS target on pod port 8443", got)
	}

	blue := resources.Backend{Namespace: "ns", Name: "blue", Port: 80, Protocol: "http"}
	warm, err := resources.MakeWarm(ctx, secured, resources.ClassBackends{fleet.Class: sets.New(blue)},
		resources.ClassBackends{fleet.Class: sets.New(blue)}, targets.httpsOnly(cfg, []string{fleet.Class}))
	if err != nil {
		t.Fatal(err)
	}
	if tls := warm.Proxies[0].Spec.VirtualHost.TLS; tls == nil || tls.SecretName != "cert" {
		t.Errorf("warm proxy TLS = %+v, want the KIngress's own certificate, cert", tls)
	}
	got, err = targets.ListProbeTargets(ctx, roundOf(secured, true, warm.Hash, warm.Probes).Paths)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].PodPort != "8443" || len(got[0].URLs) != 1 || got[0].URLs[0].Scheme != "https" {
		t.Errorf("ListProbeTargets(warm) = %+v, want one HTTPS target on pod port 8443", got)
	}

	plain := secured.DeepCopy()
	plain.Spec.Rules = append(plain.Spec.Rules, rule("plain.example.com"))
	_, err = targets.ListProbeTargets(ctx, servingPaths(t, ctx, plain))
	if !errors.Is(err, errNoProbePort) || !strings.Contains(err.Error(), "plain.example.com") || !strings.Contains(err.Error(), "contour-external/envoy") {
		t.Errorf("ListProbeTargets with a host without TLS = %v, want errNoProbePort naming the host and the Service", err)
	}

	plain.Spec.TLS = nil
	if _, err := resources.MakeWarm(ctx, plain, resources.ClassBackends{fleet.Class: sets.New(blue)}, nil, sets.New(fleet.Class)); err == nil ||
		!strings.Contains(err.Error(), "no HTTP port") {
		t.Errorf("MakeWarm on an HTTPS-only class without a certificate = %v, want an error saying what to change", err)
	}
}

// TestProxyProtocolFleetTargetsSendTheHeader: a fleet whose visibility sets
// use-proxy-protocol is probed with the PROXY header over both its
// listeners; one without the key is not.
func TestProxyProtocolFleetTargetsSendTheHeader(t *testing.T) {
	ing := helloWithCert()
	for _, proxy := range []bool{true, false} {
		t.Run(strconv.FormatBool(proxy), func(t *testing.T) {
			targets, fleet := fleetWithTLS(t, 8080, 8443, map[string]bool{"127.0.0.3": true})
			fleet.UseProxyProtocol = proxy
			cfg := config.FromContextOrDefaults(context.Background())
			cfg.Contour.Visibility[v1alpha1.IngressVisibilityExternalIP] = fleet
			got, err := targets.ListProbeTargets(config.ToContext(context.Background(), cfg), servingPaths(t, config.ToContext(context.Background(), cfg), ing))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 {
				t.Fatalf("ListProbeTargets = %+v, want an HTTP and an HTTPS target", got)
			}
			for _, tg := range got {
				if tg.ProxyProtocol != proxy {
					t.Errorf("target on pod port %s: ProxyProtocol = %v, want %v", tg.PodPort, tg.ProxyProtocol, proxy)
				}
			}
		})
	}
}

// servingPaths is what the prober is given to confirm of a KIngress's
// serving proxies.
func servingPaths(t *testing.T, ctx context.Context, ing *v1alpha1.Ingress) []probe.Path {
	t.Helper()
	ts, err := resources.ProbeTargets(ctx, ing)
	if err != nil {
		t.Fatal(err)
	}
	return roundOf(ing, false, "", ts).Paths
}

// helloWithCert is a KIngress of one external host with a certificate.
func helloWithCert() *v1alpha1.Ingress {
	return &v1alpha1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "hello"},
		Spec: v1alpha1.IngressSpec{
			Rules: []v1alpha1.IngressRule{{
				Hosts:      []string{"hello.example.com"},
				Visibility: v1alpha1.IngressVisibilityExternalIP,
				HTTP: &v1alpha1.HTTPIngressRuleValue{Paths: []v1alpha1.HTTPIngressPath{{
					Splits: []v1alpha1.IngressBackendSplit{{IngressBackend: v1alpha1.IngressBackend{
						ServiceName: "blue", ServicePort: intstr.FromInt(80)}, Percent: 100}},
				}}},
			}},
			TLS: []v1alpha1.IngressTLS{{Hosts: []string{"hello.example.com"}, SecretName: "cert"}},
		},
	}
}
