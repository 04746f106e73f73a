package contour

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	clientgotesting "k8s.io/client-go/testing"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	rtesting "knative.dev/pkg/reconciler/testing"

	"github.com/hitless/hitless/pkg/probe"
	"github.com/hitless/hitless/pkg/resources"
)

// TestProbing covers the probe waits (probing.go): Contour's verdict on
// the proxies is read first, a fleet without a ready Envoy pod or a port to
// probe on holds the KIngress NotReady with the reason, and a wait is shown
// and refreshed in the KIngress's status.
func TestProbing(t *testing.T) {
	f := fixtures(t)

	table := rtesting.TableTest{{
		// Nothing to ask: NotReady naming the Envoy Service, never Ready.
		Name:        "no Envoy pod",
		Key:         "default/hello",
		Objects:     []runtime.Object{ing("blue"), service("blue")},
		WantCreates: proxies(f.blueServing.Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(waiting(ReasonNoEnvoyPods,
			"Envoy Service contour-external/envoy of class contour-external does not exist: no ready Envoy pod: the KIngress cannot be confirmed until an Envoy pod is ready"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		// An HTTPS-only Envoy Service (net-contour#712) probes over HTTPS;
		// a host without a certificate has no port to be probed on.
		Name:        "HTTPS-only fleet, no certificate: NoProbePort",
		Key:         "default/hello",
		Objects:     objs(envoyHTTPSOnly("contour-external", "10.244.0.20"), []runtime.Object{ing("blue"), service("blue")}),
		WantCreates: proxies(f.blueServing.Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(waiting(ReasonNoProbePort,
			"the Envoy Service contour-external/envoy has no HTTP port (80, or one named http), and host hello.example.com of the KIngress "+
				"has no certificate, so it is served over plain HTTP only and cannot be probed: give it a certificate "+
				"(spec.tls, or config-contour's default-tls-secret for an external host), or add an HTTP port to the Service: no port to probe"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		// Contour's verdict is read back: an invalid proxy fails the
		// KIngress with Contour's reason.
		Name: "Contour's verdict: invalid",
		Key:  "default/hello",
		Objects: objs(f.pods, []runtime.Object{
			f.invalid, ing("green", withStatus(waiting(ReasonSwitching, "s"))), service("green"),
		}),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("green", withStatus(func(i *v1alpha1.Ingress) {
			markProxyInvalid(i, f.invalid.Name, `At least one error present, see Errors for details; Spec.VirtualHost.TLS Secret "default/cert" is invalid`)
		})))},
	}, {
		// A new KIngress behind an authorization server: its proxy names the
		// server, it is probed like any other, and looked at again when its
		// wait is worth showing.
		Name: "authorization server: wait shown",
		Key:  "default/hello",
		Objects: objs(f.pods, []runtime.Object{
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
			waiting(ReasonSwitching, "waiting for 2 Envoy pods of contour-external to serve default/blue:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}}
	table.Test(t, makeFactory())
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

// TestDescribeProgress: the message of a wait changes, and costs a status
// write, only once a laggard is worth naming: 5 s of an answer an operator
// can act on, or a minute behind Contour's pushes without taking one.
func TestDescribeProgress(t *testing.T) {
	fleets := []fleetWait{{class: "contour-external", pods: fleetPods{IPs: sets.New("10.244.0.7", "10.244.0.8"), NotReady: sets.New[string]()}}}
	awaited := resources.ClassBackends{"contour-external": sets.New(resources.Backend{Namespace: "default", Name: "green", Port: 80})}
	waitingOn := func(w probe.PodWait) probe.Progress {
		return probe.Progress{Fleets: []probe.FleetProgress{{Class: "contour-external", Confirmed: 1, Total: 2, Waiting: []probe.PodWait{w}}}}
	}
	const quiet = "waiting for 2 Envoy pods of contour-external to serve default/green:80"
	for _, tc := range []struct {
		name     string
		progress probe.Progress
		want     string
	}{
		{"no answer yet", waitingOn(probe.PodWait{IP: "10.244.0.7", For: 30 * time.Second, Stalled: 30 * time.Second, Behind: true}), quiet},
		{"behind on pushes for 30s", waitingOn(probe.PodWait{IP: "10.244.0.7", For: 30 * time.Second, Stalled: 30 * time.Second, LastError: "404", Behind: true}), quiet},
		{"behind for 3m, taking pushes", waitingOn(probe.PodWait{IP: "10.244.0.7", For: 3 * time.Minute, Stalled: 2 * time.Second, LastError: "404", Behind: true}), quiet},
		{"behind, no push for a minute, its peer taking them", waitingOn(probe.PodWait{IP: "10.244.0.7", For: 61 * time.Second, Stalled: 61 * time.Second, FleetStalled: 2 * time.Second, LastError: "404", Behind: true}),
			"1/2 Envoy pods of contour-external serve default/green:80 (waiting: 10.244.0.7 for over 40s: 404)"},
		{"behind, no push to the fleet for a minute", waitingOn(probe.PodWait{IP: "10.244.0.7", For: 3 * time.Minute, Stalled: 81 * time.Second, FleetStalled: 81 * time.Second, LastError: "404", Behind: true}), quiet},
		{"no answer yet, no push to the fleet for a minute", waitingOn(probe.PodWait{IP: "10.244.0.7", For: 81 * time.Second, Stalled: 81 * time.Second, FleetStalled: 81 * time.Second, Behind: true}), quiet},
		{"a 503 for 2s", waitingOn(probe.PodWait{IP: "10.244.0.7", For: 2 * time.Second, Stalled: 2 * time.Second, LastError: "503"}), quiet},
		{"a 503 for 6s", waitingOn(probe.PodWait{IP: "10.244.0.7", For: 6 * time.Second, Stalled: 6 * time.Second, LastError: "503"}),
			"1/2 Envoy pods of contour-external serve default/green:80 (waiting: 10.244.0.7 for over 5s: 503)"},
		{"a 503 for 30s with other rounds, the pod taking pushes", waitingOn(probe.PodWait{IP: "10.244.0.7", For: 30 * time.Second, Stalled: time.Second, LastError: "503", Behind: true}), quiet},
		{"a 503 for 30s alone, the pod taking pushes", waitingOn(probe.PodWait{IP: "10.244.0.7", For: 30 * time.Second, Stalled: time.Second, LastError: "503"}),
			"1/2 Envoy pods of contour-external serve default/green:80 (waiting: 10.244.0.7 for over 20s: 503)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, _ := describeProgress(fleets, tc.progress, awaited); got != tc.want {
				t.Errorf("describeProgress() = %q, want %q", got, tc.want)
			}
		})
	}
}
