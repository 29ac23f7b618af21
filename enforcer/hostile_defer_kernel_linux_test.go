//go:build linux

package enforcer

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/nftpolicy/nftpolicy/internal/netns"
	"github.com/nftpolicy/nftpolicy/internal/reference"
	"github.com/nftpolicy/nftpolicy/internal/testns"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// Hostile review of DeferUnions and layout 10 on the real kernel.

var hdVmapRE = regexp.MustCompile(`vmap @((?:ingress|egress)-ports-v[46])`)

// hdKernelPortsLookups fails t unless `nft list` of the table shows each
// ports map looked up by one rule.
func hdKernelPortsLookups(t *testing.T, listing, where string) {
	t.Helper()
	n := map[string]int{}
	for _, m := range hdVmapRE.FindAllStringSubmatch(listing, -1) {
		n[m[1]]++
	}
	for _, d := range []direction{ingress, egress} {
		for _, f := range families {
			if got := n[portsMapName(d, f)]; got != 1 {
				t.Fatalf("%s: the kernel's table looks %s up in %d rules, want 1", where, portsMapName(d, f), got)
			}
		}
	}
	for _, bad := range []string{"unknown", "unsupported", "[invalid"} {
		if strings.Contains(listing, bad) {
			t.Fatalf("%s: nft lists %q", where, bad)
		}
	}
}

// The random union world through a Syncer on the real kernel: every
// compile, interim or rewrite, is written as a delta the kernel accepts
// and then holds exactly (Conn.Drift); a table with nothing waiting is the
// fresh compile; the table built by deltas lists as the same table
// written whole.
func TestHostileDeferKernelRandomSyncs(t *testing.T) {
	deferEveryUnion(t)
	from, n := uint64(31), uint64(1)
	if v := os.Getenv("HD_KERNEL_SEEDS"); v != "" {
		fmt.Sscanf(v, "%d:%d", &from, &n)
	}
	for seed := from; seed < from+n; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { hdKernelRandomSyncs(t, seed) })
	}
}

func hdKernelRandomSyncs(t *testing.T, seed uint64) {
	testns.RequireRoot(t, "ip", "nft")
	ns := testns.New(t, "nfthd")
	oracleNS := testns.New(t, "nfthd")
	conn, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	oracle, err := nft.Open(oracleNS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { oracle.Close() })
	opts := Options{Node: testNode, DeferUnions: true}
	s := newSyncer(connKernel{conn}, opts, PrioritySetting{Auto: true}, zap.NewNop())
	t.Cleanup(func() {
		s.StopWatchingCommits()
		s.Close()
	})
	w := newHDWorld(seed)
	interim, rewrites := 0, 0
	var history []string
	sync := func(snap *k8s.Snapshot, step int, what string) *nft.Table {
		t.Helper()
		where := fmt.Sprintf("step %d (%s); last %q", step, what, history[max(0, len(history)-5):])
		res, err := s.Sync(snap)
		if err != nil {
			t.Fatalf("%s: the kernel refused: %v\n%s", where, err, hkDeltaSummary(s.compiler.Delta()))
		}
		if step > 0 && res.Batch.Full {
			t.Fatalf("%s: written whole", where)
		}
		if d, err := conn.Drift(res.Table); err != nil || d != "" {
			t.Fatalf("%s: the kernel does not hold the table: %q %v", where, d, err)
		}
		if len(s.compiler.deferred) == 0 {
			fresh, _ := NewCompiler(Options{Node: testNode}).Compile(snap, res.Table.Chains[0].Hook.Priority)
			fresh.Comment = res.Table.Comment
			if d := gocmp.Diff(nft.Render(fresh), nft.Render(res.Table)); d != "" {
				t.Fatalf("%s: settled, the table is not the fresh compile (-fresh +programmed):\n%s", where, d)
			}
		} else {
			interim++
		}
		if step%12 == 11 {
			listing := testns.ListTable(t, ns, res.Table.Name)
			hdKernelPortsLookups(t, listing, where)
			if _, err := oracle.Apply(res.Table); err != nil {
				t.Fatalf("%s: the table written whole is refused: %v", where, err)
			}
			if got, want := hkBlocks(listing), hkBlocks(testns.ListTable(t, oracleNS, res.Table.Name)); got != want {
				t.Fatalf("%s: built by deltas, the table lists otherwise than written whole (-whole +deltas):\n%s", where,
					gocmp.Diff(strings.Split(want, "\n"), strings.Split(got, "\n")))
			}
		}
		return res.Table
	}
	for step := range 100 {
		snap := w.burst(&history)
		sync(snap, step, history[len(history)-1])
		if len(s.compiler.deferred) > 0 && w.r.IntN(2) == 0 {
			rewrites++
			sync(snap, step, "rewrite")
		}
	}
	t.Logf("%d interim tables, %d rewrites", interim, rewrites)
	if interim < 5 {
		t.Fatalf("only %d interim tables", interim)
	}
}

// Real packets through the interim table and the rewritten one: pods
// x/a, x/b, y/a, z/a on one node; x/a's ingress and y/a's egress each get
// a union on tcp/80 that the compile defers. Every probe between the
// pods (tcp/80 both families, tcp/81 IPv4) gets through exactly when the
// tracer of the programmed table says it does, and when the reference
// says it should; at every state.
func TestHostileDeferKernelPackets(t *testing.T) {
	deferEveryUnion(t)
	testns.RequireRoot(t, "ip", "nft")
	cl, err := netns.NewCluster(netns.Options{Name: "nfthd", TCPPorts: []int{80, 81}, UDPPorts: []int{80}, Timeout: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	node, err := cl.AddNode("n1")
	if err != nil {
		t.Fatal(err)
	}
	var pods []*netns.Pod
	for _, k := range []string{"x/a", "x/b", "y/a", "z/a"} {
		nsName, name, _ := strings.Cut(k, "/")
		p, err := cl.AddPod(node, nsName, name)
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	base, objErrs, err := k8s.LoadFS(fstest.MapFS{"cluster.yaml": {Data: []byte(cl.Manifests())}})
	if err != nil || len(objErrs) > 0 {
		t.Fatal(err, objErrs)
	}
	with := func(nps ...*networkingv1.NetworkPolicy) *k8s.Snapshot {
		s := *base
		s.Policies = nps
		return &s
	}
	egress := types(networkingv1.PolicyTypeEgress)
	p1 := policy("x", "p1", selecting("a"), ingressRule(peers(nsPeer("y")), port(tcp, 80)))
	p2 := policy("x", "p2", selecting("a"), ingressRule(peers(nsPeer("z")), port(tcp, 80)), ingressRule(peers(podPeer("b")), port(tcp, 80)))
	p2b := policy("x", "p2", selecting("a"), ingressRule(peers(nsPeer("z")), port(tcp, 80)))
	e1 := policy("y", "e1", selecting("a"), egress, egressRule(peers(nsPeer("x")), port(tcp, 80)))
	e2 := policy("y", "e2", selecting("a"), egress, egressRule(peers(nsPodPeer("z", "a")), port(tcp, 80)), egressRule(peers(nsPodPeer("x", "b")), port(tcp, 81)))

	conn, err := nft.Open(node.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s := newSyncer(connKernel{conn}, Options{Node: node.Name(), DeferUnions: true, Counters: true}, PrioritySetting{Auto: true}, zap.NewNop())
	t.Cleanup(func() {
		s.StopWatchingCommits()
		s.Close()
	})
	type probe struct {
		family string
		port   int
	}
	probes := []probe{{netns.IPv4, 80}, {netns.IPv6, 80}, {netns.IPv4, 81}}
	check := func(what string, snap *k8s.Snapshot, wantInterim bool) {
		t.Helper()
		res, err := s.Sync(snap)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := len(s.compiler.deferred) > 0; got != wantInterim {
			t.Fatalf("%s: interim=%v, want %v", what, got, wantInterim)
		}
		hdKernelPortsLookups(t, testns.ListTable(t, node.NetnsName(), res.Table.Name), what)
		tracer := nft.NewTracer(res.Table)
		ref := reference.New(snap, node.Name())
		before, err := s.CountConnections()
		if err != nil {
			t.Fatal(err)
		}
		wantCounts := map[CountKey]int64{}
		retried := false
		for _, pr := range probes {
			// The tracer's verdicts are the expectation: a probe blocked
			// where they block is not tried again (and counted twice).
			expect := netns.NewMatrix(netns.Keys(pods), true)
			type traced struct {
				pkt nft.Packet
				tr  nft.TraceResult
			}
			traces := map[[2]string]traced{}
			for _, from := range pods {
				for _, to := range pods {
					if from == to {
						continue
					}
					pkt := nft.Packet{Src: from.Addr(pr.family), Dst: to.Addr(pr.family), Proto: nft.ProtoTCP, Dport: uint16(pr.port)}
					tr, err := tracer.Trace(forwardChainName(), pkt)
					if err != nil {
						t.Fatal(err)
					}
					traces[[2]string{from.Key(), to.Key()}] = traced{pkt, tr}
					expect.Set(from.Key(), to.Key(), tr.Verdict == nft.Accept)
					for _, k := range hdCountedBy(s.compiler, res.Table, tr.Path) {
						if k.adds != (CountKey{}) {
							wantCounts[k.adds]++
						}
						if k.takes != (CountKey{}) {
							wantCounts[k.takes]--
						}
					}
				}
			}
			m := cl.ProbeMatrixExpect(pods, pr.family, netns.TCP, pr.port, expect)
			retried = retried || m.Retries > 0
			for _, from := range pods {
				for _, to := range pods {
					if from == to {
						continue
					}
					pt := traces[[2]string{from.Key(), to.Key()}]
					pkt, tr := pt.pkt, pt.tr
					traced := tr.Verdict == nft.Accept
					want := ref.Allowed(reference.Conn{Src: pkt.Src, Dst: pkt.Dst, Proto: nft.ProtoTCP, Port: pkt.Dport})
					got := m.Get(from.Key(), to.Key())
					if got != traced || got != want {
						t.Errorf("%s: %s→%s %s tcp/%d: the kernel let it through: %v; the tracer: %v; the reference: %v\n    %s",
							what, from.Key(), to.Key(), pr.family, pr.port, got, traced, want, strings.Join(tr.Path, "\n    "))
					}
				}
			}
		}
		after, err := s.CountConnections()
		if err != nil {
			t.Fatal(err)
		}
		got := map[CountKey]int64{}
		for k, v := range after {
			if d := v - before[k]; d > 0 {
				got[k] = int64(d)
			}
		}
		maps.DeleteFunc(wantCounts, func(_ CountKey, n int64) bool { return n == 0 })
		if len(wantCounts) == 0 {
			t.Fatalf("%s: no probe is counted: the counter check checks nothing", what)
		}
		if retried {
			t.Logf("%s: a probe was retried; counters not compared", what)
		} else if d := gocmp.Diff(wantCounts, got); d != "" {
			t.Errorf("%s: the kernel's counters differ from what the tracer's paths count (-tracer +kernel):\n%s", what, d)
		}
	}
	check("base", with(p1, e1), false)
	check("unions deferred", with(p1, e1, p2, e2), true)
	check("rewritten", with(p1, e1, p2, e2), false)
	check("one list off: deferred again", with(p1, e1, p2b, e2), true)
	check("undone before the rewrite: deferred again", with(p1, e1, p2, e2), true)
	check("rewritten again", with(p1, e1, p2, e2), false)
}

// hdCountedBy is what a traced path counts: for each step in a chain with
// counted rules, what the counted rule it took counts (see countedRules;
// as hwCheckCounters reads a path).
func hdCountedBy(c *Compiler, table *nft.Table, path []string) []countedRule {
	rules := c.countedRules()
	byName := map[string]*nft.Chain{}
	for _, ch := range table.Chains {
		byName[ch.Name] = ch
	}
	var out []countedRule
	for _, step := range path {
		name, rest, _ := strings.Cut(step, ": ")
		keys, ok := rules[name]
		if !ok {
			continue
		}
		n := 0
		for _, r := range byName[name].Rules {
			has := slices.Contains(r.Exprs, nft.Expr(nft.Counter{}))
			if rest == nft.RenderRule(r) || strings.HasPrefix(rest, nft.RenderRule(r)+" -> ") {
				if has && n < len(keys) {
					out = append(out, keys[n])
				}
				break
			}
			if has {
				n++
			}
		}
	}
	return out
}
