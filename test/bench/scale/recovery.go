package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hitless/hitless/test/harness"
)

// The faults a run recovers from once every KIngress is Ready (-recovery):
// the controller killed and started again (a crash, an OOM kill, a node
// lost), and the API server down for -outage and started again. Each is
// measured over the same window in every mode, so that what hitless spends
// stands beside what Contour and Envoy alone spend: for the floor a
// controller restart is nothing but a quiet spell of the same length.
const (
	faultController = "controller"
	faultAPIServer  = "api-server"
)

// recoveryCPUNames are the processes whose spending a recovery reports one
// by one, with when each was last busy.
var recoveryCPUNames = []string{"controller", "kube-apiserver", "contour", "envoy", "etcd"}

// A process counts as busy in a sample interval when it used busyCPU
// more than at rest in it: a tenth of a core.
const (
	sampleEvery = 500 * time.Millisecond
	busyCPU     = 0.05
)

// recovery is what the stack spent coming back from one fault.
type recovery struct {
	fault string
	// faultFor is from the fault's start until it ended (the controller
	// started and reporting so; the API server serving again); the window
	// runs on for the bench's -recovery-window after that.
	faultFor time.Duration
	cpu      cpuByName // every process, over the fault and the window
	// lastBusy is, by process name (recoveryCPUNames), the end of the
	// last sample interval after the fault ended in which it used busyCPU
	// more than at rest: when it was done recovering, as far as the
	// window shows. Absent: never busy after the fault.
	lastBusy map[string]time.Duration
	// checks and sent are the prober's over the window (0 in the floor).
	checks, sent float64
	// writes are the API server's writes over the window: after an API
	// server restart, since it came back (its counters start again).
	writes     apiCounts
	readyAfter int // KIngresses Ready at the window's end (-1: not counted, the floor has none)
	// contoursRestarted are the Contour replicas that exited during the
	// fault and were started again.
	contoursRestarted []string
	rebuilds          rebuilds // Contour's, every replica, over the window
}

// recoveryOpts are the bench's -recovery flags.
type recoveryOpts struct {
	faults         []string // in the order run; none: no recovery measured
	window, outage time.Duration
	stackDir       string
	metricsPort    int
}

// recoverFrom runs each fault in turn against the KIngresses (mode
// hitless) or their proxies (the floor) in ns, all Ready, and prints what
// each cost.
func recoverFrom(ctx context.Context, c *harness.Clients, mode, ns string, o recoveryOpts) []recovery {
	if len(o.faults) == 0 {
		return nil
	}
	// The rollouts' tail (warm proxies released after their hold, Contour
	// writing the status of what changed) belongs to them, not to the
	// first fault's recovery. The quiet spell is the stack at rest: what
	// each process spends then is not recovery.
	time.Sleep(restBeforeRollouts / 2)
	before := stackCPU()
	time.Sleep(restBeforeRollouts / 2)
	rest := stackCPU().since(before)
	for k, v := range rest {
		rest[k] = v / (restBeforeRollouts / 2).Seconds()
	}
	var out []recovery
	for _, f := range o.faults {
		r := recoverOnce(ctx, c, mode, ns, f, o, rest)
		out = append(out, r)
		fmt.Fprintf(os.Stderr, "%s: %s (fault %v, then %v)\n", mode, r.label(o.outage), r.faultFor.Round(100*time.Millisecond), o.window)
	}
	fmt.Printf("\n%-42s %s\n", fmt.Sprintf("recovery (%s; the fault, then %v)", mode, o.window), "value")
	for _, r := range out {
		r.print(mode, o.outage)
	}
	return out
}

func (r recovery) label(outage time.Duration) string {
	if r.fault == faultAPIServer {
		return fmt.Sprintf("the API server down %v", outage)
	}
	return "the controller killed and started"
}

// recoverOnce runs one fault and measures it; rest is each process's CPU
// per second at rest, the level above which it counts as busy.
func recoverOnce(ctx context.Context, c *harness.Clients, mode, ns, fault string, o recoveryOpts, rest cpuByName) recovery {
	r := recovery{fault: fault, readyAfter: -1}
	probes := func() (checks, sent map[int]float64) {
		checks, sent = map[int]float64{}, map[int]float64{}
		for _, rep := range replicas(o.stackDir, o.metricsPort) {
			checks[rep.pid] = harness.Scrape(rep.metrics, "hitless_probe_requests_total")
			sent[rep.pid] = harness.Scrape(rep.metrics, "hitless_probe_sent_total")
		}
		return checks, sent
	}
	contours0 := contourPids(o.stackDir)
	rb0 := contourRebuilds(o.stackDir)
	checks0, sent0 := probes()
	api0 := mustAPIWrites(ctx, c)
	cpu0 := stackCPU()
	start := time.Now()
	switch {
	case fault == faultAPIServer:
		if err := sh("hack/faults.sh", "restart", "kube-apiserver", "--down", fmt.Sprint(int(o.outage.Seconds()))); err != nil {
			fail(err)
		}
		// Its request counters started again with it.
		api0 = apiCounts{}
	case fault == faultController && mode == modeHitless:
		if err := sh("hack/controller.sh", "kill"); err != nil {
			fail(err)
		}
		// The binary already built, not a build's CPU in the window.
		os.Setenv("CONTROLLER_BIN", filepath.Join(o.stackDir, "bin/controller"))
		err := sh("hack/controller.sh", "start")
		os.Unsetenv("CONTROLLER_BIN")
		if err != nil {
			fail(err)
		}
	default:
		// A controller restart in the floor, which runs none: it costs
		// nothing, and the window shows what the stack spends at rest.
		// (main accepts no other fault.)
	}
	r.faultFor = time.Since(start)
	// Contours that exited and were started again (hack/faults.sh, as the
	// kubelet would): a leader that could not renew its Lease.
	for name, pid := range contourPids(o.stackDir) {
		if contours0[name] != pid {
			r.contoursRestarted = append(r.contoursRestarted, name)
		}
	}
	sort.Strings(r.contoursRestarted)

	// Sample every process's CPU through the window: when each was last
	// busy says how long the recovery went on.
	r.lastBusy = map[string]time.Duration{}
	prev := stackCPU()
	for end := time.Now().Add(o.window); time.Now().Before(end); {
		time.Sleep(sampleEvery)
		now := stackCPU()
		used := now.since(prev)
		for _, name := range recoveryCPUNames {
			if used[name] > rest[name]*sampleEvery.Seconds()+busyCPU {
				r.lastBusy[name] = time.Since(start) - r.faultFor
			}
		}
		prev = now
	}
	r.cpu = stackCPU().since(cpu0)
	r.writes = mustAPIWrites(ctx, c).since(api0)
	r.rebuilds = rebuildsSince(contourRebuilds(o.stackDir), rb0)
	// A replica that restarted counts from zero; one that kept running
	// from where it was.
	checks1, sent1 := probes()
	for pid, v := range checks1 {
		r.checks += v - checks0[pid]
		r.sent += sent1[pid] - sent0[pid]
	}
	if mode == modeHitless {
		r.readyAfter = countReady(ctx, c, ns)
	}
	return r
}

// countReady is how many of ns's KIngresses are Ready (the API server's
// word, as a client's).
func countReady(ctx context.Context, c *harness.Clients, ns string) int {
	list, err := c.Net.NetworkingV1alpha1().Ingresses(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0
	}
	k := 0
	for i := range list.Items {
		if list.Items[i].IsReady() {
			k++
		}
	}
	return k
}

// total is the CPU seconds of every process over the window.
func (r recovery) total() float64 { return r.cpu.total() }

func (r recovery) print(mode string, outage time.Duration) {
	row := func(k string, v interface{}) { fmt.Printf("%-42s %v\n", k, v) }
	restarted := "none"
	if len(r.contoursRestarted) > 0 {
		restarted = strings.Join(r.contoursRestarted, ", ")
	}
	row(r.label(outage), fmt.Sprintf("fault %.1f s; Contours that exited and were started again: %s", r.faultFor.Seconds(), restarted))
	var parts []string
	for _, name := range recoveryCPUNames {
		parts = append(parts, fmt.Sprintf("%s %.1f", name, r.cpu[name]))
	}
	row("  CPU-s, all processes / by process", fmt.Sprintf("%.1f / %s", r.total(), strings.Join(parts, ", ")))
	var busy []string
	names := make([]string, 0, len(r.lastBusy))
	for name := range r.lastBusy {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		busy = append(busy, fmt.Sprintf("%s +%.1f", name, r.lastBusy[name].Seconds()))
	}
	if len(busy) == 0 {
		busy = []string{"none busy after the fault"}
	}
	row("  last busy above rest after the fault (s)", strings.Join(busy, ", "))
	row("  Contour, every replica", r.rebuilds)
	if mode == modeHitless {
		row("  probes: checks / sent", fmt.Sprintf("%.0f / %.0f", r.checks, r.sent))
		row("  KIngresses Ready at the end", r.readyAfter)
	}
	row("  API writes, all / hitless's", fmt.Sprintf("%.0f / %.0f", r.writes.total(), ours(r.writes)))
	row("  largest", strings.Join(r.writes.top(4), ", "))
	fmt.Printf("recovery: mode=%s fault=%s fault_s=%.1f cpu_s=%.1f controller_cpu_s=%.1f probes_sent=%.0f hitless_writes=%.0f\n",
		mode, r.fault, r.faultFor.Seconds(), r.total(), r.cpu["controller"], r.sent, ours(r.writes))
}
