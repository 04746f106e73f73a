package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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
	}, nil)
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

// A config-contour with keys and fields hitless ignores is accepted: it is
// in force, onWarnings is told of each warning, and onInvalid of nothing.
func TestStoreReportsWarningsOfAcceptedConfigMaps(t *testing.T) {
	var rejected []error
	var warned []string
	store := NewStore(logtesting.TestLogger(t),
		func(_ *corev1.ConfigMap, err error) { rejected = append(rejected, err) },
		func(cm *corev1.ConfigMap, warnings []string) {
			for _, w := range warnings {
				warned = append(warned, cm.Name+": "+w)
			}
		})
	store.OnConfigChanged(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "knative-serving", Name: ContourConfigName},
		Data: map[string]string{
			ReleaseHoldKey: "7s",
			"new-feature":  "on",
			CORSPolicyKey:  "allowOrigin: ['*']\nallowMethods: [GET]\nnewerField: true\n",
		},
	})
	if len(rejected) != 0 {
		t.Fatalf("a ConfigMap with only unknown content was rejected: %v", rejected)
	}
	want := []string{
		ContourConfigName + `: "new-feature" is not a key hitless reads and is ignored (the keys are visibility, default-tls-secret, timeout-policy-response, timeout-policy-idle, cors-policy, release-hold, retry-policy)`,
		ContourConfigName + `: cors-policy: field "newerField" is unknown and ignored`,
	}
	if diff := cmp.Diff(want, warned); diff != "" {
		t.Errorf("warnings (-want, +got):\n%s", diff)
	}
	got := store.Load().Contour
	if got.ReleaseHold.String() != "7s" || got.CORSPolicy == nil {
		t.Errorf("the accepted ConfigMap is not in force: release hold %s, CORS policy %v", got.ReleaseHold, got.CORSPolicy)
	}
}
