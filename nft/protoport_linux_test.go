package nft

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nftpolicy/nftpolicy/internal/netns"
	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// Kernel tests of address . protocol . port interval verdict maps. The
// sample table holds two (ports-v4, ports-v6), so TestKernelApplyMatchesNft,
// TestEncodeIsNfts and TestKernelRenderDeltaIsWhatIsSent cover their
// encoding, listing and element deltas; these cover read-back, large
// patches and packets.

// TestKernelProtoPortMapDrift: a map read back compares equal to what was
// programmed, and any change to an element (its verdict, a range end, one
// more or one less) or to the set's declaration is drift.
func TestKernelProtoPortMapDrift(t *testing.T) {
	ns, c := openTestNS(t)
	table := sampleTable()
	for _, step := range []struct {
		name   string
		nft    string // run in the namespace after the table is programmed
		wanted string // "" no drift, else a part of the description
	}{
		{"as programmed", "", ""},
		{"loaded by nft from the text", "-f -", ""},
		{"another verdict", "delete element inet nftpolicy ports-v4 { 10.0.1.5 . udp . 53 }\nadd element inet nftpolicy ports-v4 { 10.0.1.5 . udp . 53 : drop }",
			"set ports-v4: element 10.0.1.5 . 17 . 53 - 10.0.1.5 . 17 . 53 : accept is missing"},
		{"a port range grown", "delete element inet nftpolicy ports-v4 { 10.0.0.0/24 . tcp . 80-81 }\nadd element inet nftpolicy ports-v4 { 10.0.0.0/24 . tcp . 80-82 : drop }",
			"set ports-v4: element 10.0.0.0 . 6 . 80 - 10.0.0.255 . 6 . 81 : drop is missing"},
		{"an address range shrunk", "delete element inet nftpolicy ports-v6 { fd00::/64 . tcp . 80-81 }\nadd element inet nftpolicy ports-v6 { fd00::/65 . tcp . 80-81 : drop }",
			"set ports-v6: element fd00:: . 6 . 80 - fd00::ffff:ffff:ffff:ffff . 6 . 81 : drop is missing"},
		{"one more", "add element inet nftpolicy ports-v4 { 10.9.0.1 . tcp . 1 : accept }",
			"set ports-v4: element 10.9.0.1 . 6 . 1 - 10.9.0.1 . 6 . 1 : accept in the kernel was not programmed"},
		{"one less", "delete element inet nftpolicy ports-v6 { fd00:1::1 . udp . 53 }", "set ports-v6: element fd00:1::1 . 17 . 53 - fd00:1::1 . 17 . 53 : accept is missing"},
		{"the map as a hash map of single keys", "delete rule inet nftpolicy filter-forward handle HANDLE\ndelete map inet nftpolicy ports-v4\n" +
			"add map inet nftpolicy ports-v4 { type ipv4_addr . inet_proto . inet_service : verdict; comment \"addr . proto . port\"; }\n" +
			"add rule inet nftpolicy filter-forward position BEFORE ip saddr . meta l4proto . th dport vmap @ports-v4",
			"chain filter-forward rule 5 (ip saddr . meta l4proto . th dport vmap @ports-v4): expression 4 is payload in the kernel, programmed byteorder"},
	} {
		if _, err := c.Apply(table); err != nil {
			t.Fatal(err)
		}
		switch {
		case step.nft == "-f -":
			testns.Nft(t, ns, Render(table), "-f", "-")
		case strings.Contains(step.nft, "HANDLE"):
			out := testns.Nft(t, ns, "", "-a", "list", "chain", "inet", "nftpolicy", "filter-forward")
			var handle, before string
			for _, l := range strings.Split(out, "\n") {
				h := l[strings.LastIndex(l, " ")+1:]
				if strings.Contains(l, "vmap @ports-v4") {
					handle = h
				}
				if strings.Contains(l, "vmap @pods-v6") {
					before = h
				}
			}
			testns.Nft(t, ns, strings.NewReplacer("HANDLE", handle, "BEFORE", before).Replace(step.nft), "-f", "-")
		case step.nft != "":
			testns.Nft(t, ns, step.nft, "-f", "-")
		}
		checkDrift(t, c, table, step.name, step.wanted)
	}
}

// bigProtoPortMap is a table whose map holds n elements: per address
// 10.x.y.z, TCP ports 80-81 drop and UDP 53 jump to a chain.
func bigProtoPortMap(n int) *Table {
	m := &Set{Name: "big", Key: KeyIPv4ProtoPort, Interval: true, Verdict: true}
	a := netip.MustParseAddr("10.0.0.0")
	for len(m.Elements) < n {
		a = a.Next()
		m.Elements = append(m.Elements,
			Element{Addr: a, Proto: ProtoTCP, Port: 80, PortLast: 81, Verdict: Verdict{Kind: Drop}},
			Element{Addr: a, Proto: ProtoUDP, Port: 53, Verdict: Verdict{Kind: Jump, Chain: "dns"}})
	}
	return &Table{Family: FamilyInet, Name: "nftpolicy", Sets: []*Set{m}, Chains: []*Chain{
		{Name: "filter-forward", Hook: &Hook{Type: "filter", Hook: "forward", Policy: Accept}, Rules: []Rule{
			{Exprs: []Expr{AddrProtoPortVmap{Family: IPv4, Field: Saddr, Map: "big"}}},
		}},
		{Name: "dns", Rules: []Rule{{Exprs: []Expr{Verdict{Kind: Accept}}}}},
	}}
}

// TestKernelProtoPortMapPatched: a large map is patched element by
// element, not rewritten; what the patch leaves is what nft loads from
// the new table's text, and no drift.
func TestKernelProtoPortMapPatched(t *testing.T) {
	ns, c := openTestNS(t)
	old := bigProtoPortMap(4000)
	st, err := c.Apply(old)
	if err != nil {
		t.Fatal(err)
	}
	if st.ElementsAdded != 4000 {
		t.Errorf("%d elements sent for a map of 4000", st.ElementsAdded)
	}
	next := clone(old)
	m := next.Sets[0]
	m.Elements[0].PortLast = 90                               // grows over itself: out, then in
	m.Elements[1].Verdict = Verdict{Kind: Goto, Chain: "dns"} // another verdict
	m.Elements = append(m.Elements[:3], m.Elements[4:]...)    // one goes
	m.Elements = append(m.Elements, Element{Addr: netip.MustParseAddr("10.200.0.0"), Last: netip.MustParseAddr("10.200.255.255"),
		Proto: 0, ProtoLast: 255, Port: 0, PortLast: 65535, Verdict: Verdict{Kind: Continue}})
	st, err = c.Update(old, next)
	if err != nil {
		t.Fatal(err)
	}
	if st.Full || st.ElementsDeleted != 3 || st.ElementsAdded != 3 {
		t.Errorf("update stats %+v, want 3 elements out and 3 in", st)
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
}

// sortedLines puts the elements of a listing one to a line, sorted: the
// kernel lists a map's elements in its own order, which a patch changes.
func sortedLines(listing string) string {
	listing = strings.NewReplacer("elements = { ", "elements = {\n", ",\n", "\n", " }\n", "\n}\n").Replace(listing)
	var lines []string
	for _, l := range strings.Split(listing, "\n") {
		lines = append(lines, strings.TrimSpace(l))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// TestKernelProtoPortMapPackets: real packets through a node's forward
// hook meet one map lookup keyed by source address, protocol and port.
func TestKernelProtoPortMapPackets(t *testing.T) {
	testns.RequireRoot(t, "ip", "nft")
	cl, err := netns.NewCluster(netns.Options{Name: "nftvm", IPv4: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	node, err := cl.AddNode("n1")
	if err != nil {
		t.Fatal(err)
	}
	src, err1 := cl.AddPod(node, "x", "a")
	dst, err2 := cl.AddPod(node, "x", "b")
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	s := src.IPv4()
	table := &Table{Family: FamilyInet, Name: "nftpolicy",
		Sets: []*Set{{Name: "m", Key: KeyIPv4ProtoPort, Interval: true, Verdict: true, Elements: []Element{
			{Addr: s, Proto: ProtoTCP, Port: 80, Verdict: Verdict{Kind: Drop}},
			{Addr: s, Proto: ProtoUDP, Port: 81, Verdict: Verdict{Kind: Jump, Chain: "drops"}},
			{Addr: s, Proto: ProtoUDP, Port: 80, Verdict: Verdict{Kind: Jump, Chain: "returns"}},
		}}},
		Chains: []*Chain{
			{Name: "filter-forward", Hook: &Hook{Type: "filter", Hook: "forward", Policy: Accept}, Rules: []Rule{
				{Exprs: []Expr{CtStateEstablishedRelated{}, Verdict{Kind: Accept}}},
				{Exprs: []Expr{AddrProtoPortVmap{Family: IPv4, Field: Saddr, Map: "m"}}},
			}},
			{Name: "drops", Rules: []Rule{{Exprs: []Expr{Verdict{Kind: Drop}}}}},
			{Name: "returns", Rules: []Rule{{Exprs: []Expr{Verdict{Kind: Return}}}}},
		},
	}
	c, err := Open(node.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Apply(table); err != nil {
		t.Fatal(err)
	}
	tr := NewTracer(table)
	check := func(when string) {
		t.Helper()
		for _, probe := range []struct {
			proto string
			port  int
		}{{"tcp", 80}, {"tcp", 81}, {"udp", 80}, {"udp", 81}} {
			p := Packet{Src: s, Dst: dst.IPv4(), Proto: ProtoTCP, Dport: uint16(probe.port)}
			if probe.proto == "udp" {
				p.Proto = ProtoUDP
			}
			res, err := tr.Trace("filter-forward", p)
			if err != nil {
				t.Fatal(err)
			}
			got := cl.Probe(src, dst.IPv4(), probe.proto, probe.port, time.Second)
			if want := res.Verdict == Accept; got != want {
				t.Errorf("%s: %s/%d from %s: reached %v, the tracer says %s", when, probe.proto, probe.port, s, got, res.Verdict)
			}
			// The reverse direction is another key: never dropped.
			if !cl.Probe(dst, s, probe.proto, probe.port, time.Second) {
				t.Errorf("%s: %s/%d to %s: not reached", when, probe.proto, probe.port, s)
			}
		}
	}
	check("as applied")
	// A patch: tcp/80 now passes, tcp/81 is dropped.
	next := clone(table)
	next.Sets[0].Elements[0].Port = 81
	if _, err := c.Update(table, next); err != nil {
		t.Fatal(err)
	}
	table, tr = next, NewTracer(next)
	check("after the patch")
}
