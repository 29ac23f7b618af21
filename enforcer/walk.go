package enforcer

import "slices"

// walkChanges calls changed for every key whose object differs between
// prev and next, two lists of one kind of object sorted by key (as
// snapshots are): old is nil for a key that appeared, new nil for one that
// went. Objects that are the same pointer at the same place in both lists
// cost one comparison, so an event costs what it changed plus a pass over
// pointers, not a map lookup per object.
//
// prev must be sorted with unique keys (it is the list a previous call
// returned). next is checked around every object that is not matched by
// pointer, which with prev sorted proves it sorted; if it is not (a
// source broke the Snapshot contract) it is sorted, last of equal keys
// winning, and walked again. walkChanges returns the list it walked, to be
// given back as prev next time.
func walkChanges[T any](prev, next []*T, key func(*T) objKey, changed func(k objKey, old, new *T)) []*T {
	if !inOrder(prev, next, key) {
		sorted := slices.Clone(next)
		slices.SortStableFunc(sorted, func(a, b *T) int { return compareKeys(key(a), key(b)) })
		// Keep the last of equal keys.
		out := sorted[:0]
		for i, o := range sorted {
			if i+1 < len(sorted) && key(sorted[i+1]) == key(o) {
				continue
			}
			out = append(out, o)
		}
		next = out
	}
	i, j := 0, 0
	for i < len(prev) || j < len(next) {
		if i < len(prev) && j < len(next) && prev[i] == next[j] {
			i, j = i+1, j+1
			continue
		}
		var c int
		switch {
		case i == len(prev):
			c = 1
		case j == len(next):
			c = -1
		default:
			c = compareKeys(key(prev[i]), key(next[j]))
		}
		switch {
		case c < 0:
			changed(key(prev[i]), prev[i], nil)
			i++
		case c > 0:
			changed(key(next[j]), nil, next[j])
			j++
		default:
			changed(key(next[j]), prev[i], next[j])
			i, j = i+1, j+1
		}
	}
	return next
}

// inOrder reports whether next is sorted with unique keys, given prev is:
// it checks the neighbours of every object of next not matched by pointer
// in a lockstep walk with prev.
func inOrder[T any](prev, next []*T, key func(*T) objKey) bool {
	ordered := func(j int) bool {
		return (j == 0 || compareKeys(key(next[j-1]), key(next[j])) < 0) &&
			(j+1 == len(next) || compareKeys(key(next[j]), key(next[j+1])) < 0)
	}
	i, j := 0, 0
	for j < len(next) {
		if i < len(prev) && prev[i] == next[j] {
			i, j = i+1, j+1
			continue
		}
		if !ordered(j) {
			return false
		}
		// Skip what prev has before next[j], and next[j] itself if prev
		// holds it under another pointer.
		for i < len(prev) && compareKeys(key(prev[i]), key(next[j])) <= 0 {
			i++
		}
		j++
	}
	return true
}
