package contour

import (
	"testing"
	"time"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

func TestDeletedProxies(t *testing.T) {
	proxy := func(uid string) *contourv1.HTTPProxy {
		return &contourv1.HTTPProxy{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "p-" + uid, UID: types.UID("uid-" + uid)}}
	}
	d := newDeletedProxies()
	a, b, c := proxy("a"), proxy("b"), proxy("c")
	d.add(a.UID, now)
	d.add(b.UID, now)
	if !d.has(a.UID) || !d.has(b.UID) || d.has(c.UID) {
		t.Fatalf("has: a %v, b %v, c %v; want true, true, false", d.has(a.UID), d.has(b.UID), d.has(c.UID))
	}
	// the informer delivers the deletion: as the object, or as a tombstone
	// after a relist
	d.forget(a)
	d.forget(cache.DeletedFinalStateUnknown{Key: testNS + "/p-b", Obj: b})
	d.forget("not a proxy")
	if d.has(a.UID) || d.has(b.UID) {
		t.Errorf("still remembered after the informer's delete: a %v, b %v", d.has(a.UID), d.has(b.UID))
	}
	// A deletion the informer never reports is forgotten after a while,
	// at the next add.
	d.add(c.UID, now)
	d.add(a.UID, now.Add(forgetDeletedAfter+time.Second))
	if d.has(c.UID) || !d.has(a.UID) || d.len() != 1 {
		t.Errorf("after the backstop: c %v, a %v, %d remembered; want false, true, 1", d.has(c.UID), d.has(a.UID), d.len())
	}
}
