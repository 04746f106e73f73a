// Command scale is the scale benchmark (`make bench-scale`): it creates N
// KIngresses shaped like Knative Services (one external host, one
// cluster-local host that expands to three, one backend each), waits until
// all are Ready, then rolls 100 of them at once to fresh backends. It
// reports the times, the HTTPProxies written and probes sent (from the
// controller's metrics), the API writes of every client while the
// KIngresses became Ready and in a quiet spell once they were (from the API
// server's own request counter), the controller's peak RSS and CPU seconds
// (each replica's when hack/controller.sh runs several), and Contour's and
// Envoy's memory; the last line is the summary. -kingresses 250,500,1000
// runs each size in turn and ends with the growth curve as a Markdown
// table (and, with -svg, a plot).
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
	"k8s.io/apimachinery/pkg/watch"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"

	"github.com/hitless/hitless/test/harness"
)

func main() {
	sizes := flag.String("kingresses", "1000", "KIngresses to create; a comma-separated list runs each size in turn (a growth curve)")
	roll := flag.Int("rollouts", 100, "KIngresses rolled at once to fresh backends")
	workers := flag.Int("workers", 32, "parallel API writers")
	stackDir := flag.String("stack", ".stack", "the local stack's state dir (pid files)")
	metricsPort := flag.Int("metrics-port", 9091, "replica 1's Prometheus port on 127.0.0.1; replica N's is this + N-1 (hack/controller.sh)")
	svg := flag.String("svg", "", "with several sizes: write the growth curve here")
	wait := flag.Duration("wait", 15*time.Minute, "how long a phase may take: a mode whose KIngresses are not all Ready by then is reported as slower than this, with how many were")
	modes := flag.String("modes", modeHitless, "comma-separated, each run at every size on this stack: hitless, floor (hitless's HTTPProxies written directly, no controller)")
	recoveries := flag.String("recovery", "", "comma-separated faults to recover from once all are Ready and rolled, in every mode: controller (killed and started again; the floor's is a quiet spell), api-server (down -outage)")
	window := flag.Duration("recovery-window", time.Minute, "how long after each fault ends its cost is counted")
	outage := flag.Duration("outage", 30*time.Second, "how long the API server stays down in -recovery api-server")
	flag.Parse()
	rec := recoveryOpts{window: *window, outage: *outage, stackDir: *stackDir, metricsPort: *metricsPort}
	for _, f := range strings.Split(*recoveries, ",") {
		switch f = strings.TrimSpace(f); f {
		case "":
		case faultController, faultAPIServer:
			rec.faults = append(rec.faults, f)
		default:
			fail(fmt.Errorf("-recovery %q: want %s and/or %s", *recoveries, faultController, faultAPIServer))
		}
	}
	var ns []int
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			fail(fmt.Errorf("-kingresses %q: want positive numbers separated by commas", *sizes))
		}
		ns = append(ns, n)
	}
	ctx := context.Background()
	c, err := harness.NewClients()
	if err != nil {
		fail(err)
	}
	var results []result
	byMode := map[string][]result{}
	for _, mode := range strings.Split(*modes, ",") {
		inMode(mode, func() {
			for _, n := range ns {
				r := runSize(ctx, c, mode, n, *roll, *workers, *stackDir, *metricsPort, *wait, rec)
				byMode[mode] = append(byMode[mode], r)
				if mode == modeHitless {
					results = append(results, r)
				}
			}
		})
	}
	if len(byMode) > 1 {
		fmt.Println("\nside by side, one stack")
		writeSideBySide(os.Stdout, byMode)
	}
	if len(results) > 1 {
		fmt.Println("\ngrowth curve")
		writeCurveTable(os.Stdout, results, byMode[modeFloor])
	}
	if *svg != "" {
		f, err := os.Create(*svg)
		if err != nil {
			fail(err)
		}
		if err := writeCurveSVG(f, results, byMode[modeFloor]); err != nil {
			fail(err)
		}
		if err := f.Close(); err != nil {
			fail(err)
		}
	}
}

// restBeforeRollouts is the quiet spell between all Ready (all served, for
// the floor) and the rollouts, in every mode.
const restBeforeRollouts = 20 * time.Second

// probeResults are the values of hitless_probe_sent_total's result label.
var probeResults = []string{"confirmed", "not-programmed", "not-yet", "error"}

// notProgrammedAnswers are the values of its answer label on a
// not-programmed result.
var notProgrammedAnswers = []string{"404", "503", "old hash"}

// runSize is one run: n KIngresses to Ready, then roll of them at once, in
// a namespace of its own that is gone again when it returns.
func runSize(ctx context.Context, c *harness.Clients, mode string, n, roll, workers int, stackDir string, metricsPort int, wait time.Duration, rec recoveryOpts) result {
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
	svc := func(i int) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svcName(i)},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"pool": "yes"},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt(8080)}}},
		}
	}
	parallel(n+roll, workers, func(i int) error {
		_, err := c.Kube.CoreV1().Services(ns).Create(ctx, svc(i), metav1.CreateOptions{})
		return err
	})
	fmt.Fprintf(os.Stderr, "created %d backend Services\n", n+roll)
	// The controller manager writes an EndpointSlice per Service: let it
	// finish, so that the API writes counted below are the KIngresses'.
	waitSlices(ctx, c, ns, n+roll)
	if mode == modeFloor {
		r := runFloor(ctx, c, ns, n, roll, workers, svc, wait, stackDir)
		r.mode = mode
		if r.readyN == n {
			r.recoveries = recoverFrom(ctx, c, mode, ns, rec)
		}
		return r
	}

	reps := replicas(stackDir, metricsPort)
	if len(reps) == 0 {
		fail(fmt.Errorf("no controller replica is running (no pid file in %s)", stackDir))
	}
	scrape := func(metric string) float64 {
		total := 0.0
		for _, r := range reps {
			total += harness.Scrape(r.metrics, metric)
		}
		return total
	}
	scrapeLabeled := func(metric, label, value string) float64 {
		total := 0.0
		for _, r := range reps {
			total += harness.ScrapeLabeled(r.metrics, metric, label, value)
		}
		return total
	}
	for _, r := range reps {
		r.cpu0 = cpuSeconds(r.pid)
		r.peak = newPeak(r.pid)
	}
	writes0 := scrape("hitless_httpproxy_writes_total")
	probes0 := scrape("hitless_probe_requests_total")
	sent0 := scrape("hitless_probe_sent_total")
	sent0By := map[string]float64{}
	for _, result := range probeResults {
		sent0By[result] = scrapeLabeled("hitless_probe_sent_total", "result", result)
	}
	for _, answer := range notProgrammedAnswers {
		sent0By[answer] = scrapeLabeled("hitless_probe_sent_total", "answer", answer)
	}
	api0 := mustAPIWrites(ctx, c)
	procs0 := stackCPU()
	rb0 := contourRebuilds(stackDir)

	rules := func(i, backend int) []harness.Rule { return rulesFor(ns, i, backend) }
	start := time.Now()
	parallel(n, workers, func(i int) error {
		_, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, harness.KIngress(ns, kName(i), rules(i, i)...), metav1.CreateOptions{})
		return err
	})
	created := time.Since(start)
	readyN := waitAll(ctx, c, ns, n, nil, wait)
	allReady := time.Since(start)
	// The prober's work to Ready: checks (a URL on a pod) and the probes
	// they took, by answer.
	checksReady := scrape("hitless_probe_requests_total") - probes0
	sentReady := map[string]float64{}
	for _, result := range probeResults {
		sentReady[result] = scrapeLabeled("hitless_probe_sent_total", "result", result) - sent0By[result]
	}
	for _, answer := range notProgrammedAnswers {
		sentReady[answer] = scrapeLabeled("hitless_probe_sent_total", "answer", answer) - sent0By[answer]
	}
	if readyN < n {
		fmt.Fprintf(os.Stderr, "%d KIngresses created in %v, only %d Ready %v after the first create: giving up\n", n, created.Round(time.Millisecond), readyN, allReady.Round(time.Millisecond))
	} else {
		fmt.Fprintf(os.Stderr, "%d KIngresses created in %v, all Ready %v after the first create\n", n, created.Round(time.Millisecond), allReady.Round(time.Millisecond))
	}
	apiReady := mustAPIWrites(ctx, c)
	procs := stackCPU().since(procs0)
	rbReady := rebuildsSince(contourRebuilds(stackDir), rb0)
	create := apiReady.since(api0)

	// Once all are Ready nothing should be written but leases: status-only
	// reconciles (resyncs, EndpointSlice events) must not cost API writes.
	rest := restBeforeRollouts
	time.Sleep(rest)
	atRest := mustAPIWrites(ctx, c).since(apiReady)
	restOurs := ours(atRest)

	// Rollouts of a mode that never got all Ready would be timed with the
	// creation still going on: not measured.
	var rollDur time.Duration
	rolledN := 0
	var rbRoll rebuilds
	if readyN == n {
		rbRoll0 := contourRebuilds(stackDir)
		rollStart := time.Now()
		rolled := map[string]int64{}
		var mu sync.Mutex
		parallel(roll, workers, func(i int) error {
			return c.Update(ctx, ns, kName(i), func(ing *v1alpha1.Ingress) {
				harness.SetRules(ing, rules(i, n+i)...)
				mu.Lock()
				rolled[kName(i)] = ing.Generation + 1
				mu.Unlock()
			})
		})
		rolledN = waitAll(ctx, c, ns, n, rolled, wait) - (n - roll)
		rollDur = time.Since(rollStart)
		rbRoll = rebuildsSince(contourRebuilds(stackDir), rbRoll0)
		fmt.Fprintf(os.Stderr, "%d rollouts: %d Ready %v after the first update\n", roll, rolledN, rollDur.Round(time.Millisecond))
	}

	cpu, peakRSS := 0.0, 0.0
	for _, r := range reps {
		r.rss = r.peak.stop()
		r.cpu = cpuSeconds(r.pid) - r.cpu0
		cpu += r.cpu
		peakRSS = max(peakRSS, r.rss)
	}
	writes := scrape("hitless_httpproxy_writes_total") - writes0
	probes := scrape("hitless_probe_requests_total") - probes0
	sent := scrape("hitless_probe_sent_total") - sent0
	proxies, _ := c.Contour.ProjectcontourV1().HTTPProxies(ns).List(ctx, metav1.ListOptions{})

	// Every Contour replica of both fleets (contour-<fleet>.pid, contour-<fleet>-2.pid).
	contourMB, contours := 0.0, 0
	pidFiles, _ := filepath.Glob(filepath.Join(stackDir, "pids/contour-*.pid"))
	for _, f := range pidFiles {
		contourMB += rssMB(readPid(f))
		contours++
	}
	envoyMB, envoys := 0.0, 0
	for _, p := range pgrep("envoy") {
		envoyMB += rssMB(p)
		envoys++
	}
	res := result{mode: mode, n: n, allReady: allReady.Seconds(), readyN: readyN, roll: roll, rolledN: rolledN, rollouts: rollDur.Seconds(), cpu: cpu, rss: peakRSS,
		writesPerKIngress: create.total() / float64(n), ours: ours(create) / float64(n),
		restWrites: restOurs / rest.Seconds(), probes: probes, sent: sent, rebuildsReady: rbReady, rebuildsRoll: rbRoll}
	fmt.Printf("\n%-42s %s\n", "measure", "value")
	row := func(k string, v interface{}) { fmt.Printf("%-42s %v\n", k, v) }
	row("KIngresses (1 external + 3 cluster-local hosts)", n)
	row("all Ready after first create (s)", res.allReadyCell())
	row(fmt.Sprintf("%d simultaneous rollouts Ready (s)", roll), res.rolloutsCell())
	row("HTTPProxies now / written (creates+updates)", fmt.Sprintf("%d / %.0f", len(proxies.Items), writes))
	row("probe requests scheduled / sent", fmt.Sprintf("%.0f / %.0f", probes, sent))
	if checksReady > 0 {
		total := 0.0
		var by []string
		for _, result := range probeResults {
			total += sentReady[result]
			by = append(by, fmt.Sprintf("%s %.0f", result, sentReady[result]))
		}
		res.perCheck = total / checksReady
		row("probes per check to Ready", fmt.Sprintf("%.2f (%.0f checks; %s)", res.perCheck, checksReady, strings.Join(by, ", ")))
		var answers []string
		for _, answer := range notProgrammedAnswers {
			answers = append(answers, fmt.Sprintf("%s %.0f", answer, sentReady[answer]))
		}
		row("  not-programmed by answer", strings.Join(answers, ", "))
	}
	row("API writes to Ready, all clients / KIngress", fmt.Sprintf("%.0f / %.1f", create.total(), res.writesPerKIngress))
	row("  of them hitless's / KIngress", fmt.Sprintf("%.1f", res.ours))
	row("  largest", strings.Join(create.top(6), ", "))
	row(fmt.Sprintf("API writes in %v once Ready, all / hitless", rest), fmt.Sprintf("%.0f / %.0f", atRest.total(), restOurs))
	row("  largest", strings.Join(atRest.top(4), ", "))
	row("CPU-s to Ready by process (2 cores)", procs.describe(allReady))
	row("Contour to Ready, every replica", rbReady)
	row(fmt.Sprintf("Contour for the %d rollouts", roll), rbRoll)
	row("controller replicas", len(reps))
	for _, r := range reps {
		row(fmt.Sprintf("controller %d peak RSS (MiB) / CPU (s)", r.n), fmt.Sprintf("%.0f / %.1f", r.rss, r.cpu))
	}
	row("controller CPU, all replicas (s)", fmt.Sprintf("%.1f", cpu))
	row(fmt.Sprintf("Contour RSS, %d processes (MiB)", contours), fmt.Sprintf("%.0f", contourMB))
	row(fmt.Sprintf("Envoy RSS, %d pods (MiB)", envoys), fmt.Sprintf("%.0f", envoyMB))
	fmt.Printf("scale: mode=%s kingresses=%d replicas=%d all_ready_s=%.1f rollout100_s=%.1f controller_rss_mb=%.0f controller_cpu_s=%.1f probes=%.0f probes_sent=%.0f api_writes_per_kingress=%.1f\n",
		mode, n, len(reps), allReady.Seconds(), rollDur.Seconds(), peakRSS, cpu, probes, sent, res.writesPerKIngress)
	// Recovery from all Ready: a mode that never got there has nothing
	// to come back to.
	if readyN == n {
		res.recoveries = recoverFrom(ctx, c, mode, ns, rec)
	}
	return res
}

// ours is what hitless wrote: HTTPProxies (serving and probe) and KIngress
// status. Contour writes httpproxies/status, the bench writes ingresses.
func ours(a apiCounts) float64 {
	t := 0.0
	for k, v := range a {
		if strings.HasPrefix(k, "httpproxies ") || strings.HasPrefix(k, "ingresses/status ") {
			t += v
		}
	}
	return t
}

func mustAPIWrites(ctx context.Context, c *harness.Clients) apiCounts {
	a, err := scrapeAPIWrites(ctx, c.Kube)
	if err != nil {
		fail(err)
	}
	return a
}

// waitSlices waits until the namespace has an EndpointSlice per Service
// (at most a minute: the counts are then only less clean).
func waitSlices(ctx context.Context, c *harness.Clients, ns string, want int) {
	for start := time.Now(); time.Since(start) < time.Minute; time.Sleep(500 * time.Millisecond) {
		list, err := c.Kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
		if err == nil && len(list.Items) >= want {
			return
		}
	}
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

func kName(i int) string { return fmt.Sprintf("ks%d", i) }

// rulesFor is KIngress i's rules in ns: a Knative Service's shape, one
// external host and one cluster-local one, both to backend's Service.
func rulesFor(ns string, i, backend int) []harness.Rule {
	split := []harness.Split{{Backend: svcName(backend), Percent: 100}}
	return []harness.Rule{
		{Host: fmt.Sprintf("ks%d.%s.example.com", i, ns), Visibility: v1alpha1.IngressVisibilityExternalIP, Splits: split},
		{Host: fmt.Sprintf("ks%d.%s.svc.cluster.local", i, ns), Visibility: v1alpha1.IngressVisibilityClusterLocal, Splits: split},
	}
}
func svcName(i int) string { return fmt.Sprintf("svc%d", i) }

// waitAll watches until every KIngress is Ready (at the generation in
// want, for those listed); the callers time it from their first write. A
// watch, as kubectl wait does: listing thousands of KIngresses several
// times a second made the benchmark one of the API server's largest loads.
//
// It returns how many were Ready: n, or fewer when wait ran out first.
func waitAll(ctx context.Context, c *harness.Clients, ns string, n int, want map[string]int64, wait time.Duration) int {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	ready, k := map[string]bool{}, 0 // k: how many in ready are true
	set := func(name string, r bool) {
		if ready[name] {
			k--
		}
		if r {
			k++
		}
		ready[name] = r
	}
	note := func(ing *v1alpha1.Ingress) {
		g, ok := want[ing.Name]
		set(ing.Name, ing.IsReady() && (!ok || ing.Generation >= g))
	}
	count := func() int { return k }
	for {
		list, err := c.Net.NetworkingV1alpha1().Ingresses(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			if ctx.Err() != nil {
				return count()
			}
			time.Sleep(time.Second)
			continue
		}
		clear(ready)
		k = 0
		for i := range list.Items {
			note(&list.Items[i])
		}
		if count() == n {
			return n
		}
		w, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			continue
		}
		for ev := range w.ResultChan() {
			ing, ok := ev.Object.(*v1alpha1.Ingress)
			if !ok {
				break // an error event (the version expired): list again
			}
			if ev.Type == watch.Deleted {
				set(ing.Name, false)
				delete(ready, ing.Name)
			} else {
				note(ing)
			}
			if count() == n {
				w.Stop()
				return n
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return count()
		}
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
	cpu, _ := cpuAndStart(pid)
	return cpu
}

// cpuAndStart reads a process's user+system CPU seconds and its start
// time (clock ticks after boot, as /proc/PID/stat gives it).
func cpuAndStart(pid int) (float64, string) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, ""
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndex(s, ")")+2:])
	if len(f) < 20 {
		return 0, ""
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return (u + k) / 100, f[19] // USER_HZ
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

// cpuByName is CPU seconds by process name (/proc/PID/comm), summed over
// the processes of that name: where the machine's two cores went.
type cpuByName map[string]float64

// procCPU is one process's CPU seconds so far, with its name and start
// time: a pid the kernel gave to a new process (a restarted API server,
// say) is not the process it was.
type procCPU struct {
	name  string
	start string
	cpu   float64
}

// procSnapshot is every process's procCPU, by pid.
type procSnapshot map[int]procCPU

// stackCPU reads every process's CPU seconds.
func stackCPU() procSnapshot {
	out := procSnapshot{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil {
			continue
		}
		cpu, start := cpuAndStart(pid)
		out[pid] = procCPU{name: strings.TrimSpace(string(b)), start: start, cpu: cpu}
	}
	return out
}

// since is the CPU used after before, by process name: a process that
// started meanwhile counts whole, one that ended is not seen.
func (now procSnapshot) since(before procSnapshot) cpuByName {
	grown, base := cpuByName{}, cpuByName{}
	for pid, p := range now {
		grown[p.name] += p.cpu
		if b, ok := before[pid]; ok && b.start == p.start {
			base[p.name] += b.cpu
		}
	}
	return growth(grown, base, 0.05)
}

// total is the CPU seconds of every process.
func (c cpuByName) total() float64 {
	t := 0.0
	for _, v := range c {
		t += v
	}
	return t
}

// describe names the five largest with their share of both cores over d.
func (c cpuByName) describe(d time.Duration) string {
	names := make([]string, 0, len(c))
	for k := range c {
		names = append(names, k)
	}
	total := c.total()
	sort.Slice(names, func(i, j int) bool { return c[names[i]] > c[names[j]] })
	if len(names) > 5 {
		names = names[:5]
	}
	parts := []string{fmt.Sprintf("all %.0f (%.0f%%)", total, 100*total/(2*d.Seconds()))}
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, c[k]))
	}
	return strings.Join(parts, ", ")
}
