package nft

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// Hostile review, round 11: an operator adds sets, chains, an empty
// base chain, or a table with a name near ours, by hand,
// into our tables between the batches of a whole write (promises 1 and
// 2). None of it changes a verdict. The write must not misjudge a
// packet; refused, it must wrap ErrGenerationChanged (another program
// did it) and leave a complete state; and the next write must leave
// exactly what it wrote, with the operator's near-named tables intact.
// (A flowtable was tried too: this kernel has no inet flowtable.)
// Holds.
func TestHostileRound11OperatorAddsBetweenBatches(t *testing.T) {
	meddles := map[string]string{
		"set":        "add set inet %s extra { type ipv4_addr; flags interval; elements = { 10.99.0.0/16 }; }\n",
		"chain":      "add chain inet %s extra\nadd rule inet %s extra counter accept\n",
		"base chain": "add chain inet %s extra { type filter hook output priority 5; policy accept; }\n",
	}
	names := []string{"nftpolicy", HandoverTable("nftpolicy")}
	for mname, meddle := range meddles {
		for after := 1; after <= 3; after++ {
			for _, into := range names {
				t.Run(fmt.Sprintf("%s into %s after %d", mname, into, after), func(t *testing.T) {
					ns, c := r11NS(t)
					// Tables with names near ours, another program's.
					testns.Nft(t, ns, "add table inet nftpolicy-handover-handover\nadd table ip nftpolicy\nadd table ip6 nftpolicy-handover\nadd table inet nftpolicyhandover\nadd table inet nftpolicy-\n", "-f", "-")
					const fill = 2000
					old, new := r11Table(fill, "old", false), r11Table(fill, "new", false)
					if _, err := c.Apply(old); err != nil {
						t.Fatal(err)
					}
					near := r9Tables(t, ns)
					c.betweenBatches = func(n int) {
						if n == after {
							text := strings.ReplaceAll(meddle, "%s", into)
							testns.Nft(t, ns, text, "-f", "-")
						}
					}
					v := r11StartCounter(t, ns)
					_, err := c.ApplyGuarded(new, func(string, bool) error { return nil })
					c.betweenBatches = nil
					v.finish()
					t.Logf("write: %v; %s; %s", err, r11State(t, c), v)
					if b, l, p := v.blocks.Load(), v.leaks.Load(), v.probeDrops.Load(); b != 0 || l != 0 || p != 0 {
						t.Errorf("%d blocks, %d leaks, %d probe drops", b, l, p)
					}
					if err != nil && !errors.Is(err, ErrGenerationChanged) {
						t.Errorf("refused, not as a conflict: %v", err)
					}
					if o, _ := c.tableState("nftpolicy"); !o.awake {
						if h, _ := c.handover("nftpolicy"); !h.awake {
							t.Errorf("after the write: %s", r11State(t, c))
						}
					}
					final := r11Table(fill, "final", false)
					if _, err := c.ApplyGuarded(final, func(string, bool) error { return nil }); err != nil {
						t.Fatal(err)
					}
					r11AssertClean(t, ns, c, final, "after the next write")
					if toks := r11Tokens(t, ns); len(toks) != 0 {
						t.Errorf("token sets: %v", toks)
					}
					if got := r9Tables(t, ns); got != near {
						t.Errorf("tables with names near ours changed:\n%s\nwant\n%s", got, near)
					}
				})
			}
		}
	}
}

// r11AssertClean is r9AssertClean for a namespace that holds tables with
// names near ours: the handover table is looked for by its exact line.
func r11AssertClean(t *testing.T, ns string, c *Conn, want *Table, what string) {
	t.Helper()
	if out := r9Tables(t, ns); strings.Contains(out, "table inet "+HandoverTable(want.Name)+"\n") {
		t.Errorf("%s: the handover table is left behind:\n%s", what, out)
	}
	if o, err := c.tableState(want.Name); err != nil || !o.awake {
		t.Errorf("%s: our table %s, %v; want it in force", what, o, err)
	}
	if d, err := c.Drift(want); d != "" || err != nil {
		t.Errorf("%s: drift %q, %v", what, d, err)
	}
}
