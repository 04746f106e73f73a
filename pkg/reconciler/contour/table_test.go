package contour

import (
	"bytes"
	"context"
	"testing"
	"time"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	fakekubeclientset "k8s.io/client-go/kubernetes/fake"
	corev1listers "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	clientgotesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	"knative.dev/networking/pkg/apis/networking"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	fakenetworkingclientset "knative.dev/networking/pkg/client/clientset/versioned/fake"
	fakenetworkingclient "knative.dev/networking/pkg/client/injection/client/fake"
	ingressreconciler "knative.dev/networking/pkg/client/injection/reconciler/networking/v1alpha1/ingress"
	networkinglisters "knative.dev/networking/pkg/client/listers/networking/v1alpha1"
	fakekubeclient "knative.dev/pkg/client/injection/kube/client/fake"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/logging"
	logtesting "knative.dev/pkg/logging/testing"
	pkgreconciler "knative.dev/pkg/reconciler"
	rtesting "knative.dev/pkg/reconciler/testing"

	fakecontourclientset "github.com/hitless/hitless/pkg/client/clientset/versioned/fake"
	fakecontourclient "github.com/hitless/hitless/pkg/client/injection/client/fake"
	contourlisters "github.com/hitless/hitless/pkg/client/listers/projectcontour/v1"
	"github.com/hitless/hitless/pkg/config"
	"github.com/hitless/hitless/pkg/probe"
	"github.com/hitless/hitless/pkg/probekey"
	"github.com/hitless/hitless/pkg/resources"
)

const (
	testNS    = "default"
	testName  = "hello"
	testClass = DefaultIngressClass
)

var (
	now       = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	testCfg   = config.DefaultContour()
	schemeFns = []func(*runtime.Scheme) error{
		fakekubeclientset.AddToScheme,
		fakenetworkingclientset.AddToScheme,
		fakecontourclientset.AddToScheme,
	}
)

// fakeProber confirms the hashes it was told are served everywhere, and
// records the keys whose probing was cancelled; the real prober is
// exercised on the local stack.
type fakeProber struct {
	ready map[string]bool
	// progress is what a round not ready reports, by hash.
	progress  map[string]probe.Progress
	cancelled []types.NamespacedName
	// lister is the reconciler's target lister: as the real prober does,
	// IsReady lists a round's targets first and returns the lister's error
	// as it is.
	lister probe.TargetLister
}

func (p *fakeProber) IsReady(ctx context.Context, ing *v1alpha1.Ingress) (probe.Progress, error) {
	if p.lister != nil {
		if _, err := p.lister.ListProbeTargets(ctx, ing); err != nil {
			return probe.Progress{}, err
		}
	}
	h := ing.Annotations[probe.ExpectedHashAnnotation]
	if h == "" {
		var err error
		if h, err = resources.Hash(ing); err != nil {
			return probe.Progress{}, err
		}
	}
	if p.ready[h] {
		return probe.Progress{Ready: true}, nil
	}
	return p.progress[h], nil
}

func (p *fakeProber) CancelIngressProbingByKey(key types.NamespacedName) {
	p.cancelled = append(p.cancelled, key)
}

// ---- objects --------------------------------------------------------------

type ingOpt func(*v1alpha1.Ingress)

func ing(backend string, opts ...ingOpt) *v1alpha1.Ingress {
	i := &v1alpha1.Ingress{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   testNS,
			Name:        testName,
			UID:         "uid-hello",
			Generation:  2,
			Annotations: map[string]string{networking.IngressClassAnnotationKey: testClass},
		},
		Spec: v1alpha1.IngressSpec{Rules: []v1alpha1.IngressRule{{
			Hosts:      []string{"hello.example.com"},
			Visibility: v1alpha1.IngressVisibilityExternalIP,
			HTTP: &v1alpha1.HTTPIngressRuleValue{Paths: []v1alpha1.HTTPIngressPath{{
				Splits: []v1alpha1.IngressBackendSplit{{
					IngressBackend: v1alpha1.IngressBackend{ServiceNamespace: testNS, ServiceName: backend, ServicePort: intstr.FromInt(80)},
					Percent:        100,
				}},
			}}},
		}}},
	}
	for _, o := range opts {
		o(i)
	}
	return i
}

func withHosts(hosts ...string) ingOpt {
	return func(i *v1alpha1.Ingress) { i.Spec.Rules[0].Hosts = hosts }
}

func withClass(c string) ingOpt {
	return func(i *v1alpha1.Ingress) { i.Annotations[networking.IngressClassAnnotationKey] = c }
}

// withStatus runs the given marks on an initialized status, observed at the
// KIngress's generation, as the generated reconciler leaves it.
func withStatus(marks ...func(*v1alpha1.Ingress)) ingOpt {
	return func(i *v1alpha1.Ingress) {
		i.Status.InitializeConditions()
		for _, m := range marks {
			m(i)
		}
		i.Status.ObservedGeneration = i.Generation
	}
}

// envoyClusterIPs are the ClusterIPs of the Envoy Services envoy() makes.
var envoyClusterIPs = map[string]string{"contour-external": "10.96.0.10", "contour-internal": "10.96.0.11"}

// ready marks a KIngress Ready with the load balancers net-contour reports:
// each fleet's Envoy Service by name and ClusterIP. The rows have only the
// external fleet's Service, so the internal one is named without an IP.
func ready(i *v1alpha1.Ingress) {
	i.Status.MarkNetworkConfigured()
	i.Status.MarkLoadBalancerReady(
		[]v1alpha1.LoadBalancerIngressStatus{{DomainInternal: "envoy.contour-external.svc.cluster.local", IP: "10.96.0.10"}},
		[]v1alpha1.LoadBalancerIngressStatus{{DomainInternal: "envoy.contour-internal.svc.cluster.local"}})
}

// readyAt marks Ready with the LoadBalancerReady transition at t.
func readyAt(t time.Time) func(*v1alpha1.Ingress) {
	return func(i *v1alpha1.Ingress) {
		ready(i)
		for k := range i.Status.Conditions {
			i.Status.Conditions[k].LastTransitionTime.Inner = metav1.NewTime(t)
		}
	}
}

// newGenerationFailed is what the generated reconciler leaves when it saw a
// new generation and ReconcileKind marked nothing.
func newGenerationFailed(i *v1alpha1.Ingress) {
	i.GetConditionSet().Manage(&i.Status).MarkUnknown(v1alpha1.IngressConditionReady, "NewObservedGenFailure", "unsuccessfully observed a new generation")
}

func waiting(reason, msg string) func(*v1alpha1.Ingress) {
	return func(i *v1alpha1.Ingress) { markWaiting(i, reason, msg) }
}

func badInput(reason, msg string) func(*v1alpha1.Ingress) {
	return func(i *v1alpha1.Ingress) { markBadInput(i, reason, msg) }
}

func service(name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
}

func envoy(class string, ips ...string) []runtime.Object {
	ns := class
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "envoy"},
		Spec: corev1.ServiceSpec{ClusterIP: envoyClusterIPs[class],
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, TargetPort: intstr.FromInt(8080)},
				{Name: "https", Port: 443, TargetPort: intstr.FromInt(8443)},
			}},
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: "envoy-abc", Labels: map[string]string{discoveryv1.LabelServiceName: "envoy"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("http"), Port: ptr.To[int32](8080)},
			{Name: ptr.To("https"), Port: ptr.To[int32](8443)},
		},
	}
	for _, ip := range ips {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return []runtime.Object{svc, slice}
}

// envoyHTTPSOnly is envoy() whose Service has port 443 alone, as behind a
// load balancer that takes HTTPS only.
func envoyHTTPSOnly(class string, ips ...string) []runtime.Object {
	objs := envoy(class, ips...)
	objs[0].(*corev1.Service).Spec.Ports = []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt(8443)}}
	objs[1].(*discoveryv1.EndpointSlice).Ports = []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To[int32](8443)}}
	return objs
}

// serving builds the serving proxies of a KIngress with the real builder.
func serving(t *testing.T, i *v1alpha1.Ingress) *resources.Serving {
	t.Helper()
	return servingWith(t, &config.Config{Contour: testCfg}, i)
}

// servingWith is serving under the given configuration.
func servingWith(t *testing.T, cfg *config.Config, i *v1alpha1.Ingress) *resources.Serving {
	t.Helper()
	s, err := resources.MakeServing(probekey.WithKey(config.ToContext(context.Background(), cfg), testKey), i, func(ns, name string, port intstr.IntOrString) (resources.Backend, error) {
		return resources.ResolveFromService(service(name), port)
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func warm(t *testing.T, i *v1alpha1.Ingress, keep, probe resources.ClassBackends) *resources.Warm {
	t.Helper()
	w, err := resources.MakeWarm(probekey.WithKey(context.Background(), testKey), i, keep, probe, nil)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// warmHTTPSOnly is warm() on a contour-external fleet whose Envoy Service
// has no HTTP port.
func warmHTTPSOnly(t *testing.T, i *v1alpha1.Ingress, keep, probe resources.ClassBackends) *resources.Warm {
	t.Helper()
	w, err := resources.MakeWarm(probekey.WithKey(context.Background(), testKey), i, keep, probe, sets.New("contour-external"))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// testKey is the controller's probe key in the table tests.
var testKey = probekey.Key(bytes.Repeat([]byte{7}, probekey.Size))

func backends(names ...string) resources.ClassBackends {
	out := resources.ClassBackends{}
	for _, n := range names {
		out.Add("contour-external", resources.Backend{Namespace: testNS, Name: n, Port: 80})
	}
	return out
}

func objs(groups ...[]runtime.Object) []runtime.Object {
	var out []runtime.Object
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

func proxies(ps []*contourv1.HTTPProxy) []runtime.Object {
	out := make([]runtime.Object, 0, len(ps))
	for _, p := range ps {
		out = append(out, p)
	}
	return out
}

func statusUpdate(i *v1alpha1.Ingress) clientgotesting.UpdateActionImpl {
	return clientgotesting.UpdateActionImpl{Object: i}
}

func update(p *contourv1.HTTPProxy) clientgotesting.UpdateActionImpl {
	return clientgotesting.UpdateActionImpl{Object: p}
}

func deleteOf(p *contourv1.HTTPProxy) clientgotesting.DeleteActionImpl {
	return clientgotesting.DeleteActionImpl{
		ActionImpl: clientgotesting.ActionImpl{Namespace: p.Namespace, Verb: "delete",
			Resource: contourv1.SchemeGroupVersion.WithResource("httpproxies")},
		Name: p.Name,
	}
}

// ---- factory --------------------------------------------------------------

const proberKey = "prober"

// configKey, set in a row's OtherTestData to a *config.Config, is the
// configuration the row reconciles with (testCfg's config-contour alone
// when unset).
const configKey = "config"
const enqueuedKey = "enqueued"

func makeFactory() rtesting.Factory {
	return func(t *testing.T, row *rtesting.TableRow) (controller.Reconciler, rtesting.ActionRecorderList, rtesting.EventList) {
		scheme := runtime.NewScheme()
		for _, add := range schemeFns {
			if err := add(scheme); err != nil {
				t.Fatal(err)
			}
		}
		sorter := rtesting.NewObjectSorter(scheme)
		sorter.AddObjects(row.Objects...)

		ctx := row.Ctx
		if ctx == nil {
			ctx = context.Background()
		}
		ctx = logging.WithLogger(ctx, logtesting.TestLogger(t))
		ctx, kubeClient := fakekubeclient.With(ctx, sorter.ObjectsForSchemeFunc(fakekubeclientset.AddToScheme)...)
		ctx, netClient := fakenetworkingclient.With(ctx, sorter.ObjectsForSchemeFunc(fakenetworkingclientset.AddToScheme)...)
		ctx, contourClient := fakecontourclient.With(ctx, sorter.ObjectsForSchemeFunc(fakecontourclientset.AddToScheme)...)
		recorder := record.NewFakeRecorder(20)
		ctx = controller.WithEventRecorder(ctx, recorder)
		for _, reactor := range row.WithReactors {
			kubeClient.PrependReactor("*", "*", reactor)
			netClient.PrependReactor("*", "*", reactor)
			contourClient.PrependReactor("*", "*", reactor)
		}

		// The HTTPProxy indexer also indexes hosts and controllers, as the
		// informer does.
		proxyIndexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{
			cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
			fqdnIndex:            indexFqdn,
			controllerIndex:      indexController,
		})
		for _, o := range sorter.ObjectsForSchemeFunc(fakecontourclientset.AddToScheme) {
			if err := proxyIndexer.Add(o); err != nil {
				t.Fatal(err)
			}
		}

		prober, _ := row.OtherTestData[proberKey].(*fakeProber)
		if prober == nil {
			prober = &fakeProber{}
		}
		enqueued := map[string]time.Duration{}
		cfg, _ := row.OtherTestData[configKey].(*config.Config)
		if cfg == nil {
			cfg = &config.Config{Contour: testCfg}
		}
		row.OtherTestData = map[string]interface{}{proberKey: prober, enqueuedKey: enqueued}

		ingLister := networkinglisters.NewIngressLister(sorter.IndexerForObjectType(&v1alpha1.Ingress{}))

		services := corev1listers.NewServiceLister(sorter.IndexerForObjectType(&corev1.Service{}))
		r := &Reconciler{
			contourClient: contourClient,
			netClient:     netClient,
			proxyLister:   contourlisters.NewHTTPProxyLister(proxyIndexer),
			proxyIndexer:  proxyIndexer,
			ingressLister: ingLister,
			serviceLister: services,
			tracker:       &rtesting.FakeTracker{},
			prober:        prober,
			targets: &envoyTargets{
				services:       services,
				endpointSlices: discoverylisters.NewEndpointSliceLister(sorter.IndexerForObjectType(&discoveryv1.EndpointSlice{})),
			},
			enqueueAfter: func(obj interface{}, d time.Duration) {
				enqueued[rtesting.KeyOrDie(obj)] = d
			},
			clock:    func() time.Time { return now },
			metrics:  newMetrics(),
			probeKey: testKey,
		}
		prober.lister = r.targets
		ctx = config.ToContext(ctx, cfg)
		row.Ctx = ctx
		c := ingressreconciler.NewReconciler(ctx, logging.FromContext(ctx), netClient, ingLister, recorder, r, testClass,
			controller.Options{ConfigStore: staticConfig{cfg}})
		if la, ok := c.(pkgreconciler.LeaderAware); ok {
			la.Promote(pkgreconciler.UniversalBucket(), func(pkgreconciler.Bucket, types.NamespacedName) {})
		}
		return c, rtesting.ActionRecorderList{kubeClient, netClient, contourClient}, rtesting.EventList{Recorder: recorder}
	}
}

// staticConfig hands every reconcile the row's configuration.
type staticConfig struct{ cfg *config.Config }

func (s staticConfig) ToContext(ctx context.Context) context.Context {
	return config.ToContext(ctx, s.cfg)
}
