package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probeTarget is where a container's probes and lifecycle hooks go.
type probeTarget struct {
	ip        string
	container *corev1.Container
	// exec runs a command inside the container and returns its exit code.
	exec func(ctx context.Context, cmd []string) (int, []byte, error)
}

// resolvePort turns a numeric or named container port into a number.
func resolvePort(p intstr.IntOrString, c *corev1.Container) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil {
		return n, nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("port %q not found in container %s", p.StrVal, c.Name)
}

// probeClient never follows redirects (a 3xx is a success, as for the
// kubelet) and skips certificate checks for HTTPS probes.
var probeClient = &http.Client{
	Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // probes do not verify, like the kubelet
		DisableKeepAlives: true,
	},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// runHandler runs one probe or hook action with a timeout and reports success
// and a message explaining a failure.
func runHandler(ctx context.Context, h corev1.ProbeHandler, timeout time.Duration, t probeTarget) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case h.HTTPGet != nil:
		return httpGet(ctx, h.HTTPGet, t)
	case h.TCPSocket != nil:
		host := h.TCPSocket.Host
		if host == "" {
			host = t.ip
		}
		port, err := resolvePort(h.TCPSocket.Port, t.container)
		if err != nil {
			return false, err.Error()
		}
		return dialOK(ctx, host, port)
	case h.GRPC != nil:
		// Approximation: a gRPC health probe counts as a TCP connect.
		return dialOK(ctx, t.ip, int(h.GRPC.Port))
	case h.Exec != nil:
		code, out, err := t.exec(ctx, h.Exec.Command)
		if err != nil {
			return false, err.Error()
		}
		if code != 0 {
			return false, fmt.Sprintf("command %q exited with %d: %s", h.Exec.Command, code, out)
		}
		return true, ""
	}
	return false, "probe has no handler"
}

func dialOK(ctx context.Context, host string, port int) (bool, string) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return false, err.Error()
	}
	conn.Close()
	return true, ""
}

func httpGet(ctx context.Context, g *corev1.HTTPGetAction, t probeTarget) (bool, string) {
	host := g.Host
	if host == "" {
		host = t.ip
	}
	port, err := resolvePort(g.Port, t.container)
	if err != nil {
		return false, err.Error()
	}
	scheme := "http"
	if g.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	u := &url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(port))}
	path := g.Path
	if path == "" {
		path = "/"
	}
	ref, err := url.Parse(path)
	if err != nil {
		return false, err.Error()
	}
	u = u.ResolveReference(ref)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return false, err.Error()
	}
	req.Header.Set("User-Agent", "kube-probe/1.35")
	req.Header.Set("Accept", "*/*")
	for _, h := range g.HTTPHeaders {
		if http.CanonicalHeaderKey(h.Name) == "Host" {
			req.Host = h.Value
			continue
		}
		req.Header.Add(h.Name, h.Value)
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode >= 200 && resp.StatusCode < 400 {
		return true, ""
	}
	return false, fmt.Sprintf("HTTP probe failed with statuscode: %d: %s", resp.StatusCode, body)
}

// probeSettings are a probe's timings with the API defaults filled in.
type probeSettings struct {
	initialDelay, period, timeout time.Duration
	successThreshold              int
	failureThreshold              int
}

func settingsOf(p *corev1.Probe) probeSettings {
	s := probeSettings{
		initialDelay:     time.Duration(p.InitialDelaySeconds) * time.Second,
		period:           10 * time.Second,
		timeout:          time.Second,
		successThreshold: 1,
		failureThreshold: 3,
	}
	if p.PeriodSeconds > 0 {
		s.period = time.Duration(p.PeriodSeconds) * time.Second
	}
	if p.TimeoutSeconds > 0 {
		s.timeout = time.Duration(p.TimeoutSeconds) * time.Second
	}
	if p.SuccessThreshold > 0 {
		s.successThreshold = int(p.SuccessThreshold)
	}
	if p.FailureThreshold > 0 {
		s.failureThreshold = int(p.FailureThreshold)
	}
	return s
}

// probeResult is a prober's verdict so far.
type probeResult int

const (
	probeUnknown probeResult = iota
	probeSuccess
	probeFailure
)

// runProber probes on the probe's schedule until ctx ends, calling onChange
// when the verdict changes after successThreshold successes or
// failureThreshold failures in a row. Readiness starts as failure, liveness as
// success, startup as unknown (so that both verdicts are reported). It
// returns early when onChange returns true.
//
// Until the first verdict (successThreshold successes or failureThreshold
// failures in a row), a non-zero undecided probes that often instead of every
// period. That is what a kubelet does for readiness: while a started
// container has no readiness result, every pod status sync (about once a
// second while a pod starts) triggers a probe. Without it, a Knative
// queue-proxy probed a few milliseconds before it listens would stay unready
// for a whole periodSeconds (10 s).
func runProber(ctx context.Context, p *corev1.Probe, t probeTarget, initial probeResult, undecided time.Duration, onChange func(ok bool, msg string) (stop bool)) {
	s := settingsOf(p)
	state := initial
	successes, failures := 0, 0
	decided := false
	timer := time.NewTimer(s.initialDelay)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		ok, msg := runHandler(ctx, p.ProbeHandler, s.timeout, t)
		if ctx.Err() != nil {
			return
		}
		if ok {
			successes, failures = successes+1, 0
			decided = decided || successes >= s.successThreshold
			if state != probeSuccess && successes >= s.successThreshold {
				state = probeSuccess
				if onChange(true, "") {
					return
				}
			}
		} else {
			successes, failures = 0, failures+1
			decided = decided || failures >= s.failureThreshold
			if state != probeFailure && failures >= s.failureThreshold {
				state = probeFailure
				if onChange(false, msg) {
					return
				}
			}
		}
		if !decided && undecided > 0 && undecided < s.period {
			timer.Reset(undecided)
		} else {
			timer.Reset(s.period)
		}
	}
}
