//go:build e2e

package serving

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/hitless/hitless/test/harness"
)

// TestServingGradualRolloutDropsNothing: a Knative Service with Serving's
// rollout-duration annotation moves its traffic to each new Revision in
// steps (1 %, then equal steps over the duration), and every step is a new
// KIngress generation with new percentages. Under steady load through every
// Envoy pod of both fleets, GRADUAL_UPDATES Revisions are rolled out one
// after another, each to the end of its rollout; every request must be a
// 2xx from a Revision that had traffic at that moment. It reports how many
// KIngress generations the rollouts took.
func TestServingGradualRolloutDropsNothing(t *testing.T) {
	ctx := context.Background()
	st := newServingTest(ctx, t, "serving-gradual")
	c, ns, svcs := st.c, st.ns, st.svcs

	updates := harness.EnvInt("GRADUAL_UPDATES", 10)
	rps := harness.EnvInt("ROLLOUT_RPS", 100)
	duration := os.Getenv("GRADUAL_DURATION")
	if duration == "" {
		duration = "30s"
	}
	rolloutFor, err := time.ParseDuration(duration)
	if err != nil {
		t.Fatalf("GRADUAL_DURATION=%q: %v", duration, err)
	}
	const name = "gradual"
	ksvc := knativeService(ns, name, st.image("runtime"), 0)
	ksvc.SetAnnotations(map[string]string{"serving.knative.dev/rollout-duration": duration})
	first := st.create(ctx, t, ksvc)
	gen0 := kingressGeneration(ctx, t, c, ns, name)

	targets := st.targets(ctx, t, name)
	load, stop := startLoad(ctx, targets, rps, first)
	defer stop()

	var took []time.Duration
	var gens []int64
	prev := first
	for i := 1; i <= updates; i++ {
		next := revisionName(name, i+1)
		load.Allow(prev, next)
		start, genStart := time.Now(), kingressGeneration(ctx, t, c, ns, name)
		if err := updateService(ctx, svcs, name, func(u *unstructured.Unstructured) { setRollEnv(u, i) }); err != nil {
			t.Fatal(err)
		}
		// The rollout is over when the Knative Service is Ready with all
		// of its traffic on the new Revision: Serving marks the Route
		// Ready only once no rollout is in progress and the KIngress is
		// Ready at the generation carrying that traffic, so from then on
		// no Envoy pod routes to the old one.
		if err := waitAllTrafficOn(ctx, svcs, name, next, rolloutFor+3*time.Minute); err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
		took = append(took, time.Since(start))
		gens = append(gens, kingressGeneration(ctx, t, c, ns, name)-genStart)
		load.Allow(next)
		prev = next
	}
	stop()
	s := load.Summarize()
	total := kingressGeneration(ctx, t, c, ns, name) - gen0
	t.Logf("%d gradual rollouts (rollout-duration %s): %s; each took p50 %v, max %v; KIngress generations per rollout %v, %d in all",
		updates, duration, s, harness.Percentile(took, 50).Round(100*time.Millisecond), harness.Percentile(took, 100).Round(100*time.Millisecond), gens, total)
	logFailures(t, s)
	fmt.Printf("serving-gradual: updates=%d rollout_duration=%s requests=%d failed=%d kingress_generations=%d rollout_p50_s=%.1f rollout_max_s=%.1f\n",
		updates, duration, s.Requests, s.Failed(), total, harness.Percentile(took, 50).Seconds(), harness.Percentile(took, 100).Seconds())
	if total < int64(2*updates) {
		t.Errorf("the %d rollouts took only %d KIngress generations: Serving did not roll out in steps (is rollout-duration applied?)", updates, total)
	}
	if min := int(float64(rps) * rolloutFor.Seconds()); s.Requests < min {
		t.Errorf("only %d requests during the rollouts, want at least %d", s.Requests, min)
	}
}

// kingressGeneration is the generation of the KIngress Serving made for the
// Route (named after it).
func kingressGeneration(ctx context.Context, t *testing.T, c *harness.Clients, ns, name string) int64 {
	t.Helper()
	ing, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("KIngress %s/%s: %v", ns, name, err)
	}
	return ing.Generation
}

// waitAllTrafficOn waits until the Knative Service is Ready at its newest
// generation and its status sends all traffic to rev alone.
func waitAllTrafficOn(ctx context.Context, svcs dynamic.ResourceInterface, name, rev string, timeout time.Duration) error {
	last, err := pollService(ctx, svcs, name, 100*time.Millisecond, timeout, func(u *unstructured.Unstructured) bool {
		traffic, _, _ := unstructured.NestedSlice(u.Object, "status", "traffic")
		if len(traffic) != 1 {
			return false
		}
		tt, _ := traffic[0].(map[string]any)
		pct, _, _ := unstructured.NestedInt64(tt, "percent")
		return tt["revisionName"] == rev && pct == 100
	})
	if err != nil {
		var traffic []any
		if last != nil {
			traffic, _, _ = unstructured.NestedSlice(last.Object, "status", "traffic")
		}
		return fmt.Errorf("Knative Service %s did not send all traffic to %s within %v: traffic %v, conditions %v", name, rev, timeout, traffic, conditions(last))
	}
	return nil
}
