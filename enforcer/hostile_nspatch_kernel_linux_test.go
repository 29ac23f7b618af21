//go:build linux

package enforcer

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"

	"go.uber.org/zap"
	"go4.org/netipx"

	"github.com/nftpolicy/nftpolicy/internal/testns"
	"github.com/nftpolicy/nftpolicy/nft"
)

// The namespace-patch world (hostile_nspatch_world_test.go) through a
// Syncer (incremental syncs, several events each) into a throwaway
// network namespace. After every sync the kernel must hold what a FRESH
// compile of the same snapshot describes: the repo's reader (Conn.Drift
// of the fresh table) and a second reader, `nft -j list table`, whose
// chain and set names and interval-set addresses are compared with the
// fresh table's.

// npKernelTable reads table inet name of netns with nft -j: the chain
// names, and each set's addresses (sets of single addresses only; maps
// and concatenations map to nil).
func npKernelTable(t *testing.T, netns, name string) (chains []string, sets map[string]*netipx.IPSet) {
	t.Helper()
	out := testns.Nft(t, netns, "", "-j", "list", "table", "inet", name)
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("nft -j list table: %v", err)
	}
	sets = map[string]*netipx.IPSet{}
	for _, obj := range doc.Nftables {
		if raw, ok := obj["chain"]; ok {
			var c struct{ Name string }
			if err := json.Unmarshal(raw, &c); err != nil {
				t.Fatal(err)
			}
			chains = append(chains, c.Name)
			continue
		}
		for _, kind := range []string{"set", "map"} {
			raw, ok := obj[kind]
			if !ok {
				continue
			}
			var s struct {
				Name string            `json:"name"`
				Type json.RawMessage   `json:"type"`
				Elem []json.RawMessage `json:"elem"`
			}
			if err := json.Unmarshal(raw, &s); err != nil {
				t.Fatal(err)
			}
			var typ string
			if kind == "map" || json.Unmarshal(s.Type, &typ) != nil || (typ != "ipv4_addr" && typ != "ipv6_addr") {
				sets[s.Name] = nil
				continue
			}
			var b netipx.IPSetBuilder
			for _, e := range s.Elem {
				if err := addJSONElement(&b, e); err != nil {
					t.Fatalf("set %s: element %s: %v", s.Name, e, err)
				}
			}
			set, err := b.IPSet()
			if err != nil {
				t.Fatal(err)
			}
			sets[s.Name] = set
		}
	}
	return chains, sets
}

// npCheckKernel fails unless netns holds what fresh describes.
func npCheckKernel(t *testing.T, s *Syncer, netns string, fresh *nft.Table, where string) {
	t.Helper()
	if d, err := s.conn.Drift(fresh); err != nil || d != "" {
		t.Fatalf("%s: the kernel differs from a fresh compile (Conn.Drift): %q, %v", where, d, err)
	}
	chains, sets := npKernelTable(t, netns, fresh.Name)
	var wantChains []string
	for _, c := range fresh.Chains {
		wantChains = append(wantChains, c.Name)
	}
	slices.Sort(chains)
	slices.Sort(wantChains)
	if !slices.Equal(chains, wantChains) {
		t.Fatalf("%s: nft -j lists chains %q, a fresh compile has %q", where, chains, wantChains)
	}
	var wantSets []string
	for _, fs := range fresh.Sets {
		wantSets = append(wantSets, fs.Name)
		if fs.Interval && !fs.Verdict && (fs.Key == addrKey(nft.IPv4) || fs.Key == addrKey(nft.IPv6)) {
			if k, m := sets[fs.Name], hcModelAddrs(fs); k == nil || !k.Equal(m) {
				var kr any
				if k != nil {
					kr = k.Ranges()
				}
				t.Fatalf("%s: nft -j list table shows set %s (%s) as %v, a fresh compile %v", where, fs.Name, fs.Comment, kr, m.Ranges())
			}
		}
	}
	gotSets := slices.Sorted(maps.Keys(sets))
	slices.Sort(wantSets)
	if !slices.Equal(gotSets, wantSets) {
		t.Fatalf("%s: nft -j lists sets %q, a fresh compile has %q", where, gotSets, wantSets)
	}
}

func runNPKernel(t *testing.T, seed uint64, share bool, compiles int) {
	t.Helper()
	netns, conn := openKernelNS(t, "npk")
	opts := Options{Node: testNode}
	s := NewSyncer(conn, opts, PrioritySetting{Auto: true}, zap.NewNop())
	w := newNPWorld(seed, share)
	var history []string
	for i := 0; i < compiles; i++ {
		events := w.batch(6) // as runNPWorld: seed for seed, the same snapshots
		history = append(history, fmt.Sprintf("sync %d: %q", i, events))
		if len(history) > 3 {
			history = history[1:]
		}
		where := fmt.Sprintf("seed %d, last syncs:\n\t%s\n", seed, joinLines(history))
		snap := w.snapshot()
		res, err := s.Sync(snap)
		if err != nil {
			t.Fatalf("%s: sync: %v", where, err)
		}
		if i > 0 && res.Batch.Full {
			t.Fatalf("%s: a full write, not an incremental one: %+v", where, res.Batch)
		}
		fresh, _ := NewCompiler(s.opts).Compile(snap, s.prio)
		fresh.Comment = res.Table.Comment // the owner record the Syncer adds
		npCheckKernel(t, s, netns, fresh, where)
	}
}

// TestHostileNSPatchKernelDistinct: pods never share an address.
func TestHostileNSPatchKernelDistinct(t *testing.T) {
	runNPKernel(t, 3, false, 30)
}

// TestHostileNSPatchKernelShared: seed 7 reaches, at sync 49, the
// contested-address case of TestHostileNSPatchRelabelWithContestedNewPod.
func TestHostileNSPatchKernelShared(t *testing.T) {
	runNPKernel(t, 7, true, 50)
}
