package contour

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakekube "k8s.io/client-go/kubernetes/fake"

	"github.com/hitless/hitless/pkg/resources"
)

func TestMirrorRoutingCA(t *testing.T) {
	ctx := context.Background()
	src := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "knative-serving", Name: "routing-serving-certs"},
		Data: map[string][]byte{
			"ca.crt":  []byte("CA-1"),
			"tls.crt": []byte("CERT"),
			"tls.key": []byte("KEY"),
		},
	}
	client := fakekube.NewSimpleClientset(src)
	copyOf := func() map[string][]byte {
		t.Helper()
		s, err := client.CoreV1().Secrets("knative-serving").Get(ctx, resources.RoutingCASecret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s.Data
	}

	if err := mirrorRoutingCA(ctx, client, src); err != nil {
		t.Fatal(err)
	}
	// The CA alone: the key a delegation would hand every namespace stays behind.
	if diff := cmp.Diff(map[string][]byte{"ca.crt": []byte("CA-1")}, copyOf()); diff != "" {
		t.Errorf("copy (-want, +got):\n%s", diff)
	}

	// A rotated CA is copied over; so is a copy someone added a key to.
	rotated := src.DeepCopy()
	rotated.Data["ca.crt"] = []byte("CA-2")
	if err := mirrorRoutingCA(ctx, client, rotated); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]byte{"ca.crt": []byte("CA-2")}, copyOf()); diff != "" {
		t.Errorf("copy after rotation (-want, +got):\n%s", diff)
	}

	// A source without a CA leaves the copy as it is.
	empty := src.DeepCopy()
	empty.Data = map[string][]byte{}
	if err := mirrorRoutingCA(ctx, client, empty); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]byte{"ca.crt": []byte("CA-2")}, copyOf()); diff != "" {
		t.Errorf("copy after the source lost its CA (-want, +got):\n%s", diff)
	}
}
