package resources

import (
	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/pkg/kmeta"

	"github.com/hitless/hitless/pkg/resources/names"
)

// Labels and annotations hitless puts on the HTTPProxies it owns. The
// rollout phase is derived from them (and the KIngress), never remembered.
const (
	// LabelIngress names the owning KIngress (see names.LabelValue).
	LabelIngress = "hitless.knative.dev/ingress"
	// LabelRole is RoleServing or RoleWarm.
	LabelRole = "hitless.knative.dev/role"
	// AnnotationHash is the K-Network-Hash the proxy's probe routes set.
	AnnotationHash = "hitless.knative.dev/hash"
	// AnnotationGeneration is the KIngress generation a serving proxy was built for.
	AnnotationGeneration = "hitless.knative.dev/generation"

	// RoleServing marks a proxy that carries user traffic.
	RoleServing = "serving"
	// RoleWarm marks a proxy that only keeps backends referenced and probeable.
	RoleWarm = "warm"
)

// SelectorFor returns the labels that select every proxy of a KIngress.
func SelectorFor(ing *netv1alpha1.Ingress) map[string]string {
	return map[string]string{LabelIngress: names.LabelValue(ing.Name)}
}

func objectMeta(ing *netv1alpha1.Ingress, name, role, hash string) metav1.ObjectMeta {
	labels := kmeta.FilterMap(ing.Labels, func(string) bool { return false })
	labels[LabelIngress] = names.LabelValue(ing.Name)
	labels[LabelRole] = role
	return metav1.ObjectMeta{
		Name:            name,
		Namespace:       ing.Namespace,
		Labels:          labels,
		Annotations:     map[string]string{AnnotationHash: hash},
		OwnerReferences: []metav1.OwnerReference{*kmeta.NewControllerRef(ing)},
	}
}

// IsRole tells whether a proxy carries the given role label.
func IsRole(p *contourv1.HTTPProxy, role string) bool {
	return p.Labels[LabelRole] == role
}
