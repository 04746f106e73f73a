package resources

import (
	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
)

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
