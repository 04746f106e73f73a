// Command rollout is the rollout benchmark (`make bench-rollout`): the same
// steady load through every Envoy pod of the external fleet while backends
// are swapped back to back to fresh Pods and Services, in two modes, one
// run — plain (one HTTPProxy flipped between Services directly, no
// controller: the floor of a swap's time, and the failures a bare flip
// costs) and hitless (a KIngress changed through the controller). It prints
// a table, hitless's ready time against the plain flip's and, last, one
// summary line, and draws responses per second by status over time as SVG.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"

	"github.com/hitless/hitless/test/harness"
)

type modeResult struct {
	name     string
	swaps    int
	summary  harness.Summary
	ready    []time.Duration
	warm     []time.Duration
	switched []time.Duration
	probes   float64
	// probe requests sent per rollout, retries included, by result
	sent map[string]float64
	// Envoy's upstream retries over the mode's run, every pod of the fleet
	retries float64
	panel   harness.PlotPanel
	// timeline of every swap and the failures placed on it
	events   []swapEvents
	failures []string
	envoyLog []string
}

func main() {
	swaps := flag.Int("swaps", 100, "backend swaps per mode")
	rps := flag.Int("rps", 200, "requests per second, spread over every Envoy pod")
	svg := flag.String("svg", "", "write the plot here")
	metricsURL := flag.String("metrics", "http://127.0.0.1:9091/metrics", "the controller's Prometheus endpoint (probe counts)")
	modes := flag.String("modes", "plain,hitless", "which modes to run, comma-separated: plain, hitless")
	flag.StringVar(&envoyLogDir, "envoy-logs", harness.PodLogDir(),
		"the node agent's pod logs, where the Envoy pods' access logs are (failed requests are looked up there)")
	flag.StringVar(&backendKind, "backend", "fast", "backend pods: fast (TCP readiness every 1s, 5s grace) or conformance (as Knative's ingress conformance suite makes them: HTTP readiness on /healthz every 10s, 30s grace, a random container port)")
	flag.StringVar(&via, "via", "pods", "where the load goes: pods (every Envoy pod directly) or vip (the external Envoy Service's load balancer address, INGRESS_ADDRESS, through kube-proxy)")
	churn := flag.Int("churn-pods", 0, "used-stack mode: create and delete this many pods first, so that pod addresses have cycled as after other benchmarks")
	flag.Parse()

	ctx := context.Background()
	c, err := harness.NewClients()
	if err != nil {
		fail(err)
	}
	pods := c.EnvoyPods(ctx, "contour-external")
	if len(pods) == 0 {
		fail(fmt.Errorf("the external fleet has no ready Envoy pod: is the stack up?"))
	}

	if *churn > 0 {
		ips, err := churnPods(ctx, c, *churn)
		if err != nil {
			fail(err)
		}
		fmt.Printf("used stack: %d pods created and deleted first (addresses %s ... %s)\n", len(ips), ips[0], ips[len(ips)-1])
	}

	var results []modeResult
	for _, mode := range strings.Split(*modes, ",") {
		switch mode {
		case "plain":
			results = append(results, run(ctx, c, "plain", pods, *swaps, *rps, ""))
		case "hitless":
			results = append(results, run(ctx, c, "hitless", pods, *swaps, *rps, *metricsURL))
		default:
			fail(fmt.Errorf("unknown mode %q (plain, hitless)", mode))
		}
	}

	fmt.Printf("\n%-11s %6s %9s %-22s %11s %7s %-26s %-26s %-26s %s\n", "mode", "swaps", "requests", "non-2xx by code", "conn_errors", "retries",
		"ready p50/p90/p99 ms", "warm p50/p90/p99 ms", "switch p50/p90/p99 ms", "probes/rollout")
	for _, m := range results {
		fmt.Printf("%-11s %6d %9d %-22s %11d %7.0f %-26s %-26s %-26s %s\n", m.name, m.swaps, m.summary.Requests, non2xx(m.summary), m.summary.ConnErrors, m.retries,
			pcts(m.ready), pcts(m.warm), pcts(m.switched), probesCell(m))
	}
	fmt.Printf("load: %d requests/s target over %d Envoy pods; release hold (hitless) as configured in config-contour\n", *rps, len(pods))
	fmt.Println("retries: Envoy's upstream_rq_retry to the run's clusters, summed over the fleet's pods (the retry policy hides these from clients)")
	for _, m := range results {
		for i, f := range m.failures {
			if i == 20 {
				fmt.Printf("  %s: %d more failures\n", m.name, len(m.failures)-i)
				break
			}
			fmt.Printf("  %s failure: %s\n", m.name, f)
		}
		for _, l := range m.envoyLog {
			fmt.Printf("  %s Envoy access log: %s\n", m.name, l)
		}
	}
	if *svg != "" {
		var panels []harness.PlotPanel
		for _, m := range results {
			panels = append(panels, m.panel)
		}
		f, err := os.Create(*svg)
		if err != nil {
			fail(err)
		}
		if err := harness.WriteSVG(f, panels); err != nil {
			fail(err)
		}
		f.Close()
	}
	byName := map[string]modeResult{}
	for _, m := range results {
		byName[m.name] = m
	}
	if h, ok := byName["hitless"]; ok {
		if f, ok := byName["plain"]; ok {
			for _, p := range []int{50, 90, 99} {
				fmt.Printf("ready p%d: hitless %d ms, plain flip %d ms, hitless/plain %.2f\n", p,
					harness.Percentile(h.ready, p).Milliseconds(), harness.Percentile(f.ready, p).Milliseconds(),
					ratio(harness.Percentile(h.ready, p), harness.Percentile(f.ready, p)))
			}
		}
	}
	// hitless's ready percentiles are the line's ready_*; the plain flip's,
	// the floor they are read against, plain_ready_*.
	line := "rollout:"
	for _, m := range results {
		line += fmt.Sprintf(" %s_failed=%d %s_requests=%d %s_retries=%.0f", m.name, m.summary.Failed(), m.name, m.summary.Requests, m.name, m.retries)
	}
	for _, m := range results {
		prefix := "ready"
		if m.name != "hitless" {
			prefix = m.name + "_ready"
		}
		line += fmt.Sprintf(" %s_p50_ms=%d %s_p99_ms=%d", prefix,
			harness.Percentile(m.ready, 50).Milliseconds(), prefix, harness.Percentile(m.ready, 99).Milliseconds())
	}
	fmt.Println(line)
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// run drives one mode: create the first backend and the route, start the
// load, then swap to a fresh backend `swaps` times, deleting the previous
// one as soon as the swap is served everywhere.
func run(ctx context.Context, c *harness.Clients, mode string, pods []string, swaps, rps int, metricsURL string) modeResult {
	ns, cleanup, err := c.CreateNamespace(ctx, "bench-"+mode)
	if err != nil {
		fail(err)
	}
	defer cleanup()
	host := mode + "." + ns + ".example.com"
	name := func(i int) string { return fmt.Sprintf("b%d", i) }
	if err := createBackend(ctx, c, ns, name(0)); err != nil {
		fail(err)
	}
	var sw swapper
	if mode == "plain" {
		sw = &plainSwapper{c: c, ns: ns, host: host, pods: pods}
	} else {
		sw = &hitlessSwapper{c: c, ns: ns, host: host}
	}
	if _, _, err := sw.point(ctx, name(0)); err != nil {
		fail(err)
	}

	targets := make([]harness.Target, 0, len(pods))
	for _, ip := range pods {
		targets = append(targets, harness.Target{Addr: ip + ":8080", Host: host})
	}
	if via == "vip" {
		targets = []harness.Target{{Addr: os.Getenv("INGRESS_ADDRESS"), Host: host}}
	}
	load := &harness.Load{Targets: targets, RPS: rps}
	load.Allow(name(0))
	start := time.Now()
	probesBefore := harness.Scrape(metricsURL, "hitless_probe_requests_total")
	sentBefore := scrapeSent(metricsURL)
	retries := c.WatchRetries(ctx, "contour-external", ns)
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); load.Run(lctx) }()
	time.Sleep(2 * time.Second)

	res := modeResult{name: mode, swaps: swaps}
	var changes []time.Time
	fromIPs := c.ReadyIPs(ctx, ns, name(0))
	for i := 1; i <= swaps; i++ {
		if err := createBackend(ctx, c, ns, name(i)); err != nil {
			fail(err)
		}
		ev := swapEvents{n: i, from: name(i - 1), to: name(i), fromIPs: fromIPs, created: time.Now()}
		load.Allow(name(i-1), name(i))
		t0 := time.Now()
		ev.updated = t0
		changes = append(changes, t0)
		warm, switched, err := sw.point(ctx, name(i))
		if err != nil {
			fail(fmt.Errorf("%s swap %d: %w", mode, i, err))
		}
		ev.ready = time.Now()
		res.ready = append(res.ready, ev.ready.Sub(t0))
		if warm > 0 {
			res.warm = append(res.warm, warm)
			ev.switching = t0.Add(warm)
		}
		if switched > 0 {
			res.switched = append(res.switched, switched)
		}
		load.Allow(name(i))
		ev.toIPs = c.ReadyIPs(ctx, ns, name(i))
		ev.deleted = time.Now()
		if err := c.DeleteBackend(ctx, ns, name(i-1)); err != nil {
			fail(err)
		}
		res.events = append(res.events, ev)
		fromIPs = ev.toIPs
		fmt.Fprintf(os.Stderr, "%s: swap %d/%d ready in %v\n", mode, i, swaps, res.ready[len(res.ready)-1].Round(time.Millisecond))
	}
	time.Sleep(2 * time.Second)
	stop()
	wg.Wait()
	if metricsURL != "" {
		res.probes = (harness.Scrape(metricsURL, "hitless_probe_requests_total") - probesBefore) / float64(swaps)
		res.sent = map[string]float64{}
		for result, n := range scrapeSent(metricsURL) {
			res.sent[result] = (n - sentBefore[result]) / float64(swaps)
		}
	}
	res.retries = retries.Stop()
	res.summary = load.Summarize()
	for _, r := range load.FailedResults() {
		res.failures = append(res.failures, explain(r, res.events, targets[r.Target].Addr))
	}
	res.envoyLog = harness.FailedAccessLog(envoyLogDir, "contour-external", host, 20)
	res.panel = harness.PlotPanel{
		Title:   fmt.Sprintf("%s: %d swaps to fresh backends at %d req/s, %d failed", mode, swaps, rps, res.summary.Failed()),
		Start:   start,
		Seconds: load.PerSecond(start),
		Changes: changes,
	}
	return res
}

// swapper points the route at a backend and returns once every Envoy pod
// serves it, with the time spent warming and switching where known.
type swapper interface {
	point(ctx context.Context, backend string) (warm, switched time.Duration, err error)
}

type plainSwapper struct {
	c     *harness.Clients
	ns    string
	host  string
	pods  []string
	proxy *contourv1.HTTPProxy
}

func (p *plainSwapper) point(ctx context.Context, backend string) (time.Duration, time.Duration, error) {
	spec := contourv1.HTTPProxySpec{
		IngressClassName: "contour-external",
		VirtualHost:      &contourv1.VirtualHost{Fqdn: p.host},
		Routes: []contourv1.Route{{Services: []contourv1.Service{{
			Name: backend, Port: 80,
			RequestHeadersPolicy: &contourv1.HeadersPolicy{Set: []contourv1.HeaderValue{{Name: "X-Backend", Value: backend}}},
		}}}},
	}
	proxies := p.c.Contour.ProjectcontourV1().HTTPProxies(p.ns)
	var err error
	if p.proxy == nil {
		p.proxy, err = proxies.Create(ctx, &contourv1.HTTPProxy{ObjectMeta: metav1.ObjectMeta{Name: "plain"}, Spec: spec}, metav1.CreateOptions{})
	} else {
		// Contour writes the status, so read the latest before each update.
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := proxies.Get(ctx, "plain", metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Spec = spec
			p.proxy, err = proxies.Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
	}
	if err != nil {
		return 0, 0, err
	}
	// Done when every Envoy pod routes to the new backend, as a prober
	// would tell (the plain swap has no warm phase).
	deadline := time.Now().Add(2 * time.Minute)
	for _, ip := range p.pods {
		for !servedBy(ip, p.host, backend) {
			if time.Now().After(deadline) {
				return 0, 0, fmt.Errorf("Envoy pod %s never served %s", ip, backend)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return 0, 0, nil
}

func servedBy(ip, host, backend string) bool {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, ip+":8080")
		},
	}}
	resp, err := c.Get("http://" + host + "/")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == 200 && strings.Contains(string(b), `"`+backend+`"`)
}

type hitlessSwapper struct {
	c       *harness.Clients
	ns      string
	host    string
	created bool
}

func (h *hitlessSwapper) point(ctx context.Context, backend string) (time.Duration, time.Duration, error) {
	rule := harness.Rule{Host: h.host, Visibility: v1alpha1.IngressVisibilityExternalIP, Splits: []harness.Split{{Backend: backend, Percent: 100}}}
	start := time.Now()
	if !h.created {
		if _, err := h.c.Net.NetworkingV1alpha1().Ingresses(h.ns).Create(ctx, harness.KIngress(h.ns, "bench", rule), metav1.CreateOptions{}); err != nil {
			return 0, 0, err
		}
		h.created = true
	} else if err := h.c.Update(ctx, h.ns, "bench", func(ing *v1alpha1.Ingress) { harness.SetRules(ing, rule) }); err != nil {
		return 0, 0, err
	}
	// Follow the Ready reason to time the phases.
	var switchAt time.Time
	deadline := start.Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		ing, err := h.c.Net.NetworkingV1alpha1().Ingresses(h.ns).Get(ctx, "bench", metav1.GetOptions{})
		if err != nil {
			return 0, 0, err
		}
		if ing.IsReady() {
			if switchAt.IsZero() {
				switchAt = start // no Warming seen: one round
				return 0, time.Since(start), nil
			}
			return switchAt.Sub(start), time.Since(switchAt), nil
		}
		if c := ing.Status.GetCondition(v1alpha1.IngressConditionReady); c != nil && c.Reason == "Switching" && switchAt.IsZero() &&
			ing.Status.ObservedGeneration == ing.Generation {
			switchAt = time.Now()
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0, 0, fmt.Errorf("KIngress %s/bench not Ready after 2m", h.ns)
}

func non2xx(s harness.Summary) string {
	var parts []string
	for code, n := range s.ByCode {
		if code < 200 || code > 299 {
			parts = append(parts, fmt.Sprintf("%d:%d", code, n))
		}
	}
	sort.Strings(parts)
	if s.Disallowed > 0 {
		parts = append(parts, fmt.Sprintf("wrong-backend:%d", s.Disallowed))
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, " ")
}

func pcts(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d/%d", harness.Percentile(ds, 50).Milliseconds(), harness.Percentile(ds, 90).Milliseconds(), harness.Percentile(ds, 99).Milliseconds())
}

func probesCell(m modeResult) string {
	if m.name == "plain" {
		return "- (none)"
	}
	if m.probes == 0 {
		return "n/a (metrics not reachable)"
	}
	cell := fmt.Sprintf("%.1f", m.probes)
	if len(m.sent) > 0 {
		// what was sent to get there: a retry is a probe that came before
		// the pod served the round
		var parts []string
		for _, r := range slices.Sorted(maps.Keys(m.sent)) {
			if m.sent[r] > 0 {
				parts = append(parts, fmt.Sprintf("%s %.1f", r, m.sent[r]))
			}
		}
		cell += " (sent: " + strings.Join(parts, ", ") + ")"
	}
	return cell
}

// scrapeSent reads hitless_probe_sent_total by its result label.
func scrapeSent(metricsURL string) map[string]float64 {
	out := map[string]float64{}
	for _, result := range []string{"confirmed", "not-yet", "error"} {
		out[result] = harness.ScrapeLabeled(metricsURL, "hitless_probe_sent_total", "result", result)
	}
	return out
}

// envoyLogDir is where the Envoy pods' access logs are read from.
var envoyLogDir string

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench-rollout:", err)
	os.Exit(1)
}
