package contour

import (
	"context"
	"hash/fnv"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/networking/pkg/status"

	"github.com/hitless/hitless/pkg/resources"
)

// shardedProber spreads KIngresses over several networking status probers.
// Each one is fixed at 50 probes/s (burst 100) and 15 in flight; a probe
// is one request to one Envoy pod, so a thousand KIngresses of four hosts
// on two pods would take minutes through one. Shards keep per-pod truth
// and multiply the budget. A KIngress and its warm set share a shard.
type shardedProber struct {
	shards []*status.Prober
}

func newShardedProber(n int, logger *zap.SugaredLogger, targets status.ProbeTargetLister, ready func(*v1alpha1.Ingress)) *shardedProber {
	p := &shardedProber{}
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

// IsReady asks the KIngress's shard.
func (p *shardedProber) IsReady(ctx context.Context, ing *v1alpha1.Ingress) (bool, error) {
	return p.shard(ing.Namespace, ing.Name).IsReady(ctx, ing)
}

// CancelIngressProbingByKey cancels on the key's shard.
func (p *shardedProber) CancelIngressProbingByKey(key types.NamespacedName) {
	p.shard(key.Namespace, key.Name).CancelIngressProbingByKey(key)
}
