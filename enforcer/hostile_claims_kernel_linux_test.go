//go:build linux

package enforcer

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"go4.org/netipx"

	"github.com/nftpolicy/nftpolicy/internal/testns"
	"github.com/nftpolicy/nftpolicy/nft"
)

// The claims world (hostile_claims_world_test.go) on the kernel: each
// step's Compiler.Delta is written to a throwaway network namespace
// (WriteDeltaAt, the first table whole), the kernel must take it, hold
// the compiled table afterwards (Conn.Drift), and `nft list set` of every
// peer set (interval sets whose ranges touch 0.0.0.0, 255.255.255.255, ::
// and ffff:…:ffff, merged and split as pods come and go) must show
// exactly the addresses of the set: a second reader, not the writer's own
// decoder.

// hcKernelAddrs reads the interval set name of netns with nft -j.
func hcKernelAddrs(t *testing.T, netns, name string) *netipx.IPSet {
	t.Helper()
	var b netipx.IPSetBuilder
	for _, e := range kernelSetElements(t, netns, name) {
		if err := addJSONElement(&b, e); err != nil {
			t.Fatalf("set %s: element %s: %v", name, e, err)
		}
	}
	s, err := b.IPSet()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// kernelSetElements lists the elements of set name in our table of netns
// as `nft -j list set` gives them: a second reader, not our decoder.
func kernelSetElements(t *testing.T, netns, name string) []json.RawMessage {
	t.Helper()
	out := testns.Nft(t, netns, "", "-j", "list", "set", "inet", DefaultTable, name)
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("nft -j list set %s: %v\n%s", name, err, out)
	}
	var elems []json.RawMessage
	for _, obj := range doc.Nftables {
		raw, ok := obj["set"]
		if !ok {
			continue
		}
		var set struct {
			Elem []json.RawMessage `json:"elem"`
		}
		if err := json.Unmarshal(raw, &set); err != nil {
			t.Fatalf("nft -j list set %s: %v", name, err)
		}
		elems = append(elems, set.Elem...)
	}
	return elems
}

func hcModelAddrs(s *nft.Set) *netipx.IPSet {
	var b netipx.IPSetBuilder
	for _, e := range s.Elements {
		if e.Last.IsValid() {
			b.AddRange(netipx.IPRangeFrom(e.Addr, e.Last))
		} else {
			b.Add(e.Addr)
		}
	}
	s2, _ := b.IPSet()
	return s2
}

func TestHostileClaimsKernelWorld(t *testing.T) {
	testns.RequireRoot(t, "nft", "ip")
	for _, seed := range []uint64{3, 8} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			ns := testns.New(t, "hcl")
			conn, err := nft.Open(ns)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			w := newHCWorld(seed)
			inc := NewCompiler(Options{Node: testNode, DenyUnknown: seed%2 == 0})
			var prev *nft.Table
			for step := range 80 {
				event := "initial"
				if step > 0 {
					event = w.step()
				}
				where := fmt.Sprintf("seed %d step %d (%s)", seed, step, event)
				got, _ := inc.Compile(w.snapshot(), DefaultPriority)
				if prev == nil {
					if _, err := conn.Apply(got); err != nil {
						t.Fatalf("%s: the kernel refuses the table: %v", where, err)
					}
				} else {
					d := inc.Delta()
					if _, err := conn.WriteDeltaAt(d, got, 0); err != nil {
						t.Fatalf("%s: the kernel refuses the delta: %v\n%.4000s", where, err, nft.RenderDelta(d, got))
					}
				}
				if drift, err := conn.Drift(got); err != nil || drift != "" {
					t.Fatalf("%s: the kernel drifts from the table: %q, %v", where, drift, err)
				}
				if step%5 == 0 {
					for _, s := range got.Sets {
						if !strings.HasPrefix(s.Name, "peers-") {
							continue
						}
						if k, m := hcKernelAddrs(t, ns, s.Name), hcModelAddrs(s); !k.Equal(m) {
							t.Fatalf("%s: nft list set %s shows %v, the table %v", where, s.Name, k.Ranges(), m.Ranges())
						}
					}
				}
				prev = got
			}
		})
	}
}

// TestHostileClaimsKernelDenseRanges: the dense ranges world
// (hostile_claims_ranges_test.go), every peer set patched, on the kernel.
func TestHostileClaimsKernelDenseRanges(t *testing.T) {
	ns, conn := openKernelNS(t, "hcr")
	step := 0
	runDenseRanges(t, 11, 100, func(d *nft.Delta, got *nft.Table, where string) {
		if d == nil {
			if _, err := conn.Apply(got); err != nil {
				t.Fatalf("%s: the kernel refuses the table: %v", where, err)
			}
		} else if _, err := conn.WriteDeltaAt(d, got, 0); err != nil {
			t.Fatalf("%s: the kernel refuses the delta: %v\n%.4000s", where, err, nft.RenderDelta(d, got))
		}
		if drift, err := conn.Drift(got); err != nil || drift != "" {
			t.Fatalf("%s: the kernel drifts from the table: %q, %v", where, drift, err)
		}
		if step++; step%10 == 0 {
			for _, s := range got.Sets {
				if strings.HasPrefix(s.Name, "peers-") {
					if k, m := hcKernelAddrs(t, ns, s.Name), hcModelAddrs(s); !k.Equal(m) {
						t.Fatalf("%s: nft list set %s shows %v, the table %v", where, s.Name, k.Ranges(), m.Ranges())
					}
				}
			}
		}
	})
}

// openKernelNS makes a network namespace named after prefix, gone when
// the test ends, and a connection to its nftables, closed then.
func openKernelNS(t *testing.T, prefix string) (string, *nft.Conn) {
	t.Helper()
	testns.RequireRoot(t, "nft", "ip")
	ns := testns.New(t, prefix)
	conn, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return ns, conn
}

// addJSONElement adds to b the addresses of one element of an address
// set as `nft -j` lists it: an address, a range or a prefix.
func addJSONElement(b *netipx.IPSetBuilder, e json.RawMessage) error {
	var s string
	if json.Unmarshal(e, &s) == nil {
		b.Add(netip.MustParseAddr(s))
		return nil
	}
	var r struct {
		Range  []string `json:"range"`
		Prefix *struct {
			Addr string `json:"addr"`
			Len  int    `json:"len"`
		} `json:"prefix"`
	}
	if err := json.Unmarshal(e, &r); err != nil {
		return err
	}
	switch {
	case len(r.Range) == 2:
		b.AddRange(netipx.IPRangeFrom(netip.MustParseAddr(r.Range[0]), netip.MustParseAddr(r.Range[1])))
	case r.Prefix != nil:
		b.AddPrefix(netip.PrefixFrom(netip.MustParseAddr(r.Prefix.Addr), r.Prefix.Len))
	default:
		return fmt.Errorf("no address, range or prefix")
	}
	return nil
}
