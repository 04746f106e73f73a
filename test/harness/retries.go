package harness

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// RetryWatch counts Envoy's upstream retries (upstream_rq_retry) to the
// clusters of one namespace on every Envoy pod of a fleet, over a window.
// A retry policy hides a reset or a refused connection from clients, so the
// rollout tests and benchmarks report these next to failed requests.
//
// Envoy's counters are per cluster and die with it: a cluster removed in
// the window (another test's KIngress deleted, an old backend released
// after a rollout) takes its count with it, and a plain sum of two reads
// then goes down (CI saw -199 after TestRetryPolicy's cluster went away).
// So the watch keeps to the namespace's clusters, reads every pod often
// enough to see a released backend's cluster before it goes (it is held
// for seconds), and adds up each cluster's increase on its own: a cluster
// first seen inside the window counts from zero, and a counter that goes
// down started again (the cluster was re-added, or Envoy restarted).
type RetryWatch struct {
	stop chan struct{}
	done chan struct{}

	mu sync.Mutex
	// last is each pod's and cluster's latest value; counted what the
	// window has seen so far of each.
	last    map[string]float64
	counted float64
}

// WatchRetries starts a RetryWatch over the ready Envoy pods of fleet (read
// once, now) for the clusters of namespace.
func (c *Clients) WatchRetries(ctx context.Context, fleet, namespace string) *RetryWatch {
	w := &RetryWatch{stop: make(chan struct{}), done: make(chan struct{})}
	pods := c.EnvoyPods(ctx, fleet)
	w.last = w.read(pods, namespace)
	go func() {
		defer close(w.done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				w.add(w.read(pods, namespace))
				return
			case <-ctx.Done():
				return
			case <-t.C:
				w.add(w.read(pods, namespace))
			}
		}
	}()
	return w
}

// Stop reads every pod a last time and returns the retries counted in the
// window.
func (w *RetryWatch) Stop() float64 {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.counted
}

func (w *RetryWatch) add(now map[string]float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.counted += RetryIncrease(w.last, now)
	// A cluster missing from this read (a pod that did not answer, or a
	// cluster gone) keeps its last value, so a pod that answers again is
	// not counted from zero.
	for k, v := range now {
		w.last[k] = v
	}
}

// RetryIncrease is what the counters in now added since last: for each
// counter, its increase, all of it when last lacks the counter, and all
// of it again when it went down (it started over).
func RetryIncrease(last, now map[string]float64) float64 {
	total := 0.0
	for k, v := range now {
		before, seen := last[k]
		switch {
		case !seen || v < before:
			total += v
		default:
			total += v - before
		}
	}
	return total
}

// read is every pod's upstream_rq_retry per cluster of namespace, keyed by
// pod and cluster; a pod that does not answer is left out.
func (w *RetryWatch) read(pods []string, namespace string) map[string]float64 {
	out := map[string]float64{}
	for _, ip := range pods {
		for cluster, v := range clusterCounters("http://"+ip+":8002/stats/prometheus", "envoy_cluster_upstream_rq_retry") {
			// Contour names a cluster namespace/service/port/hash;
			// Envoy's Prometheus page writes each / as _ (a namespace
			// has no _, so the prefix is the namespace's alone).
			if strings.HasPrefix(cluster, namespace+"_") || strings.HasPrefix(cluster, namespace+"/") {
				out[ip+" "+cluster] = v
			}
		}
	}
	return out
}

// clusterCounters is a per-cluster Envoy counter from a Prometheus stats
// page, keyed by envoy_cluster_name; nil when the page cannot be read.
func clusterCounters(url, metric string) map[string]float64 {
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil
	}
	return ParseClusterCounters(string(b), metric)
}

// ParseClusterCounters reads metric's samples from a Prometheus text page,
// keyed by their envoy_cluster_name label.
func ParseClusterCounters(page, metric string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(page, "\n") {
		if !strings.HasPrefix(line, metric+"{") {
			continue
		}
		const label = `envoy_cluster_name="`
		i := strings.Index(line, label)
		if i < 0 {
			continue
		}
		rest := line[i+len(label):]
		j := strings.IndexByte(rest, '"')
		if j < 0 {
			continue
		}
		fields := strings.Fields(line)
		var v float64
		if _, err := fmt.Sscan(fields[len(fields)-1], &v); err != nil {
			continue
		}
		out[rest[:j]] += v
	}
	return out
}
