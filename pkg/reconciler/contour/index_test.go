package contour

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/kmeta"
)

func TestIndexController(t *testing.T) {
	owned := func(ref *metav1.OwnerReference) *contourv1.HTTPProxy {
		p := &contourv1.HTTPProxy{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "p"}}
		if ref != nil {
			p.OwnerReferences = []metav1.OwnerReference{*ref}
		}
		return p
	}
	controllerOf := *kmeta.NewControllerRef(ing("blue"))
	notController := controllerOf
	notController.Controller = nil
	deployment := *metav1.NewControllerRef(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "blue", UID: "u"}},
		appsv1.SchemeGroupVersion.WithKind("Deployment"))
	otherIngress := controllerOf
	otherIngress.APIVersion = "networking.k8s.io/v1" // a Kubernetes Ingress of the same name

	tests := []struct {
		name string
		obj  interface{}
		want []string
	}{
		{name: "controlled by a KIngress (ours or net-contour's)", obj: owned(&controllerOf), want: []string{testNS + "/" + testName}},
		{name: "owned, not controlled", obj: owned(&notController)},
		{name: "controlled by something else", obj: owned(&deployment)},
		{name: "controlled by a Kubernetes Ingress", obj: owned(&otherIngress)},
		{name: "no owner", obj: owned(nil)},
		{name: "not a proxy", obj: "tombstone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := indexController(tt.obj)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("indexController (-want +got):\n%s", diff)
			}
		})
	}
}
