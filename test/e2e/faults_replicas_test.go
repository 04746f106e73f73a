//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"

	"github.com/hitless/hitless/test/harness"
)

// replicaLog is the log hack/controller.sh gives replica n.
func replicaLog(n int) string {
	if n == 1 {
		return filepath.Join(harness.StackLogDir(), "controller.log")
	}
	return filepath.Join(harness.StackLogDir(), fmt.Sprintf("controller-%d.log", n))
}

// logSize is where the lines of replica n written from now on begin.
func logSize(t *testing.T, n int) int64 {
	t.Helper()
	fi, err := os.Stat(replicaLog(n))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// reconciledKeys counts, per KIngress key of namespace ns, the reconciles
// replica n finished (knative.dev/pkg's "Reconcile succeeded" line, written
// only for keys of the buckets the replica leads) since offset.
func reconciledKeys(t *testing.T, n int, offset int64, ns string) map[string]int {
	t.Helper()
	f, err := os.Open(replicaLog(n))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(offset, 0); err != nil {
		t.Fatal(err)
	}
	keys := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !strings.Contains(string(line), "Reconcile succeeded") {
			continue
		}
		var entry struct {
			Msg string `json:"message"`
			Key string `json:"knative.dev/key"`
		}
		if json.Unmarshal(line, &entry) != nil || entry.Msg != "Reconcile succeeded" {
			continue
		}
		if strings.HasPrefix(entry.Key, ns+"/") {
			keys[entry.Key]++
		}
	}
	return keys
}

// TestFaultReplicasShareAndTakeOver runs three controller replicas over ten
// buckets (config-leader-election-hitless) and checks both halves of running more
// than one:
//   - nothing is lost: under load to every Envoy pod of both fleets, all
//     KIngresses roll to a fresh backend at once, and the replica leading
//     the most buckets is SIGKILLed at a random moment of it and started
//     again at once (as the kubelet restarts a crashed container); then
//     again with another replica. Every KIngress must reach Ready at its
//     newest generation, no warm proxy may be left and no request may fail.
//   - the work is shared: at rest, each KIngress is reconciled by the
//     replica leading its bucket and by no other, and no replica leads
//     every bucket.
//
// knative.dev/pkg's bucket Leases never rebalance: the replica whose
// informers sync first takes every free bucket, so right after a start one
// replica usually leads all ten (logged). Buckets spread when they fall
// free while several replicas compete, as when a dead replica's Leases
// expire: each bucket goes to whichever contender retries first. A replica
// can so end up with none; that is logged, not failed. converge_s is the
// slowest round, kill to every KIngress Ready: about the Lease (15 s).
func TestFaultReplicasShareAndTakeOver(t *testing.T) {
	ctx, c, ns := setup(t, "replicas")
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	count := envInt("REPLICAS_KINGRESSES", 30)
	all := []int{1, 2, 3}
	controller(t, "replicas", "3")
	t.Cleanup(func() { controller(t, "replicas", "1") })
	leases := bucketLeases(ctx, t, c)
	if len(leases) < 2 {
		t.Fatalf("config-leader-election-hitless has %d bucket, this test needs more", len(leases))
	}
	t.Logf("started at once: buckets per replica %v", splitOf(allHeld(ctx, t, c, leases, all)))

	backend := func(round int) string { return fmt.Sprintf("b%d", round) }
	name := func(i int) string { return fmt.Sprintf("r%d", i) }
	hosts := func(i int) (string, string) {
		return name(i) + "." + ns + ".example.com", name(i) + "." + ns + ".svc.cluster.local"
	}
	if err := c.CreateBackend(ctx, ns, backend(0)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < count; i++ {
		ext, local := hosts(i)
		if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, harness.KIngress(ns, name(i), twoHosts(ext, local, backend(0))...), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitAllReady(ctx, t, c, ns, count, name)

	var targets []harness.Target
	for i := 0; i < count; i++ {
		ext, local := hosts(i)
		targets = append(targets, c.MustFleetTargets(ctx, t, external, ext)...)
		targets = append(targets, c.MustFleetTargets(ctx, t, internal, local)...)
	}
	load, stopLoad := startLoadOn(ctx, envInt("FAULT_RPS", 150), targets, backend(0))

	var slowest time.Duration
	previous := 0
	for round := 1; round <= 2; round++ {
		// The victim: the replica leading the most buckets, not the one
		// killed in the round before.
		split := splitOf(allHeld(ctx, t, c, leases, all))
		victim := 0
		for _, n := range all {
			if n != previous && (victim == 0 || split[n] > split[victim]) {
				victim = n
			}
		}
		if err := c.CreateBackend(ctx, ns, backend(round)); err != nil {
			t.Fatal(err)
		}
		load.Allow(backend(round-1), backend(round))
		var wg sync.WaitGroup
		errs := make(chan error, count)
		for i := 0; i < count; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				ext, local := hosts(i)
				errs <- c.Update(ctx, ns, name(i), func(ing *v1alpha1.Ingress) { harness.SetRules(ing, twoHosts(ext, local, backend(round))...) })
			}(i)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		// Anywhere in the first half second: warming or switching.
		after := time.Duration(rng.Intn(500)) * time.Millisecond
		time.Sleep(after)
		killedAt := time.Now()
		controller(t, "kill", strconv.Itoa(victim))
		controller(t, "start", strconv.Itoa(victim))
		waitAllReady(ctx, t, c, ns, count, name)
		took := time.Since(killedAt)
		slowest = max(slowest, took)
		load.Allow(backend(round))
		t.Logf("round %d: replica %d (leading %d of %d buckets; split %v) SIGKILLed %dms into %d rollouts and started again; all Ready %v after the kill; buckets now %v",
			round, victim, split[victim], len(leases), split, after.Milliseconds(), count, took.Round(time.Millisecond), splitOf(allHeld(ctx, t, c, leases, all)))
		waitWarmReleased(ctx, t, c, ns)
		if err := c.DeleteBackend(ctx, ns, backend(round-1)); err != nil {
			t.Fatal(err)
		}
		previous = victim
	}
	stopLoad()
	reportFault(t, "replica-killed", load.Summarize(), slowest)

	// Shared work at rest: touch every KIngress (an annotation: each
	// replica's informer sees the change, only the bucket's leader acts).
	held := allHeld(ctx, t, c, leases, all)
	offsets := map[int]int64{}
	for _, n := range all {
		offsets[n] = logSize(t, n)
	}
	for i := 0; i < count; i++ {
		if err := c.Update(ctx, ns, name(i), func(ing *v1alpha1.Ingress) {
			ing.Annotations["hitless.test/touched"] = strconv.FormatInt(time.Now().UnixNano(), 10)
		}); err != nil {
			t.Fatal(err)
		}
	}
	checkShared(t, leases, held, offsets, ns, count, name)
}

// allHeld waits until every bucket Lease is held by one of the replicas and
// returns who holds which.
func allHeld(ctx context.Context, t *testing.T, c *harness.Clients, leases []string, replicas []int) map[string]int {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		held := holders(ctx, t, c, leases, replicas...)
		if len(held) == len(leases) {
			return held
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute only %d of %d buckets have a leader among replicas %v", len(held), len(leases), replicas)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitAllReady waits until KIngresses name(0..count-1) are Ready at their
// newest generation.
func waitAllReady(ctx context.Context, t *testing.T, c *harness.Clients, ns string, count int, name func(int) string) {
	t.Helper()
	for i := 0; i < count; i++ {
		if _, err := c.WaitReady(ctx, ns, name(i), 2*time.Minute); err != nil {
			t.Fatalf("KIngress %s/%s: %v", ns, name(i), err)
		}
	}
}

// splitOf counts the buckets each replica leads.
func splitOf(held map[string]int) map[int]int {
	split := map[int]int{}
	for _, n := range held {
		split[n]++
	}
	return split
}

// checkShared checks that, since offsets, each KIngress was reconciled by
// the replica leading its bucket and by no other, that more than one
// replica leads buckets and none leads all, and reports how many each did.
func checkShared(t *testing.T, leases []string, held map[string]int, offsets map[int]int64, ns string, count int, name func(int) string) {
	t.Helper()
	replicas := make([]int, 0, len(offsets))
	for n := range offsets {
		replicas = append(replicas, n)
	}
	sort.Ints(replicas)
	// Until every KIngress was reconciled somewhere (or 30 s).
	var done map[int]map[string]int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		done = map[int]map[string]int{}
		seen := map[string]bool{}
		for _, n := range replicas {
			done[n] = reconciledKeys(t, n, offsets[n], ns)
			for k := range done[n] {
				seen[k] = true
			}
		}
		if len(seen) == count || time.Now().After(deadline) {
			break
		}
	}
	split := splitOf(held)
	var row []string
	leading := 0
	for _, n := range replicas {
		total := 0
		for _, k := range done[n] {
			total += k
		}
		row = append(row, fmt.Sprintf("replica %d: %d buckets, %d KIngresses, %d reconciles", n, split[n], len(done[n]), total))
		if split[n] > 0 {
			leading++
		}
		if split[n] == len(leases) {
			t.Errorf("replica %d leads all %d buckets: the work is not shared", n, len(leases))
		}
	}
	t.Logf("shared at rest: %s", strings.Join(row, "; "))
	if leading < 2 {
		t.Errorf("only %d replica leads buckets after two fail-overs", leading)
	}
	for i := 0; i < count; i++ {
		key := ns + "/" + name(i)
		want := held[bucketOf(leases, ns, name(i))]
		var by []int
		for _, n := range replicas {
			if done[n][key] > 0 {
				by = append(by, n)
			}
		}
		if len(by) != 1 || by[0] != want {
			t.Errorf("KIngress %s (its bucket led by replica %d) was reconciled by replicas %v, want only %d", key, want, by, want)
		}
	}
}
