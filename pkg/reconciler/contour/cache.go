package contour

import (
	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
)

// trimForCache is the transform of every informer: what enters a cache is
// what the controller reads, held in as little memory as it takes. The
// caches are most of the controller's heap (HTTPProxies and KIngresses, JSON
// objects, above all), and its memory grows with them.
//
//   - metadata.managedFields goes from every object: nothing here reads it,
//     and it is a large share of each.
//   - An HTTPProxy's status.loadBalancer goes: the controller reads
//     Contour's verdict (currentStatus, description, conditions), never the
//     address Contour copies onto every proxy.
//   - HTTPProxies and KIngresses are copied: the JSON decoder grows every
//     slice by appending (up to twice the room it needs), a copy has each
//     at its length. The decoded object is garbage once copied.
//   - Their equal strings share one copy (shareStrings).
//
// Tombstones and objects of other types pass through with only their
// managedFields dropped.
func trimForCache(obj interface{}) (interface{}, error) {
	if acc, err := meta.Accessor(obj); err == nil {
		acc.SetManagedFields(nil)
	}
	switch o := obj.(type) {
	case *contourv1.HTTPProxy:
		o.Status.LoadBalancer = corev1.LoadBalancerStatus{}
		o = o.DeepCopy()
		shareStrings(o)
		return o, nil
	case *v1alpha1.Ingress:
		o = o.DeepCopy()
		shareStrings(o)
		return o, nil
	}
	return obj, nil
}
