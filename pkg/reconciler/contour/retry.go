package contour

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/util/workqueue"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/logging"
	pkgreconciler "knative.dev/pkg/reconciler"
)

// Retries of a KIngress whose reconcile failed because the API server could
// not be reached double from unavailableRetryInitial up to
// unavailableRetryMax. Knative's controllers back off per key up to 1,000 s
// whatever the error, so a rollout whose reconciles failed all through an
// API server restart then waited out the back-off it had built up, not the
// outage: 38-42 s for a 10 s outage in TestFaultAPIServerDownMidRollout, during
// which the new backend stays warm and the old one held, but the switch
// waits. An unreachable API server costs nothing to ask again; errors it
// answers with (forbidden, invalid) keep Knative's back-off.
const (
	unavailableRetryInitial = 5 * time.Millisecond
	unavailableRetryMax     = 2 * time.Second
)

// leaderAwareReconciler is what the generated KIngress reconciler is to
// controller.Impl: it reconciles keys, and Impl promotes and demotes it as
// this replica wins and loses buckets.
type leaderAwareReconciler interface {
	controller.Reconciler
	pkgreconciler.LeaderAware
}

// unavailableRetry reconciles through the generated reconciler and turns a
// failure to reach the API server into a requeue after a capped back-off.
type unavailableRetry struct {
	leaderAwareReconciler
	backoff workqueue.TypedRateLimiter[string]
}

func newUnavailableRetry(r controller.Reconciler) (*unavailableRetry, error) {
	la, ok := r.(leaderAwareReconciler)
	if !ok {
		return nil, fmt.Errorf("reconciler %T is not leader-aware", r)
	}
	return &unavailableRetry{
		leaderAwareReconciler: la,
		backoff:               workqueue.NewTypedItemExponentialFailureRateLimiter[string](unavailableRetryInitial, unavailableRetryMax),
	}, nil
}

// Reconcile implements controller.Reconciler.
func (u *unavailableRetry) Reconcile(ctx context.Context, key string) error {
	err := u.leaderAwareReconciler.Reconcile(ctx, key)
	if err == nil || !apiUnavailable(err) {
		u.backoff.Forget(key)
		return err
	}
	failures := u.backoff.NumRequeues(key) + 1
	delay := u.backoff.When(key)
	// Impl does not log a requested requeue: say here what failed, on the
	// first failure and every tenth after (every 20 s at the cap), not at
	// every retry of every rollout in flight through an outage.
	if failures%10 == 1 {
		logging.FromContext(ctx).Errorw("Reconcile error: the API server is unavailable; retrying",
			"failures", failures, "retryAfter", delay, "error", err)
	}
	return controller.NewRequeueAfter(delay)
}

// apiUnavailable tells whether err means the API server was not reached or
// could not answer for now, as opposed to an answer about the request.
func apiUnavailable(err error) bool {
	if apierrors.IsServiceUnavailable(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err) || apierrors.IsUnexpectedServerError(err) {
		return true
	}
	if utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) ||
		utilnet.IsHTTP2ConnectionLost(err) {
		return true
	}
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout()
}
