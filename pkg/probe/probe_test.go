package probe

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"knative.dev/networking/pkg/http/header"

	"github.com/hitless/hitless/pkg/probekey"
)

// envoyPod answers probes the way an Envoy pod with Contour's routes does:
// per host, a status and the hash its probe route sets.
type envoyPod struct {
	ip, port string
	srv      *httptest.Server
	conns    atomic.Int64
	requests atomic.Int64

	mu     sync.Mutex
	routes map[string]route // by host
	asked  map[string]int   // probes by host
}

type route struct {
	status int
	hash   string
	// body is what the pod answers with (Envoy's local replies say why).
	body string
}

func newEnvoyPod(t *testing.T, ip string) *envoyPod {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Skipf("cannot listen on %s (loopback addresses beyond 127.0.0.1 needed): %v", ip, err)
	}
	e := &envoyPod{ip: ip, routes: map[string]route{}, asked: map[string]int{}}
	e.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.requests.Add(1)
		if r.Header.Get(header.HashKey) != header.HashValueOverride || r.Header.Get(header.ProbeKey) != header.ProbeValue {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		// hitless's probe routes match only the namespace's token; no
		// route, Envoy's 404, for anything else.
		if r.Header.Get(probekey.Header) != defaultToken {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		e.mu.Lock()
		rt, ok := e.routes[r.Host]
		e.asked[r.Host]++
		e.mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		// What Envoy's probe route adds to the backend's answer.
		if rt.hash != "" {
			w.Header().Set(HashHeader, rt.hash)
		}
		w.WriteHeader(rt.status)
		_, _ = io.WriteString(w, rt.body)
	}))
	e.srv.Listener.Close()
	e.srv.Listener = l
	e.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			e.conns.Add(1)
		}
	}
	e.srv.Start()
	_, e.port, _ = net.SplitHostPort(l.Addr().String())
	t.Cleanup(e.srv.Close)
	return e
}

// probesOf is how many probes asked the pod for host.
func (e *envoyPod) probesOf(host string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.asked[host]
}

func (e *envoyPod) serve(host string, status int, hash string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.routes[host] = route{status: status, hash: hash}
}

// fleet lists its pods as targets; tests change it as pods come and go.
type fleet struct {
	mu   sync.Mutex
	pods []*envoyPod
}

func (f *fleet) set(pods ...*envoyPod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods = pods
}

func (f *fleet) ListProbeTargets(_ context.Context, paths []Path) ([]Target, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Target
	for _, p := range f.pods {
		var urls []*url.URL
		for _, path := range paths {
			urls = append(urls, URL("http", path.Host, path.Prefix))
		}
		out = append(out, Target{Class: "contour-external", PodIPs: sets.New(p.ip), PodPort: p.port, URLs: urls})
	}
	return out, nil
}

// testKey is the prober's key in these tests; defaultToken opens the probe
// routes of namespace default, where every test KIngress lives.
var (
	testKey         = probekey.Key(bytes.Repeat([]byte{7}, probekey.Size))
	defaultToken, _ = testKey.Token("default")
)

// kingress is the round of a KIngress of namespace default serving the
// root of each host, at a hash of its name and hosts.
func kingress(name string, hosts ...string) Round {
	r := Round{Key: RoundKey{NamespacedName: types.NamespacedName{Namespace: "default", Name: name}}}
	for _, h := range hosts {
		r.Paths = append(r.Paths, Path{Class: "contour-external", Host: h, Prefix: "/"})
	}
	r.Hash = fmt.Sprintf("%x", sha256.Sum256([]byte(name+"|"+strings.Join(hosts, ","))))
	return r
}

func hashOf(_ *testing.T, r Round) string { return r.Hash }

// confirmations collects the ready callbacks.
type confirmations struct {
	ch chan RoundKey
}

func newConfirmations() *confirmations {
	return &confirmations{ch: make(chan RoundKey, 100)}
}

func (c *confirmations) ready(key RoundKey) { c.ch <- key }

func (c *confirmations) await(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-c.ch:
		if got.String() != want {
			t.Fatalf("confirmed %s, want %s", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s was never confirmed", want)
	}
}

func (c *confirmations) none(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case got := <-c.ch:
		t.Fatalf("%s confirmed, want nothing", got)
	case <-time.After(within):
	}
}

func newTestProber(t *testing.T, f *fleet, c *confirmations) *Prober {
	t.Helper()
	p := New(zap.NewNop().Sugar(), f, c.ready, Options{Key: testKey, InitialDelay: time.Millisecond, BackoffInitial: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond})
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	p.Start(done)
	return p
}

// proberOf is a fleet of the given pods and a prober of it.
func proberOf(t *testing.T, pods ...*envoyPod) (*fleet, *confirmations, *Prober) {
	t.Helper()
	f := &fleet{}
	f.set(pods...)
	c := newConfirmations()
	return f, c, newTestProber(t, f, c)
}

// onePod is a fleet of one Envoy pod and a prober of it.
func onePod(t *testing.T) (*envoyPod, *confirmations, *Prober) {
	t.Helper()
	a := newEnvoyPod(t, "127.0.0.2")
	_, c, p := proberOf(t, a)
	return a, c, p
}

// laggardSays holds when one pod is waited on and its last answer is want.
func laggardSays(want string) func(Progress) bool {
	return func(pr Progress) bool {
		return len(pr.Fleets) == 1 && len(pr.Fleets[0].Waiting) == 1 && pr.Fleets[0].Waiting[0].LastError == want
	}
}

// awaitProgress polls IsReady until cond holds of its answer.
func awaitProgress(t *testing.T, p *Prober, ing Round, what string, cond func(Progress) bool) Progress {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		prog, err := p.IsReady(context.Background(), ing)
		if err != nil {
			t.Fatal(err)
		}
		if cond(prog) {
			return prog
		}
		if time.Now().After(deadline) {
			t.Fatalf("never %s; last progress %+v", what, prog)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestConfirmedOnEveryPod(t *testing.T) {
	a, b := newEnvoyPod(t, "127.0.0.2"), newEnvoyPod(t, "127.0.0.3")
	_, c, p := proberOf(t, a, b)
	ing := kingress("hello", "hello.example.com")
	h := hashOf(t, ing)
	a.serve("hello.example.com", http.StatusOK, h)
	b.serve("hello.example.com", http.StatusServiceUnavailable, "")

	prog, err := p.IsReady(context.Background(), ing)
	if err != nil || prog.Ready {
		t.Fatalf("first IsReady = %+v, %v; want a round started, not ready", prog, err)
	}
	prog = awaitProgress(t, p, ing, "1/2 with the laggard's 503", func(pr Progress) bool {
		return len(pr.Fleets) == 1 && pr.Fleets[0].Confirmed == 1 && len(pr.Fleets[0].Waiting) == 1 && pr.Fleets[0].Waiting[0].LastError == "503"
	})
	if f := prog.Fleets[0]; f.Class != "contour-external" || f.Total != 2 || f.Waiting[0].IP != b.ip {
		t.Fatalf("progress = %+v, want class contour-external, 1 of 2, waiting on %s", f, b.ip)
	}

	b.serve("hello.example.com", http.StatusOK, "0ld")
	awaitProgress(t, p, ing, "the laggard answering an older hash", laggardSays("old hash"))
	b.serve("hello.example.com", http.StatusOK, h)
	c.await(t, "default/hello")
	if prog, err := p.IsReady(context.Background(), ing); err != nil || !prog.Ready {
		t.Fatalf("IsReady after the callback = %+v, %v, want ready", prog, err)
	}
}

func TestHashChangeStartsANewRound(t *testing.T) {
	a, c, p := onePod(t)
	ing := kingress("hello", "hello.example.com")
	a.serve("hello.example.com", http.StatusOK, hashOf(t, ing))
	p.IsReady(context.Background(), ing)
	c.await(t, "default/hello")

	next := ing
	next.Hash = "another hash"
	if prog, _ := p.IsReady(context.Background(), next); prog.Ready {
		t.Fatal("a new hash was ready before any pod served it")
	}
	c.none(t, 100*time.Millisecond)
	a.serve("hello.example.com", http.StatusOK, hashOf(t, next))
	c.await(t, "default/hello")
}

func TestPodsLeaveAndJoin(t *testing.T) {
	a, b, d := newEnvoyPod(t, "127.0.0.2"), newEnvoyPod(t, "127.0.0.3"), newEnvoyPod(t, "127.0.0.4")
	f, c, p := proberOf(t, a, b)
	ing := kingress("hello", "hello.example.com")
	h := hashOf(t, ing)
	a.serve("hello.example.com", http.StatusOK, h)
	// b is gone for good (never serves); d joins and must confirm.
	p.IsReady(context.Background(), ing)
	awaitProgress(t, p, ing, "a confirmed", func(pr Progress) bool { return len(pr.Fleets) == 1 && pr.Fleets[0].Confirmed == 1 })

	f.set(a, d)
	prog := awaitProgress(t, p, ing, "b forgotten, d waited on", func(pr Progress) bool {
		return len(pr.Fleets) == 1 && pr.Fleets[0].Total == 2 && len(pr.Fleets[0].Waiting) == 1 && pr.Fleets[0].Waiting[0].IP == d.ip
	})
	if prog.Ready {
		t.Fatal("ready before the pod that joined confirmed")
	}
	d.serve("hello.example.com", http.StatusOK, h)
	c.await(t, "default/hello")

	// The fleet shrinking to the confirmed pods confirms at once.
	ing2 := kingress("two", "two.example.com")
	f.set(a, b)
	a.serve("two.example.com", http.StatusOK, hashOf(t, ing2))
	p.IsReady(context.Background(), ing2)
	awaitProgress(t, p, ing2, "a confirmed", func(pr Progress) bool { return len(pr.Fleets) == 1 && pr.Fleets[0].Confirmed == 1 })
	f.set(a)
	if prog, err := p.IsReady(context.Background(), ing2); err != nil || !prog.Ready {
		t.Fatalf("IsReady once the laggard left = %+v, %v, want ready", prog, err)
	}
}

func TestCancelLeavesNoState(t *testing.T) {
	a, c, p := onePod(t)
	ing := kingress("hello", "hello.example.com")
	p.IsReady(context.Background(), ing)
	awaitProgress(t, p, ing, "a 404 seen", laggardSays("404"))
	p.Cancel(RoundKey{NamespacedName: types.NamespacedName{Namespace: "default", Name: "hello"}})
	if n := p.Rounds(); n != 0 {
		t.Fatalf("%d rounds held after cancel, want 0", n)
	}
	a.serve("hello.example.com", http.StatusOK, hashOf(t, ing))
	c.none(t, 100*time.Millisecond)
	before := a.requests.Load()
	time.Sleep(100 * time.Millisecond)
	if after := a.requests.Load(); after != before {
		t.Fatalf("%d probes sent after cancel", after-before)
	}
}

func TestConnectionsAreSharedAcrossKIngresses(t *testing.T) {
	a, c, p := onePod(t)
	const n = 60
	for i := range n {
		ing := kingress(fmt.Sprint("ing-", i), fmt.Sprintf("h%d.example.com", i))
		a.serve(fmt.Sprintf("h%d.example.com", i), http.StatusOK, hashOf(t, ing))
		p.IsReady(context.Background(), ing)
	}
	for range n {
		select {
		case <-c.ch:
		case <-time.After(10 * time.Second):
			t.Fatal("not every KIngress was confirmed")
		}
	}
	if got := a.conns.Load(); got > DefaultPerPod {
		t.Errorf("%d connections opened for %d KIngresses, want at most %d (one pool per pod)", got, n, DefaultPerPod)
	}
}

// TestAnswersNoClientWouldGetServedWait: 400 (a TLS backend spoken to in
// plain text), 502 and 504 (a backend Envoy cannot reach) are what every
// client request would get too: the pod is waited on, never called served.
func TestAnswersNoClientWouldGetServedWait(t *testing.T) {
	for _, code := range []int{http.StatusBadRequest, http.StatusBadGateway, http.StatusGatewayTimeout} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			a, c, p := onePod(t)
			ing := kingress("hello", "hello.example.com")
			a.serve("hello.example.com", code, "")
			awaitProgress(t, p, ing, "waiting on "+strconv.Itoa(code), laggardSays(strconv.Itoa(code)))
			c.none(t, 100*time.Millisecond)
		})
	}
}

// TestEnvoyConnectFailureIsTheBackends: Envoy's 503 when it could not
// connect to the backend (a refused connection, a failed TLS handshake)
// is no push still to come: it is shown as such and holds no later round,
// each probed on its own back-off.
func TestEnvoyConnectFailureIsTheBackends(t *testing.T) {
	a, c, p := onePod(t)
	ings := rounds(t, p, 2)
	a.mu.Lock()
	a.routes["k0.example.com"] = route{status: http.StatusServiceUnavailable,
		body: "upstream connect error or disconnect/reset before headers. reset reason: remote connection failure, transport failure reason: TLS_error"}
	a.mu.Unlock()
	// k1 answers 404: a push still to come, which k0's answer is not.
	awaitProbes(t, a, "k1.example.com", 2)
	prog := awaitProgress(t, p, ings[0], "the connect failure shown", laggardSays("503 (upstream connect error)"))
	if w := prog.Fleets[0].Waiting[0]; w.Behind {
		t.Errorf("k0 waits %+v: want it not behind on Contour's pushes, though k1 waits for one", w)
	}
	c.none(t, 100*time.Millisecond)
}

func TestUnexpectedStatusAbandons(t *testing.T) {
	// Knative's verdict: an unexpected status abandons the probe rather
	// than wait forever.
	a, c, p := onePod(t)
	a.serve("hello.example.com", http.StatusInternalServerError, "")
	p.IsReady(context.Background(), kingress("hello", "hello.example.com"))
	c.await(t, "default/hello")
}

func TestAnswerWithoutTheServedHashWaits(t *testing.T) {
	// A 200 without HashHeader came from a route that is not this round's
	// (one written by an older hitless): unlike Knative's prober, which
	// gives up on a backend that does not echo K-Network-Hash, wait; the
	// header is Envoy's, whatever the backend echoes.
	a, c, p := onePod(t)
	ing := kingress("hello", "hello.example.com")
	a.serve("hello.example.com", http.StatusOK, "")
	p.IsReady(context.Background(), ing)
	awaitProgress(t, p, ing, "the older route shown", laggardSays("old hash"))
	c.none(t, 100*time.Millisecond)
	a.serve("hello.example.com", http.StatusOK, hashOf(t, ing))
	c.await(t, "default/hello")
}

func TestAuthorizationRefusalsAreNeverServed(t *testing.T) {
	// An authorization server answering for the host (Envoy's ext_authz,
	// before any route is taken) proves nothing: wait, show the code, and
	// confirm once the probe gets through to the route.
	for _, status := range []int{http.StatusUnauthorized, http.StatusForbidden} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			a, c, p := onePod(t)
			ing := kingress("hello", "hello.example.com")
			a.serve("hello.example.com", status, "")
			p.IsReady(context.Background(), ing)
			awaitProgress(t, p, ing, "the refusal shown", laggardSays(strconv.Itoa(status)))
			c.none(t, 100*time.Millisecond)
			a.serve("hello.example.com", http.StatusOK, hashOf(t, ing))
			c.await(t, "default/hello")
		})
	}
}

func TestUnreachablePodSaysWhy(t *testing.T) {
	a := newEnvoyPod(t, "127.0.0.2")
	a.srv.Close() // nothing listens any more
	f := &fleet{}
	f.set(a)
	p := newTestProber(t, f, newConfirmations())
	ing := kingress("hello", "hello.example.com")
	p.IsReady(context.Background(), ing)
	awaitProgress(t, p, ing, "connection refused reported", laggardSays("connection refused"))
}

func TestBackoff(t *testing.T) {
	defaults := New(zap.NewNop().Sugar(), &fleet{}, func(RoundKey) {}, Options{Key: testKey})
	// PROBE_MAX_RETRY_DELAY_SECONDS=1: a probe every second however long
	// the wait, as before waits stretched the back-off.
	capped := New(zap.NewNop().Sugar(), &fleet{}, func(RoundKey) {}, Options{Key: testKey, BackoffMax: time.Second})
	for _, tc := range []struct {
		name   string
		p      *Prober
		waited time.Duration
		base   time.Duration
	}{
		{"first retry", defaults, 0, 25 * time.Millisecond},
		{"fast for the first 300ms", defaults, 250 * time.Millisecond, 25 * time.Millisecond},
		{"then a quarter of the wait", defaults, 400 * time.Millisecond, 100 * time.Millisecond},
		{"a quarter of two seconds", defaults, 2 * time.Second, 500 * time.Millisecond},
		{"steady at a second", defaults, 5 * time.Second, time.Second},
		{"steady for the first ten seconds", defaults, 9 * time.Second, time.Second},
		{"a tenth of a long wait", defaults, 30 * time.Second, 3 * time.Second},
		{"at most the cap", defaults, 3 * time.Minute, 5 * time.Second},
		{"a cap of a second keeps a second", capped, 3 * time.Minute, time.Second},
		{"a cap below a second caps the quarter", New(zap.NewNop().Sugar(), &fleet{}, func(RoundKey) {}, Options{Key: testKey, BackoffMax: 200 * time.Millisecond}), time.Second, 200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 20 {
				if got := tc.p.backoff(tc.waited); got < tc.base || got > tc.base+tc.base/4 {
					t.Errorf("backoff(%v) = %v, want within [%v, %v]", tc.waited, got, tc.base, tc.base+tc.base/4)
				}
			}
		})
	}
}

func TestHTTPSProbesCarryTheHostsSNI(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.2: %v", err)
	}
	ing := kingress("secure", "secure.example.com")
	h := hashOf(t, ing)
	var sni atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sni.Store(r.TLS.ServerName)
		// Envoy picks the filter chain (and route table) by SNI.
		if r.TLS.ServerName != "secure.example.com" || r.Host != "secure.example.com" || r.Header.Get(probekey.Header) != defaultToken {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set(HashHeader, h)
	}))
	srv.Listener.Close()
	srv.Listener = l
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(l.Addr().String())

	c := newConfirmations()
	lister := listerFunc(func(context.Context, []Path) ([]Target, error) {
		return []Target{{Class: "contour-external", PodIPs: sets.New("127.0.0.2"), PodPort: port,
			URLs: []*url.URL{{Scheme: "https", Host: "secure.example.com", Path: "/"}}}}, nil
	})
	p := New(zap.NewNop().Sugar(), lister, c.ready, Options{Key: testKey, InitialDelay: time.Millisecond})
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	p.Start(done)
	p.IsReady(context.Background(), ing)
	c.await(t, "default/secure")
	if got := sni.Load(); got != "secure.example.com" {
		t.Errorf("SNI = %v, want secure.example.com", got)
	}
}

type listerFunc func(context.Context, []Path) ([]Target, error)

func (f listerFunc) ListProbeTargets(ctx context.Context, paths []Path) ([]Target, error) {
	return f(ctx, paths)
}

// TestPrefixIsSentAsWritten: Envoy matches a route's prefix against the
// path as the client sent it, so a prefix with an escape (a KIngress path
// /%2Fb) is probed as /%2Fb/healthz; escaping it again (/%252Fb/...) would
// miss the route and wait on a 404 forever. Other prefixes get /healthz
// appended, never cleaned.
func TestPrefixIsSentAsWritten(t *testing.T) {
	for _, tc := range []struct{ prefix, want string }{
		{"/%2Fb", "/%2Fb/healthz"},
		{"/", "/healthz"},
		{"/v1/", "/v1/healthz"},
		{"/~user", "/~user/healthz"},
	} {
		t.Run(tc.prefix, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.2:0")
			if err != nil {
				t.Skipf("cannot listen on 127.0.0.2: %v", err)
			}
			ing := kingress("escaped", "escaped.example.com")
			h := hashOf(t, ing)
			var got atomic.Value
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got.Store(r.RequestURI)
				if r.RequestURI != tc.want {
					w.WriteHeader(http.StatusNotFound)
					return
				}
				w.Header().Set(HashHeader, h)
			}))
			srv.Listener.Close()
			srv.Listener = l
			srv.Start()
			t.Cleanup(srv.Close)
			_, port, _ := net.SplitHostPort(l.Addr().String())

			c := newConfirmations()
			lister := listerFunc(func(context.Context, []Path) ([]Target, error) {
				return []Target{{Class: "contour-external", PodIPs: sets.New("127.0.0.2"), PodPort: port,
					URLs: []*url.URL{URL("http", "escaped.example.com", tc.prefix)}}}, nil
			})
			p := New(zap.NewNop().Sugar(), lister, c.ready, Options{Key: testKey, InitialDelay: time.Millisecond})
			done := make(chan struct{})
			t.Cleanup(func() { close(done) })
			p.Start(done)
			p.IsReady(context.Background(), ing)
			c.await(t, "default/escaped")
			if g := got.Load(); g != tc.want {
				t.Errorf("request path %v, want %s", g, tc.want)
			}
		})
	}
}
