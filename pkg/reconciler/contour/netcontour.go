package contour

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/pkg/logging"

	"github.com/hitless/hitless/pkg/resources"
	"github.com/hitless/hitless/pkg/rollout"
)

// endpointProbeRecheck is how often the endpoint probe child net-contour
// left behind looks again whether its parent is served by hitless yet.
const endpointProbeRecheck = 2 * time.Second

// retireEndpointProbe deletes the endpoint probe child KIngress net-contour
// left behind, once hitless serves its parent: the parent is Ready at its
// generation and no proxy of net-contour's serves it any more. Until then
// its proxies may be what keeps a backend's cluster in Envoy (net-contour
// held the old and the new backends of a rollout through it), so it stays
// untouched, and hitless never serves its reserved hosts itself.
func (r *Reconciler) retireEndpointProbe(ctx context.Context, child *v1alpha1.Ingress) error {
	ref := metav1.GetControllerOf(child)
	parent, err := r.ingressLister.Ingresses(child.Namespace).Get(ref.Name)
	switch {
	case apierrs.IsNotFound(err):
		return nil // the garbage collector removes the child with its parent
	case err != nil:
		return fmt.Errorf("failed to get KIngress %s/%s, parent of net-contour's endpoint probe %s: %w",
			child.Namespace, ref.Name, child.Name, err)
	case parent.UID != ref.UID:
		return nil
	}
	obs, err := r.observe(parent)
	if err != nil {
		return err
	}
	if !parent.IsReady() || parent.Status.ObservedGeneration != parent.Generation || servedByNetContour(obs) {
		r.enqueueAfter(child, endpointProbeRecheck)
		return nil
	}
	if err := r.netClient.NetworkingV1alpha1().Ingresses(child.Namespace).Delete(ctx, child.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &child.UID},
	}); err != nil && !apierrs.IsNotFound(err) {
		return fmt.Errorf("failed to delete net-contour's endpoint probe KIngress %s/%s: %w", child.Namespace, child.Name, err)
	}
	logging.FromContext(ctx).Infow("Deleted net-contour's endpoint probe KIngress: hitless serves its parent",
		zap.String("parent", parent.Namespace+"/"+parent.Name))
	return nil
}

// servedByNetContour tells whether any serving proxy observed is one
// net-contour wrote and hitless has not taken over yet.
func servedByNetContour(obs rollout.Observed) bool {
	for _, p := range obs.Serving {
		if !resources.IsRole(p, resources.RoleServing) {
			return true
		}
	}
	return false
}
