package contour

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"knative.dev/pkg/controller"
	pkgreconciler "knative.dev/pkg/reconciler"
)

func TestAPIUnavailable(t *testing.T) {
	proxies := schema.GroupResource{Group: "projectcontour.io", Resource: "httpproxies"}
	refused := &url.Error{Op: "Put", URL: "https://10.244.0.1:6443/apis/projectcontour.io/v1", Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused, wrapped twice", fmt.Errorf("failed to update HTTPProxy ns/p: %w", refused), true},
		{"connection reset", &url.Error{Op: "Get", URL: "https://x", Err: syscall.ECONNRESET}, true},
		{"503", apierrors.NewServiceUnavailable("starting"), true},
		{"504", apierrors.NewTimeoutError("etcd", 1), true},
		{"429", apierrors.NewTooManyRequests("slow down", 1), true},
		{"500 (a webhook that cannot be called)", apierrors.NewInternalError(errors.New("failed calling webhook")), true},
		{"client timeout", fmt.Errorf("list: %w", context.DeadlineExceeded), true},
		{"forbidden", apierrors.NewForbidden(proxies, "p", errors.New("RBAC")), false},
		{"not found", apierrors.NewNotFound(proxies, "p"), false},
		{"conflict", apierrors.NewConflict(proxies, "p", errors.New("changed")), false},
		{"invalid", apierrors.NewBadRequest("spec.virtualhost.fqdn: invalid"), false},
		{"our own", errors.New("no Envoy Service"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := apiUnavailable(tc.err); got != tc.want {
				t.Errorf("apiUnavailable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// scripted answers each Reconcile with the next error of its script.
type scripted struct {
	pkgreconciler.LeaderAwareFuncs
	errs []error
}

func (s *scripted) Reconcile(context.Context, string) error {
	err := s.errs[0]
	s.errs = s.errs[1:]
	return err
}

func TestUnavailableRetry(t *testing.T) {
	refused := fmt.Errorf("update: %w", &url.Error{Op: "Put", URL: "https://api", Err: syscall.ECONNREFUSED})
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "httpproxies"}, "p", errors.New("RBAC"))
	var script []error
	for range 12 {
		script = append(script, refused)
	}
	script = append(script, nil, refused, forbidden, refused)
	inner := &scripted{errs: script}
	u, err := newUnavailableRetry(inner)
	if err != nil {
		t.Fatal(err)
	}

	requeued := func(step string, want time.Duration) {
		t.Helper()
		err := u.Reconcile(context.Background(), "ns/name")
		if ok, got := controller.IsRequeueKey(err); !ok || got != want {
			t.Errorf("%s: got %v (requeue %v after %v), want a requeue after %v", step, err, ok, got, want)
		}
	}
	// 5 ms doubling: 5, 10, ..., 1.28 s, then the 2 s cap.
	want := unavailableRetryInitial
	for i := range 12 {
		requeued(fmt.Sprintf("failure %d", i+1), min(want, unavailableRetryMax))
		want *= 2
	}
	if err := u.Reconcile(context.Background(), "ns/name"); err != nil {
		t.Errorf("success: got %v", err)
	}
	requeued("first failure after a success", unavailableRetryInitial)
	if err := u.Reconcile(context.Background(), "ns/name"); !errors.Is(err, forbidden) {
		t.Errorf("forbidden: got %v, want the error itself (Knative's back-off)", err)
	} else if ok, _ := controller.IsRequeueKey(err); ok {
		t.Errorf("forbidden: requeued; want Knative's back-off")
	}
	requeued("first failure after an answered error", unavailableRetryInitial)
}

func TestUnavailableRetryNeedsLeaderAware(t *testing.T) {
	if _, err := newUnavailableRetry(notLeaderAware{}); err == nil {
		t.Error("a reconciler that is not leader-aware was wrapped; Impl would never promote it")
	}
}

type notLeaderAware struct{}

func (notLeaderAware) Reconcile(context.Context, string) error { return nil }
