package enforcer

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"go4.org/netipx"

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

// TestEditRangesIsTheDiff: whatever addresses a patch takes out of a peer
// set's ranges and puts in, at the edges of the address space too,
// editRanges gives the ranges rangesOf would build of the result, and
// exactly the ranges the first list has and the second has not, and the
// reverse, sorted: the exact patch the writer trusts.
func TestEditRangesIsTheDiff(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 3000 {
		// Addresses of a small space (so that ranges touch and split)
		// at the low edge, the middle or the high edge of IPv4 or IPv6.
		v6 := r.IntN(2) == 0
		edge := r.IntN(3)
		addr := func() netip.Addr {
			n := byte(r.IntN(48))
			b := [16]byte{}
			switch edge {
			case 1:
				b[0], b[15] = 10, n
			case 2:
				for k := range b {
					b[k] = 0xff
				}
				b[15] = 0xff - n
			default:
				b[15] = n
			}
			if v6 {
				return netip.AddrFrom16(b)
			}
			return netip.AddrFrom4([4]byte{b[0], b[1], b[2], b[15]})
		}
		var start netipx.IPSetBuilder
		held := map[netip.Addr]bool{}
		for range r.IntN(40) {
			a := addr()
			start.Add(a)
			held[a] = true
		}
		var gone, came []netip.Addr
		want := start.Clone()
		for range r.IntN(20) {
			a := addr()
			if slices.Contains(gone, a) || slices.Contains(came, a) {
				continue
			}
			// Mostly true edits; sometimes an address gone that is not
			// held, or one come that already is, which change nothing.
			if held[a] != (r.IntN(8) == 0) {
				gone = append(gone, a)
				want.Remove(a)
			} else {
				came = append(came, a)
				want.Add(a)
			}
		}
		slices.SortFunc(gone, netip.Addr.Compare)
		slices.SortFunc(came, netip.Addr.Compare)
		f := nft.IPv4
		if v6 {
			f = nft.IPv6
		}
		startSet, _ := start.IPSet()
		wantSet, _ := want.IPSet()
		before, after := rangesOf(startSet, f), rangesOf(wantSet, f)
		checkEditRanges(t, fmt.Sprintf("case %d", i), before, gone, came, after)
	}
}

// checkEditRanges fails t unless editRanges(before, gone, came) gives
// after, which rangesOf built, and as its exact change the ranges before
// has and after has not, and the reverse (elementDiff), in order.
func checkEditRanges(t *testing.T, where string, before []nft.Element, gone, came []netip.Addr, after []nft.Element) {
	t.Helper()
	got, removed, added := editRanges(before, gone, came)
	if !slices.Equal(got, after) || (got == nil) != (after == nil) {
		t.Fatalf("%s: editRanges(%v, gone %v, came %v) = %v, want %v", where, before, gone, came, got, after)
	}
	wantRemoved, wantAdded := elementDiff(before, after)
	if !slices.Equal(removed, wantRemoved) || !slices.Equal(added, wantAdded) {
		t.Fatalf("%s: editRanges(%v, gone %v, came %v) removed %v added %v, want removed %v added %v", where, before, gone, came, removed, added, wantRemoved, wantAdded)
	}
}

// TestMarkHeldFindsWhatRangesHold: whether it searches for each address
// (few) or walks both lists (many), markHeld marks exactly the addresses
// the ranges hold, and leaves marks already set.
func TestMarkHeldFindsWhatRangesHold(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	addr := func() netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 0, byte(r.IntN(64))}) }
	for i := range 3000 {
		var b netipx.IPSetBuilder
		for range r.IntN(40) {
			b.Add(addr())
		}
		set, _ := b.IPSet()
		ranges := rangesOf(set, nft.IPv4)
		var addrs []netip.Addr
		for range r.IntN(48) {
			addrs = append(addrs, addr())
		}
		slices.SortFunc(addrs, netip.Addr.Compare)
		addrs = slices.Compact(addrs)
		held := make([]bool, len(addrs))
		preset := map[int]bool{}
		for k := range held {
			if r.IntN(10) == 0 {
				held[k], preset[k] = true, true
			}
		}
		markHeld(ranges, addrs, held)
		for k, ip := range addrs {
			if want := preset[k] || inRangeElements(ranges, ip); held[k] != want {
				t.Fatalf("case %d: %v in %v marked %v, want %v (%d addresses)", i, ip, ranges, held[k], want, len(addrs))
			}
		}
	}
}
