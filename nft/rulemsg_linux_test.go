package nft

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
)

// libraryRuleMessage is the message google/nftables encodes for AddRule
// of exprs, with userData, to chain of table.
func libraryRuleMessage(t *testing.T, table *nftables.Table, chain string, exprs []expr.Any, userData []byte) netlink.Message {
	t.Helper()
	return libraryMessage(t, func(nl *nftables.Conn) error {
		nl.AddRule(&nftables.Rule{Table: table, Chain: &nftables.Chain{Name: chain, Table: table}, Exprs: exprs, UserData: userData})
		return nil
	})
}

// ruleMessageTable is the sample table with a chain holding a rule of
// every expression the model has that the sample's rules leave out, and
// comments of every length around a multiple of four (the padding).
func ruleMessageTable() *Table {
	t := sampleTable()
	more := &Chain{Name: "more"}
	for _, exprs := range [][]Expr{
		{NfprotoEq{Family: IPv4}, Verdict{Kind: Jump, Chain: "more"}},
		{NfprotoEq{Family: IPv6}, L4ProtoEq{Proto: ProtoUDP}, DportRange{First: 53, Last: 53}, Verdict{Kind: Goto, Chain: "more"}},
		{CtMarkBitsSet{Bits: 0x40}, Counter{}, Verdict{Kind: Return}},
		{ICMPv6TypeRange{First: 133, Last: 137, HopLimit: 255}, Verdict{Kind: Accept}},
		{ICMPv6TypeRange{First: 1, Last: 4}, Verdict{Kind: Drop}},
		{MarkBitsSet{Bits: 1 << 31}, MarkBitsClear{Bits: 1}, SetMark{Clear: 0xff00, Set: 0x100}},
		{Counter{}},
		{Limit{Rate: 20, Burst: 40}, Log{Group: 100, Prefix: strings.Repeat("p", 127)}},
	} {
		more.Rules = append(more.Rules, Rule{Exprs: exprs})
	}
	for n := range 9 {
		more.Rules = append(more.Rules, Rule{Exprs: []Expr{Counter{}}, Comment: strings.Repeat("c", n)})
	}
	more.Rules = append(more.Rules, Rule{Exprs: []Expr{Verdict{Kind: Accept}}, Comment: strings.Repeat("x", 250)})
	t.Chains = append(t.Chains, more)
	return t
}

// TestRuleMessageIsTheLibrarys: for every rule of ruleMessageTable, the
// rule message the writer queues is the very message google/nftables
// encodes for it, header type and flags (before the batch drops ack and
// echo) and body. With this, the golden test against nft
// (TestEncodeIsNfts) and every kernel test stand for both encoders.
func TestRuleMessageIsTheLibrarys(t *testing.T) {
	table := ruleMessageTable()
	if err := table.checkWhole(); err != nil {
		t.Fatal(err)
	}
	b := &writer{table: &nftables.Table{Family: nftables.TableFamilyINet, Name: table.Name}, sets: map[string]*nftables.Set{}}
	for _, s := range table.Sets {
		b.sets[s.Name] = withSetID(b.librarySet(s))
	}
	kinds := map[string]bool{}
	rules := 0
	var buf []byte
	for _, ch := range table.Chains {
		for i, r := range ch.Rules {
			exprs, err := encodeRule(r, b.sets)
			if err != nil {
				t.Fatalf("chain %s rule %d: %v", ch.Name, i, err)
			}
			var comment []byte
			if r.Comment != "" {
				comment = userdata.AppendString(nil, userdata.TypeComment, r.Comment)
			}
			want := libraryRuleMessage(t, b.table, ch.Name, exprs, comment)
			if buf, err = appendRuleMessage(buf[:0], b.table, ch.Name, exprs, comment); err != nil {
				t.Fatalf("chain %s rule %d: %v", ch.Name, i, err)
			}
			if want.Header.Type != ruleMessageType || want.Header.Flags != ruleMessageFlags {
				t.Errorf("chain %s rule %d: the library's header is type %#x flags %#x, ours %#x %#x", ch.Name, i, want.Header.Type, want.Header.Flags, ruleMessageType, ruleMessageFlags)
			}
			if !bytes.Equal(buf, want.Data) {
				t.Fatalf("chain %s rule %d (%s):\nours    %x\nlibrary %x", ch.Name, i, RenderRule(r), buf, want.Data)
			}
			for _, e := range r.Exprs {
				kinds[fmt.Sprintf("%T", e)] = true
			}
			rules++
		}
	}
	t.Logf("%d rules alike, expressions: %v", rules, kinds)
	// Every kind of expression the model has.
	for _, e := range []Expr{CtStateEstablishedRelated{}, CtStatusDNAT{}, ReversePath{}, AddrEq{}, AddrInSet{}, AddrVmap{},
		L4ProtoEq{}, DportRange{}, AddrProtoPortInSet{}, NfprotoEq{}, AddrProtoPortVmap{}, ICMPv6TypeRange{},
		MarkBitsSet{}, MarkBitsClear{}, CtMarkBitsSet{}, SetMark{}, Counter{}, Limit{}, Log{}, Verdict{}} {
		if !kinds[fmt.Sprintf("%T", e)] {
			t.Errorf("no rule of the test has a %T", e)
		}
	}
}

// TestRuleMessageRefusesCompat: an xtables match, which would need the
// library's compat attribute, is refused, not encoded without it.
func TestRuleMessageRefusesCompat(t *testing.T) {
	table := &nftables.Table{Family: nftables.TableFamilyINet, Name: "nftpolicy"}
	if _, err := appendRuleMessage(nil, table, "c", []expr.Any{&expr.Match{Name: "x"}}, nil); err == nil {
		t.Error("a rule with an xtables match was encoded")
	}
}
