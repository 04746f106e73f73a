package contour

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"knative.dev/pkg/controller"

	"github.com/hitless/hitless/pkg/config"
	"github.com/hitless/hitless/pkg/rollout"
)

// release is the Release phase: once every Envoy pod serves the switched
// proxies, the warm proxies go after config-contour's release-hold, which
// lets requests a pod routed just before it confirmed finish on the old
// backends' clusters. It is the last phase: it never waits in the
// KIngress's status, it schedules the reconcile that ends the hold.
func (r *Reconciler) release(ctx context.Context, p *pass) (bool, error) {
	now := r.clock()
	if p.readySince.IsZero() {
		p.readySince = now
	}
	release, wait := rollout.Release(p.obs.Warm, p.readySince, config.FromContextOrDefaults(ctx).Contour.ReleaseHold, now)
	if wait > 0 {
		r.enqueueAfter(p.ing, wait)
	}
	if !release {
		return true, nil
	}
	for _, w := range p.obs.Warm {
		if err := r.deleteProxy(ctx, w, "(warm)"); err != nil {
			return false, err
		}
	}
	r.metrics.phaseDone(ctx, "Releasing", p.ing, now)
	controller.GetEventRecorder(ctx).Event(p.ing, corev1.EventTypeNormal, "Released", "Warm proxies deleted")
	return true, nil
}
