package resources

import (
	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FirstClaim tells whether the HTTPProxy a claimed its virtual host before b
// did. Contour invalidates every HTTPProxy of a duplicated host, so when two
// owners race for one host, exactly one must step back: the one whose proxy
// is younger. Equal creation times (the API server counts in seconds) fall
// back to namespace/name, so both sides reach the same verdict.
func FirstClaim(a, b metav1.Object) bool {
	ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
	if !ta.Equal(&tb) {
		return ta.Before(&tb)
	}
	if a.GetNamespace() != b.GetNamespace() {
		return a.GetNamespace() < b.GetNamespace()
	}
	return a.GetName() < b.GetName()
}

// ContourClassOf is the class of Contour that processes an HTTPProxy, read
// as Contour reads it: the class annotation wins over spec.ingressClassName.
// A Contour started with a class sees only objects of that class, so two
// proxies of one host conflict only within a class; a proxy of no class is
// seen only by a Contour without one, which a hitless fleet never is.
func ContourClassOf(p *contourv1.HTTPProxy) string {
	if c := p.Annotations[ContourClassAnnotation]; c != "" {
		return c
	}
	if c := p.Annotations[legacyClassAnnotation]; c != "" {
		return c
	}
	return p.Spec.IngressClassName
}
