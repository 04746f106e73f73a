package contour

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync/atomic"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/networking/pkg/status"
	"knative.dev/pkg/logging"

	"github.com/hitless/hitless/pkg/resources"
)

// shardedProber spreads KIngresses over several networking status probers.
// Each one is fixed at 50 probes/s (burst 100) and 15 in flight; a probe
// is one request to one Envoy pod, so a thousand KIngresses of four hosts
// on two pods would take minutes through one. Shards keep per-pod truth
// and multiply the budget. A KIngress and its warm set share a shard.
type shardedProber struct {
	shards []*status.Prober
	// lines budgets the log lines of every probe: the networking prober
	// logs each one through the logger of the context IsReady is given.
	lines *lineBudget
}

func newShardedProber(n int, logger *zap.SugaredLogger, targets status.ProbeTargetLister, ready func(*v1alpha1.Ingress)) *shardedProber {
	p := &shardedProber{lines: newLineBudget(proberLogLinesPerSecond, proberLogBurst)}
	for i := 0; i < n; i++ {
		p.shards = append(p.shards, status.NewProber(logger.With(zap.Int("shard", i)), targets, ready))
	}
	return p
}

func (p *shardedProber) shard(ns, name string) *status.Prober {
	name, _ = resources.IsWarmKey(name)
	h := fnv.New32a()
	h.Write([]byte(ns + "/" + name))
	return p.shards[int(h.Sum32()%uint32(len(p.shards)))]
}

// Start starts every shard.
func (p *shardedProber) Start(done <-chan struct{}) {
	for _, s := range p.shards {
		s.Start(done)
	}
}

// IsReady asks the KIngress's shard, with the probes' log lines budgeted.
func (p *shardedProber) IsReady(ctx context.Context, ing *v1alpha1.Ingress) (bool, error) {
	ctx = logging.WithLogger(ctx, p.lines.limit(logging.FromContext(ctx)))
	return p.shard(ing.Namespace, ing.Name).IsReady(ctx, ing)
}

// CancelIngressProbingByKey cancels on the key's shard.
func (p *shardedProber) CancelIngressProbingByKey(key types.NamespacedName) {
	p.shard(key.Namespace, key.Name).CancelIngressProbingByKey(key)
}

const (
	// The networking prober logs every probe it queues and every attempt
	// that fails, and most attempts of a bulk rollout fail while Contour is
	// still programming Envoy (each is retried): a thousand new KIngresses
	// wrote ~130,000 lines (~80 MB), burying every other line of the log.
	// A budget keeps the log readable; the CPU saved was not measurable.
	proberLogLinesPerSecond = 20
	proberLogBurst          = 200
)

// lineBudget lets at most perSecond log entries a second through (burst at
// once), across every logger it limits. The next entry written after some
// were dropped says how many.
type lineBudget struct {
	limiter   *rate.Limiter
	dropped   atomic.Int64
	perSecond float64
}

func newLineBudget(perSecond float64, burst int) *lineBudget {
	return &lineBudget{limiter: rate.NewLimiter(rate.Limit(perSecond), burst), perSecond: perSecond}
}

// limit returns logger writing within the budget.
func (b *lineBudget) limit(logger *zap.SugaredLogger) *zap.SugaredLogger {
	return logger.Desugar().WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return &limitedCore{Core: c, budget: b}
	})).Sugar()
}

type limitedCore struct {
	zapcore.Core
	budget *lineBudget
}

func (c *limitedCore) With(fields []zapcore.Field) zapcore.Core {
	return &limitedCore{Core: c.Core.With(fields), budget: c.budget}
}

func (c *limitedCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if !c.Enabled(e.Level) {
		return ce
	}
	if !c.budget.limiter.Allow() {
		c.budget.dropped.Add(1)
		return ce
	}
	if n := c.budget.dropped.Swap(0); n > 0 {
		e.Message += fmt.Sprintf(" (%d prober log lines dropped before this one: at most %g a second are written)", n, c.budget.perSecond)
	}
	return c.Core.Check(e, ce)
}
