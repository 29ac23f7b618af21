//go:build linux

package enforcer

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/nftpolicy/nftpolicy/internal/netns"
	"github.com/nftpolicy/nftpolicy/internal/testns"
	"github.com/nftpolicy/nftpolicy/nft"
)

// TestHostilePathcutMarksKernel: real packets through the cut path (the
// ingress fragment accepts at once, the ports map's goto, egress's bit
// and its clear), with a co-resident that marks every packet before us
// (prerouting) and one that looks at the mark after us (a forward chain
// at priority 100, after ours). For each mark the co-resident sets (none,
// our allow bit alone, every bit) and each mask (the default bit, a wider
// mask whose allow bit is not its only bit):
//
//   - a NEW connection the policies deny is dropped whatever bits it came
//     with: a pre-set allow bit lets nothing through, in either direction;
//   - one they allow gets through, and leaves our chain with our mask's
//     bits clear and every other bit as the co-resident set it.
//
// It would catch a fragment, pod chain or ports chain that reads our bit
// without clearing it first, an accept that leaves our bit set (a goto
// landing where the clear is skipped), or a clear wider than the mask.
func TestHostilePathcutMarksKernel(t *testing.T) {
	cl, node, pods, base := pcNode(t, netns.Options{Name: "nftpm", TCPPorts: []int{80, 81}}, "x/a", "x/b", "x/c", "y/d")
	snap := *base
	egress := types(networkingv1.PolicyTypeEgress)
	snap.Policies = []*networkingv1.NetworkPolicy{
		// x/a: ingress from x/b on tcp/80 (a fragment), from y on every
		// port (a rule without ports: the pod chain's own lookup).
		policy("x", "a-in", selecting("a"), ingressRule(peers(podPeer("b")), port(tcp, 80)), ingressRule(peers(nsPeer("y")))),
		// x/b: egress to x/a on tcp/80 only.
		policy("x", "b-out", selecting("b"), egress, egressRule(peers(podPeer("a")), port(tcp, 80))),
		// y/d: isolated for ingress with nothing allowed (an empty stage).
		policy("y", "d-in", selecting("d"), types(networkingv1.PolicyTypeIngress)),
	}
	nodeNS := node.NetnsName()

	type flow struct {
		from, to string
		port     int
		allowed  bool
	}
	flows := []flow{
		{"x/b", "x/a", 80, true},  // egress allowed (bit), ingress fragment accepts
		{"y/d", "x/a", 81, true},  // ingress rule without ports
		{"x/c", "x/a", 80, false}, // ingress denies
		{"x/b", "x/a", 81, false}, // egress denies (no tcp/81)
		{"x/b", "x/c", 80, false}, // egress denies (not a peer)
		{"x/c", "y/d", 80, false}, // empty ingress stage
	}
	for _, mask := range []uint32{DefaultMarkMask, 0x00f00000} {
		bit := allowBit(mask)
		for _, pre := range []uint32{0, bit, 0xffffffff} {
			t.Run(fmt.Sprintf("mask=%#x/premark=%#x", mask, pre), func(t *testing.T) {
				want := pre &^ mask
				node.Exec("nft", "delete", "table", "inet", "pathcutmark")
				testns.Nft(t, nodeNS, fmt.Sprintf(`table inet pathcutmark {
	counter seen {}
	counter leak {}
	counter changed {}
	chain pre {
		type filter hook prerouting priority -150; policy accept;
		meta l4proto tcp meta mark set %#x
	}
	chain post {
		type filter hook forward priority 100; policy accept;
		ct state new meta l4proto tcp counter name "seen"
		ct state new meta l4proto tcp meta mark & %#x != 0 counter name "leak"
		ct state new meta l4proto tcp meta mark != %#x counter name "changed"
	}
}
`, pre, mask, want), "-f", "-")
				t.Cleanup(func() { node.Exec("nft", "delete", "table", "inet", "pathcutmark") })
				conn, err := nft.Open(node.NetnsPath())
				if err != nil {
					t.Fatal(err)
				}
				s := newSyncer(connKernel{conn}, Options{Node: node.Name(), MarkMask: mask}, PrioritySetting{Value: -5}, zap.NewNop())
				t.Cleanup(func() {
					s.StopWatchingCommits()
					s.Close()
					conn.Close()
					node.Exec("nft", "delete", "table", "inet", "nftpolicy")
				})
				res, err := s.Sync(&snap)
				if err != nil {
					t.Fatal(err)
				}
				listing := testns.ListTable(t, nodeNS, "nftpolicy")
				if !strings.Contains(listing, "goto ingress-allow-") || !strings.Contains(listing, "accept") {
					t.Fatalf("not the cut path (no goto to an ingress fragment):\n%s", listing)
				}
				tracer := nft.NewTracer(res.Table)
				for _, fam := range []string{netns.IPv4, netns.IPv6} {
					for _, f := range flows {
						from, to := pods[f.from], pods[f.to]
						tr, err := tracer.Trace(forwardChainName(), nft.Packet{Src: from.Addr(fam), Dst: to.Addr(fam), Proto: nft.ProtoTCP, Dport: uint16(f.port), Mark: pre})
						if err != nil {
							t.Fatal(err)
						}
						if (tr.Verdict == nft.Accept) != f.allowed {
							t.Errorf("%s %s→%s tcp/%d: the tracer says %v, want allowed %v\n    %s", fam, f.from, f.to, f.port, tr.Verdict, f.allowed, strings.Join(tr.Path, "\n    "))
						}
						if f.allowed && tr.Mark != want {
							t.Errorf("%s %s→%s tcp/%d: the tracer has it leave with mark %#x, want %#x", fam, f.from, f.to, f.port, tr.Mark, want)
						}
						seen0, leak0, changed0 := pmCounter(t, nodeNS, "seen"), pmCounter(t, nodeNS, "leak"), pmCounter(t, nodeNS, "changed")
						got := cl.Probe(from, to.Addr(fam), netns.TCP, f.port, 400*time.Millisecond)
						seen, leak, changed := pmCounter(t, nodeNS, "seen")-seen0, pmCounter(t, nodeNS, "leak")-leak0, pmCounter(t, nodeNS, "changed")-changed0
						if got != f.allowed {
							t.Errorf("%s %s→%s tcp/%d with mark %#x on arrival: got through %v, want %v", fam, f.from, f.to, f.port, pre, got, f.allowed)
						}
						if f.allowed && seen == 0 {
							t.Errorf("%s %s→%s tcp/%d: allowed, but the chain after ours saw no NEW packet", fam, f.from, f.to, f.port)
						}
						if !f.allowed && seen != 0 {
							t.Errorf("%s %s→%s tcp/%d: denied, but %d NEW packets reached the chain after ours", fam, f.from, f.to, f.port, seen)
						}
						if leak != 0 || changed != 0 {
							t.Errorf("%s %s→%s tcp/%d, mark %#x on arrival: %d NEW packets left our chain with a bit of mask %#x set, %d with a mark other than %#x",
								fam, f.from, f.to, f.port, pre, leak, mask, changed, want)
						}
					}
				}
			})
		}
	}
}

var pmCounterRE = regexp.MustCompile(`packets (\d+)`)

// pmCounter reads a named counter of table inet pathcutmark.
func pmCounter(t *testing.T, ns, name string) uint64 {
	t.Helper()
	out := testns.Nft(t, ns, "", "list", "counter", "inet", "pathcutmark", name)
	m := pmCounterRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("counter %s: %q", name, out)
	}
	n, _ := strconv.ParseUint(m[1], 10, 64)
	return n
}
