package contour

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"knative.dev/pkg/controller"

	"github.com/hitless/hitless/pkg/config"
	"github.com/hitless/hitless/pkg/resources"
)

// warm is the Warm phase: when the plan brings backends in, the warm
// proxies reference every backend to keep (those served now and the new
// ones), and the new ones must be served by every Envoy pod before any
// serving proxy names them. Contour programs a cluster and its endpoints
// before a route that uses it only within one push; warming first means
// no serving route ever reaches an Envoy pod ahead of its cluster.
func (r *Reconciler) warm(ctx context.Context, p *pass) (bool, error) {
	if !p.plan.NeedsWarm() {
		return true, nil
	}
	cfg := config.FromContextOrDefaults(ctx).Contour
	warm, err := resources.MakeWarm(ctx, p.ing, p.plan.Keep, p.plan.New, r.targets.httpsOnly(cfg, p.plan.Keep.Classes()))
	if err != nil {
		return false, r.badInputOr(p.ing, err)
	}
	changed, _, err := r.applyAll(ctx, p.ing, warm.Proxies, p.obs.Warm)
	if err != nil {
		return false, err
	}
	if changed > 0 {
		r.metrics.proxiesWritten(ctx, resources.RoleWarm, changed)
		controller.GetEventRecorder(ctx).Eventf(p.ing, corev1.EventTypeNormal, ReasonWarming,
			"Warm proxies reference %s", describe(backendStrings(p.plan.Keep)))
	}
	if !p.plan.Probe {
		return true, nil
	}
	round := roundOf(p.ing, true, warm.Hash, warm.Probes)
	if done, err := r.awaitProbe(ctx, p.ing, round, p.plan.New, ReasonWarming, r.current(p.ing, warm.Proxies)); !done || err != nil {
		return false, err
	}
	r.metrics.phaseDone(ctx, ReasonWarming, p.ing, r.clock())
	return true, nil
}
