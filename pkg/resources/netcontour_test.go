package resources

import (
	"testing"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
)

func TestProxyClass(t *testing.T) {
	tests := []struct {
		name string
		p    contourv1.HTTPProxy
		want string
	}{{
		name: "ours: spec.ingressClassName",
		p:    contourv1.HTTPProxy{Spec: contourv1.HTTPProxySpec{IngressClassName: "contour-external"}},
		want: "contour-external",
	}, {
		name: "net-contour's: the annotation",
		p:    contourv1.HTTPProxy{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{ContourClassAnnotation: "contour-internal"}}},
		want: "contour-internal",
	}, {
		name: "the spec wins over an annotation, as in Contour",
		p: contourv1.HTTPProxy{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{ContourClassAnnotation: "contour-internal"}},
			Spec: contourv1.HTTPProxySpec{IngressClassName: "contour-external"}},
		want: "contour-external",
	}, {
		name: "the older annotation",
		p:    contourv1.HTTPProxy{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"kubernetes.io/ingress.class": "contour-external"}}},
		want: "contour-external",
	}, {
		name: "none",
	}}
	for _, tt := range tests {
		if got := ProxyClass(&tt.p); got != tt.want {
			t.Errorf("%s: ProxyClass = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestIsNetContourEndpointProbe(t *testing.T) {
	parent := &netv1alpha1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "hello", UID: "u"}}
	ref := metav1.OwnerReference{APIVersion: "networking.internal.knative.dev/v1alpha1", Kind: "Ingress", Name: "hello", UID: "u", Controller: ptr.To(true)}
	annotated := map[string]string{NetContourEndpointsProbe: "true"}
	tests := []struct {
		name string
		meta metav1.ObjectMeta
		want bool
	}{
		{"net-contour's child: annotated and controlled by a KIngress", metav1.ObjectMeta{Annotations: annotated, OwnerReferences: []metav1.OwnerReference{ref}}, true},
		{"annotated by a user, no parent: an ordinary KIngress", metav1.ObjectMeta{Annotations: annotated}, false},
		{"controlled by a KIngress, not annotated", metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{ref}}, false},
		{"the parent itself", parent.ObjectMeta, false},
	}
	for _, tt := range tests {
		if got := IsNetContourEndpointProbe(&netv1alpha1.Ingress{ObjectMeta: tt.meta}); got != tt.want {
			t.Errorf("%s: IsNetContourEndpointProbe = %v, want %v", tt.name, got, tt.want)
		}
	}
}
