package contour

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgotesting "k8s.io/client-go/testing"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	rtesting "knative.dev/pkg/reconciler/testing"

	"github.com/hitless/hitless/pkg/probe"
)

// TestReconcile covers ReconcileKind itself (contour.go) and the generated
// reconciler around it: workqueue keys, the class filter, deletion through
// ObserveDeletion, bad input refused before anything is written, a failed
// write, and a status carried over by a failed reconcile. Each phase has a
// table test of its own, in the phase's _test.go file.
func TestReconcile(t *testing.T) {
	f := fixtures(t)

	table := rtesting.TableTest{{
		Name: "bad workqueue key",
		Key:  "too/many/parts",
	}, {
		Name: "key not found",
		Key:  "foo/not-found",
	}, {
		Name: "other class: untouched",
		Key:  "default/hello",
		Objects: objs(f.pods, []runtime.Object{
			ing("blue", withClass("istio.ingress.networking.knative.dev")), service("blue"),
		}),
	}, {
		// The generated reconciler finds the key gone and calls
		// ObserveDeletion, on every replica (an observer too).
		Name:    "deleted: probe rounds cancelled",
		Key:     "default/hello",
		Objects: f.pods,
		PostConditions: []func(*testing.T, *rtesting.TableRow){func(t *testing.T, row *rtesting.TableRow) {
			key := types.NamespacedName{Namespace: testNS, Name: testName}
			want := []probe.RoundKey{{NamespacedName: key}, {NamespacedName: key, Warm: true}}
			if diff := cmp.Diff(want, row.OtherTestData[proberKey].(*fakeProber).cancelled); diff != "" {
				t.Errorf("cancelled probing (-want, +got):\n%s", diff)
			}
		}},
	}, {
		// The condition names the Service; nothing is written.
		Name:    "missing backend Service: bad input",
		Key:     "default/hello",
		Objects: objs(f.pods, []runtime.Object{ing("blue")}),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(badInput("ServiceNotFound",
			"Service default/blue does not exist: create it or point the KIngress at an existing one"))))},
	}, {
		// Nothing is written: the served proxy stays as it is.
		Name: "authorization without TLS: bad input",
		Key:  "default/hello",
		Objects: objs(f.pods, proxies(f.blueServing.Proxies), []runtime.Object{
			ing("blue", withAuthorization, func(i *v1alpha1.Ingress) { i.Spec.TLS = nil }), service("blue"),
		}),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withAuthorization, func(i *v1alpha1.Ingress) { i.Spec.TLS = nil },
			withStatus(badInput("AuthorizationWithoutTLS", `host "hello.example.com" has no TLS certificate, and the KIngress's annotation `+
				`contour.networking.knative.dev/extension-service asks for authorization, which Contour applies only to hosts that terminate TLS: `+
				`give the host a certificate (spec.tls, or config-contour's default-tls-secret for external hosts), or remove the annotation`))))},
	}, {
		// The error surfaces, so the key is retried, and an event says so.
		Name:         "failed create retried",
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
	}, {
		// The generated reconciler bumps observedGeneration even when
		// ReconcileKind failed (a conflict) before marking anything, so the
		// previous generation's LoadBalancerReady=True is carried over; the
		// proxies were then written by a later attempt. The new generation
		// is probed all the same.
		Name: "Ready carried over by a failed reconcile",
		Key:  "default/hello",
		Objects: objs(f.pods, proxies(f.blueServing.Proxies), []runtime.Object{
			ing("blue", withStatus(ready, newGenerationFailed)), service("blue"),
		}),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(ready, newGenerationFailed,
			waiting(ReasonSwitching, "waiting for 2 Envoy pods of contour-external to serve default/blue:80"))))},
	}}
	table.Test(t, makeFactory())
}
