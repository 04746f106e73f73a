//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"

	"github.com/hitless/hitless/pkg/resources"
	"github.com/hitless/hitless/test/harness"
)

// controller runs hack/controller.sh with the given verb and arguments.
func controller(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("../../hack/controller.sh", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("hack/controller.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// fault runs hack/faults.sh with the given arguments (restart, scale-envoy,
// cut-xds, fail-ready, proxy-protocol and their undoing).
func fault(t *testing.T, args ...string) {
	t.Helper()
	if err := faultErr(args...); err != nil {
		t.Fatal(err)
	}
}

func faultErr(args ...string) error {
	return script("faults.sh", args...)
}

// stackErr runs hack/stack.sh with the given arguments (up).
func stackErr(args ...string) error {
	return script("stack.sh", args...)
}

func script(name string, args ...string) error {
	out, err := exec.Command("../../hack/"+name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("hack/%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// reportFault logs the one line per fault that the table of `make
// test-faults` is built from, logs the first failures, and fails the test
// when any request failed. Timings are printed, never asserted.
func reportFault(t *testing.T, name string, s harness.Summary, converge time.Duration) {
	t.Helper()
	t.Logf("fault: name=%s requests=%d failed=%d converge_s=%.1f", name, s.Requests, s.Failed(), converge.Seconds())
	t.Logf("load: %s", s)
	for _, f := range s.Failures {
		t.Log(f)
	}
	if s.Failed() != 0 {
		t.Errorf("%d of %d requests failed or came from a backend not allowed then", s.Failed(), s.Requests)
	}
	if s.Requests == 0 {
		t.Error("no request was sent: the load did not run")
	}
}

// waitWarmReleased waits until no warm proxy is left in the namespace.
func waitWarmReleased(ctx context.Context, t *testing.T, c *harness.Clients, ns string) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).List(ctx, metav1.ListOptions{LabelSelector: resources.LabelRole + "=" + resources.RoleWarm})
		return err == nil && len(list.Items) == 0, nil
	}); err != nil {
		t.Errorf("warm proxies left behind: %v", err)
	}
}

// twoHosts returns the rules of a KIngress with one external and one
// cluster-local host, both to backend.
func twoHosts(ext, local, backend string) []harness.Rule {
	split := []harness.Split{{Backend: backend, Percent: 100}}
	return []harness.Rule{
		{Host: ext, Visibility: v1alpha1.IngressVisibilityExternalIP, Splits: split},
		{Host: local, Visibility: v1alpha1.IngressVisibilityClusterLocal, Splits: split},
	}
}

// servedOnTwoHosts creates backend and a KIngress name that sends one
// external host (name.ns.example.com) and one cluster-local host
// (name.ns.svc.cluster.local) to it, waits until it is Ready and returns
// both hosts.
func servedOnTwoHosts(ctx context.Context, t *testing.T, c *harness.Clients, ns, name, backend string) (ext, local string) {
	t.Helper()
	ext, local = name+"."+ns+".example.com", name+"."+ns+".svc.cluster.local"
	if err := c.CreateBackend(ctx, ns, backend); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, harness.KIngress(ns, name, twoHosts(ext, local, backend)...), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, ns, name, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	return ext, local
}

// TestFaultControllerKilledMidRollout SIGKILLs the controller at a random
// moment of each rollout to a fresh backend and starts a new one: the new
// process must resume from the objects alone. Under load to every Envoy pod
// of both fleets, no request may fail, every rollout must reach Ready at the
// newest generation, and no warm proxy may be left behind.
func TestFaultControllerKilledMidRollout(t *testing.T) {
	ctx, c, ns := setup(t, "kill")
	rollouts := envInt("FAULT_ROLLOUTS", 30)
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	t.Cleanup(func() { _ = exec.Command("../../hack/controller.sh", "start").Run() })

	ext := "kill." + ns + ".example.com"
	local := "kill." + ns + ".svc.cluster.local"
	rules := func(backend string) []harness.Rule { return twoHosts(ext, local, backend) }
	name := func(i int) string { return fmt.Sprintf("k%d", i) }
	if err := c.CreateBackend(ctx, ns, name(0)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, harness.KIngress(ns, "kill", rules(name(0))...), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, ns, "kill", 2*time.Minute); err != nil {
		t.Fatal(err)
	}

	load, stopLoad := startLoad(ctx, t, c, envInt("FAULT_RPS", 100), ext, local, name(0))

	// converge_s of this fault: the slowest rollout, kill and restart included.
	var slowest time.Duration
	for i := 1; i <= rollouts; i++ {
		if err := c.CreateBackend(ctx, ns, name(i)); err != nil {
			t.Fatal(err)
		}
		load.Allow(name(i-1), name(i))
		start := time.Now()
		if err := c.Update(ctx, ns, "kill", func(ing *v1alpha1.Ingress) { harness.SetRules(ing, rules(name(i))...) }); err != nil {
			t.Fatal(err)
		}
		// A rollout to a fresh backend takes two probe rounds, ~0.5 s:
		// kill anywhere in the first 0.7 s (warming, switching or released).
		after := time.Duration(rng.Intn(700)) * time.Millisecond
		time.Sleep(after)
		controller(t, "kill")
		controller(t, "start")
		ing, err := c.WaitReady(ctx, ns, "kill", 2*time.Minute)
		if err != nil {
			t.Fatalf("rollout %d (killed %v in): %v", i, after, err)
		}
		load.Allow(name(i))
		took := time.Since(start)
		slowest = max(slowest, took)
		t.Logf("rollout %2d: killed %3dms in, Ready at generation %d after %v", i, after.Milliseconds(), ing.Generation, took.Round(time.Millisecond))
		if err := c.DeleteBackend(ctx, ns, name(i-1)); err != nil {
			t.Fatal(err)
		}
	}

	// Warm proxies are released after the hold, by whichever process runs.
	waitWarmReleased(ctx, t, c, ns)
	stopLoad()
	t.Logf("%d controller kills, load over %d Envoy pods", rollouts, len(load.Targets))
	reportFault(t, "controller-killed", load.Summarize(), slowest)
}
