package harness

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hitless/hitless/pkg/proxyproto"
)

// Target is one Envoy pod and the host to ask it for.
type Target struct {
	Addr string // ip:port of the Envoy pod's HTTP (or, with TLS, HTTPS) listener
	Host string
	// TLS sends HTTPS with the host as SNI (the certificate is not
	// checked: tests make their own).
	TLS bool
	// Header is set on every request (an Authorization token, say).
	Header map[string]string
	// Path is the request's path, "/" when empty.
	Path string
	// ProxyProtocol starts every connection with a PROXY protocol v1
	// header, as a load balancer in front of a fleet whose Contour runs
	// with --use-proxy-protocol does.
	ProxyProtocol bool
}

// Result is one request of the load.
type Result struct {
	Start, End time.Time
	Target     int
	Code       int    // 0 when the request failed before an answer
	Err        string // connection or protocol error
	Backend    string // what BackendOf read from the answer, "" if nothing
}

// Load sends requests at a steady rate, spread over every target (every
// Envoy pod of every fleet), over keep-alive connections like a real client,
// and records every answer.
type Load struct {
	Targets []Target
	RPS     int
	// BackendOf reads which backend answered from a response body; unset, it
	// is the X-Backend request header (what harness.KIngress appends) as the
	// networking runtime image echoes it.
	BackendOf func(body []byte) string

	mu       sync.Mutex
	results  []Result
	timeline []allowed
}

type allowed struct {
	at       time.Time
	backends map[string]bool
}

// Allow declares which backends may answer from now on. During a change,
// allow the old and the new ones; once Ready, only the new ones.
func (l *Load) Allow(backends ...string) {
	set := map[string]bool{}
	for _, b := range backends {
		set[b] = true
	}
	l.mu.Lock()
	l.timeline = append(l.timeline, allowed{at: time.Now(), backends: set})
	l.mu.Unlock()
}

// Run sends load until ctx is done.
func (l *Load) Run(ctx context.Context) {
	clients := make([]*http.Client, len(l.Targets))
	for i, t := range l.Targets {
		addr, proxy := t.Addr, t.ProxyProtocol
		transport := &http.Transport{
			MaxIdleConnsPerHost: 16,
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				d := &net.Dialer{Timeout: 2 * time.Second}
				if proxy {
					return proxyproto.Dial(ctx, d, network, addr)
				}
				return d.DialContext(ctx, network, addr)
			},
		}
		if t.TLS {
			transport.TLSClientConfig = &tls.Config{ServerName: t.Host, InsecureSkipVerify: true} //nolint:gosec // the test's own certificate
		}
		clients[i] = &http.Client{
			Timeout:   10 * time.Second,
			Transport: transport,
			// A redirect is an answer to count, not to follow.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	interval := time.Second / time.Duration(l.RPS)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var wg sync.WaitGroup
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-tick.C:
		}
		i := n % len(l.Targets)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := l.one(clients[i], l.Targets[i])
			r.Target = i
			l.mu.Lock()
			l.results = append(l.results, r)
			l.mu.Unlock()
		}()
	}
}

func (l *Load) one(c *http.Client, t Target) Result {
	r := Result{Start: time.Now()}
	defer func() { r.End = time.Now() }()
	scheme := "http"
	if t.TLS {
		scheme = "https"
	}
	path := t.Path
	if path == "" {
		path = "/"
	}
	req, err := http.NewRequest(http.MethodGet, scheme+"://"+t.Host+path, nil)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	req.Header.Set("User-Agent", LoadUserAgent)
	for k, v := range t.Header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		r.Err = err.Error()
		r.End = time.Now()
		return r
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	r.End = time.Now()
	r.Code = resp.StatusCode
	if err != nil {
		r.Err = err.Error()
		return r
	}
	backendOf := l.BackendOf
	if backendOf == nil {
		backendOf = XBackend
	}
	r.Backend = backendOf(body)
	return r
}

// LoadUserAgent is the User-Agent of every request of a Load, so that
// Envoy's access log tells the load's requests from probes and checks.
const LoadUserAgent = "hitless-load/1"

// XBackend reads the X-Backend request header echoed by the networking
// runtime test image.
func XBackend(body []byte) string {
	var seen struct {
		Request struct {
			Headers map[string][]string `json:"headers"`
		} `json:"request"`
	}
	if json.Unmarshal(body, &seen) == nil && len(seen.Request.Headers["X-Backend"]) > 0 {
		return seen.Request.Headers["X-Backend"][0]
	}
	return ""
}

// Summary counts what the load saw.
type Summary struct {
	Requests   int
	OK         int
	ByCode     map[int]int
	ConnErrors int
	// Disallowed are 2xx answers from a backend the KIngress did not allow
	// at any moment while the request was in flight.
	Disallowed int
	Failures   []string // the first few failures, for the log
}

// Failed is every request that was not a 2xx from an allowed backend.
func (s Summary) Failed() int { return s.Requests - s.OK + s.Disallowed }

func (s Summary) String() string {
	codes := make([]string, 0, len(s.ByCode))
	for c, n := range s.ByCode {
		codes = append(codes, fmt.Sprintf("%d:%d", c, n))
	}
	sort.Strings(codes)
	return fmt.Sprintf("requests=%d ok=%d codes=[%s] conn_errors=%d disallowed=%d",
		s.Requests, s.OK, strings.Join(codes, " "), s.ConnErrors, s.Disallowed)
}

// Summarize classifies every result so far.
func (l *Load) Summarize() Summary {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Summary{ByCode: map[int]int{}}
	for _, r := range l.results {
		s.Requests++
		switch {
		case r.Code == 0:
			s.ConnErrors++
			s.fail(fmt.Sprintf("%s %s: %s", r.Start.Format("15:04:05.000"), l.Targets[r.Target].Addr, r.Err))
			continue
		case r.Code < 200 || r.Code > 299:
			s.ByCode[r.Code]++
			s.fail(fmt.Sprintf("%s %s: HTTP %d", r.Start.Format("15:04:05.000"), l.Targets[r.Target].Addr, r.Code))
			continue
		}
		s.ByCode[r.Code]++
		s.OK++
		if !l.allowedDuring(r) {
			s.Disallowed++
			s.fail(fmt.Sprintf("%s %s: answered by %q, not allowed then", r.Start.Format("15:04:05.000"), l.Targets[r.Target].Addr, r.Backend))
		}
	}
	return s
}

// CountFailed counts the requests that failed (no answer, or not a 2xx) and
// match, so a test can tell apart failures of a known cause it reports.
func (l *Load) CountFailed(match func(Result) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.results {
		if (r.Code < 200 || r.Code > 299) && match(r) {
			n++
		}
	}
	return n
}

// FailedResults returns every request that failed (no answer, not a 2xx)
// or was answered by a backend not allowed then, in the order sent.
func (l *Load) FailedResults() []Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Result
	for _, r := range l.results {
		if r.Code < 200 || r.Code > 299 || !l.allowedDuring(r) {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

func (s *Summary) fail(msg string) {
	if len(s.Failures) < 20 {
		s.Failures = append(s.Failures, msg)
	}
}

// allowedDuring tells whether r's backend was allowed at its start or at
// any change during its flight.
func (l *Load) allowedDuring(r Result) bool {
	if len(l.timeline) == 0 {
		return true
	}
	for i, a := range l.timeline {
		next := time.Time{}
		if i+1 < len(l.timeline) {
			next = l.timeline[i+1].at
		}
		// a is in force over [a.at, next); it counts when that overlaps [Start, End].
		if a.at.After(r.End) || (!next.IsZero() && !next.After(r.Start)) {
			continue
		}
		if a.backends[r.Backend] {
			return true
		}
	}
	return false
}

// PerSecond returns, for each second since start, the count of answers by
// class ("2xx", "503", "conn", ...), for plots.
func (l *Load) PerSecond(start time.Time) []map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]int
	for _, r := range l.results {
		sec := int(r.Start.Sub(start) / time.Second)
		if sec < 0 {
			continue
		}
		for len(out) <= sec {
			out = append(out, map[string]int{})
		}
		k := "conn"
		switch {
		case r.Code >= 200 && r.Code < 300:
			k = "2xx"
		case r.Code != 0:
			k = fmt.Sprint(r.Code)
		}
		out[sec][k]++
	}
	return out
}

// Scrape reads one counter from a Prometheus text endpoint (0 when absent).
func Scrape(url, metric string) float64 {
	return scrape(url, metric, "")
}

// ScrapeLabeled is Scrape of the series whose label has the value.
func ScrapeLabeled(url, metric, label, value string) float64 {
	return scrape(url, metric, fmt.Sprintf("%s=%q", label, value))
}

// scrape sums the samples of metric whose labels contain match ("" for
// every sample).
func scrape(url, metric, match string) float64 {
	if url == "" {
		return 0
	}
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	total := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, metric+" ") && !strings.HasPrefix(line, metric+"{") {
			continue
		}
		if match != "" {
			end := strings.IndexByte(line, '}')
			if end < 0 || !strings.Contains(line[:end], match) {
				continue
			}
		}
		var v float64
		fields := strings.Fields(line)
		if _, err := fmt.Sscan(fields[len(fields)-1], &v); err == nil {
			total += v
		}
	}
	return total
}
