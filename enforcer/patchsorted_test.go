package enforcer

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/nftpolicy/nftpolicy/nft"
)

// TestPatchSortedMatchesNaive: patchSorted against a plain set
// computation, with removed elements that are not there, added ones that
// already are, one element in both, and empty lists.
func TestPatchSortedMatchesNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	el := func() nft.Element {
		return nft.Element{Addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(r.IntN(40))}), Proto: nft.ProtoTCP, Port: uint16(80 + r.IntN(3))}
	}
	uniq := func(n int) []nft.Element {
		var out []nft.Element
		for range n {
			out = append(out, el())
		}
		slices.SortFunc(out, compareElements)
		return slices.CompactFunc(out, func(a, b nft.Element) bool { return compareElements(a, b) == 0 })
	}
	for i := 0; i < 20000; i++ {
		elems, removed, added := uniq(r.IntN(60)), uniq(r.IntN(10)), uniq(r.IntN(10))
		want := map[nft.Element]bool{}
		for _, e := range elems {
			want[e] = true
		}
		for _, e := range removed {
			delete(want, e)
		}
		for _, e := range added {
			want[e] = true
		}
		got := patchSorted(elems, removed, added)
		wantList := slices.SortedFunc(func(yield func(nft.Element) bool) {
			for e := range want {
				if !yield(e) {
					return
				}
			}
		}, compareElements)
		if !slices.Equal(got, wantList) {
			t.Fatalf("patchSorted(%v, -%v, +%v) = %v, want %v", elems, removed, added, got, wantList)
		}
	}
}
