package probe

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// metrics are exported through the meter provider sharedmain configures
// (config-observability).
type metrics struct {
	requests  metric.Int64Counter
	sentTotal metric.Int64Counter
	confirm   metric.Float64Histogram
	inFlight  metric.Int64UpDownCounter
}

func newMetrics() *metrics {
	m := otel.Meter("github.com/hitless/hitless/pkg/probe")
	requests, _ := m.Int64Counter("hitless.probe.requests",
		metric.WithDescription("Probes scheduled: URLs times Envoy pods, once per probe round and per pod that joins one (retries not counted)"))
	sent, _ := m.Int64Counter("hitless.probe.sent",
		metric.WithDescription("Probe requests sent, by result: confirmed, not-programmed (its answer: 404, old hash, 503), not-yet (a connect failure, 400, 401, 403, 502, 504), error (no answer)"))
	confirm, _ := m.Float64Histogram("hitless.probe.pod.confirm.duration",
		metric.WithDescription("Time from a probe round's start (or a pod joining it) to the pod confirming every URL of it"),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64))
	inFlight, _ := m.Int64UpDownCounter("hitless.probe.inflight",
		metric.WithDescription("Probe requests in flight"))
	return &metrics{requests: requests, sentTotal: sent, confirm: confirm, inFlight: inFlight}
}

func (m *metrics) scheduled(n int) {
	if n > 0 {
		m.requests.Add(context.Background(), int64(n))
	}
}

func (m *metrics) sent(result string) {
	m.sentTotal.Add(context.Background(), 1, metric.WithAttributes(attribute.String("result", result)))
}

// notProgrammed counts a not-programmed answer by what it was (404, 503,
// old hash): which part of Contour's configuration the pod lacked.
func (m *metrics) notProgrammed(answer string) {
	m.sentTotal.Add(context.Background(), 1, metric.WithAttributes(attribute.String("result", "not-programmed"), attribute.String("answer", answer)))
}

func (m *metrics) confirmed(d time.Duration) {
	m.confirm.Record(context.Background(), d.Seconds())
}

func (m *metrics) inflight(n int64) {
	m.inFlight.Add(context.Background(), n)
}
