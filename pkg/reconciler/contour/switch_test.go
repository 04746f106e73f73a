package contour

import (
	"testing"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgotesting "k8s.io/client-go/testing"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	rtesting "knative.dev/pkg/reconciler/testing"

	"github.com/hitless/hitless/pkg/config"
)

// TestSwitch covers the Switch phase (switch.go): the serving proxies are
// written as desired, proxies of hosts that left the spec go, and the
// KIngress is Ready once every Envoy pod serves the new proxies; a Ready
// KIngress whose routes did not change is not probed again.
func TestSwitch(t *testing.T) {
	f := fixtures(t)

	table := rtesting.TableTest{{
		// Nothing served yet, so nothing to warm: the serving proxy is
		// created and probed.
		Name: "brand-new KIngress",
		Key:  "default/hello",
		Objects: objs(f.pods, []runtime.Object{
			ing("blue"), service("blue"),
		}),
		WantCreates: proxies(f.blueServing.Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(
			waiting(ReasonSwitching, "waiting for 2 Envoy pods of contour-external to serve default/blue:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		// Once every Envoy pod serves the warm backend, the serving proxy
		// switches to it.
		Name: "switch after warm",
		Key:  "default/hello",
		Objects: objs(f.pods, proxies(f.blueServing.Proxies), proxies(f.warmGreen.Proxies), []runtime.Object{
			ing("green", withStatus(waiting(ReasonWarming, "w"))), service("blue"), service("green"),
		}),
		OtherTestData: map[string]interface{}{proberKey: &fakeProber{ready: map[string]bool{f.warmGreen.Hash: true}}},
		WantUpdates:   []clientgotesting.UpdateActionImpl{update(f.greenServing.Proxies[0])},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("green", withStatus(
			waiting(ReasonSwitching, "waiting for 2 Envoy pods of contour-external to serve default/green:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		// Ready with its proxies current: nothing is written, nothing
		// probed.
		Name: "steady state",
		Key:  "default/hello",
		Objects: objs(f.pods, proxies(f.greenServing.Proxies), []runtime.Object{
			ing("green", withStatus(ready)), service("green"),
		}),
	}, {
		// A host that left the spec loses its proxy; the backend is
		// unchanged, so nothing is warmed.
		Name: "stale host deleted",
		Key:  "default/hello",
		Objects: objs(f.pods, proxies(f.twoHostServing.Proxies), []runtime.Object{
			f.oneHost, service("blue"),
		}),
		WantUpdates: []clientgotesting.UpdateActionImpl{update(f.oneHostServing.Proxies[0])},
		WantDeletes: deletesOfMissing(f.twoHostServing.Proxies, f.oneHostServing.Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withHosts("a.example.com"), withStatus(
			waiting(ReasonSwitching, "waiting for 2 Envoy pods of contour-external to serve default/blue:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		// A config-contour change of what the routes do (retries off)
		// rewrites the serving proxy, which is probed again at the proxies'
		// new hash.
		Name: "config change reprobed",
		Key:  "default/hello",
		Objects: objs(f.pods, proxies(f.greenServing.Proxies), []runtime.Object{
			ing("green", withStatus(ready)), service("green"),
		}),
		// The old routes' round was confirmed; it must not stand for the new ones.
		OtherTestData: map[string]interface{}{configKey: &config.Config{Contour: f.noRetries},
			proberKey: &fakeProber{ready: map[string]bool{f.greenServing.Hash: true}}},
		WantUpdates: []clientgotesting.UpdateActionImpl{update(f.greenNoRetries.Proxies[0])},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("green", withStatus(ready,
			waiting(ReasonSwitching, "waiting for 2 Envoy pods of contour-external to serve default/green:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		// Serving proxies without net-contour's labels, as written before
		// hitless set them, get them in one update: the routes are
		// unchanged, so no probe, and the KIngress stays Ready.
		Name: "net-contour labels added, no probe",
		Key:  "default/hello",
		Objects: objs(f.pods, proxies([]*contourv1.HTTPProxy{withoutNetContourLabels(f.greenServing.Proxies[0])}), []runtime.Object{
			ing("green", withStatus(ready)), service("green"),
		}),
		OtherTestData: map[string]interface{}{proberKey: &fakeProber{}},
		WantUpdates:   []clientgotesting.UpdateActionImpl{update(f.greenServing.Proxies[0])},
	}, {
		// An annotation added to a Ready KIngress reaches its serving proxy
		// in one update: the routes are unchanged, so no probe, and it stays
		// Ready.
		Name: "annotation added, no probe",
		Key:  "default/hello",
		Objects: objs(f.pods, proxies(f.greenServing.Proxies), []runtime.Object{
			ing("green", withStatus(ready), withAnnotation("example.com/team", "payments")), service("green"),
		}),
		OtherTestData: map[string]interface{}{proberKey: &fakeProber{}},
		WantUpdates:   []clientgotesting.UpdateActionImpl{update(f.annotatedGreen.Proxies[0])},
	}, {
		// A Ready status without the Envoy Service's ClusterIP, as written
		// before hitless reported it, gets it: no proxy written, no probe.
		Name: "Ready status gains ClusterIP",
		Key:  "default/hello",
		Objects: objs(f.pods, proxies(f.greenServing.Proxies), []runtime.Object{
			ing("green", withStatus(ready, withoutLoadBalancerIPs)), service("green"),
		}),
		OtherTestData:     map[string]interface{}{proberKey: &fakeProber{}},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("green", withStatus(ready)))},
	}, {
		// An ExternalIP rule's host in the cluster's domain is served by the
		// internal fleet and probed there.
		Name: "cluster-domain host: internal fleet",
		Key:  "default/hello",
		Objects: objs(f.pods, envoy("contour-internal", "10.244.0.30"), []runtime.Object{
			clusterDomainHost(), service("blue"),
		}),
		WantCreates: proxies(f.clusterDomainServing.Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(clusterDomainHost(withStatus(
			waiting(ReasonSwitching, "waiting for 1 Envoy pods of contour-internal to serve default/blue:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		// Authorization added to a served KIngress updates its serving proxy
		// in place: the backend is the same, so nothing is warmed.
		Name: "authorization added in place",
		Key:  "default/hello",
		Objects: objs(f.pods, proxies(f.blueServing.Proxies), []runtime.Object{
			ing("blue", withAuthorization, withStatus(ready), func(i *v1alpha1.Ingress) { i.Status.ObservedGeneration = 1 }),
			service("blue"),
		}),
		WantUpdates: []clientgotesting.UpdateActionImpl{update(serving(t, ing("blue", withAuthorization)).Proxies[0])},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withAuthorization, withStatus(ready,
			waiting(ReasonSwitching, "waiting for 2 Envoy pods of contour-external to serve default/blue:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		// An ACME challenge path added to a served KIngress updates its
		// serving proxy in place: the solver is not warmed, and only the
		// served paths are probed.
		Name: "ACME challenge added in place",
		Key:  "default/hello",
		Objects: objs(f.pods, proxies(f.blueServing.Proxies), []runtime.Object{
			ing("blue", withChallenge, withStatus(ready), func(i *v1alpha1.Ingress) { i.Status.ObservedGeneration = 1 }),
			service("blue"), service("solver"),
		}),
		WantUpdates: []clientgotesting.UpdateActionImpl{update(serving(t, ing("blue", withChallenge)).Proxies[0])},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withChallenge, withStatus(ready,
			waiting(ReasonSwitching, "waiting for 2 Envoy pods of contour-external to serve default/blue:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}}
	table.Test(t, makeFactory())
}
