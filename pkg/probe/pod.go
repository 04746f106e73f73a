package probe

import (
	"context"
	"crypto/tls"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"time"

	"k8s.io/client-go/util/workqueue"

	"github.com/hitless/hitless/pkg/proxyproto"
)

// pod holds the connections to one Envoy pod and the probes queued for it.
type pod struct {
	ip    string
	queue workqueue.TypedDelayingInterface[*check]
	plain *http.Transport
	tls   *http.Transport
	// proxyPlain and proxyTLS send the PROXY protocol header first. Their
	// connections are pooled apart: one that sent the header must never
	// carry a probe that should not, nor the other way round, while
	// config-contour changes.
	proxyPlain *http.Transport
	proxyTLS   *http.Transport
	refs       int
	lastUsed   time.Time

	// Ordered probing. Contour builds its configuration from every object
	// it has seen and each Envoy pod applies a push whole, so on one pod a
	// check whose proxies were written earlier is served no later than one
	// written after it. gates are the checks whose last answer says the
	// pod has not their configuration yet (404, an older hash, 503: no
	// route, the previous one, or a route whose cluster has no endpoint
	// yet); while one is pending, the checks of later rounds (a higher
	// seq) need not be probed: they wait in held, and only the oldest gate
	// (the head) is probed, on its back-off, each of its unserved answers
	// sending one scout along (the held check of the latest round). When
	// any check of the pod is served, the pod took a push: held checks of
	// rounds up to the served one answered before that probe went out are
	// probed again, once. A gate the pod still does not serve after it
	// served a later round is stuck (its backend has no endpoint, say) and
	// holds no one; answers that say something else (401, 403, no answer)
	// never hold anyone back.
	gates map[*check]struct{}
	held  map[*check]struct{}
	// stuck are the checks stuck on the pod (see stuck.go).
	stuck map[*check]struct{}
	// newest is the highest seq the pod served, and when the probe that
	// showed it was sent.
	newest     uint64
	newestSent time.Time
	// served records when the latest probes the pod confirmed were sent:
	// a pod that keeps confirming other rounds' checks is taking
	// Contour's pushes, in whatever order their rounds were written.
	served servedAt
}

// servedAt is when a pod last confirmed a check (last, of round lastSeq)
// and when it last confirmed one of any other round (other). The two tell
// for any round when the pod last served someone else: a round's own
// confirmations say nothing of a push still to come for its other checks
// (one backend served, the other without endpoints).
type servedAt struct {
	last    time.Time
	lastSeq uint64
	other   time.Time
}

// record notes a confirmation of a check of round seq, probed at sent.
// Answers may come back out of the order their probes went out.
func (s *servedAt) record(seq uint64, sent time.Time) {
	switch {
	case seq == s.lastSeq:
		if sent.After(s.last) {
			s.last = sent
		}
	case sent.After(s.last):
		// Every confirmation of a round other than seq came no later
		// than the one that was the latest.
		s.other = s.last
		s.last, s.lastSeq = sent, seq
	case sent.After(s.other):
		s.other = sent
	}
}

// byOthers is when the pod last confirmed a check of a round other than
// seq.
func (s servedAt) byOthers(seq uint64) time.Time {
	if seq == s.lastSeq {
		return s.other
	}
	return s.last
}

// enqueueLocked queues a check on its pod, starting the pod's workers the
// first time it is probed.
func (p *Prober) enqueueLocked(c *check, after time.Duration) {
	pd := p.pods[c.ip]
	if pd == nil {
		pd = p.newPod(c.ip)
		p.pods[c.ip] = pd
	}
	pd.refs++
	pd.lastUsed = p.now()
	pd.queue.AddAfter(c, after)
}

func (p *Prober) newPod(ip string) *pod {
	dialer := &net.Dialer{Timeout: p.opts.Timeout, KeepAlive: 30 * time.Second}
	transport := func(tlsConf *tls.Config, proxy bool) *http.Transport {
		return &http.Transport{
			// Every URL's host is the pod itself (plain) or the virtual host
			// (TLS, for its SNI); either way the connection is to this pod.
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				_, port, err := net.SplitHostPort(addr)
				if err != nil {
					return nil, err
				}
				if proxy {
					return proxyproto.Dial(ctx, dialer, network, net.JoinHostPort(ip, port))
				}
				return dialer.DialContext(ctx, network, net.JoinHostPort(ip, port))
			},
			TLSClientConfig:     tlsConf,
			MaxConnsPerHost:     p.opts.PerPod,
			MaxIdleConnsPerHost: p.opts.PerPod,
			IdleConnTimeout:     p.opts.IdlePod,
			DisableCompression:  true,
			// Envoy's HTTP/1.1 listener is what users reach on port 80.
			ForceAttemptHTTP2: false,
		}
	}
	// Probes check that the pod routes the host, not who signed its
	// certificate: the same choice Knative's prober makes.
	insecure := func() *tls.Config { return &tls.Config{InsecureSkipVerify: true} } //nolint:gosec
	pd := &pod{
		ip:         ip,
		queue:      workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[*check]{Name: ""}),
		plain:      transport(nil, false),
		tls:        transport(insecure(), false),
		proxyPlain: transport(nil, true),
		proxyTLS:   transport(insecure(), true),
		gates:      map[*check]struct{}{},
		held:       map[*check]struct{}{},
		stuck:      map[*check]struct{}{},
	}
	for range p.opts.PerPod {
		go p.work(pd)
	}
	return pd
}

func (p *Prober) work(pd *pod) {
	for {
		c, shutdown := pd.queue.Get()
		if shutdown {
			return
		}
		p.run(pd, c)
		pd.queue.Done(c)
	}
}

// run probes one check and records the answer.
func (p *Prober) run(pd *pod, c *check) {
	p.mu.Lock()
	if c.gone {
		pd.refs--
		p.mu.Unlock()
		return
	}
	if !c.pass && p.behindGateLocked(pd, c) {
		// Parked, not probed: its pod's routes predate an older check's
		// proxies, so they predate this one's too. The reference stays
		// with the parked check.
		c.held = true
		pd.held[c] = struct{}{}
		p.mu.Unlock()
		return
	}
	c.pass = false
	c.probing = true
	r := c.round
	sent := p.now()
	p.mu.Unlock()

	p.metrics.inflight(1)
	answer, err := p.probe(r.ctx, pd, c)
	p.metrics.inflight(-1)

	p.mu.Lock()
	c.probing = false
	if c.gone || r.ctx.Err() != nil {
		pd.refs--
		p.mu.Unlock()
		return
	}
	if err == nil {
		ready := p.confirmLocked(pd, c, sent)
		p.mu.Unlock()
		if ready {
			p.logger.Debugw("Confirmed on every Envoy pod", "key", r.key.String(), "hash", r.hash, "took", p.now().Sub(r.started).String())
			p.ready(r.key)
		}
		return
	}
	p.retryLocked(pd, c, sent, answer, err)
	p.mu.Unlock()
}

// confirmLocked records that the pod served c, probed at sent, and tells
// whether that confirmed its round on every pod.
func (p *Prober) confirmLocked(pd *pod, c *check, sent time.Time) bool {
	p.metrics.sent("confirmed")
	pd.served.record(c.round.seq, sent)
	c.attempts = -1
	pd.refs--
	// The checks c held go after endpointsLag: a push came, and their
	// clusters' endpoints may trail it.
	p.ungateLocked(pd, c, endpointsLag)
	p.servedLocked(pd, c, sent)
	if c.stuck {
		p.stuckServedLocked(pd, c, sent)
	}
	if pp := c.round.pods[c.ip]; pp != nil {
		pp.pending--
		if pp.pending == 0 {
			p.metrics.confirmed(p.now().Sub(pp.since))
		}
	}
	return p.checkReadyLocked(c.round)
}

// retryLocked records an answer that does not confirm c (or none: answer
// empty, err says why), makes c a gate of its pod or not (see pod.gates),
// and queues its next attempt.
func (p *Prober) retryLocked(pd *pod, c *check, sent time.Time, answer string, err error) {
	switch {
	case answer == "":
		p.metrics.sent("error")
		answer = noAnswer(err, c.proxy)
	case errors.Is(err, errNotProgrammed):
		p.metrics.notProgrammed(answer)
	default:
		p.metrics.sent("not-yet")
	}
	c.attempts++
	c.answered = p.now()
	switch {
	case !errors.Is(err, errNotProgrammed):
		p.ungateLocked(pd, c, 0)
	case pd.newest > c.round.seq && pd.newestSent.Before(sent):
		// The pod served a later round before this probe went out.
		p.addStuckLocked(pd, c)
		p.ungateLocked(pd, c, 0)
	case !c.stuck:
		p.gateLocked(pd, c)
	}
	var waited time.Duration
	if pp := c.round.pods[c.ip]; pp != nil {
		pp.lastError = answer
		pp.notProgrammed = errors.Is(err, errNotProgrammed)
		waited = p.now().Sub(pp.since)
	}
	delay := p.backoff(waited)
	if c.stuck && errors.Is(err, errNotProgrammed) {
		// The pod serves later rounds and not this one: under a flood,
		// a route whose cluster's endpoints are still to come (503).
		// They come with one of Contour's pushes, which a busy pod takes
		// a second or so apart; the first BackoffFast's quick retries,
		// meant for a lone rollout on an idle pod, would ask it a dozen
		// times in between. Between the oldest and the latest stuck
		// round, it waits for them (stuck.go).
		delay = max(delay, busyRetry)
		if !p.stuckEdgeLocked(pd, c) {
			delay = max(delay, p.opts.BackoffMax)
		}
	}
	if c.gate && p.headLocked(pd) == c {
		// The head is the pod's probe while it is behind: how soon it
		// sees a push is how soon the held checks go. With checks held,
		// each of its answers sends a scout along, and it retries no
		// more often than busyRetry: a pod behind on a thousand new
		// proxies takes a push a second or so, and probes of it compete
		// with its configuration for the CPU.
		delay = min(delay, p.opts.BackoffSteady)
		if scout := p.scoutLocked(pd); scout != nil {
			p.unholdLocked(pd, scout, true, 0)
			delay = min(max(delay, busyRetry), p.opts.BackoffSteady)
		}
	}
	pd.lastUsed = p.now()
	// The reference moves to the next attempt.
	pd.queue.AddAfter(c, delay)
}

// backoff is the wait before a URL the pod has not served for waited is
// probed again: BackoffInitial during the first BackoffFast, then a quarter
// of waited up to BackoffSteady, then a tenth of it if that is longer, at
// most BackoffMax; plus up to a quarter at random.
func (p *Prober) backoff(waited time.Duration) time.Duration {
	d := p.opts.BackoffInitial
	if waited >= p.opts.BackoffFast {
		d = min(max(waited/4, d), p.opts.BackoffSteady)
		d = max(d, waited/10)
	}
	d = min(d, p.opts.BackoffMax)
	return d + time.Duration(rand.Int64N(int64(d)/4+1))
}

// forgetIdlePods closes the connections of pods no round probes any more.
func (p *Prober) forgetIdlePods() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	for ip, pd := range p.pods {
		if pd.refs == 0 && now.Sub(pd.lastUsed) > p.opts.IdlePod {
			p.closePod(pd)
			delete(p.pods, ip)
		}
	}
}

func (p *Prober) closePod(pd *pod) {
	pd.queue.ShutDown()
	for _, t := range []*http.Transport{pd.plain, pd.tls, pd.proxyPlain, pd.proxyTLS} {
		t.CloseIdleConnections()
	}
}
