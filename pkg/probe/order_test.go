package probe

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// rounds starts a round for each of n KIngresses, k0 first, each with a
// host of its own, and returns them in that order.
func rounds(t *testing.T, p *Prober, n int) []Round {
	t.Helper()
	var out []Round
	for i := range n {
		ing := kingress(fmt.Sprintf("k%d", i), fmt.Sprintf("k%d.example.com", i))
		if _, err := p.IsReady(context.Background(), ing); err != nil {
			t.Fatal(err)
		}
		out = append(out, ing)
	}
	return out
}

// awaitProbes waits until the pod was asked for host at least n times.
func awaitProbes(t *testing.T, e *envoyPod, host string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.probesOf(host) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s was probed %d times, want %d", host, e.probesOf(host), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// awaitAll waits for the ready callback of every KIngress named.
func (c *confirmations) awaitAll(t *testing.T, ings []Round) {
	t.Helper()
	want := map[RoundKey]bool{}
	for _, ing := range ings {
		want[ing.Key] = true
	}
	deadline := time.After(10 * time.Second)
	for len(want) > 0 {
		select {
		case got := <-c.ch:
			delete(want, got)
		case <-deadline:
			t.Fatalf("never confirmed: %v", want)
		}
	}
}

// TestLaterRoundsWaitBehindAnUnprogrammedOne: while a pod has no route for
// the earliest round (404), the rounds started after it are not probed
// again: only the earliest is, each of its probes past scoutAfter sending
// one scout (a held check of the latest round held).
// Once the pod serves them all, every round is confirmed by its own 200.
func TestLaterRoundsWaitBehindAnUnprogrammedOne(t *testing.T) {
	e, c, p := onePod(t)
	const n = 20
	ings := rounds(t, p, n)

	// The earliest round's gate has been probed well past scoutAfter.
	awaitProbes(t, e, "k0.example.com", 3*scoutAfter)
	// Read while k0 keeps being probed: the gate first, so the later
	// rounds' count cannot include scouts of gate probes not counted.
	gate := e.probesOf("k0.example.com")
	later := 0
	for i := 1; i < n; i++ {
		later += e.probesOf(fmt.Sprintf("k%d.example.com", i))
	}
	// One more scout may go out between the two reads.
	if scouts := gate - scoutAfter + 2; later > n-1+scouts {
		t.Errorf("the %d later rounds were probed %d times while k0 was probed %d: want at most their first probes and %d scouts", n-1, later, gate, scouts)
	}
	t.Logf("before the push: k0 probed %d times, the %d later rounds %d", gate, n-1, later)

	for _, ing := range ings {
		e.serve(ing.Paths[0].Host, http.StatusOK, hashOf(t, ing))
	}
	c.awaitAll(t, ings)
	total := 0
	for _, ing := range ings {
		total += e.probesOf(ing.Paths[0].Host)
	}
	t.Logf("%d probes for %d checks", total, n)
}

// TestStuckRoundHoldsNoOne: a round the pod never serves (404 for good: a
// proxy Contour refused, say) must not hold the later ones once the pod
// serves them: a scout finds them served, and they are confirmed.
func TestStuckRoundHoldsNoOne(t *testing.T) {
	e, c, p := onePod(t)
	const n = 10
	ings := rounds(t, p, n)
	awaitProbes(t, e, "k0.example.com", 2)
	for _, ing := range ings[1:] {
		e.serve(ing.Paths[0].Host, http.StatusOK, hashOf(t, ing))
	}
	c.awaitAll(t, ings[1:])
	c.none(t, 100*time.Millisecond)
	if prog, err := p.IsReady(context.Background(), ings[0]); err != nil || prog.Ready {
		t.Errorf("IsReady(k0) = %+v, %v; want not ready: the pod never served it", prog, err)
	}
}

// TestServiceUnavailableHoldsNoOne: 503 (a route without a healthy
// endpoint) says nothing of the pod's other routes, so a round answered
// 503 holds no later round: each is probed on its own back-off.
func TestServiceUnavailableHoldsNoOne(t *testing.T) {
	e, _, p := onePod(t)
	ings := rounds(t, p, 3)
	e.serve("k0.example.com", http.StatusServiceUnavailable, hashOf(t, ings[0]))
	awaitProbes(t, e, "k0.example.com", 3)
	// 404 at first, then no gate older than k1: k1 and k2 are gates in
	// turn, k1 probed on its back-off, k2 behind it.
	awaitProbes(t, e, "k1.example.com", 3)
}
