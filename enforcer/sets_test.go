package enforcer

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/nftpolicy/nftpolicy/nft"
)

func TestPatchSorted(t *testing.T) {
	el := func(n byte) nft.Element {
		return nft.Element{Addr: netip.AddrFrom4([4]byte{10, 0, 0, n}), Proto: nft.ProtoTCP, Port: 80}
	}
	list := func(ns ...byte) []nft.Element {
		var out []nft.Element
		for _, n := range ns {
			out = append(out, el(n))
		}
		return out
	}
	for _, tc := range []struct {
		name                  string
		elems, removed, added []nft.Element
		want                  []nft.Element
	}{
		{"add and remove", list(2, 4, 6), list(4), list(1, 5, 9), list(1, 2, 5, 6, 9)},
		{"empty", nil, nil, list(3), list(3)},
		{"remove all", list(1, 2), list(1, 2), nil, nil},
		{"removed absent, added present", list(2, 4), list(3, 4), list(2, 5), list(2, 5)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := slices.Clone(tc.elems)
			got := patchSorted(tc.elems, tc.removed, tc.added)
			if !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			if !slices.Equal(before, tc.elems) {
				t.Errorf("elems edited: %v", tc.elems)
			}
		})
	}
}

// PeerSetComment names the comment the compiler gives a rule's peer sets:
// tools outside the compiler find the set by it.
func TestPeerSetCommentNamesTheSet(t *testing.T) {
	from := peers(nsPeer("y"))
	snap := cluster(policy("x", "allow-y", ingressRule(from, port(tcp, 80))))
	table := mustCompile(t, snap)
	want := PeerSetComment("x", from)
	found := 0
	for _, s := range table.Sets {
		if s.Comment == want {
			found++
		}
	}
	if found != 2 { // one set per family
		t.Errorf("%d sets have the comment %q, want 2", found, want)
	}
}
