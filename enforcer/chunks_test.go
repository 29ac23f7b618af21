package enforcer

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/nftpolicy/nftpolicy/nft"
)

// TestPatchChunksMatchesFlat: patching chunks gives the list patchSorted
// gives the joined chunks, edits at chunk edges and beyond the last chunk
// included; keeps every chunk non-empty and under two chunkSizes; shares
// the chunks it did not edit, so a pod event copies a chunk an edit at
// most; and never writes to the chunks it was given.
func TestPatchChunksMatchesFlat(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	el := func() nft.Element {
		return nft.Element{Addr: netip.AddrFrom4([4]byte{10, 0, byte(r.IntN(16)), byte(r.IntN(256))}), Proto: nft.ProtoTCP, Port: uint16(80 + r.IntN(3))}
	}
	uniq := func(n int) []nft.Element {
		var out []nft.Element
		for range n {
			out = append(out, el())
		}
		slices.SortFunc(out, compareElements)
		return slices.CompactFunc(out, func(a, b nft.Element) bool { return compareElements(a, b) == 0 })
	}
	for i := range 400 {
		var elems, removed, added []nft.Element
		switch i % 4 {
		case 0: // a pod event: a few edits in a large set
			elems, removed, added = uniq(r.IntN(6000)), uniq(r.IntN(4)), uniq(r.IntN(4))
		case 1: // a burst that grows chunks past twice their size
			elems, removed, added = uniq(r.IntN(3000)), uniq(r.IntN(50)), uniq(r.IntN(5000))
		case 2: // most of the set goes
			elems = uniq(r.IntN(3000))
			removed, added = slices.Clone(elems[:r.IntN(len(elems)+1)]), uniq(r.IntN(3))
		default: // edits exactly at the chunk edges, and none at all
			elems = uniq(r.IntN(3000))
			for j := chunkSize - 1; j < len(elems); j += chunkSize {
				if r.IntN(2) == 0 {
					removed = append(removed, elems[j])
				} else if j+1 < len(elems) {
					removed = append(removed, elems[j+1])
				}
			}
		}
		chunks := chunked(elems)
		before := make([][]nft.Element, len(chunks))
		for j, c := range chunks {
			before[j] = slices.Clone(c)
		}
		got := patchChunks(chunks, removed, added)
		want := patchSorted(elems, removed, added)
		if joined := slices.Concat(got...); !slices.Equal(joined, want) {
			t.Fatalf("case %d: patchChunks of %d elements (-%d +%d) holds %d elements, want %d", i, len(elems), len(removed), len(added), len(joined), len(want))
		}
		for j, c := range got {
			if len(c) == 0 || len(c) >= 2*chunkSize {
				t.Fatalf("case %d: chunk %d holds %d elements, want 1 to %d", i, j, len(c), 2*chunkSize-1)
			}
		}
		for j := range chunks {
			if !slices.Equal(chunks[j], before[j]) {
				t.Fatalf("case %d: chunk %d of the input was modified", i, j)
			}
		}
		made := 0
		for _, c := range got {
			if !slices.ContainsFunc(chunks, func(o []nft.Element) bool { return &o[0] == &c[0] }) {
				made++
			}
		}
		if i%4 == 0 && made > len(removed)+len(added) {
			t.Fatalf("case %d: %d edits made %d new chunks of %d: each edit of a pod event copies one chunk at most", i, len(removed)+len(added), made, len(got))
		}
		for _, e := range uniq(20) {
			_, in := slices.BinarySearchFunc(want, e, compareElements)
			if searchChunks(got, e) != in {
				t.Fatalf("case %d: searchChunks(%v) = %v, want %v", i, e, !in, in)
			}
		}
	}
}

// TestRangeEditsAreTheDiff: whatever sequence of addresses addAddr and
// removeAddr take in and out of a peer set's ranges, in any order, the
// edits they record are exactly the ranges the first list has and the
// last has not, and the reverse: the exact patch the writer trusts.
func TestRangeEditsAreTheDiff(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	addr := func() netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 0, byte(r.IntN(64))}) }
	for i := range 3000 {
		var start []nft.Element
		for range r.IntN(40) {
			start = addAddr(start, addr(), nil)
		}
		cur, edits := slices.Clone(start), &rangeEdits{}
		for range 1 + r.IntN(12) {
			if r.IntN(2) == 0 {
				cur = addAddr(cur, addr(), edits)
			} else {
				cur = removeAddr(cur, addr(), edits)
			}
		}
		had, has := map[nft.Element]bool{}, map[nft.Element]bool{}
		for _, el := range start {
			had[el] = true
		}
		for _, el := range cur {
			has[el] = true
		}
		for el := range had {
			if !has[el] != edits.removed[el] {
				t.Fatalf("case %d: %v went=%v, recorded removed=%v", i, el, !has[el], edits.removed[el])
			}
		}
		for el := range has {
			if !had[el] != edits.added[el] {
				t.Fatalf("case %d: %v came=%v, recorded added=%v", i, el, !had[el], edits.added[el])
			}
		}
		for el := range edits.removed {
			if !had[el] || has[el] {
				t.Fatalf("case %d: recorded removed %v, which the first list has=%v and the last has=%v", i, el, had[el], has[el])
			}
		}
		for el := range edits.added {
			if had[el] || !has[el] {
				t.Fatalf("case %d: recorded added %v, which the first list has=%v and the last has=%v", i, el, had[el], has[el])
			}
		}
	}
}
