package probe

import (
	"slices"
	"sort"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// stuckPod is a pod with checks stuck in rounds of the given seqs, each
// answered at answered, and no workers: what is queued stays queued.
func stuckPod(t *testing.T, answered time.Time, seqs ...uint64) (*Prober, *pod, map[uint64]*check) {
	t.Helper()
	pd := &pod{
		queue: workqueue.NewTypedDelayingQueue[*check](),
		gates: map[*check]struct{}{}, held: map[*check]struct{}{}, stuck: map[*check]struct{}{},
	}
	t.Cleanup(pd.queue.ShutDown)
	p := &Prober{}
	checks := map[uint64]*check{}
	for _, seq := range seqs {
		c := &check{round: &round{seq: seq}, answered: answered}
		p.addStuckLocked(pd, c)
		checks[seq] = c
	}
	return p, pd, checks
}

// queued drains what is queued now, by seq.
func queued(pd *pod) []uint64 {
	var out []uint64
	for pd.queue.Len() > 0 {
		c, _ := pd.queue.Get()
		out = append(out, c.round.seq)
		pd.queue.Done(c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// TestStuckEdges: the oldest and the latest stuck rounds of a pod are its
// edges, retried on their back-off; the rest wait for them.
func TestStuckEdges(t *testing.T) {
	p, pd, checks := stuckPod(t, time.Now(), 1, 3, 5, 7)
	for seq, want := range map[uint64]bool{1: true, 3: false, 5: false, 7: true} {
		if got := p.stuckEdgeLocked(pd, checks[seq]); got != want {
			t.Errorf("stuckEdgeLocked(seq %d) = %v, want %v", seq, got, want)
		}
	}
	lone := &check{round: &round{seq: 4}}
	_, alone, _ := stuckPod(t, time.Now())
	p.addStuckLocked(alone, lone)
	if !p.stuckEdgeLocked(alone, lone) {
		t.Error("a pod's only stuck check is not an edge")
	}
}

// TestStuckServedSendsTheEarlierAndTheOldest: a stuck check served shows
// the endpoints of its round and every earlier one came: the stuck checks
// of those rounds that answered before its probe went out are probed at
// once, and so is the oldest of the later ones; the rest keep waiting. A
// check that answered since, or is being probed, or is held, is left.
func TestStuckServedSendsTheEarlierAndTheOldest(t *testing.T) {
	t0 := time.Now()
	sent := t0.Add(time.Second)
	p, pd, checks := stuckPod(t, t0, 1, 2, 3, 4, 5, 6, 8, 9)
	checks[3].answered = sent.Add(time.Millisecond)
	checks[4].probing = true
	checks[2].held = true
	p.stuckServedLocked(pd, checks[5], sent)
	if got, want := queued(pd), []uint64{1, 6}; !slices.Equal(got, want) {
		t.Errorf("queued %v, want %v", got, want)
	}
	if _, ok := pd.stuck[checks[5]]; ok {
		t.Error("the served check is still stuck")
	}
}
