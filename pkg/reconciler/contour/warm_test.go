package contour

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgotesting "k8s.io/client-go/testing"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	rtesting "knative.dev/pkg/reconciler/testing"

	"github.com/hitless/hitless/pkg/probe"
)

// TestWarm covers the Warm phase (warm.go): a rollout that brings new
// backends in writes warm proxies holding the backends served now and the
// new ones, and waits until every Envoy pod serves the new ones.
func TestWarm(t *testing.T) {
	f := fixtures(t)

	table := rtesting.TableTest{{
		// The warm proxy holds the old backend and the new; the serving
		// proxy is untouched.
		Name: "fresh backend warmed first",
		Key:  "default/hello",
		Objects: objs(f.pods, proxies(f.blueServing.Proxies), []runtime.Object{
			ing("green", withStatus(ready), func(i *v1alpha1.Ingress) { i.Status.ObservedGeneration = 1 }),
			service("blue"), service("green"),
		}),
		WantCreates: proxies(f.warmGreen.Proxies),
		// The load balancers stay published: the old backend still serves.
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("green", withStatus(ready,
			waiting(ReasonWarming, "waiting for 2 Envoy pods of contour-external to serve default/green:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonWarming, "Warm proxies reference default/blue:80, default/green:80")},
	}, {
		// An HTTPS-only Envoy Service: the prober reaches its pods over
		// HTTPS only, so the warm proxy terminates TLS, with the KIngress's
		// own certificate.
		Name: "HTTPS-only fleet: TLS warm proxy",
		Key:  "default/hello",
		Objects: objs(f.httpsOnlyPods, proxies(f.blueCertServing.Proxies), []runtime.Object{
			ing("green", withCert, withStatus(ready), func(i *v1alpha1.Ingress) { i.Status.ObservedGeneration = 1 }),
			service("blue"), service("green"),
		}),
		WantCreates: proxies(f.warmGreenCert.Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("green", withCert, withStatus(ready,
			waiting(ReasonWarming, "waiting for 2 Envoy pods of contour-external to serve default/green:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonWarming, "Warm proxies reference default/blue:80, default/green:80")},
	}, {
		// Without a certificate there is nothing to warm over HTTPS with:
		// refused before anything is written, the old backend serving on.
		Name: "HTTPS-only fleet, no certificate: refused",
		Key:  "default/hello",
		Objects: objs(f.httpsOnlyPods, proxies(f.blueServing.Proxies), []runtime.Object{
			ing("green", withStatus(ready), func(i *v1alpha1.Ingress) { i.Status.ObservedGeneration = 1 }),
			service("blue"), service("green"),
		}),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("green", withStatus(ready,
			badInput("NoCertificateForHTTPSOnlyFleet", "the Envoy Service contour-external/envoy of class contour-external has an HTTPS port and no HTTP port, "+
				"so new backends are warmed over HTTPS, and no host of this KIngress on that class has a certificate (spec.tls), "+
				"nor does config-contour set default-tls-secret: give a host a certificate, set default-tls-secret, or add port 80 to the Envoy Service"))))},
	}, {
		// The message counts the pods that confirmed and names the one still
		// waiting, with its wait and last answer; the KIngress is looked at
		// again when the wait shown changes, so a long wait refreshes the
		// message.
		Name: "warming progress message",
		Key:  "default/hello",
		Objects: objs(f.pods, proxies(f.blueServing.Proxies), proxies(f.warmGreen.Proxies), []runtime.Object{
			ing("green", withStatus(waiting(ReasonWarming, "w"))), service("blue"), service("green"),
		}),
		OtherTestData: map[string]interface{}{proberKey: &fakeProber{progress: map[string]probe.Progress{f.warmGreen.Hash: {Fleets: []probe.FleetProgress{{
			Class: "contour-external", Confirmed: 1, Total: 2,
			Waiting: []probe.PodWait{{IP: "10.244.0.7", For: 12300 * time.Millisecond, Stalled: 12300 * time.Millisecond, LastError: "503"}},
		}}}}}},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("green", withStatus(
			waiting(ReasonWarming, "1/2 Envoy pods of contour-external serve default/green:80 (waiting: 10.244.0.7 for over 10s: 503)"))))},
		PostConditions: []func(*testing.T, *rtesting.TableRow){func(t *testing.T, row *rtesting.TableRow) {
			if got, want := row.OtherTestData[enqueuedKey].(map[string]time.Duration)["default/hello"], 7700*time.Millisecond; got != want {
				t.Errorf("requeued after %v, want %v (when the wait shown becomes 20s)", got, want)
			}
		}},
	}, {
		// Under system-internal-tls a fresh backend is warmed like any
		// other: the warm proxy holds the served TLS backend and the new
		// one, both validated.
		Name: "system-internal-tls: TLS backends warmed",
		Key:  "default/hello",
		Objects: objs(f.pods, proxies(f.blueTLS.Proxies), []runtime.Object{
			ing("green", withStatus(ready), func(i *v1alpha1.Ingress) { i.Status.ObservedGeneration = 1 }),
			service("blue"), service("green"),
		}),
		OtherTestData: map[string]interface{}{configKey: f.internalTLS},
		WantCreates:   proxies(f.warmGreenTLS.Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("green", withStatus(ready,
			waiting(ReasonWarming, "waiting for 2 Envoy pods of contour-external to serve default/green:80 (tls)"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonWarming, "Warm proxies reference default/blue:80 (tls), default/green:80 (tls)")},
	}, {
		// A DomainMapping's fresh ExternalName backend is warmed like any
		// other, its warm route sending the rewritten Host.
		Name: "rewriteHost to ExternalName: warmed",
		Key:  "default/hello",
		Objects: objs(f.pods, proxies(f.blueServing.Proxies), []runtime.Object{
			mapped(withStatus(ready), func(i *v1alpha1.Ingress) { i.Status.ObservedGeneration = 1 }),
			service("blue"), f.mappedSvc,
		}),
		WantCreates: proxies(f.warmMapped.Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(mapped(withStatus(ready,
			waiting(ReasonWarming, "waiting for 2 Envoy pods of contour-external to serve default/mapped:80 as Host "+privateHost))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonWarming, "Warm proxies reference default/blue:80, default/mapped:80 as Host "+privateHost)},
	}, {
		// A route behind rewriteHost moving to another Service holds the
		// served cluster under its rewritten Host. Held without its Host,
		// the served cluster would be dropped at the switch while Envoy pods
		// still route to it: 503 NC.
		Name: "rewriteHost, new Service: held with its Host",
		Key:  "default/hello",
		Objects: objs(f.pods, proxies(serving(t, mapped()).Proxies), []runtime.Object{
			f.remapped.DeepCopy(), f.mappedSvc, f.mapped2Svc,
		}),
		WantCreates: proxies(warm(t, f.remapped, rewritten("mapped", "mapped2"), rewritten("mapped2")).Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("mapped2", func(i *v1alpha1.Ingress) {
			i.Spec.Rules[0].HTTP.Paths[0].RewriteHost = privateHost
		}, withStatus(waiting(ReasonWarming, "waiting for 2 Envoy pods of contour-external to serve default/mapped2:80 as Host "+privateHost))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonWarming,
			"Warm proxies reference default/mapped:80 as Host %s, default/mapped2:80 as Host %s", privateHost, privateHost)},
	}, {
		// Contour's reason fails the KIngress before the switch; the old
		// backend keeps serving.
		Name: "ExternalName refused by Contour: no switch",
		Key:  "default/hello",
		Objects: objs(f.pods, proxies(f.blueServing.Proxies), []runtime.Object{
			f.refusedWarm, mapped(withStatus(waiting(ReasonWarming, "w"))), service("blue"), f.mappedSvc,
		}),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(mapped(withStatus(waiting(ReasonWarming, "w"), func(i *v1alpha1.Ingress) {
			markProxyInvalid(i, f.refusedWarm.Name, "At least one error present, see Errors for details; "+externalNameRefused)
		})))},
	}, {
		// net-contour's proxy of the old backend keeps serving while the
		// fresh one is warmed.
		Name: "net-contour's old backend held",
		Key:  "default/hello",
		Objects: objs(f.pods, []runtime.Object{
			f.ncBlue, ing("green", withStatus(ready), func(i *v1alpha1.Ingress) { i.Status.ObservedGeneration = 1 }),
			service("blue"), service("green"),
		}),
		WantCreates: proxies(f.warmGreen.Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("green", withStatus(ready,
			waiting(ReasonWarming, "waiting for 2 Envoy pods of contour-external to serve default/green:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonWarming, "Warm proxies reference default/blue:80, default/green:80")},
	}}
	table.Test(t, makeFactory())
}
