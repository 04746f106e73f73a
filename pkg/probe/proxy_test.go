package probe

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/hitless/hitless/pkg/probekey"
)

// proxyListener is an Envoy listener of a Contour run with
// --use-proxy-protocol: every connection must start with a PROXY protocol
// v1 line, which it reads and keeps; a connection that does not is closed
// unanswered, as Envoy closes it.
type proxyListener struct {
	net.Listener
	mu      sync.Mutex
	headers []string
	refused atomic.Int64
}

func (l *proxyListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		// The signature first, as Envoy checks it: a TLS ClientHello
		// may hold no newline to end a line on.
		r := bufio.NewReader(c)
		sig, err := r.Peek(len("PROXY "))
		line := ""
		if err == nil && string(sig) == "PROXY " {
			line, err = r.ReadString('\n')
		}
		if err != nil || !strings.HasPrefix(line, "PROXY TCP4 ") || !strings.HasSuffix(line, "\r\n") {
			l.refused.Add(1)
			c.Close()
			continue
		}
		_ = c.SetReadDeadline(time.Time{})
		l.mu.Lock()
		l.headers = append(l.headers, line)
		l.mu.Unlock()
		return &bufferedConn{Conn: c, r: r}, nil
	}
}

func (l *proxyListener) seen() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.headers...)
}

// bufferedConn reads what the header's reader holds beyond the line first.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// proxyPod serves every host's probe route at hash, over HTTP or HTTPS,
// behind a listener that wants the PROXY protocol header.
func proxyPod(t *testing.T, tlsOn bool, hash string) (*proxyListener, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.2: %v", err)
	}
	pl := &proxyListener{Listener: l}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(probekey.Header) != defaultToken {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set(HashHeader, hash)
	}))
	srv.Listener.Close()
	srv.Listener = pl
	if tlsOn {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return pl, port
}

// proxyProber probes one host of ing on 127.0.0.2:port with the scheme
// given; proxy says whether the target asks for the PROXY header, read at
// every IsReady as config-contour would be.
func proxyProber(t *testing.T, scheme, port string, proxy *atomic.Bool) (*Prober, *confirmations) {
	t.Helper()
	c := newConfirmations()
	lister := listerFunc(func(_ context.Context, paths []Path) ([]Target, error) {
		return []Target{{Class: "contour-external", PodIPs: sets.New("127.0.0.2"), PodPort: port, ProxyProtocol: proxy.Load(),
			URLs: []*url.URL{{Scheme: scheme, Host: paths[0].Host, Path: "/"}}}}, nil
	})
	p := New(zap.NewNop().Sugar(), lister, c.ready, Options{Key: testKey, InitialDelay: time.Millisecond,
		BackoffInitial: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond})
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	p.Start(done)
	return p, c
}

// TestProxyProtocolHeaderPrecedesEveryProbe: with the target's
// ProxyProtocol set, each connection to the pod starts with the PROXY line
// naming the prober's end and the pod's, over plain HTTP and before the TLS
// handshake of an HTTPS probe alike, and the round is confirmed.
func TestProxyProtocolHeaderPrecedesEveryProbe(t *testing.T) {
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			ing := kingress("pp", "pp.example.com")
			l, port := proxyPod(t, scheme == "https", hashOf(t, ing))
			var proxy atomic.Bool
			proxy.Store(true)
			p, c := proxyProber(t, scheme, port, &proxy)
			if _, err := p.IsReady(context.Background(), ing); err != nil {
				t.Fatal(err)
			}
			c.await(t, "default/pp")
			headers := l.seen()
			if len(headers) == 0 {
				t.Fatal("the pod saw no PROXY header")
			}
			for _, h := range headers {
				f := strings.Fields(h)
				if len(f) != 6 || f[2] != "127.0.0.1" || f[3] != "127.0.0.2" || f[5] != port {
					t.Errorf("PROXY header %q, want PROXY TCP4 127.0.0.1 127.0.0.2 <port> %s", h, port)
				}
			}
			if n := l.refused.Load(); n != 0 {
				t.Errorf("%d connections came without the header", n)
			}
		})
	}
}

// TestMissingProxyHeaderSaysWhatToSet: a pod that wants the header and
// gets none closes the connection unanswered; the round waits and the
// pod's last error names the likely cause and the key to set. Once the
// key is set the round's checks are replaced and it is confirmed.
func TestMissingProxyHeaderSaysWhatToSet(t *testing.T) {
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			ing := kingress("pp", "pp.example.com")
			l, port := proxyPod(t, scheme == "https", hashOf(t, ing))
			var proxy atomic.Bool
			p, c := proxyProber(t, scheme, port, &proxy)
			prog := awaitProgress(t, p, ing, "the missing header explained", func(pr Progress) bool {
				return len(pr.Fleets) == 1 && len(pr.Fleets[0].Waiting) == 1 &&
					strings.Contains(pr.Fleets[0].Waiting[0].LastError, "set use-proxy-protocol: true")
			})
			t.Logf("waiting on: %s", prog.Fleets[0].Waiting[0].LastError)
			c.none(t, 50*time.Millisecond)
			if l.refused.Load() == 0 {
				t.Error("the pod refused no connection")
			}

			proxy.Store(true)
			if _, err := p.IsReady(context.Background(), ing); err != nil {
				t.Fatal(err)
			}
			c.await(t, "default/pp")
		})
	}
}

// TestUnexpectedProxyHeaderIsNeverServed: a pod that wants no header
// answers the PROXY line 400 (it is no HTTP request), as Envoy does. That
// must not pass for an unexpected status that abandons the URL: the round
// waits, saying what to check.
func TestUnexpectedProxyHeaderIsNeverServed(t *testing.T) {
	a := newEnvoyPod(t, "127.0.0.2")
	ing := kingress("pp", "pp.example.com")
	a.serve("pp.example.com", http.StatusOK, hashOf(t, ing))
	var proxy atomic.Bool
	proxy.Store(true)
	p, c := proxyProber(t, "http", a.port, &proxy)
	prog := awaitProgress(t, p, ing, "the unexpected header explained", func(pr Progress) bool {
		return len(pr.Fleets) == 1 && len(pr.Fleets[0].Waiting) == 1 &&
			strings.HasPrefix(pr.Fleets[0].Waiting[0].LastError, "400: ") &&
			strings.Contains(pr.Fleets[0].Waiting[0].LastError, "remove use-proxy-protocol")
	})
	t.Logf("waiting on: %s", prog.Fleets[0].Waiting[0].LastError)
	c.none(t, 50*time.Millisecond)
}
