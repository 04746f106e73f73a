package contour

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/pkg/network"
	"knative.dev/pkg/tracker"

	"github.com/hitless/hitless/pkg/config"
	"github.com/hitless/hitless/pkg/resources"
)

// Reasons of the KIngress conditions hitless sets: one per phase or failure,
// so that `kubectl get kingress` tells what is awaited or what to fix.
const (
	ReasonWarming     = "Warming"
	ReasonSwitching   = "Switching"
	ReasonNoEnvoyPods = "NoEnvoyPods"
	// ReasonNoProbePort: the fleet's Envoy Service has no port a host of
	// the KIngress can be probed on (no HTTP port for a host without TLS).
	ReasonNoProbePort  = "NoProbePort"
	ReasonHostConflict = "HostConflict"
	ReasonProxyInvalid = "HTTPProxyInvalid"
	// ReasonInvalidConfig is the Warning event on a rejected config-contour
	// or config-network.
	ReasonInvalidConfig = "InvalidConfig"
)

// markBadInput records input a user must fix: nothing was written for it.
func markBadInput(ing *v1alpha1.Ingress, reason, message string) {
	ing.GetConditionSet().Manage(&ing.Status).MarkFalse(v1alpha1.IngressConditionNetworkConfigured, reason, message)
}

// markWaiting records the phase a rollout waits in and for what.
func markWaiting(ing *v1alpha1.Ingress, reason, message string) {
	ing.Status.MarkNetworkConfigured()
	ing.GetConditionSet().Manage(&ing.Status).MarkUnknown(v1alpha1.IngressConditionLoadBalancerReady, reason, message)
}

// markProxyInvalid records Contour's verdict on one of our proxies.
func markProxyInvalid(ing *v1alpha1.Ingress, name, description string) {
	ing.Status.MarkNetworkConfigured()
	ing.Status.MarkLoadBalancerFailed(ReasonProxyInvalid, fmt.Sprintf(
		"Contour rejected HTTPProxy %s/%s: %s", ing.Namespace, name, description))
}

// describe lists the first few items of a list for a condition message.
func describe(items []string) string {
	const max = 3
	if len(items) <= max {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:max], ", "), len(items)-max)
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
