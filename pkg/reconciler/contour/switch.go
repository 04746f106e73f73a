package contour

import (
	"context"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/logging"

	"github.com/hitless/hitless/pkg/config"
	"github.com/hitless/hitless/pkg/probe"
	"github.com/hitless/hitless/pkg/resources"
	"github.com/hitless/hitless/pkg/rollout"
)

// switchServing is the Switch phase: the serving proxies are written as
// desired (every backend they name is warm by now), proxies of hosts that
// left the spec go, and the KIngress is Ready once every Envoy pod answers
// with the new proxies' hash. A KIngress Ready at its generation that
// writes nothing is not probed again.
func (r *Reconciler) switchServing(ctx context.Context, p *pass) (bool, error) {
	ing := p.ing
	changed, routed, err := r.applyAll(ctx, ing, p.desired.Proxies, p.obs.Serving)
	if err != nil {
		return false, err
	}
	wrote := routed > 0
	if wrote {
		// The warm round served its purpose; its prober state would
		// otherwise stay in memory until the KIngress is deleted.
		r.prober.Cancel(probe.RoundKey{NamespacedName: types.NamespacedName{Namespace: ing.Namespace, Name: ing.Name}, Warm: true})
	}
	for _, stale := range rollout.Stale(p.desired, p.obs.Serving) {
		if err := r.deleteProxy(ctx, stale, "that left the spec"); err != nil {
			return false, err
		}
		wrote = true
	}
	if changed > 0 {
		r.metrics.proxiesWritten(ctx, resources.RoleServing, changed)
	}
	if wrote {
		controller.GetEventRecorder(ctx).Eventf(ing, corev1.EventTypeNormal, ReasonSwitching,
			"Serving proxies switched to generation %d", ing.Generation)
	}

	if !p.wasReady || wrote {
		p.readySince = time.Time{}
		round := roundOf(ing, false, p.desired.Hash, p.desired.Probes)
		if done, err := r.awaitProbe(ctx, ing, round, p.desired.Backends, ReasonSwitching, r.current(ing, p.desired.Proxies)); !done || err != nil {
			return false, err
		}
		r.metrics.phaseDone(ctx, ReasonSwitching, ing, r.clock())
		logging.FromContext(ctx).Infow("Every Envoy pod serves the KIngress", zap.Int64("generation", ing.Generation))
	}
	ing.Status.MarkNetworkConfigured()
	ing.Status.MarkLoadBalancerReady(r.loadBalancers(ing, config.FromContextOrDefaults(ctx).Contour))
	return true, nil
}
