package enforcer

import (
	"cmp"
	"fmt"
	"iter"
	"slices"
)

// This file holds the two kinds of bookkeeping the Compiler keeps its
// objects in: refCounted for what several users share (peer sets,
// named-port sets, names), and tableObjects for the chains and sets the
// next table lists.

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

// A tableObjects holds the chains or the sets of the next table beyond the
// base chain and the dispatch maps, by name. Entries are updated in place;
// the sorted order is patched when membership changes: the names put
// since are sorted and merged into it, and the dropped ones left out. At
// 10k policies sorting all 10k chains and sets again whenever a policy
// edit added or dropped one was most of the edit's compile.
//
// It also records what the current Compile call changed, for Delta: for
// each name put or dropped since startCall, what the name held before (the
// zero value: nothing), so Delta compares only those and its cost follows
// the event.
type tableObjects[T any] struct {
	byName  map[string]*tableObject[T]
	order   []*tableObject[T] // by sortKey, then name; nil until first asked
	added   []*tableObject[T] // put since order was last brought up to date
	dropped bool              // some entry of order or added was dropped since
	touched map[string]T
}

type tableObject[T any] struct {
	name, sortKey string
	v             T
	dropped       bool
}

func compareObjects[T any](a, b *tableObject[T]) int {
	if c := cmp.Compare(a.sortKey, b.sortKey); c != 0 {
		return c
	}
	return cmp.Compare(a.name, b.name)
}

// startCall forgets what the previous Compile call touched.
func (o *tableObjects[T]) startCall() { o.touched = map[string]T{} }

// put registers v under name for the next tables, replacing what the name
// held, ordered by sortKey.
func (o *tableObjects[T]) put(name, sortKey string, v T) {
	o.touch(name)
	if e, ok := o.byName[name]; ok {
		e.v = v
		return
	}
	if o.byName == nil {
		o.byName = map[string]*tableObject[T]{}
	}
	e := &tableObject[T]{name: name, sortKey: sortKey, v: v}
	o.byName[name] = e
	if o.order != nil {
		o.added = append(o.added, e)
	}
}

// drop takes name out of the next tables, if it is there.
func (o *tableObjects[T]) drop(name string) {
	o.touch(name)
	if e, ok := o.byName[name]; ok {
		delete(o.byName, name)
		e.dropped = true
		o.dropped = true
	}
}

func (o *tableObjects[T]) touch(name string) {
	if _, ok := o.touched[name]; !ok {
		o.touched[name] = o.get(name)
	}
}

// get returns what name holds; the zero value if nothing.
func (o *tableObjects[T]) get(name string) T {
	if e, ok := o.byName[name]; ok {
		return e.v
	}
	var zero T
	return zero
}

func (o *tableObjects[T]) len() int { return len(o.byName) }

// appendSorted appends every value to dst in sortKey order (names break
// ties).
func (o *tableObjects[T]) appendSorted(dst []T) []T {
	switch {
	case o.order == nil:
		o.order = make([]*tableObject[T], 0, len(o.byName))
		for _, e := range o.byName {
			o.order = append(o.order, e)
		}
		slices.SortFunc(o.order, compareObjects[T])
	case len(o.added) > 0 || o.dropped:
		added := slices.DeleteFunc(o.added, func(e *tableObject[T]) bool { return e.dropped })
		slices.SortFunc(added, compareObjects[T])
		merged := make([]*tableObject[T], 0, len(o.byName))
		i := 0
		for _, e := range o.order {
			if e.dropped {
				continue
			}
			for i < len(added) && compareObjects(added[i], e) < 0 {
				merged = append(merged, added[i])
				i++
			}
			merged = append(merged, e)
		}
		o.order = append(merged, added[i:]...)
	}
	o.added, o.dropped = nil, false
	for _, e := range o.order {
		dst = append(dst, e.v)
	}
	return dst
}
