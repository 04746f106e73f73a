package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"

	nethttp "knative.dev/networking/pkg/http"
	"knative.dev/networking/pkg/http/header"

	"github.com/hitless/hitless/pkg/probekey"
)

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
	// The start of the body tells Envoy's own answers apart; the rest is
	// drained so the connection goes back to the pool.
	head := make([]byte, len(upstreamConnectError))
	n, _ := io.ReadFull(resp.Body, head)
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
		if string(head[:n]) == upstreamConnectError {
			// Envoy has the route, the cluster and an endpoint, and
			// could not connect to it (refused, reset, a TLS handshake
			// the backend failed): the backend's trouble, not a push
			// still to come. It holds no one and is named after 5 s.
			return "503 (upstream connect error)", errNotYet
		}
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
		// A backend that cannot read what Envoy sends it: a TLS port
		// spoken to in plain text ("Client sent an HTTP request to an
		// HTTPS server"), which a pod can answer for a moment while it
		// takes in a switch to such a backend. Every request of a client
		// would get the same; abandoning the URL would call the pod
		// served (seen in make test: TestSystemInternalTLS, 9 requests
		// answered 400 after a rollout so confirmed). It waits, and the
		// condition shows the code.
		return "400", errNotYet
	case http.StatusBadGateway, http.StatusGatewayTimeout:
		// Envoy could not reach the backend, or not in time: no client
		// request would be served either.
		return strconv.Itoa(resp.StatusCode), errNotYet
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

// upstreamConnectError starts the body of Envoy's 503 when it could not
// connect to an endpoint of the route's cluster ("... or disconnect/reset
// before headers. reset reason: ..."), unlike its "no healthy upstream"
// and the empty body of a cluster it does not have yet.
const upstreamConnectError = "upstream connect error"

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
