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
	netcfg "knative.dev/networking/pkg/config"
	fakekubeclient "knative.dev/pkg/client/injection/kube/client/fake"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/kmeta"
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
	cancelled []probe.RoundKey
	// lister is the reconciler's target lister: as the real prober does,
	// IsReady lists a round's targets first and returns the lister's error
	// as it is.
	lister probe.TargetLister
}

func (p *fakeProber) IsReady(ctx context.Context, round probe.Round) (probe.Progress, error) {
	if p.lister != nil {
		if _, err := p.lister.ListProbeTargets(ctx, round.Paths); err != nil {
			return probe.Progress{}, err
		}
	}
	if p.ready[round.Hash] {
		return probe.Progress{Ready: true}, nil
	}
	return p.progress[round.Hash], nil
}

func (p *fakeProber) CancelWhere(func(types.NamespacedName) bool) {}

func (p *fakeProber) Cancel(key probe.RoundKey) {
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
func serving(t testing.TB, i *v1alpha1.Ingress) *resources.Serving {
	t.Helper()
	return servingWith(t, &config.Config{Contour: testCfg}, i)
}

// servingWith is serving under the given configuration.
func servingWith(t testing.TB, cfg *config.Config, i *v1alpha1.Ingress) *resources.Serving {
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

// withChallenge puts a pending ACME HTTP-01 challenge's path in front of
// the first rule's, as Serving's auto-TLS does.
func withChallenge(i *v1alpha1.Ingress) {
	i.Spec.Rules[0].HTTP.Paths = append([]v1alpha1.HTTPIngressPath{{
		Path: "/.well-known/acme-challenge/tok",
		Splits: []v1alpha1.IngressBackendSplit{{
			IngressBackend: v1alpha1.IngressBackend{ServiceNamespace: testNS, ServiceName: "solver", ServicePort: intstr.FromInt(80)},
			Percent:        100,
		}},
	}}, i.Spec.Rules[0].HTTP.Paths...)
}

// withAnnotation sets an annotation on the KIngress.
func withAnnotation(k, v string) ingOpt {
	return func(i *v1alpha1.Ingress) { i.Annotations[k] = v }
}

// withoutLoadBalancerIPs is a Ready status as a hitless that did not report
// the Envoy Services' ClusterIPs wrote it.
func withoutLoadBalancerIPs(i *v1alpha1.Ingress) {
	for k := range i.Status.PublicLoadBalancer.Ingress {
		i.Status.PublicLoadBalancer.Ingress[k].IP = ""
	}
	for k := range i.Status.PrivateLoadBalancer.Ingress {
		i.Status.PrivateLoadBalancer.Ingress[k].IP = ""
	}
}

// withAuthorization puts the KIngress's hosts behind the ExtensionService
// auth/authz, with the certificate Contour requires for that.
func withAuthorization(i *v1alpha1.Ingress) {
	i.Annotations[resources.AnnotationExtensionService] = "authz"
	i.Annotations[resources.AnnotationExtensionServiceNamespace] = "auth"
	i.Spec.TLS = []v1alpha1.IngressTLS{{Hosts: i.Spec.Rules[0].Hosts, SecretName: "cert"}}
}

// withoutNetContourLabels is a serving proxy as hitless wrote it before it
// put net-contour's labels on them too.
func withoutNetContourLabels(p *contourv1.HTTPProxy) *contourv1.HTTPProxy {
	p = p.DeepCopy()
	for _, k := range []string{resources.NetContourParentLabel, resources.NetContourGenerationLabel,
		resources.NetContourDomainHashLabel, resources.ContourClassAnnotation} {
		delete(p.Labels, k)
	}
	return p
}

// ---- fixtures -------------------------------------------------------------

// fixture holds the objects the table tests share, built with the real
// builders (serving and warm through MakeServing and MakeWarm), so a row
// expects what the reconciler would write.
type fixture struct {
	// pods are two ready Envoy pods of the external fleet behind a Service
	// with an HTTP and an HTTPS port.
	pods []runtime.Object

	// A KIngress moving from backend blue to backend green.
	blueServing, greenServing *resources.Serving
	warmGreen                 *resources.Warm

	// Behind an HTTPS-only Envoy Service: a KIngress with a certificate.
	httpsOnlyPods   []runtime.Object
	blueCertServing *resources.Serving
	warmGreenCert   *resources.Warm

	// green with an annotation of its own.
	annotatedGreen *resources.Serving

	// config-contour with retries off, and green's proxies under it.
	noRetries      *config.Contour
	greenNoRetries *resources.Serving

	// Under system-internal-tls: backends are reached over TLS.
	internalTLS  *config.Config
	blueTLS      *resources.Serving
	warmGreenTLS *resources.Warm

	// A host in the cluster's domain, served by the internal fleet.
	clusterDomainServing *resources.Serving

	// A DomainMapping's shape: mappedSvc an ExternalName Service reached
	// with the Host rewritten to privateHost; remapped moves the route to
	// mapped2Svc; refusedWarm is the warm proxy of mapped() as a Contour
	// that refuses ExternalName Services marks it.
	mappedSvc, mapped2Svc *corev1.Service
	warmMapped            *resources.Warm
	remapped              *v1alpha1.Ingress
	refusedWarm           *contourv1.HTTPProxy

	// Claims on hello.example.com: a user's HTTPProxy; one of a class no
	// fleet of ours runs; the proxy of a KIngress deleted a moment ago,
	// which the garbage collector has not removed yet.
	userProxy, otherClass, leftover *contourv1.HTTPProxy

	// Two KIngresses raced for hello.example.com and Contour invalidated
	// both. In raceLoser/raceWinner ours was created a second after the
	// other's (the KIngress otherIngress); in raceFirst/raceSecond ours
	// came first.
	raceLoser, raceWinner *contourv1.HTTPProxy
	raceFirst, raceSecond *contourv1.HTTPProxy
	otherIngress          *v1alpha1.Ingress

	// green's serving proxy as Contour marks it when its TLS Secret is
	// invalid.
	invalid *contourv1.HTTPProxy

	// blue with two hosts, then one.
	oneHost                        *v1alpha1.Ingress
	oneHostServing, twoHostServing *resources.Serving

	// ncBlue is net-contour's proxy serving blue; adopted is it taken
	// over (our spec, labels and annotations under its name).
	ncBlue, adopted *contourv1.HTTPProxy
	// Our proxy created next to net-contour's for the same host, Contour
	// invalidating both.
	ncBlueInvalid, oursInvalid *contourv1.HTTPProxy
	// epChild is net-contour's endpoint probe child, left by a rollout in
	// flight.
	epChild *v1alpha1.Ingress
}

func fixtures(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{pods: envoy("contour-external", "10.244.0.20", "10.244.0.21")}

	blue, green := ing("blue"), ing("green")
	f.blueServing = serving(t, blue)
	f.greenServing = serving(t, green)
	f.warmGreen = warm(t, green, backends("blue", "green"), backends("green"))

	f.httpsOnlyPods = envoyHTTPSOnly("contour-external", "10.244.0.20", "10.244.0.21")
	f.blueCertServing = serving(t, ing("blue", withCert))
	f.warmGreenCert = warmHTTPSOnly(t, ing("green", withCert), backends("blue", "green"), backends("green"))

	f.annotatedGreen = serving(t, ing("green", withAnnotation("example.com/team", "payments")))

	f.noRetries = config.DefaultContour()
	f.noRetries.RetryPolicy = nil
	f.greenNoRetries = servingWith(t, &config.Config{Contour: f.noRetries}, green)

	tlsNetwork, err := netcfg.NewConfigFromMap(map[string]string{"system-internal-tls": "enabled"})
	if err != nil {
		t.Fatal(err)
	}
	f.internalTLS = &config.Config{Contour: testCfg, Network: tlsNetwork}
	f.blueTLS = servingWith(t, f.internalTLS, blue)
	f.warmGreenTLS = warm(t, green, tlsBackends("blue", "green"), tlsBackends("green"))

	f.clusterDomainServing = serving(t, clusterDomainHost())

	f.mappedSvc = &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "mapped"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "envoy.contour-internal.svc.cluster.local",
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	f.warmMapped = warm(t, mapped(), backends("blue").Union(rewritten("mapped")), rewritten("mapped"))
	f.mapped2Svc = f.mappedSvc.DeepCopy()
	f.mapped2Svc.Name = "mapped2"
	f.remapped = ing("mapped2", func(i *v1alpha1.Ingress) { i.Spec.Rules[0].HTTP.Paths[0].RewriteHost = privateHost })
	f.refusedWarm = f.warmMapped.Proxies[0].DeepCopy()
	f.refusedWarm.Generation = 1
	f.refusedWarm.Status = contourv1.HTTPProxyStatus{
		CurrentStatus: "invalid",
		Description:   "At least one error present, see Errors for details",
		Conditions: []contourv1.DetailedCondition{{
			Condition: contourv1.Condition{Type: contourv1.ValidConditionType, ObservedGeneration: 1},
			Errors:    []contourv1.SubCondition{{Message: externalNameRefused}},
		}},
	}

	f.userProxy = &contourv1.HTTPProxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "mine"},
		Spec:       contourv1.HTTPProxySpec{IngressClassName: "contour-external", VirtualHost: &contourv1.VirtualHost{Fqdn: "hello.example.com"}},
	}
	f.otherClass = f.userProxy.DeepCopy()
	f.otherClass.Spec.IngressClassName = "contour-private"
	f.leftover = &contourv1.HTTPProxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "gone", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "networking.internal.knative.dev/v1alpha1", Kind: "Ingress", Name: "gone", UID: "gone-uid", Controller: ptr.To(true)}}},
		Spec:   contourv1.HTTPProxySpec{IngressClassName: "contour-external", VirtualHost: &contourv1.VirtualHost{Fqdn: "hello.example.com"}},
		Status: contourv1.HTTPProxyStatus{CurrentStatus: "invalid"},
	}

	t0 := metav1.NewTime(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Second))
	f.raceLoser = f.blueServing.Proxies[0].DeepCopy()
	f.raceLoser.CreationTimestamp = t1
	f.raceLoser.Status.CurrentStatus = "invalid"
	f.raceWinner = &contourv1.HTTPProxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "first", CreationTimestamp: t0,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "networking.internal.knative.dev/v1alpha1",
				Kind: "Ingress", Name: "first", UID: "other-uid", Controller: ptr.To(true)}}},
		Spec:   contourv1.HTTPProxySpec{IngressClassName: "contour-external", VirtualHost: &contourv1.VirtualHost{Fqdn: "hello.example.com"}},
		Status: contourv1.HTTPProxyStatus{CurrentStatus: "invalid"},
	}
	f.otherIngress = &v1alpha1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "first", UID: "other-uid"}}
	f.raceFirst = f.raceLoser.DeepCopy()
	f.raceFirst.CreationTimestamp = t0
	f.raceFirst.Status.Description = `fqdn "hello.example.com" is used in multiple HTTPProxies`
	f.raceSecond = f.raceWinner.DeepCopy()
	f.raceSecond.CreationTimestamp = t1

	f.invalid = f.greenServing.Proxies[0].DeepCopy()
	f.invalid.Generation = 1
	f.invalid.Status = contourv1.HTTPProxyStatus{
		CurrentStatus: "invalid",
		Description:   "At least one error present, see Errors for details",
		Conditions: []contourv1.DetailedCondition{{
			Condition: contourv1.Condition{Type: contourv1.ValidConditionType, ObservedGeneration: 1},
			Errors:    []contourv1.SubCondition{{Message: `Spec.VirtualHost.TLS Secret "default/cert" is invalid`}},
		}},
	}

	f.oneHost = ing("blue", withHosts("a.example.com"))
	f.oneHostServing = serving(t, f.oneHost)
	f.twoHostServing = serving(t, ing("blue", withHosts("a.example.com", "b.example.com")))

	f.ncBlue = netContourProxy(ing("blue"), "blue")
	f.adopted = f.ncBlue.DeepCopy()
	f.adopted.Spec = f.blueServing.Proxies[0].Spec
	f.adopted.Labels = f.blueServing.Proxies[0].Labels
	f.adopted.Annotations = f.blueServing.Proxies[0].Annotations
	f.ncBlueInvalid = f.ncBlue.DeepCopy()
	f.ncBlueInvalid.Status = contourv1.HTTPProxyStatus{CurrentStatus: "invalid", Description: `fqdn "hello.example.com" is used in multiple HTTPProxies`}
	f.oursInvalid = f.blueServing.Proxies[0].DeepCopy()
	f.oursInvalid.Status = f.ncBlueInvalid.Status
	f.epChild = ing("blue", withStatus(), func(i *v1alpha1.Ingress) {
		i.Name, i.UID = testName+"--ep", "uid-ep"
		i.Annotations[resources.NetContourEndpointsProbe] = "true"
		i.OwnerReferences = []metav1.OwnerReference{*kmeta.NewControllerRef(ing("blue"))}
		i.Spec.Rules[0].Hosts = []string{"blue.gen-2.hello.default.net-contour.invalid"}
	})
	return f
}

// privateHost is the Host mapped() rewrites to.
const privateHost = "private.default.svc.cluster.local"

// externalNameRefused is Contour's error for a route to an ExternalName
// Service when enableExternalNameService is off.
const externalNameRefused = "Spec.Routes unresolved service reference: default/mapped is an ExternalName service, " +
	"these are not currently enabled. See the config.enableExternalNameService config file setting"

// withCert gives hello.example.com a certificate.
func withCert(i *v1alpha1.Ingress) {
	i.Spec.TLS = []v1alpha1.IngressTLS{{Hosts: []string{"hello.example.com"}, SecretName: "cert"}}
}

// tlsBackends is backends() reached over TLS, as under system-internal-tls.
func tlsBackends(names ...string) resources.ClassBackends {
	out := resources.ClassBackends{}
	for _, n := range names {
		out.Add("contour-external", resources.Backend{Namespace: testNS, Name: n, Port: 80, Protocol: resources.ProtocolTLS})
	}
	return out
}

// clusterDomainHost is blue on a host in the cluster's domain.
func clusterDomainHost(opts ...ingOpt) *v1alpha1.Ingress {
	return ing("blue", append([]ingOpt{withHosts("hello.default.svc.cluster.local")}, opts...)...)
}

// mapped is a KIngress with a DomainMapping's shape: its route goes to the
// ExternalName Service mapped with the Host rewritten to privateHost.
func mapped(opts ...ingOpt) *v1alpha1.Ingress {
	return ing("mapped", append([]ingOpt{func(i *v1alpha1.Ingress) {
		i.Spec.Rules[0].HTTP.Paths[0].RewriteHost = privateHost
	}}, opts...)...)
}

// rewritten is backends() behind a rewrite to privateHost: Contour names
// a cluster by the Host its route rewrites to, so such a backend is held
// and warmed with it.
func rewritten(names ...string) resources.ClassBackends {
	out := resources.ClassBackends{}
	for _, n := range names {
		out.Add("contour-external", resources.Backend{Namespace: testNS, Name: n, Port: 80, HostRewrite: privateHost})
	}
	return out
}

// netContourProxy is what net-contour leaves serving a host after its
// controller stopped: its own name, labels and class annotation, its
// route options, valid.
func netContourProxy(i *v1alpha1.Ingress, backend string) *contourv1.HTTPProxy {
	return &contourv1.HTTPProxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: i.Name + "-contour-external-hello.example.com",
			Labels: map[string]string{resources.NetContourParentLabel: i.Name, "contour.networking.knative.dev/generation": "1",
				resources.ContourClassAnnotation: "contour-external"},
			Annotations:     map[string]string{resources.ContourClassAnnotation: "contour-external"},
			OwnerReferences: []metav1.OwnerReference{*kmeta.NewControllerRef(i)}},
		Spec: contourv1.HTTPProxySpec{
			VirtualHost: &contourv1.VirtualHost{Fqdn: "hello.example.com"},
			Routes: []contourv1.Route{{
				Services:         []contourv1.Service{{Name: backend, Port: 80, Weight: 100}},
				RetryPolicy:      &contourv1.RetryPolicy{NumRetries: 2, RetryOn: []contourv1.RetryOn{"connect-failure", "reset"}},
				EnableWebsockets: true,
			}},
		},
		Status: contourv1.HTTPProxyStatus{CurrentStatus: "valid"},
	}
}

// deletesOfMissing are the deletes of the proxies in have that want has no
// proxy of the same name for.
func deletesOfMissing(have, want []*contourv1.HTTPProxy) []clientgotesting.DeleteActionImpl {
	keep := map[string]bool{}
	for _, p := range want {
		keep[p.Name] = true
	}
	var out []clientgotesting.DeleteActionImpl
	for _, p := range have {
		if !keep[p.Name] {
			out = append(out, deleteOf(p))
		}
	}
	return out
}

// ---- factory --------------------------------------------------------------

const proberKey = "prober"

// configKey, set in a row's OtherTestData to a *config.Config, is the
// configuration the row reconciles with (testCfg's config-contour alone
// when unset).
const configKey = "config"
const enqueuedKey = "enqueued"

// deletedKey, in a row's OtherTestData, lists the UIDs of proxies the
// reconciler deleted before the row (deletedProxies) whose deletion the
// cache has not shown yet.
const deletedKey = "deleted"

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
		deleted := newDeletedProxies()
		uids, _ := row.OtherTestData[deletedKey].([]types.UID)
		for _, uid := range uids {
			deleted.add(uid, now)
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
			certLister:    networkinglisters.NewCertificateLister(sorter.IndexerForObjectType(&v1alpha1.Certificate{})),
			tracker:       &rtesting.FakeTracker{},
			prober:        prober,
			deleted:       deleted,
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
