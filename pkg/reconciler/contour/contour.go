// Package contour is the KIngress reconciler of hitless: it reads the
// KIngress and the HTTPProxies it owns, asks pkg/rollout what the next step
// of the make-before-break rollout is, applies it, and reports truthfully,
// from per-pod probes, when every Envoy pod serves it.
package contour

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	netclientset "knative.dev/networking/pkg/client/clientset/versioned"
	ingressreconciler "knative.dev/networking/pkg/client/injection/reconciler/networking/v1alpha1/ingress"
	netlisters "knative.dev/networking/pkg/client/listers/networking/v1alpha1"
	"knative.dev/pkg/logging"
	pkgreconciler "knative.dev/pkg/reconciler"
	"knative.dev/pkg/tracker"

	contourclientset "github.com/hitless/hitless/pkg/client/clientset/versioned"
	contourlisters "github.com/hitless/hitless/pkg/client/listers/projectcontour/v1"
	"github.com/hitless/hitless/pkg/probe"
	"github.com/hitless/hitless/pkg/probekey"
	"github.com/hitless/hitless/pkg/resources"
	"github.com/hitless/hitless/pkg/rollout"
)

// Prober is the part of the prober (pkg/probe) the reconciler uses.
type Prober interface {
	IsReady(ctx context.Context, round probe.Round) (probe.Progress, error)
	Cancel(key probe.RoundKey)
	CancelWhere(drop func(types.NamespacedName) bool)
}

// Reconciler implements the KIngress reconciler.
type Reconciler struct {
	contourClient contourclientset.Interface
	netClient     netclientset.Interface
	proxyLister   contourlisters.HTTPProxyLister
	proxyIndexer  cache.Indexer
	ingressLister netlisters.IngressLister
	serviceLister corev1listers.ServiceLister
	// certLister lists Serving's Knative Certificates, whose renewals
	// hold a host's TLS (resources.HoldRenewingTLS).
	certLister   netlisters.CertificateLister
	tracker      tracker.Interface
	prober       Prober
	targets      *envoyTargets
	enqueueAfter func(obj interface{}, after time.Duration)
	clock        func() time.Time
	metrics      *metrics
	// probeKey derives the tokens of the probe and warm routes (probekey).
	probeKey probekey.Key
	// deleted are the proxies this process deleted that the informer may
	// still show.
	deleted *deletedProxies
}

var (
	_ ingressreconciler.Interface       = (*Reconciler)(nil)
	_ pkgreconciler.OnDeletionInterface = (*Reconciler)(nil)
)

// ObserveDeletion forgets a deleted KIngress: its prober rounds (its own
// and its warm set's) and its metrics. The leader of its bucket runs it,
// from the workqueue, never beside a ReconcileKind of the same key, so a
// round that reconcile started is cancelled here after it. A replica that
// led the bucket before forgot the bucket's rounds when it was demoted
// (forgetBucket).
func (r *Reconciler) ObserveDeletion(_ context.Context, key types.NamespacedName) error {
	r.cancelProbing(key)
	r.metrics.forget(key)
	return nil
}

// pass is what one reconcile knows of a KIngress, handed from phase to
// phase: what it should serve, what exists, and the step rollout.Decide
// chose.
type pass struct {
	ing     *v1alpha1.Ingress
	desired *resources.Serving
	obs     rollout.Observed
	plan    rollout.Plan
	// wasReady is the KIngress's Ready before this reconcile changed its
	// status: one Ready at its generation needs no probe unless the
	// Switch phase writes something. Ready, not LoadBalancerReady: a
	// reconcile that failed before marking anything (a conflict, say)
	// still has its observedGeneration bumped, leaving the previous
	// generation's LoadBalancerReady=True behind; the top-level Ready is
	// then Unknown (NewObservedGenFailure).
	wasReady bool
	// readySince is when every Envoy pod confirmed the serving proxies,
	// from which the Release phase counts the hold; zero while unknown.
	readySince time.Time
}

// phase is one step of the rollout. It returns true when done, so the
// next may run, and false when the rollout waits (it has then recorded
// for what in the KIngress's status and scheduled what ends the wait).
type phase func(ctx context.Context, p *pass) (done bool, err error)

// ReconcileKind runs the rollout of a KIngress as far as it can go now:
// Warm (the new backends' clusters on every Envoy pod), Switch (the serving
// proxies, confirmed on every pod) and Release (the warm proxies, after the
// hold). Each step is derived from objects, so running it again, or after a
// restart, is safe.
func (r *Reconciler) ReconcileKind(ctx context.Context, ing *v1alpha1.Ingress) pkgreconciler.Event {
	ctx = probekey.WithKey(ctx, r.probeKey)
	if resources.IsNetContourEndpointProbe(ing) {
		return r.retireEndpointProbe(ctx, ing)
	}
	p := &pass{ing: ing, wasReady: ing.IsReady()}
	if p.wasReady {
		p.readySince = ing.Status.GetCondition(v1alpha1.IngressConditionLoadBalancerReady).LastTransitionTime.Inner.Time
	}

	var err error
	if p.desired, err = resources.MakeServing(ctx, r.holdRenewingTLS(ctx, ing), r.resolver(ing)); err != nil {
		return r.badInputOr(ing, err)
	}
	if p.obs, err = r.observe(ing); err != nil {
		return err
	}
	if conflict, err := r.refuseHostConflict(ctx, ing, p.desired.Proxies); conflict || err != nil {
		return err
	}
	rollout.Adopt(p.desired.Proxies, p.obs.Serving)
	p.obs.Exists = r.backendExists(ing)
	p.plan = rollout.Decide(p.desired, p.obs)

	for _, run := range []phase{r.warm, r.switchServing, r.release} {
		if done, err := run(ctx, p); !done || err != nil {
			return err
		}
	}
	return nil
}

// holdRenewingTLS is the KIngress to build the serving proxies from: ing,
// with the TLS of the hosts whose certificates Serving is renewing kept
// (resources.HoldRenewingTLS).
func (r *Reconciler) holdRenewingTLS(ctx context.Context, ing *v1alpha1.Ingress) *v1alpha1.Ingress {
	if r.certLister == nil {
		return ing
	}
	certs, err := r.certLister.Certificates(ing.Namespace).List(labels.Everything())
	if err != nil {
		return ing // a lister reads its cache: it does not fail
	}
	build, held := resources.HoldRenewingTLS(ing, certs)
	if len(held) > 0 {
		logging.FromContext(ctx).Infow("Serving left TLS out of the KIngress while it renews the certificate; serving the certificate on", "hosts", held)
	}
	return build
}

// forgetBucket drops the prober's rounds of the KIngresses of a bucket this
// replica no longer leads: their new leader probes them, and nothing here
// would ever end them.
func (r *Reconciler) forgetBucket(b pkgreconciler.Bucket) {
	r.prober.CancelWhere(b.Has)
}
