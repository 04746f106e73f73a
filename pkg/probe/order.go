package probe

import "time"

// behindGateLocked tells whether a gate of an earlier round waits on the
// pod.
func (p *Prober) behindGateLocked(pd *pod, c *check) bool {
	h := p.headLocked(pd)
	return h != nil && h.round.seq < c.round.seq
}

// busyRetry is how often, at most, the head of a pod with held checks is
// retried.
const busyRetry = 250 * time.Millisecond

// endpointsLag is how long a held check waits, once its pod served its
// round or a later one, before it is probed. The push that served it has
// every earlier route and cluster, but a cluster's endpoints reach Envoy
// apart from them (Envoy warms a new cluster until its endpoints come, and
// Contour's routes do not wait for that): under a flood of 1,000
// KIngresses, held checks probed at once answered 503 nearly every one
// (9,139 503s for 9,200 checks), each confirmed by the next probe.
const endpointsLag = busyRetry

// scoutLocked is the held check of the latest round: served, it shows the
// pod has every earlier round too (a stuck head holds no one then).
func (p *Prober) scoutLocked(pd *pod) *check {
	var scout *check
	for h := range pd.held {
		if scout == nil || h.round.seq > scout.round.seq {
			scout = h
		}
	}
	return scout
}

// headLocked is the pod's oldest gate: the frontier of what it serves.
func (p *Prober) headLocked(pd *pod) *check {
	var head *check
	for g := range pd.gates {
		if head == nil || g.round.seq < head.round.seq {
			head = g
		}
	}
	return head
}

// gateLocked makes c a gate of its pod: it holds the checks of later
// rounds.
func (p *Prober) gateLocked(pd *pod, c *check) {
	if !c.gate {
		c.gate = true
		pd.gates[c] = struct{}{}
	}
}

// ungateLocked: c holds no one any more. When it was the head, the held
// checks older than the new head (all, without one) go back to the queue,
// after the given wait; none is probed for it: each was held for an answer
// that still stands.
func (p *Prober) ungateLocked(pd *pod, c *check, after time.Duration) {
	if !c.gate {
		return
	}
	wasHead := p.headLocked(pd) == c
	c.gate = false
	delete(pd.gates, c)
	if !wasHead {
		return
	}
	head := p.headLocked(pd)
	for h := range pd.held {
		if head == nil || h.round.seq <= head.round.seq {
			p.unholdLocked(pd, h, false, after)
		}
	}
}

// servedLocked: the pod served c, probed at sent, so it took a push that
// has c's round and, Contour's configuration being whole, every earlier
// one. The held checks of those rounds answered before sent (or not at
// all) get one probe each; the head, if it answered before sent, is probed
// now rather than at the end of its back-off, to find how far the push
// goes. Later rounds stay held: the head or the scout tells when the pod
// has them.
func (p *Prober) servedLocked(pd *pod, c *check, sent time.Time) {
	if c.round.seq > pd.newest {
		pd.newest, pd.newestSent = c.round.seq, sent
	}
	for h := range pd.held {
		if h.round.seq <= c.round.seq && h.answered.Before(sent) {
			p.unholdLocked(pd, h, true, endpointsLag)
		}
	}
	if head := p.headLocked(pd); head != nil && !head.probing && head.answered.Before(sent) {
		if head.held {
			p.unholdLocked(pd, head, true, endpointsLag)
		} else {
			head.pass = true
			// Already queued: this only moves it up.
			pd.queue.AddAfter(head, endpointsLag)
		}
	}
}

// unholdLocked queues a held check again, to be probed after the given
// wait; pass lets its next probe go even behind a gate.
func (p *Prober) unholdLocked(pd *pod, h *check, pass bool, after time.Duration) {
	delete(pd.held, h)
	h.held = false
	h.pass = h.pass || pass
	pd.queue.AddAfter(h, after)
}

// forgetLocked marks a check no longer wanted. One in the queue or in
// flight releases its pod reference when it comes out; a held one does
// here, and a gate stops holding anyone.
func (p *Prober) forgetLocked(c *check) {
	c.gone = true
	pd := p.pods[c.ip]
	if pd == nil {
		return
	}
	if c.held {
		delete(pd.held, c)
		c.held = false
		pd.refs--
	}
	delete(pd.stuck, c)
	p.ungateLocked(pd, c, 0)
}

// othersWaitLocked tells whether checks of rounds other than r wait on the
// pod for their configuration (gates or held checks). It counts r's own
// rather than walking the pod's, which may be thousands.
func (p *Prober) othersWaitLocked(pd *pod, r *round) bool {
	own := 0
	for _, c := range r.checks {
		if c.ip == pd.ip && (c.gate || c.held) {
			own++
		}
	}
	return len(pd.gates)+len(pd.held) > own
}
