package contour

import (
	"bytes"
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakekube "k8s.io/client-go/kubernetes/fake"
)

func TestLoadProbeKey(t *testing.T) {
	ctx := context.Background()
	client := fakekube.NewSimpleClientset()

	first, err := loadProbeKey(ctx, client, "knative-serving")
	if err != nil {
		t.Fatal(err)
	}
	// A second replica, or a restart, reads the same key.
	again, err := loadProbeKey(ctx, client, "knative-serving")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, again) {
		t.Error("a second start made a new key: every proxy's token would change")
	}
	s, err := client.CoreV1().Secrets("knative-serving").Get(ctx, ProbeKeySecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(s.Data[probeKeyField], first) {
		t.Error("the stored key is not the one in use")
	}

	// A Secret someone emptied is refused, with what to do.
	bad := fakekube.NewSimpleClientset(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "knative-serving", Name: ProbeKeySecret},
		Data:       map[string][]byte{probeKeyField: []byte("short")},
	})
	if _, err := loadProbeKey(ctx, bad, "knative-serving"); err == nil {
		t.Error("a short key was taken")
	}
}
