package contour

import (
	"sync"
	"time"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// forgetDeletedAfter bounds how long a deleted proxy is remembered when
// the informer never reports its deletion (a watch that broke and
// relisted past it reports it too, as a tombstone; this is the backstop).
const forgetDeletedAfter = 2 * time.Minute

// deletedProxies are the UIDs of the proxies this process deleted whose
// deletion the informer has not delivered yet. Under load the informer's
// cache shows a proxy for seconds after its delete returned; a reconcile
// that read it then would plan around it: hold a released warm proxy's
// backends again and update the proxy, a write the API server refuses
// with 404 and a reconcile that fails and is retried. observe skips them.
// A proxy created again under the same name has another UID. The informer
// may deliver a deletion before add runs: that entry then stays until
// forgetDeletedAfter, harmlessly, as no cache holds its UID any more.
type deletedProxies struct {
	mu sync.Mutex
	at map[types.UID]time.Time
}

func newDeletedProxies() *deletedProxies {
	return &deletedProxies{at: map[types.UID]time.Time{}}
}

// add remembers a proxy the API server deleted (or had deleted already).
func (d *deletedProxies) add(uid types.UID, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for u, t := range d.at {
		if now.Sub(t) > forgetDeletedAfter {
			delete(d.at, u)
		}
	}
	d.at[uid] = now
}

// has tells whether the proxy with this UID was deleted by this process
// and the informer has not said so yet.
func (d *deletedProxies) has(uid types.UID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.at[uid]
	return ok
}

// forget is the proxy informer's delete handler: once the cache no longer
// holds the proxy, nothing needs to skip it.
func (d *deletedProxies) forget(obj interface{}) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	p, ok := obj.(*contourv1.HTTPProxy)
	if !ok {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.at, p.UID)
}

// len is how many are remembered (tests).
func (d *deletedProxies) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.at)
}
