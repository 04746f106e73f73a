// Package contour is the KIngress reconciler of hitless: it reads the
// KIngress and the HTTPProxies it owns, asks pkg/rollout what the next step
// of the make-before-break rollout is, applies it, and reports truthfully,
// from per-pod probes, when every Envoy pod serves it.
package contour

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	netclientset "knative.dev/networking/pkg/client/clientset/versioned"
	ingressreconciler "knative.dev/networking/pkg/client/injection/reconciler/networking/v1alpha1/ingress"
	netlisters "knative.dev/networking/pkg/client/listers/networking/v1alpha1"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/logging"
	"knative.dev/pkg/network"
	pkgreconciler "knative.dev/pkg/reconciler"
	"knative.dev/pkg/tracker"

	contourclientset "github.com/hitless/hitless/pkg/client/clientset/versioned"
	contourlisters "github.com/hitless/hitless/pkg/client/listers/projectcontour/v1"
	"github.com/hitless/hitless/pkg/config"
	"github.com/hitless/hitless/pkg/probe"
	"github.com/hitless/hitless/pkg/probekey"
	"github.com/hitless/hitless/pkg/resources"
	"github.com/hitless/hitless/pkg/rollout"
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
// without walking every proxy of the namespace: with a thousand KIngresses
// in one namespace that walk was 4,000 proxies per reconcile.
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

// Prober is the part of the prober (pkg/probe) the reconciler uses.
type Prober interface {
	IsReady(ctx context.Context, ing *v1alpha1.Ingress) (probe.Progress, error)
	CancelIngressProbingByKey(key types.NamespacedName)
}

// Reconciler implements the KIngress reconciler.
type Reconciler struct {
	contourClient contourclientset.Interface
	netClient     netclientset.Interface
	proxyLister   contourlisters.HTTPProxyLister
	proxyIndexer  cache.Indexer
	ingressLister netlisters.IngressLister
	serviceLister corev1listers.ServiceLister
	tracker       tracker.Interface
	prober        Prober
	targets       *envoyTargets
	enqueueAfter  func(obj interface{}, after time.Duration)
	clock         func() time.Time
	metrics       *metrics
	// probeKey derives the tokens of the probe and warm routes (probekey).
	probeKey probekey.Key
}

var _ ingressreconciler.Interface = (*Reconciler)(nil)

// ReconcileKind runs one step of the rollout of a KIngress. Each step is
// derived from objects, so running it again, or after a restart, is safe.
func (r *Reconciler) ReconcileKind(ctx context.Context, ing *v1alpha1.Ingress) pkgreconciler.Event {
	logger := logging.FromContext(ctx)
	cfg := config.FromContextOrDefaults(ctx)
	ctx = probekey.WithKey(ctx, r.probeKey)

	// Captured before this reconcile changes status: a KIngress already
	// Ready at this generation needs no probe unless we write something.
	// Ready, not LoadBalancerReady: a reconcile that failed before marking
	// anything (a conflict, say) still has its observedGeneration bumped,
	// leaving the previous generation's LoadBalancerReady=True behind; the
	// top-level Ready is then Unknown (NewObservedGenFailure).
	wasReady := ing.IsReady()
	var readySince time.Time
	if wasReady {
		readySince = ing.Status.GetCondition(v1alpha1.IngressConditionLoadBalancerReady).LastTransitionTime.Inner.Time
	}

	if resources.IsNetContourEndpointProbe(ing) {
		return r.retireEndpointProbe(ctx, ing)
	}

	desired, err := resources.MakeServing(ctx, ing, r.resolver(ing))
	if err != nil {
		return r.badInputOr(ing, err)
	}

	obs, err := r.observe(ing)
	if err != nil {
		return err
	}
	if conflict, losing := r.hostConflict(ing, desired.Proxies); conflict != "" {
		markBadInput(ing, ReasonHostConflict, conflict)
		// Our proxy of a host someone claimed first serves nothing (Contour
		// invalidates every proxy of a duplicated host) and keeps the first
		// claim from serving: it goes. A proxy Contour still calls valid is
		// never deleted here.
		for _, p := range losing {
			if p.Status.CurrentStatus == "valid" {
				continue
			}
			if err := r.deleteProxy(ctx, p, "of a host claimed first by another"); err != nil {
				return err
			}
		}
		return nil
	}

	rollout.Adopt(desired.Proxies, obs.Serving)
	obs.Exists = r.backendExists(ing)
	plan := rollout.Decide(desired, obs)
	if plan.NeedsWarm() {
		warm, err := resources.MakeWarm(ctx, ing, plan.Keep, plan.New, r.targets.httpsOnly(cfg.Contour, plan.Keep.Classes()))
		if err != nil {
			return r.badInputOr(ing, err)
		}
		changed, _, err := r.applyAll(ctx, ing, warm.Proxies, obs.Warm)
		if err != nil {
			return err
		}
		if changed > 0 {
			r.metrics.proxiesWritten(ctx, resources.RoleWarm, changed)
			controller.GetEventRecorder(ctx).Eventf(ing, corev1.EventTypeNormal, ReasonWarming,
				"Warm proxies reference %s", describe(backendStrings(plan.Keep)))
		}
		if plan.Probe {
			if done, err := r.awaitProbe(ctx, ing, warm.Probe, plan.New, ReasonWarming, r.current(ing, warm.Proxies)); !done || err != nil {
				return err
			}
			r.metrics.phaseDone(ctx, ReasonWarming, ing, r.clock())
		}
	}

	changed, routed, err := r.applyAll(ctx, ing, desired.Proxies, obs.Serving)
	if err != nil {
		return err
	}
	wrote := routed > 0
	if wrote {
		// The warm round served its purpose; its prober state would
		// otherwise stay in memory until the KIngress is deleted.
		r.prober.CancelIngressProbingByKey(types.NamespacedName{Namespace: ing.Namespace, Name: ing.Name + resources.WarmSuffix})
	}
	for _, p := range rollout.Stale(desired, obs.Serving) {
		if err := r.deleteProxy(ctx, p, "that left the spec"); err != nil {
			return err
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

	if !wasReady || wrote {
		readySince = time.Time{}
		if done, err := r.awaitProbe(ctx, ing, withExpectedHash(ing, desired.Hash), desired.Backends, ReasonSwitching, r.current(ing, desired.Proxies)); !done || err != nil {
			return err
		}
		r.metrics.phaseDone(ctx, ReasonSwitching, ing, r.clock())
		logger.Infow("Every Envoy pod serves the KIngress", zap.Int64("generation", ing.Generation))
	}
	ing.Status.MarkNetworkConfigured()
	ing.Status.MarkLoadBalancerReady(r.loadBalancers(ing, cfg.Contour))

	// Release: only now may the warm proxies go, after the hold.
	now := r.clock()
	if readySince.IsZero() {
		readySince = now
	}
	release, wait := rollout.Release(obs.Warm, readySince, cfg.Contour.ReleaseHold, now)
	if wait > 0 {
		r.enqueueAfter(ing, wait)
	}
	if release {
		for _, p := range obs.Warm {
			if err := r.deleteProxy(ctx, p, "(warm)"); err != nil {
				return err
			}
		}
		r.metrics.phaseDone(ctx, "Releasing", ing, now)
		controller.GetEventRecorder(ctx).Event(ing, corev1.EventTypeNormal, "Released", "Warm proxies deleted")
	}
	return nil
}

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

// badInputOr turns a user's mistake into a condition (no retry: the tracker
// re-enqueues when the input changes) and passes anything else on.
func (r *Reconciler) badInputOr(ing *v1alpha1.Ingress, err error) error {
	var se *resources.SpecError
	var be *resources.BackendError
	switch {
	case errors.As(err, &se):
		markBadInput(ing, se.Reason, se.Message)
		return nil
	case errors.As(err, &be):
		markBadInput(ing, be.Reason, be.Message)
		return nil
	}
	return err
}

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
		if (!ours && !netContour) || !metav1.IsControlledBy(p, ing) {
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
	return nil
}

// applyAll creates or updates each desired proxy, copying only what we own
// onto a copy of what exists. It returns how many it wrote, and how many of
// those writes change what Envoy serves: a create, or an update of the spec
// or of the Contour class. An update of labels and annotations alone (the
// generation, net-contour's labels added to proxies an older hitless wrote)
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
			case apierrs.IsNotFound(err):
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

// awaitProbe asks the prober whether every Envoy pod of each class in
// awaited serves probeIng, and records what the rollout waits for when not.
// It returns true once confirmed.
func (r *Reconciler) awaitProbe(ctx context.Context, ing, probeIng *v1alpha1.Ingress, awaited resources.ClassBackends,
	reason string, proxies []*contourv1.HTTPProxy) (bool, error) {
	cfg := config.FromContextOrDefaults(ctx).Contour
	// Contour's own verdict first: an invalid proxy will never serve.
	for _, p := range proxies {
		if bad, why := rollout.Rejected(p); bad {
			markProxyInvalid(ing, p.Name, why)
			return false, nil
		}
	}
	type fleetWait struct {
		class, notReady string
		pods            int
	}
	var fleets []fleetWait
	unready := false
	for _, class := range awaited.Classes() {
		fleet, ok := cfg.FleetByClass(class)
		if !ok {
			continue
		}
		pods, err := r.targets.pods(fleet)
		if errors.Is(err, errNoEnvoyPods) {
			markWaiting(ing, ReasonNoEnvoyPods, err.Error()+": the KIngress cannot be confirmed until an Envoy pod is ready")
			return false, nil
		} else if errors.Is(err, errNoProbePort) {
			markWaiting(ing, ReasonNoProbePort, err.Error())
			return false, nil
		} else if err != nil {
			return false, err
		}
		notReady := ""
		if n := pods.NotReady.Len(); n > 0 {
			notReady = fmt.Sprintf(" (%d not ready but still serving: %s)", n, strings.Join(sets.List(pods.NotReady), ", "))
			unready = true
		}
		fleets = append(fleets, fleetWait{class: class, notReady: notReady, pods: pods.IPs.Len()})
	}
	progress, err := r.prober.IsReady(ctx, probeIng)
	if r.deleted(ing) {
		// Deleted while this reconcile worked on the cached copy: the
		// delete handler may already have cancelled its probing, and
		// IsReady just started it again, for good.
		r.cancelProbing(ing)
		return false, nil
	}
	if err != nil {
		if errors.Is(err, errNoEnvoyPods) {
			markWaiting(ing, ReasonNoEnvoyPods, err.Error())
			return false, nil
		}
		if errors.Is(err, errNoProbePort) {
			markWaiting(ing, ReasonNoProbePort, err.Error())
			return false, nil
		}
		return false, fmt.Errorf("failed to probe %s/%s: %w", probeIng.Namespace, probeIng.Name, err)
	}
	if progress.Ready {
		return true, nil
	}
	if unready {
		// A not ready pod may stop accepting connections (its Envoy
		// gone) without any event: look again soon, so it stops
		// holding the rollout up once it serves nobody.
		r.enqueueAfter(ing, notReadyRecheck)
	}
	var parts []string
	var longest time.Duration
	for _, f := range fleets {
		fp := probe.FleetProgress{Class: f.class, Total: f.pods}
		for _, got := range progress.Fleets {
			if got.Class == f.class {
				fp = got
			}
		}
		parts = append(parts, fmt.Sprintf("%d/%d Envoy pods of %s%s serve %s%s", fp.Confirmed, fp.Total, f.class, f.notReady,
			describe(backendStrings(resources.ClassBackends{f.class: awaited[f.class]})), describeWaiting(fp.Waiting)))
		if len(fp.Waiting) > 0 && fp.Waiting[0].For > longest {
			longest = fp.Waiting[0].For
		}
	}
	// A rollout that waits has a laggard worth naming with its current
	// wait and last answer once it waits progressRefresh: look again when
	// the wait the message shows moves to its next step. Nothing else may
	// come to end the wait (a server that refuses every probe sends no
	// event), so the first look is scheduled too; one that finds the
	// KIngress confirmed by then writes nothing, and the steps keep a bulk
	// rollout's status writes to one per doubling of a wait.
	_, next := waitStep(longest)
	r.enqueueAfter(ing, next-longest)
	markWaiting(ing, reason, strings.Join(parts, "; "))
	r.metrics.phaseStarted(ing, reason, r.clock())
	return false, nil
}

// progressRefresh is the wait after which a rollout's condition message
// names how long its laggards wait, and is brought up to date by itself.
const progressRefresh = 5 * time.Second

// waitStep is the wait a message shows for a pod that waits d, and the wait
// at which that changes: 0 below progressRefresh, then steps that double
// (5s, 10s, 20s, 40s, ...). The message is status, and every change of it is
// an API write: a clock in it would rewrite the status of every waiting
// KIngress at every reconcile (Contour's status writes on its HTTPProxies
// cause many at scale), while steps cost a waiting KIngress one write per
// doubling of its wait.
func waitStep(d time.Duration) (shown, next time.Duration) {
	if d < progressRefresh {
		return 0, progressRefresh
	}
	shown = progressRefresh
	for shown*2 <= d {
		shown *= 2
	}
	return shown, shown * 2
}

// describeWaiting names the first pods a fleet waits on, how long (from
// progressRefresh on, in waitStep's steps) and their last answer:
// " (waiting: 10.244.0.7 for over 10s: 503)".
func describeWaiting(pods []probe.PodWait) string {
	if len(pods) == 0 {
		return ""
	}
	const max = 2
	var items []string
	for i, p := range pods {
		if i == max {
			items = append(items, fmt.Sprintf("%d more", len(pods)-max))
			break
		}
		item := p.IP
		if shown, _ := waitStep(p.For); shown > 0 {
			item += fmt.Sprintf(" for over %v", shown)
		}
		if p.LastError != "" {
			item += ": " + p.LastError
		}
		items = append(items, item)
	}
	return " (waiting: " + strings.Join(items, ", ") + ")"
}

// notReadyRecheck is how often a rollout that waits for a not ready Envoy
// pod checks whether that pod still accepts connections.
const notReadyRecheck = 2 * time.Second

// deleted tells whether the KIngress has left the informer cache (or was
// replaced by another of the same name). The cache drops an object before
// the delete handler runs, so a probe started before this check is
// cancelled by one or the other.
func (r *Reconciler) deleted(ing *v1alpha1.Ingress) bool {
	got, err := r.ingressLister.Ingresses(ing.Namespace).Get(ing.Name)
	return apierrs.IsNotFound(err) || (err == nil && got.UID != ing.UID)
}

// cancelProbing drops the prober's state for a KIngress and its warm set.
func (r *Reconciler) cancelProbing(ing *v1alpha1.Ingress) {
	r.prober.CancelIngressProbingByKey(types.NamespacedName{Namespace: ing.Namespace, Name: ing.Name})
	r.prober.CancelIngressProbingByKey(types.NamespacedName{Namespace: ing.Namespace, Name: ing.Name + resources.WarmSuffix})
}

func backendStrings(c resources.ClassBackends) []string {
	var out []string
	for _, class := range c.Classes() {
		for _, b := range resources.SortedBackends(c[class]) {
			out = append(out, b.String())
		}
	}
	return out
}

// withExpectedHash is the KIngress as the prober is given it: with the hash
// its serving proxies answer with (resources.servedHash), not the one of its
// spec alone. A shallow copy: only the annotations are new.
func withExpectedHash(ing *v1alpha1.Ingress, hash string) *v1alpha1.Ingress {
	out := *ing
	out.Annotations = make(map[string]string, len(ing.Annotations)+1)
	for k, v := range ing.Annotations {
		out.Annotations[k] = v
	}
	out.Annotations[probe.ExpectedHashAnnotation] = hash
	return &out
}

// loadBalancers names the Envoy Services as the KIngress's public and
// private load balancers, the way Knative Serving expects: the Service's
// cluster-local name and, as net-contour reports it, its ClusterIP (Serving
// copies the status into the Route's; tools that read an IP from it, and a
// cluster moving over from net-contour, find the same address). A Service
// not in the informer's cache yet gets the name alone; its arrival
// reconciles the KIngress again (the reconciler tracks it).
func (r *Reconciler) loadBalancers(ing *v1alpha1.Ingress, cfg *config.Contour) ([]v1alpha1.LoadBalancerIngressStatus, []v1alpha1.LoadBalancerIngressStatus) {
	lb := func(v v1alpha1.IngressVisibility) []v1alpha1.LoadBalancerIngressStatus {
		f, ok := cfg.FleetFor(v)
		if !ok {
			return nil
		}
		st := v1alpha1.LoadBalancerIngressStatus{DomainInternal: network.GetServiceHostname(f.Service.Name, f.Service.Namespace)}
		_ = r.tracker.TrackReference(tracker.Reference{APIVersion: "v1", Kind: "Service", Namespace: f.Service.Namespace, Name: f.Service.Name}, ing)
		if svc, err := r.serviceLister.Services(f.Service.Namespace).Get(f.Service.Name); err == nil && svc.Spec.ClusterIP != corev1.ClusterIPNone {
			st.IP = svc.Spec.ClusterIP
		}
		return []v1alpha1.LoadBalancerIngressStatus{st}
	}
	return lb(v1alpha1.IngressVisibilityExternalIP), lb(v1alpha1.IngressVisibilityClusterLocal)
}
