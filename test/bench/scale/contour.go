package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/hitless/hitless/test/harness"
)

// rebuilds is what Contour's replicas report of their DAG rebuilds: each
// rebuild is a full pass over every object Contour has seen and a push of
// what changed to every Envoy pod connected to it, so their number is what
// a controller's write pace costs Contour and Envoy.
type rebuilds struct {
	count, seconds float64
}

func (r rebuilds) String() string {
	return fmt.Sprintf("%.0f rebuilds, %.1f s building", r.count, r.seconds)
}

// contourRebuilds reads contour_dagrebuild_total and
// contour_dagrebuild_seconds from every Contour replica, by name, with the
// replica's pid: a replica that restarted counts from zero again.
func contourRebuilds(stackDir string) map[string]procRebuilds {
	out := map[string]procRebuilds{}
	for name, pid := range contourPids(stackDir) {
		port := contourHTTPPort(stackDir, name)
		if port == "" {
			continue
		}
		url := "http://127.0.0.1:" + port + "/metrics"
		out[name] = procRebuilds{pid: pid, rebuilds: rebuilds{
			count:   harness.Scrape(url, "contour_dagrebuild_total"),
			seconds: harness.Scrape(url, "contour_dagrebuild_seconds_sum"),
		}}
	}
	return out
}

// procRebuilds is one Contour process's rebuilds so far.
type procRebuilds struct {
	pid int
	rebuilds
}

// rebuildsSince is every replica's rebuilds after before, summed.
func rebuildsSince(now, before map[string]procRebuilds) rebuilds {
	var out rebuilds
	for name, n := range now {
		b, ok := before[name]
		if !ok || b.pid != n.pid {
			b = procRebuilds{}
		}
		out.count += n.count - b.count
		out.seconds += n.seconds - b.seconds
	}
	return out
}

var httpPortFlag = regexp.MustCompile(`^--http-port=(\d+)$`)

// contourHTTPPort is the port a Contour replica serves its metrics on,
// from the flags the stack started it with (.stack/<name>.applied).
func contourHTTPPort(stackDir, name string) string {
	b, err := os.ReadFile(filepath.Join(stackDir, name+".applied"))
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if m := httpPortFlag.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			return m[1]
		}
	}
	return ""
}

// contourPids are the Contour replicas' pids, by name
// (.stack/pids/contour-<fleet>[-2].pid).
func contourPids(stackDir string) map[string]int {
	out := map[string]int{}
	files, _ := filepath.Glob(filepath.Join(stackDir, "pids/contour-*.pid"))
	for _, f := range files {
		out[strings.TrimSuffix(filepath.Base(f), ".pid")] = readPid(f)
	}
	return out
}
