//go:build linux

package nft

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// classMapTable is a table with an address interval verdict map per
// family, as the tier chains use one (enforcer's layoutGroup): pieces
// that touch, each sending its addresses to another chain, looked up by a
// rule. pieces gives each piece's first address offset and the chain it
// goes to; each piece ends where the next starts (the last at top).
func classMapTable(pieces []classPiece, top bool) *Table {
	t := &Table{Family: FamilyInet, Name: "nftpolicy"}
	for i := 0; i < 4; i++ {
		t.Chains = append(t.Chains, &Chain{Name: fmt.Sprintf("class-%d", i), Rules: []Rule{{Exprs: []Expr{Verdict{Kind: Return}}}}})
	}
	entry := &Chain{Name: "entry"}
	for _, f := range []IPFamily{IPv4, IPv6} {
		base, last := netip.MustParseAddr("10.0.0.0"), netip.MustParseAddr("255.255.255.255")
		key, name := KeyIPv4, "classes-v4"
		if f == IPv6 {
			base, last = netip.MustParseAddr("fd00::"), netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")
			key, name = KeyIPv6, "classes-v6"
		}
		at := func(off int) netip.Addr {
			a := base
			for j := 0; j < off; j++ {
				a = a.Next()
			}
			return a
		}
		s := &Set{Name: name, Key: key, Interval: true, Verdict: true}
		for i, p := range pieces {
			e := Element{Addr: at(p.first), Verdict: Verdict{Kind: Goto, Chain: fmt.Sprintf("class-%d", p.chain)}}
			end := last
			if i+1 < len(pieces) {
				end = at(pieces[i+1].first).Prev()
			} else if !top {
				end = at(p.first + 3)
			}
			if end != e.Addr {
				e.Last = end
			}
			s.Elements = append(s.Elements, e)
		}
		t.Sets = append(t.Sets, s)
		entry.Rules = append(entry.Rules, Rule{Exprs: []Expr{AddrVmap{Family: f, Field: Daddr, Map: name}}})
	}
	t.Chains = append(t.Chains, entry)
	return t
}

type classPiece struct{ first, chain int }

// TestKernelAddressIntervalVmap writes address interval verdict maps whose
// pieces touch (an end element and a start element at one address), up
// to the family's last address or not, and requires the kernel to hold
// what nft -f of the rendered table holds; then updates them in place:
// a piece that changes chain, one that splits, two that merge, and back,
// with no drift after each; and the maps and their chains deleted in one
// update (the map's elements goto the chains that go with it).
func TestKernelAddressIntervalVmap(t *testing.T) {
	testns.RequireRoot(t)
	steps := [][]classPiece{
		{{0, 0}, {1, 1}, {5, 2}, {6, 0}, {20, 3}},
		{{0, 0}, {1, 2}, {5, 2}, {6, 0}, {20, 3}},         // a piece changes chain
		{{0, 0}, {1, 2}, {3, 1}, {5, 2}, {6, 0}, {20, 3}}, // one splits
		{{0, 0}, {6, 0}, {20, 3}},                         // pieces merge away
		{{0, 1}},                                          // one piece
	}
	for _, top := range []bool{false, true} {
		t.Run(fmt.Sprintf("top=%v", top), func(t *testing.T) {
			first := classMapTable(steps[0], top)
			if err := first.Validate(); err != nil {
				t.Fatalf("table: %v", err)
			}
			testns.AssertSameAsNft(t, first.Name, func(netns string) error {
				c, err := Open(netns)
				if err != nil {
					return err
				}
				defer c.Close()
				if _, err := c.Apply(first); err != nil {
					return err
				}
				if drift, err := c.Drift(first); err != nil || drift != "" {
					t.Errorf("drift right after Apply: %q %v", drift, err)
				}
				// The maps and their chains go, and come back: a map
				// whose elements goto chains that go with it.
				bare := &Table{Family: FamilyInet, Name: "nftpolicy"}
				if _, err := c.Update(first, bare); err != nil {
					return fmt.Errorf("update to no maps: %w", err)
				}
				if drift, err := c.Drift(bare); err != nil || drift != "" {
					t.Errorf("drift after the maps went: %q %v", drift, err)
				}
				prev := bare
				for i, step := range append(steps, steps[0]) {
					next := classMapTable(step, top)
					if _, err := c.Update(prev, next); err != nil {
						return fmt.Errorf("update %d: %w", i, err)
					}
					if drift, err := c.Drift(next); err != nil || drift != "" {
						t.Errorf("drift after update %d: %q %v", i, drift, err)
					}
					prev = next
				}
				return nil
			}, Render(first))
		})
	}
}
