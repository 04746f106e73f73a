package contour

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgotesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	netcfg "knative.dev/networking/pkg/config"
	"knative.dev/pkg/kmeta"
	rtesting "knative.dev/pkg/reconciler/testing"

	"github.com/hitless/hitless/pkg/config"
	"github.com/hitless/hitless/pkg/probe"
	"github.com/hitless/hitless/pkg/resources"
)

func TestReconcile(t *testing.T) {
	pods := envoy("contour-external", "10.244.0.20", "10.244.0.21")

	blue := ing("blue")
	green := ing("green")
	blueServing := serving(t, blue)
	greenServing := serving(t, green)
	warmGreen := warm(t, green, backends("blue", "green"), backends("green"))
	// Behind an HTTPS-only Envoy Service: a KIngress with a certificate.
	httpsOnlyPods := envoyHTTPSOnly("contour-external", "10.244.0.20", "10.244.0.21")
	withCert := func(i *v1alpha1.Ingress) {
		i.Spec.TLS = []v1alpha1.IngressTLS{{Hosts: []string{"hello.example.com"}, SecretName: "cert"}}
	}
	blueCert, greenCert := ing("blue", withCert), ing("green", withCert)
	blueCertServing := serving(t, blueCert)
	warmGreenCert := warmHTTPSOnly(t, greenCert, backends("blue", "green"), backends("green"))
	annotatedGreen := serving(t, ing("green", withAnnotation("example.com/team", "payments")))
	noRetries := config.DefaultContour()
	noRetries.RetryPolicy = nil
	greenNoRetries := servingWith(t, &config.Config{Contour: noRetries}, green)
	tlsNetwork, err := netcfg.NewConfigFromMap(map[string]string{"system-internal-tls": "enabled"})
	if err != nil {
		t.Fatal(err)
	}
	internalTLS := &config.Config{Contour: testCfg, Network: tlsNetwork}
	blueTLS := servingWith(t, internalTLS, blue)
	tlsBackends := func(names ...string) resources.ClassBackends {
		out := resources.ClassBackends{}
		for _, n := range names {
			out.Add("contour-external", resources.Backend{Namespace: testNS, Name: n, Port: 80, Protocol: resources.ProtocolTLS})
		}
		return out
	}
	warmGreenTLS := warm(t, green, tlsBackends("blue", "green"), tlsBackends("green"))
	clusterDomainHost := func(opts ...ingOpt) *v1alpha1.Ingress {
		return ing("blue", append([]ingOpt{withHosts("hello.default.svc.cluster.local")}, opts...)...)
	}
	clusterDomainServing := serving(t, clusterDomainHost())

	// The shape of a DomainMapping: an ExternalName Service naming the
	// internal load balancer, reached with the rewritten Host.
	mappedSvc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "mapped"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "envoy.contour-internal.svc.cluster.local",
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	mapped := func(opts ...ingOpt) *v1alpha1.Ingress {
		return ing("mapped", append([]ingOpt{func(i *v1alpha1.Ingress) {
			i.Spec.Rules[0].HTTP.Paths[0].RewriteHost = "private.default.svc.cluster.local"
		}}, opts...)...)
	}
	const private = "private.default.svc.cluster.local"
	// Contour names a cluster by the Host its route rewrites to, so a
	// backend behind a rewrite is held and warmed with it.
	rewritten := func(names ...string) resources.ClassBackends {
		out := resources.ClassBackends{}
		for _, n := range names {
			out.Add("contour-external", resources.Backend{Namespace: testNS, Name: n, Port: 80, HostRewrite: private})
		}
		return out
	}
	warmMapped := warm(t, mapped(), backends("blue").Union(rewritten("mapped")), rewritten("mapped"))
	mapped2Svc := mappedSvc.DeepCopy()
	mapped2Svc.Name = "mapped2"
	remapped := ing("mapped2", func(i *v1alpha1.Ingress) { i.Spec.Rules[0].HTTP.Paths[0].RewriteHost = private })
	const externalNameRefused = "Spec.Routes unresolved service reference: default/mapped is an ExternalName service, " +
		"these are not currently enabled. See the config.enableExternalNameService config file setting"
	refusedWarm := warmMapped.Proxies[0].DeepCopy()
	refusedWarm.Generation = 1
	refusedWarm.Status = contourv1.HTTPProxyStatus{
		CurrentStatus: "invalid",
		Description:   "At least one error present, see Errors for details",
		Conditions: []contourv1.DetailedCondition{{
			Condition: contourv1.Condition{Type: contourv1.ValidConditionType, ObservedGeneration: 1},
			Errors:    []contourv1.SubCondition{{Message: externalNameRefused}},
		}},
	}

	userProxy := &contourv1.HTTPProxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "mine"},
		Spec:       contourv1.HTTPProxySpec{IngressClassName: "contour-external", VirtualHost: &contourv1.VirtualHost{Fqdn: "hello.example.com"}},
	}
	// The same host for a Contour no fleet of ours runs: no claim on it.
	otherClass := userProxy.DeepCopy()
	otherClass.Spec.IngressClassName = "contour-private"
	// The same host by the proxy of a KIngress deleted a moment ago, which
	// the garbage collector has not removed yet.
	leftover := &contourv1.HTTPProxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "gone", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "networking.internal.knative.dev/v1alpha1", Kind: "Ingress", Name: "gone", UID: "gone-uid", Controller: ptr.To(true)}}},
		Spec:   contourv1.HTTPProxySpec{IngressClassName: "contour-external", VirtualHost: &contourv1.VirtualHost{Fqdn: "hello.example.com"}},
		Status: contourv1.HTTPProxyStatus{CurrentStatus: "invalid"},
	}
	// Two KIngresses raced for hello.example.com: ours was created a second
	// after the other's, and Contour invalidated both.
	t0 := metav1.NewTime(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Second))
	raceLoser := blueServing.Proxies[0].DeepCopy()
	raceLoser.CreationTimestamp = t1
	raceLoser.Status.CurrentStatus = "invalid"
	raceWinner := &contourv1.HTTPProxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "first", CreationTimestamp: t0,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "networking.internal.knative.dev/v1alpha1",
				Kind: "Ingress", Name: "first", UID: "other-uid", Controller: ptr.To(true)}}},
		Spec:   contourv1.HTTPProxySpec{IngressClassName: "contour-external", VirtualHost: &contourv1.VirtualHost{Fqdn: "hello.example.com"}},
		Status: contourv1.HTTPProxyStatus{CurrentStatus: "invalid"},
	}
	// The KIngress that owns raceWinner (and raceSecond).
	otherIngress := &v1alpha1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "first", UID: "other-uid"}}

	raceFirst := raceLoser.DeepCopy()
	raceFirst.CreationTimestamp = t0
	raceFirst.Status.Description = `fqdn "hello.example.com" is used in multiple HTTPProxies`
	raceSecond := raceWinner.DeepCopy()
	raceSecond.CreationTimestamp = t1

	invalid := greenServing.Proxies[0].DeepCopy()
	invalid.Generation = 1
	invalid.Status = contourv1.HTTPProxyStatus{
		CurrentStatus: "invalid",
		Description:   "At least one error present, see Errors for details",
		Conditions: []contourv1.DetailedCondition{{
			Condition: contourv1.Condition{Type: contourv1.ValidConditionType, ObservedGeneration: 1},
			Errors:    []contourv1.SubCondition{{Message: `Spec.VirtualHost.TLS Secret "default/cert" is invalid`}},
		}},
	}

	twoHosts := ing("blue", withHosts("a.example.com", "b.example.com"))
	oneHost := ing("blue", withHosts("a.example.com"))
	oneHostServing := serving(t, oneHost)
	twoHostServing := serving(t, twoHosts)

	// What net-contour leaves serving a host after its controller stopped:
	// its own name, labels and class annotation, its route options, valid.
	netContour := func(i *v1alpha1.Ingress, backend string) *contourv1.HTTPProxy {
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
	ncBlue := netContour(ing("blue"), "blue")
	// Taken over: our spec, labels and annotations on net-contour's object.
	adopted := ncBlue.DeepCopy()
	adopted.Spec = blueServing.Proxies[0].Spec
	adopted.Labels = blueServing.Proxies[0].Labels
	adopted.Annotations = blueServing.Proxies[0].Annotations
	// The broken state of an earlier hitless: its own proxy created next to
	// net-contour's, Contour invalidating both.
	ncBlueInvalid := ncBlue.DeepCopy()
	ncBlueInvalid.Status = contourv1.HTTPProxyStatus{CurrentStatus: "invalid", Description: `fqdn "hello.example.com" is used in multiple HTTPProxies`}
	oursInvalid := blueServing.Proxies[0].DeepCopy()
	oursInvalid.Status = ncBlueInvalid.Status
	// net-contour's endpoint probe child, left by a rollout in flight.
	epChild := ing("blue", withStatus(), func(i *v1alpha1.Ingress) {
		i.Name, i.UID = testName+"--ep", "uid-ep"
		i.Annotations[resources.NetContourEndpointsProbe] = "true"
		i.OwnerReferences = []metav1.OwnerReference{*kmeta.NewControllerRef(ing("blue"))}
		i.Spec.Rules[0].Hosts = []string{"blue.gen-2.hello.default.net-contour.invalid"}
	})

	table := rtesting.TableTest{{
		Name: "bad workqueue key",
		Key:  "too/many/parts",
	}, {
		Name: "key not found",
		Key:  "foo/not-found",
	}, {
		Name: "steady state: Ready, proxies current, nothing written and nothing probed",
		Key:  "default/hello",
		Objects: objs(pods, proxies(greenServing.Proxies), []runtime.Object{
			ing("green", withStatus(ready)), service("green"),
		}),
	}, {
		Name: "proxies an older hitless wrote without net-contour's labels get them in one update: no probe, still Ready",
		Key:  "default/hello",
		Objects: objs(pods, proxies([]*contourv1.HTTPProxy{withoutNetContourLabels(greenServing.Proxies[0])}), []runtime.Object{
			ing("green", withStatus(ready)), service("green"),
		}),
		OtherTestData: map[string]interface{}{proberKey: &fakeProber{}},
		WantUpdates:   []clientgotesting.UpdateActionImpl{update(greenServing.Proxies[0])},
	}, {
		Name: "an annotation added to a Ready KIngress reaches its serving proxy in one update: no probe, still Ready",
		Key:  "default/hello",
		Objects: objs(pods, proxies(greenServing.Proxies), []runtime.Object{
			ing("green", withStatus(ready), withAnnotation("example.com/team", "payments")), service("green"),
		}),
		OtherTestData: map[string]interface{}{proberKey: &fakeProber{}},
		WantUpdates:   []clientgotesting.UpdateActionImpl{update(annotatedGreen.Proxies[0])},
	}, {
		Name: "a Ready status without the Envoy Service's ClusterIP (an older hitless wrote it) gets it: no write, no probe",
		Key:  "default/hello",
		Objects: objs(pods, proxies(greenServing.Proxies), []runtime.Object{
			ing("green", withStatus(ready, withoutLoadBalancerIPs)), service("green"),
		}),
		OtherTestData:     map[string]interface{}{proberKey: &fakeProber{}},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("green", withStatus(ready)))},
	}, {
		Name: "a host of an ExternalIP rule in the cluster's domain is served by the internal fleet and probed there",
		Key:  "default/hello",
		Objects: objs(pods, envoy("contour-internal", "10.244.0.30"), []runtime.Object{
			clusterDomainHost(), service("blue"),
		}),
		WantCreates: proxies(clusterDomainServing.Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(clusterDomainHost(withStatus(
			waiting(ReasonSwitching, "0/1 Envoy pods of contour-internal serve default/blue:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		Name: "a config-contour change of what the routes do (retries off) rewrites the serving proxy and is probed again at the proxies' new hash",
		Key:  "default/hello",
		Objects: objs(pods, proxies(greenServing.Proxies), []runtime.Object{
			ing("green", withStatus(ready)), service("green"),
		}),
		// The old routes' round was confirmed; it must not stand for the new ones.
		OtherTestData: map[string]interface{}{configKey: &config.Config{Contour: noRetries},
			proberKey: &fakeProber{ready: map[string]bool{greenServing.Hash: true}}},
		WantUpdates: []clientgotesting.UpdateActionImpl{update(greenNoRetries.Proxies[0])},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("green", withStatus(ready,
			waiting(ReasonSwitching, "0/2 Envoy pods of contour-external serve default/green:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		Name: "under system-internal-tls a fresh backend is warmed like any other: the warm proxy holds the served tls backend and the new one, both validated",
		Key:  "default/hello",
		Objects: objs(pods, proxies(blueTLS.Proxies), []runtime.Object{
			ing("green", withStatus(ready), func(i *v1alpha1.Ingress) { i.Status.ObservedGeneration = 1 }),
			service("blue"), service("green"),
		}),
		OtherTestData: map[string]interface{}{configKey: internalTLS},
		WantCreates:   proxies(warmGreenTLS.Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("green", withStatus(ready,
			waiting(ReasonWarming, "0/2 Envoy pods of contour-external serve default/green:80 (tls)"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonWarming, "Warm proxies reference default/blue:80 (tls), default/green:80 (tls)")},
	}, {
		Name: "a KIngress of another class is left untouched",
		Key:  "default/hello",
		Objects: objs(pods, []runtime.Object{
			ing("blue", withClass("istio.ingress.networking.knative.dev")), service("blue"),
		}),
	}, {
		Name: "a brand-new KIngress skips Warm: its serving proxy is created and probed",
		Key:  "default/hello",
		Objects: objs(pods, []runtime.Object{
			ing("blue"), service("blue"),
		}),
		WantCreates: proxies(blueServing.Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(
			waiting(ReasonSwitching, "0/2 Envoy pods of contour-external serve default/blue:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		Name: "a fresh backend is warmed first: warm proxy holds old and new, serving proxy untouched",
		Key:  "default/hello",
		Objects: objs(pods, proxies(blueServing.Proxies), []runtime.Object{
			ing("green", withStatus(ready), func(i *v1alpha1.Ingress) { i.Status.ObservedGeneration = 1 }),
			service("blue"), service("green"),
		}),
		WantCreates: proxies(warmGreen.Proxies),
		// The load balancers stay published: the old backend still serves.
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("green", withStatus(ready,
			waiting(ReasonWarming, "0/2 Envoy pods of contour-external serve default/green:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonWarming, "Warm proxies reference default/blue:80, default/green:80")},
	}, {
		// An HTTPS-only Envoy Service: the prober reaches its pods over
		// HTTPS only, so the warm proxy terminates TLS, with the KIngress's
		// own certificate.
		Name: "HTTPS-only Envoy Service: the warm proxy terminates TLS",
		Key:  "default/hello",
		Objects: objs(httpsOnlyPods, proxies(blueCertServing.Proxies), []runtime.Object{
			ing("green", withCert, withStatus(ready), func(i *v1alpha1.Ingress) { i.Status.ObservedGeneration = 1 }),
			service("blue"), service("green"),
		}),
		WantCreates: proxies(warmGreenCert.Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("green", withCert, withStatus(ready,
			waiting(ReasonWarming, "0/2 Envoy pods of contour-external serve default/green:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonWarming, "Warm proxies reference default/blue:80, default/green:80")},
	}, {
		// Without a certificate there is nothing to warm over HTTPS with:
		// refused before anything is written, the old backend serving on.
		Name: "HTTPS-only Envoy Service, no certificate: the rollout is refused",
		Key:  "default/hello",
		Objects: objs(httpsOnlyPods, proxies(blueServing.Proxies), []runtime.Object{
			ing("green", withStatus(ready), func(i *v1alpha1.Ingress) { i.Status.ObservedGeneration = 1 }),
			service("blue"), service("green"),
		}),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("green", withStatus(ready,
			badInput("NoCertificateForHTTPSOnlyFleet", "the Envoy Service contour-external/envoy of class contour-external has an HTTPS port and no HTTP port, "+
				"so new backends are warmed over HTTPS, and no host of this KIngress on that class has a certificate (spec.tls), "+
				"nor does config-contour set default-tls-secret: give a host a certificate, set default-tls-secret, or add port 80 to the Envoy Service"))))},
	}, {
		Name: "warming names the pods that confirmed and the laggard, and a long wait refreshes the message",
		Key:  "default/hello",
		Objects: objs(pods, proxies(blueServing.Proxies), proxies(warmGreen.Proxies), []runtime.Object{
			ing("green", withStatus(waiting(ReasonWarming, "w"))), service("blue"), service("green"),
		}),
		OtherTestData: map[string]interface{}{proberKey: &fakeProber{progress: map[string]probe.Progress{warmGreen.Hash: {Fleets: []probe.FleetProgress{{
			Class: "contour-external", Confirmed: 1, Total: 2,
			Waiting: []probe.PodWait{{IP: "10.244.0.7", For: 12300 * time.Millisecond, LastError: "503"}},
		}}}}}},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("green", withStatus(
			waiting(ReasonWarming, "1/2 Envoy pods of contour-external serve default/green:80 (waiting: 10.244.0.7 for over 10s: 503)"))))},
		PostConditions: []func(*testing.T, *rtesting.TableRow){func(t *testing.T, row *rtesting.TableRow) {
			if got, want := row.OtherTestData[enqueuedKey].(map[string]time.Duration)["default/hello"], 7700*time.Millisecond; got != want {
				t.Errorf("requeued after %v, want %v (when the wait shown becomes 20s)", got, want)
			}
		}},
	}, {
		Name: "once every Envoy pod serves the warm backend, the serving proxy switches",
		Key:  "default/hello",
		Objects: objs(pods, proxies(blueServing.Proxies), proxies(warmGreen.Proxies), []runtime.Object{
			ing("green", withStatus(waiting(ReasonWarming, "w"))), service("blue"), service("green"),
		}),
		OtherTestData: map[string]interface{}{proberKey: &fakeProber{ready: map[string]bool{warmGreen.Hash: true}}},
		WantUpdates:   []clientgotesting.UpdateActionImpl{update(greenServing.Proxies[0])},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("green", withStatus(
			waiting(ReasonSwitching, "0/2 Envoy pods of contour-external serve default/green:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		Name: "switch confirmed: Ready, and the warm proxies are kept through the release hold",
		Key:  "default/hello",
		Objects: objs(pods, proxies(greenServing.Proxies), proxies(warmGreen.Proxies), []runtime.Object{
			ing("green", withStatus(waiting(ReasonSwitching, "s"))), service("blue"), service("green"),
		}),
		OtherTestData:     map[string]interface{}{proberKey: &fakeProber{ready: map[string]bool{greenServing.Hash: true}}},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("green", withStatus(ready)))},
		PostConditions: []func(*testing.T, *rtesting.TableRow){func(t *testing.T, row *rtesting.TableRow) {
			if got := row.OtherTestData[enqueuedKey].(map[string]time.Duration)["default/hello"]; got != testCfg.ReleaseHold {
				t.Errorf("requeued after %v, want the release hold %v", got, testCfg.ReleaseHold)
			}
		}},
	}, {
		Name: "warm proxies are released once the hold has passed since Ready",
		Key:  "default/hello",
		Objects: objs(pods, proxies(greenServing.Proxies), proxies(warmGreen.Proxies), []runtime.Object{
			ing("green", withStatus(readyAt(now.Add(-time.Minute)))), service("blue"), service("green"),
		}),
		WantDeletes: []clientgotesting.DeleteActionImpl{deleteOf(warmGreen.Proxies[0])},
		WantEvents:  []string{rtesting.Eventf(corev1.EventTypeNormal, "Released", "Warm proxies deleted")},
	}, {
		Name: "a host that left the spec loses its proxy, with no warm needed for an unchanged backend",
		Key:  "default/hello",
		Objects: objs(pods, proxies(twoHostServing.Proxies), []runtime.Object{
			oneHost, service("blue"),
		}),
		WantUpdates: []clientgotesting.UpdateActionImpl{update(oneHostServing.Proxies[0])},
		WantDeletes: deletesOfMissing(twoHostServing.Proxies, oneHostServing.Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withHosts("a.example.com"), withStatus(
			waiting(ReasonSwitching, "0/2 Envoy pods of contour-external serve default/blue:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		Name: "a fresh ExternalName backend behind rewriteHost is warmed like any other, its warm route sending the rewritten Host",
		Key:  "default/hello",
		Objects: objs(pods, proxies(blueServing.Proxies), []runtime.Object{
			mapped(withStatus(ready), func(i *v1alpha1.Ingress) { i.Status.ObservedGeneration = 1 }),
			service("blue"), mappedSvc,
		}),
		WantCreates: proxies(warmMapped.Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(mapped(withStatus(ready,
			waiting(ReasonWarming, "0/2 Envoy pods of contour-external serve default/mapped:80 as Host "+private))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonWarming, "Warm proxies reference default/blue:80, default/mapped:80 as Host "+private)},
	}, {
		// Held without its Host, the served cluster would be dropped at
		// the switch while Envoy pods still route to it: 503 NC.
		Name: "a route behind rewriteHost moving to another Service holds the served cluster under its rewritten Host",
		Key:  "default/hello",
		Objects: objs(pods, proxies(serving(t, mapped()).Proxies), []runtime.Object{
			remapped.DeepCopy(), mappedSvc, mapped2Svc,
		}),
		WantCreates: proxies(warm(t, remapped, rewritten("mapped", "mapped2"), rewritten("mapped2")).Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("mapped2", func(i *v1alpha1.Ingress) {
			i.Spec.Rules[0].HTTP.Paths[0].RewriteHost = private
		}, withStatus(waiting(ReasonWarming, "0/2 Envoy pods of contour-external serve default/mapped2:80 as Host "+private))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonWarming,
			"Warm proxies reference default/mapped:80 as Host %s, default/mapped2:80 as Host %s", private, private)},
	}, {
		Name: "Contour refusing ExternalName Services fails the KIngress with its reason before the switch: the old backend keeps serving",
		Key:  "default/hello",
		Objects: objs(pods, proxies(blueServing.Proxies), []runtime.Object{
			refusedWarm, mapped(withStatus(waiting(ReasonWarming, "w"))), service("blue"), mappedSvc,
		}),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(mapped(withStatus(waiting(ReasonWarming, "w"), func(i *v1alpha1.Ingress) {
			markProxyInvalid(i, refusedWarm.Name, "At least one error present, see Errors for details; "+externalNameRefused)
		})))},
	}, {
		// The generated reconciler bumps observedGeneration even when
		// ReconcileKind failed (a conflict) before marking anything; the
		// proxies were then written by a later attempt.
		Name: "a new generation is probed even though the previous one's LoadBalancerReady=True was carried over by a failed reconcile",
		Key:  "default/hello",
		Objects: objs(pods, proxies(blueServing.Proxies), []runtime.Object{
			ing("blue", withStatus(ready, newGenerationFailed)), service("blue"),
		}),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(ready, newGenerationFailed,
			waiting(ReasonSwitching, "0/2 Envoy pods of contour-external serve default/blue:80"))))},
	}, {
		// The generated reconciler finds the key gone and calls
		// ObserveDeletion, on every replica (an observer too).
		Name:    "a deleted KIngress: its probe rounds are cancelled",
		Key:     "default/hello",
		Objects: pods,
		PostConditions: []func(*testing.T, *rtesting.TableRow){func(t *testing.T, row *rtesting.TableRow) {
			want := []types.NamespacedName{{Namespace: testNS, Name: testName}, {Namespace: testNS, Name: testName + resources.WarmSuffix}}
			if diff := cmp.Diff(want, row.OtherTestData[proberKey].(*fakeProber).cancelled); diff != "" {
				t.Errorf("cancelled probing (-want, +got):\n%s", diff)
			}
		}},
	}, {
		Name: "net-contour's proxy of the same backend is taken over in place: one update under its name, never a second proxy for the host",
		Key:  "default/hello",
		Objects: objs(pods, []runtime.Object{
			ncBlue, ing("blue", withStatus(ready)), service("blue"),
		}),
		WantUpdates: []clientgotesting.UpdateActionImpl{update(adopted)},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(ready,
			waiting(ReasonSwitching, "0/2 Envoy pods of contour-external serve default/blue:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		Name: "net-contour's proxy of an old backend keeps serving while the fresh one is warmed; its backend is held",
		Key:  "default/hello",
		Objects: objs(pods, []runtime.Object{
			ncBlue, ing("green", withStatus(ready), func(i *v1alpha1.Ingress) { i.Status.ObservedGeneration = 1 }),
			service("blue"), service("green"),
		}),
		WantCreates: proxies(warmGreen.Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("green", withStatus(ready,
			waiting(ReasonWarming, "0/2 Envoy pods of contour-external serve default/green:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonWarming, "Warm proxies reference default/blue:80, default/green:80")},
	}, {
		Name: "ours next to net-contour's for one host (Contour invalidated both): net-contour's goes, ours is probed",
		Key:  "default/hello",
		Objects: objs(pods, []runtime.Object{
			ncBlueInvalid, oursInvalid, ing("blue"), service("blue"),
		}),
		WantDeletes: []clientgotesting.DeleteActionImpl{deleteOf(ncBlueInvalid)},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(func(i *v1alpha1.Ingress) {
			markProxyInvalid(i, oursInvalid.Name, oursInvalid.Status.Description)
		})))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		Name: "net-contour's endpoint probe child is left alone while net-contour's proxy still serves its parent",
		Key:  "default/hello--ep",
		Objects: objs(pods, []runtime.Object{
			epChild, ncBlue, ing("blue", withStatus(ready)), service("blue"),
		}),
		PostConditions: []func(*testing.T, *rtesting.TableRow){func(t *testing.T, row *rtesting.TableRow) {
			if got := row.OtherTestData[enqueuedKey].(map[string]time.Duration)["default/hello--ep"]; got != endpointProbeRecheck {
				t.Errorf("requeued after %v, want %v", got, endpointProbeRecheck)
			}
		}},
	}, {
		Name: "net-contour's endpoint probe child is deleted once hitless serves its parent",
		Key:  "default/hello--ep",
		Objects: objs(pods, proxies(blueServing.Proxies), []runtime.Object{
			epChild, ing("blue", withStatus(ready)), service("blue"),
		}),
		WantDeletes: []clientgotesting.DeleteActionImpl{{
			ActionImpl: clientgotesting.ActionImpl{Namespace: testNS, Verb: "delete",
				Resource: v1alpha1.SchemeGroupVersion.WithResource("ingresses")},
			Name: epChild.Name,
		}},
	}, {
		Name:    "a missing backend Service is bad input: a condition names it and nothing is written",
		Key:     "default/hello",
		Objects: objs(pods, []runtime.Object{ing("blue")}),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(badInput("ServiceNotFound",
			"Service default/blue does not exist: create it or point the KIngress at an existing one"))))},
	}, {
		Name: "a new KIngress behind an authorization server: its proxy names the server, it is probed like any other, and looked at again when its wait is worth showing",
		Key:  "default/hello",
		Objects: objs(pods, []runtime.Object{
			ing("blue", withAuthorization), service("blue"),
		}),
		// Nothing may come to end the wait (a server refusing every probe
		// sends no event): the message must show the refusal by itself.
		PostConditions: []func(*testing.T, *rtesting.TableRow){func(t *testing.T, row *rtesting.TableRow) {
			if got, want := row.OtherTestData[enqueuedKey].(map[string]time.Duration)["default/hello"], progressRefresh; got != want {
				t.Errorf("requeued after %v, want %v (when the wait is first shown)", got, want)
			}
		}},
		WantCreates: proxies(serving(t, ing("blue", withAuthorization)).Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withAuthorization, withStatus(
			waiting(ReasonSwitching, "0/2 Envoy pods of contour-external serve default/blue:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		Name: "authorization added to a served KIngress: the serving proxy is updated in place, no warm (same backend)",
		Key:  "default/hello",
		Objects: objs(pods, proxies(blueServing.Proxies), []runtime.Object{
			ing("blue", withAuthorization, withStatus(ready), func(i *v1alpha1.Ingress) { i.Status.ObservedGeneration = 1 }),
			service("blue"),
		}),
		WantUpdates: []clientgotesting.UpdateActionImpl{update(serving(t, ing("blue", withAuthorization)).Proxies[0])},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withAuthorization, withStatus(ready,
			waiting(ReasonSwitching, "0/2 Envoy pods of contour-external serve default/blue:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		Name: "an ACME challenge path added to a served KIngress: the serving proxy is updated in place, no warm for the solver, only the served paths probed",
		Key:  "default/hello",
		Objects: objs(pods, proxies(blueServing.Proxies), []runtime.Object{
			ing("blue", withChallenge, withStatus(ready), func(i *v1alpha1.Ingress) { i.Status.ObservedGeneration = 1 }),
			service("blue"), service("solver"),
		}),
		WantUpdates: []clientgotesting.UpdateActionImpl{update(serving(t, ing("blue", withChallenge)).Proxies[0])},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withChallenge, withStatus(ready,
			waiting(ReasonSwitching, "0/2 Envoy pods of contour-external serve default/blue:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		Name: "authorization asked for a host without TLS is bad input: nothing is written, the served proxy stays as it is",
		Key:  "default/hello",
		Objects: objs(pods, proxies(blueServing.Proxies), []runtime.Object{
			ing("blue", withAuthorization, func(i *v1alpha1.Ingress) { i.Spec.TLS = nil }), service("blue"),
		}),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withAuthorization, func(i *v1alpha1.Ingress) { i.Spec.TLS = nil },
			withStatus(badInput("AuthorizationWithoutTLS", `host "hello.example.com" has no TLS certificate, and the KIngress's annotation `+
				`contour.networking.knative.dev/extension-service asks for authorization, which Contour applies only to hosts that terminate TLS: `+
				`give the host a certificate (spec.tls, or config-contour's default-tls-secret for external hosts), or remove the annotation`))))},
	}, {
		Name:    "a host already claimed by a user's HTTPProxy is refused without touching it",
		Key:     "default/hello",
		Objects: objs(pods, []runtime.Object{ing("blue"), service("blue"), userProxy}),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(badInput(ReasonHostConflict,
			`host "hello.example.com" is already served by HTTPProxy team/mine (a user's HTTPProxy): remove that claim or choose another host`))))},
	}, {
		// Contour judges duplicates within its class: a proxy only another
		// Contour sees, or one whose KIngress is gone, takes nothing away.
		Name:        "a host's proxy of another class or of a deleted KIngress is no claim",
		Key:         "default/hello",
		Objects:     objs(pods, []runtime.Object{ing("blue"), service("blue"), otherClass, leftover}),
		WantCreates: proxies(blueServing.Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(
			waiting(ReasonSwitching, "0/2 Envoy pods of contour-external serve default/blue:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		Name:    "two KIngresses raced for a host: the younger claim steps back and deletes its invalidated proxy",
		Key:     "default/hello",
		Objects: objs(pods, []runtime.Object{ing("blue"), service("blue"), raceLoser, raceWinner, otherIngress}),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(badInput(ReasonHostConflict,
			`host "hello.example.com" is already served by HTTPProxy other/first (the KIngress other/first): remove that claim or choose another host`))))},
		WantDeletes: []clientgotesting.DeleteActionImpl{deleteOf(raceLoser)},
	}, {
		Name:    "two KIngresses raced for a host: the first claim keeps its proxy and goes on",
		Key:     "default/hello",
		Objects: objs(pods, []runtime.Object{ing("blue"), service("blue"), raceFirst, raceSecond, otherIngress}),
		// Contour's verdict stands until the younger claim's proxy is gone;
		// that change re-reconciles this KIngress.
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(func(i *v1alpha1.Ingress) {
			markProxyInvalid(i, raceFirst.Name, raceFirst.Status.Description)
		})))},
	}, {
		Name:        "no Envoy pod to ask: NotReady naming the Envoy Service, never Ready",
		Key:         "default/hello",
		Objects:     []runtime.Object{ing("blue"), service("blue")},
		WantCreates: proxies(blueServing.Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(waiting(ReasonNoEnvoyPods,
			"Envoy Service contour-external/envoy of class contour-external does not exist: no ready Envoy pod: the KIngress cannot be confirmed until an Envoy pod is ready"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		// An HTTPS-only Envoy Service (net-contour#712) probes over HTTPS;
		// a host without a certificate has no port to be probed on.
		Name:        "HTTPS-only Envoy Service, host without TLS: NoProbePort",
		Key:         "default/hello",
		Objects:     objs(envoyHTTPSOnly("contour-external", "10.244.0.20"), []runtime.Object{ing("blue"), service("blue")}),
		WantCreates: proxies(blueServing.Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(waiting(ReasonNoProbePort,
			"the Envoy Service contour-external/envoy has no HTTP port (80, or one named http), and host hello.example.com of the KIngress "+
				"has no certificate, so it is served over plain HTTP only and cannot be probed: give it a certificate "+
				"(spec.tls, or config-contour's default-tls-secret for an external host), or add an HTTP port to the Service: no port to probe"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		Name: "Contour's verdict is read back: an invalid proxy fails the KIngress with Contour's reason",
		Key:  "default/hello",
		Objects: objs(pods, []runtime.Object{
			invalid, ing("green", withStatus(waiting(ReasonSwitching, "s"))), service("green"),
		}),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("green", withStatus(func(i *v1alpha1.Ingress) {
			markProxyInvalid(i, invalid.Name, `At least one error present, see Errors for details; Spec.VirtualHost.TLS Secret "default/cert" is invalid`)
		})))},
	}, {
		Name:         "a failed create is retried: the error surfaces and an event says so",
		Key:          "default/hello",
		Objects:      objs(pods, []runtime.Object{ing("blue"), service("blue")}),
		WithReactors: []clientgotesting.ReactionFunc{rtesting.InduceFailure("create", "httpproxies")},
		WantErr:      true,
		WantCreates:  proxies(blueServing.Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(func(i *v1alpha1.Ingress) {
			i.GetConditionSet().Manage(&i.Status).MarkUnknown(v1alpha1.IngressConditionReady, "NewObservedGenFailure", "unsuccessfully observed a new generation")
		})))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, "InternalError",
			"failed to create HTTPProxy default/%s: inducing failure for create httpproxies", blueServing.Proxies[0].Name)},
	}}
	table.Test(t, makeFactory())
}

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

func TestWaitStep(t *testing.T) {
	for _, tc := range []struct {
		wait, shown, next time.Duration
	}{
		{0, 0, 5 * time.Second},
		{4900 * time.Millisecond, 0, 5 * time.Second},
		{5 * time.Second, 5 * time.Second, 10 * time.Second},
		{9 * time.Second, 5 * time.Second, 10 * time.Second},
		{10 * time.Second, 10 * time.Second, 20 * time.Second},
		{12300 * time.Millisecond, 10 * time.Second, 20 * time.Second},
		{100 * time.Second, 80 * time.Second, 160 * time.Second},
	} {
		if shown, next := waitStep(tc.wait); shown != tc.shown || next != tc.next {
			t.Errorf("waitStep(%v) = %v, %v; want %v, %v", tc.wait, shown, next, tc.shown, tc.next)
		}
	}
}

func TestDescribeWaiting(t *testing.T) {
	for _, tc := range []struct {
		name string
		pods []probe.PodWait
		want string
	}{
		{"nobody", nil, ""},
		{"before any answer", []probe.PodWait{{IP: "10.244.0.7", For: 400 * time.Millisecond}}, " (waiting: 10.244.0.7)"},
		{"two with answers, one waiting long enough to say how long", []probe.PodWait{{IP: "10.244.0.7", For: 7200 * time.Millisecond, LastError: "503"}, {IP: "10.244.0.8", For: time.Second, LastError: "old hash"}},
			" (waiting: 10.244.0.7 for over 5s: 503, 10.244.0.8: old hash)"},
		{"a long wait shows its step", []probe.PodWait{{IP: "10.244.0.7", For: 100 * time.Second, LastError: "timeout"}},
			" (waiting: 10.244.0.7 for over 1m20s: timeout)"},
		{"more than two", []probe.PodWait{{IP: "a", For: time.Second}, {IP: "b", For: time.Second}, {IP: "c", For: time.Second}, {IP: "d", For: time.Second}},
			" (waiting: a, b, 2 more)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := describeWaiting(tc.pods); got != tc.want {
				t.Errorf("describeWaiting() = %q, want %q", got, tc.want)
			}
		})
	}
}

// withAuthorization puts the KIngress's hosts behind the ExtensionService
// auth/authz, with the certificate Contour requires for that.
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
