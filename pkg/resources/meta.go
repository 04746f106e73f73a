package resources

import (
	"strings"

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

// objectMeta is the metadata every proxy of a KIngress starts from. Its
// labels are hitless's own alone, none of the KIngress's: labels are what
// other controllers and policies select by (Serving's route labels,
// external-dns's filters, network policies), and a warm proxy that carried
// them would be selected for a host it does not serve. Serving proxies add
// net-contour's four lookup labels (setNetContourLabels) and the KIngress's
// annotations (copyIngressAnnotations); warm proxies nothing more.
func objectMeta(ing *netv1alpha1.Ingress, name, role, hash string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:      name,
		Namespace: ing.Namespace,
		Labels: map[string]string{
			LabelIngress: names.LabelValue(ing.Name),
			LabelRole:    role,
		},
		Annotations:     map[string]string{AnnotationHash: hash},
		OwnerReferences: []metav1.OwnerReference{*kmeta.NewControllerRef(ing)},
	}
}

// hitlessPrefix starts every label and annotation key hitless sets.
const hitlessPrefix = "hitless.knative.dev/"

// lastAppliedAnnotation is kubectl's record of the KIngress it applied.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// copyIngressAnnotations gives a serving proxy the annotations of its
// KIngress, as net-contour does: tools that read HTTPProxies (external-dns's
// HTTPProxy source, policy engines, cost labels) see what the KIngress's
// owner put on it. The class annotations name the proxy's own class, which
// spec.ingressClassName sets too, so Contour never sees two answers;
// kubectl's last-applied record describes the KIngress, not the proxy, and
// would mislead a later kubectl apply of the proxy, so it stays behind.
// hitless's own keys (hitless.knative.dev/) are never copied: they say
// what the proxy was built for, which only hitless may claim. Warm proxies get
// none: they are ours alone, and a copied external-dns hostname on one would
// publish the user's host for a proxy that serves only a reserved host.
func copyIngressAnnotations(dst map[string]string, ing *netv1alpha1.Ingress, class string) {
	for k, v := range ing.Annotations {
		if strings.HasPrefix(k, hitlessPrefix) {
			continue
		}
		switch k {
		case lastAppliedAnnotation:
			continue
		case ContourClassAnnotation, legacyClassAnnotation:
			v = class
		}
		dst[k] = v
	}
	dst[ContourClassAnnotation] = class
}

// IsRole tells whether a proxy carries the given role label.
func IsRole(p *contourv1.HTTPProxy, role string) bool {
	return p.Labels[LabelRole] == role
}
