package resources

import (
	"crypto/sha1" //nolint:gosec // net-contour's label, not security
	"fmt"
	"strconv"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
)

// What upstream net-contour leaves in a cluster that moves to hitless. It
// serves the same class (contour.ingress.networking.knative.dev), so after
// its controller stops, hitless finds KIngresses whose hosts are served by
// HTTPProxies it did not write. Those are taken over in place (see
// rollout.Adopt), never duplicated: Contour invalidates every proxy of a
// host claimed twice, and the host answers 404 until one goes.
const (
	// NetContourParentLabel is the label net-contour puts on each of its
	// HTTPProxies: the name of the KIngress the proxy serves.
	NetContourParentLabel = "contour.networking.knative.dev/parent"
	// NetContourEndpointsProbe marks the child KIngress net-contour creates
	// while a rollout of the parent is in flight, to warm new backends. It
	// copies the parent's class annotation, so hitless sees it too.
	NetContourEndpointsProbe = "contour.networking.knative.dev/endpointsProbe"
	// ContourClassAnnotation selects the Contour of a proxy when its
	// spec.ingressClassName is empty; net-contour sets only this.
	ContourClassAnnotation = "projectcontour.io/ingress.class"
	// legacyClassAnnotation is the older form Contour still honours.
	legacyClassAnnotation = "kubernetes.io/ingress.class"
	// NetContourGenerationLabel is the KIngress generation net-contour built
	// a proxy for; NetContourDomainHashLabel the SHA-1 of its host, in hex.
	NetContourGenerationLabel = "contour.networking.knative.dev/generation"
	NetContourDomainHashLabel = "contour.networking.knative.dev/domainHash"
)

// setNetContourLabels puts on a serving proxy of (class, host) the labels by
// which net-contour finds the proxy of that host: it looks proxies up by
// parent, domain hash and class label, never by name, and updates the one it
// finds. That is the way back from hitless: stop hitless, start net-contour,
// and it takes each serving proxy over in place, as hitless took its proxies
// over on the way in. Without them it would create a second proxy for each
// host (Contour invalidates both: 404), or fail forever on a name that
// exists. The generation label tells it that the backends are already
// served, so it switches without its endpoint probe. A KIngress name too
// long for a label value gets no parent label (net-contour could not label
// its own proxies either).
func setNetContourLabels(labels map[string]string, ing *netv1alpha1.Ingress, class, host string) {
	if len(validation.IsValidLabelValue(ing.Name)) == 0 {
		labels[NetContourParentLabel] = ing.Name
	}
	labels[NetContourGenerationLabel] = strconv.FormatInt(ing.Generation, 10)
	labels[NetContourDomainHashLabel] = fmt.Sprintf("%x", sha1.Sum([]byte(host))) //nolint:gosec // net-contour's label, not security
	labels[ContourClassAnnotation] = class
}

// ProxyClass returns the Contour class that serves a proxy, the way Contour
// decides it: spec.ingressClassName, else the class annotations.
func ProxyClass(p *contourv1.HTTPProxy) string {
	if p.Spec.IngressClassName != "" {
		return p.Spec.IngressClassName
	}
	if c := p.Annotations[ContourClassAnnotation]; c != "" {
		return c
	}
	return p.Annotations[legacyClassAnnotation]
}

// IsNetContourEndpointProbe tells whether a KIngress is the endpoint probe
// child net-contour made for another KIngress. hitless does not serve it
// (its hosts are reserved, its only purpose was net-contour's warming) and
// removes it once the parent is Ready under hitless.
func IsNetContourEndpointProbe(ing *netv1alpha1.Ingress) bool {
	if _, ok := ing.Annotations[NetContourEndpointsProbe]; !ok {
		return false
	}
	ref := metav1.GetControllerOf(ing)
	return ref != nil && ref.Kind == "Ingress"
}
