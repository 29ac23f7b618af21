package nft

import (
	"strings"
	"testing"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// countedTable is sampleTable with a counter on the rule that allows and
// on the pod chain's drop, where the compiler puts them.
func countedTable() *Table {
	t := clone(sampleTable())
	for _, ch := range t.Chains {
		for i, r := range ch.Rules {
			if r.Comment == "x/allow ingress[0]" || r.Comment == "x/a: no policy allows" {
				ch.Rules[i].Exprs = append([]Expr{Counter{}}, r.Exprs...)
			}
		}
	}
	return t
}

func TestKernelCounterMatchesNft(t *testing.T) {
	table := countedTable()
	got := testns.AssertSameAsNft(t, table.Name, applyIn(table), Render(table))
	if n := strings.Count(got, "counter packets 0 bytes 0"); n != 2 {
		t.Errorf("%d counters listed, want 2:\n%s", n, got)
	}
}

// Counts are no content: a table whose counters counted is no drift, and
// RuleCounters reads what they counted, by rule handle and table handle.
func TestKernelRuleCounters(t *testing.T) {
	ns, c := openTestNS(t)
	table := countedTable()
	// nft sets a counter's values as it creates it: a table as if packets
	// had been counted.
	text := strings.Replace(Render(table), "counter drop", "counter packets 7 bytes 420 drop", 1)
	text = strings.Replace(text, "counter ip saddr", "counter packets 5 bytes 300 ip saddr", 1)
	testns.Nft(t, ns, text, "-f", "-")
	if d, err := c.Drift(table); err != nil || d != "" {
		t.Fatalf("Drift of a table whose counters counted = %q, %v; want none", d, err)
	}
	rc, err := c.RuleCounters(table.Name, []string{"pod-x/a", "np-x/allow", "no-such-chain", "leaf"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, r := range rc.Rules {
		if r.Handle == 0 {
			t.Errorf("rule of chain %s without a handle", r.Chain)
		}
		got[r.Chain] += r.Packets
	}
	if len(rc.Rules) != 2 || got["pod-x/a"] != 7 || got["np-x/allow"] != 5 {
		t.Errorf("RuleCounters = %+v, want 7 packets in pod-x/a and 5 in np-x/allow", rc.Rules)
	}
	// The table replaced: another table handle, counters from zero.
	if _, err := c.Apply(table); err != nil {
		t.Fatal(err)
	}
	again, err := c.RuleCounters(table.Name, []string{"pod-x/a", "np-x/allow"})
	if err != nil {
		t.Fatal(err)
	}
	if again.Table == rc.Table {
		t.Errorf("the table replaced kept handle %d", rc.Table)
	}
	for _, r := range again.Rules {
		if r.Packets != 0 {
			t.Errorf("chain %s of the new table counts %d packets", r.Chain, r.Packets)
		}
	}
}
