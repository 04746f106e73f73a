//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/pkg/hash"

	"github.com/hitless/hitless/test/harness"
)

// The controller's bucket Leases live in its system namespace;
// knative.dev/pkg names each <component>.<queue>.NN-of-MM.
const (
	leaseNamespace = "knative-serving"
	leasePrefix    = "hitless-controller.github.com.hitless.hitless.pkg.reconciler.contour.reconciler."
)

// bucketLeases returns the names of the bucket Leases that
// config-leader-election-hitless asks for.
func bucketLeases(ctx context.Context, t *testing.T, c *harness.Clients) []string {
	t.Helper()
	cm, err := c.Kube.CoreV1().ConfigMaps(leaseNamespace).Get(ctx, "config-leader-election-hitless", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading config-leader-election-hitless: %v", err)
	}
	n, err := strconv.Atoi(cm.Data["buckets"])
	if err != nil || n < 1 {
		n = 1
	}
	names := make([]string, 0, n)
	for i := 0; i < n; i++ {
		names = append(names, fmt.Sprintf("%s%02d-of-%02d", leasePrefix, i, n))
	}
	return names
}

// bucketOf returns the Lease of the bucket that holds KIngress ns/name, by
// the same consistent hash as knative.dev/pkg's reconcilers use.
func bucketOf(leases []string, ns, name string) string {
	return hash.NewBucketSet(sets.New(leases...)).Owner(types.NamespacedName{Namespace: ns, Name: name}.String())
}

// identities maps the leader-election identity of each given replica
// (hack/controller.sh's number) to that number.
func identities(t *testing.T, replicas ...int) map[string]int {
	t.Helper()
	ids := map[string]int{}
	for _, n := range replicas {
		out, err := exec.Command("../../hack/controller.sh", "identity", strconv.Itoa(n)).Output()
		if id := strings.TrimSpace(string(out)); err == nil && id != "" {
			ids[id] = n
		}
	}
	return ids
}

// holders returns, for each bucket Lease, the replica among the given ones
// that holds it (a Lease held by no one of them, or not yet created, is
// left out).
func holders(ctx context.Context, t *testing.T, c *harness.Clients, leases []string, replicas ...int) map[string]int {
	t.Helper()
	ids := identities(t, replicas...)
	held := map[string]int{}
	for _, name := range leases {
		lease, err := c.Kube.CoordinationV1().Leases(leaseNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil {
			continue
		}
		if n, ok := ids[*lease.Spec.HolderIdentity]; ok {
			held[name] = n
		}
	}
	return held
}

// leader returns the replica (hack/controller.sh's number, one of
// replicas) that leads the bucket of KIngress ns/name, waiting until one
// of them does.
func leader(ctx context.Context, t *testing.T, c *harness.Clients, ns, name string, replicas ...int) int {
	t.Helper()
	leases := bucketLeases(ctx, t, c)
	bucket := bucketOf(leases, ns, name)
	var n int
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var ok bool
		n, ok = holders(ctx, t, c, []string{bucket}, replicas...)[bucket]
		return ok, nil
	}); err != nil {
		t.Fatalf("none of the replicas %v leads the bucket %s/%s of KIngress %s/%s: %v", replicas, leaseNamespace, bucket, ns, name, err)
	}
	return n
}

// TestFaultLeaderKilledMidRollout runs two controller replicas with leader
// election and SIGKILLs the leader of the KIngress's bucket at a random
// moment of a rollout to a fresh backend, twice (each replica leads once).
// The other must take the bucket over once the dead replica's Lease expires
// and finish the rollout from the objects: KIngress Ready at the newest
// generation, no warm proxy left, and no request failed on any Envoy pod
// meanwhile.
func TestFaultLeaderKilledMidRollout(t *testing.T) {
	ctx, c, ns := setup(t, "leader")
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	// Exactly replicas 1 and 2, started at once.
	controller(t, "replicas", "2")
	t.Cleanup(func() { _ = exec.Command("../../hack/controller.sh", "replicas", "1").Run() })

	name := func(i int) string { return fmt.Sprintf("l%d", i) }
	ext, local := servedOnTwoHosts(ctx, t, c, ns, "leader", name(0))
	load, stopLoad := startLoad(ctx, t, c, envInt("FAULT_RPS", 100), ext, local, name(0))

	var slowest time.Duration
	for i := 1; i <= 2; i++ {
		was := leader(ctx, t, c, ns, "leader", 1, 2)
		if err := c.CreateBackend(ctx, ns, name(i)); err != nil {
			t.Fatal(err)
		}
		load.Allow(name(i-1), name(i))
		if err := c.Update(ctx, ns, "leader", func(ing *v1alpha1.Ingress) { harness.SetRules(ing, twoHosts(ext, local, name(i))...) }); err != nil {
			t.Fatal(err)
		}
		// Anywhere in a rollout's first half second: warming or switching.
		after := time.Duration(rng.Intn(500)) * time.Millisecond
		time.Sleep(after)
		killed := time.Now()
		controller(t, "kill", strconv.Itoa(was))
		ing, err := c.WaitReady(ctx, ns, "leader", 2*time.Minute)
		if err != nil {
			t.Fatalf("rollout %d (leader %d killed %v in): %v", i, was, after, err)
		}
		took := time.Since(killed)
		slowest = max(slowest, took)
		load.Allow(name(i))
		now := leader(ctx, t, c, ns, "leader", 3-was)
		t.Logf("rollout %d: leader %d killed %dms in; replica %d took over, Ready at generation %d %v after the kill",
			i, was, after.Milliseconds(), now, ing.Generation, took.Round(time.Millisecond))
		waitWarmReleased(ctx, t, c, ns)
		if err := c.DeleteBackend(ctx, ns, name(i-1)); err != nil {
			t.Fatal(err)
		}
		// The killed replica comes back as the standby.
		controller(t, "start", strconv.Itoa(was))
	}
	stopLoad()
	reportFault(t, "leader-killed", load.Summarize(), slowest)
}
