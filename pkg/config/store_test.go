package config

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logtesting "knative.dev/pkg/logging/testing"
)

// A malformed config-contour reaches onInvalid with the key named, and the
// last valid configuration stays in force.
func TestStoreReportsInvalidConfigMaps(t *testing.T) {
	var rejected []string
	store := NewStore(logtesting.TestLogger(t), func(cm *corev1.ConfigMap, err error) {
		rejected = append(rejected, cm.Name+": "+err.Error())
	})
	cm := func(data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "knative-serving", Name: ContourConfigName}, Data: data}
	}

	store.OnConfigChanged(cm(map[string]string{ReleaseHoldKey: "7s"}))
	if len(rejected) != 0 {
		t.Fatalf("a valid ConfigMap was reported invalid: %v", rejected)
	}
	store.OnConfigChanged(cm(map[string]string{VisibilityKey: "ExternalIP: [not a map"}))
	if len(rejected) != 1 || !strings.HasPrefix(rejected[0], ContourConfigName+": ") || !strings.Contains(rejected[0], VisibilityKey) {
		t.Fatalf("rejections = %q, want one naming %s and the key %q", rejected, ContourConfigName, VisibilityKey)
	}
	if got := store.Load().Contour.ReleaseHold.String(); got != "7s" {
		t.Errorf("after a rejected change the release hold is %s, want the last valid 7s", got)
	}
}
