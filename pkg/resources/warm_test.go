package resources

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	netcfg "knative.dev/networking/pkg/config"
	"knative.dev/networking/pkg/http/header"
	"knative.dev/pkg/kmeta"

	"github.com/hitless/hitless/pkg/config"
	"github.com/hitless/hitless/pkg/probekey"
	"github.com/hitless/hitless/pkg/resources/names"
)

func TestMakeWarm(t *testing.T) {
	ing := kingress()
	blue := Backend{Namespace: ns, Name: "blue", Port: 80}
	green := Backend{Namespace: ns, Name: "green", Port: 81, Protocol: "h2c"}
	local := Backend{Namespace: ns, Name: "green", Port: 81, Protocol: "h2c"}
	keep := ClassBackends{"contour-external": setOf(blue, green), "contour-internal": setOf(local)}
	probe := ClassBackends{"contour-external": setOf(green)}

	got, err := MakeWarm(bg(), ing, keep, probe, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Hash == "" || got.Hash == pendingHash {
		t.Errorf("Hash = %q, want the digest of the warm proxies", got.Hash)
	}
	route := func(b Backend) contourv1.Route {
		s := contourv1.Service{Name: b.Name, Port: int(b.Port), Weight: 100}
		if b.Protocol != "" {
			s.Protocol = ptr.To(b.Protocol)
		}
		return contourv1.Route{
			Conditions: []contourv1.MatchCondition{
				{Prefix: names.BackendPath(b.Key())},
				{Header: &contourv1.HeaderMatchCondition{Name: header.HashKey, Exact: header.HashValueOverride}},
				{Header: &contourv1.HeaderMatchCondition{Name: header.ProbeKey, Exact: header.ProbeValue}},
				// The warm host's name is public; only the prober opens it.
				{Header: &contourv1.HeaderMatchCondition{Name: probekey.Header, Exact: testToken}},
			},
			Services:       []contourv1.Service{s},
			PermitInsecure: true,
			RequestHeadersPolicy: &contourv1.HeadersPolicy{
				Set:    []contourv1.HeaderValue{{Name: header.HashKey, Value: got.Hash}},
				Remove: []string{probekey.Header},
			},
			ResponseHeadersPolicy: servedHashAnswer(got.Hash),
		}
	}
	m := func(class string) metav1.ObjectMeta {
		return metav1.ObjectMeta{
			Namespace:       ns,
			Name:            names.WarmProxy(ing.Name, class),
			Labels:          map[string]string{LabelIngress: ing.Name, LabelRole: RoleWarm},
			Annotations:     map[string]string{AnnotationHash: got.Hash},
			OwnerReferences: []metav1.OwnerReference{*kmeta.NewControllerRef(ing)},
		}
	}
	want := []*contourv1.HTTPProxy{{
		ObjectMeta: m("contour-external"),
		Spec: contourv1.HTTPProxySpec{
			IngressClassName: "contour-external",
			VirtualHost:      &contourv1.VirtualHost{Fqdn: names.WarmHost(ns, ing.Name, "contour-external")},
			Routes:           []contourv1.Route{route(blue), route(green)},
		},
	}, {
		ObjectMeta: m("contour-internal"),
		Spec: contourv1.HTTPProxySpec{
			IngressClassName: "contour-internal",
			VirtualHost:      &contourv1.VirtualHost{Fqdn: names.WarmHost(ns, ing.Name, "contour-internal")},
			Routes:           []contourv1.Route{route(local)},
		},
	}}
	if diff := cmp.Diff(want, got.Proxies); diff != "" {
		t.Errorf("warm proxies (-want, +got):\n%s", diff)
	}

	// Only the new backend is probed, and only on its own class.
	wantTargets := []ProbeTarget{{Class: "contour-external", Host: names.WarmHost(ns, ing.Name, "contour-external"), Path: names.BackendPath(green.Key())}}
	if diff := cmp.Diff(wantTargets, got.Probes); diff != "" {
		t.Errorf("warm probe targets (-want, +got):\n%s", diff)
	}
}

func TestMakeWarmSendsTheHostTheServingRouteRewritesTo(t *testing.T) {
	// The shape of a DomainMapping moving to a new way in: the backends are
	// ExternalName Services naming another ingress, reached only with the
	// rewritten Host. The held one was served behind a rewrite too, and
	// Contour names its cluster by that Host: held without it, the served
	// cluster would go at the switch while Envoy pods still route to it.
	const private = "private.ns.svc.cluster.local"
	mapped := Backend{Namespace: ns, Name: "blue", Port: 80, Protocol: "h2c", HostRewrite: private}
	held := Backend{Namespace: ns, Name: "old", Port: 80, HostRewrite: private}
	plain := Backend{Namespace: ns, Name: "plain", Port: 80}
	keep := ClassBackends{"contour-external": setOf(mapped, held, plain)}

	got, err := MakeWarm(bg(), kingress(), keep, ClassBackends{"contour-external": setOf(mapped)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	hash := contourv1.HeaderValue{Name: header.HashKey, Value: got.Hash}
	host := contourv1.HeaderValue{Name: "Host", Value: private}
	want := []*contourv1.HeadersPolicy{ // in key order: blue, old, plain
		{Set: []contourv1.HeaderValue{hash, host}, Remove: []string{probekey.Header}},
		{Set: []contourv1.HeaderValue{hash, host}, Remove: []string{probekey.Header}},
		{Set: []contourv1.HeaderValue{hash}, Remove: []string{probekey.Header}},
	}
	var policies []*contourv1.HeadersPolicy
	for _, r := range got.Proxies[0].Spec.Routes {
		policies = append(policies, r.RequestHeadersPolicy)
	}
	if diff := cmp.Diff(want, policies); diff != "" {
		t.Errorf("warm route header policies (-want, +got):\n%s", diff)
	}
	// Read back as the next reconcile observes it, the warm proxy holds
	// exactly the clusters it was asked to.
	if diff := cmp.Diff(SortedBackends(keep["contour-external"]), SortedBackends(BackendsOfProxy(got.Proxies[0]))); diff != "" {
		t.Errorf("backends of the warm proxy (-want, +got):\n%s", diff)
	}

	// The rewrite is part of what the warm hash covers.
	unmapped := mapped
	unmapped.HostRewrite = ""
	other, err := MakeWarm(bg(), kingress(), ClassBackends{"contour-external": setOf(unmapped, held, plain)}, ClassBackends{"contour-external": setOf(unmapped)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if other.Hash == got.Hash {
		t.Error("a rewriteHost on the warm route kept the warm hash")
	}
}

func TestWarmHashChangesWithTheBackendSet(t *testing.T) {
	ing := kingress()
	blue := Backend{Namespace: ns, Name: "blue", Port: 80}
	a, _ := MakeWarm(bg(), ing, ClassBackends{"contour-external": setOf(blue)}, nil, nil)
	b, _ := MakeWarm(bg(), ing, ClassBackends{"contour-external": setOf(blue, Backend{Namespace: ns, Name: "blue", Port: 80, Protocol: "h2c"})}, nil, nil)
	c, _ := MakeWarm(bg(), ing, ClassBackends{"contour-external": setOf(blue)}, nil, nil)
	if a.Hash == b.Hash {
		t.Error("adding a backend (same port, other protocol) kept the warm hash")
	}
	if a.Hash != c.Hash {
		t.Error("the same backend set gave two hashes")
	}
}

// TestWarmRoutesBuildTheServedClusters: what makes Contour's cluster of a
// backend (Service, port, protocol, upstream validation) is the same on the
// warm route as on the serving route, with system-internal-tls too, where
// the protocol and the validation come from config-network rather than the
// Service; otherwise warming would warm another cluster than the one the
// switch routes to.
func TestWarmRoutesBuildTheServedClusters(t *testing.T) {
	for _, tls := range []string{"disabled", "enabled"} {
		network, err := netcfg.NewConfigFromMap(map[string]string{"system-internal-tls": tls})
		if err != nil {
			t.Fatal(err)
		}
		ctx := config.ToContext(bg(), &config.Config{Contour: config.DefaultContour(), Network: network})
		ing := kingress(func(ing *netv1alpha1.Ingress) {
			p := &ing.Spec.Rules[0].HTTP.Paths[0]
			p.Splits = append(p.Splits, netv1alpha1.IngressBackendSplit{
				IngressBackend: netv1alpha1.IngressBackend{ServiceNamespace: ns, ServiceName: "grpc", ServicePort: intstr.FromInt(81)}, Percent: 50})
			p.Splits[0].Percent = 50
		})
		s, err := MakeServing(ctx, ing, resolverOf(svc("blue"), svc("grpc", corev1.ServicePort{Name: "http2", Port: 81})))
		if err != nil {
			t.Fatal(err)
		}
		w, err := MakeWarm(ctx, ing, s.Backends, s.Backends, nil)
		if err != nil {
			t.Fatal(err)
		}
		cluster := func(svc contourv1.Service) contourv1.Service {
			return contourv1.Service{Name: svc.Name, Port: svc.Port, Protocol: svc.Protocol, UpstreamValidation: svc.UpstreamValidation}
		}
		served := map[string]contourv1.Service{}
		for _, svc := range s.Proxies[0].Spec.Routes[0].Services {
			served[svc.Name] = cluster(svc)
		}
		warmed := map[string]contourv1.Service{}
		for _, r := range w.Proxies[0].Spec.Routes {
			for _, svc := range r.Services {
				warmed[svc.Name] = cluster(svc)
			}
		}
		if diff := cmp.Diff(served, warmed); diff != "" {
			t.Errorf("system-internal-tls %s: clusters of the serving route (-) and of the warm routes (+):\n%s", tls, diff)
		}
		if tls == "enabled" && served["blue"].UpstreamValidation == nil {
			t.Errorf("system-internal-tls enabled: the serving route does not validate its backend: %+v", served["blue"])
		}
	}
}

// TestWarmOnHTTPSOnlyClass: on a class whose Envoy Service has no HTTP port,
// the warm proxy terminates TLS with a certificate the KIngress uses on that
// class, else config-contour's default one, and its probe targets are HTTPS
// only; on any other class it stays plain, default certificate or not.
func TestWarmOnHTTPSOnlyClass(t *testing.T) {
	blue := Backend{Namespace: ns, Name: "blue", Port: 80}
	keep := ClassBackends{"contour-external": setOf(blue)}
	httpsOnly := sets.New("contour-external")
	withDefault := config.DefaultContour()
	withDefault.DefaultTLSSecret = &types.NamespacedName{Namespace: "certs", Name: "wildcard"}
	own := kingress(func(ing *netv1alpha1.Ingress) {
		ing.Spec.TLS = []netv1alpha1.IngressTLS{{Hosts: []string{"hello.example.com"}, SecretNamespace: ns, SecretName: "hello-cert"}}
	})

	for _, tc := range []struct {
		name      string
		cfg       *config.Contour
		ing       *netv1alpha1.Ingress
		httpsOnly sets.Set[string]
		want      string // the warm proxy's secret, "" for no TLS
	}{
		{name: "own certificate", cfg: config.DefaultContour(), ing: own, httpsOnly: httpsOnly, want: "hello-cert"},
		{name: "own certificate before the default", cfg: withDefault, ing: own, httpsOnly: httpsOnly, want: "hello-cert"},
		{name: "default certificate", cfg: withDefault, ing: kingress(), httpsOnly: httpsOnly, want: "certs/wildcard"},
		{name: "a class with an HTTP port stays plain", cfg: withDefault, ing: own, httpsOnly: nil, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := config.ToContext(bg(), &config.Config{Contour: tc.cfg})
			w, err := MakeWarm(ctx, tc.ing, keep, keep, tc.httpsOnly)
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if tls := w.Proxies[0].Spec.VirtualHost.TLS; tls != nil {
				got = tls.SecretName
			}
			if got != tc.want {
				t.Errorf("warm proxy secret = %q, want %q", got, tc.want)
			}
			targets := w.Probes
			if len(targets) != 1 || targets[0].TLS != (tc.want != "") || targets[0].SecureOnly != (tc.want != "") {
				t.Errorf("warm probe targets = %+v, want one, HTTPS only = %v", targets, tc.want != "")
			}
			plain, err := MakeWarm(ctx, tc.ing, keep, keep, nil)
			if err != nil {
				t.Fatal(err)
			}
			if (plain.Hash != w.Hash) != (tc.want != "") {
				t.Errorf("warm hash changed = %v, want %v: TLS on the warm proxy is part of what its hash covers", plain.Hash != w.Hash, tc.want != "")
			}
		})
	}

	if _, err := MakeWarm(bg(), kingress(), keep, keep, httpsOnly); err == nil {
		t.Error("MakeWarm on an HTTPS-only class with no certificate at all = nil error, want one saying what to change")
	}
}
