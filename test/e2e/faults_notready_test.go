//go:build e2e

package e2e

import (
	"context"
	"slices"
	"sort"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"

	"github.com/hitless/hitless/test/harness"
)

// TestFaultNotReadyEnvoyPodStillServes fails the readiness probe of one
// external Envoy pod (its /ready answers too late, as under CPU pressure)
// and cuts its xDS, so it lags behind Contour, while it keeps serving the
// clients connected to it: the load goes to every Envoy pod, that one too.
// Not ready only means no new connections through the Service; the pod
// still routes every request of the connections it has. A rollout to a
// fresh backend must therefore not be Ready while that pod still routes to
// the old backend: Knative deletes the old one on Ready, and every request
// the lagging pod sends there fails. Once its xDS is mended it confirms,
// the rollout is Ready, and no request fails.
func TestFaultNotReadyEnvoyPodStillServes(t *testing.T) {
	ctx, c, ns := setup(t, "unready")
	before := envoyPods(ctx, t, c, external)
	if len(before) < 2 {
		t.Fatalf("fleet %s has %d ready Envoy pods, the test needs 2 or more", external, len(before))
	}
	ext, local := servedOnTwoHosts(ctx, t, c, ns, "unready", "old")
	ips := make([]string, 0, len(before))
	for ip := range before {
		ips = append(ips, ip)
	}
	sort.Strings(ips)
	lagIP := ips[0]

	var targets []harness.Target
	for _, ip := range ips {
		targets = append(targets, harness.Target{Addr: ip + ":8080", Host: ext})
	}
	targets = append(targets, c.MustFleetTargets(ctx, t, internal, local)...)
	load, stopLoad := startLoadOn(ctx, envInt("FAULT_RPS", 100), targets, "old")
	defer stopLoad()

	t.Cleanup(func() { _ = faultErr("mend-xds"); _ = faultErr("mend-ready") })
	fault(t, "cut-xds", lagIP)
	fault(t, "fail-ready", lagIP)
	// Wait until its endpoint says not ready: that is what hitless reads.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return !slices.Contains(c.EnvoyPods(ctx, external), lagIP), nil
	}); err != nil {
		t.Fatalf("Envoy pod %s still ready after its readiness probe was cut: %v", lagIP, err)
	}
	t.Logf("Envoy pod %s: not ready, xDS cut, still serving", lagIP)

	if err := c.CreateBackend(ctx, ns, "new"); err != nil {
		t.Fatal(err)
	}
	load.Allow("old", "new")
	if err := c.Update(ctx, ns, "unready", func(ing *v1alpha1.Ingress) { harness.SetRules(ing, twoHosts(ext, local, "new")...) }); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ready := func(ing *v1alpha1.Ingress) bool {
		return ing.Status.ObservedGeneration == ing.Generation && ing.IsReady()
	}
	// Held: the lagging pod cannot confirm while its xDS is cut.
	ing, err := c.WaitFor(ctx, ns, "unready", 15*time.Second, "Ready while a lagging Envoy pod is cut off", ready)
	if err == nil {
		t.Errorf("KIngress Ready at generation %d while Envoy pod %s (not ready, still serving) had not heard of it", ing.Generation, lagIP)
		// What Knative does on Ready; the load shows what it costs.
		if err := c.DeleteBackend(ctx, ns, "old"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
	} else {
		_, reason, msg := condition(ing, v1alpha1.IngressConditionLoadBalancerReady)
		t.Logf("held while %s lags: %s: %s", lagIP, reason, msg)
		fault(t, "mend-xds")
		// Two minutes: the cut gRPC stream recovers on TCP retransmission back-off.
		if _, err := c.WaitFor(ctx, ns, "unready", 2*time.Minute, "Ready once the lagging pod hears from Contour", ready); err != nil {
			t.Fatal(err)
		}
		if err := c.DeleteBackend(ctx, ns, "old"); err != nil {
			t.Fatal(err)
		}
	}
	converge := time.Since(start)
	load.Allow("new")
	for _, ip := range ips {
		if b, _, err := servedBy(ip, ext); err != nil || b != "new" {
			t.Errorf("Envoy pod %s after Ready: backend %q, %v; want new", ip, b, err)
		}
	}
	fault(t, "mend-ready")
	waitWarmReleased(ctx, t, c, ns)
	stopLoad()
	reportFault(t, "envoy-pod-not-ready-still-serving", load.Summarize(), converge)
}
