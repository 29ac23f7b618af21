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

// TestHostileNSPatchEditRangesWide holds editRanges (the one-pass patch
// of a peer set, whose removed and added lists become the exact update)
// to the true difference where TestEditRangesIsTheDiff does not go: sets
// with wide ranges (an ipBlock's /0, /1, /8 minus excepts, as pod
// addresses sit beside and inside them), edits on the very first and last
// address of the family and of each range and just outside it, so that
// an edit splits a range at its end, shaves the range 0.0.0.0-… or
// …-255.255.255.255, or joins two ranges into one.
func TestHostileNSPatchEditRangesWide(t *testing.T) {
	r := rand.New(rand.NewPCG(77, 78))
	var edgeEdits, merges, splits int // cases of interest, to hold the generator to them
	for i := range 4000 {
		v6 := r.IntN(2) == 0
		f, bits := nft.IPv4, 32
		zero := netip.IPv4Unspecified()
		if v6 {
			f, bits, zero = nft.IPv6, 128, netip.IPv6Unspecified()
		}
		top := netipx.PrefixLastIP(netip.PrefixFrom(zero, 0))
		// An address near one of a few anchors: the edges, the middle
		// of the space, 10.0.0.0 / fd00::.
		anchors := []netip.Addr{zero, top, netipx.PrefixLastIP(netip.PrefixFrom(zero, 1)), netipx.PrefixLastIP(netip.PrefixFrom(zero, 1)).Next()}
		if v6 {
			anchors = append(anchors, netip.MustParseAddr("fd00::"))
		} else {
			anchors = append(anchors, netip.MustParseAddr("10.0.0.0"))
		}
		near := func() netip.Addr {
			a := anchors[r.IntN(len(anchors))]
			for range r.IntN(6) {
				var n netip.Addr
				if r.IntN(2) == 0 {
					n = a.Next()
				} else {
					n = a.Prev()
				}
				if n.IsValid() {
					a = n
				}
			}
			return a
		}
		var start netipx.IPSetBuilder
		for range r.IntN(6) {
			switch r.IntN(3) {
			case 0: // a wide prefix
				l := r.IntN(bits + 1)
				start.AddPrefix(netip.PrefixFrom(near(), l).Masked())
			case 1: // a short range
				a := near()
				b := a
				for range r.IntN(4) {
					if n := b.Next(); n.IsValid() {
						b = n
					}
				}
				start.AddRange(netipx.IPRangeFrom(a, b))
			default:
				start.Add(near())
			}
		}
		for range r.IntN(3) { // excepts
			start.RemovePrefix(netip.PrefixFrom(near(), bits-r.IntN(4)).Masked())
		}
		startSet, _ := start.IPSet()
		before := rangesOf(startSet, f)
		// Edits: range ends and their neighbours, and anchors.
		var cands []netip.Addr
		for _, el := range before {
			for _, a := range []netip.Addr{el.Addr, el.Addr.Prev(), lastOf(el), lastOf(el).Next()} {
				if a.IsValid() {
					cands = append(cands, a)
				}
			}
		}
		for range 4 {
			cands = append(cands, near())
		}
		want := start.Clone()
		var gone, came []netip.Addr
		for range r.IntN(10) {
			a := cands[r.IntN(len(cands))]
			if slices.Contains(gone, a) || slices.Contains(came, a) {
				continue
			}
			// Mostly true edits; now and then a no-op one.
			if startSet.Contains(a) != (r.IntN(8) == 0) {
				gone = append(gone, a)
				want.Remove(a)
			} else {
				came = append(came, a)
				want.Add(a)
			}
		}
		slices.SortFunc(gone, netip.Addr.Compare)
		slices.SortFunc(came, netip.Addr.Compare)
		wantSet, _ := want.IPSet()
		after := rangesOf(wantSet, f)
		checkEditRanges(t, fmt.Sprintf("case %d", i), before, gone, came, after)
		if slices.ContainsFunc(append(slices.Clone(gone), came...), func(a netip.Addr) bool { return a == zero || a == top }) && len(before) != 0 && !slices.Equal(before, after) {
			edgeEdits++
		}
		switch {
		case len(after) < len(before) && len(came) > 0:
			merges++
		case len(after) > len(before) && len(gone) > 0:
			splits++
		}
	}
	t.Logf("%d cases editing the first or last address of the family, %d merging ranges, %d splitting", edgeEdits, merges, splits)
	if edgeEdits < 100 || merges < 100 || splits < 100 {
		t.Fatalf("the generator misses its cases: %d edge edits, %d merges, %d splits", edgeEdits, merges, splits)
	}
}
