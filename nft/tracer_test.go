package nft

import (
	"net/netip"
	"reflect"
	"testing"
)

// TestTracerIsTrace: a Tracer gives what Trace gives, path included.
func TestTracerIsTrace(t *testing.T) {
	a := netip.MustParseAddr
	table := &Table{Family: FamilyInet, Name: "t",
		Sets: []*Set{{Name: "ingress-pods-v4", Key: KeyIPv4, Verdict: true, Elements: []Element{
			{Addr: a("10.0.0.2"), Verdict: Verdict{Kind: Jump, Chain: "pod"}},
		}}},
		Chains: []*Chain{{
			Name: "filter-forward",
			Hook: &Hook{Type: "filter", Hook: "forward", Policy: Accept},
			Rules: []Rule{
				{Exprs: []Expr{CtStateEstablishedRelated{}, Verdict{Kind: Accept}}},
				{Exprs: []Expr{AddrVmap{Family: IPv4, Field: Daddr, Map: "ingress-pods-v4"}}},
			},
		}, {
			Name: "pod",
			Rules: []Rule{
				{Exprs: []Expr{L4ProtoEq{Proto: ProtoTCP}, DportRange{First: 80, Last: 80}, Verdict{Kind: Return}}},
				{Exprs: []Expr{Verdict{Kind: Drop}}},
			},
		}},
	}
	x := NewTracer(table)
	for _, p := range []Packet{
		{Src: a("10.0.0.1"), Dst: a("10.0.0.2"), Proto: ProtoTCP, Dport: 80},
		{Src: a("10.0.0.1"), Dst: a("10.0.0.2"), Proto: ProtoTCP, Dport: 81},
		{Src: a("10.0.0.1"), Dst: a("10.0.0.2"), Proto: ProtoTCP, Dport: 81, Established: true},
		{Src: a("10.0.0.1"), Dst: a("10.0.0.3"), Proto: ProtoUDP, Dport: 53},
	} {
		want, werr := Trace(table, "filter-forward", p)
		got, gerr := x.Trace("filter-forward", p)
		if !reflect.DeepEqual(got, want) || (werr == nil) != (gerr == nil) {
			t.Errorf("%+v: Tracer %+v, %v; Trace %+v, %v", p, got, gerr, want, werr)
		}
	}
	if _, err := x.Trace("pod", Packet{}); err == nil {
		t.Error("tracing from a regular chain: no error")
	}
}
