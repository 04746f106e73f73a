package contour

import (
	"fmt"
	"strings"

	"knative.dev/networking/pkg/apis/networking/v1alpha1"
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
