package enforcer

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"go4.org/netipx"

	"github.com/nftpolicy/nftpolicy/nft"
)

// builderAndSorted is the oracle's side: what an IPSetBuilder makes of
// blocks (if any) and addrs, and addrs sorted without repeats, as
// computePeers hands them to mergeAddrs.
func builderAndSorted(t *testing.T, blocks *netipx.IPSet, addrs []netip.Addr) (*netipx.IPSet, []netip.Addr) {
	t.Helper()
	var b netipx.IPSetBuilder
	if blocks != nil {
		b.AddSet(blocks)
	}
	for _, a := range addrs {
		b.Add(a)
	}
	set, err := b.IPSet()
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	return set, slices.Compact(addrs)
}

// TestMergeAddrsIsRangesOf holds mergeAddrs to what an IPSetBuilder
// makes of the same addresses (rangesOf), on random lists of both
// families that run into each other, repeat, and touch the ends of the
// address space.
func TestMergeAddrsIsRangesOf(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 31))
	edges := []netip.Addr{
		netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("0.0.0.1"),
		netip.MustParseAddr("255.255.255.254"), netip.MustParseAddr("255.255.255.255"),
		netip.MustParseAddr("::"), netip.MustParseAddr("::1"),
		netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe"),
		netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
	}
	for round := range 3000 {
		var addrs []netip.Addr
		n := rng.IntN(60)
		if round%100 == 0 {
			n = 5000
		}
		for range n {
			switch rng.IntN(4) {
			case 0:
				addrs = append(addrs, edges[rng.IntN(len(edges))])
			case 1: // a narrow v6 block, so runs form
				addrs = append(addrs, netip.AddrFrom16([16]byte{15: byte(rng.IntN(40)), 14: byte(rng.IntN(2)), 0: 0xfd}))
			default: // a narrow v4 block
				addrs = append(addrs, netip.AddrFrom4([4]byte{10, 0, byte(rng.IntN(3)), byte(rng.IntN(256))}))
			}
		}
		set, addrs := builderAndSorted(t, nil, addrs)
		for _, f := range families {
			want := rangesOf(set, f)
			if got := mergeAddrs(addrs, f); !slices.Equal(got, want) {
				t.Fatalf("round %d, family %v, addresses %v:\nmergeAddrs %v\nrangesOf   %v", round, f, addrs, got, want)
			}
		}
	}
	if got := mergeAddrs(nil, nft.IPv4); got != nil {
		t.Errorf("mergeAddrs of nothing = %v, want nil", got)
	}
}

// TestMergeRangesWithBlocksIsTheBuilder: the ranges of pods' addresses
// merged with those of ipBlocks (with excepts) by mergeRanges, as
// computePeers merges them, are what an
// IPSetBuilder given both makes, on random blocks that overlap, touch,
// and hold or border the addresses.
func TestMergeRangesWithBlocksIsTheBuilder(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 14))
	prefix := func() netip.Prefix {
		if rng.IntN(3) == 0 {
			a := netip.AddrFrom16([16]byte{0: 0xfd, 14: byte(rng.IntN(2)), 15: byte(rng.IntN(64))})
			return netip.PrefixFrom(a, 120+rng.IntN(9)).Masked()
		}
		switch rng.IntN(8) {
		case 0:
			return netip.MustParsePrefix("0.0.0.0/0")
		case 1:
			return netip.MustParsePrefix("255.255.255.254/31")
		}
		a := netip.AddrFrom4([4]byte{10, 0, byte(rng.IntN(3)), byte(rng.IntN(256))})
		return netip.PrefixFrom(a, 22+rng.IntN(11)).Masked()
	}
	for round := range 3000 {
		var blocks netipx.IPSetBuilder
		for range rng.IntN(4) {
			blocks.AddPrefix(prefix())
		}
		for range rng.IntN(3) {
			blocks.RemovePrefix(prefix())
		}
		blockSet, err := blocks.IPSet()
		if err != nil {
			t.Fatal(err)
		}
		var addrs []netip.Addr
		for range rng.IntN(80) {
			if rng.IntN(3) == 0 {
				addrs = append(addrs, netip.AddrFrom16([16]byte{0: 0xfd, 14: byte(rng.IntN(2)), 15: byte(rng.IntN(64))}))
			} else {
				addrs = append(addrs, netip.AddrFrom4([4]byte{10, 0, byte(rng.IntN(3)), byte(rng.IntN(256))}))
			}
		}
		set, addrs := builderAndSorted(t, blockSet, addrs)
		for _, f := range families {
			want := rangesOf(set, f)
			if got := mergeRanges(mergeAddrs(addrs, f), rangesOf(blockSet, f)); !slices.Equal(got, want) {
				t.Fatalf("round %d, family %v, blocks %v, addresses %v:\nmergeRanges %v\nthe builder %v", round, f, blockSet.Prefixes(), addrs, got, want)
			}
		}
	}
}

// BenchmarkComputePeers times building one peer list of 150k pods'
// addresses, most in runs, the way computePeers does, against an
// IPSetBuilder as before.
func BenchmarkComputePeers(b *testing.B) {
	var addrs []netip.Addr
	for i := range 150000 {
		if i%7 == 0 {
			continue // gaps: runs, not one range
		}
		addrs = append(addrs, netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
	}
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	b.Run("sorted", func(b *testing.B) {
		b.ReportAllocs()
		scratch := make([]netip.Addr, 0, len(addrs))
		for b.Loop() {
			s := append(scratch[:0], addrs...)
			slices.SortFunc(s, netip.Addr.Compare)
			s = slices.Compact(s)
			for _, f := range families {
				mergeAddrs(s, f)
			}
		}
	})
	b.Run("builder", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var all netipx.IPSetBuilder
			for _, a := range addrs {
				all.Add(a)
			}
			set, _ := all.IPSet()
			for _, f := range families {
				rangesOf(set, f)
			}
		}
	})
}
