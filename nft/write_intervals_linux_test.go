//go:build linux

package nft

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// hostileRanges makes n ranges of family f, spaced apart, alternating
// single addresses and short ranges; atZero starts the first at the zero
// address, toTop ends the last at the family's last address.
func hostileRanges(f IPFamily, n int, atZero, toTop bool) []Element {
	base := netip.MustParseAddr("10.0.0.0")
	last := netip.MustParseAddr("255.255.255.255")
	if f == IPv6 {
		base = netip.MustParseAddr("fd00::")
		last = netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")
	}
	var out []Element
	a := base
	for i := 0; i < n; i++ {
		if i == 0 && atZero {
			z := netip.IPv4Unspecified()
			if f == IPv6 {
				z = netip.IPv6Unspecified()
			}
			out = append(out, Element{Addr: z, Last: z.Next().Next()})
			continue
		}
		if i == n-1 && toTop {
			out = append(out, Element{Addr: last.Prev().Prev(), Last: last})
			continue
		}
		if i%2 == 0 {
			out = append(out, Element{Addr: a})
		} else {
			end := a
			for j := 0; j < 5; j++ {
				end = end.Next()
			}
			out = append(out, Element{Addr: a, Last: end})
		}
		for j := 0; j < 16; j++ {
			a = a.Next()
		}
	}
	return out
}

// TestKernelLargeIntervalSetsSplitAcrossMessages writes interval
// sets around and well past the message size (512 elements, an interval
// being two), IPv4 and IPv6, with and without a range at the zero address
// and at the last address, and requires the kernel to hold exactly what
// nft -f of the rendered text holds, and Drift to see nothing.
func TestKernelLargeIntervalSetsSplitAcrossMessages(t *testing.T) {
	testns.RequireRoot(t)
	for _, n := range []int{1, 255, 256, 257, 511, 512, 513, 1024, 1025, 3001} {
		for _, atZero := range []bool{false, true} {
			for _, toTop := range []bool{false, true} {
				if n == 1 && atZero && toTop {
					continue
				}
				name := fmt.Sprintf("n=%d,zero=%v,top=%v", n, atZero, toTop)
				t.Run(name, func(t *testing.T) {
					table := &Table{Family: FamilyInet, Name: "nftpolicy", Sets: []*Set{
						{Name: "big-v4", Key: KeyIPv4, Interval: true, Elements: hostileRanges(IPv4, n, atZero, toTop)},
						{Name: "big-v6", Key: KeyIPv6, Interval: true, Elements: hostileRanges(IPv6, n, atZero, toTop)},
					}}
					if err := table.Validate(); err != nil {
						t.Fatalf("table: %v", err)
					}
					testns.AssertSameAsNft(t, table.Name, func(netns string) error {
						c, err := Open(netns)
						if err != nil {
							return err
						}
						defer c.Close()
						if _, err := c.Apply(table); err != nil {
							return err
						}
						drift, err := c.Drift(table)
						if err != nil {
							return err
						}
						if drift != "" {
							t.Errorf("drift right after Apply: %s", drift)
						}
						// And a delta to half of it and back.
						half := &Table{Family: FamilyInet, Name: "nftpolicy", Sets: []*Set{
							{Name: "big-v4", Key: KeyIPv4, Interval: true, Elements: table.Sets[0].Elements[n/2:]},
							{Name: "big-v6", Key: KeyIPv6, Interval: true, Elements: table.Sets[1].Elements[:(n+1)/2]},
						}}
						if _, err := c.Update(table, half); err != nil {
							return fmt.Errorf("update to half: %w", err)
						}
						if drift, err := c.Drift(half); err != nil || drift != "" {
							t.Errorf("drift after Update to half: %q %v", drift, err)
						}
						if _, err := c.Update(half, table); err != nil {
							return fmt.Errorf("update back: %w", err)
						}
						if drift, err := c.Drift(table); err != nil || drift != "" {
							t.Errorf("drift after Update back: %q %v", drift, err)
						}
						return nil
					}, Render(table))
				})
			}
		}
	}
}
