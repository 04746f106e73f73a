package probe

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
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
// again: only the earliest is, on its back-off, each of its answers sending
// one scout (the held check of the latest round). Once the pod serves them
// all, every round is confirmed by its own 200.
func TestLaterRoundsWaitBehindAnUnprogrammedOne(t *testing.T) {
	e, c, p := onePod(t)
	const n = 20
	ings := rounds(t, p, n)

	awaitProbes(t, e, "k0.example.com", 6)
	// Read while k0 keeps being probed: the head first, so the later
	// rounds' count cannot include scouts of head probes not counted.
	head := e.probesOf("k0.example.com")
	later := 0
	for i := 1; i < n; i++ {
		later += e.probesOf(fmt.Sprintf("k%d.example.com", i))
	}
	// One more scout may go out between the two reads.
	if later > n-1+head+1 {
		t.Errorf("the %d later rounds were probed %d times while k0 was probed %d: want at most their first probes and a scout each", n-1, later, head)
	}
	t.Logf("before the push: k0 probed %d times, the %d later rounds %d", head, n-1, later)

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

// TestStuckRoundHoldsNoOne: a round the pod never serves (a backend
// without endpoints: 503 for good) holds the later ones only until the pod
// serves them: the scout finds them served, and they are confirmed. The
// pod took pushes while the stuck round waited, so its 503 may be a
// cluster's endpoints still to come: it is behind, and its stall counts
// from the pod's last push, for the condition to name it once the pod has
// been quiet long enough.
func TestStuckRoundHoldsNoOne(t *testing.T) {
	e, c, p := onePod(t)
	const n = 10
	ings := rounds(t, p, n)
	e.serve("k0.example.com", http.StatusServiceUnavailable, "")
	awaitProbes(t, e, "k0.example.com", 2)
	for _, ing := range ings[1:] {
		e.serve(ing.Paths[0].Host, http.StatusOK, hashOf(t, ing))
	}
	c.awaitAll(t, ings[1:])
	c.none(t, 100*time.Millisecond)
	prog := awaitProgress(t, p, ings[0], "k0 waiting on a 503", laggardSays("503"))
	w := prog.Fleets[0].Waiting[0]
	if prog.Ready || !w.Behind || w.Stalled >= w.For {
		t.Errorf("IsReady(k0) = %+v; want not ready, behind, stalled since the pod's last push, not since k0 began", prog)
	}
}

// TestAnswersThatSayNothingOfThePushHoldNoOne: a refusal (401) says
// nothing of the pod's configuration, so a round answered so holds no
// later round: each is probed on its own back-off.
func TestAnswersThatSayNothingOfThePushHoldNoOne(t *testing.T) {
	e, _, p := onePod(t)
	rounds(t, p, 3)
	e.serve("k0.example.com", http.StatusUnauthorized, "")
	awaitProbes(t, e, "k0.example.com", 3)
	// k1 answers 404: the head, retried on its back-off.
	awaitProbes(t, e, "k1.example.com", 3)
}

// TestCancelWhereForgetsTheRoundsOfABucket: a replica demoted from a
// bucket forgets the rounds of its KIngresses, serving and warm, and only
// those.
func TestCancelWhereForgetsTheRoundsOfABucket(t *testing.T) {
	_, _, p := onePod(t)
	ings := rounds(t, p, 4)
	warm := ings[1]
	warm.Key.Warm = true
	if _, err := p.IsReady(context.Background(), warm); err != nil {
		t.Fatal(err)
	}
	p.CancelWhere(func(k types.NamespacedName) bool { return k.Name == "k1" || k.Name == "k2" })
	if got := p.Rounds(); got != 2 {
		t.Errorf("Rounds() = %d after cancelling k1 (serving and warm) and k2, want 2 (k0, k3)", got)
	}
}

// TestBehindPodTakingPushesIsNotStalled: a pod behind on a flood of rounds
// that serves the earlier ones as they come is waiting for Contour, not
// stuck: the later round's wait grows while its Stalled restarts at each
// push the pod shows, so the condition does not name it.
func TestBehindPodTakingPushesIsNotStalled(t *testing.T) {
	e, c, p := onePod(t)
	ings := rounds(t, p, 3)
	awaitProbes(t, e, "k0.example.com", 3)
	time.Sleep(300 * time.Millisecond)
	e.serve("k0.example.com", http.StatusOK, hashOf(t, ings[0]))
	c.awaitAll(t, ings[:1])
	prog := awaitProgress(t, p, ings[2], "k2 waiting", func(pr Progress) bool {
		return len(pr.Fleets) == 1 && len(pr.Fleets[0].Waiting) == 1
	})
	w := prog.Fleets[0].Waiting[0]
	if w.Stalled >= w.For || w.For < 300*time.Millisecond {
		t.Errorf("k2 waits %v, stalled %v: want the wait to count from its start and the stall from the pod's push of k0", w.For, w.Stalled)
	}
}

// TestStuckCheckRetriesAtTheBusyPace: a check the pod does not serve while
// it serves a later round (a 503: its cluster's endpoints still to come)
// is retried no more often than busyRetry, not at the quick pace of a lone
// rollout's first 300 ms.
func TestStuckCheckRetriesAtTheBusyPace(t *testing.T) {
	e, c, p := onePod(t)
	e.serve("k0.example.com", http.StatusServiceUnavailable, "")
	ings := rounds(t, p, 2)
	e.serve("k1.example.com", http.StatusOK, hashOf(t, ings[1]))
	c.awaitAll(t, ings[1:])
	// One more answer after k1 was served: k0 is stuck from then on.
	awaitProbes(t, e, "k0.example.com", e.probesOf("k0.example.com")+1)
	before := e.probesOf("k0.example.com")
	time.Sleep(500 * time.Millisecond)
	// At most one per busyRetry (with its jitter), and the one in flight.
	if got := e.probesOf("k0.example.com") - before; got > 3 {
		t.Errorf("k0 was probed %d times in 500 ms once stuck, want at most 3 (one per %v)", got, busyRetry)
	}
}

// TestOwnBackendServedIsNoPush: a round with two hosts, one served and the
// other answering 503 for good (its backend has no endpoints), on a pod no
// other round waits on. The pod's confirmation of the round's own first
// host is no sign of Contour's pushes still coming: the 503 is not behind,
// and the condition names it after the short wait.
func TestOwnBackendServedIsNoPush(t *testing.T) {
	e, c, p := onePod(t)
	ing := kingress("k0", "a.example.com", "b.example.com")
	e.serve("a.example.com", http.StatusOK, hashOf(t, ing))
	e.serve("b.example.com", http.StatusServiceUnavailable, "")
	prog := awaitProgress(t, p, ing, "b waiting on a 503", laggardSays("503"))
	awaitProbes(t, e, "b.example.com", 3)
	prog = awaitProgress(t, p, ing, "b waiting on a 503", laggardSays("503"))
	if w := prog.Fleets[0].Waiting[0]; w.Behind || w.Stalled < w.For {
		t.Errorf("IsReady(k0) waits %+v: want not behind, stalled since the round began (only its own host was served)", w)
	}
	c.none(t, 100*time.Millisecond)
}

// TestServedAtByOthers: a pod's record of its confirmations tells, for any
// round, when it last confirmed another round's check, whatever order the
// answers come back in.
func TestServedAtByOthers(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	type conf struct {
		seq  uint64
		sent int
	}
	tests := []struct {
		name  string
		confs []conf
		want  map[uint64]time.Time
	}{{
		name: "nothing served",
		want: map[uint64]time.Time{1: {}, 2: {}},
	}, {
		name:  "one round's own checks",
		confs: []conf{{1, 10}, {1, 12}},
		want:  map[uint64]time.Time{1: {}, 2: at(12)},
	}, {
		name:  "another round before",
		confs: []conf{{2, 5}, {1, 10}, {1, 12}},
		want:  map[uint64]time.Time{1: at(5), 2: at(12), 3: at(12)},
	}, {
		name:  "answers out of order",
		confs: []conf{{1, 10}, {2, 8}, {3, 9}, {1, 7}},
		want:  map[uint64]time.Time{1: at(9), 2: at(10), 3: at(10), 4: at(10)},
	}, {
		name:  "rounds interleaved",
		confs: []conf{{1, 1}, {2, 2}, {1, 3}, {2, 4}},
		want:  map[uint64]time.Time{1: at(4), 2: at(3), 3: at(4)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s servedAt
			for _, c := range tt.confs {
				s.record(c.seq, at(c.sent))
			}
			for seq, want := range tt.want {
				if got := s.byOthers(seq); !got.Equal(want) {
					t.Errorf("byOthers(%d) = %v, want %v", seq, got.Unix(), want.Unix())
				}
			}
		})
	}
}

// TestHeldChecksWaitForTheirEndpoints: when a pod serves the latest round
// that waits on it, the earlier ones were in the same push, but their
// clusters' endpoints may trail it (Envoy warms a cluster until they come;
// the route is there at once, answering 503). The held checks and the
// head are probed endpointsLag after the push, so each is confirmed by one
// probe rather than by a 503 and then a second.
func TestHeldChecksWaitForTheirEndpoints(t *testing.T) {
	e, c, p := onePod(t)
	const n = 10
	ings := rounds(t, p, n)
	latest := ings[n-1]
	earlier := ings[:n-1]
	// Long enough for the later rounds to be held behind k0, and k0's
	// answers to send the latest round along as the scout.
	awaitProbes(t, e, "k0.example.com", 6)
	count := func() int {
		total := 0
		for _, ing := range earlier {
			total += e.probesOf(ing.Paths[0].Host)
		}
		return total
	}
	// The push: every route, the latest round's cluster warm, the
	// others' not yet.
	e.mu.Lock()
	for _, ing := range earlier {
		e.routes[ing.Paths[0].Host] = route{status: http.StatusServiceUnavailable, body: "no healthy upstream"}
	}
	e.routes[latest.Paths[0].Host] = route{status: http.StatusOK, hash: hashOf(t, latest)}
	e.mu.Unlock()
	c.awaitAll(t, ings[n-1:])
	before := count()
	// The endpoints come a moment after the push, well within
	// endpointsLag.
	time.Sleep(endpointsLag / 5)
	for _, ing := range earlier {
		e.serve(ing.Paths[0].Host, http.StatusOK, hashOf(t, ing))
	}
	c.awaitAll(t, earlier)
	// One probe each, and one more for k0 if the head's back-off came up
	// between the push and its endpoints.
	if got := count() - before; got > len(earlier)+1 {
		t.Errorf("the %d earlier rounds were probed %d times once the pod served the latest, want one each", len(earlier), got)
	}
	t.Logf("%d probes of the %d earlier rounds once the pod served the latest", count()-before, len(earlier))
}

// TestFleetStalledCountsEveryPod: a pod that takes no push while another
// pod of its fleet does lags its peers: its own stall grows, its fleet's
// does not. Both pods waiting without a push stall together.
func TestFleetStalledCountsEveryPod(t *testing.T) {
	a, b := newEnvoyPod(t, "127.0.0.2"), newEnvoyPod(t, "127.0.0.3")
	_, c, p := proberOf(t, a, b)
	ings := rounds(t, p, 2)
	awaitProbes(t, a, "k1.example.com", 1)
	awaitProbes(t, b, "k1.example.com", 1)
	time.Sleep(100 * time.Millisecond)
	prog := awaitProgress(t, p, ings[1], "both pods waiting", func(pr Progress) bool {
		return len(pr.Fleets) == 1 && len(pr.Fleets[0].Waiting) == 2
	})
	for _, w := range prog.Fleets[0].Waiting {
		if w.FleetStalled < 100*time.Millisecond || w.FleetStalled > w.Stalled {
			t.Errorf("before any push, %s waits %+v: want its fleet stalled with it", w.IP, w)
		}
	}
	// a takes a push with k0; b none.
	a.serve("k0.example.com", http.StatusOK, hashOf(t, ings[0]))
	awaitProbes(t, a, "k0.example.com", a.probesOf("k0.example.com")+1)
	time.Sleep(50 * time.Millisecond)
	awaitProgress(t, p, ings[1], "b lagging", func(pr Progress) bool {
		for _, w := range pr.Fleets[0].Waiting {
			if w.IP == b.ip && w.Stalled-w.FleetStalled >= 50*time.Millisecond {
				return true
			}
		}
		return false
	})
	c.none(t, 10*time.Millisecond)
}
