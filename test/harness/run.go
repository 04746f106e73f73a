package harness

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"
)

// FleetTargets is one load target per ready Envoy pod of a fleet (its
// namespace), each asked for host; an error when the fleet has none.
func (c *Clients) FleetTargets(ctx context.Context, fleet, host string) ([]Target, error) {
	pods := c.EnvoyPods(ctx, fleet)
	if len(pods) == 0 {
		return nil, fmt.Errorf("fleet %s has no ready Envoy pod", fleet)
	}
	targets := make([]Target, 0, len(pods))
	for _, ip := range pods {
		targets = append(targets, Target{Addr: ip + ":8080", Host: host})
	}
	return targets, nil
}

// MustFleetTargets is FleetTargets that ends the test when the fleet has no
// ready Envoy pod.
func (c *Clients) MustFleetTargets(ctx context.Context, t testing.TB, fleet, host string) []Target {
	t.Helper()
	targets, err := c.FleetTargets(ctx, fleet, host)
	if err != nil {
		t.Fatal(err)
	}
	return targets
}

// Start runs the load in the background; the returned func stops it and
// waits until every request in flight has its result.
func (l *Load) Start(ctx context.Context) (stop func()) {
	lctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); l.Run(lctx) }()
	return func() { cancel(); wg.Wait() }
}

// EnvInt reads a positive integer knob of a test or benchmark from the
// environment, def when unset or invalid.
func EnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// Percentile is the p-th percentile (nearest rank) of ds, 0 for none.
func Percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return s[i]
}
