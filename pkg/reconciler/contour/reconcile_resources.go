package contour

import (
	"context"
	"fmt"
	"sort"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/pkg/tracker"

	"github.com/hitless/hitless/pkg/resources"
	"github.com/hitless/hitless/pkg/rollout"
)

// resolver resolves backends through the Service lister, tracking each
// Service so that its creation or change re-reconciles the KIngress.
func (r *Reconciler) resolver(ing *v1alpha1.Ingress) resources.Resolver {
	return func(ns, name string, port intstr.IntOrString) (resources.Backend, error) {
		if err := r.tracker.TrackReference(tracker.Reference{APIVersion: "v1", Kind: "Service", Namespace: ns, Name: name}, ing); err != nil {
			return resources.Backend{}, fmt.Errorf("failed to track Service %s/%s: %w", ns, name, err)
		}
		svc, err := r.serviceLister.Services(ns).Get(name)
		if apierrs.IsNotFound(err) {
			return resources.Backend{}, &resources.BackendError{Reason: "ServiceNotFound", Message: fmt.Sprintf(
				"Service %s/%s does not exist: create it or point the KIngress at an existing one", ns, name)}
		} else if err != nil {
			return resources.Backend{}, fmt.Errorf("failed to get Service %s/%s: %w", ns, name, err)
		}
		return resources.ResolveFromService(svc, port)
	}
}

// backendExists looks a held backend up, tracking its Service so that its
// deletion re-reconciles the KIngress. A backend exists while its Service
// has its port: Contour refuses a proxy naming anything else, so a warm
// proxy holding it would stop holding anything. Its protocol and Host
// rewrite are the route's to say, not the Service's (the route names them,
// and config-network's system-internal-tls turns a plain port into tls),
// so a Service whose port was renamed still has the served cluster held
// until the switch away from it is confirmed.
func (r *Reconciler) backendExists(ing *v1alpha1.Ingress) func(resources.Backend) bool {
	return func(b resources.Backend) bool {
		_ = r.tracker.TrackReference(tracker.Reference{APIVersion: "v1", Kind: "Service", Namespace: b.Namespace, Name: b.Name}, ing)
		svc, err := r.serviceLister.Services(b.Namespace).Get(b.Name)
		if apierrs.IsNotFound(err) {
			return false
		} else if err != nil {
			return true // unknown: keep holding it
		}
		_, err = resources.ResolveFromService(svc, intstr.FromInt32(b.Port))
		return err == nil
	}
}

// observe reads the proxies this KIngress controls, by role. net-contour's
// proxies of it count as serving: they serve its hosts until hitless writes
// over them (rollout.Adopt), so their backends are held and their hosts
// taken over, never claimed a second time.
func (r *Reconciler) observe(ing *v1alpha1.Ingress) (rollout.Observed, error) {
	// The proxies this KIngress controls: ours carry LabelIngress,
	// net-contour's NetContourParentLabel.
	objs, err := r.proxyIndexer.ByIndex(controllerIndex, ing.Namespace+"/"+ing.Name)
	if err != nil {
		return rollout.Observed{}, fmt.Errorf("failed to list HTTPProxies of %s/%s: %w", ing.Namespace, ing.Name, err)
	}
	label := resources.SelectorFor(ing)[resources.LabelIngress]
	var obs rollout.Observed
	for _, o := range objs {
		p, ok := o.(*contourv1.HTTPProxy)
		if !ok {
			continue
		}
		ours := p.Labels[resources.LabelIngress] == label
		netContour := !ours && p.Labels[resources.NetContourParentLabel] == ing.Name
		if (!ours && !netContour) || !metav1.IsControlledBy(p, ing) || r.deleted.has(p.UID) {
			continue
		}
		switch {
		case netContour, resources.IsRole(p, resources.RoleServing):
			obs.Serving = append(obs.Serving, p)
		case resources.IsRole(p, resources.RoleWarm):
			obs.Warm = append(obs.Warm, p)
		}
	}
	sort.Slice(obs.Serving, func(i, j int) bool { return obs.Serving[i].Name < obs.Serving[j].Name })
	sort.Slice(obs.Warm, func(i, j int) bool { return obs.Warm[i].Name < obs.Warm[j].Name })
	return obs, nil
}

// deleteProxy deletes p if it is still the object we saw (UID precondition:
// a proxy recreated meanwhile under the same name is not ours to delete);
// gone already is fine.
func (r *Reconciler) deleteProxy(ctx context.Context, p *contourv1.HTTPProxy, why string) error {
	err := r.contourClient.ProjectcontourV1().HTTPProxies(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &p.UID},
	})
	if err != nil && !apierrs.IsNotFound(err) {
		return fmt.Errorf("failed to delete HTTPProxy %s/%s %s: %w", p.Namespace, p.Name, why, err)
	}
	r.deleted.add(p.UID, r.clock())
	return nil
}

// applyAll creates or updates each desired proxy, copying only what we own
// onto a copy of what exists. It returns how many it wrote, and how many of
// those writes change what Envoy serves: a create, or an update of the spec
// or of the Contour class. An update of labels and annotations alone (the
// generation, net-contour's labels on a proxy that lacks them)
// routes nothing differently, so it needs no probe round and does not
// make a Ready KIngress NotReady for one.
func (r *Reconciler) applyAll(ctx context.Context, ing *v1alpha1.Ingress, desired, existing []*contourv1.HTTPProxy) (written, routed int, err error) {
	byName := make(map[string]*contourv1.HTTPProxy, len(existing))
	for _, p := range existing {
		byName[p.Name] = p
	}
	for _, want := range desired {
		have, ok := byName[want.Name]
		if !ok {
			got, err := r.proxyLister.HTTPProxies(want.Namespace).Get(want.Name)
			switch {
			case apierrs.IsNotFound(err), err == nil && r.deleted.has(got.UID):
				if _, err := r.contourClient.ProjectcontourV1().HTTPProxies(want.Namespace).Create(ctx, want, metav1.CreateOptions{}); err != nil {
					return written, routed, fmt.Errorf("failed to create HTTPProxy %s/%s: %w", want.Namespace, want.Name, err)
				}
				written++
				routed++
				continue
			case err != nil:
				return written, routed, fmt.Errorf("failed to get HTTPProxy %s/%s: %w", want.Namespace, want.Name, err)
			case !metav1.IsControlledBy(got, ing):
				ing.Status.MarkResourceNotOwned("HTTPProxy", want.Name)
				return written, routed, fmt.Errorf("HTTPProxy %s/%s exists and is not controlled by the KIngress", want.Namespace, want.Name)
			}
			have = got
		}
		if equality.Semantic.DeepEqual(have.Spec, want.Spec) &&
			equality.Semantic.DeepEqual(have.Labels, want.Labels) &&
			equality.Semantic.DeepEqual(have.Annotations, want.Annotations) {
			continue
		}
		upd := have.DeepCopy()
		upd.Spec = want.Spec
		upd.Labels = want.Labels
		upd.Annotations = want.Annotations
		if _, err := r.contourClient.ProjectcontourV1().HTTPProxies(upd.Namespace).Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
			return written, routed, fmt.Errorf("failed to update HTTPProxy %s/%s: %w", upd.Namespace, upd.Name, err)
		}
		written++
		if !equality.Semantic.DeepEqual(have.Spec, want.Spec) || resources.ProxyClass(have) != resources.ProxyClass(want) {
			routed++
		}
	}
	return written, routed, nil
}

// current returns the proxies as the lister has them now, for the names
// given, so Contour's verdict on them can be read.
func (r *Reconciler) current(ing *v1alpha1.Ingress, proxies []*contourv1.HTTPProxy) []*contourv1.HTTPProxy {
	out := make([]*contourv1.HTTPProxy, 0, len(proxies))
	for _, p := range proxies {
		if got, err := r.proxyLister.HTTPProxies(ing.Namespace).Get(p.Name); err == nil {
			out = append(out, got)
		}
	}
	return out
}
