// Package servingrows runs hitless's serving builder on the KIngresses and
// revision Services that Knative Serving's own code makes, at the release
// go.mod pins, instead of on objects shaped as we believe Serving shapes
// them: the Route's traffic, visibility, certificates and KIngress come from
// Serving's route reconciler's builders, each revision's public Service from
// its PodAutoscaler, SKS and SKS Service builders. Each row asserts what an
// operator meets: hosts, certificates, redirects, paths and the upstream
// protocol of every backend.
package servingrows

import (
	"bytes"
	"context"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"knative.dev/networking/pkg/apis/networking"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	netcfg "knative.dev/networking/pkg/config"
	"knative.dev/networking/pkg/http/header"
	"knative.dev/pkg/apis"
	logtesting "knative.dev/pkg/logging/testing"
	"knative.dev/pkg/ptr"
	servingcfg "knative.dev/serving/pkg/apis/config"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servinglisters "knative.dev/serving/pkg/client/listers/serving/v1"
	asresources "knative.dev/serving/pkg/reconciler/autoscaling/resources"
	revresources "knative.dev/serving/pkg/reconciler/revision/resources"
	routecfg "knative.dev/serving/pkg/reconciler/route/config"
	"knative.dev/serving/pkg/reconciler/route/domains"
	routeresources "knative.dev/serving/pkg/reconciler/route/resources"
	"knative.dev/serving/pkg/reconciler/route/traffic"
	"knative.dev/serving/pkg/reconciler/route/visibility"
	sksresources "knative.dev/serving/pkg/reconciler/serverlessservice/resources"
	servingtesting "knative.dev/serving/pkg/testing/v1"

	"github.com/hitless/hitless/pkg/config"
	"github.com/hitless/hitless/pkg/probekey"
	"github.com/hitless/hitless/pkg/resources"

	// Sets SYSTEM_NAMESPACE, where Serving's routing CA lives.
	_ "knative.dev/pkg/system/testing"
)

const (
	ns = "ns"
	// ingressClass is the KIngress class hitless serves, as config-network's
	// ingress-class names it.
	ingressClass = "contour.ingress.networking.knative.dev"
	// routeDomain is config-domain's default domain in every row.
	routeDomain = "example.com"
	// solver is cert-manager's HTTP-01 solver Service. cert-manager, not
	// Serving, makes it, so it is written out: port 8089 named http.
	solver     = "cm-acme-http-solver-x7k2p"
	solverPort = 8089
	token      = "tok3n"
)

// acme is how the certificates of a Route's external hosts stand when
// Serving's route reconciler builds its KIngress (external-domain-tls only).
type acme int

const (
	// certsReady: issued; the hosts get TLS and no challenge.
	certsReady acme = iota
	// certsIssuing: not yet issued, one HTTP-01 challenge per host and no
	// TLS yet.
	certsIssuing
	// certsRenewing: issued and renewing; the hosts keep their TLS and
	// get a challenge each, as Serving hands both over while a ready
	// certificate renews.
	certsRenewing
)

// revision is a ready Revision of the row's Route.
type revision struct {
	name, config string
	// h2c: the container's first port is named h2c, which makes Serving
	// serve the Revision over cleartext HTTP/2 (Revision.GetProtocol).
	h2c bool
}

// row is a Route as a user writes it and the config Serving runs with; the
// KIngress and the revisions' public Services come from Serving's builders.
type row struct {
	name string
	// network is config-network's data, read by Serving and hitless alike;
	// features config-features' (Serving's).
	network, features map[string]string
	revisions         []revision
	route             *servingv1.Route
	certs             acme
	// wantHTTPOption is the httpOption Serving writes on the KIngress, the
	// input hitless's redirect decision starts from.
	wantHTTPOption netv1alpha1.HTTPOption
	want           []vhost
}

// vhost is what an operator sees of one serving HTTPProxy: where it is
// served, with which certificate, and its user routes (the probe routes,
// which match K-Network-Hash, are hitless's own business and left out).
type vhost struct {
	Class, Fqdn string
	// TLS is the certificate Secret the host terminates TLS with.
	TLS    string
	Routes []route
}

type route struct {
	Prefix string
	// Headers are the route's exact header matches.
	Headers map[string]string
	// Set are the headers the route sets on the request.
	Set map[string]string
	// PermitInsecure tells that plain HTTP is served, not redirected to
	// HTTPS, on a host with TLS.
	PermitInsecure bool
	Backends       []backend
}

// backend is one Service of a route: Contour's cluster is made of these.
type backend struct {
	Name     string
	Port     int
	Protocol string
	Weight   int64
}

// rev is the backend of a Revision's public Service, as every row's routes
// name it: its port and upstream protocol depend on the row.
func rev(name string, port int, protocol string, weight int64) backend {
	return backend{Name: name, Port: port, Protocol: protocol, Weight: weight}
}

// local is the three names a cluster-local host of Route name (tag-prefixed
// if tagged) is served under, each with the same routes.
func local(name, tls string, routes ...route) []vhost {
	var out []vhost
	for _, h := range []string{name + "." + ns, name + "." + ns + ".svc", name + "." + ns + ".svc.cluster.local"} {
		out = append(out, vhost{Class: "contour-internal", Fqdn: h, TLS: tls, Routes: routes})
	}
	return out
}

func external(name, tls string, routes ...route) vhost {
	return vhost{Class: "contour-external", Fqdn: name + "." + ns + "." + routeDomain, TLS: tls, Routes: routes}
}

func TestHitlessServesWhatServingMakes(t *testing.T) {
	rows := []row{{
		name:           "an HTTP/1 revision without TLS is served over plain HTTP/1.1 on its external host and three cluster-local names",
		revisions:      []revision{{name: "hello-00001", config: "hello"}},
		route:          servingtesting.Route(ns, "hello", servingtesting.WithConfigTarget("hello")),
		wantHTTPOption: netv1alpha1.HTTPOptionEnabled,
		want: append([]vhost{
			external("hello", "", route{Prefix: "/", Backends: []backend{rev("hello-00001", 80, "", 100)}}),
		}, local("hello", "", route{Prefix: "/", Backends: []backend{rev("hello-00001", 80, "", 100)}})...),
	}, {
		name:           "an HTTP/2 revision without TLS is reached over h2c on port 81 (http2) of its Service",
		revisions:      []revision{{name: "grpc-00001", config: "grpc", h2c: true}},
		route:          servingtesting.Route(ns, "grpc", servingtesting.WithConfigTarget("grpc")),
		wantHTTPOption: netv1alpha1.HTTPOptionEnabled,
		want: append([]vhost{
			external("grpc", "", route{Prefix: "/", Backends: []backend{rev("grpc-00001", 81, "h2c", 100)}}),
		}, local("grpc", "", route{Prefix: "/", Backends: []backend{rev("grpc-00001", 81, "h2c", 100)}})...),
	}, {
		name:           "under system-internal-tls an HTTP/2 revision is reached on port 443 over h2 (TLS and HTTP/2), not tls (HTTP/1.1)",
		network:        map[string]string{netcfg.SystemInternalTLSKey: "enabled"},
		revisions:      []revision{{name: "grpc-00001", config: "grpc", h2c: true}},
		route:          servingtesting.Route(ns, "grpc", servingtesting.WithConfigTarget("grpc")),
		wantHTTPOption: netv1alpha1.HTTPOptionEnabled,
		want: append([]vhost{
			external("grpc", "", route{Prefix: "/", Backends: []backend{rev("grpc-00001", 443, "h2", 100)}}),
		}, local("grpc", "", route{Prefix: "/", Backends: []backend{rev("grpc-00001", 443, "h2", 100)}})...),
	}, {
		name:           "under system-internal-tls an HTTP/1 revision is reached on port 443 over tls",
		network:        map[string]string{netcfg.SystemInternalTLSKey: "enabled"},
		revisions:      []revision{{name: "hello-00001", config: "hello"}},
		route:          servingtesting.Route(ns, "hello", servingtesting.WithConfigTarget("hello")),
		wantHTTPOption: netv1alpha1.HTTPOptionEnabled,
		want: append([]vhost{
			external("hello", "", route{Prefix: "/", Backends: []backend{rev("hello-00001", 443, "tls", 100)}}),
		}, local("hello", "", route{Prefix: "/", Backends: []backend{rev("hello-00001", 443, "tls", 100)}})...),
	}, {
		name: "with external and cluster-local TLS and http-protocol Redirected, the external host redirects plain HTTP and the cluster-local names serve it (net-contour#848)",
		network: map[string]string{
			netcfg.ExternalDomainTLSKey:     "enabled",
			netcfg.ClusterLocalDomainTLSKey: "enabled",
			netcfg.HTTPProtocolKey:          "Redirected",
		},
		revisions:      []revision{{name: "hello-00001", config: "hello"}},
		route:          servingtesting.Route(ns, "hello", servingtesting.WithConfigTarget("hello"), servingtesting.WithRouteUID("route-uid")),
		wantHTTPOption: netv1alpha1.HTTPOptionRedirected,
		want: append([]vhost{
			external("hello", "route-route-uid", route{Prefix: "/", PermitInsecure: false, Backends: []backend{rev("hello-00001", 80, "", 100)}}),
		}, local("hello", "route-route-uid-local", route{Prefix: "/", PermitInsecure: true, Backends: []backend{rev("hello-00001", 80, "", 100)}})...),
	}, {
		name: "with external TLS and an empty httpOption (what Serving writes for http-protocol Disabled), the external host redirects plain HTTP as net-contour does",
		network: map[string]string{
			netcfg.ExternalDomainTLSKey: "enabled",
			netcfg.HTTPProtocolKey:      "Disabled",
		},
		revisions:      []revision{{name: "hello-00001", config: "hello"}},
		route:          servingtesting.Route(ns, "hello", servingtesting.WithConfigTarget("hello"), servingtesting.WithRouteUID("route-uid")),
		wantHTTPOption: "",
		want: append([]vhost{
			external("hello", "route-route-uid", route{Prefix: "/", PermitInsecure: false, Backends: []backend{rev("hello-00001", 80, "", 100)}}),
		}, local("hello", "", route{Prefix: "/", Backends: []backend{rev("hello-00001", 80, "", 100)}})...),
	}, {
		name: "with external TLS and http-protocol Enabled, the external host serves plain HTTP as well as HTTPS",
		network: map[string]string{
			netcfg.ExternalDomainTLSKey: "enabled",
		},
		revisions:      []revision{{name: "hello-00001", config: "hello"}},
		route:          servingtesting.Route(ns, "hello", servingtesting.WithConfigTarget("hello"), servingtesting.WithRouteUID("route-uid")),
		wantHTTPOption: netv1alpha1.HTTPOptionEnabled,
		want: append([]vhost{
			external("hello", "route-route-uid", route{Prefix: "/", PermitInsecure: true, Backends: []backend{rev("hello-00001", 80, "", 100)}}),
		}, local("hello", "", route{Prefix: "/", Backends: []backend{rev("hello-00001", 80, "", 100)}})...),
	}, {
		name:     "a tagged revision gets hosts of its own, and with tag-header-based-routing the main hosts route Knative-Serving-Tag to it ahead of the default route",
		features: map[string]string{"tag-header-based-routing": "enabled"},
		revisions: []revision{
			{name: "hello-00001", config: "hello"},
			{name: "hello-00002", config: "hello"},
		},
		route: servingtesting.Route(ns, "hello", servingtesting.WithSpecTraffic(
			servingv1.TrafficTarget{RevisionName: "hello-00002", Percent: ptr.Int64(100)},
			servingv1.TrafficTarget{RevisionName: "hello-00001", Tag: "canary"},
		)),
		wantHTTPOption: netv1alpha1.HTTPOptionEnabled,
		want: func() []vhost {
			main := []route{
				{Prefix: "/", Headers: map[string]string{"Knative-Serving-Tag": "canary"}, Backends: []backend{rev("hello-00001", 80, "", 100)}},
				{Prefix: "/", Set: map[string]string{"Knative-Serving-Default-Route": "true"}, Backends: []backend{rev("hello-00002", 80, "", 100)}},
			}
			canary := route{Prefix: "/", Set: map[string]string{"Knative-Serving-Tag": "canary"}, Backends: []backend{rev("hello-00001", 80, "", 100)}}
			out := []vhost{external("canary-hello", "", canary), external("hello", "", main...)}
			out = append(out, local("canary-hello", "", canary)...)
			return append(out, local("hello", "", main...)...)
		}(),
	}, {
		name: "a 90/10 split between two revisions is one route weighting both Services",
		revisions: []revision{
			{name: "hello-00001", config: "hello"},
			{name: "hello-00002", config: "hello"},
		},
		route: servingtesting.Route(ns, "hello", servingtesting.WithSpecTraffic(
			servingv1.TrafficTarget{RevisionName: "hello-00001", Percent: ptr.Int64(90)},
			servingv1.TrafficTarget{RevisionName: "hello-00002", Percent: ptr.Int64(10)},
		)),
		wantHTTPOption: netv1alpha1.HTTPOptionEnabled,
		want: func() []vhost {
			split := route{Prefix: "/", Backends: []backend{rev("hello-00001", 80, "", 90), rev("hello-00002", 80, "", 10)}}
			return append([]vhost{external("hello", "", split)}, local("hello", "", split)...)
		}(),
	}, {
		name:      "a Route labelled cluster-local is served by the internal fleet alone, on its three names",
		revisions: []revision{{name: "hello-00001", config: "hello"}},
		route: servingtesting.Route(ns, "hello", servingtesting.WithConfigTarget("hello"),
			servingtesting.WithRouteLabel(map[string]string{networking.VisibilityLabelKey: serving.VisibilityClusterLocal})),
		wantHTTPOption: netv1alpha1.HTTPOptionEnabled,
		want:           local("hello", "", route{Prefix: "/", Backends: []backend{rev("hello-00001", 80, "", 100)}}),
	}, {
		name: "an HTTP-01 challenge of a certificate being issued is served over plain HTTP/1.1 to the solver, ahead of the revision's route",
		network: map[string]string{
			netcfg.ExternalDomainTLSKey: "enabled",
			netcfg.HTTPProtocolKey:      "Redirected",
			netcfg.SystemInternalTLSKey: "enabled",
		},
		revisions:      []revision{{name: "hello-00001", config: "hello"}},
		route:          servingtesting.Route(ns, "hello", servingtesting.WithConfigTarget("hello"), servingtesting.WithRouteUID("route-uid")),
		certs:          certsIssuing,
		wantHTTPOption: netv1alpha1.HTTPOptionRedirected,
		want: append([]vhost{
			external("hello", "",
				route{Prefix: "/.well-known/acme-challenge/" + token, Backends: []backend{{Name: solver, Port: solverPort, Weight: 100}}},
				route{Prefix: "/", Backends: []backend{rev("hello-00001", 443, "tls", 100)}}),
		}, local("hello", "", route{Prefix: "/", Backends: []backend{rev("hello-00001", 443, "tls", 100)}})...),
	}, {
		name: "a renewal's HTTP-01 challenge on a host that keeps its TLS and redirects is served over plain HTTP to the solver; the revision's route still redirects",
		network: map[string]string{
			netcfg.ExternalDomainTLSKey: "enabled",
			netcfg.HTTPProtocolKey:      "Redirected",
		},
		revisions:      []revision{{name: "hello-00001", config: "hello"}},
		route:          servingtesting.Route(ns, "hello", servingtesting.WithConfigTarget("hello"), servingtesting.WithRouteUID("route-uid")),
		certs:          certsRenewing,
		wantHTTPOption: netv1alpha1.HTTPOptionRedirected,
		want: append([]vhost{
			external("hello", "route-route-uid",
				route{Prefix: "/.well-known/acme-challenge/" + token, PermitInsecure: true, Backends: []backend{{Name: solver, Port: solverPort, Weight: 100}}},
				route{Prefix: "/", Backends: []backend{rev("hello-00001", 80, "", 100)}}),
		}, local("hello", "", route{Prefix: "/", Backends: []backend{rev("hello-00001", 80, "", 100)}})...),
	}}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			ing, svcs := fromServing(t, r)
			if ing.Spec.HTTPOption != r.wantHTTPOption {
				t.Errorf("Serving's KIngress has httpOption %q, want %q", ing.Spec.HTTPOption, r.wantHTTPOption)
			}
			network, err := netcfg.NewConfigFromMap(r.network)
			if err != nil {
				t.Fatal(err)
			}
			ctx := probekey.WithKey(context.Background(), probekey.Key(bytes.Repeat([]byte{7}, probekey.Size)))
			ctx = config.ToContext(ctx, &config.Config{Contour: config.DefaultContour(), Network: network})
			got, err := resources.MakeServing(ctx, ing, resolverOf(svcs))
			if err != nil {
				t.Fatalf("MakeServing() = %v", err)
			}
			if diff := cmp.Diff(r.want, vhostsOf(got.Proxies)); diff != "" {
				t.Errorf("serving proxies (-want, +got):\n%s", diff)
			}
		})
	}
}

// fromServing runs Serving's own code on a row as its controllers would:
// the route reconciler's traffic, visibility, certificates and KIngress,
// and for each Revision the PodAutoscaler, SKS and public Service the
// revision, autoscaling and SKS reconcilers derive from it.
func fromServing(t *testing.T, r row) (*netv1alpha1.Ingress, []*corev1.Service) {
	t.Helper()
	ctx := routeContext(t, r)

	revs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	cfgs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	// The Route's placeholder Services, where a per-tag visibility label
	// would live; no row has one.
	placeholders := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	latest := map[string]string{}
	var svcs []*corev1.Service
	for _, rv := range r.revisions {
		opts := []servingtesting.RevisionOption{
			servingtesting.WithRevisionLabel(serving.ConfigurationLabelKey, rv.config),
			servingtesting.MarkRevisionReady,
		}
		if rv.h2c {
			opts = append(opts, func(rev *servingv1.Revision) {
				rev.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "h2c", ContainerPort: 8080}}
			})
		}
		rev := servingtesting.Revision(ns, rv.name, opts...)
		must(t, revs.Add(rev))
		latest[rv.config] = rv.name // rows list a Configuration's revisions oldest first
		pa := revresources.MakePA(rev, nil)
		sks := asresources.MakeSKS(pa, netv1alpha1.SKSOperationModeServe, 2)
		svcs = append(svcs, sksresources.MakePublicService(sks))
	}
	for name, rv := range latest {
		cfg := &servingv1.Configuration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		servingtesting.WithLatestCreated(rv)(cfg)
		servingtesting.WithLatestReady(rv)(cfg)
		must(t, cfgs.Add(cfg))
	}

	rt := r.route.DeepCopy()
	tc, err := traffic.BuildTrafficConfiguration(servinglisters.NewConfigurationLister(cfgs), servinglisters.NewRevisionLister(revs), rt)
	if err != nil {
		t.Fatalf("BuildTrafficConfiguration() = %v", err)
	}
	if tc.Visibility, err = visibility.NewResolver(corev1listers.NewServiceLister(placeholders)).GetVisibility(ctx, rt); err != nil {
		t.Fatal(err)
	}
	if rt.Status.Traffic, err = tc.GetRevisionTrafficTargets(ctx, rt, &traffic.Rollout{}); err != nil {
		t.Fatal(err)
	}

	tls, challenges := certificates(t, ctx, rt, tc, r.certs)
	var solverSvcs []*corev1.Service
	if len(challenges) > 0 {
		solverSvcs = append(solverSvcs, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: solver},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: solverPort, TargetPort: intstr.FromInt(solverPort)}}},
		})
	}
	ing, err := routeresources.MakeIngress(ctx, rt, tc, tls, ingressClass, challenges...)
	if err != nil {
		t.Fatalf("MakeIngress() = %v", err)
	}
	return ing, append(svcs, solverSvcs...)
}

// routeContext is the context Serving's route reconciler runs with: its
// config store's config-domain, config-network and config-features.
func routeContext(t *testing.T, r row) context.Context {
	t.Helper()
	domain, err := routecfg.NewDomainFromConfigMap(&corev1.ConfigMap{Data: map[string]string{routeDomain: ""}})
	if err != nil {
		t.Fatal(err)
	}
	network, err := netcfg.NewConfigFromMap(r.network)
	if err != nil {
		t.Fatal(err)
	}
	features, err := servingcfg.NewFeaturesConfigFromMap(r.features)
	if err != nil {
		t.Fatal(err)
	}
	// Serving's builders log through the context: into the test's log.
	return routecfg.ToContext(logtesting.TestContextWithLogger(t), &routecfg.Config{Domain: domain, Network: network, Features: features})
}

// certificates are the IngressTLS and HTTP-01 challenges Serving's route
// reconciler hands MakeIngress. It builds the Certificates with Serving's
// builders, as the reconciler does, and stands in for the certificate
// reconciler (net-certmanager) by giving them the status acme says: a ready
// one yields TLS for its names, a pending one no TLS and a challenge per
// name, answered by cert-manager's solver.
func certificates(t *testing.T, ctx context.Context, rt *servingv1.Route, tc *traffic.Config, state acme) ([]netv1alpha1.IngressTLS, []netv1alpha1.HTTP01Challenge) {
	t.Helper()
	cfg := routecfg.FromContext(ctx)
	tls := []netv1alpha1.IngressTLS{}
	var challenges []netv1alpha1.HTTP01Challenge
	names := make([]string, 0, len(tc.Targets))
	for name := range tc.Targets {
		names = append(names, name)
	}
	sort.Strings(names)

	if cfg.Network.ExternalDomainTLS {
		byDomain, err := domains.GetAllDomainsAndTags(ctx, rt, names, tc.Visibility)
		if err != nil {
			t.Fatal(err)
		}
		for d := range byDomain {
			if domains.IsClusterLocal(d) {
				delete(byDomain, d) // their TLS is cluster-local-domain-tls's
			}
		}
		base := cfg.Domain.LookupDomainForLabels(rt.Labels)
		for _, cert := range routeresources.MakeCertificates(rt, byDomain, cfg.Network.DefaultCertificateClass, base) {
			if state != certsIssuing {
				tls = append(tls, routeresources.MakeIngressTLS(cert, cert.Spec.DNSNames))
			}
			if state == certsReady {
				continue
			}
			for _, dns := range cert.Spec.DNSNames {
				challenges = append(challenges, netv1alpha1.HTTP01Challenge{
					URL:              &apis.URL{Scheme: "http", Host: dns, Path: "/.well-known/acme-challenge/" + token},
					ServiceName:      solver,
					ServiceNamespace: ns,
					ServicePort:      intstr.FromInt(solverPort),
				})
			}
		}
	}
	if cfg.Network.ClusterLocalDomainTLS == netcfg.EncryptionEnabled {
		for _, name := range names {
			local, err := domains.GetDomainsForVisibility(ctx, name, rt, netv1alpha1.IngressVisibilityClusterLocal)
			if err != nil {
				t.Fatal(err)
			}
			cert := routeresources.MakeClusterLocalCertificate(rt, name, local.Expanded, cfg.Network.DefaultCertificateClass)
			tls = append(tls, routeresources.MakeIngressTLS(cert, cert.Spec.DNSNames))
		}
	}
	sort.Slice(challenges, func(i, j int) bool { return challenges[i].URL.String() < challenges[j].URL.String() })
	return tls, challenges
}

// resolverOf resolves backends against the given Services, as the
// reconciler's Service lister would.
func resolverOf(svcs []*corev1.Service) resources.Resolver {
	return func(namespace, name string, port intstr.IntOrString) (resources.Backend, error) {
		for _, s := range svcs {
			if s.Namespace == namespace && s.Name == name {
				return resources.ResolveFromService(s, port)
			}
		}
		return resources.Backend{}, &resources.BackendError{Reason: "ServiceNotFound", Message: namespace + "/" + name + " not found"}
	}
}

// vhostsOf reads the operator's view (vhost) off the proxies, sorted by
// class and host.
func vhostsOf(proxies []*contourv1.HTTPProxy) []vhost {
	var out []vhost
	for _, p := range proxies {
		v := vhost{Class: p.Spec.IngressClassName, Fqdn: p.Spec.VirtualHost.Fqdn}
		if p.Spec.VirtualHost.TLS != nil {
			v.TLS = p.Spec.VirtualHost.TLS.SecretName
		}
		for _, r := range p.Spec.Routes {
			if isProbe(r) {
				continue
			}
			rt := route{PermitInsecure: r.PermitInsecure, Set: setBy(r.RequestHeadersPolicy)}
			for _, c := range r.Conditions {
				switch {
				case c.Prefix != "":
					rt.Prefix = c.Prefix
				case c.Header != nil:
					if rt.Headers == nil {
						rt.Headers = map[string]string{}
					}
					rt.Headers[c.Header.Name] = c.Header.Exact
				}
			}
			for _, s := range r.Services {
				b := backend{Name: s.Name, Port: s.Port, Weight: s.Weight}
				if s.Protocol != nil {
					b.Protocol = *s.Protocol
				}
				rt.Backends = append(rt.Backends, b)
			}
			v.Routes = append(v.Routes, rt)
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Class != out[j].Class {
			return out[i].Class < out[j].Class
		}
		return out[i].Fqdn < out[j].Fqdn
	})
	return out
}

// isProbe tells a probe route (Knative's or hitless's): it matches
// K-Network-Hash.
func isProbe(r contourv1.Route) bool {
	for _, c := range r.Conditions {
		if c.Header != nil && c.Header.Name == header.HashKey {
			return true
		}
	}
	return false
}

func setBy(hp *contourv1.HeadersPolicy) map[string]string {
	if hp == nil || len(hp.Set) == 0 {
		return nil
	}
	out := map[string]string{}
	for _, h := range hp.Set {
		out[h.Name] = h.Value
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
