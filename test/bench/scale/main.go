// Command scale is the scale benchmark (`make bench-scale`): it creates N
// KIngresses shaped like Knative Services (one external host, one
// cluster-local host that expands to three, one backend each), waits until
// all are Ready, then rolls 100 of them at once to fresh backends. It
// reports the times, the HTTPProxies written and probes sent (from the
// controller's metrics), the controller's peak RSS and CPU seconds (each
// replica's when hack/controller.sh runs several), and Contour's and
// Envoy's memory; the last line is the summary.
//
// Backends are Services: N+100 of them select the same two Pods, so each
// KIngress has a backend of its own (a Contour cluster of its own) without
// running thousands of processes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"

	"github.com/hitless/hitless/test/harness"
)

func main() {
	n := flag.Int("kingresses", 1000, "KIngresses to create")
	roll := flag.Int("rollouts", 100, "KIngresses rolled at once to fresh backends")
	workers := flag.Int("workers", 32, "parallel API writers")
	stackDir := flag.String("stack", ".stack", "the local stack's state dir (pid files)")
	metricsPort := flag.Int("metrics-port", 9091, "replica 1's Prometheus port on 127.0.0.1; replica N's is this + N-1 (hack/controller.sh)")
	flag.Parse()
	ctx := context.Background()
	c, err := harness.NewClients()
	if err != nil {
		fail(err)
	}
	// A previous run's namespace still being deleted (thousands of proxies
	// going) would load Contour and the API server during this one.
	waitGone(ctx, c, "scale-")
	ns, cleanup, err := c.CreateNamespace(ctx, "scale")
	if err != nil {
		fail(err)
	}
	defer func() { cleanup(); waitGone(ctx, c, ns) }()

	// Two pods behind every backend Service.
	for _, p := range []string{"pool-a", "pool-b"} {
		if err := c.CreateBackend(ctx, ns, p); err != nil {
			fail(err)
		}
		if _, err := c.Kube.CoreV1().Pods(ns).Patch(ctx, p, "application/merge-patch+json",
			[]byte(`{"metadata":{"labels":{"pool":"yes"}}}`), metav1.PatchOptions{}); err != nil {
			fail(err)
		}
	}
	parallel(*n+*roll, *workers, func(i int) error {
		_, err := c.Kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svcName(i)},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"pool": "yes"},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt(8080)}}},
		}, metav1.CreateOptions{})
		return err
	})
	fmt.Fprintf(os.Stderr, "created %d backend Services\n", *n+*roll)

	reps := replicas(*stackDir, *metricsPort)
	if len(reps) == 0 {
		fail(fmt.Errorf("no controller replica is running (no pid file in %s)", *stackDir))
	}
	scrape := func(metric string) float64 {
		total := 0.0
		for _, r := range reps {
			total += harness.Scrape(r.metrics, metric)
		}
		return total
	}
	for _, r := range reps {
		r.cpu0 = cpuSeconds(r.pid)
		r.peak = newPeak(r.pid)
	}
	writes0 := scrape("hitless_httpproxy_writes_total")
	probes0 := scrape("hitless_probe_requests_total")

	rules := func(i, backend int) []harness.Rule {
		split := []harness.Split{{Backend: svcName(backend), Percent: 100}}
		return []harness.Rule{
			{Host: fmt.Sprintf("ks%d.%s.example.com", i, ns), Visibility: v1alpha1.IngressVisibilityExternalIP, Splits: split},
			{Host: fmt.Sprintf("ks%d.%s.svc.cluster.local", i, ns), Visibility: v1alpha1.IngressVisibilityClusterLocal, Splits: split},
		}
	}
	start := time.Now()
	parallel(*n, *workers, func(i int) error {
		_, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, harness.KIngress(ns, kName(i), rules(i, i)...), metav1.CreateOptions{})
		return err
	})
	created := time.Since(start)
	allReady := waitAll(ctx, c, ns, *n, nil)
	fmt.Fprintf(os.Stderr, "%d KIngresses created in %v, all Ready %v after the first create\n", *n, created.Round(time.Millisecond), allReady.Round(time.Millisecond))

	rollStart := time.Now()
	rolled := map[string]int64{}
	var mu sync.Mutex
	parallel(*roll, *workers, func(i int) error {
		return c.Update(ctx, ns, kName(i), func(ing *v1alpha1.Ingress) {
			harness.SetRules(ing, rules(i, *n+i)...)
			mu.Lock()
			rolled[kName(i)] = ing.Generation + 1
			mu.Unlock()
		})
	})
	rollDur := waitAll(ctx, c, ns, *n, rolled)
	_ = rollStart
	fmt.Fprintf(os.Stderr, "%d rollouts Ready %v after the first update\n", *roll, rollDur.Round(time.Millisecond))

	cpu, peakRSS := 0.0, 0.0
	for _, r := range reps {
		r.rss = r.peak.stop()
		r.cpu = cpuSeconds(r.pid) - r.cpu0
		cpu += r.cpu
		peakRSS = max(peakRSS, r.rss)
	}
	writes := scrape("hitless_httpproxy_writes_total") - writes0
	probes := scrape("hitless_probe_requests_total") - probes0
	proxies, _ := c.Contour.ProjectcontourV1().HTTPProxies(ns).List(ctx, metav1.ListOptions{})

	// Every Contour replica of both fleets (contour-<fleet>.pid, contour-<fleet>-2.pid).
	contourMB, contours := 0.0, 0
	pidFiles, _ := filepath.Glob(filepath.Join(*stackDir, "pids/contour-*.pid"))
	for _, f := range pidFiles {
		contourMB += rssMB(readPid(f))
		contours++
	}
	envoyMB, envoys := 0.0, 0
	for _, p := range pgrep("envoy") {
		envoyMB += rssMB(p)
		envoys++
	}
	fmt.Printf("\n%-42s %s\n", "measure", "value")
	row := func(k string, v interface{}) { fmt.Printf("%-42s %v\n", k, v) }
	row("KIngresses (1 external + 3 cluster-local hosts)", *n)
	row("all Ready after first create (s)", fmt.Sprintf("%.1f", allReady.Seconds()))
	row(fmt.Sprintf("%d simultaneous rollouts Ready (s)", *roll), fmt.Sprintf("%.1f", rollDur.Seconds()))
	row("HTTPProxies now / written (creates+updates)", fmt.Sprintf("%d / %.0f", len(proxies.Items), writes))
	row("probe requests scheduled", fmt.Sprintf("%.0f", probes))
	row("controller replicas", len(reps))
	for _, r := range reps {
		row(fmt.Sprintf("controller %d peak RSS (MiB) / CPU (s)", r.n), fmt.Sprintf("%.0f / %.1f", r.rss, r.cpu))
	}
	row("controller CPU, all replicas (s)", fmt.Sprintf("%.1f", cpu))
	row(fmt.Sprintf("Contour RSS, %d processes (MiB)", contours), fmt.Sprintf("%.0f", contourMB))
	row(fmt.Sprintf("Envoy RSS, %d pods (MiB)", envoys), fmt.Sprintf("%.0f", envoyMB))
	fmt.Printf("scale: kingresses=%d replicas=%d all_ready_s=%.1f rollout100_s=%.1f controller_rss_mb=%.0f controller_cpu_s=%.1f probes=%.0f\n",
		*n, len(reps), allReady.Seconds(), rollDur.Seconds(), peakRSS, cpu, probes)
}

// waitGone waits until no namespace with the prefix exists.
func waitGone(ctx context.Context, c *harness.Clients, prefix string) {
	for start := time.Now(); time.Since(start) < 10*time.Minute; time.Sleep(time.Second) {
		list, err := c.Kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		left := false
		for _, n := range list.Items {
			left = left || strings.HasPrefix(n.Name, prefix)
		}
		if !left {
			return
		}
	}
}

func kName(i int) string   { return fmt.Sprintf("ks%d", i) }
func svcName(i int) string { return fmt.Sprintf("svc%d", i) }

// waitAll polls until every KIngress is Ready (at the generation in want,
// for those listed) and returns the time since it was called... measured
// from the caller's start by the caller adding its own offset.
func waitAll(ctx context.Context, c *harness.Clients, ns string, n int, want map[string]int64) time.Duration {
	start := time.Now()
	for {
		list, err := c.Net.NetworkingV1alpha1().Ingresses(ns).List(ctx, metav1.ListOptions{})
		if err == nil {
			ready := 0
			for i := range list.Items {
				ing := &list.Items[i]
				if g, ok := want[ing.Name]; ok && ing.Generation < g {
					continue
				}
				if ing.IsReady() {
					ready++
				}
			}
			if ready == n {
				return time.Since(start)
			}
			if time.Since(start) > 15*time.Minute {
				fail(fmt.Errorf("only %d of %d KIngresses Ready after 15m", ready, n))
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func parallel(n, workers int, f func(i int) error) {
	var wg sync.WaitGroup
	next := make(chan int)
	var once sync.Once
	var firstErr error
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					once.Do(func() { firstErr = err })
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		fail(firstErr)
	}
}

// replica is one running controller process of hack/controller.sh.
type replica struct {
	n, pid    int
	metrics   string
	cpu0, cpu float64
	rss       float64
	peak      *peak
}

// replicas finds the running controller replicas from their pid files
// (controller.pid is replica 1, controller-N.pid replica N).
func replicas(stackDir string, metricsPort int) []*replica {
	files, _ := filepath.Glob(filepath.Join(stackDir, "controller*.pid"))
	var out []*replica
	for _, f := range files {
		n := 1
		if rest := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "controller-"), ".pid"); rest != "controller" {
			var err error
			if n, err = strconv.Atoi(rest); err != nil {
				continue
			}
		}
		pid := readPid(f)
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); pid == 0 || err != nil {
			continue // not running
		}
		out = append(out, &replica{n: n, pid: pid, metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort+n-1)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].n < out[j].n })
	return out
}

func readPid(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	p, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return p
}

func rssMB(pid int) float64 { return statusKB(pid, "VmRSS:") / 1024 }

func statusKB(pid int, key string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, key) {
			f := strings.Fields(l)
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return 0
}

func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndex(s, ")")+2:])
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return (u + k) / 100 // USER_HZ
}

func pgrep(name string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(b)) == name {
			out = append(out, pid)
		}
	}
	sort.Ints(out)
	return out
}

// peak samples a process's RSS; VmHWM would include the start-up, this
// tracks the benchmark's window only.
type peak struct {
	stopCh chan struct{}
	done   chan float64
}

func newPeak(pid int) *peak {
	p := &peak{stopCh: make(chan struct{}), done: make(chan float64)}
	go func() {
		max := 0.0
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			if v := rssMB(pid); v > max {
				max = v
			}
			select {
			case <-p.stopCh:
				p.done <- max
				return
			case <-t.C:
			}
		}
	}()
	return p
}

func (p *peak) stop() float64 { close(p.stopCh); return <-p.done }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench-scale:", err)
	os.Exit(1)
}
