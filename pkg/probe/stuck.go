package probe

import "time"

// Stuck checks. A check is stuck once its pod served a later round while
// it still answers "not programmed" (see check.stuck): under a flood of
// KIngresses, nearly always a 503 whose route and cluster came in a push
// and whose endpoints come seconds later, while the pod keeps taking
// routes. We take it that endpoints reach a pod in the order their
// clusters were written, as routes do (make bench-scale's probe counts
// bear it out; Contour's EDS was not traced). So the oldest and the latest
// stuck round of a pod tell how far the endpoints have come: their checks
// are retried on their back-off, the others only every BackoffMax, until a
// stuck check of their round or a later one is served; then each is probed
// once more, at once. A stuck check served also sends the oldest one left,
// so that the oldest end follows the endpoints as they come while the
// flood goes on (the latest stuck check is then always a fresh one). Were
// the order not kept, a check would still be asked every BackoffMax, as a
// broken backend (no endpoints at all) is, and as any long wait is anyway.

// addStuckLocked records that c is stuck on its pod.
func (p *Prober) addStuckLocked(pd *pod, c *check) {
	c.stuck = true
	pd.stuck[c] = struct{}{}
}

// stuckEdgeLocked tells whether c is of the oldest or the latest round
// stuck on its pod.
func (p *Prober) stuckEdgeLocked(pd *pod, c *check) bool {
	older, newer := false, false
	for s := range pd.stuck {
		older = older || s.round.seq < c.round.seq
		newer = newer || s.round.seq > c.round.seq
		if older && newer {
			return false
		}
	}
	return true
}

// stuckServedLocked: the pod served c, stuck until now, probed at sent, so
// the endpoints of its round's clusters and of every earlier one reached
// the pod. The stuck checks of those rounds that answered before sent are
// probed at once, and so is the oldest stuck check left, to find how far
// the endpoints have come; a held one is the held checks' business.
func (p *Prober) stuckServedLocked(pd *pod, c *check, sent time.Time) {
	delete(pd.stuck, c)
	var oldest *check
	for s := range pd.stuck {
		if s.round.seq <= c.round.seq {
			p.stuckRetryLocked(pd, s, sent)
		} else if oldest == nil || s.round.seq < oldest.round.seq {
			oldest = s
		}
	}
	if oldest != nil {
		p.stuckRetryLocked(pd, oldest, sent)
	}
}

// stuckRetryLocked probes s at once, unless it answered after sent or is
// being probed.
func (p *Prober) stuckRetryLocked(pd *pod, s *check, sent time.Time) {
	if s.answered.Before(sent) && !s.probing && !s.held {
		// Already queued: this only moves it up.
		pd.queue.AddAfter(s, 0)
	}
}
