package nft

import (
	"net/netip"
	"slices"
)

// sampleTable uses every expression and set kind of the model.
func sampleTable() *Table {
	a := netip.MustParseAddr
	return &Table{
		Family: FamilyInet,
		Name:   "nftpolicy",
		Sets: []*Set{
			{Name: "peers-v4", Comment: "x/allow ingress[0] peers", Key: KeyIPv4, Interval: true, Elements: []Element{
				{Addr: a("10.0.0.0"), Last: a("10.0.0.255")},
				{Addr: a("10.1.0.1")},
				{Addr: a("10.2.0.0"), Last: a("10.2.0.6")},
				{Addr: a("10.255.255.255"), Last: a("255.255.255.255")},
			}},
			{Name: "peers-v6", Key: KeyIPv6, Interval: true, Elements: []Element{
				{Addr: a("::"), Last: a("fd00::ffff")},
			}},
			{Name: "plain-v4", Key: KeyIPv4, Elements: []Element{{Addr: a("10.9.9.9")}}},
			{Name: "np-v4", Key: KeyIPv4ProtoPort, Elements: []Element{{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 8080}}},
			{Name: "np-v6", Key: KeyIPv6ProtoPort, Elements: []Element{{Addr: a("fd00::1"), Proto: ProtoUDP, Port: 53}}},
			{Name: "pods-v4", Key: KeyIPv4, Verdict: true, Elements: []Element{{Addr: a("10.0.0.1"), Verdict: Verdict{Kind: Jump, Chain: "pod-x/a"}}}},
			{Name: "pods-v6", Key: KeyIPv6, Verdict: true},
			{Name: "ports-v4", Comment: "addr . proto . port", Key: KeyIPv4ProtoPort, Interval: true, Verdict: true, Elements: []Element{
				{Addr: a("10.0.0.0"), Last: a("10.0.0.255"), Proto: ProtoTCP, Port: 80, PortLast: 81, Verdict: Verdict{Kind: Drop}},
				{Addr: a("10.0.1.5"), Proto: ProtoUDP, Port: 53, Verdict: Verdict{Kind: Accept}},
				{Addr: a("10.0.2.0"), Last: a("10.0.2.9"), Proto: ProtoSCTP, Port: 443, Verdict: Verdict{Kind: Return}},
				{Addr: a("10.0.3.1"), Proto: ProtoICMP, Port: 0, PortLast: 65535, Verdict: Verdict{Kind: Goto, Chain: "leaf"}},
				{Addr: a("10.0.4.0"), Last: a("10.0.4.255"), Proto: ProtoTCP, Port: 22, Verdict: Verdict{Kind: Continue}},
				{Addr: a("10.1.0.0"), Last: a("10.1.255.255"), Proto: 0, ProtoLast: 255, Port: 0, PortLast: 65535, Verdict: Verdict{Kind: Jump, Chain: "leaf"}},
			}},
			{Name: "ports-v6", Key: KeyIPv6ProtoPort, Interval: true, Verdict: true, Elements: []Element{
				{Addr: a("fd00::"), Last: a("fd00::ffff:ffff:ffff:ffff"), Proto: ProtoTCP, Port: 80, PortLast: 81, Verdict: Verdict{Kind: Drop}},
				{Addr: a("fd00:1::1"), Proto: ProtoUDP, ProtoLast: ProtoUDP, Port: 53, PortLast: 53, Verdict: Verdict{Kind: Accept}},
				{Addr: a("fd00:2::1"), Last: a("fd00:2::5"), Proto: ProtoICMPv6, Port: 0, PortLast: 65535, Verdict: Verdict{Kind: Jump, Chain: "leaf"}},
			}},
			{Name: "svc-v4", Comment: "exact addr . proto . port", Key: KeyIPv4ProtoPort, Verdict: true, Elements: []Element{
				{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 80, Verdict: Verdict{Kind: Accept}},
				{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 81, Verdict: Verdict{Kind: Drop}},
				{Addr: a("10.0.0.1"), Proto: ProtoUDP, Port: 53, Verdict: Verdict{Kind: Jump, Chain: "leaf"}},
				{Addr: a("10.0.0.2"), Proto: ProtoSCTP, Port: 443, Verdict: Verdict{Kind: Goto, Chain: "leaf"}},
				{Addr: a("10.0.0.3"), Proto: ProtoTCP, Port: 22, Verdict: Verdict{Kind: Drop}},
				{Addr: a("10.0.0.4"), Proto: ProtoTCP, Port: 1, Verdict: Verdict{Kind: Return}},
				{Addr: a("10.0.0.5"), Proto: ProtoTCP, Port: 65535, Verdict: Verdict{Kind: Continue}},
			}},
			{Name: "svc-v6", Key: KeyIPv6ProtoPort, Verdict: true, Elements: []Element{
				{Addr: a("fd00::1"), Proto: ProtoTCP, Port: 80, Verdict: Verdict{Kind: Accept}},
				{Addr: a("fd00::1"), Proto: ProtoUDP, Port: 53, Verdict: Verdict{Kind: Jump, Chain: "leaf"}},
			}},
		},
		Chains: []*Chain{
			{Name: "filter-forward", Hook: &Hook{Type: "filter", Hook: "forward", Priority: -1, Policy: Accept}, Rules: []Rule{
				{Exprs: []Expr{CtStateEstablishedRelated{}, Verdict{Kind: Accept}}},
				{Exprs: []Expr{ICMPv6TypeRange{First: 133, Last: 137}, Verdict{Kind: Accept}}},
				{Exprs: []Expr{ICMPv6TypeRange{First: 128, Last: 128}, Verdict{Kind: Accept}}},
				{Exprs: []Expr{AddrVmap{Family: IPv4, Field: Daddr, Map: "pods-v4"}}},
				{Exprs: []Expr{AddrVmap{Family: IPv6, Field: Saddr, Map: "pods-v6"}}},
				{Exprs: []Expr{AddrProtoPortVmap{Family: IPv4, Field: Saddr, Map: "ports-v4"}}},
				{Exprs: []Expr{AddrProtoPortVmap{Family: IPv6, Field: Daddr, Map: "ports-v6"}}, Comment: "ports"},
				{Exprs: []Expr{AddrProtoPortVmap{Family: IPv4, Field: Daddr, Map: "svc-v4"}}},
				{Exprs: []Expr{AddrProtoPortVmap{Family: IPv6, Field: Saddr, Map: "svc-v6"}}, Comment: "exact"},
			}},
			{Name: "pod-x/a", Rules: []Rule{
				{Exprs: []Expr{AddrEq{Field: Saddr, Addr: a("10.0.0.1")}, Verdict{Kind: Return}}},
				{Exprs: []Expr{AddrEq{Field: Daddr, Addr: a("fd00::1")}, Verdict{Kind: Return}}},
				{Exprs: []Expr{AddrEq{Field: Saddr, Addr: a("10.0.0.1")}, ReversePath{}, CtStatusDNAT{}, Verdict{Kind: Return}}},
				{Exprs: []Expr{Verdict{Kind: Jump, Chain: "np-x/allow"}}},
				{Exprs: []Expr{MarkBitsSet{Bits: 0x40}, SetMark{Clear: 0x40}, Verdict{Kind: Return}}},
				{Exprs: []Expr{Limit{Rate: 20, Burst: 40}, Log{Group: 100, Prefix: "nftpolicy:deny:1a2b3c4d"}}},
				{Exprs: []Expr{Limit{Rate: 1, Burst: 5}, Log{Group: 7}}},
				{Exprs: []Expr{Verdict{Kind: Drop}}, Comment: "x/a: no policy allows"},
			}},
			{Name: "np-x/allow", Rules: []Rule{
				{Exprs: []Expr{AddrInSet{Family: IPv4, Field: Saddr, Set: "peers-v4"}, L4ProtoEq{ProtoTCP}, DportRange{80, 80}, SetMark{Clear: 0xc0, Set: 0x40}, Verdict{Kind: Return}}, Comment: "x/allow ingress[0]"},
				{Exprs: []Expr{AddrInSet{Family: IPv6, Field: Saddr, Set: "peers-v6"}, L4ProtoEq{ProtoSCTP}, DportRange{80, 90}, SetMark{Clear: 0x40, Set: 0x40}, Verdict{Kind: Return}}},
				{Exprs: []Expr{AddrInSet{Family: IPv4, Field: Daddr, Set: "plain-v4"}, Verdict{Kind: Goto, Chain: "leaf"}}},
				{Exprs: []Expr{AddrProtoPortInSet{Family: IPv4, Field: Daddr, Set: "np-v4"}, SetMark{Clear: 0x40, Set: 0x40}, Verdict{Kind: Return}}},
				{Exprs: []Expr{AddrProtoPortInSet{Family: IPv6, Field: Daddr, Set: "np-v6"}, Verdict{Kind: Return}}},
				{Exprs: []Expr{L4ProtoEq{ProtoUDP}, Verdict{Kind: Return}}},
				{Exprs: []Expr{MarkBitsClear{Bits: 0x40}, AddrInSet{Family: IPv4, Field: Saddr, Set: "peers-v4"}, L4ProtoEq{ProtoTCP}, DportRange{80, 80},
					Limit{Rate: 20, Burst: 40}, Log{Group: 100, Prefix: "nftpolicy:allow:1a2b3c4d:0"}}},
			}},
			{Name: "leaf"},
		},
	}
}

// clone deep-copies a table so a step can change it freely.
func clone(t *Table) *Table {
	out := &Table{Family: t.Family, Name: t.Name}
	for _, s := range t.Sets {
		c := *s
		c.Elements = slices.Clone(s.Elements)
		out.Sets = append(out.Sets, &c)
	}
	for _, ch := range t.Chains {
		c := *ch
		c.Rules = slices.Clone(ch.Rules)
		out.Chains = append(out.Chains, &c)
	}
	return out
}

func setNamed(t *Table, name string) *Set {
	for _, s := range t.Sets {
		if s.Name == name {
			return s
		}
	}
	panic("no set " + name)
}

func chainNamed(t *Table, name string) *Chain {
	for _, c := range t.Chains {
		if c.Name == name {
			return c
		}
	}
	panic("no chain " + name)
}
