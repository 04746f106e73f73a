package main

import (
	"fmt"
	"sort"
	"time"

	"github.com/hitless/hitless/test/harness"
)

// swapEvents is one swap's timeline, kept so that a failed request can be
// lined up with the phase it fell in and the pods involved.
type swapEvents struct {
	n        int
	from, to string
	// Pod addresses of the backends, as their EndpointSlices listed them
	// when the new one was Ready.
	fromIPs, toIPs []string
	created        time.Time // the new backend's Pod and Service had a ready endpoint
	updated        time.Time // the route (HTTPProxy or KIngress) was written
	switching      time.Time // zero when no Warming phase was seen
	ready          time.Time // every Envoy pod served the new backend
	deleted        time.Time // the previous backend's Pod and Service were deleted
}

// explain places a failed request on the swap timeline: the swap it started
// in, and when it started and ended relative to that swap's events.
func explain(r harness.Result, swaps []swapEvents, target string) string {
	what := r.Err
	if r.Code != 0 {
		what = fmt.Sprintf("HTTP %d", r.Code)
		if r.Backend != "" {
			what += " from " + r.Backend
		}
	}
	head := fmt.Sprintf("%s (%v) via %s: %s", r.Start.Format("15:04:05.000"), r.End.Sub(r.Start).Round(time.Millisecond), target, what)
	i := sort.Search(len(swaps), func(i int) bool { return swaps[i].created.After(r.Start) }) - 1
	if i < 0 {
		return head + " — before the first swap"
	}
	s := swaps[i]
	rel := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%+.3fs", t.Sub(r.Start).Seconds())
	}
	return fmt.Sprintf("%s — swap %d %s%v -> %s%v; relative to the request's start: updated %s, switching %s, ready %s, %s deleted %s",
		head, s.n, s.from, s.fromIPs, s.to, s.toIPs, rel(s.updated), rel(s.switching), rel(s.ready), s.from, rel(s.deleted))
}
