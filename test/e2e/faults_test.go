//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand"
	"os/exec"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"

	"github.com/hitless/hitless/pkg/resources"
	"github.com/hitless/hitless/test/harness"
)

// controller runs hack/controller.sh with the given verb.
func controller(t *testing.T, verb string) {
	t.Helper()
	out, err := exec.Command("../../hack/controller.sh", verb).CombinedOutput()
	if err != nil {
		t.Fatalf("hack/controller.sh %s: %v\n%s", verb, err, out)
	}
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
	rules := func(backend string) []harness.Rule {
		split := []harness.Split{{Backend: backend, Percent: 100}}
		return []harness.Rule{
			{Host: ext, Visibility: v1alpha1.IngressVisibilityExternalIP, Splits: split},
			{Host: local, Visibility: v1alpha1.IngressVisibilityClusterLocal, Splits: split},
		}
	}
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
		t.Logf("rollout %2d: killed %3dms in, Ready at generation %d after %v", i, after.Milliseconds(), ing.Generation, time.Since(start).Round(time.Millisecond))
		if err := c.DeleteBackend(ctx, ns, name(i-1)); err != nil {
			t.Fatal(err)
		}
	}

	// Warm proxies are released after the hold, by whichever process runs.
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).List(ctx, metav1.ListOptions{LabelSelector: resources.LabelRole + "=" + resources.RoleWarm})
		return err == nil && len(list.Items) == 0, nil
	}); err != nil {
		t.Errorf("warm proxies left behind: %v", err)
	}
	stopLoad()
	s := load.Summarize()
	t.Logf("load: %s over %d Envoy pods, %d controller kills", s, len(load.Targets), rollouts)
	for _, f := range s.Failures {
		t.Log(f)
	}
	if s.Failed() != 0 {
		t.Errorf("%d of %d requests failed or came from a backend not allowed then", s.Failed(), s.Requests)
	}
}
