//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"

	"github.com/hitless/hitless/test/harness"
)

// TestFaultBackendGoneDuringWarm rolls a KIngress to a backend whose Service
// has no ready endpoint, then deletes that Service while the rollout warms.
// Each time the KIngress must stay NotReady with a condition naming the
// backend, its old backend must keep serving every request, and a second
// KIngress rolled out meanwhile must become Ready: one stuck rollout blocks
// nothing else. When the backend finally exists and runs, the rollout
// completes.
func TestFaultBackendGoneDuringWarm(t *testing.T) {
	ctx, c, ns := setup(t, "gone")
	xExt, xLocal := "x."+ns+".example.com", "x."+ns+".svc.cluster.local"
	yExt, yLocal := "y."+ns+".example.com", "y."+ns+".svc.cluster.local"
	for _, b := range []string{"x0", "y0"} {
		if err := c.CreateBackend(ctx, ns, b); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []struct{ name, ext, local, backend string }{{"x", xExt, xLocal, "x0"}, {"y", yExt, yLocal, "y0"}} {
		if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, harness.KIngress(ns, k.name, twoHosts(k.ext, k.local, k.backend)...), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"x", "y"} {
		if _, err := c.WaitReady(ctx, ns, k, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	var targets []harness.Target
	targets = append(targets, c.MustFleetTargets(ctx, t, external, xExt)...)
	targets = append(targets, c.MustFleetTargets(ctx, t, internal, xLocal)...)
	targets = append(targets, c.MustFleetTargets(ctx, t, external, yExt)...)
	targets = append(targets, c.MustFleetTargets(ctx, t, internal, yLocal)...)
	load, stopLoad := startLoadOn(ctx, envInt("FAULT_RPS", 100), targets, "x0", "y0")

	// rollY moves y to a fresh backend and waits for Ready, while x is stuck.
	y := 0
	rollY := func(while string) {
		t.Helper()
		prev, next := "y"+string(rune('0'+y)), "y"+string(rune('1'+y))
		y++
		if err := c.CreateBackend(ctx, ns, next); err != nil {
			t.Fatal(err)
		}
		load.Allow("x0", prev, next)
		if err := c.Update(ctx, ns, "y", func(ing *v1alpha1.Ingress) { harness.SetRules(ing, twoHosts(yExt, yLocal, next)...) }); err != nil {
			t.Fatal(err)
		}
		if _, err := c.WaitReady(ctx, ns, "y", 2*time.Minute); err != nil {
			t.Fatalf("the other KIngress, while %s: %v", while, err)
		}
		load.Allow("x0", next)
		t.Logf("the other KIngress rolled to %s and is Ready while %s", next, while)
	}
	stuck := func(what string, want func(status, reason, msg string) bool) {
		t.Helper()
		ing, err := c.WaitFor(ctx, ns, "x", time.Minute, what, func(ing *v1alpha1.Ingress) bool {
			if ing.Status.ObservedGeneration != ing.Generation || ing.IsReady() {
				return false
			}
			for _, cond := range ing.Status.Conditions {
				if want(string(cond.Status), cond.Reason, cond.Message) {
					return true
				}
			}
			return false
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, cond := range ing.Status.Conditions {
			if cond.Status != corev1.ConditionTrue {
				t.Logf("%s: %s=%s %s: %s", what, cond.Type, cond.Status, cond.Reason, cond.Message)
			}
		}
	}
	backend := ns + "/x1"

	// x1's Service exists, but nothing runs behind it.
	if err := c.CreateBackendService(ctx, ns, "x1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(ctx, ns, "x", func(ing *v1alpha1.Ingress) { harness.SetRules(ing, twoHosts(xExt, xLocal, "x1")...) }); err != nil {
		t.Fatal(err)
	}
	stuck("x1 has no ready endpoint", func(status, reason, msg string) bool {
		return reason == "Warming" && strings.Contains(msg, backend+":80")
	})
	rollY("x warms a backend without endpoints")

	// Its Service goes away during Warm.
	if err := c.Kube.CoreV1().Services(ns).Delete(ctx, "x1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	stuck("x1's Service was deleted", func(status, reason, msg string) bool {
		return status == string(corev1.ConditionFalse) && reason == "ServiceNotFound" && strings.Contains(msg, "Service "+backend+" ")
	})
	rollY("x names a deleted Service")

	// The backend comes (back) for real: the rollout completes.
	start := time.Now()
	load.Allow("x0", "x1", "y"+string(rune('0'+y)))
	if err := c.CreateBackend(ctx, ns, "x1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, ns, "x", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	converge := time.Since(start)
	load.Allow("x1", "y"+string(rune('0'+y)))
	waitWarmReleased(ctx, t, c, ns)
	time.Sleep(time.Second)
	stopLoad()
	reportFault(t, "backend-gone-during-warm", load.Summarize(), converge)
}
