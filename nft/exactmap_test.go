package nft

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Exact address . protocol . port verdict maps (a Set with a concatenated
// key and Verdict, without Interval): validation, text, tracing and
// element deltas. The kernel side is in sampleTable, which holds two of
// them (svc-v4, svc-v6), and in exactmap_linux_test.go.

// exactTable: a base chain whose policy is drop and whose last rule
// accepts, so that a miss (on to the next rule) shows as accept with mark
// 0x1, and a drop from the map as drop.
func exactTable() *Table {
	a := netip.MustParseAddr
	return &Table{Family: FamilyInet, Name: "t",
		Sets: []*Set{
			{Name: "e4", Comment: "pods", Key: KeyIPv4ProtoPort, Verdict: true, Elements: []Element{
				{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 80, Verdict: Verdict{Kind: Drop}},
				{Addr: a("10.0.0.1"), Proto: ProtoUDP, Port: 80, Verdict: Verdict{Kind: Accept}},
				{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 443, Verdict: Verdict{Kind: Jump, Chain: "returns"}},
				{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 444, Verdict: Verdict{Kind: Jump, Chain: "drops"}},
				{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 445, Verdict: Verdict{Kind: Goto, Chain: "returns"}},
				{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 446, Verdict: Verdict{Kind: Return}},
				{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 447, Verdict: Verdict{Kind: Continue}},
				{Addr: a("10.0.0.2"), Proto: ProtoSCTP, Port: 80, Verdict: Verdict{Kind: Drop}},
			}},
			{Name: "e6", Key: KeyIPv6ProtoPort, Verdict: true, Elements: []Element{
				{Addr: a("fd00::1"), Proto: ProtoUDP, Port: 53, Verdict: Verdict{Kind: Drop}},
			}},
		},
		Chains: []*Chain{
			{Name: "filter-forward", Hook: &Hook{Type: "filter", Hook: "forward", Policy: Drop}, Rules: []Rule{
				{Exprs: []Expr{AddrProtoPortVmap{Family: IPv4, Field: Daddr, Map: "e4"}}},
				{Exprs: []Expr{AddrProtoPortVmap{Family: IPv6, Field: Saddr, Map: "e6"}}, Comment: "v6"},
				{Exprs: []Expr{SetMark{Set: 0x1}}},
				{Exprs: []Expr{MarkBitsSet{Bits: 0x1}, Verdict{Kind: Accept}}},
			}},
			{Name: "returns", Rules: []Rule{{Exprs: []Expr{SetMark{Set: 0x2}, Verdict{Kind: Return}}}}},
			{Name: "drops", Rules: []Rule{{Exprs: []Expr{Verdict{Kind: Drop}}}}},
		},
	}
}

func TestValidateExactProtoPortMap(t *testing.T) {
	a := netip.MustParseAddr
	drop := Verdict{Kind: Drop}
	el := func(addr string, p Proto, port uint16) Element {
		return Element{Addr: a(addr), Proto: p, Port: port, Verdict: drop}
	}
	set := func(elems ...Element) Set {
		return Set{Key: KeyIPv4ProtoPort, Verdict: true, Elements: elems}
	}
	for _, tc := range []struct {
		name string
		set  Set
		want string
	}{
		{"empty", set(), ""},
		{"one address, ports and protocols apart", set(el("10.0.0.1", ProtoTCP, 80), el("10.0.0.1", ProtoTCP, 81), el("10.0.0.1", ProtoUDP, 80), el("10.0.0.1", ProtoSCTP, 80)), ""},
		{"addresses apart", set(el("10.0.0.2", ProtoTCP, 80), el("10.0.0.1", ProtoTCP, 80)), ""},
		{"port 0 and 65535", set(el("10.0.0.1", ProtoUDP, 0), el("10.0.0.1", ProtoUDP, 65535)), ""},
		{"ipv6", Set{Key: KeyIPv6ProtoPort, Verdict: true, Elements: []Element{{Addr: a("fd00::1"), Proto: ProtoTCP, Port: 80, Verdict: drop}}}, ""},
		{"every verdict", set(
			Element{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 1, Verdict: Verdict{Kind: Accept}},
			Element{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 2, Verdict: Verdict{Kind: Drop}},
			Element{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 3, Verdict: Verdict{Kind: Return}},
			Element{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 4, Verdict: Verdict{Kind: Continue}},
			Element{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 5, Verdict: Verdict{Kind: Jump, Chain: "c"}},
			Element{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 6, Verdict: Verdict{Kind: Goto, Chain: "c"}}), ""},
		{"the same key twice", set(el("10.0.0.1", ProtoTCP, 80), el("10.0.0.2", ProtoTCP, 80), Element{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 80, Verdict: Verdict{Kind: Accept}}),
			"element 2 repeats the key of element 0 (10.0.0.1 . tcp . 80)"},
		{"an address range", set(Element{Addr: a("10.0.0.1"), Last: a("10.0.0.9"), Proto: ProtoTCP, Port: 80, Verdict: drop}), "element 0: a range in a set without intervals"},
		{"an address range of one", set(Element{Addr: a("10.0.0.1"), Last: a("10.0.0.1"), Proto: ProtoTCP, Port: 80, Verdict: drop}), "a range in a set without intervals"},
		{"a port range", set(Element{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 80, PortLast: 81, Verdict: drop}), "element 0: a protocol or port range outside an address . protocol . port interval map"},
		{"a protocol range", set(Element{Addr: a("10.0.0.1"), Proto: ProtoTCP, ProtoLast: ProtoUDP, Port: 80, Verdict: drop}), "a protocol or port range outside"},
		{"icmp", set(el("10.0.0.1", ProtoICMP, 0)), "element 0 (10.0.0.1 . icmp . 0 : drop): protocol icmp has no ports"},
		{"protocol 0", set(el("10.0.0.1", 0, 0)), "protocol 0 has no ports"},
		{"an ipv6 address in an ipv4 map", set(el("fd00::1", ProtoTCP, 80)), "element 0: address fd00::1 is not ip"},
		{"an ipv4 address in an ipv6 map", Set{Key: KeyIPv6ProtoPort, Verdict: true, Elements: []Element{el("10.0.0.1", ProtoTCP, 80)}}, "element 0: address 10.0.0.1 is not ip6"},
		{"a mapped ipv4 address", Set{Key: KeyIPv6ProtoPort, Verdict: true, Elements: []Element{el("::ffff:10.0.0.1", ProtoTCP, 80)}}, "is not ip6"},
		{"no address", set(Element{Proto: ProtoTCP, Port: 80, Verdict: drop}), "element 0: address invalid IP is not ip"},
		{"a jump without a chain", set(Element{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 80, Verdict: Verdict{Kind: Jump}}), "element 0: jump without a chain"},
		{"an accept with a chain", set(Element{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 80, Verdict: Verdict{Kind: Accept, Chain: "c"}}), "accept with a chain"},
		{"no verdict", set(Element{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 80}), `verdict ""`},
		{"an unknown verdict", set(Element{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 80, Verdict: Verdict{Kind: "queue"}}), `verdict "queue"`},
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

func TestTableValidateExactProtoPortMap(t *testing.T) {
	if err := exactTable().Validate(); err != nil {
		t.Fatalf("exactTable: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(t *Table)
		want   string
	}{
		{"a map element jumping to a missing chain", func(t *Table) { t.Sets[0].Elements[2].Verdict.Chain = "gone" },
			"map e4 element 2 (10.0.0.1 . tcp . 443 : jump gone): jump to chain gone, which is not in the table"},
		{"a v6 lookup in the v4 map", func(t *Table) {
			t.Chains[0].Rules[0].Exprs[0] = AddrProtoPortVmap{Family: IPv6, Field: Daddr, Map: "e4"}
		},
			"set e4 has key ipv4_addr . inet_proto . inet_service, the lookup loads another"},
		{"an address lookup in the map", func(t *Table) { t.Chains[0].Rules[0].Exprs[0] = AddrVmap{Family: IPv4, Field: Daddr, Map: "e4"} },
			"the lookup loads another"},
		{"a map lookup in a set", func(t *Table) { t.Sets[0].Verdict, t.Sets[0].Elements = false, nil }, "set e4 is no verdict map"},
		{"a key twice", func(t *Table) { t.Sets[1].Elements = append(t.Sets[1].Elements, t.Sets[1].Elements[0]) },
			"set e6: element 1 repeats the key of element 0 (fd00::1 . udp . 53)"},
	} {
		table := exactTable()
		tc.change(table)
		if err := table.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// TestRenderExactProtoPortMap: as nft lists such a map (nft 1.0.6): the
// type without flags, each element as address . protocol . port :
// verdict. TestKernelExactMapListing checks the same text against nft's.
func TestRenderExactProtoPortMap(t *testing.T) {
	table := exactTable()
	table.Sets[0].Elements = table.Sets[0].Elements[2:5]
	table.Chains = table.Chains[:1]
	table.Chains[0].Rules = table.Chains[0].Rules[:2]
	want := `add table inet t
delete table inet t
table inet t {
	map e4 {
		type ipv4_addr . inet_proto . inet_service : verdict
		comment "pods"
		elements = {
			10.0.0.1 . tcp . 443 : jump returns,
			10.0.0.1 . tcp . 444 : jump drops,
			10.0.0.1 . tcp . 445 : goto returns
		}
	}

	map e6 {
		type ipv6_addr . inet_proto . inet_service : verdict
		elements = {
			fd00::1 . udp . 53 : drop
		}
	}

	chain filter-forward {
		type filter hook forward priority filter; policy drop;
		ip daddr . meta l4proto . th dport vmap @e4
		ip6 saddr . meta l4proto . th dport vmap @e6 comment "v6"
	}
}
`
	if diff := cmp.Diff(want, Render(table)); diff != "" {
		t.Errorf("Render (-want +got):\n%s", diff)
	}
}

func TestTraceExactProtoPortVmap(t *testing.T) {
	a := netip.MustParseAddr
	src, dst := a("10.9.9.9"), a("10.0.0.1")
	for _, tc := range []struct {
		name string
		p    Packet
		want VerdictKind
		mark uint32
	}{
		{"its element: drop", Packet{Src: src, Dst: dst, Proto: ProtoTCP, Dport: 80}, Drop, 0},
		{"the next port: a miss falls through", Packet{Src: src, Dst: dst, Proto: ProtoTCP, Dport: 81}, Accept, 0x1},
		{"the port before: a miss", Packet{Src: src, Dst: dst, Proto: ProtoTCP, Dport: 79}, Accept, 0x1},
		{"udp, same port: its own element", Packet{Src: src, Dst: dst, Proto: ProtoUDP, Dport: 80}, Accept, 0},
		{"sctp, same port, same address: a miss", Packet{Src: src, Dst: dst, Proto: ProtoSCTP, Dport: 80}, Accept, 0x1},
		{"sctp at its own address", Packet{Src: src, Dst: a("10.0.0.2"), Proto: ProtoSCTP, Dport: 80}, Drop, 0},
		{"the next address: a miss", Packet{Src: src, Dst: a("10.0.0.3"), Proto: ProtoTCP, Dport: 80}, Accept, 0x1},
		{"the address before: a miss", Packet{Src: src, Dst: a("10.0.0.0"), Proto: ProtoTCP, Dport: 80}, Accept, 0x1},
		{"saddr is not looked up", Packet{Src: dst, Dst: src, Proto: ProtoTCP, Dport: 80}, Accept, 0x1},
		{"jump to a chain that returns: the next rule", Packet{Src: src, Dst: dst, Proto: ProtoTCP, Dport: 443}, Accept, 0x3},
		{"jump to a chain that drops", Packet{Src: src, Dst: dst, Proto: ProtoTCP, Dport: 444}, Drop, 0},
		{"goto a chain that returns: the base chain ends, its policy", Packet{Src: src, Dst: dst, Proto: ProtoTCP, Dport: 445}, Drop, 0x2},
		{"return from the base chain: its policy", Packet{Src: src, Dst: dst, Proto: ProtoTCP, Dport: 446}, Drop, 0},
		{"continue: the next rule", Packet{Src: src, Dst: dst, Proto: ProtoTCP, Dport: 447}, Accept, 0x1},
		{"ipv6 by saddr", Packet{Src: a("fd00::1"), Dst: a("fd00::9"), Proto: ProtoUDP, Dport: 53}, Drop, 0},
		{"ipv6, another port", Packet{Src: a("fd00::1"), Dst: a("fd00::9"), Proto: ProtoUDP, Dport: 54}, Accept, 0x1},
		{"ipv6 daddr is not looked up", Packet{Src: a("fd00::9"), Dst: a("fd00::1"), Proto: ProtoUDP, Dport: 53}, Accept, 0x1},
		{"an ipv4-mapped address is another family", Packet{Src: a("fd00::9"), Dst: a("::ffff:10.0.0.1"), Proto: ProtoTCP, Dport: 80}, Accept, 0x1},
	} {
		checkTraceShuffled(t, exactTable, tc.name, tc.p, tc.want, tc.mark)
	}
	// The path names the map's verdict.
	got, err := Trace(exactTable(), "filter-forward", Packet{Src: src, Dst: dst, Proto: ProtoTCP, Dport: 444})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"filter-forward: ip daddr . meta l4proto . th dport vmap @e4 -> jump drops", "drops: drop"}
	if diff := cmp.Diff(want, got.Path); diff != "" {
		t.Errorf("path (-want +got):\n%s", diff)
	}
}

func TestTracerMatchesExactProtoPortVmap(t *testing.T) {
	a := netip.MustParseAddr
	x := NewTracer(exactTable())
	for _, tc := range []struct {
		p    Packet
		want bool
	}{
		{Packet{Src: a("10.9.9.9"), Dst: a("10.0.0.1"), Proto: ProtoTCP, Dport: 80}, true},
		{Packet{Src: a("10.9.9.9"), Dst: a("10.0.0.1"), Proto: ProtoTCP, Dport: 82}, false},
		{Packet{Src: a("10.9.9.9"), Dst: a("10.0.0.1"), Proto: ProtoTCP, Dport: 443}, true}, // a jump: the rule acts
		{Packet{Src: a("10.9.9.9"), Dst: a("10.0.0.1"), Proto: ProtoTCP, Dport: 447}, true}, // continue, and nothing after it
		{Packet{Src: a("fd00::9"), Dst: a("fd00::1"), Proto: ProtoTCP, Dport: 80}, false},   // another family
	} {
		got, err := x.Matches("filter-forward", 0, tc.p)
		if err != nil || got != tc.want {
			t.Errorf("Matches(%+v) = %v, %v; want %v", tc.p, got, err, tc.want)
		}
	}
	el, ok, err := x.LookupProtoPort(AddrProtoPortVmap{Family: IPv4, Field: Daddr, Map: "e4"}, Packet{Src: a("10.9.9.9"), Dst: a("10.0.0.1"), Proto: ProtoTCP, Dport: 444})
	if err != nil || !ok || el.Verdict != (Verdict{Kind: Jump, Chain: "drops"}) {
		t.Errorf("LookupProtoPort = %+v, %v, %v", el, ok, err)
	}
	if _, ok, err := x.LookupProtoPort(AddrProtoPortVmap{Family: IPv4, Field: Daddr, Map: "e4"}, Packet{Src: a("10.9.9.9"), Dst: a("10.0.0.1"), Proto: ProtoUDP, Dport: 444}); ok || err != nil {
		t.Errorf("LookupProtoPort of udp/444 = %v, %v; want a miss", ok, err)
	}
	// A lookup in a map that is no address . protocol . port verdict map
	// is a table error.
	bad := exactTable()
	bad.Sets[0].Verdict = false
	if _, err := Trace(bad, "filter-forward", Packet{Src: a("10.9.9.9"), Dst: a("10.0.0.1"), Proto: ProtoTCP, Dport: 80}); err == nil || !strings.Contains(err.Error(), "map e4 is no ip address . protocol . port verdict map") {
		t.Errorf("trace through a set: %v", err)
	}
}

// TestExactProtoPortElementDelta: an element whose verdict or port
// changes is one element out and one in; the rest of the map stays, and
// the delta's text and the Fake agree on where it leads.
func TestExactProtoPortElementDelta(t *testing.T) {
	a := netip.MustParseAddr
	old := exactTable()
	next := clone(old)
	m := next.Sets[0]
	m.Elements[0].Verdict = Verdict{Kind: Accept} // another verdict
	m.Elements[1].Port = 8080                     // another port
	m.Elements = append(m.Elements[:7], Element{Addr: a("10.0.0.3"), Proto: ProtoTCP, Port: 80, Verdict: Verdict{Kind: Jump, Chain: "drops"}})
	d := Diff(old, next)
	if d.Full || len(d.UpdateSets) != 1 || len(d.AddChains)+len(d.RewriteChains)+len(d.AddSets) != 0 {
		t.Fatalf("delta %+v", d)
	}
	gone, came := d.UpdateSets[0].changes()
	if len(gone) != 3 || len(came) != 3 {
		t.Errorf("gone %v, came %v; want 3 and 3", gone, came)
	}
	want := "delete element inet t e4 { 10.0.0.1 . tcp . 80 : drop, 10.0.0.1 . udp . 80 : accept, 10.0.0.2 . sctp . 80 : drop }\n" +
		"add element inet t e4 { 10.0.0.1 . tcp . 80 : accept, 10.0.0.1 . udp . 8080 : accept, 10.0.0.3 . tcp . 80 : jump drops }\n"
	if got := RenderDelta(d, next); got != want {
		t.Errorf("RenderDelta:\n%s\nwant:\n%s", got, want)
	}
	f := NewFake()
	if _, err := f.ApplyAt(old, 0); err != nil {
		t.Fatal(err)
	}
	st, err := f.WriteDeltaAt(d, next, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.ElementsDeleted != 3 || st.ElementsAdded != 3 {
		t.Errorf("Fake delta stats %+v, want 3 out and 3 in", st)
	}
	if drift, _ := f.Drift(next); drift != "" {
		t.Errorf("Fake after the delta: drift %s", drift)
	}
	if drift, _ := f.Drift(old); drift == "" {
		t.Error("Fake after the delta: no drift from the old table")
	}
	// The same element is no change; a delta that would repeat a key is
	// refused with the set named.
	if d := Diff(next, clone(next)); !d.Empty() {
		t.Errorf("a copy of the table: delta %+v", d)
	}
	dup := clone(next)
	dup.Sets[0].Elements = append(dup.Sets[0].Elements, Element{Addr: a("10.0.0.3"), Proto: ProtoTCP, Port: 80, Verdict: Verdict{Kind: Drop}})
	if err := dup.Validate(); err == nil || !strings.Contains(err.Error(), "set e4: element 8 repeats the key of element 7 (10.0.0.3 . tcp . 80)") {
		t.Errorf("a key twice: %v", err)
	}
}
