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
	"k8s.io/apimachinery/pkg/util/wait"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"

	"github.com/hitless/hitless/test/harness"
)

// leaseName is the Lease of the controller's only bucket
// (config-leader-election: buckets 1), in its system namespace.
const (
	leaseNamespace = "knative-serving"
	leaseName      = "hitless-controller.github.com.hitless.hitless.pkg.reconciler.contour.reconciler.00-of-01"
)

// leader returns the replica (hack/controller.sh's number) that holds the
// lease and its identity.
func leader(ctx context.Context, t *testing.T, c *harness.Clients) (int, string) {
	t.Helper()
	var n int
	var id string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err := exec.Command("../../hack/controller.sh", "leader").Output()
		if err != nil {
			return false, nil
		}
		n, err = strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil {
			return false, nil
		}
		lease, err := c.Kube.CoordinationV1().Leases(leaseNamespace).Get(ctx, leaseName, metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil {
			return false, nil
		}
		id = *lease.Spec.HolderIdentity
		return true, nil
	}); err != nil {
		t.Fatalf("no running replica holds the lease %s/%s: %v", leaseNamespace, leaseName, err)
	}
	return n, id
}

// TestFaultLeaderKilledMidRollout runs two controller replicas with leader
// election and SIGKILLs the leader at a random moment of a rollout to a
// fresh backend, twice (each replica leads once). The standby must take
// over once the dead leader's lease expires and finish the rollout from the
// objects: KIngress Ready at the newest generation, no warm proxy left, and
// no request failed on any Envoy pod meanwhile.
func TestFaultLeaderKilledMidRollout(t *testing.T) {
	ctx, c, ns := setup(t, "leader")
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	controller(t, "start", "2")
	t.Cleanup(func() {
		// Back to one replica: stopping 2 hands its lease over at once.
		_ = exec.Command("../../hack/controller.sh", "stop", "2").Run()
		_ = exec.Command("../../hack/controller.sh", "start").Run()
	})

	name := func(i int) string { return fmt.Sprintf("l%d", i) }
	ext, local := servedOnTwoHosts(ctx, t, c, ns, "leader", name(0))
	load, stopLoad := startLoad(ctx, t, c, envInt("FAULT_RPS", 100), ext, local, name(0))

	var slowest time.Duration
	for i := 1; i <= 2; i++ {
		was, wasID := leader(ctx, t, c)
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
		now, nowID := leader(ctx, t, c)
		if now == was || nowID == wasID {
			t.Errorf("rollout %d: replica %d (%s) leads after replica %d (%s) was killed, want the other one", i, now, nowID, was, wasID)
		}
		t.Logf("rollout %d: leader %d (%s) killed %dms in; replica %d (%s) took over, Ready at generation %d %v after the kill",
			i, was, wasID, after.Milliseconds(), now, nowID, ing.Generation, took.Round(time.Millisecond))
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
