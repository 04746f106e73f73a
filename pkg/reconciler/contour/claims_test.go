package contour

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgotesting "k8s.io/client-go/testing"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	rtesting "knative.dev/pkg/reconciler/testing"
)

// TestClaims covers host claims (claims.go): a host another HTTPProxy of
// the same class serves is refused, a race between two KIngresses is won
// by the first claim, and a proxy no fleet of ours sees, or one of a
// deleted KIngress, claims nothing.
func TestClaims(t *testing.T) {
	f := fixtures(t)

	table := rtesting.TableTest{{
		// The KIngress is refused; the user's HTTPProxy is not touched.
		Name:    "user's HTTPProxy has the host",
		Key:     "default/hello",
		Objects: objs(f.pods, []runtime.Object{ing("blue"), service("blue"), f.userProxy}),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(badInput(ReasonHostConflict,
			`host "hello.example.com" is already served by HTTPProxy team/mine (a user's HTTPProxy): remove that claim or choose another host`))))},
	}, {
		// Contour judges duplicates within its class: a proxy only another
		// Contour sees, or one whose KIngress is gone, takes nothing away.
		Name:        "other class, deleted KIngress: no claim",
		Key:         "default/hello",
		Objects:     objs(f.pods, []runtime.Object{ing("blue"), service("blue"), f.otherClass, f.leftover}),
		WantCreates: proxies(f.blueServing.Proxies),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(
			waiting(ReasonSwitching, "waiting for 2 Envoy pods of contour-external to serve default/blue:80"))))},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, ReasonSwitching, "Serving proxies switched to generation 2")},
	}, {
		// Two KIngresses raced for a host: the younger claim steps back and
		// deletes its invalidated proxy.
		Name:    "race lost: step back",
		Key:     "default/hello",
		Objects: objs(f.pods, []runtime.Object{ing("blue"), service("blue"), f.raceLoser, f.raceWinner, f.otherIngress}),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(badInput(ReasonHostConflict,
			`host "hello.example.com" is already served by HTTPProxy other/first (the KIngress other/first): remove that claim or choose another host`))))},
		WantDeletes: []clientgotesting.DeleteActionImpl{deleteOf(f.raceLoser)},
	}, {
		// Two KIngresses raced for a host: the first claim keeps its proxy
		// and goes on.
		Name:    "race won: keep the proxy",
		Key:     "default/hello",
		Objects: objs(f.pods, []runtime.Object{ing("blue"), service("blue"), f.raceFirst, f.raceSecond, f.otherIngress}),
		// Contour's verdict stands until the younger claim's proxy is gone;
		// that change re-reconciles this KIngress.
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{statusUpdate(ing("blue", withStatus(func(i *v1alpha1.Ingress) {
			markProxyInvalid(i, f.raceFirst.Name, f.raceFirst.Status.Description)
		})))},
	}}
	table.Test(t, makeFactory())
}
