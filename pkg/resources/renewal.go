package resources

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
)

// ConditionRenewing is the condition Serving's certificate reconciler sets
// on a Knative Certificate whose cert-manager Certificate has passed its
// renewal time, while the renewal's HTTP-01 challenges are routed.
const ConditionRenewing = "Renewing"

// HoldRenewingTLS returns the KIngress to build the serving proxies from:
// ing itself, or a copy whose spec.tls keeps, for each host Serving took TLS
// off, the certificate of a Knative Certificate that is renewing it. It
// also returns the hosts so held.
//
// Serving (v0.50.0) writes the KIngress without the host's TLS for part of
// every HTTP-01 renewal: its certificate reconciler marks the Knative
// Certificate not ready when the challenge exists before cert-manager's
// solver Service does, and the route then leaves spec.tls out until the new
// certificate is issued, about 20 s in which HTTPS to the host would fail.
// The certificate in the Secret is the one the host served a moment ago and
// still valid (a renewal comes due well before expiry), and the Secret is
// rewritten in place with the new one, so serving it on meanwhile drops
// nothing and opens nothing: plain HTTP stays served as the KIngress asks
// (a held host is treated as one with config-contour's default certificate).
//
// A certificate is held only while Serving says it renews it (condition
// Renewing True), for the hosts it names that the KIngress serves without
// TLS, and only when the KIngress and the certificate have the same
// controller (the Route that made both): a host whose TLS was turned off on
// purpose has no renewing certificate, and another owner's certificate is
// never served.
func HoldRenewingTLS(ing *netv1alpha1.Ingress, certs []*netv1alpha1.Certificate) (*netv1alpha1.Ingress, []string) {
	owner := metav1.GetControllerOf(ing)
	if owner == nil {
		return ing, nil
	}
	served := sets.New[string]()
	for _, r := range ing.Spec.Rules {
		served.Insert(r.Hosts...)
	}
	covered := sets.New[string]()
	for _, t := range ing.Spec.TLS {
		covered.Insert(t.Hosts...)
	}
	var held []netv1alpha1.IngressTLS
	var hosts []string
	for _, c := range certs {
		if !renewing(c, ing.Namespace, owner.UID) {
			continue
		}
		var names []string
		for _, h := range c.Spec.DNSNames {
			if served.Has(h) && !covered.Has(h) {
				names = append(names, h)
				covered.Insert(h)
			}
		}
		if len(names) > 0 {
			held = append(held, netv1alpha1.IngressTLS{Hosts: names, SecretName: c.Spec.SecretName, SecretNamespace: c.Namespace})
			hosts = append(hosts, names...)
		}
	}
	if len(held) == 0 {
		return ing, nil
	}
	out := ing.DeepCopy()
	out.Spec.TLS = append(out.Spec.TLS, held...)
	return out, hosts
}

// renewing tells whether c is a live certificate of the owner in ns that
// Serving reports renewing.
func renewing(c *netv1alpha1.Certificate, ns string, owner types.UID) bool {
	if c.Namespace != ns || c.DeletionTimestamp != nil || c.Spec.SecretName == "" {
		return false
	}
	if o := metav1.GetControllerOf(c); o == nil || o.UID != owner {
		return false
	}
	cond := c.Status.GetCondition(ConditionRenewing)
	return cond != nil && cond.Status == corev1.ConditionTrue
}
