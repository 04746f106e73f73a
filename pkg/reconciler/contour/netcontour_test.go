package contour

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgotesting "k8s.io/client-go/testing"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	rtesting "knative.dev/pkg/reconciler/testing"
)

// TestNetContour covers what net-contour leaves behind (netcontour.go):
// its proxy of a host is taken over in place or deleted, and its endpoint
// probe child goes once hitless serves the child's parent.
func TestNetContour(t *testing.T) {
	f := fixtures(t)

	table := rtesting.TableTest{{
		// net-contour's proxy of the same backend is taken over: one update
		// under its name, never a second proxy for the host.
		Name: "take over in place",
		Key:  "default/hello",
		Objects: objs(f.pods, []runtime.Object{
			f.ncBlue, ing("blue", withStatus(ready)), service("blue"),
		}),
		WantUpdates: []clientgotesting.UpdateActionImpl{update(f.adopted)},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(ready,
			waiting(ReasonSwitching, "waiting for 2 Envoy pods of contour-external to serve default/blue:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		// Ours next to net-contour's for one host, Contour invalidating
		// both: net-contour's goes, ours is probed.
		Name: "beside ours: net-contour's deleted",
		Key:  "default/hello",
		Objects: objs(f.pods, []runtime.Object{
			f.ncBlueInvalid, f.oursInvalid, ing("blue"), service("blue"),
		}),
		WantDeletes: []clientgotesting.DeleteActionImpl{deleteOf(f.ncBlueInvalid)},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(func(i *v1alpha1.Ingress) {
			markProxyInvalid(i, f.oursInvalid.Name, f.oursInvalid.Status.Description)
		})))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		// net-contour's proxy still serves the child's parent: the child is
		// left alone and looked at again later.
		Name: "endpoint probe child kept",
		Key:  "default/hello--ep",
		Objects: objs(f.pods, []runtime.Object{
			f.epChild, f.ncBlue, ing("blue", withStatus(ready)), service("blue"),
		}),
		PostConditions: []func(*testing.T, *rtesting.TableRow){func(t *testing.T, row *rtesting.TableRow) {
			if got := row.OtherTestData[enqueuedKey].(map[string]time.Duration)["default/hello--ep"]; got != endpointProbeRecheck {
				t.Errorf("requeued after %v, want %v", got, endpointProbeRecheck)
			}
		}},
	}, {
		// hitless serves the child's parent now.
		Name: "endpoint probe child deleted",
		Key:  "default/hello--ep",
		Objects: objs(f.pods, proxies(f.blueServing.Proxies), []runtime.Object{
			f.epChild, ing("blue", withStatus(ready)), service("blue"),
		}),
		WantDeletes: []clientgotesting.DeleteActionImpl{{
			ActionImpl: clientgotesting.ActionImpl{Namespace: testNS, Verb: "delete",
				Resource: v1alpha1.SchemeGroupVersion.WithResource("ingresses")},
			Name: f.epChild.Name,
		}},
	}}
	table.Test(t, makeFactory())
}
