package contour

import (
	"testing"
	"time"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgotesting "k8s.io/client-go/testing"
	rtesting "knative.dev/pkg/reconciler/testing"
)

// TestRelease covers the Release phase (release.go): the warm proxies are
// kept through config-contour's release-hold after Ready, then deleted.
func TestRelease(t *testing.T) {
	f := fixtures(t)
	released := f.warmGreen.Proxies[0].DeepCopy()
	released.UID = "released-warm"

	table := rtesting.TableTest{{
		// The switch is confirmed: Ready, and the warm proxies are kept
		// through the release hold, the KIngress looked at again when it
		// ends.
		Name: "Ready: warm proxies held",
		Key:  "default/hello",
		Objects: objs(f.pods, proxies(f.greenServing.Proxies), proxies(f.warmGreen.Proxies), []runtime.Object{
			ing("green", withStatus(waiting(ReasonSwitching, "s"))), service("blue"), service("green"),
		}),
		OtherTestData:     map[string]interface{}{proberKey: &fakeProber{ready: map[string]bool{f.greenServing.Hash: true}}},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("green", withStatus(ready)))},
		PostConditions: []func(*testing.T, *rtesting.TableRow){func(t *testing.T, row *rtesting.TableRow) {
			if got := row.OtherTestData[enqueuedKey].(map[string]time.Duration)["default/hello"]; got != testCfg.ReleaseHold {
				t.Errorf("requeued after %v, want the release hold %v", got, testCfg.ReleaseHold)
			}
		}},
	}, {
		// The release hold has passed since Ready: the warm proxies go.
		Name: "warm proxies released after the hold",
		Key:  "default/hello",
		Objects: objs(f.pods, proxies(f.greenServing.Proxies), proxies(f.warmGreen.Proxies), []runtime.Object{
			ing("green", withStatus(readyAt(now.Add(-time.Minute)))), service("blue"), service("green"),
		}),
		WantDeletes: []clientgotesting.DeleteActionImpl{deleteOf(f.warmGreen.Proxies[0])},
		WantEvents:  []string{rtesting.Eventf(corev1.EventTypeNormal, "Released", "Warm proxies deleted")},
	}, {
		// The reconcile after the release, before the informer delivered
		// the deletion: the cache still shows the warm proxy. It is gone,
		// so nothing is planned around it (its backends held again, the
		// proxy updated and refused with 404) and it is not deleted twice.
		Name: "a released warm proxy the cache still shows",
		Key:  "default/hello",
		Objects: objs(f.pods, proxies(f.greenServing.Proxies), proxies([]*contourv1.HTTPProxy{released}), []runtime.Object{
			ing("green", withStatus(readyAt(now.Add(-time.Minute)))), service("blue"), service("green"),
		}),
		OtherTestData: map[string]interface{}{deletedKey: []types.UID{released.UID}},
	}}
	table.Test(t, makeFactory())
}
