package resources

import (
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
