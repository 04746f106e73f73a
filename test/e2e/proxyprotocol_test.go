//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"

	"github.com/hitless/hitless/pkg/config"
	"github.com/hitless/hitless/pkg/proxyproto"
	"github.com/hitless/hitless/test/harness"
)

// TestProxyProtocol runs the internal fleet the way a cluster behind an AWS
// NLB runs Contour, with --use-proxy-protocol (knative/serving#13044): every
// Envoy listener of it then wants a PROXY protocol header on each
// connection. Without use-proxy-protocol in config-contour, a KIngress on
// that fleet never goes Ready and its condition says what to set; with it,
// the KIngress goes Ready, the fleet serves only clients that send the
// header, and rollouts to fresh backends under load through such clients,
// on every Envoy pod of the fleet, drop nothing. Timings are logged, never
// asserted.
func TestProxyProtocol(t *testing.T) {
	ctx, c, ns := setup(t, "pp")
	swaps := envInt("PROXY_PROTOCOL_SWAPS", 5)
	rps := envInt("PROXY_PROTOCOL_RPS", 50)
	host := "pp." + ns + ".svc.cluster.local"
	rule := func(backend string) harness.Rule {
		return harness.Rule{Host: host, Visibility: v1alpha1.IngressVisibilityClusterLocal,
			Splits: []harness.Split{{Backend: backend, Percent: 100}}}
	}
	name := func(i int) string { return fmt.Sprintf("b%d", i) }

	fault(t, "proxy-protocol", internal, "on")
	t.Cleanup(func() {
		if err := faultErr("proxy-protocol", internal, "off"); err != nil {
			t.Error(err)
		}
	})
	// The controller restarts, as after an install: kept-alive probe
	// connections from an earlier test, accepted by the listener before
	// the change, are served by it while it drains (with the current
	// routes), and would confirm the KIngress without a header.
	t.Cleanup(func() { _ = exec.Command("../../hack/controller.sh", "start").Run() })
	controller(t, "stop")
	controller(t, "start")
	pods := c.EnvoyPods(ctx, internal)
	if len(pods) == 0 {
		t.Fatalf("fleet %s has no ready Envoy pod", internal)
	}

	// Before the key: Envoy closes every probe's connection unanswered.
	if err := c.CreateBackend(ctx, ns, name(0)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, harness.KIngress(ns, "pp", rule(name(0))), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ing, err := c.WaitFor(ctx, ns, "pp", time.Minute, "its condition names use-proxy-protocol", func(ing *v1alpha1.Ingress) bool {
		cond := ing.Status.GetCondition(v1alpha1.IngressConditionReady)
		return cond != nil && strings.Contains(cond.Message, "use-proxy-protocol")
	})
	if err != nil {
		t.Fatal(err)
	}
	cond := ing.Status.GetCondition(v1alpha1.IngressConditionReady)
	t.Logf("without use-proxy-protocol: Ready=%s reason=%s message=%q", cond.Status, cond.Reason, cond.Message)
	if ing.IsReady() {
		t.Fatal("the KIngress is Ready although no Envoy pod of its fleet answered a probe")
	}

	// The key set: Ready, and the fleet serves only clients that send the
	// header, so Ready was confirmed with it.
	start := time.Now()
	changeConfigContour(ctx, t, c, func(data map[string]string) {
		data[config.VisibilityKey] = visibilityWithProxyProtocol(t, data, v1alpha1.IngressVisibilityClusterLocal)
	})
	if _, err := c.WaitReady(ctx, ns, "pp", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("use-proxy-protocol set: KIngress Ready %v later", time.Since(start).Round(time.Millisecond))
	for _, ip := range pods {
		if code, _, err := getProxy(ip, host, false); err == nil {
			t.Errorf("GET %s via Envoy pod %s without a PROXY header = %d, want the connection closed unanswered", host, ip, code)
		}
		code, body, err := getProxy(ip, host, true)
		if err != nil || code != http.StatusOK || harness.XBackend([]byte(body)) != name(0) {
			t.Errorf("GET %s via Envoy pod %s with a PROXY header = %d %q %v, want 200 from %s", host, ip, code, body, err, name(0))
		}
	}
	t.Logf("%s: each of %d Envoy pods serves %s with a PROXY header and refuses it without", internal, len(pods), host)

	// Rollouts to fresh backends under load through PROXY protocol clients,
	// on every Envoy pod of the fleet.
	targets := c.MustFleetTargets(ctx, t, internal, host)
	for i := range targets {
		targets[i].ProxyProtocol = true
	}
	retries := c.WatchRetries(ctx, internal, ns)
	load, stopLoad := startLoadOn(ctx, rps, targets, name(0))
	time.Sleep(time.Second)
	var ready []time.Duration
	for i := 1; i <= swaps; i++ {
		cur, next := name(i-1), name(i)
		if err := c.CreateBackend(ctx, ns, next); err != nil {
			t.Fatal(err)
		}
		load.Allow(cur, next)
		start := time.Now()
		if err := c.Update(ctx, ns, "pp", func(ing *v1alpha1.Ingress) { harness.SetRules(ing, rule(next)) }); err != nil {
			t.Fatal(err)
		}
		if _, err := c.WaitReady(ctx, ns, "pp", 2*time.Minute); err != nil {
			t.Fatalf("swap %d: %v", i, err)
		}
		d := time.Since(start)
		ready = append(ready, d)
		load.Allow(next)
		t.Logf("swap %d: %s -> fresh %s Ready after %v", i, cur, next, d.Round(time.Millisecond))
		if err := c.DeleteBackend(ctx, ns, cur); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * time.Second)
	stopLoad()

	s := load.Summarize()
	sort.Slice(ready, func(i, j int) bool { return ready[i] < ready[j] })
	t.Logf("proxy-protocol load: sent=%d served=%d failed=%d (%s) over %d Envoy pods of %s; swap to Ready p50=%v max=%v over %d swaps",
		s.Requests, s.OK-s.Disallowed, s.Failed(), s, len(targets), internal,
		ready[len(ready)/2].Round(time.Millisecond), ready[len(ready)-1].Round(time.Millisecond), len(ready))
	for _, f := range s.Failures {
		t.Log(f)
	}
	n := retries.Stop()
	t.Logf("Envoy upstream retries in %s during the rollouts: %.0f", internal, n)
	if n != 0 {
		t.Errorf("Envoy retried %.0f requests in %s during the rollouts: a rollout made them fail once", n, internal)
	}
	if s.Failed() != 0 {
		for _, l := range harness.FailedAccessLog(harness.PodLogDir(), internal, host, 20) {
			t.Log("Envoy access log: " + l)
		}
		t.Errorf("%d of %d requests failed or came from a backend not allowed then", s.Failed(), s.Requests)
	}
	if s.Requests < rps*5 {
		t.Errorf("only %d requests were sent: the load did not run", s.Requests)
	}

	// The other way round: the fleet back on plain connections, the key
	// still set. Envoy answers the PROXY line 400, which must not pass for
	// an answer that abandons a probe (and so confirms the pod): the next
	// rollout waits, saying what to check. The controller is restarted
	// first, as after an install: the prober's kept-alive connections,
	// opened with the header while the fleet wanted it, would otherwise
	// still be served by the draining listener they were accepted on (with
	// the current routes: a rollout then goes Ready through them, rightly,
	// as they are served).
	fault(t, "proxy-protocol", internal, "off")
	controller(t, "stop")
	controller(t, "start")
	last := name(swaps + 1)
	if err := c.CreateBackend(ctx, ns, last); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(ctx, ns, "pp", func(ing *v1alpha1.Ingress) { harness.SetRules(ing, rule(last)) }); err != nil {
		t.Fatal(err)
	}
	ing, err = c.WaitFor(ctx, ns, "pp", time.Minute, "its condition says to remove use-proxy-protocol", func(ing *v1alpha1.Ingress) bool {
		cond := ing.Status.GetCondition(v1alpha1.IngressConditionReady)
		return ing.Status.ObservedGeneration == ing.Generation && cond != nil && strings.Contains(cond.Message, "remove use-proxy-protocol")
	})
	if err != nil {
		t.Fatal(err)
	}
	cond = ing.Status.GetCondition(v1alpha1.IngressConditionReady)
	t.Logf("use-proxy-protocol set on a fleet without it: Ready=%s reason=%s message=%q", cond.Status, cond.Reason, cond.Message)
	if ing.IsReady() {
		t.Error("the rollout is Ready although no Envoy pod of its fleet read a probe")
	}
}

// visibilityWithProxyProtocol is the visibility of config-contour (its
// defaults when unset) with use-proxy-protocol set for v alone.
func visibilityWithProxyProtocol(t *testing.T, data map[string]string, v v1alpha1.IngressVisibility) string {
	t.Helper()
	cfg, err := config.NewContourFromMap(data)
	if err != nil {
		t.Fatalf("config-contour: %v", err)
	}
	var b strings.Builder
	for _, vis := range []v1alpha1.IngressVisibility{v1alpha1.IngressVisibilityExternalIP, v1alpha1.IngressVisibilityClusterLocal} {
		f := cfg.Visibility[vis]
		fmt.Fprintf(&b, "%s:\n  class: %s\n  service: %s\n", vis, f.Class, f.Service)
		if vis == v {
			b.WriteString("  use-proxy-protocol: true\n")
		}
	}
	return b.String()
}

// getProxy sends one request for host straight to an Envoy pod's HTTP
// listener, with a PROXY protocol header first when proxy is set.
func getProxy(ip, host string, proxy bool) (int, string, error) {
	client := &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				d, addr := &net.Dialer{Timeout: 2 * time.Second}, net.JoinHostPort(ip, "8080")
				if proxy {
					return proxyproto.Dial(ctx, d, network, addr)
				}
				return d.DialContext(ctx, network, addr)
			},
		},
	}
	resp, err := client.Get("http://" + host + "/")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}
