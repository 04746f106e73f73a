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
	"fmt"
	"net/url"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/hitless/hitless/pkg/probekey"
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
	// has not the round's configuration yet (404, an older hash, 503)
	// while it is busy with Contour's queue: other rounds wait on it for
	// theirs too (see pod.gates), or it served another round since this
	// one began waiting on it. Nothing an operator can act on until it
	// stalls. On a quiet pod, the same answer is the round's own.
	Behind bool
	// Stalled is how long the pod has shown no new push: since it last
	// confirmed a check of another round (or since the round began
	// waiting on it, if later). A pod behind on a flood of proxies keeps taking
	// pushes, and its Stalled stays short however long For grows; one
	// whose Contour stopped pushing stalls.
	Stalled time.Duration
	// FleetStalled is how long no pod of its fleet has shown a push (for
	// the round's pods: since one served another round, or this one, or
	// since the round began waiting on it, if later). A pod stalled
	// while its fleet is not lags its peers; a fleet stalled together
	// waits for its Contour (under a flood of thousands of proxies, a
	// push can take minutes).
	FleetStalled time.Duration
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
	// notProgrammed: the last answer says the pod has not the round's
	// configuration yet (errNotProgrammed).
	notProgrammed bool
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

// progressedLocked is when the pod last showed r a push: when it last
// served another round, or r itself once it confirmed r, and no earlier
// than when r began waiting on it. The round's own confirmations on a pod
// it still waits on (one of its backends served) say nothing of the push
// its other checks wait for.
func (p *Prober) progressedLocked(r *round, ip string, pp *podProgress) time.Time {
	t := pp.since
	pd := p.pods[ip]
	if pd == nil {
		return t
	}
	pushed := pd.served.byOthers(r.seq)
	if pp.pending == 0 && pd.served.last.After(pushed) {
		pushed = pd.served.last
	}
	if pushed.After(t) {
		t = pushed
	}
	return t
}

func (p *Prober) progressLocked(r *round) Progress {
	if r.ready {
		return Progress{Ready: true}
	}
	now := p.now()
	byClass := map[string]*FleetProgress{}
	// fleetProgressed is when a pod of each class last showed a push.
	fleetProgressed := map[string]time.Time{}
	for ip, pp := range r.pods {
		if t := p.progressedLocked(r, ip, pp); t.After(fleetProgressed[pp.class]) {
			fleetProgressed[pp.class] = t
		}
	}
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
		progressed := p.progressedLocked(r, ip, pp)
		pd := p.pods[ip]
		// Behind: no answer yet, or one that says the pod lacks the
		// round's configuration while it is busy with Contour's queue:
		// other rounds wait on it, or it served another round since this
		// one began waiting on it (a route can come seconds before its
		// cluster's endpoints; the round's 503 then passes).
		behind := pp.lastError == "" ||
			(pp.notProgrammed && pd != nil && (p.othersWaitLocked(pd, r) || progressed.After(pp.since)))
		f.Waiting = append(f.Waiting, PodWait{IP: ip, For: now.Sub(pp.since), LastError: pp.lastError,
			Behind: behind, Stalled: now.Sub(progressed), FleetStalled: now.Sub(fleetProgressed[pp.class])})
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

// CancelWhere forgets every round of the KIngresses for which drop is true
// (those of a bucket this replica no longer leads).
func (p *Prober) CancelWhere(drop func(types.NamespacedName) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, r := range p.rounds {
		if drop(key.NamespacedName) {
			p.dropLocked(r)
		}
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
