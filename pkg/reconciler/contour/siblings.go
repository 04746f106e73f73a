package contour

import (
	"reflect"
	"sync"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	"k8s.io/client-go/tools/cache"
)

// siblingSharer makes an HTTPProxy entering the cache share what it has
// equal with the other proxies of its KIngress. A KIngress has a proxy
// per host (four for a Knative Service: one external host, three
// cluster-local), each with the same routes, annotations and owner, and
// Contour's verdict on them is mostly the same too: held once, they take a
// quarter of the memory. Cached objects are never written to (every write
// starts from a copy), so sharing their parts is safe.
//
// The siblings are the proxies already in the cache (the indexer) and
// those of the same KIngress transformed just before: an informer's first
// list is transformed whole before any of it reaches the indexer, and
// lists come sorted by name, so a KIngress's proxies (named after it) come
// one after another.
type siblingSharer struct {
	indexer cache.Indexer

	mu sync.Mutex
	// recent are the latest proxies transformed, all of one KIngress
	// (owner), at most maxRecent.
	owner  string
	recent []*contourv1.HTTPProxy
}

// maxRecent bounds recent: a KIngress has a proxy per host and a warm one
// per new backend.
const maxRecent = 8

func newSiblingSharer(indexer cache.Indexer) *siblingSharer {
	return &siblingSharer{indexer: indexer}
}

// transform is the proxies informer's transform: trimForCache, then the
// sharing.
func (s *siblingSharer) transform(obj interface{}) (interface{}, error) {
	obj, err := trimForCache(obj)
	if p, ok := obj.(*contourv1.HTTPProxy); ok && err == nil {
		s.share(p)
	}
	return obj, err
}

// share points p's parts at a sibling's where they are equal.
func (s *siblingSharer) share(p *contourv1.HTTPProxy) {
	keys, _ := indexController(p)
	if len(keys) == 0 {
		return
	}
	var siblings []interface{}
	if s.indexer != nil {
		siblings, _ = s.indexer.ByIndex(controllerIndex, keys[0])
	}
	s.mu.Lock()
	if s.owner != keys[0] || len(s.recent) == maxRecent {
		s.owner, s.recent = keys[0], nil
	}
	for _, r := range s.recent {
		siblings = append(siblings, r)
	}
	s.recent = append(s.recent, p)
	s.mu.Unlock()
	for _, o := range siblings {
		sib, ok := o.(*contourv1.HTTPProxy)
		if !ok || sib == p {
			continue
		}
		shareEqual(&p.Spec.Routes, sib.Spec.Routes)
		shareEqual(&p.Annotations, sib.Annotations)
		shareEqual(&p.OwnerReferences, sib.OwnerReferences)
		shareEqual(&p.Status.Conditions, sib.Status.Conditions)
	}
}

// shareEqual sets *mine to theirs when the two are equal, nil and empty
// told apart.
func shareEqual[T any](mine *T, theirs T) {
	if reflect.DeepEqual(*mine, theirs) {
		*mine = theirs
	}
}
