//go:build linux

package nft

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// TestHostileChunkLayoutsOnKernel: sets whose elements are in Chunks of
// sizes hostile to the writer's cutting of element messages (one element
// a chunk, chunks of 255, 256, 257, 511, 512 and 513 around the
// message and half-message sizes, an empty chunk between two others),
// exact address . protocol . port sets and interval sets alike, with the
// lowest and highest addresses of each family in them. Written whole, the
// kernel holds what the table says (Drift, and nft -f of the rendered text
// lists the same); then each is moved, by Conn.Update, to a version with
// other chunk boundaries, elements gone from and come to every part,
// the first and last elements among them; then to empty sets and back.
func TestHostileChunkLayoutsOnKernel(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	exact := func(f IPFamily, n int) []Element {
		var out []Element
		a := netip.IPv4Unspecified()
		if f == IPv6 {
			a = netip.IPv6Unspecified()
		}
		for len(out) < n {
			out = append(out, Element{Addr: a, Proto: ProtoTCP, Port: uint16(1 + r.IntN(3))})
			a = a.Next()
		}
		// The very last address too.
		last := netip.AddrFrom4([4]byte{255, 255, 255, 255})
		if f == IPv6 {
			last = netip.AddrFrom16([16]byte{0: 0xff, 1: 0xff, 2: 0xff, 3: 0xff, 4: 0xff, 5: 0xff, 6: 0xff, 7: 0xff, 8: 0xff, 9: 0xff, 10: 0xff, 11: 0xff, 12: 0xff, 13: 0xff, 14: 0xff, 15: 0xff})
		}
		return append(out, Element{Addr: last, Proto: ProtoUDP, Port: 65535})
	}
	intervals := func(n int) []Element {
		var out []Element
		a := netip.IPv4Unspecified() // the first range starts at zero: no leading end element
		for len(out) < n {
			b := a.Next()
			out = append(out, Element{Addr: a, Last: b})
			a = b.Next().Next()
		}
		// A range to the top: no end element.
		return append(out, Element{Addr: netip.MustParseAddr("255.255.255.0"), Last: netip.MustParseAddr("255.255.255.255")})
	}
	layouts := [][]int{
		{1},
		{255, 256, 257, 511, 512, 513},
		{513, 1, 512, 1, 256},
		{7, 0, 300}, // an empty chunk between two
	}
	type spec struct {
		name  string
		key   KeyType
		ivl   bool
		elems []Element
	}
	specs := []spec{
		{"np-v4", KeyIPv4ProtoPort, false, exact(IPv4, 1500)},
		{"np-v6", KeyIPv6ProtoPort, false, exact(IPv6, 1500)},
		{"peers-v4", KeyIPv4, true, intervals(1500)},
	}
	table := func(layout []int, elems [][]Element) *Table {
		t := &Table{Family: FamilyInet, Name: "nftpolicy"}
		for i, s := range specs {
			t.Sets = append(t.Sets, &Set{Name: s.name, Key: s.key, Interval: s.ivl, Chunks: hostileChunks(elems[i], layout)})
		}
		return t
	}
	flat := func(elems [][]Element) *Table {
		t := &Table{Family: FamilyInet, Name: "nftpolicy"}
		for i, s := range specs {
			t.Sets = append(t.Sets, &Set{Name: s.name, Key: s.key, Interval: s.ivl, Elements: elems[i]})
		}
		return t
	}
	base := make([][]Element, len(specs))
	for i, s := range specs {
		base[i] = s.elems
	}
	// edited drops about one element in ten, the first and the last
	// included, and adds new ones in the gaps.
	edited := func() [][]Element {
		out := make([][]Element, len(specs))
		for i, s := range specs {
			var next []Element
			for j, e := range s.elems {
				if j == 0 || j == len(s.elems)-1 || r.IntN(10) == 0 {
					continue
				}
				if !s.ivl && r.IntN(10) == 0 {
					e.Port += 100 // a different element at the same address
				}
				next = append(next, e)
			}
			out[i] = next
		}
		return out
	}
	for li, layout := range layouts {
		t.Run(fmt.Sprint(layout), func(t *testing.T) {
			first := table(layout, base)
			for _, s := range first.Sets {
				if err := s.Validate(); err != nil {
					t.Fatalf("set %s: %v", s.Name, err)
				}
			}
			if li == 1 {
				// nft, given the text, loads what Apply writes.
				testns.AssertSameAsNft(t, "nftpolicy", applyIn(first), Render(flat(base)))
			}
			_, c := openTestNS(t)
			if _, err := c.Apply(first); err != nil {
				t.Fatalf("apply: %v", err)
			}
			requireNoDrift(t, c, flat(base), "after apply")
			nextElems := edited()
			next := table(layouts[(li+1)%len(layouts)], nextElems)
			if _, err := c.Update(first, next); err != nil {
				t.Fatalf("update: %v\n%s", err, RenderDelta(Diff(first, next), next))
			}
			requireNoDrift(t, c, flat(nextElems), "after update")
			empty := table(layout, make([][]Element, len(specs)))
			if _, err := c.Update(next, empty); err != nil {
				t.Fatalf("update to empty sets: %v", err)
			}
			requireNoDrift(t, c, flat(make([][]Element, len(specs))), "after emptying")
			if _, err := c.Update(empty, first); err != nil {
				t.Fatalf("update from empty sets: %v", err)
			}
			requireNoDrift(t, c, flat(base), "after refilling")
		})
	}
}

// hostileChunks cuts elems into chunks of the sizes given, in turn; a size
// 0 makes an empty chunk.
func hostileChunks(elems []Element, sizes []int) [][]Element {
	out := [][]Element{}
	for i := 0; len(elems) > 0; i++ {
		n := min(len(elems), sizes[i%len(sizes)])
		out = append(out, slices.Clone(elems[:n]))
		elems = elems[n:]
	}
	return out
}

func requireNoDrift(t *testing.T, c *Conn, want *Table, where string) {
	t.Helper()
	if drift, err := c.Drift(want); err != nil || drift != "" {
		t.Fatalf("%s: the kernel drifts from the table: %q, %v", where, drift, err)
	}
}
