// Package probe confirms that every Envoy pod of a fleet serves a round (a
// KIngress's serving proxies, or its warm set) at a given hash, and says
// which pods already do.
//
// The verdict follows Knative's (knative.dev/networking/pkg/status): a pod
// confirms a URL when the probe route answers 200 with the round's hash,
// which hitless's probe routes set in HashHeader (probekey.HashHeader);
// 404, 503 and an older hash (no route yet, no endpoint yet, the previous
// configuration) are retried; 401 and 403, an authorization server refusing
// the probe before Envoy routes it, are retried too, never taken for
// served; any other answer abandons the URL, as Knative does, so a backend
// that is not Knative's cannot hold a rollout forever. What is ours is how
// it gets there: kept-alive connections per Envoy pod shared by every
// round, a bounded number of probes in flight per pod (a slow pod never
// takes the others' turns), a short jittered back-off with a cap, probes
// ordered by when each round's proxies were written (a pod that has not
// the configuration of one round has not that of later ones: see
// pod.gates), and per-pod progress a condition message can show.
package probe

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/workqueue"
	nethttp "knative.dev/networking/pkg/http"
	"knative.dev/networking/pkg/http/header"

	"github.com/hitless/hitless/pkg/probekey"
	"github.com/hitless/hitless/pkg/proxyproto"
)

// Target is what to probe on the Envoy pods of one class through one of
// their listeners: every URL on every pod.
type Target struct {
	// Class is the Contour class of the pods, for progress reports.
	Class  string
	PodIPs sets.Set[string]
	// PodPort is the port of the listener inside the pod (8080 for HTTP,
	// 8443 for HTTPS in Contour's layout). Every URL of a target has the
	// scheme of that listener.
	PodPort string
	URLs    []*url.URL
	// ProxyProtocol sends a PROXY protocol v1 header first on every
	// connection, before the request or the TLS handshake: the pods'
	// Contour runs with --use-proxy-protocol (config-contour's
	// use-proxy-protocol).
	ProxyProtocol bool
}

// RoundKey names a round: the serving proxies of a KIngress, or its warm
// set (the warm proxies of a rollout).
type RoundKey struct {
	types.NamespacedName
	Warm bool
}

func (k RoundKey) String() string {
	if k.Warm {
		return k.NamespacedName.String() + " (warm)"
	}
	return k.NamespacedName.String()
}

// Path is one path prefix of one host, which every Envoy pod of the class
// must serve.
type Path struct {
	Class, Host, Prefix string
	// TLS: the host terminates TLS too, and Envoy routes its HTTPS
	// requests through a route table of their own, which must be probed.
	TLS bool
	// SecureOnly: the host is served over HTTPS only (behind an
	// authorization server); its plain HTTP answer proves nothing.
	SecureOnly bool
}

// Round is what the reconciler asks the prober to confirm: every Envoy pod
// of their class serves Paths, answering with Hash in HashHeader (the hash
// of the proxies that route them, computed by whoever wrote them).
type Round struct {
	Key   RoundKey
	Hash  string
	Paths []Path
}

// TargetLister turns a round's paths into targets: the Envoy pods of each
// class and the URLs to ask each of them. It is asked again on every IsReady
// until the round is confirmed, so pods that join must confirm and pods
// that leave are forgotten.
type TargetLister interface {
	ListProbeTargets(ctx context.Context, paths []Path) ([]Target, error)
}

// Options tune the prober. Zero values take the defaults below.
type Options struct {
	// InitialDelay is how long after a round starts its first probes go:
	// Contour needs at least its DAG rebuild to push anything.
	InitialDelay time.Duration
	// BackoffInitial, BackoffFast, BackoffSteady and BackoffMax shape the
	// wait before a URL is probed again on a pod, from how long the pod
	// has waited for it: every BackoffInitial for the first BackoffFast,
	// then a quarter of the wait up to BackoffSteady, then a tenth of it
	// up to BackoffMax. Up to a quarter of it is added at random so
	// retries of many KIngresses spread out.
	BackoffInitial, BackoffFast, BackoffSteady, BackoffMax time.Duration
	// Timeout bounds one probe request.
	Timeout time.Duration
	// PerPod is how many probes are in flight to one pod at most.
	PerPod int
	// IdlePod is how long a pod nobody probes keeps its connections.
	IdlePod time.Duration
	// Key derives the token every probe carries (probekey.Header): the
	// routes it probes match only requests that carry it.
	Key probekey.Key
}

// Defaults. A lone rollout is served by an idle Contour and Envoy within
// Contour's hold-off (100 ms) and one push: a round starts probing at once
// and retries every 25 ms for its first 300 ms, so it is confirmed within
// 25 ms of being served. Then retries stretch to a quarter of the wait,
// and from a second on to a tenth of it, at most 5 s later than it could
// have been confirmed. On a busy pod (1,000 KIngresses created at once)
// only the oldest unserved round and the latest are probed (pod.gates), so
// these retries stay few.
const (
	DefaultInitialDelay   = 20 * time.Millisecond
	DefaultBackoffInitial = 25 * time.Millisecond
	DefaultBackoffFast    = 300 * time.Millisecond
	DefaultBackoffSteady  = time.Second
	DefaultBackoffMax     = 5 * time.Second
	DefaultTimeout        = time.Second
	DefaultPerPod         = 8
	DefaultIdlePod        = 2 * time.Minute
)

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.InitialDelay, DefaultInitialDelay)
	def(&o.BackoffInitial, DefaultBackoffInitial)
	def(&o.BackoffFast, DefaultBackoffFast)
	def(&o.BackoffSteady, DefaultBackoffSteady)
	def(&o.BackoffMax, DefaultBackoffMax)
	def(&o.Timeout, DefaultTimeout)
	def(&o.IdlePod, DefaultIdlePod)
	if o.PerPod <= 0 {
		o.PerPod = DefaultPerPod
	}
	if o.BackoffMax < o.BackoffInitial {
		o.BackoffMax = o.BackoffInitial
	}
	o.BackoffSteady = min(max(o.BackoffSteady, o.BackoffInitial), o.BackoffMax)
	return o
}

// Progress is what a probe round of a KIngress knows now.
type Progress struct {
	Ready bool
	// Fleets are the classes the round waits on, sorted by class.
	Fleets []FleetProgress
}

// FleetProgress counts the pods of one class that confirmed the round.
type FleetProgress struct {
	Class            string
	Confirmed, Total int
	// Waiting are the pods that did not confirm yet, longest waiting first.
	Waiting []PodWait
}

// PodWait is one pod that has not confirmed yet.
type PodWait struct {
	IP string
	// For is how long the round has waited on the pod.
	For time.Duration
	// LastError is the last failed probe's answer ("503", "old hash", a
	// dial error), empty before the first answer.
	LastError string
	// Behind: the pod has not answered yet, or its last answer says it
	// has not the round's configuration yet (404, an older hash, 503) and
	// it serves no later round either: it is waiting for Contour's push,
	// nothing an operator can act on yet.
	Behind bool
}

// Prober probes KIngresses on every Envoy pod. Its methods are safe for
// concurrent use.
type Prober struct {
	logger  *zap.SugaredLogger
	lister  TargetLister
	ready   func(RoundKey)
	opts    Options
	metrics *metrics
	now     func() time.Time

	mu     sync.Mutex
	rounds map[RoundKey]*round
	pods   map[string]*pod // by IP
	seq    uint64
}

// New returns a prober; ready is called (never under a lock of the prober)
// when a round is confirmed on every pod.
func New(logger *zap.SugaredLogger, lister TargetLister, ready func(RoundKey), opts Options) *Prober {
	return &Prober{
		logger:  logger,
		lister:  lister,
		ready:   ready,
		opts:    opts.withDefaults(),
		metrics: newMetrics(),
		now:     time.Now,
		rounds:  map[RoundKey]*round{},
		pods:    map[string]*pod{},
	}
}

// round is the probing of one Round at its hash.
type round struct {
	key  RoundKey
	hash string
	// seq orders rounds by when they started, which is right after their
	// proxies were written: see pod.gates.
	seq uint64
	// token opens the probe routes of the round's namespace (probekey).
	token   string
	started time.Time
	ctx     context.Context
	cancel  context.CancelFunc
	ready   bool
	// checks and pods are dropped once the round is ready.
	checks map[checkKey]*check
	pods   map[string]*podProgress
}

type checkKey struct {
	ip, port, url string
	// proxy is part of the key: turning use-proxy-protocol on or off
	// replaces the checks of a round in progress.
	proxy bool
}

// check is one URL on one pod.
type check struct {
	round    *round
	ip, port string
	url      *url.URL
	// proxy sends the PROXY protocol header (Target.ProxyProtocol).
	proxy    bool
	attempts int
	// gone is set (under the prober's lock) when the check is no longer
	// wanted: its pod left, or its round was cancelled or replaced.
	gone bool

	// The fields below order the probes of a pod (see pod.gates), all
	// under the prober's lock.
	//
	// answered is when the last "not programmed yet" answer came.
	answered time.Time
	// gate: the check is in its pod's gates; held: in its pod's held.
	gate, held bool
	// stuck: a check written after this one was served by the pod while
	// this one was not, so its "not programmed yet" is about itself (a
	// proxy Contour refused, say), never a reason to hold others.
	stuck bool
	// pass lets the check's next probe go even behind a gate: the pod
	// served another check since its last answer.
	pass bool
	// probing is set while a probe of the check is in flight.
	probing bool
}

type podProgress struct {
	class     string
	pending   int
	since     time.Time
	lastError string
	// behind: the last answer says the pod has not the round's
	// configuration yet, and nothing says it is more than Contour's
	// pushes still to come (see pod.gates).
	behind bool
}

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
	// newest is the highest seq the pod served, and when the probe that
	// showed it was sent.
	newest     uint64
	newestSent time.Time
}

// Start runs the prober until done is closed.
func (p *Prober) Start(done <-chan struct{}) {
	go func() {
		t := time.NewTicker(p.opts.IdlePod / 4)
		defer t.Stop()
		for {
			select {
			case <-done:
				p.stop()
				return
			case <-t.C:
				p.forgetIdlePods()
			}
		}
	}()
}

// URL is the URL of a route's path prefix as Envoy matches it: the prefix
// exactly as written, escapes included. Envoy compares a prefix with the
// request's path as sent (it decodes no %2F), so "/%2Fb" must go out as
// "/%2Fb", not as "/%252Fb", the escaping of the literal string.
func URL(scheme, host, prefix string) *url.URL {
	u := &url.URL{Scheme: scheme, Host: host, Path: prefix}
	if p, err := url.PathUnescape(prefix); err == nil && p != prefix {
		u.Path, u.RawPath = p, prefix
	}
	return u
}

// HashHeader is the response header every probe route of hitless's sets
// (Envoy adds it to the backend's answer): the hash of the configuration the
// pod serves (probekey.HashHeader).
const HashHeader = probekey.HashHeader

// IsReady tells whether every Envoy pod serves the round, starting it when
// there is none for its key at its hash (one at another hash is replaced).
// Until the round is confirmed, each call brings its pods up to date with
// the fleet.
func (p *Prober) IsReady(ctx context.Context, want Round) (Progress, error) {
	key, hash := want.Key, want.Hash
	token, err := p.opts.Key.Token(key.Namespace)
	if err != nil {
		return Progress{}, fmt.Errorf("cannot probe %s: %w", key, err)
	}

	p.mu.Lock()
	r, ok := p.rounds[key]
	if ok && r.hash == hash && r.ready {
		p.mu.Unlock()
		return Progress{Ready: true}, nil
	}
	p.mu.Unlock()

	// Listed outside the lock: it reads informer caches and may dial.
	targets, err := p.lister.ListProbeTargets(ctx, want.Paths)
	if err != nil {
		return Progress{}, err
	}

	p.mu.Lock()
	r, ok = p.rounds[key]
	if ok && r.hash != hash {
		p.dropLocked(r)
		ok = false
	}
	if !ok {
		rctx, cancel := context.WithCancel(context.Background())
		p.seq++
		r = &round{key: key, hash: hash, seq: p.seq, token: token, started: p.now(), ctx: rctx, cancel: cancel,
			checks: map[checkKey]*check{}, pods: map[string]*podProgress{}}
		p.rounds[key] = r
	}
	if r.ready {
		p.mu.Unlock()
		return Progress{Ready: true}, nil
	}
	p.syncLocked(r, targets)
	// Confirmed now (nothing left to probe after pods left): the caller
	// learns it from the answer, no callback needed.
	p.checkReadyLocked(r)
	prog := p.progressLocked(r)
	p.mu.Unlock()
	return prog, nil
}

// syncLocked makes the round's checks those of targets: new pods and URLs
// are queued, checks of pods that left are dropped.
func (p *Prober) syncLocked(r *round, targets []Target) {
	want := map[checkKey]bool{}
	added := 0
	now := p.now()
	for _, t := range targets {
		for ip := range t.PodIPs {
			for _, u := range t.URLs {
				k := checkKey{ip: ip, port: t.PodPort, url: u.String(), proxy: t.ProxyProtocol}
				want[k] = true
				if _, ok := r.checks[k]; ok {
					continue
				}
				pp := r.pods[ip]
				if pp == nil {
					pp = &podProgress{class: t.Class, since: now}
					r.pods[ip] = pp
				}
				pp.pending++
				c := &check{round: r, ip: ip, port: t.PodPort, url: u, proxy: t.ProxyProtocol}
				r.checks[k] = c
				p.enqueueLocked(c, p.opts.InitialDelay)
				added++
			}
		}
	}
	for k, c := range r.checks {
		if want[k] {
			continue
		}
		delete(r.checks, k)
		if pp := r.pods[k.ip]; pp != nil && !c.confirmed() {
			pp.pending--
		}
		p.forgetLocked(c)
	}
	wantIPs := sets.New[string]()
	for k := range want {
		wantIPs.Insert(k.ip)
	}
	for ip := range r.pods {
		if !wantIPs.Has(ip) {
			delete(r.pods, ip)
		}
	}
	p.metrics.scheduled(added)
}

// confirmed marks a check whose pod answered: attempts is set negative so
// a check needs no second flag.
func (c *check) confirmed() bool { return c.attempts < 0 }

func (p *Prober) checkReadyLocked(r *round) bool {
	if r.ready {
		return false
	}
	for _, pp := range r.pods {
		if pp.pending > 0 {
			return false
		}
	}
	// A round with nothing to probe is confirmed at once, as Knative's is.
	r.ready = true
	r.cancel()
	for _, c := range r.checks {
		p.forgetLocked(c)
	}
	r.checks, r.pods = nil, nil
	return true
}

func (p *Prober) progressLocked(r *round) Progress {
	if r.ready {
		return Progress{Ready: true}
	}
	now := p.now()
	byClass := map[string]*FleetProgress{}
	for ip, pp := range r.pods {
		f := byClass[pp.class]
		if f == nil {
			f = &FleetProgress{Class: pp.class}
			byClass[pp.class] = f
		}
		f.Total++
		if pp.pending == 0 {
			f.Confirmed++
			continue
		}
		f.Waiting = append(f.Waiting, PodWait{IP: ip, For: now.Sub(pp.since), LastError: pp.lastError, Behind: pp.behind || pp.lastError == ""})
	}
	out := Progress{}
	for _, f := range byClass {
		sort.Slice(f.Waiting, func(i, j int) bool {
			if f.Waiting[i].For != f.Waiting[j].For {
				return f.Waiting[i].For > f.Waiting[j].For
			}
			return f.Waiting[i].IP < f.Waiting[j].IP
		})
		out.Fleets = append(out.Fleets, *f)
	}
	sort.Slice(out.Fleets, func(i, j int) bool { return out.Fleets[i].Class < out.Fleets[j].Class })
	return out
}

// Cancel forgets a round (its KIngress deleted, or the round done with): it
// leaves no state and its probes in flight are abandoned.
func (p *Prober) Cancel(key RoundKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r, ok := p.rounds[key]; ok {
		p.dropLocked(r)
	}
}

func (p *Prober) dropLocked(r *round) {
	r.cancel()
	for _, c := range r.checks {
		p.forgetLocked(c)
	}
	r.checks, r.pods = nil, nil
	if p.rounds[r.key] == r {
		delete(p.rounds, r.key)
	}
}

// Rounds is how many KIngresses the prober holds state for.
func (p *Prober) Rounds() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.rounds)
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
	pp := r.pods[c.ip]
	if err == nil {
		p.metrics.sent("confirmed")
		c.attempts = -1
		pd.refs--
		p.ungateLocked(pd, c)
		p.servedLocked(pd, c, sent)
		if pp != nil {
			pp.pending--
			if pp.pending == 0 {
				p.metrics.confirmed(p.now().Sub(pp.since))
			}
		}
		ready := p.checkReadyLocked(r)
		p.mu.Unlock()
		if ready {
			p.logger.Debugw("Confirmed on every Envoy pod", "key", r.key.String(), "hash", r.hash, "took", p.now().Sub(r.started).String())
			p.ready(r.key)
		}
		return
	}
	switch {
	case answer == "":
		p.metrics.sent("error")
		answer = noAnswer(err, c.proxy)
	case errors.Is(err, errNotProgrammed):
		p.metrics.sent("not-programmed")
	default:
		p.metrics.sent("not-yet")
	}
	c.attempts++
	c.answered = p.now()
	switch {
	case !errors.Is(err, errNotProgrammed):
		p.ungateLocked(pd, c)
	case pd.newest > r.seq && pd.newestSent.Before(sent):
		// The pod served a later round before this probe went out.
		c.stuck = true
		p.ungateLocked(pd, c)
	case !c.stuck:
		p.gateLocked(pd, c)
	}
	if pp != nil {
		pp.lastError = answer
		pp.behind = c.gate
	}
	var waited time.Duration
	if pp != nil {
		waited = p.now().Sub(pp.since)
	}
	delay := p.backoff(waited)
	if c.gate && p.headLocked(pd) == c {
		// The head is the pod's probe while it is behind: how soon it
		// sees a push is how soon the held checks go. With checks held,
		// each of its answers sends a scout along, and it retries no
		// more often than busyRetry: a pod behind on a thousand new
		// proxies takes a push a second or so, and probes of it compete
		// with its configuration for the CPU.
		delay = min(delay, p.opts.BackoffSteady)
		if scout := p.scoutLocked(pd); scout != nil {
			p.unholdLocked(pd, scout, true)
			delay = min(max(delay, busyRetry), p.opts.BackoffSteady)
		}
	}
	pd.lastUsed = p.now()
	// The reference moves to the next attempt.
	pd.queue.AddAfter(c, delay)
	p.mu.Unlock()
}

// behindGateLocked tells whether a gate of an earlier round waits on the
// pod.
func (p *Prober) behindGateLocked(pd *pod, c *check) bool {
	h := p.headLocked(pd)
	return h != nil && h.round.seq < c.round.seq
}

// busyRetry is how often, at most, the head of a pod with held checks is
// retried.
const busyRetry = 250 * time.Millisecond

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
// checks older than the new head (all, without one) go back to the queue;
// none is probed for it: each was held for an answer that still stands.
func (p *Prober) ungateLocked(pd *pod, c *check) {
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
			p.unholdLocked(pd, h, false)
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
			p.unholdLocked(pd, h, true)
		}
	}
	if head := p.headLocked(pd); head != nil && !head.probing && head.answered.Before(sent) {
		if head.held {
			p.unholdLocked(pd, head, true)
		} else {
			head.pass = true
			// Already queued: this only moves it up.
			pd.queue.AddAfter(head, 0)
		}
	}
}

// unholdLocked queues a held check again; pass lets its next probe go even
// behind a gate.
func (p *Prober) unholdLocked(pd *pod, h *check, pass bool) {
	delete(pd.held, h)
	h.held = false
	h.pass = h.pass || pass
	pd.queue.AddAfter(h, 0)
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
	p.ungateLocked(pd, c)
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

// probe sends one probe. A nil error confirms the check; otherwise answer
// is the pod's answer that does not confirm it yet ("503", "old hash"), or
// empty when there was none (the error says why).
func (p *Prober) probe(ctx context.Context, pd *pod, c *check) (answer string, err error) {
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	u := *c.url
	// Appended, not joined: a prefix is sent as written (no cleaning),
	// and its escapes stay escaped (see URL).
	u.Path = strings.TrimSuffix(u.Path, "/") + nethttp.HealthCheckPath
	if u.RawPath != "" {
		u.RawPath = strings.TrimSuffix(u.RawPath, "/") + nethttp.HealthCheckPath
	}
	transport := pd.plain
	if c.proxy {
		transport = pd.proxyPlain
	}
	if u.Scheme == "https" {
		// Pooled per virtual host: the SNI picks its filter chain.
		transport = pd.tls
		if c.proxy {
			transport = pd.proxyTLS
		}
		u.Host = net.JoinHostPort(u.Hostname(), c.port)
	} else {
		// Pooled per pod: one set of connections for every KIngress.
		u.Host = net.JoinHostPort(c.ip, c.port)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", err
	}
	// Envoy picks the virtual host by the Host header.
	req.Host = c.url.Host
	req.Header.Set(header.UserAgentKey, header.IngressReadinessUserAgent)
	req.Header.Set(header.ProbeKey, header.ProbeValue)
	req.Header.Set(header.HashKey, header.HashValueOverride)
	req.Header.Set(probekey.Header, c.round.token)
	resp, err := transport.RoundTrip(req)
	if err != nil {
		return "", err
	}
	// Drained so the connection goes back to the pool.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		// Envoy sets HashHeader on the probe route, so it proves the
		// pod's configuration whether or not the backend echoes
		// K-Network-Hash. Without it the answer came from a route of an
		// older hitless (before an upgrade): not this round's either.
		if resp.Header.Get(HashHeader) == c.round.hash {
			return "", nil
		}
		return "old hash", errNotProgrammed
	case http.StatusNotFound:
		// No route yet (or none for this host at all).
		return "404", errNotProgrammed
	case http.StatusServiceUnavailable:
		// A route whose cluster Envoy has not, or has without an
		// endpoint yet: clusters and endpoints come apart from the
		// routes. A backend without any endpoint answers so too; its
		// check is found stuck once the pod serves a later round.
		return "503", errNotProgrammed
	case http.StatusBadRequest:
		if c.proxy {
			// Envoy answers 400 to a PROXY header it does not expect (the
			// line is no HTTP request). Abandoning the URL on it, as on
			// any unexpected status, would confirm a pod that was never
			// asked; waiting, the condition says what to check.
			return "400: " + proxyUnexpected, errNotYet
		}
		p.logger.Infow("Probe abandoned on an unexpected status", "key", c.round.key.String(), "url", c.url.String(), "pod", c.ip, "status", resp.StatusCode)
		return "", nil
	case http.StatusUnauthorized, http.StatusForbidden:
		// An authorization server in front of the host refused the probe:
		// Envoy answered before routing, which proves nothing about the
		// route or its backend. Unlike Knative's prober, this is no
		// reason to give up on the URL and call it served; it waits, and
		// the condition shows the code. hitless's probe routes skip the
		// authorization server, so this is a route that is not (yet) one
		// of them.
		return strconv.Itoa(resp.StatusCode), errNotYet
	default:
		p.logger.Infow("Probe abandoned on an unexpected status", "key", c.round.key.String(), "url", c.url.String(), "pod", c.ip, "status", resp.StatusCode)
		return "", nil
	}
}

var errNotYet = errors.New("not served yet")

// errNotProgrammed is a "not served yet" that says the pod has not the
// check's configuration yet: no route for it, the previous hash, or a
// route whose cluster has no endpoint yet.
var errNotProgrammed = fmt.Errorf("%w: the pod has not the proxies' configuration yet", errNotYet)

// What a pod's answer, or its silence, most likely means when it and
// config-contour's use-proxy-protocol disagree.
const (
	proxyExpected   = "does the fleet's Contour run with --use-proxy-protocol? then set use-proxy-protocol: true for its visibility in config-contour"
	proxyUnexpected = "the pod did not expect the PROXY protocol header hitless sent: does the fleet's Contour run with --use-proxy-protocol? if not, remove use-proxy-protocol from config-contour"
)

// noAnswer is shortError, and when the pod closed (or reset) the
// connection without a word, which Envoy does to a connection that does not
// start as its listener expects, the likely reason: a listener that wants a
// PROXY protocol header got none, or one that wants none got it.
func noAnswer(err error, proxy bool) string {
	short := shortError(err)
	if short != connectionClosed && !errors.Is(err, syscall.ECONNRESET) {
		return short
	}
	if proxy {
		return short + " before an answer: " + proxyUnexpected
	}
	return short + " before an answer: " + proxyExpected
}

const connectionClosed = "connection closed"

// shortError says why a probe got no answer in the few words a condition
// message has room for: "connection refused", "timeout".
func shortError(err error) string {
	var op *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded), os.IsTimeout(err):
		return "timeout"
	case errors.As(err, &op) && op.Err != nil:
		var sys *os.SyscallError
		if errors.As(op.Err, &sys) {
			return sys.Err.Error()
		}
		return op.Err.Error()
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return connectionClosed
	}
	return err.Error()
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

func (p *Prober) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, r := range p.rounds {
		r.cancel()
		delete(p.rounds, key)
	}
	for ip, pd := range p.pods {
		p.closePod(pd)
		delete(p.pods, ip)
	}
}
