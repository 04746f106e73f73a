//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"

	"github.com/hitless/hitless/test/harness"
)

// TestRolloutDropsNothing rolls a KIngress (an external and a cluster-local
// host) through fresh backends back to back, as Knative's TestUpdate does —
// a new Pod and Service each time, the previous one deleted right after
// Ready — plus header-only and percentage-only changes, under steady load
// sent to every Envoy pod of both fleets. Every request must be a 2xx from
// a backend the KIngress allowed at that moment. Timings are logged, never
// asserted.
func TestRolloutDropsNothing(t *testing.T) {
	ctx, c, ns := setup(t, "roll")
	swaps := envInt("ROLLOUT_SWAPS", 20)
	rps := envInt("ROLLOUT_RPS", 100)

	ext := "roll." + ns + ".example.com"
	local := "roll." + ns + ".svc.cluster.local"
	rules := func(headers map[string]string, splits ...harness.Split) []harness.Rule {
		return []harness.Rule{
			{Host: ext, Visibility: v1alpha1.IngressVisibilityExternalIP, Splits: splits, Headers: headers},
			{Host: local, Visibility: v1alpha1.IngressVisibilityClusterLocal, Splits: splits, Headers: headers},
		}
	}
	name := func(i int) string { return fmt.Sprintf("b%d", i) }

	if err := c.CreateBackend(ctx, ns, name(0)); err != nil {
		t.Fatal(err)
	}
	ing := harness.KIngress(ns, "roll", rules(nil, harness.Split{Backend: name(0), Percent: 100})...)
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, ns, "roll", 2*time.Minute); err != nil {
		t.Fatal(err)
	}

	retries := map[string]*harness.RetryWatch{external: c.WatchRetries(ctx, external, ns), internal: c.WatchRetries(ctx, internal, ns)}
	load, stopLoad := startLoad(ctx, t, c, rps, ext, local, name(0))
	time.Sleep(time.Second)

	var ready []time.Duration
	change := func(what string, allowDuring, allowAfter []string, headers map[string]string, splits ...harness.Split) {
		t.Helper()
		load.Allow(allowDuring...)
		start := time.Now()
		if err := c.Update(ctx, ns, "roll", func(ing *v1alpha1.Ingress) { harness.SetRules(ing, rules(headers, splits...)...) }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		// The update bumps the generation; wait for Ready at it.
		if _, err := c.WaitReady(ctx, ns, "roll", 2*time.Minute); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		d := time.Since(start)
		ready = append(ready, d)
		load.Allow(allowAfter...)
		t.Logf("%-40s Ready after %v", what, d.Round(time.Millisecond))
	}

	cur := 0
	for i := 1; i <= swaps; i++ {
		next := i
		if err := c.CreateBackend(ctx, ns, name(next)); err != nil {
			t.Fatal(err)
		}
		change(fmt.Sprintf("swap %d: %s -> fresh %s", i, name(cur), name(next)),
			[]string{name(cur), name(next)}, []string{name(next)}, nil, harness.Split{Backend: name(next), Percent: 100})
		if err := c.DeleteBackend(ctx, ns, name(cur)); err != nil {
			t.Fatal(err)
		}
		cur = next
		if i%5 == 0 {
			change(fmt.Sprintf("header-only change %d", i), []string{name(cur)}, []string{name(cur)},
				map[string]string{"X-Generation": strconv.Itoa(i)}, harness.Split{Backend: name(cur), Percent: 100})
		}
	}

	// Percentage-only changes between two live backends, then dropping one.
	other := swaps + 1
	if err := c.CreateBackend(ctx, ns, name(other)); err != nil {
		t.Fatal(err)
	}
	both := []string{name(cur), name(other)}
	for _, p := range []int{50, 90, 10} {
		change(fmt.Sprintf("split %d/%d", p, 100-p), both, both, nil,
			harness.Split{Backend: name(cur), Percent: p}, harness.Split{Backend: name(other), Percent: 100 - p})
	}
	change("drop to one backend", both, []string{name(other)}, nil, harness.Split{Backend: name(other), Percent: 100})
	time.Sleep(2 * time.Second)
	stopLoad()

	s := load.Summarize()
	sort.Slice(ready, func(i, j int) bool { return ready[i] < ready[j] })
	t.Logf("load: %s over %d Envoy pods; change to Ready p50=%v max=%v over %d changes",
		s, len(load.Targets), ready[len(ready)/2].Round(time.Millisecond), ready[len(ready)-1].Round(time.Millisecond), len(ready))
	for _, f := range s.Failures {
		t.Log(f)
	}
	// The routes retry what a backend going away cuts off; a rollout must
	// need none of that, or it would drop requests without the retries.
	for _, fleet := range []string{external, internal} {
		n := retries[fleet].Stop()
		t.Logf("Envoy upstream retries in %s during the rollouts: %.0f", fleet, n)
		if n != 0 {
			t.Errorf("Envoy retried %.0f requests in %s during the rollouts: a rollout made them fail once", n, fleet)
		}
	}
	if s.Failed() != 0 {
		// Envoy's side of the same requests: response flags (UC, UF, NR...)
		// and the upstream address, which the client cannot see.
		for fleet, host := range map[string]string{external: ext, internal: local} {
			for _, l := range harness.FailedAccessLog(harness.PodLogDir(), fleet, host, 20) {
				t.Log("Envoy access log: " + l)
			}
		}
		t.Errorf("%d of %d requests failed or came from a backend not allowed then", s.Failed(), s.Requests)
	}
	if s.Requests < rps*10 {
		t.Errorf("only %d requests were sent: the load did not run", s.Requests)
	}
}

// startLoad sends rps requests/s to every Envoy pod of both fleets, each
// asked for its fleet's host, allowing only first to answer until told
// otherwise; the returned func stops the load and waits for it.
func startLoad(ctx context.Context, t *testing.T, c *harness.Clients, rps int, ext, local, first string) (*harness.Load, func()) {
	t.Helper()
	var targets []harness.Target
	targets = append(targets, c.MustFleetTargets(ctx, t, external, ext)...)
	targets = append(targets, c.MustFleetTargets(ctx, t, internal, local)...)
	return startLoadOn(ctx, rps, targets, first)
}

// startLoadOn sends rps requests/s spread over the given targets, allowing
// only the backends in first to answer until told otherwise; the returned
// func stops the load and waits for it.
func startLoadOn(ctx context.Context, rps int, targets []harness.Target, first ...string) (*harness.Load, func()) {
	load := &harness.Load{Targets: targets, RPS: rps}
	load.Allow(first...)
	return load, load.Start(ctx)
}

var envInt = harness.EnvInt
