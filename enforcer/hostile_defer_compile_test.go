package enforcer

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// Hostile review of Options.DeferUnions (settle.go) and layout 10's shared
// ports chains (flat.go), at the compiler: every compile, interim or not,
// must decide every probe as a fresh compile of the same snapshot does,
// hold no object a fresh compile does not, have a Delta equal to nft.Diff,
// keep each ports map looked up by one rule; and a compile of the same
// snapshot after it (the rewrite) must give the fresh compile byte for byte.

// hdProbe is one connection of hdVerdicts.
type hdProbe struct {
	proto nft.Proto
	port  uint16
}

// hdPorts cover every port the worlds' policies name: 80-82 (numbers),
// 5000-5100 (a wide range), 8000-8101 (named ports), others (nothing).
var hdPorts = []hdProbe{
	{nft.ProtoTCP, 80}, {nft.ProtoTCP, 81}, {nft.ProtoTCP, 82}, {nft.ProtoUDP, 80}, {nft.ProtoUDP, 81},
	{nft.ProtoUDP, 5000}, {nft.ProtoUDP, 5050}, {nft.ProtoTCP, 5050},
	{nft.ProtoTCP, 8000}, {nft.ProtoUDP, 8001}, {nft.ProtoTCP, 8100}, {nft.ProtoUDP, 1500},
	{nft.ProtoSCTP, 80}, {nft.ProtoICMP, 0}, {nft.ProtoTCP, 443},
}

// hdAddrs are every address a pod of snap reports, and outside ones
// (in and out of the worlds' ipBlocks and their excepts).
func hdAddrs(snap *k8s.Snapshot) []netip.Addr {
	var out []netip.Addr
	for _, p := range snap.Pods {
		for _, ip := range p.Status.PodIPs {
			if a, err := netip.ParseAddr(ip.IP); err == nil {
				out = append(out, a)
			}
		}
	}
	for _, s := range []string{"10.1.0.5", "10.1.0.200", "10.9.9.9", "192.0.2.1", "203.0.113.5", "fd00:1::5", "fd00:1::9:9", "2001:db8::1", "2001:db8::2"} {
		out = append(out, netip.MustParseAddr(s))
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// hdVerdicts lists every probe between two addresses of snap that table
// allows, and fails t if an allowed packet leaves with our bits set.
func hdVerdicts(t *testing.T, table *nft.Table, snap *k8s.Snapshot) map[string]bool {
	t.Helper()
	tracer := nft.NewTracer(table)
	out := map[string]bool{}
	addrs := hdAddrs(snap)
	for _, src := range addrs {
		for _, dst := range addrs {
			if src.Is4() != dst.Is4() {
				continue
			}
			for _, pp := range hdPorts {
				proto, icmp := pp.proto, uint8(0)
				if proto == nft.ProtoICMP {
					icmp = 8
					if src.Is6() {
						proto, icmp = nft.ProtoICMPv6, 128
					}
				}
				pkt := nft.Packet{Src: src, Dst: dst, Proto: proto, Dport: pp.port, ICMPType: icmp, Mark: otherMark, DNAT: src == dst}
				res, err := tracer.Trace(forwardChainName(), pkt)
				if err != nil {
					t.Fatalf("trace %v→%v: %v", src, dst, err)
				}
				if res.Verdict == nft.Accept {
					if res.Mark != otherMark {
						t.Fatalf("%v→%v %s/%d leaves with mark %#x", src, dst, proto, pp.port, res.Mark)
					}
					out[fmt.Sprintf("%v→%v %s/%d", src, dst, proto, pp.port)] = true
				}
			}
		}
	}
	return out
}

// hdSameVerdicts fails t unless got decides every probe of snap as want.
func hdSameVerdicts(t *testing.T, got, want *nft.Table, snap *k8s.Snapshot, where string) {
	t.Helper()
	g, w := hdVerdicts(t, got, snap), hdVerdicts(t, want, snap)
	var diffs []string
	for k := range w {
		if !g[k] {
			diffs = append(diffs, "denied, a fresh compile allows: "+k)
		}
	}
	for k := range g {
		if !w[k] {
			diffs = append(diffs, "ALLOWED, a fresh compile denies: "+k)
		}
	}
	if len(diffs) > 0 {
		slices.Sort(diffs)
		if len(diffs) > 8 {
			diffs = append(diffs[:8], fmt.Sprintf("... %d more", len(diffs)-8))
		}
		t.Fatalf("%s: the compiled table decides otherwise than a fresh compile:\n%s\n--- table:\n%s", where, strings.Join(diffs, "\n"), nft.Render(got))
	}
}

// hdPortsLookups fails t unless each ports map is looked up by exactly
// one rule of table, in its direction's ports chain, and only pod chains
// jump to the ports chains.
func hdPortsLookups(t *testing.T, table *nft.Table, where string) {
	t.Helper()
	lookups := map[string][]string{}
	for _, ch := range table.Chains {
		for _, r := range ch.Rules {
			for _, e := range r.Exprs {
				if m, ok := e.(nft.AddrProtoPortVmap); ok {
					lookups[m.Map] = append(lookups[m.Map], ch.Name)
				}
			}
			if v, ok := jumpTarget(r); ok && (v == portsChainName(ingress) || v == portsChainName(egress)) {
				if !strings.Contains(ch.Name, "-pod-") || !strings.HasPrefix(ch.Name, strings.TrimSuffix(v, "-ports")) {
					t.Fatalf("%s: chain %s jumps to %s", where, ch.Name, v)
				}
			}
		}
	}
	for _, d := range []direction{ingress, egress} {
		for _, f := range families {
			if got := lookups[portsMapName(d, f)]; len(got) != 1 || got[0] != portsChainName(d) {
				t.Fatalf("%s: %s is looked up in %v, want once in %s", where, portsMapName(d, f), got, portsChainName(d))
			}
		}
	}
}

// hdNoLeak fails t unless the interim table got holds no set a fresh
// compile (want) of the same snapshot lacks, the same chains by name,
// and every chain but the deferred fragment chains exactly as want has it.
func hdNoLeak(t *testing.T, c *Compiler, got, want *nft.Table, where string) {
	t.Helper()
	deferredChains := map[string]bool{}
	for _, ac := range c.deferred {
		deferredChains[ac.chain.Name] = true
	}
	wantSets := map[string]*nft.Set{}
	for _, s := range want.Sets {
		wantSets[s.Name] = s
	}
	for _, s := range got.Sets {
		w, ok := wantSets[s.Name]
		if !ok {
			t.Fatalf("%s: the interim table holds set %s (%s), which a fresh compile does not", where, s.Name, s.Comment)
		}
		if d := gocmp.Diff(nft.Render(&nft.Table{Family: nft.FamilyInet, Name: "t", Sets: []*nft.Set{w}}),
			nft.Render(&nft.Table{Family: nft.FamilyInet, Name: "t", Sets: []*nft.Set{s}})); d != "" {
			t.Fatalf("%s: set %s differs from a fresh compile's (-fresh +interim):\n%s", where, s.Name, d)
		}
	}
	wantChains := map[string]*nft.Chain{}
	for _, ch := range want.Chains {
		wantChains[ch.Name] = ch
	}
	gotNames := map[string]bool{}
	for _, ch := range got.Chains {
		gotNames[ch.Name] = true
		w, ok := wantChains[ch.Name]
		if !ok {
			t.Fatalf("%s: the interim table holds chain %s, which a fresh compile does not", where, ch.Name)
		}
		if deferredChains[ch.Name] {
			continue
		}
		one := func(c *nft.Chain) string {
			return nft.Render(&nft.Table{Family: nft.FamilyInet, Name: "t", Chains: []*nft.Chain{c}})
		}
		if d := gocmp.Diff(one(w), one(ch)); d != "" {
			t.Fatalf("%s: chain %s differs from a fresh compile's (-fresh +interim):\n%s", where, ch.Name, d)
		}
	}
	for name := range wantChains {
		if !gotNames[name] {
			t.Fatalf("%s: the interim table lacks chain %s", where, name)
		}
	}
}

// hdStep checks got, inc's compile of snap after prev (nil: none), and
// returns it. Interim or not, it decides as a fresh compile does, its
// Delta is nft.Diff's, and it holds nothing a fresh compile does not;
// with no fragment chain waiting for its union it is the fresh compile.
func hdStep(t *testing.T, inc *Compiler, opts Options, prev, got *nft.Table, problems []Problem, snap *k8s.Snapshot, where string) *nft.Table {
	t.Helper()
	fresh, freshProblems := NewCompiler(opts).Compile(snap, DefaultPriority)
	if len(inc.deferred) == 0 {
		return checkCompiled(t, inc, opts, prev, got, problems, snap, DefaultPriority, where)
	}
	if d := gocmp.Diff(problemStrings(freshProblems), problemStrings(problems)); d != "" {
		t.Fatalf("%s: problems differ (-fresh +interim):\n%s", where, d)
	}
	requireUniqueElements(t, got)
	requireUniqueNames(t, got)
	if err := got.Validate(); err != nil {
		t.Fatalf("%s: interim table invalid: %v", where, err)
	}
	if prev != nil {
		checkDelta(t, inc, prev, got, where)
	}
	hdPortsLookups(t, got, where)
	hdNoLeak(t, inc, got, fresh, where)
	hdSameVerdicts(t, got, fresh, snap, where)
	// What NetworkPolicy demands, and what explain says, of the interim
	// table (the reference and explain checks of the hostile CNP world).
	hwReport(t, where+": interim table vs reference", hwCheckReference(t, got, snap), snap, got)
	hwReport(t, where+": explain of the interim table", hwCheckExplain(t, inc, got, snap), snap, got)
	return got
}

// hdMerge compiles snap again, as Run's follow-up sync does, and holds
// the table to a fresh compile, byte for byte.
func hdMerge(t *testing.T, inc *Compiler, opts Options, prev *nft.Table, snap *k8s.Snapshot, where string) *nft.Table {
	t.Helper()
	got := checkIncremental(t, inc, opts, prev, snap, DefaultPriority, where+" (rewrite)")
	if n := inc.deferredNow(); n > 0 || len(inc.deferred) > 0 {
		t.Fatalf("%s (rewrite): the compile of an unchanged snapshot left %d fragment chains waiting (%d new)", where, len(inc.deferred), n)
	}
	hdPortsLookups(t, got, where+" (rewrite)")
	return got
}

// Random worlds (newWorld: pods, namespaces, policies with several peers
// per rule, ipBlocks, named ports and port ranges, cluster policies) in
// bursts of 1-3 events between compiles, with the rewrite compile
// sometimes run and sometimes overtaken by the next burst.
func TestHostileDeferRandomBursts(t *testing.T) {
	deferEveryUnion(t)
	interim, rewrites, both, most := 0, 0, 0, 0
	from, n := uint64(101), uint64(6)
	if v := os.Getenv("HD_SEEDS"); v != "" {
		fmt.Sscanf(v, "%d:%d", &from, &n)
	}
	for seed := from; seed < from+n; seed++ {
		w := newHDWorld(seed)
		opts := Options{Node: testNode, DeferUnions: true}
		if seed%2 == 0 {
			// Counted rules, and flow logs in the namespaces the world
			// annotates: their pod chains walk the policies' chains.
			opts.Counters, opts.FlowLog = true, FlowLog{Group: 100}
		}
		inc := NewCompiler(opts)
		var prev *nft.Table
		var history []string
		for step := range 70 {
			snap := w.burst(&history)
			where := fmt.Sprintf("seed %d step %d (%s); last %q", seed, step, history[len(history)-1], history[max(0, len(history)-6):])
			waiting := len(inc.deferred)
			got, problems := inc.Compile(snap, DefaultPriority)
			if step == 0 && len(inc.deferred) > 0 {
				t.Fatalf("%s: the first compile deferred", where)
			}
			if len(inc.deferred) > 0 {
				interim++
				most = max(most, len(inc.deferred))
				if waiting > 0 && inc.deferredNow() > 0 {
					both++ // rewrote earlier interim forms and made new ones
				}
			}
			prev = hdStep(t, inc, opts, prev, got, problems, snap, where)
			if len(inc.deferred) > 0 && w.r.IntN(3) == 0 {
				rewrites++
				prev = hdMerge(t, inc, opts, prev, snap, where)
			}
		}
		if len(inc.deferred) > 0 {
			prev = hdMerge(t, inc, opts, prev, w.snapshot(), fmt.Sprintf("seed %d end", seed))
		}
	}
	t.Logf("%d interim compiles (%d both rewrote and deferred; at most %d chains waiting), %d rewrites", interim, both, most, rewrites)
	if interim < 20 {
		t.Fatalf("only %d compiles left a union waiting: the test does not exercise DeferUnions", interim)
	}
}

// hdCluster is the 3×3 test cluster with node labels and two extra
// namespaces' worth of pods on another node, so that unions hold pods
// of both nodes.
func hdCluster(policies ...*networkingv1.NetworkPolicy) *k8s.Snapshot {
	s := cluster(policies...)
	for _, p := range s.Pods {
		if p.Name == "c" {
			p.Spec.NodeName = "node-2"
		}
	}
	s.Nodes = append(s.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}})
	return s
}

func hdWith(s *k8s.Snapshot, edit func(*k8s.Snapshot)) *k8s.Snapshot {
	n := *s
	n.Pods = slices.Clone(s.Pods)
	n.Namespaces = slices.Clone(s.Namespaces)
	n.Policies = slices.Clone(s.Policies)
	edit(&n)
	return &n
}

func hdSetPolicy(np *networkingv1.NetworkPolicy) func(*k8s.Snapshot) {
	return func(s *k8s.Snapshot) {
		s.Policies = slices.DeleteFunc(s.Policies, func(p *networkingv1.NetworkPolicy) bool {
			return p.Namespace == np.Namespace && p.Name == np.Name
		})
		s.Policies = append(s.Policies, np)
	}
}

func hdDelPolicy(ns, name string) func(*k8s.Snapshot) {
	return func(s *k8s.Snapshot) {
		s.Policies = slices.DeleteFunc(s.Policies, func(p *networkingv1.NetworkPolicy) bool { return p.Namespace == ns && p.Name == name })
	}
}

func hdDelPod(ns, name string) func(*k8s.Snapshot) {
	return func(s *k8s.Snapshot) {
		s.Pods = slices.DeleteFunc(s.Pods, func(p *k8s.Pod) bool { return p.Namespace == ns && p.Name == name })
	}
}

func hdRelabelPod(ns, name, k, v string) func(*k8s.Snapshot) {
	return func(s *k8s.Snapshot) {
		for i, p := range s.Pods {
			if p.Namespace == ns && p.Name == name {
				p2 := testPod(ns, name, labelled(k, v))
				p2.Spec.NodeName = p.Spec.NodeName
				s.Pods[i] = p2
			}
		}
	}
}

func hdRelabelNS(ns, k, v string) func(*k8s.Snapshot) {
	return func(s *k8s.Snapshot) {
		for i, n := range s.Namespaces {
			if n.Name == ns {
				n2 := n.DeepCopy()
				if v == "" {
					delete(n2.Labels, k)
				} else {
					n2.Labels[k] = v
				}
				s.Namespaces[i] = n2
			}
		}
	}
}

func hdDelNS(ns string) func(*k8s.Snapshot) {
	return func(s *k8s.Snapshot) {
		s.Namespaces = slices.DeleteFunc(s.Namespaces, func(n *corev1.Namespace) bool { return n.Name == ns })
		s.Pods = slices.DeleteFunc(s.Pods, func(p *k8s.Pod) bool { return p.Namespace == ns })
	}
}

func hdMovePodIP(ns, name, v4, v6 string) func(*k8s.Snapshot) {
	return func(s *k8s.Snapshot) {
		for i, p := range s.Pods {
			if p.Namespace == ns && p.Name == name {
				p2 := testPod(ns, name)
				p2.Spec.NodeName = p.Spec.NodeName
				p2.Status.PodIPs = []corev1.PodIP{{IP: v4}, {IP: v6}}
				s.Pods[i] = p2
			}
		}
	}
}

// Hand-made sequences: each step is a snapshot edit, and "merge" a
// compile of the same snapshot again (the rewrite). Every compile is held
// by hdStep; the sequence ends with a rewrite, which must be the fresh
// compile.
func TestHostileDeferSequences(t *testing.T) {
	deferEveryUnion(t)
	// x/a: from namespace y on tcp/80 (p1); the edits add more lists.
	p1 := policy("x", "p1", selecting("a"), ingressRule(peers(nsPeer("y")), port(tcp, 80)))
	p2 := policy("x", "p2", selecting("a"), ingressRule(peers(nsPeer("z")), port(tcp, 80)))
	p3 := policy("x", "p3", selecting("a"), ingressRule(peers(ipBlock("192.0.2.0/24"), ipBlock("2001:db8::/32", "2001:db8::1/128")), port(tcp, 80)))
	p2b := policy("x", "p2", selecting("a"), ingressRule(peers(podPeer("b")), port(tcp, 80)))
	p2c := policy("x", "p2", selecting("a"), ingressRule(peers(nsPeer("z")), port(tcp, 81)))
	p3b := policy("x", "p3", selecting("a"), ingressRule(peers(ipBlock("192.0.2.0/25"), ipBlock("2001:db8::/32")), port(tcp, 80)))
	// the same two lists for x/b, and for egress of y/a and x/a
	q2 := policy("x", "q2", selecting("b"), ingressRule(peers(nsPeer("y")), port(tcp, 80)), ingressRule(peers(nsPeer("z")), port(tcp, 80)))
	e1 := policy("x", "e1", selecting("a"), types(networkingv1.PolicyTypeEgress),
		egressRule(peers(nsPeer("y")), port(tcp, 80)), egressRule(peers(nsPeer("z")), port(tcp, 80)))
	e2 := policy("y", "e2", selecting("a"), types(networkingv1.PolicyTypeEgress),
		egressRule(peers(nsPeer("y")), port(tcp, 80)), egressRule(peers(nsPeer("z")), port(tcp, 80)))
	// the same lists as rules with no ports (a union built at once)
	any2 := policy("x", "any", selecting("a"), ingressRule(peers(nsPeer("y"))), ingressRule(peers(nsPeer("z"))))
	// the same lists, on a wide range
	wide := policy("x", "wide", selecting("a"), ingressRule(peers(nsPeer("y")), portRange(udp, 1000, 2000)), ingressRule(peers(nsPeer("z")), portRange(udp, 1000, 2000)))
	// three lists, then one of them off
	p4 := policy("x", "p4", selecting("a"), ingressRule(peers(nsPodPeer("z", "b")), port(tcp, 80)))

	base := hdCluster(p1)
	type step struct {
		name  string
		edit  func(*k8s.Snapshot) // nil: the rewrite
		merge bool
	}
	merge := step{name: "merge", merge: true}
	cases := []struct {
		name  string
		steps []step
	}{
		{"undone before the rewrite", []step{{"add p2", hdSetPolicy(p2), false}, {"delete p2", hdDelPolicy("x", "p2"), false}, merge}},
		{"replaced by another union", []step{{"add p2", hdSetPolicy(p2), false}, {"p2 to pod b", hdSetPolicy(p2b), false}, merge}},
		{"replaced, moved to another port", []step{{"add p2", hdSetPolicy(p2), false}, {"p2 to port 81", hdSetPolicy(p2c), false}, merge}},
		{"target pod deleted", []step{{"add p2", hdSetPolicy(p2), false}, {"delete x/a", hdDelPod("x", "a"), false}, merge}},
		{"target pod relabelled out", []step{{"add p2", hdSetPolicy(p2), false}, {"relabel x/a", hdRelabelPod("x", "a", "pod", "zz"), false}, merge}},
		{"part namespace relabelled out and back", []step{{"add p2", hdSetPolicy(p2), false}, {"z loses ns", hdRelabelNS("z", "ns", "zz"), false},
			{"z back", hdRelabelNS("z", "ns", "z"), false}, merge}},
		{"part namespace deleted", []step{{"add p2", hdSetPolicy(p2), false}, {"delete z", hdDelNS("z"), false}, merge}},
		{"policy namespace deleted", []step{{"add p2", hdSetPolicy(p2), false}, {"delete x", hdDelNS("x"), false}, merge}},
		{"part pods readdressed", []step{{"add p2", hdSetPolicy(p2), false}, {"z/b moves", hdMovePodIP("z", "b", "10.0.3.77", "fd00::3:77"), false},
			{"z/a moves onto y/a's address", hdMovePodIP("z", "a", "10.0.2.1", "fd00::2:1"), false}, merge}},
		{"ipBlock part edited", []step{{"add p3", hdSetPolicy(p3), false}, {"p3 narrower", hdSetPolicy(p3b), false}, merge}},
		{"three parts then two", []step{{"add p2 p4", func(s *k8s.Snapshot) { hdSetPolicy(p2)(s); hdSetPolicy(p4)(s) }, false},
			{"delete p4", hdDelPolicy("x", "p4"), false}, merge, {"add p4", hdSetPolicy(p4), false}, merge, {"delete p4", hdDelPolicy("x", "p4"), false}, merge}},
		{"same union from two pods", []step{{"add p2", hdSetPolicy(p2), false}, {"add q2", hdSetPolicy(q2), false}, {"delete p2", hdDelPolicy("x", "p2"), false}, merge}},
		{"same union from two pods, first goes at the rewrite", []step{{"add p2", hdSetPolicy(p2), false}, merge, {"add q2", hdSetPolicy(q2), false}, {"delete p2, q2 stays", hdDelPolicy("x", "p2"), false}, merge}},
		{"same union, both directions", []step{{"add p2", hdSetPolicy(p2), false}, {"add e1 e2", func(s *k8s.Snapshot) { hdSetPolicy(e1)(s); hdSetPolicy(e2)(s) }, false},
			{"delete p2", hdDelPolicy("x", "p2"), false}, merge, {"delete e1", hdDelPolicy("x", "e1"), false}, merge}},
		{"union built at once elsewhere in the interim", []step{{"add p2", hdSetPolicy(p2), false}, {"add any", hdSetPolicy(any2), false},
			{"delete any", hdDelPolicy("x", "any"), false}, merge}},
		{"union built at once elsewhere, then deferred user", []step{{"add any", hdSetPolicy(any2), false}, {"add p2", hdSetPolicy(p2), false},
			{"delete any", hdDelPolicy("x", "any"), false}, merge, {"delete p2", hdDelPolicy("x", "p2"), false},
			{"add any + p2", func(s *k8s.Snapshot) { hdSetPolicy(p2)(s); hdSetPolicy(any2)(s) }, false}, {"delete any", hdDelPolicy("x", "any"), false}, merge}},
		{"union released by its built user while deferred", []step{{"add p2 + any", func(s *k8s.Snapshot) { hdSetPolicy(p2)(s); hdSetPolicy(any2)(s) }, false},
			{"add q2", hdSetPolicy(q2), false}, {"delete any and p2", func(s *k8s.Snapshot) { hdDelPolicy("x", "any")(s); hdDelPolicy("x", "p2")(s) }, false}, merge}},
		{"wide range", []step{{"add wide", hdSetPolicy(wide), false}, {"z relabelled", hdRelabelNS("z", "ns", "zz"), false}, merge, {"delete wide", hdDelPolicy("x", "wide"), false}, merge}},
		{"redo after undo after rewrite", []step{{"add p2", hdSetPolicy(p2), false}, merge, {"delete p2", hdDelPolicy("x", "p2"), false},
			{"add p2", hdSetPolicy(p2), false}, {"delete p1", hdDelPolicy("x", "p1"), false}, {"add p1", hdSetPolicy(p1), false}, merge}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{Node: testNode, DeferUnions: true}
			inc := NewCompiler(opts)
			snap := base
			prev := checkIncremental(t, inc, opts, nil, snap, DefaultPriority, "base")
			sawInterim := false
			for i, st := range tc.steps {
				where := fmt.Sprintf("step %d (%s)", i, st.name)
				if st.merge {
					prev = hdMerge(t, inc, opts, prev, snap, where)
					continue
				}
				snap = hdWith(snap, st.edit)
				got, problems := inc.Compile(snap, DefaultPriority)
				sawInterim = sawInterim || len(inc.deferred) > 0
				prev = hdStep(t, inc, opts, prev, got, problems, snap, where)
			}
			if !sawInterim {
				t.Fatal("no step left a union waiting")
			}
		})
	}
}
