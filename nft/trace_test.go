package nft

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// traceTable is small and hand-written, so each case below can be read
// against it: a base chain with policy drop that accepts replies, sends
// ICMPv6 neighbour discovery through, and dispatches by destination
// through verdict maps to per-pod chains; the pod chains jump, goto and
// return through policy chains that look addresses up in plain, interval
// and concatenated sets and set and test mark bits.
func traceTable() *Table {
	a := netip.MustParseAddr
	return &Table{Family: FamilyInet, Name: "t",
		Sets: []*Set{
			{Name: "pods-v4", Key: KeyIPv4, Verdict: true, Elements: []Element{
				{Addr: a("10.0.0.1"), Verdict: Verdict{Kind: Jump, Chain: "pod-a"}},
				{Addr: a("10.0.0.2"), Verdict: Verdict{Kind: Goto, Chain: "pod-b"}},
				{Addr: a("10.0.0.3"), Verdict: Verdict{Kind: Accept}},
				{Addr: a("10.0.0.4"), Verdict: Verdict{Kind: Drop}},
			}},
			{Name: "pods-v6", Key: KeyIPv6, Verdict: true, Elements: []Element{
				{Addr: a("fd00::1"), Verdict: Verdict{Kind: Jump, Chain: "pod-a"}},
			}},
			{Name: "peers-v4", Key: KeyIPv4, Interval: true, Elements: []Element{
				{Addr: a("10.1.0.0"), Last: a("10.1.0.255")},
				{Addr: a("10.2.0.7")},
			}},
			{Name: "admins-v4", Key: KeyIPv4, Elements: []Element{{Addr: a("10.9.0.1")}}},
			{Name: "named-v4", Key: KeyIPv4ProtoPort, Elements: []Element{{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 8080}}},
		},
		Chains: []*Chain{
			{Name: "filter-forward", Hook: &Hook{Type: "filter", Hook: "forward", Policy: Drop}, Rules: []Rule{
				{Exprs: []Expr{CtStateEstablishedRelated{}, Verdict{Kind: Accept}}},
				{Exprs: []Expr{ICMPv6TypeRange{First: 133, Last: 137}, Verdict{Kind: Accept}}},
				{Exprs: []Expr{AddrVmap{Family: IPv4, Field: Daddr, Map: "pods-v4"}}},
				{Exprs: []Expr{AddrVmap{Family: IPv6, Field: Daddr, Map: "pods-v6"}}},
				{Exprs: []Expr{MarkBitsSet{Bits: 0x40}, SetMark{Clear: 0x40}, Verdict{Kind: Accept}}},
			}},
			// pod-a: allowed by np-1 (which sets the mark bit and
			// returns), a DNATed connection from a true source is
			// accepted, anything else is dropped.
			{Name: "pod-a", Rules: []Rule{
				{Exprs: []Expr{Verdict{Kind: Jump, Chain: "np-1"}}},
				{Exprs: []Expr{MarkBitsSet{Bits: 0x40}, Verdict{Kind: Return}}},
				{Exprs: []Expr{ReversePath{}, CtStatusDNAT{}, Verdict{Kind: Accept}}},
				{Exprs: []Expr{Verdict{Kind: Drop}}, Comment: "pod-a: no policy allows"},
			}},
			// pod-b is reached by goto: its end returns to the base
			// chain's caller, that is ends the base chain (policy drop)
			// unless a rule accepts.
			{Name: "pod-b", Rules: []Rule{
				{Exprs: []Expr{AddrEq{Field: Saddr, Addr: a("10.0.0.1")}, Verdict{Kind: Accept}}},
				{Exprs: []Expr{AddrInSet{Family: IPv4, Field: Saddr, Set: "admins-v4"}, Verdict{Kind: Return}}},
			}},
			{Name: "np-1", Rules: []Rule{
				{Exprs: []Expr{AddrInSet{Family: IPv4, Field: Saddr, Set: "peers-v4"}, L4ProtoEq{ProtoTCP}, DportRange{First: 80, Last: 81}, SetMark{Clear: 0xc0, Set: 0x40}, Verdict{Kind: Return}}},
				{Exprs: []Expr{AddrProtoPortInSet{Family: IPv4, Field: Daddr, Set: "named-v4"}, SetMark{Set: 0x40}, Verdict{Kind: Return}}},
				{Exprs: []Expr{AddrEq{Field: Saddr, Addr: a("fd00::9")}, Verdict{Kind: Goto, Chain: "np-2"}}},
			}},
			{Name: "np-2", Rules: []Rule{
				{Exprs: []Expr{L4ProtoEq{ProtoUDP}, SetMark{Set: 0x40}}},
			}},
		},
	}
}

func TestTrace(t *testing.T) {
	a := netip.MustParseAddr
	tcp := func(src, dst string, port uint16) Packet {
		return Packet{Src: a(src), Dst: a(dst), Proto: ProtoTCP, Dport: port}
	}
	with := func(p Packet, f func(*Packet)) Packet { f(&p); return p }
	for _, tc := range []struct {
		name string
		p    Packet
		want TraceResult
	}{
		{"a reply is accepted before any policy", with(tcp("10.7.0.1", "10.0.0.1", 9), func(p *Packet) { p.Established = true }),
			TraceResult{Verdict: Accept, Path: []string{"filter-forward: ct state established,related accept"}}},
		{"an interval set peer on an allowed port: mark set, returned, then accepted and the bit cleared", tcp("10.1.0.200", "10.0.0.1", 81),
			TraceResult{Verdict: Accept, Path: []string{
				"filter-forward: ip daddr vmap @pods-v4 -> jump pod-a",
				"pod-a: jump np-1",
				"np-1: ip saddr @peers-v4 meta l4proto tcp th dport 80-81 meta mark set meta mark & 0xffffff3f | 0x00000040 return",
				"pod-a: meta mark & 0x00000040 == 0x00000040 return",
				"filter-forward: meta mark & 0x00000040 == 0x00000040 meta mark set meta mark & 0xffffffbf accept",
			}}},
		{"a single address of an interval set", tcp("10.2.0.7", "10.0.0.1", 80), TraceResult{Verdict: Accept, Path: []string{
			"filter-forward: ip daddr vmap @pods-v4 -> jump pod-a",
			"pod-a: jump np-1",
			"np-1: ip saddr @peers-v4 meta l4proto tcp th dport 80-81 meta mark set meta mark & 0xffffff3f | 0x00000040 return",
			"pod-a: meta mark & 0x00000040 == 0x00000040 return",
			"filter-forward: meta mark & 0x00000040 == 0x00000040 meta mark set meta mark & 0xffffffbf accept",
		}}},
		{"next to an interval, outside it", tcp("10.2.0.8", "10.0.0.1", 80), TraceResult{Verdict: Drop, Path: []string{
			"filter-forward: ip daddr vmap @pods-v4 -> jump pod-a",
			"pod-a: jump np-1",
			`pod-a: drop comment "pod-a: no policy allows"`,
		}}},
		{"a peer on a port outside the range", tcp("10.1.0.1", "10.0.0.1", 82), TraceResult{Verdict: Drop, Path: []string{
			"filter-forward: ip daddr vmap @pods-v4 -> jump pod-a",
			"pod-a: jump np-1",
			`pod-a: drop comment "pod-a: no policy allows"`,
		}}},
		{"a peer with the wrong protocol", Packet{Src: a("10.1.0.1"), Dst: a("10.0.0.1"), Proto: ProtoUDP, Dport: 80}, TraceResult{Verdict: Drop, Path: []string{
			"filter-forward: ip daddr vmap @pods-v4 -> jump pod-a",
			"pod-a: jump np-1",
			`pod-a: drop comment "pod-a: no policy allows"`,
		}}},
		{"a concatenation matches address, protocol and port together", tcp("10.7.0.1", "10.0.0.1", 8080), TraceResult{Verdict: Accept, Path: []string{
			"filter-forward: ip daddr vmap @pods-v4 -> jump pod-a",
			"pod-a: jump np-1",
			"np-1: ip daddr . meta l4proto . th dport @named-v4 meta mark set meta mark & 0xffffffbf | 0x00000040 return",
			"pod-a: meta mark & 0x00000040 == 0x00000040 return",
			"filter-forward: meta mark & 0x00000040 == 0x00000040 meta mark set meta mark & 0xffffffbf accept",
		}}},
		{"a concatenation with another protocol misses", Packet{Src: a("10.7.0.1"), Dst: a("10.0.0.1"), Proto: ProtoUDP, Dport: 8080}, TraceResult{Verdict: Drop, Path: []string{
			"filter-forward: ip daddr vmap @pods-v4 -> jump pod-a",
			"pod-a: jump np-1",
			`pod-a: drop comment "pod-a: no policy allows"`,
		}}},
		{"other components' mark bits pass through", with(tcp("10.1.0.1", "10.0.0.1", 80), func(p *Packet) { p.Mark = 0x4000_0080 }), TraceResult{Verdict: Accept, Mark: 0x4000_0000, Path: []string{
			"filter-forward: ip daddr vmap @pods-v4 -> jump pod-a",
			"pod-a: jump np-1",
			"np-1: ip saddr @peers-v4 meta l4proto tcp th dport 80-81 meta mark set meta mark & 0xffffff3f | 0x00000040 return",
			"pod-a: meta mark & 0x00000040 == 0x00000040 return",
			"filter-forward: meta mark & 0x00000040 == 0x00000040 meta mark set meta mark & 0xffffffbf accept",
		}}},
		{"a DNATed connection from a true source", with(tcp("10.7.0.1", "10.0.0.1", 80), func(p *Packet) { p.DNAT = true }), TraceResult{Verdict: Accept, Path: []string{
			"filter-forward: ip daddr vmap @pods-v4 -> jump pod-a",
			"pod-a: jump np-1",
			"pod-a: fib saddr . iif oif exists ct status dnat accept",
		}}},
		{"a DNATed connection from a forged source", with(tcp("10.7.0.1", "10.0.0.1", 80), func(p *Packet) { p.DNAT, p.WrongIif = true, true }), TraceResult{Verdict: Drop, Path: []string{
			"filter-forward: ip daddr vmap @pods-v4 -> jump pod-a",
			"pod-a: jump np-1",
			`pod-a: drop comment "pod-a: no policy allows"`,
		}}},
		{"goto: a rule of the target accepts", tcp("10.0.0.1", "10.0.0.2", 80), TraceResult{Verdict: Accept, Path: []string{
			"filter-forward: ip daddr vmap @pods-v4 -> goto pod-b",
			"pod-b: ip saddr 10.0.0.1 accept",
		}}},
		{"goto: a return in the target ends the base chain too (policy drop), mark untested", with(tcp("10.9.0.1", "10.0.0.2", 80), func(p *Packet) { p.Mark = 0x40 }), TraceResult{Verdict: Drop, Mark: 0x40, Path: []string{
			"filter-forward: ip daddr vmap @pods-v4 -> goto pod-b",
			"pod-b: ip saddr @admins-v4 return",
		}}},
		{"goto: running off the target's end ends the base chain", tcp("10.7.0.1", "10.0.0.2", 80), TraceResult{Verdict: Drop, Path: []string{
			"filter-forward: ip daddr vmap @pods-v4 -> goto pod-b",
		}}},
		{"a map's accept", tcp("10.7.0.1", "10.0.0.3", 80), TraceResult{Verdict: Accept, Path: []string{"filter-forward: ip daddr vmap @pods-v4 -> accept"}}},
		{"a map's drop", with(tcp("10.7.0.1", "10.0.0.4", 80), func(p *Packet) { p.Mark = 0x40 }), TraceResult{Verdict: Drop, Mark: 0x40, Path: []string{"filter-forward: ip daddr vmap @pods-v4 -> drop"}}},
		{"a map miss falls through to the next rule, then the policy", tcp("10.7.0.1", "10.0.0.5", 80), TraceResult{Verdict: Drop}},
		{"a map miss, then a later rule", with(tcp("10.7.0.1", "10.0.0.5", 80), func(p *Packet) { p.Mark = 0x41 }), TraceResult{Verdict: Accept, Mark: 0x01, Path: []string{
			"filter-forward: meta mark & 0x00000040 == 0x00000040 meta mark set meta mark & 0xffffffbf accept",
		}}},
		{"IPv6 goes to the IPv6 map only; a goto from a jumped-to chain returns to the jumper", Packet{Src: a("fd00::9"), Dst: a("fd00::1"), Proto: ProtoUDP, Dport: 53}, TraceResult{Verdict: Accept, Path: []string{
			"filter-forward: ip6 daddr vmap @pods-v6 -> jump pod-a",
			"pod-a: jump np-1",
			"np-1: ip6 saddr fd00::9 goto np-2",
			"pod-a: meta mark & 0x00000040 == 0x00000040 return",
			"filter-forward: meta mark & 0x00000040 == 0x00000040 meta mark set meta mark & 0xffffffbf accept",
		}}},
		{"an IPv4 set never matches IPv6", Packet{Src: a("fd00::2"), Dst: a("fd00::1"), Proto: ProtoTCP, Dport: 80}, TraceResult{Verdict: Drop, Path: []string{
			"filter-forward: ip6 daddr vmap @pods-v6 -> jump pod-a",
			"pod-a: jump np-1",
			`pod-a: drop comment "pod-a: no policy allows"`,
		}}},
		{"neighbour discovery", Packet{Src: a("fe80::1"), Dst: a("ff02::1"), Proto: ProtoICMPv6, ICMPType: 135}, TraceResult{Verdict: Accept, Path: []string{"filter-forward: icmpv6 type 133-137 accept"}}},
		{"an echo request is not neighbour discovery", Packet{Src: a("fe80::1"), Dst: a("ff02::1"), Proto: ProtoICMPv6, ICMPType: 128}, TraceResult{Verdict: Drop}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Trace(traceTable(), "filter-forward", tc.p)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// TestTraceErrors: a table Trace cannot evaluate is an error, not a
// verdict.
func TestTraceErrors(t *testing.T) {
	a := netip.MustParseAddr
	p := Packet{Src: a("10.7.0.1"), Dst: a("10.0.0.1"), Proto: ProtoTCP, Dport: 80}
	for _, tc := range []struct {
		name  string
		tweak func(*Table)
		chain string
		want  string
	}{
		{"no such base chain", func(*Table) {}, "filter-input", `no base chain "filter-input"`},
		{"a regular chain is no base chain", func(*Table) {}, "pod-a", `no base chain "pod-a"`},
		{"a jump to a missing chain", func(t *Table) { t.Chains = t.Chains[:len(t.Chains)-2] }, "filter-forward", "jump to missing chain np-1"},
		{"a missing map", func(t *Table) { t.Sets = t.Sets[1:] }, "filter-forward", "no map pods-v4"},
		{"a loop exceeds the jump stack", func(t *Table) {
			np := chainNamed(t, "np-1")
			np.Rules = append([]Rule{{Exprs: []Expr{Verdict{Kind: Jump, Chain: "pod-a"}}}}, np.Rules...)
		}, "filter-forward", "jump stack exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := clone(traceTable())
			tc.tweak(table)
			_, err := Trace(table, tc.chain, p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}
