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
