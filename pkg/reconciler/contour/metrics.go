package contour

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
)

// metrics are exported through the meter provider sharedmain configures
// from config-observability (metrics-protocol: prometheus serves them).
// Start times live in memory only: they feed durations, never decisions.
type metrics struct {
	phaseSeconds metric.Float64Histogram
	written      metric.Int64Counter
	probeRounds  metric.Int64Counter

	mu     sync.Mutex
	starts map[phaseKey]time.Time
}

type phaseKey struct {
	key        types.NamespacedName
	phase      string
	generation int64
}

func newMetrics() *metrics {
	m := otel.Meter("github.com/hitless/hitless")
	phase, _ := m.Float64Histogram("hitless.rollout.phase.duration",
		metric.WithDescription("Time a KIngress rollout spent in each phase (Warming, Switching, Releasing)"),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64))
	written, _ := m.Int64Counter("hitless.httpproxy.writes",
		metric.WithDescription("HTTPProxies created or updated, by role"))
	rounds, _ := m.Int64Counter("hitless.probe.rounds",
		metric.WithDescription("Probe rounds started (one per KIngress hash, per Warming or Switching phase)"))
	return &metrics{phaseSeconds: phase, written: written, probeRounds: rounds, starts: map[phaseKey]time.Time{}}
}

func (m *metrics) proxiesWritten(ctx context.Context, role string, n int) {
	if n > 0 {
		m.written.Add(ctx, int64(n), metric.WithAttributes(attribute.String("role", role)))
	}
}

// phaseStarted notes when a phase of a generation started waiting, once.
func (m *metrics) phaseStarted(ing *v1alpha1.Ingress, phase string, now time.Time) {
	k := phaseKey{types.NamespacedName{Namespace: ing.Namespace, Name: ing.Name}, phase, ing.Generation}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.starts[k]; !ok {
		m.starts[k] = now
		m.probeRounds.Add(context.Background(), 1, metric.WithAttributes(attribute.String("phase", phase)))
	}
}

// phaseDone records the duration of a phase that this process saw start.
func (m *metrics) phaseDone(ctx context.Context, phase string, ing *v1alpha1.Ingress, now time.Time) {
	k := phaseKey{types.NamespacedName{Namespace: ing.Namespace, Name: ing.Name}, phase, ing.Generation}
	m.mu.Lock()
	start, ok := m.starts[k]
	delete(m.starts, k)
	m.mu.Unlock()
	if ok {
		m.phaseSeconds.Record(ctx, now.Sub(start).Seconds(), metric.WithAttributes(attribute.String("phase", phase)))
	}
}

// forget drops the start times of a deleted KIngress.
func (m *metrics) forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.starts {
		if k.key == key {
			delete(m.starts, k)
		}
	}
}
