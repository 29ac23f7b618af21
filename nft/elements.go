package nft

import (
	"iter"
	"net/netip"
	"slices"

	"go4.org/netipx"
)

// Len is the number of elements of s, in Elements or in Chunks.
func (s *Set) Len() int {
	if s.Chunks == nil {
		return len(s.Elements)
	}
	n := 0
	for _, c := range s.Chunks {
		n += len(c)
	}
	return n
}

// All yields the elements of s in order with their index, from Elements
// or from Chunks.
func (s *Set) All() iter.Seq2[int, Element] {
	return func(yield func(int, Element) bool) {
		i := 0
		for _, part := range s.parts() {
			for _, e := range part {
				if !yield(i, e) {
					return
				}
				i++
			}
		}
	}
}

// List returns the elements of s in one slice: Elements itself, or the
// chunks joined into a new one. The caller must not modify it.
func (s *Set) List() []Element {
	if s.Chunks == nil {
		return s.Elements
	}
	return slices.Concat(s.Chunks...)
}

// parts are the slices holding the elements of s, in order.
func (s *Set) parts() [][]Element {
	if s.Chunks == nil {
		return [][]Element{s.Elements}
	}
	return s.Chunks
}

// sameElements reports whether a and b hold the same elements in the same
// order, whatever their form. Chunks two versions of a set share are
// passed over by pointer.
func sameElements(a, b *Set) bool {
	if a.Chunks != nil && b.Chunks != nil && len(a.Chunks) == len(b.Chunks) {
		for i := range a.Chunks {
			x, y := a.Chunks[i], b.Chunks[i]
			if len(x) != len(y) {
				return sameElementsSlow(a, b) // split elsewhere
			}
			if len(x) > 0 && &x[0] != &y[0] && !slices.Equal(x, y) {
				return false
			}
		}
		return true
	}
	return sameElementsSlow(a, b)
}

// sameElementsSlow compares a and b element by element.
func sameElementsSlow(a, b *Set) bool {
	if a.Len() != b.Len() {
		return false
	}
	next, stop := iter.Pull2(b.All())
	defer stop()
	for _, x := range a.All() {
		if _, y, _ := next(); x != y {
			return false
		}
	}
	return true
}

// AddressDiff returns the addresses of the ranges of a that no range of b
// holds, as ranges, sorted and merged: what a set held per address
// (PerAddress) loses when a are its ranges gone and b its ranges come, or
// gains the other way round. The compiler uses it to follow a peer set's
// addresses too.
func AddressDiff(a, b []Element) []Element {
	if len(a) == 0 {
		return a
	}
	// Through an IPSet even when b is empty: ranges of a that overlap
	// (an exact patch's own removals, say) come out merged, so that no
	// address is sent twice, which the kernel refuses (ENOENT).
	var sb netipx.IPSetBuilder
	for _, e := range a {
		sb.AddRange(addrRangeOf(e))
	}
	for _, e := range b {
		sb.RemoveRange(addrRangeOf(e))
	}
	set, _ := sb.IPSet() // only fails for invalid ranges, which Validate refuses
	return elementsOf(set)
}

// elementsOf is set's ranges as elements, sorted and merged.
func elementsOf(set *netipx.IPSet) []Element {
	var out []Element
	for _, r := range set.Ranges() {
		e := Element{Addr: r.From(), Last: r.To()}
		out = append(out, e.normalize())
	}
	return out
}

// Addresses yields each address of e's range, first to last: the kernel
// elements of one element of a set held per address (PerAddress).
func Addresses(e Element) iter.Seq[netip.Addr] {
	return func(yield func(netip.Addr) bool) {
		r := addrRangeOf(e)
		if !r.IsValid() {
			return // Validate refuses it
		}
		for a := r.From(); ; a = a.Next() {
			if !yield(a) || a == r.To() {
				return
			}
		}
	}
}
