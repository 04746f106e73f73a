package contour

import (
	"context"
	"fmt"
	"strings"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"

	"github.com/hitless/hitless/pkg/resources"
)

// fqdnIndex indexes every HTTPProxy of the cluster by its virtual host, so a
// host claimed by someone else is refused before Contour would invalidate
// both proxies (and take the other owner's traffic down).
const fqdnIndex = "fqdn"

func indexFqdn(obj interface{}) ([]string, error) {
	p, ok := obj.(*contourv1.HTTPProxy)
	if !ok || p.Spec.VirtualHost == nil {
		return nil, nil
	}
	return []string{p.Spec.VirtualHost.Fqdn}, nil
}

// controllerIndex indexes every HTTPProxy by the KIngress that controls it
// (ours and net-contour's alike), so a reconcile reads its own proxies
// without walking every proxy of the namespace (four per KIngress, all of
// them at every reconcile of each).
const controllerIndex = "controller"

func indexController(obj interface{}) ([]string, error) {
	p, ok := obj.(*contourv1.HTTPProxy)
	if !ok {
		return nil, nil
	}
	if ref := metav1.GetControllerOf(p); ref != nil && ref.Kind == "Ingress" && strings.HasPrefix(ref.APIVersion, v1alpha1.SchemeGroupVersion.Group+"/") {
		return []string{p.Namespace + "/" + ref.Name}, nil
	}
	return nil, nil
}

// refuseHostConflict marks the KIngress HostConflict when another claimed
// one of its hosts first, and deletes its own proxies of such hosts that
// Contour has invalidated: such a proxy serves nothing (Contour
// invalidates every proxy of a duplicated host) and keeps the first claim
// from serving. A proxy Contour still calls valid is never deleted here.
func (r *Reconciler) refuseHostConflict(ctx context.Context, ing *v1alpha1.Ingress, desired []*contourv1.HTTPProxy) (bool, error) {
	conflict, losing := r.hostConflict(ing, desired)
	if conflict == "" {
		return false, nil
	}
	markBadInput(ing, ReasonHostConflict, conflict)
	for _, p := range losing {
		if p.Status.CurrentStatus == "valid" {
			continue
		}
		if err := r.deleteProxy(ctx, p, "of a host claimed first by another"); err != nil {
			return true, err
		}
	}
	return true, nil
}

// hostConflict names a proxy not controlled by this KIngress that claimed
// one of its hosts first (resources.FirstClaim), and returns this KIngress's
// own proxies of such hosts. When two KIngresses race for a host, both
// proxies exist for a moment; both owners then agree on which one stays.
func (r *Reconciler) hostConflict(ing *v1alpha1.Ingress, desired []*contourv1.HTTPProxy) (string, []*contourv1.HTTPProxy) {
	msg := ""
	var losing []*contourv1.HTTPProxy
	for _, d := range desired {
		claims, err := r.proxyIndexer.ByIndex(fqdnIndex, d.Spec.VirtualHost.Fqdn)
		if err != nil {
			continue
		}
		var mine, first *contourv1.HTTPProxy
		for _, o := range claims {
			if p, ok := o.(*contourv1.HTTPProxy); ok && metav1.IsControlledBy(p, ing) {
				mine = p
			}
		}
		for _, o := range claims {
			p, ok := o.(*contourv1.HTTPProxy)
			if !ok || metav1.IsControlledBy(p, ing) || !r.claims(p, resources.ContourClassOf(d)) ||
				(mine != nil && resources.FirstClaim(mine, p)) {
				continue
			}
			first = p
			break
		}
		if first == nil {
			continue
		}
		if mine != nil {
			losing = append(losing, mine)
		}
		if msg == "" {
			owner := "a user's HTTPProxy"
			if ref := metav1.GetControllerOf(first); ref != nil && ref.Kind == "Ingress" {
				owner = "the KIngress " + first.Namespace + "/" + ref.Name
			}
			msg = fmt.Sprintf("host %q is already served by HTTPProxy %s/%s (%s): remove that claim or choose another host",
				d.Spec.VirtualHost.Fqdn, first.Namespace, first.Name, owner)
		}
	}
	return msg, losing
}

// claims tells whether p holds its host on the fleet of class: Contour
// judges duplicate hosts among the proxies of its own class only, so a
// proxy of another class (or of none) never takes a host from this fleet;
// and a proxy whose controlling KIngress is gone is garbage the collector
// is about to delete, which must not keep the host from its next owner.
func (r *Reconciler) claims(p *contourv1.HTTPProxy, class string) bool {
	if resources.ContourClassOf(p) != class {
		return false
	}
	ref := metav1.GetControllerOf(p)
	if ref == nil || ref.Kind != "Ingress" || !strings.HasPrefix(ref.APIVersion, v1alpha1.SchemeGroupVersion.Group+"/") {
		return true
	}
	owner, err := r.ingressLister.Ingresses(p.Namespace).Get(ref.Name)
	if apierrs.IsNotFound(err) {
		return false
	}
	// A KIngress of that name but another UID was made anew: p is the
	// old one's leftover.
	return err != nil || owner.UID == ref.UID
}
