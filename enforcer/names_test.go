package enforcer

import (
	"crypto/sha256"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// Hash functions that make names collide, standing in for an attacker who
// searched for colliding policy names or peer lists.
var collidingHashes = map[string]func(string) [sha256.Size]byte{
	// Every key has the same hash: even the whole hash collides.
	"constant": func(string) [sha256.Size]byte { return [sha256.Size]byte{0xde, 0xad, 0xbe, 0xef} },
	// The short names collide, the longer ones do not.
	"short": func(s string) [sha256.Size]byte {
		sum := sha256.Sum256([]byte(s))
		copy(sum[:4], []byte{0xde, 0xad, 0xbe, 0xef})
		return sum
	},
}

func collidingCompiler(hash func(string) [sha256.Size]byte) *Compiler {
	c := NewCompiler(Options{Node: testNode})
	c.chainNames.sum = hash
	c.peerNames.sum = hash
	return c
}

// TestCollidingNamesKeepSemantics compiles every case of the compiler tests
// with names whose hashes collide: each chain and set must still get a
// name of its own, and every packet the same verdict as with real hashes.
func TestCollidingNamesKeepSemantics(t *testing.T) {
	for hashName, hash := range collidingHashes {
		for _, tc := range compileCases {
			t.Run(hashName+"/"+tc.name, func(t *testing.T) {
				want, _ := Compile(tc.snap, Options{Node: testNode})
				got, _ := collidingCompiler(hash).Compile(tc.snap, -5)
				requireUniqueNames(t, got)
				if d := gocmp.Diff(verdicts(t, want, tc.snap), verdicts(t, got, tc.snap)); d != "" {
					t.Errorf("colliding names changed verdicts (-real hash +colliding):\n%s", d)
				}
			})
		}
	}
}

// TestCollidingNamesIncremental drives a Compiler whose names collide
// through the random event sequences of TestIncrementalMatchesFull: after
// every event its table must decide every packet as a fresh compile with
// real hashes does, its names must stay unique, and its delta must be the
// difference of its tables (deleting one of two colliding policies once
// left a set behind that every later sync failed on).
func TestCollidingNamesIncremental(t *testing.T) {
	for hashName, hash := range collidingHashes {
		for seed := uint64(1); seed <= 2; seed++ {
			t.Run(fmt.Sprintf("%s/seed=%d", hashName, seed), func(t *testing.T) {
				w := newWorld(seed)
				inc := collidingCompiler(hash)
				var prev *nft.Table
				for step := 0; step < 60; step++ {
					event := w.step()
					snap := w.snapshot()
					got, _ := inc.Compile(snap, DefaultPriority)
					want, _ := Compile(snap, Options{Node: testNode})
					requireUniqueNames(t, got)
					if d := gocmp.Diff(verdicts(t, want, snap), verdicts(t, got, snap)); d != "" {
						t.Fatalf("step %d (%s): colliding names changed verdicts (-real hash +colliding):\n%s", step, event, d)
					}
					if prev != nil {
						if diff := gocmp.Diff(deltaNames(nft.Diff(prev, got)), deltaNames(inc.Delta())); diff != "" {
							t.Fatalf("step %d (%s): Delta differs from nft.Diff (-Diff +Delta):\n%s", step, event, diff)
						}
					}
					prev = got
				}
				if inc.chainNames.byKey.len() != len(inc.chainNames.byName) || inc.peerNames.byKey.len() != len(inc.peerNames.byName) {
					t.Errorf("registries out of step: %d chain keys, %d names; %d peer keys, %d names",
						inc.chainNames.byKey.len(), len(inc.chainNames.byName), inc.peerNames.byKey.len(), len(inc.peerNames.byName))
				}
			})
		}
	}
}

// TestNameRegistry pins the registry's contract: one name per key while it
// is held, never one name for two keys, and a freed name reusable.
func TestNameRegistry(t *testing.T) {
	r := newNameRegistry()
	r.sum = collidingHashes["constant"]
	format := func(h string) string { return "n-" + h }
	a := r.acquire("a", format)
	b := r.acquire("b", format)
	c := r.acquire("c", format)
	if a == b || b == c || a == c {
		t.Fatalf("colliding keys share a name: a=%s b=%s c=%s", a, b, c)
	}
	if a != "n-deadbeef" || b != "n-deadbeef00000000" {
		t.Errorf("a=%s b=%s: want the short name first, then a longer hash", a, b)
	}
	if again := r.acquire("b", format); again != b {
		t.Errorf("second acquire of b = %s, want %s", again, b)
	}
	r.release("b")
	if got := r.name("b"); got != b {
		t.Errorf("b still held once: name %s, want %s", got, b)
	}
	r.release("b")
	r.release("a")
	if d := r.acquire("d", format); d != a {
		t.Errorf("d = %s, want the freed short name %s", d, a)
	}
	if got := r.name("c"); got != c {
		t.Errorf("c moved from %s to %s", c, got)
	}
}

func requireUniqueNames(t *testing.T, table *nft.Table) {
	t.Helper()
	chains, sets := map[string]bool{}, map[string]bool{}
	for _, ch := range table.Chains {
		if chains[ch.Name] {
			t.Fatalf("two chains named %s", ch.Name)
		}
		chains[ch.Name] = true
	}
	for _, s := range table.Sets {
		if sets[s.Name] {
			t.Fatalf("two sets named %s", s.Name)
		}
		sets[s.Name] = true
	}
}

// verdicts traces the first packet of a connection between every two pods
// of snap (and from and to an address outside the cluster) for a few
// protocols and ports, in both families, and lists the allowed ones.
func verdicts(t *testing.T, table *nft.Table, snap *k8s.Snapshot) []string {
	t.Helper()
	type endpoint struct {
		name string
		ip   netip.Addr
	}
	var eps []endpoint
	for _, p := range snap.Pods {
		for _, ip := range p.Status.PodIPs {
			if a, err := netip.ParseAddr(ip.IP); err == nil {
				eps = append(eps, endpoint{p.Namespace + "/" + p.Name, a})
			}
		}
	}
	eps = append(eps, endpoint{"outside", netip.MustParseAddr("10.1.0.9")}, endpoint{"outside", netip.MustParseAddr("fd00:1::9")},
		endpoint{"outside", netip.MustParseAddr("192.0.2.1")}, endpoint{"outside", netip.MustParseAddr("2001:db8::1")})
	ports := []struct {
		proto nft.Proto
		port  uint16
	}{{nft.ProtoTCP, 80}, {nft.ProtoTCP, 8000}, {nft.ProtoTCP, 8101}, {nft.ProtoUDP, 5050}, {nft.ProtoUDP, 8001}, {nft.ProtoSCTP, 81}, {nft.ProtoICMP, 0}}
	var out []string
	for _, src := range eps {
		for _, dst := range eps {
			if src.ip.Is4() != dst.ip.Is4() {
				continue
			}
			for _, pp := range ports {
				pkt := nft.Packet{Src: src.ip, Dst: dst.ip, Proto: pp.proto, Dport: pp.port, Mark: otherMark, DNAT: src.ip == dst.ip}
				if traceAllowed(t, table, pkt) {
					out = append(out, strings.Join([]string{src.name, src.ip.String(), dst.name, dst.ip.String(), pp.proto.String(), fmt.Sprint(pp.port)}, " "))
				}
			}
		}
	}
	return out
}
