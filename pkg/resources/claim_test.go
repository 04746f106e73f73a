package resources

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestFirstClaim(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	obj := func(ns, name string, at time.Time) *metav1.ObjectMeta {
		return &metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(at)}
	}
	tests := []struct {
		name string
		a, b *metav1.ObjectMeta
		want bool
	}{{
		name: "the older proxy keeps the host",
		a:    obj("z", "z", t0), b: obj("a", "a", t0.Add(time.Second)),
		want: true,
	}, {
		name: "the younger proxy steps back",
		a:    obj("a", "a", t0.Add(time.Second)), b: obj("z", "z", t0),
		want: false,
	}, {
		name: "same second: the lower namespace wins",
		a:    obj("a", "z", t0), b: obj("b", "a", t0),
		want: true,
	}, {
		name: "same second and namespace: the lower name wins",
		a:    obj("ns", "b", t0), b: obj("ns", "a", t0),
		want: false,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FirstClaim(tt.a, tt.b); got != tt.want {
				t.Errorf("FirstClaim(%s, %s) = %v, want %v", tt.a.Name, tt.b.Name, got, tt.want)
			}
			// Both owners must reach opposite verdicts, or both step back (or neither).
			if back := FirstClaim(tt.b, tt.a); back == tt.want {
				t.Errorf("FirstClaim is not antisymmetric for %s and %s", tt.a.Name, tt.b.Name)
			}
		})
	}
}
