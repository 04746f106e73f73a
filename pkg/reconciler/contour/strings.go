package contour

import (
	"reflect"
	"sync"
)

// shareStrings makes the equal strings of an object share one copy: the
// JSON decoder allocates every string it reads, and an HTTPProxy repeats
// many (a hash in two headers and an annotation, a Service's name in
// three routes, the retry policy of every route). Strings shared with
// earlier objects come from common, the rest from the object's own
// strings. obj must be a pointer; nothing else of it changes.
func shareStrings(obj interface{}) {
	s := sharer{own: map[string]string{}}
	s.walk(reflect.ValueOf(obj))
}

type sharer struct {
	own map[string]string
}

func (s *sharer) share(v string) string {
	if c, ok := common.get(v); ok {
		return c
	}
	if c, ok := s.own[v]; ok {
		return c
	}
	s.own[v] = v
	common.offer(v)
	return v
}

func (s *sharer) walk(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			s.walk(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Field(i); f.CanSet() {
				s.walk(f)
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			s.walk(v.Index(i))
		}
	case reflect.Map:
		if v.IsNil() || !v.CanSet() {
			return
		}
		kt, et := v.Type().Key(), v.Type().Elem()
		if kt.Kind() != reflect.String || (et.Kind() != reflect.String && et.Kind() != reflect.Bool) {
			// Only maps of strings (labels, annotations, a header set)
			// are rebuilt; others keep their strings as decoded.
			return
		}
		m := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			k := reflect.ValueOf(s.share(it.Key().String())).Convert(kt)
			e := it.Value()
			if et.Kind() == reflect.String {
				e = reflect.ValueOf(s.share(e.String())).Convert(et)
			}
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.String:
		if v.CanSet() {
			v.SetString(s.share(v.String()))
		}
	}
}

// common holds short strings that many objects repeat (header names, retry
// conditions, label keys, "Valid HTTPProxy"). It takes the first ones it is
// offered until it is full and never lets go of any, so it is bounded:
// every object offers its strings in the order it holds them, and the
// ones every object has come first.
var common = &stringTable{max: commonMax, maxLen: commonMaxLen, m: map[string]string{}}

const (
	commonMax    = 4096
	commonMaxLen = 40
)

type stringTable struct {
	mu          sync.RWMutex
	max, maxLen int
	m           map[string]string
}

func (t *stringTable) get(v string) (string, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	c, ok := t.m[v]
	return c, ok
}

func (t *stringTable) offer(v string) {
	if len(v) > t.maxLen {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.m) < t.max {
		t.m[v] = v
	}
}
