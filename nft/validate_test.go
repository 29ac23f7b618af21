package nft

import (
	"net/netip"
	"strings"
	"testing"
)

func TestSetValidate(t *testing.T) {
	a := netip.MustParseAddr
	for _, tc := range []struct {
		name string
		set  Set
		want string // "" valid, else a part of the error
	}{
		{"sorted disjoint ranges", Set{Key: KeyIPv4, Interval: true, Elements: []Element{
			{Addr: a("10.0.0.0"), Last: a("10.0.0.255")}, {Addr: a("10.0.1.0")}, {Addr: a("10.0.2.0"), Last: a("255.255.255.255")},
		}}, ""},
		{"overlapping ranges", Set{Key: KeyIPv4, Interval: true, Elements: []Element{
			{Addr: a("10.0.0.0"), Last: a("10.0.0.255")}, {Addr: a("10.0.0.128"), Last: a("10.0.1.0")},
		}}, "element 1 (10.0.0.128-10.0.1.0) overlaps or precedes element 0"},
		{"unsorted ranges", Set{Key: KeyIPv6, Interval: true, Elements: []Element{
			{Addr: a("fd00::2")}, {Addr: a("fd00::1")},
		}}, "element 1 (fd00::1-fd00::1) overlaps or precedes"},
		{"a range ending before it starts", Set{Key: KeyIPv4, Interval: true, Elements: []Element{
			{Addr: a("10.0.0.9"), Last: a("10.0.0.1")},
		}}, "is not a range"},
		{"wrong family", Set{Key: KeyIPv4, Elements: []Element{{Addr: a("fd00::1")}}}, "element 0: address fd00::1 is not ip"},
		{"mapped address", Set{Key: KeyIPv6, Elements: []Element{{Addr: a("::ffff:10.0.0.1")}}}, "is not ip6"},
		{"one key twice in a map", Set{Key: KeyIPv4, Verdict: true, Elements: []Element{
			{Addr: a("10.0.0.1"), Verdict: Verdict{Kind: Jump, Chain: "a"}}, {Addr: a("10.0.0.1"), Verdict: Verdict{Kind: Jump, Chain: "b"}},
		}}, "element 1 repeats the key of element 0"},
		{"same address, other ports", Set{Key: KeyIPv4ProtoPort, Elements: []Element{
			{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 80}, {Addr: a("10.0.0.1"), Proto: ProtoUDP, Port: 80},
		}}, ""},
		{"one address . proto . port twice", Set{Key: KeyIPv4ProtoPort, Elements: []Element{
			{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 80}, {Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 80},
		}}, "repeats the key"},
		{"a jump without a chain", Set{Key: KeyIPv6, Verdict: true, Elements: []Element{{Addr: a("fd00::1"), Verdict: Verdict{Kind: Jump}}}}, "jump without a chain"},
		{"a range outside an interval set", Set{Key: KeyIPv4, Elements: []Element{{Addr: a("10.0.0.1"), Last: a("10.0.0.2")}}}, "a range in a set without intervals"},
		{"unknown key", Set{Key: 99}, "unknown key type"},
		// An address interval verdict map holds ranges as a set does, each
		// with a verdict a map can hold.
		{"an address interval map", Set{Key: KeyIPv4, Interval: true, Verdict: true, Elements: []Element{
			{Addr: a("10.0.0.1"), Last: a("10.0.0.4"), Verdict: Verdict{Kind: Goto, Chain: "c"}},
			{Addr: a("10.0.0.5"), Verdict: Verdict{Kind: Drop}}}}, ""},
		{"an address interval map with overlapping ranges", Set{Key: KeyIPv4, Interval: true, Verdict: true, Elements: []Element{
			{Addr: a("10.0.0.1"), Last: a("10.0.0.4"), Verdict: Verdict{Kind: Goto, Chain: "c"}},
			{Addr: a("10.0.0.4"), Verdict: Verdict{Kind: Drop}}}}, "overlaps"},
		{"an address interval map with a bad verdict", Set{Key: KeyIPv6, Interval: true, Verdict: true, Elements: []Element{
			{Addr: a("fd00::1"), Last: a("fd00::4"), Verdict: Verdict{Kind: Goto}}}}, "without a chain"},
		// The encoder writes a plain concatenation's elements without
		// interval end elements: one with intervals is refused.
		{"an interval concatenation", Set{Key: KeyIPv6ProtoPort, Interval: true}, "interval sets here hold plain addresses"},
		{"a range of the other family", Set{Key: KeyIPv6, Interval: true, Elements: []Element{{Addr: a("fd00::1"), Last: a("10.0.0.1")}}}, "is not a range"},
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
