package nft

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Address . protocol . port interval verdict maps (AddrProtoPortVmap):
// text, tracing and validation. The kernel side is in sampleTable, which
// holds two of them (see the kernel tests of the sample), and in
// protoport_linux_test.go.

// protoPortTable: a base chain whose policy is drop and whose last rule
// accepts, so that a miss (on to the next rule) shows as accept and a
// drop from the map as drop.
func protoPortTable() *Table {
	a := netip.MustParseAddr
	return &Table{Family: FamilyInet, Name: "t",
		Sets: []*Set{
			{Name: "m4", Key: KeyIPv4ProtoPort, Interval: true, Verdict: true, Elements: []Element{
				{Addr: a("10.0.0.0"), Last: a("10.0.0.255"), Proto: ProtoTCP, Port: 80, PortLast: 81, Verdict: Verdict{Kind: Drop}},
				{Addr: a("10.0.0.0"), Last: a("10.0.0.255"), Proto: ProtoUDP, Port: 80, PortLast: 81, Verdict: Verdict{Kind: Accept}},
				{Addr: a("10.0.1.1"), Proto: ProtoTCP, Port: 443, Verdict: Verdict{Kind: Jump, Chain: "returns"}},
				{Addr: a("10.0.1.1"), Proto: ProtoTCP, Port: 444, Verdict: Verdict{Kind: Jump, Chain: "drops"}},
				{Addr: a("10.0.1.1"), Proto: ProtoTCP, Port: 445, Verdict: Verdict{Kind: Goto, Chain: "returns"}},
				{Addr: a("10.0.1.1"), Proto: ProtoTCP, Port: 446, Verdict: Verdict{Kind: Return}},
				{Addr: a("10.0.1.1"), Proto: ProtoTCP, Port: 447, Verdict: Verdict{Kind: Continue}},
				{Addr: a("10.0.2.0"), Last: a("10.0.2.9"), Proto: 0, ProtoLast: 255, Port: 0, PortLast: 65535, Verdict: Verdict{Kind: Drop}},
			}},
			{Name: "m6", Key: KeyIPv6ProtoPort, Interval: true, Verdict: true, Elements: []Element{
				{Addr: a("fd00::"), Last: a("fd00::ffff"), Proto: ProtoSCTP, Port: 1000, PortLast: 2000, Verdict: Verdict{Kind: Drop}},
				{Addr: a("fd00::1"), Proto: ProtoICMPv6, Port: 0, PortLast: 65535, Verdict: Verdict{Kind: Drop}},
			}},
		},
		Chains: []*Chain{
			{Name: "filter-forward", Hook: &Hook{Type: "filter", Hook: "forward", Policy: Drop}, Rules: []Rule{
				{Exprs: []Expr{AddrProtoPortVmap{Family: IPv4, Field: Saddr, Map: "m4"}}},
				{Exprs: []Expr{AddrProtoPortVmap{Family: IPv6, Field: Daddr, Map: "m6"}}},
				{Exprs: []Expr{SetMark{Set: 0x1}}},
				{Exprs: []Expr{MarkBitsSet{Bits: 0x1}, Verdict{Kind: Accept}}},
			}},
			{Name: "returns", Rules: []Rule{{Exprs: []Expr{SetMark{Set: 0x2}, Verdict{Kind: Return}}}}},
			{Name: "drops", Rules: []Rule{{Exprs: []Expr{Verdict{Kind: Drop}}}}},
		},
	}
}

func TestRenderProtoPortMap(t *testing.T) {
	table := protoPortTable()
	table.Sets = table.Sets[:1]
	table.Sets[0].Elements = append(table.Sets[0].Elements[:3],
		Element{Addr: netip.MustParseAddr("10.0.3.1"), Last: netip.MustParseAddr("10.0.3.6"), Proto: ProtoICMP, Port: 0, PortLast: 65535, Verdict: Verdict{Kind: Continue}},
		Element{Addr: netip.MustParseAddr("10.0.4.0"), Last: netip.MustParseAddr("10.0.4.0"), Proto: ProtoTCP, ProtoLast: ProtoUDP, Port: 0, PortLast: 65535, Verdict: Verdict{Kind: Goto, Chain: "drops"}})
	table.Chains = table.Chains[:1]
	table.Chains[0].Rules = table.Chains[0].Rules[:1]
	table.Chains[0].Rules = append(table.Chains[0].Rules, Rule{Exprs: []Expr{AddrProtoPortVmap{Family: IPv6, Field: Daddr, Map: "m6"}}, Comment: "c"})
	want := `add table inet t
delete table inet t
table inet t {
	map m4 {
		type ipv4_addr . inet_proto . inet_service : verdict
		flags interval
		elements = {
			10.0.0.0/24 . tcp . 80-81 : drop,
			10.0.0.0/24 . udp . 80-81 : accept,
			10.0.1.1 . tcp . 443 : jump returns,
			10.0.3.1-10.0.3.6 . icmp . 0-65535 : continue,
			10.0.4.0 . 6-17 . 0-65535 : goto drops
		}
	}

	chain filter-forward {
		type filter hook forward priority filter; policy drop;
		ip saddr . meta l4proto . th dport vmap @m4
		ip6 daddr . meta l4proto . th dport vmap @m6 comment "c"
	}
}
`
	if diff := cmp.Diff(want, Render(table)); diff != "" {
		t.Errorf("Render (-want +got):\n%s", diff)
	}
}

func TestTraceProtoPortVmap(t *testing.T) {
	a := netip.MustParseAddr
	src4, dst4 := a("10.0.0.7"), a("10.9.9.9")
	for _, tc := range []struct {
		name string
		p    Packet
		want VerdictKind
		mark uint32
	}{
		{"tcp to the first port of a range", Packet{Src: src4, Dst: dst4, Proto: ProtoTCP, Dport: 80}, Drop, 0},
		{"tcp to the last port of a range", Packet{Src: src4, Dst: dst4, Proto: ProtoTCP, Dport: 81}, Drop, 0},
		{"tcp past the range: a miss falls through", Packet{Src: src4, Dst: dst4, Proto: ProtoTCP, Dport: 82}, Accept, 0x1},
		{"udp, same ports: its own element", Packet{Src: src4, Dst: dst4, Proto: ProtoUDP, Dport: 80}, Accept, 0},
		{"sctp, same ports: a miss", Packet{Src: src4, Dst: dst4, Proto: ProtoSCTP, Dport: 80}, Accept, 0x1},
		{"last address of the range", Packet{Src: a("10.0.0.255"), Dst: dst4, Proto: ProtoTCP, Dport: 80}, Drop, 0},
		{"past the address range", Packet{Src: a("10.0.1.0"), Dst: dst4, Proto: ProtoTCP, Dport: 80}, Accept, 0x1},
		{"daddr is not looked up", Packet{Src: dst4, Dst: src4, Proto: ProtoTCP, Dport: 80}, Accept, 0x1},
		{"jump to a chain that returns: the next rule", Packet{Src: a("10.0.1.1"), Dst: dst4, Proto: ProtoTCP, Dport: 443}, Accept, 0x3},
		{"jump to a chain that drops", Packet{Src: a("10.0.1.1"), Dst: dst4, Proto: ProtoTCP, Dport: 444}, Drop, 0},
		{"goto a chain that returns: the base chain ends, its policy", Packet{Src: a("10.0.1.1"), Dst: dst4, Proto: ProtoTCP, Dport: 445}, Drop, 0x2},
		{"return from the base chain: its policy", Packet{Src: a("10.0.1.1"), Dst: dst4, Proto: ProtoTCP, Dport: 446}, Drop, 0},
		{"continue: the next rule", Packet{Src: a("10.0.1.1"), Dst: dst4, Proto: ProtoTCP, Dport: 447}, Accept, 0x1},
		{"every protocol and port of a range", Packet{Src: a("10.0.2.9"), Dst: dst4, Proto: ProtoICMP}, Drop, 0},
		{"every protocol and port: udp", Packet{Src: a("10.0.2.0"), Dst: dst4, Proto: ProtoUDP, Dport: 65535}, Drop, 0},
		{"ipv6 by daddr", Packet{Src: a("fd00:9::1"), Dst: a("fd00::ffff"), Proto: ProtoSCTP, Dport: 2000}, Drop, 0},
		{"ipv6 port past the range", Packet{Src: a("fd00:9::1"), Dst: a("fd00::ffff"), Proto: ProtoSCTP, Dport: 2001}, Accept, 0x1},
		{"ipv6 icmp, any checksum", Packet{Src: a("fd00:9::1"), Dst: a("fd00::1"), Proto: ProtoICMPv6, Dport: 0xbeef}, Drop, 0},
		{"ipv6 saddr is not looked up", Packet{Src: a("fd00::1"), Dst: a("fd00:9::1"), Proto: ProtoICMPv6}, Accept, 0x1},
	} {
		checkTraceShuffled(t, protoPortTable, tc.name, tc.p, tc.want, tc.mark)
	}
}

// checkTraceShuffled traces p through the table build returns, and
// through two copies with every set's elements shuffled: element order is
// no order of precedence, in an interval map or an exact one.
func checkTraceShuffled(t *testing.T, build func() *Table, name string, p Packet, want VerdictKind, mark uint32) {
	t.Helper()
	for i := range 3 {
		table := build()
		if i > 0 {
			for _, s := range table.Sets {
				rand.Shuffle(len(s.Elements), func(i, j int) { s.Elements[i], s.Elements[j] = s.Elements[j], s.Elements[i] })
			}
		}
		got, err := Trace(table, "filter-forward", p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.Verdict != want || got.Mark != mark {
			t.Errorf("%s: %s with mark %#x, want %s with mark %#x; path %q", name, got.Verdict, got.Mark, want, mark, got.Path)
		}
	}
}

func TestTraceProtoPortVmapPath(t *testing.T) {
	a := netip.MustParseAddr
	got, err := Trace(protoPortTable(), "filter-forward", Packet{Src: a("10.0.1.1"), Dst: a("10.9.9.9"), Proto: ProtoTCP, Dport: 443})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"filter-forward: ip saddr . meta l4proto . th dport vmap @m4 -> jump returns",
		"returns: meta mark set meta mark & 0xfffffffd | 0x00000002 return",
		"filter-forward: meta mark & 0x00000001 == 0x00000001 accept",
	}
	if diff := cmp.Diff(want, got.Path); diff != "" {
		t.Errorf("path (-want +got):\n%s", diff)
	}
	// A map of another family, or none, is a table error.
	bad := protoPortTable()
	bad.Chains[0].Rules[0] = Rule{Exprs: []Expr{AddrProtoPortVmap{Family: IPv6, Field: Saddr, Map: "m4"}}}
	if _, err := Trace(bad, "filter-forward", Packet{Src: a("fd00::1"), Dst: a("fd00::2")}); err == nil || !strings.Contains(err.Error(), "no ip6 address . protocol . port verdict map") {
		t.Errorf("trace through a map of the other family: %v", err)
	}
}

func TestTracerMatchesProtoPortVmap(t *testing.T) {
	a := netip.MustParseAddr
	x := NewTracer(protoPortTable())
	for _, tc := range []struct {
		p    Packet
		want bool
	}{
		{Packet{Src: a("10.0.0.1"), Proto: ProtoTCP, Dport: 80}, true},
		{Packet{Src: a("10.0.0.1"), Proto: ProtoTCP, Dport: 82}, false},
		{Packet{Src: a("10.0.1.1"), Proto: ProtoTCP, Dport: 443}, true}, // a jump: the rule acts
		{Packet{Src: a("10.0.1.1"), Proto: ProtoTCP, Dport: 447}, true}, // continue, and nothing after it in the rule
		{Packet{Src: a("fd00::1"), Proto: ProtoTCP, Dport: 80}, false},  // another family
		{Packet{Src: a("10.0.2.3"), Proto: ProtoICMP, Dport: 9}, true},
	} {
		got, err := x.Matches("filter-forward", 0, tc.p)
		if err != nil || got != tc.want {
			t.Errorf("Matches(%+v) = %v, %v; want %v", tc.p, got, err, tc.want)
		}
	}
	// A continue element leaves the rest of the rule to decide.
	table := protoPortTable()
	table.Chains[0].Rules[0].Exprs = append(table.Chains[0].Rules[0].Exprs, L4ProtoEq{Proto: ProtoUDP}, Verdict{Kind: Accept})
	x = NewTracer(table)
	if got, _ := x.Matches("filter-forward", 0, Packet{Src: a("10.0.1.1"), Proto: ProtoTCP, Dport: 447}); got {
		t.Error("a continue element followed by a match the packet fails: Matches")
	}
	el, ok, err := x.LookupProtoPort(AddrProtoPortVmap{Family: IPv4, Field: Saddr, Map: "m4"}, Packet{Src: a("10.0.1.1"), Proto: ProtoTCP, Dport: 444})
	if err != nil || !ok || el.Verdict != (Verdict{Kind: Jump, Chain: "drops"}) {
		t.Errorf("LookupProtoPort = %+v, %v, %v", el, ok, err)
	}
}

func TestValidateProtoPortMap(t *testing.T) {
	a := netip.MustParseAddr
	drop := Verdict{Kind: Drop}
	el := func(first, last string, p0, p1 Proto, q0, q1 uint16) Element {
		e := Element{Addr: a(first), Proto: p0, ProtoLast: p1, Port: q0, PortLast: q1, Verdict: drop}
		if last != "" {
			e.Last = a(last)
		}
		return e
	}
	set := func(elems ...Element) Set {
		return Set{Key: KeyIPv4ProtoPort, Interval: true, Verdict: true, Elements: elems}
	}
	for _, tc := range []struct {
		name string
		set  Set
		want string
	}{
		{"disjoint by port", set(el("10.0.0.0", "10.0.0.255", 6, 0, 80, 81), el("10.0.0.0", "10.0.0.255", 6, 0, 82, 0)), ""},
		{"disjoint by protocol", set(el("10.0.0.0", "10.0.0.255", 6, 0, 80, 81), el("10.0.0.0", "10.0.0.255", 17, 0, 80, 81)), ""},
		{"disjoint by address, unsorted", set(el("10.0.1.0", "", 6, 0, 80, 0), el("10.0.0.0", "10.0.0.255", 6, 0, 80, 0)), ""},
		{"every protocol, every port", set(el("0.0.0.0", "255.255.255.255", 0, 255, 0, 65535)), ""},
		{"single values spelled both ways", set(el("10.0.0.1", "10.0.0.1", 6, 6, 80, 80), el("10.0.0.1", "", 6, 0, 81, 0)), ""},
		{"contained", set(el("10.0.0.0", "10.0.0.255", 6, 0, 80, 81), el("10.0.0.5", "", 6, 0, 81, 0)), "element 1 (10.0.0.5 . tcp . 81 : drop) overlaps element 0 (10.0.0.0/24 . tcp . 80-81 : drop)"},
		{"containing, listed later", set(el("10.0.0.5", "", 6, 0, 81, 0), el("0.0.0.0", "255.255.255.255", 0, 255, 0, 65535)), "element 1 (0.0.0.0/0 . 0-255 . 0-65535 : drop) overlaps element 0"},
		{"partial in ports", set(el("10.0.0.0", "10.0.0.255", 6, 0, 80, 81), el("10.0.0.0", "10.0.0.255", 6, 0, 81, 90)), "overlaps element 0"},
		{"partial in addresses", set(el("10.0.0.0", "10.0.0.255", 6, 0, 80, 0), el("10.0.0.128", "10.0.1.5", 6, 0, 80, 0)), "overlaps element 0"},
		{"the same element twice", set(el("10.0.0.1", "", 6, 0, 80, 0), el("10.0.0.1", "", 6, 0, 80, 0)), "element 1 (10.0.0.1 . tcp . 80 : drop) overlaps element 0"},
		{"overlap after a long gap in the sort", set(el("10.0.0.0", "10.255.255.255", 17, 0, 53, 0), el("10.0.0.1", "", 6, 0, 80, 0), el("10.0.0.2", "", 6, 0, 80, 0), el("10.9.0.0", "", 17, 0, 53, 0)), "element 3 (10.9.0.0 . udp . 53 : drop) overlaps element 0"},
		{"addresses backwards", set(el("10.0.0.9", "10.0.0.1", 6, 0, 80, 0)), "element 0: 10.0.0.9-10.0.0.1 is not a range"},
		{"protocols backwards", set(el("10.0.0.1", "", 17, 6, 80, 0)), "element 0: protocols 17-6 are not a range"},
		{"ports backwards", set(el("10.0.0.1", "", 6, 0, 81, 80)), "element 0: ports 81-80 are not a range"},
		{"icmp by port", set(el("10.0.0.1", "", 1, 0, 0, 0)), "protocol icmp has no ports, so the element must span ports 0-65535"},
		{"a protocol range with one without ports", set(el("10.0.0.1", "", 6, 17, 53, 0)), "protocol 7 has no ports"},
		{"an ipv6 address", set(el("fd00::1", "", 6, 0, 80, 0)), "element 0: address fd00::1 is not ip"},
		{"a range into ipv6", set(Element{Addr: a("10.0.0.1"), Last: a("fd00::1"), Proto: 6, Port: 80, Verdict: drop}), "is not a range"},
		{"a jump without a chain", set(Element{Addr: a("10.0.0.1"), Proto: 6, Port: 80, Verdict: Verdict{Kind: Jump}}), "jump without a chain"},
		{"an unknown verdict", set(Element{Addr: a("10.0.0.1"), Proto: 6, Port: 80, Verdict: Verdict{Kind: "queue"}}), `verdict "queue"`},
		{"an accept with a chain", set(Element{Addr: a("10.0.0.1"), Proto: 6, Port: 80, Verdict: Verdict{Kind: Accept, Chain: "x"}}), "accept with a chain"},
		{"a set with intervals", Set{Key: KeyIPv4ProtoPort, Interval: true}, "address . protocol . port ranges in a verdict map"},
		{"a set, not a map", Set{Key: KeyIPv6ProtoPort, Interval: true}, "interval sets here hold plain addresses"},
		{"port ranges in a hash concatenation", Set{Key: KeyIPv4ProtoPort, Elements: []Element{{Addr: a("10.0.0.1"), Proto: 6, Port: 80, PortLast: 81}}}, "a protocol or port range outside"},
		{"protocol ranges in an address map", Set{Key: KeyIPv4, Verdict: true, Elements: []Element{{Addr: a("10.0.0.1"), ProtoLast: 6, Verdict: drop}}}, "a protocol or port range outside"},
	} {
		err := tc.set.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want valid", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

func TestTableValidate(t *testing.T) {
	if err := protoPortTable().Validate(); err != nil {
		t.Errorf("protoPortTable: %v", err)
	}
	if err := sampleTable().Validate(); err != nil {
		t.Errorf("sampleTable: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(t *Table)
		want   string
	}{
		{"a map element jumping to a missing chain", func(t *Table) { t.Sets[0].Elements[2].Verdict.Chain = "gone" },
			"map m4 element 2 (10.0.1.1 . tcp . 443 : jump gone): jump to chain gone, which is not in the table"},
		{"a rule going to a missing chain", func(t *Table) {
			t.Chains[1].Rules = append(t.Chains[1].Rules, Rule{Exprs: []Expr{Verdict{Kind: Goto, Chain: "gone"}}})
		}, "chain returns rule 1 (goto gone): goto to chain gone"},
		{"a v6 lookup in a v4 map", func(t *Table) {
			t.Chains[0].Rules[0].Exprs[0] = AddrProtoPortVmap{Family: IPv6, Field: Saddr, Map: "m4"}
		},
			"set m4 has key ipv4_addr . inet_proto . inet_service, the lookup loads another"},
		{"an address lookup in an address . protocol . port map", func(t *Table) { t.Chains[0].Rules[0].Exprs[0] = AddrVmap{Family: IPv4, Field: Saddr, Map: "m4"} },
			"the lookup loads another"},
		{"a set lookup in the map", func(t *Table) {
			t.Chains[0].Rules[0].Exprs[0] = AddrProtoPortInSet{Family: IPv4, Field: Saddr, Set: "m4"}
		},
			"set m4 is an interval verdict map"},
		{"a map lookup in a set", func(t *Table) {
			t.Sets = append(t.Sets, &Set{Name: "np", Key: KeyIPv4ProtoPort})
			t.Chains[0].Rules[0].Exprs[0] = AddrProtoPortVmap{Family: IPv4, Field: Saddr, Map: "np"}
		}, "set np is no verdict map"},
		{"a missing map", func(t *Table) {
			t.Chains[0].Rules[1].Exprs[0] = AddrProtoPortVmap{Family: IPv6, Field: Saddr, Map: "none"}
		},
			"set none is not in the table"},
		{"an overlap", func(t *Table) { t.Sets[1].Elements = append(t.Sets[1].Elements, t.Sets[1].Elements[0]) },
			"set m6: element 2"},
	} {
		table := protoPortTable()
		tc.change(table)
		if err := table.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// TestProtoPortElementDelta: an element whose range or verdict changes is
// one element out and one in; the same element spelled another way is no
// change.
func TestProtoPortElementDelta(t *testing.T) {
	old := protoPortTable()
	next := clone(old)
	m := next.Sets[0]
	m.Elements[0].PortLast = 90                                     // grows
	m.Elements[1].Verdict = Verdict{Kind: Drop}                     // another verdict
	m.Elements[2].ProtoLast, m.Elements[2].PortLast = ProtoTCP, 443 // the same, spelled out
	m.Elements = slices.Delete(m.Elements, 7, 8)                    // goes
	d := Diff(old, next)
	if d.Full || len(d.UpdateSets) != 1 {
		t.Fatalf("delta %+v", d)
	}
	gone, came := d.UpdateSets[0].changes()
	if len(gone) != 3 || len(came) != 2 {
		t.Errorf("gone %v, came %v; want 3 and 2", gone, came)
	}
	f := NewFake()
	if _, err := f.ApplyAt(old, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteDeltaAt(d, next, 0); err != nil {
		t.Fatal(err)
	}
	if drift, _ := f.Drift(next); drift != "" {
		t.Errorf("Fake after the delta: drift %s", drift)
	}
}
