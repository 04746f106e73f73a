package contour

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgotesting "k8s.io/client-go/testing"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	rtesting "knative.dev/pkg/reconciler/testing"

	"github.com/hitless/hitless/pkg/probe"
	"github.com/hitless/hitless/pkg/resources"
)

func TestReconcile(t *testing.T) {
	f := fixtures(t)

	table := rtesting.TableTest{{
		Name: "bad workqueue key",
		Key:  "too/many/parts",
	}, {
		Name: "key not found",
		Key:  "foo/not-found",
	}, {
		Name: "a KIngress of another class is left untouched",
		Key:  "default/hello",
		Objects: objs(f.pods, []runtime.Object{
			ing("blue", withClass("istio.ingress.networking.knative.dev")), service("blue"),
		}),
	}, {
		// The generated reconciler bumps observedGeneration even when
		// ReconcileKind failed (a conflict) before marking anything; the
		// proxies were then written by a later attempt.
		Name: "a new generation is probed even though the previous one's LoadBalancerReady=True was carried over by a failed reconcile",
		Key:  "default/hello",
		Objects: objs(f.pods, proxies(f.blueServing.Proxies), []runtime.Object{
			ing("blue", withStatus(ready, newGenerationFailed)), service("blue"),
		}),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(ready, newGenerationFailed,
			waiting(ReasonSwitching, "0/2 Envoy pods of contour-external serve default/blue:80"))))},
	}, {
		// The generated reconciler finds the key gone and calls
		// ObserveDeletion, on every replica (an observer too).
		Name:    "a deleted KIngress: its probe rounds are cancelled",
		Key:     "default/hello",
		Objects: f.pods,
		PostConditions: []func(*testing.T, *rtesting.TableRow){func(t *testing.T, row *rtesting.TableRow) {
			want := []types.NamespacedName{{Namespace: testNS, Name: testName}, {Namespace: testNS, Name: testName + resources.WarmSuffix}}
			if diff := cmp.Diff(want, row.OtherTestData[proberKey].(*fakeProber).cancelled); diff != "" {
				t.Errorf("cancelled probing (-want, +got):\n%s", diff)
			}
		}},
	}, {
		Name:    "a missing backend Service is bad input: a condition names it and nothing is written",
		Key:     "default/hello",
		Objects: objs(f.pods, []runtime.Object{ing("blue")}),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(badInput("ServiceNotFound",
			"Service default/blue does not exist: create it or point the KIngress at an existing one"))))},
	}, {
		Name: "a new KIngress behind an authorization server: its proxy names the server, it is probed like any other, and looked at again when its wait is worth showing",
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
			waiting(ReasonSwitching, "0/2 Envoy pods of contour-external serve default/blue:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		Name: "authorization asked for a host without TLS is bad input: nothing is written, the served proxy stays as it is",
		Key:  "default/hello",
		Objects: objs(f.pods, proxies(f.blueServing.Proxies), []runtime.Object{
			ing("blue", withAuthorization, func(i *v1alpha1.Ingress) { i.Spec.TLS = nil }), service("blue"),
		}),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withAuthorization, func(i *v1alpha1.Ingress) { i.Spec.TLS = nil },
			withStatus(badInput("AuthorizationWithoutTLS", `host "hello.example.com" has no TLS certificate, and the KIngress's annotation `+
				`contour.networking.knative.dev/extension-service asks for authorization, which Contour applies only to hosts that terminate TLS: `+
				`give the host a certificate (spec.tls, or config-contour's default-tls-secret for external hosts), or remove the annotation`))))},
	}, {
		Name:        "no Envoy pod to ask: NotReady naming the Envoy Service, never Ready",
		Key:         "default/hello",
		Objects:     []runtime.Object{ing("blue"), service("blue")},
		WantCreates: proxies(f.blueServing.Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(waiting(ReasonNoEnvoyPods,
			"Envoy Service contour-external/envoy of class contour-external does not exist: no ready Envoy pod: the KIngress cannot be confirmed until an Envoy pod is ready"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		// An HTTPS-only Envoy Service (net-contour#712) probes over HTTPS;
		// a host without a certificate has no port to be probed on.
		Name:        "HTTPS-only Envoy Service, host without TLS: NoProbePort",
		Key:         "default/hello",
		Objects:     objs(envoyHTTPSOnly("contour-external", "10.244.0.20"), []runtime.Object{ing("blue"), service("blue")}),
		WantCreates: proxies(f.blueServing.Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(waiting(ReasonNoProbePort,
			"the Envoy Service contour-external/envoy has no HTTP port (80, or one named http), and host hello.example.com of the KIngress "+
				"has no certificate, so it is served over plain HTTP only and cannot be probed: give it a certificate "+
				"(spec.tls, or config-contour's default-tls-secret for an external host), or add an HTTP port to the Service: no port to probe"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		Name: "Contour's verdict is read back: an invalid proxy fails the KIngress with Contour's reason",
		Key:  "default/hello",
		Objects: objs(f.pods, []runtime.Object{
			f.invalid, ing("green", withStatus(waiting(ReasonSwitching, "s"))), service("green"),
		}),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("green", withStatus(func(i *v1alpha1.Ingress) {
			markProxyInvalid(i, f.invalid.Name, `At least one error present, see Errors for details; Spec.VirtualHost.TLS Secret "default/cert" is invalid`)
		})))},
	}, {
		Name:         "a failed create is retried: the error surfaces and an event says so",
		Key:          "default/hello",
		Objects:      objs(f.pods, []runtime.Object{ing("blue"), service("blue")}),
		WithReactors: []clientgotesting.ReactionFunc{rtesting.InduceFailure("create", "httpproxies")},
		WantErr:      true,
		WantCreates:  proxies(f.blueServing.Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(func(i *v1alpha1.Ingress) {
			i.GetConditionSet().Manage(&i.Status).MarkUnknown(v1alpha1.IngressConditionReady, "NewObservedGenFailure", "unsuccessfully observed a new generation")
		})))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, "InternalError",
			"failed to create HTTPProxy default/%s: inducing failure for create httpproxies", f.blueServing.Proxies[0].Name)},
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
