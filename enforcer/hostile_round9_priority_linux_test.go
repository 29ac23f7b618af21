package enforcer

import (
	"net/netip"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/nftpolicy/nftpolicy/internal/testns"
	"github.com/nftpolicy/nftpolicy/nft"
)

// Hostile review, round 9 (promise 5): the auto-chosen forward priority
// stays put across repeated whole writes, with our own leftovers (a
// handover table left by a refused write, our table made dormant) on the
// hook, and other programs' tables are left as they were.

func r9ForwardTable(prio int32, comment string) *nft.Table {
	s := &nft.Set{Name: "r", Key: nft.KeyIPv4, Interval: true}
	for i := range 500 {
		s.Elements = append(s.Elements, nft.Element{Addr: netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}),
			Last: netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})})
	}
	return &nft.Table{Family: nft.FamilyInet, Name: "nftpolicy", Comment: comment, Sets: []*nft.Set{s}, Chains: []*nft.Chain{{
		Name:  "filter-forward",
		Hook:  &nft.Hook{Type: "filter", Hook: "forward", Priority: prio, Policy: nft.Accept},
		Rules: []nft.Rule{{Exprs: []nft.Expr{nft.AddrInSet{Family: nft.IPv4, Field: nft.Saddr, Set: "r"}, nft.Verdict{Kind: nft.Drop}}}},
	}}}
}

func TestHostileRound9PriorityStableWithLeftovers(t *testing.T) {
	ns := testns.New(t, "nftpt")
	c, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	other := "table inet kube-proxy { chain filter-forward { type filter hook forward priority -5; policy accept; }; }\n" +
		"table ip other { chain fw { type filter hook forward priority -7; policy accept; }; }\n"
	testns.Nft(t, ns, other, "-f", "-")
	otherBefore := testns.Nft(t, ns, "", "list", "table", "inet", "kube-proxy") + testns.Nft(t, ns, "", "list", "table", "ip", "other")
	resolve := func(what string) int32 {
		t.Helper()
		p, err := ResolvePriority(c, PrioritySetting{Auto: true}, "nftpolicy", zap.NewNop())
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return p
	}
	p0 := resolve("first")
	if p0 != -8 {
		t.Errorf("first choice %d, want -8 (ahead of -5 and -7)", p0)
	}
	ok := func(string, bool) error { return nil }
	for i := range 4 {
		if _, err := c.ApplyGuarded(r9ForwardTable(p0, "w"), ok); err != nil {
			t.Fatal(err)
		}
		if p := resolve("after a whole write"); p != p0 {
			t.Fatalf("write %d: priority moved from %d to %d", i, p0, p)
		}
	}
	// A write stopped after its first batch leaves a dormant handover
	// table, with the same base chains: made here by hand.
	listed := testns.Nft(t, ns, "", "list", "table", "inet", "nftpolicy")
	listed = strings.Replace(listed, "table inet nftpolicy {", "table inet nftpolicy-handover {\n\tflags dormant", 1)
	listed = strings.Replace(listed, `comment "w"`, `comment "nftpolicy: the new state, in force while the table it is named after is replaced"`, 1)
	testns.Nft(t, ns, listed, "-f", "-")
	if p := resolve("with a handover table left"); p != p0 {
		t.Errorf("with a handover table left: priority moved from %d to %d", p0, p)
	}
	// Ours dormant, by hand.
	testns.Nft(t, ns, "", "add", "table", "inet", "nftpolicy", "{", "flags", "dormant", ";", "}")
	if p := resolve("with our table dormant"); p != p0 {
		t.Errorf("with our table dormant: priority moved from %d to %d", p0, p)
	}
	if _, err := c.ApplyGuarded(r9ForwardTable(p0, "y"), ok); err != nil {
		t.Fatal(err)
	}
	if p := resolve("after the recovery"); p != p0 {
		t.Errorf("after the recovery: priority moved from %d to %d", p0, p)
	}
	otherAfter := testns.Nft(t, ns, "", "list", "table", "inet", "kube-proxy") + testns.Nft(t, ns, "", "list", "table", "ip", "other")
	if otherAfter != otherBefore {
		t.Errorf("other programs' tables changed:\n%s\nnow:\n%s", otherBefore, otherAfter)
	}
	if out := testns.Nft(t, ns, "", "list", "tables"); strings.Contains(out, nft.HandoverTable("nftpolicy")) {
		t.Errorf("after the recovery write, leftovers:\n%s", out)
	}
	if d, err := c.Drift(r9ForwardTable(p0, "y")); d != "" || err != nil {
		t.Errorf("drift %q, %v", d, err)
	}
}
