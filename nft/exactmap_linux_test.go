package nft

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nftpolicy/nftpolicy/internal/netns"
	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// Kernel tests of exact address . protocol . port verdict maps. The
// sample table holds two (svc-v4, svc-v6), so TestKernelApplyMatchesNft,
// TestEncodeIsNfts (against nft's own --debug netlink) and
// TestKernelRenderDeltaIsWhatIsSent cover their encoding, listing and
// element deltas; these cover the text, read-back, large patches and
// packets.

// TestKernelExactMapListing: the table written over netlink lists as nft
// -f of its rendering does, and that listing is the rendering itself, but
// for the layout and order of the elements (the kernel's hash has its
// own). The chains are only jumps' targets here: nft lists a mark write
// more briefly than Render prints it.
func TestKernelExactMapListing(t *testing.T) {
	table := exactTable()
	table.Name = "nftpolicy"
	table.Chains[0].Rules = table.Chains[0].Rules[:2]
	table.Chains[1].Rules = []Rule{{Exprs: []Expr{Verdict{Kind: Return}}}}
	listing := testns.AssertSameAsNft(t, table.Name, applyIn(table), Render(table))
	rendered := Render(table)
	rendered = rendered[strings.Index(rendered, "\ntable inet")+1:] // without add and delete table
	if got, want := sortedLines(listing), sortedLines(rendered); got != want {
		t.Errorf("nft lists the table otherwise than Render (lines sorted, -render +nft):\n%s", cmp.Diff(want, got))
	}
}

// TestKernelExactMapDrift: a map read back compares equal to what was
// programmed, whether written by us or by nft from the text, and any
// change to an element (its verdict, port, protocol or address, one more
// or one less) or to the map's kind is drift.
func TestKernelExactMapDrift(t *testing.T) {
	ns, c := openTestNS(t)
	table := exactTable()
	table.Name = "nftpolicy"
	for _, step := range []struct {
		name   string
		nft    string // run in the namespace after the table is programmed
		wanted string // "" no drift, else a part of the description
	}{
		{"as programmed", "", ""},
		{"loaded by nft from the text", "-f -", ""},
		{"another verdict", "delete element inet nftpolicy e4 { 10.0.0.1 . tcp . 80 }\nadd element inet nftpolicy e4 { 10.0.0.1 . tcp . 80 : accept }",
			"set e4: element 10.0.0.1 . 6 . 80 : drop is missing"},
		{"another chain", "delete element inet nftpolicy e4 { 10.0.0.1 . tcp . 443 }\nadd element inet nftpolicy e4 { 10.0.0.1 . tcp . 443 : jump drops }",
			"set e4: element 10.0.0.1 . 6 . 443 : jump returns is missing"},
		{"another port", "delete element inet nftpolicy e4 { 10.0.0.1 . udp . 80 }\nadd element inet nftpolicy e4 { 10.0.0.1 . udp . 81 : accept }",
			"set e4: element 10.0.0.1 . 17 . 80 : accept is missing"},
		{"another protocol", "delete element inet nftpolicy e4 { 10.0.0.2 . sctp . 80 }\nadd element inet nftpolicy e4 { 10.0.0.2 . tcp . 80 : drop }",
			"set e4: element 10.0.0.2 . 132 . 80 : drop is missing"},
		{"another address", "delete element inet nftpolicy e6 { fd00::1 . udp . 53 }\nadd element inet nftpolicy e6 { fd00::2 . udp . 53 : drop }",
			"set e6: element fd00::1 . 17 . 53 : drop is missing"},
		{"one more", "add element inet nftpolicy e4 { 10.9.0.1 . tcp . 1 : accept }",
			"set e4: element 10.9.0.1 . 6 . 1 : accept in the kernel was not programmed"},
		{"one less", "delete element inet nftpolicy e4 { 10.0.0.1 . tcp . 447 }", "set e4: element 10.0.0.1 . 6 . 447 : continue is missing"},
		{"the map with intervals", "flush chain inet nftpolicy filter-forward\ndelete map inet nftpolicy e4\n" +
			"add map inet nftpolicy e4 { type ipv4_addr . inet_proto . inet_service : verdict; flags interval; comment \"pods\"; }\n" +
			"add rule inet nftpolicy filter-forward ip daddr . meta l4proto . th dport vmap @e4",
			"chain filter-forward holds 1 rules, 4 programmed"},
		{"the rule of an interval map", "flush chain inet nftpolicy filter-forward\ndelete map inet nftpolicy e4\n" +
			"add map inet nftpolicy e4 { type ipv4_addr . inet_proto . inet_service : verdict; flags interval; comment \"pods\"; }\n" +
			"add rule inet nftpolicy filter-forward ip daddr . meta l4proto . th dport vmap @e4\n" +
			"add rule inet nftpolicy filter-forward ip6 saddr . meta l4proto . th dport vmap @e6 comment \"v6\"\n" +
			"add rule inet nftpolicy filter-forward meta mark set meta mark | 0x00000001\n" +
			"add rule inet nftpolicy filter-forward meta mark & 0x00000001 == 0x00000001 accept",
			"chain filter-forward rule 0 (ip daddr . meta l4proto . th dport vmap @e4): expression 4 is byteorder in the kernel, programmed payload"},
	} {
		checkDriftAfter(t, ns, c, table, step.name, step.nft, step.wanted)
	}
}

// bigExactMap is a table whose exact map holds n elements, keyed by
// destination as a map of every pod address × port is: per address
// 10.x.y.z, TCP 80 jumps to a chain and UDP 53 is dropped.
func bigExactMap(n int) *Table {
	m := &Set{Name: "big", Key: KeyIPv4ProtoPort, Verdict: true}
	a := netip.MustParseAddr("10.0.0.0")
	for len(m.Elements) < n {
		a = a.Next()
		m.Elements = append(m.Elements,
			Element{Addr: a, Proto: ProtoTCP, Port: 80, Verdict: Verdict{Kind: Jump, Chain: "web"}},
			Element{Addr: a, Proto: ProtoUDP, Port: 53, Verdict: Verdict{Kind: Drop}})
	}
	return &Table{Family: FamilyInet, Name: "nftpolicy", Sets: []*Set{m}, Chains: []*Chain{
		{Name: "filter-forward", Hook: &Hook{Type: "filter", Hook: "forward", Policy: Accept}, Rules: []Rule{
			{Exprs: []Expr{AddrProtoPortVmap{Family: IPv4, Field: Daddr, Map: "big"}}},
		}},
		{Name: "web", Rules: []Rule{{Exprs: []Expr{Verdict{Kind: Accept}}}}},
	}}
}

// TestKernelExactMapPatched: a large exact map is patched element by
// element, not rewritten; what the patch leaves is what nft loads from
// the new table's text, and no drift.
func TestKernelExactMapPatched(t *testing.T) {
	ns, c := openTestNS(t)
	old := bigExactMap(4000)
	st, err := c.Apply(old)
	if err != nil {
		t.Fatal(err)
	}
	if st.ElementsAdded != 4000 {
		t.Errorf("%d elements sent for a map of 4000", st.ElementsAdded)
	}
	if drift, err := c.Drift(old); err != nil || drift != "" {
		t.Errorf("as written: drift %q, %v", drift, err)
	}
	if rt, err := c.ReadTable("nftpolicy"); err != nil || rt.Sets["big"] != 4000 {
		t.Errorf("ReadTable: %+v, %v; want 4000 elements in big", rt, err)
	}
	next := clone(old)
	m := next.Sets[0]
	m.Elements[0].Verdict = Verdict{Kind: Goto, Chain: "web"} // another verdict
	m.Elements[1].Port = 5353                                 // another port
	m.Elements[2].Proto = ProtoSCTP                           // another protocol
	m.Elements = append(m.Elements[:3], m.Elements[4:]...)    // one goes
	m.Elements = append(m.Elements, Element{Addr: netip.MustParseAddr("10.200.0.1"), Proto: ProtoUDP, Port: 9999, Verdict: Verdict{Kind: Continue}})
	st, err = c.Update(old, next)
	if err != nil {
		t.Fatal(err)
	}
	if st.Full || st.ElementsDeleted != 4 || st.ElementsAdded != 4 {
		t.Errorf("update stats %+v, want 4 elements out and 4 in", st)
	}
	if drift, err := c.Drift(next); err != nil || drift != "" {
		t.Errorf("after the patch: drift %q, %v", drift, err)
	}
	if drift, err := c.Drift(old); err != nil || drift == "" {
		t.Errorf("after the patch, the old table: drift %q, %v; want some", drift, err)
	}
	oracle := testns.New(t, "nftpt")
	testns.Nft(t, oracle, Render(next), "-f", "-")
	if got, want := testns.ListTable(t, ns, "nftpolicy"), testns.ListTable(t, oracle, "nftpolicy"); sortedLines(got) != sortedLines(want) {
		t.Errorf("patched map differs from nft -f of the new table (lines sorted):\n%s", cmp.Diff(sortedLines(want), sortedLines(got)))
	}
	// And back: the same elements out and in again.
	if st, err := c.Update(next, old); err != nil || st.Full || st.ElementsDeleted != 4 || st.ElementsAdded != 4 {
		t.Errorf("update back: %+v, %v", st, err)
	}
	if drift, err := c.Drift(old); err != nil || drift != "" {
		t.Errorf("after the patch back: drift %q, %v", drift, err)
	}
}

// TestKernelExactMapPackets: real packets through a node's forward hook
// meet one exact map lookup keyed by destination address, protocol and
// port, as a map of every pod address × port is. A hit that jumps to a
// counting chain is counted there, and only that one; a miss goes on to
// the next rule, which counts and accepts it.
func TestKernelExactMapPackets(t *testing.T) {
	testns.RequireRoot(t, "ip", "nft")
	cl, err := netns.NewCluster(netns.Options{Name: "nftxm", IPv4: true, TCPPorts: []int{80, 81, 82, 83}, UDPPorts: []int{80, 81, 82}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	node, err := cl.AddNode("n1")
	if err != nil {
		t.Fatal(err)
	}
	src, err1 := cl.AddPod(node, "x", "a")
	dst, err2 := cl.AddPod(node, "x", "b")
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	s, d := src.IPv4(), dst.IPv4()
	table := &Table{Family: FamilyInet, Name: "nftpolicy",
		Sets: []*Set{{Name: "m", Key: KeyIPv4ProtoPort, Verdict: true, Elements: []Element{
			{Addr: d, Proto: ProtoTCP, Port: 80, Verdict: Verdict{Kind: Jump, Chain: "allowed"}},
			{Addr: d, Proto: ProtoTCP, Port: 81, Verdict: Verdict{Kind: Drop}},
			{Addr: d, Proto: ProtoUDP, Port: 80, Verdict: Verdict{Kind: Jump, Chain: "returns"}},
			{Addr: d, Proto: ProtoUDP, Port: 81, Verdict: Verdict{Kind: Goto, Chain: "drops"}},
			{Addr: d, Proto: ProtoTCP, Port: 83, Verdict: Verdict{Kind: Continue}},
			// The other pod's address, the same port: the reverse
			// direction of tcp/80 is dropped, that of tcp/81 is not.
			{Addr: s, Proto: ProtoTCP, Port: 80, Verdict: Verdict{Kind: Drop}},
		}}},
		Chains: []*Chain{
			{Name: "filter-forward", Hook: &Hook{Type: "filter", Hook: "forward", Policy: Drop}, Rules: []Rule{
				{Exprs: []Expr{CtStateEstablishedRelated{}, Verdict{Kind: Accept}}},
				{Exprs: []Expr{AddrProtoPortVmap{Family: IPv4, Field: Daddr, Map: "m"}}},
				{Exprs: []Expr{Counter{}, Verdict{Kind: Accept}}, Comment: "misses"},
			}},
			{Name: "allowed", Rules: []Rule{{Exprs: []Expr{Counter{}, Verdict{Kind: Accept}}}}},
			{Name: "drops", Rules: []Rule{{Exprs: []Expr{Verdict{Kind: Drop}}}}},
			{Name: "returns", Rules: []Rule{{Exprs: []Expr{Verdict{Kind: Return}}}}},
		},
	}
	c, err := Open(node.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Apply(table); err != nil {
		t.Fatal(err)
	}
	// counts reads what the chain allowed and the base chain's last rule
	// (the misses) have counted.
	counts := func() (allowed, misses uint64) {
		t.Helper()
		rc, err := c.RuleCounters("nftpolicy", []string{"allowed", "filter-forward"})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rc.Rules {
			switch r.Chain {
			case "allowed":
				allowed += r.Packets
			case "filter-forward":
				misses += r.Packets
			}
		}
		return allowed, misses
	}
	type probe struct {
		from, to *netns.Pod
		proto    string
		port     int
	}
	probes := []probe{
		{src, dst, "tcp", 80}, {src, dst, "tcp", 81}, {src, dst, "tcp", 82}, {src, dst, "tcp", 83},
		{src, dst, "udp", 80}, {src, dst, "udp", 81}, {src, dst, "udp", 82},
		{dst, src, "tcp", 80}, {dst, src, "tcp", 81},
	}
	check := func(when string, table *Table) {
		t.Helper()
		tr := NewTracer(table)
		for _, pr := range probes {
			p := Packet{Src: pr.from.IPv4(), Dst: pr.to.IPv4(), Proto: ProtoTCP, Dport: uint16(pr.port)}
			if pr.proto == "udp" {
				p.Proto = ProtoUDP
			}
			res, err := tr.Trace("filter-forward", p)
			if err != nil {
				t.Fatal(err)
			}
			el, hit, err := tr.LookupProtoPort(AddrProtoPortVmap{Family: IPv4, Field: Daddr, Map: "m"}, p)
			if err != nil {
				t.Fatal(err)
			}
			viaAllowed := hit && el.Verdict == (Verdict{Kind: Jump, Chain: "allowed"})
			// A miss, or a hit that comes back (return, continue), ends
			// in the rule that counts misses.
			toMisses := res.Verdict == Accept && !viaAllowed
			a0, m0 := counts()
			got := cl.Probe(pr.from, pr.to.IPv4(), pr.proto, pr.port, time.Second)
			a1, m1 := counts()
			name := fmt.Sprintf("%s: %s/%d to %s", when, pr.proto, pr.port, pr.to.IPv4())
			if want := res.Verdict == Accept; got != want {
				t.Errorf("%s: reached %v, the tracer says %s (path %q)", name, got, res.Verdict, res.Path)
			}
			if (a1 > a0) != viaAllowed {
				t.Errorf("%s: chain allowed counted %d packets, the tracer says the map sends it there: %v", name, a1-a0, viaAllowed)
			}
			if (m1 > m0) != toMisses {
				t.Errorf("%s: the rule after the map counted %d packets, the tracer says it is reached: %v", name, m1-m0, toMisses)
			}
		}
	}
	check("as applied", table)
	// A patch: tcp/80 now dropped, tcp/82 jumps to allowed, udp/81 goes
	// (a miss: accepted), the reverse tcp/80 comes back.
	next := clone(table)
	m := next.Sets[0]
	m.Elements[0].Verdict = Verdict{Kind: Drop}
	m.Elements = append(m.Elements[:3], m.Elements[4:5]...)
	m.Elements = append(m.Elements, Element{Addr: d, Proto: ProtoTCP, Port: 82, Verdict: Verdict{Kind: Jump, Chain: "allowed"}})
	st, err := c.Update(table, next)
	if err != nil {
		t.Fatal(err)
	}
	if st.Full || st.ElementsDeleted != 3 || st.ElementsAdded != 2 {
		t.Errorf("patch stats %+v, want 3 elements out and 2 in", st)
	}
	if drift, err := c.Drift(next); err != nil || drift != "" {
		t.Errorf("after the patch: drift %q, %v", drift, err)
	}
	check("after the patch", next)
}

// TestKernelExactMapReadRightAfterWrite: a large hash set read right
// after it is written, while the kernel resizes its hash, reads as
// written. (Before readKernel read such a dump again, about one read in
// four repeated hundreds of elements and left as many out.)
func TestKernelExactMapReadRightAfterWrite(t *testing.T) {
	for round := range 20 {
		_, c := openTestNS(t)
		table := bigExactMap(4000)
		if _, err := c.Apply(table); err != nil {
			t.Fatal(err)
		}
		if drift, err := c.Drift(table); err != nil || drift != "" {
			t.Errorf("round %d, right after the write: drift %q, %v", round, drift, err)
		}
	}
}
