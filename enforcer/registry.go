package enforcer

import (
	"fmt"
	"iter"
)

// This file holds the bookkeeping the Compiler keeps its objects in:
// refCounted for what several users share (peer sets, named-port sets,
// names).

// A refCounted holds one value per key while the key has users: the first
// acquire of a key makes its value, the last release hands it back to be
// taken down. The zero value is empty and ready to use.
type refCounted[K comparable, V any] struct {
	byKey map[K]*counted[V]
}

type counted[V any] struct {
	v    V
	refs int
}

// acquire counts one more user of key and returns its value, built by
// build on the first acquire.
func (r *refCounted[K, V]) acquire(key K, build func() V) V {
	if e, ok := r.byKey[key]; ok {
		e.refs++
		return e.v
	}
	if r.byKey == nil {
		r.byKey = map[K]*counted[V]{}
	}
	v := build()
	r.byKey[key] = &counted[V]{v: v, refs: 1}
	return v
}

// release counts one user of key less and returns its value; last reports
// that it was the last user, and the key is gone. It panics for a key
// nobody holds: every release follows an acquire.
func (r *refCounted[K, V]) release(key K) (v V, last bool) {
	e, ok := r.byKey[key]
	if !ok {
		panic(fmt.Sprintf("enforcer: release of %v, which nobody holds", key))
	}
	if e.refs--; e.refs > 0 {
		return e.v, false
	}
	delete(r.byKey, key)
	return e.v, true
}

// get returns the value of key, if anyone holds it.
func (r *refCounted[K, V]) get(key K) (V, bool) {
	e, ok := r.byKey[key]
	if !ok {
		var zero V
		return zero, false
	}
	return e.v, true
}

func (r *refCounted[K, V]) len() int { return len(r.byKey) }

// values yields every held value, in no particular order.
func (r *refCounted[K, V]) values() iter.Seq[V] {
	return func(yield func(V) bool) {
		for _, e := range r.byKey {
			if !yield(e.v) {
				return
			}
		}
	}
}
