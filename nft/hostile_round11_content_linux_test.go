package nft

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// Hostile review, round 11: content the kernel refuses, written whole
// over a table in force with an interval set (four batches through the
// handover table), over nothing (one batch), and, for comparison, with
// no interval set (one batch). Promise 4: a refusal for bad content must
// not claim a conflict (callers retry ErrGenerationChanged); promise 2:
// the old state stays, with nothing left behind.
//
// Table.Validate does not look for two chains or two sets of one name;
// the kernel answers EEXIST, and apply's moved takes any EEXIST for
// another writer's table in the way (its comment says so: "a table with
// two chains of one name gets it too, and is retried as a conflict").
//
// FAILS: "two sets named s" (a verdict map, then the table's interval
// set) over a table in force and over nothing wraps ErrGenerationChanged
// with no other writer:
//
//	apply table inet nftpolicy: kernel refused the batch: netlink receive:
//	file exists / netlink receive: invalid argument (writing table inet
//	nftpolicy-handover, dormant): ruleset generation changed (another
//	writer changed the tables between the batches of this write)
//
// The same content with no interval set is refused plainly; two base
// chains of one name (EOPNOTSUPP) and a jump to a missing chain (ENOENT,
// here with nothing half done: see TestHostileRound11RecoveryRefusedForContent
// for the case that claims a conflict) hold.
func TestHostileRound11BadContentIsNoConflict(t *testing.T) {
	dupSet := func(interval bool) *Table {
		t := r11Table(100, "dup", false)
		if !interval {
			t = r10PlainTable("dup")
		}
		// A verdict map of the same name first (the lookups find the
		// last: Validate passes); the kernel refuses the second (EEXIST).
		dup := &Set{Name: t.Sets[0].Name, Key: KeyIPv4, Verdict: true, Elements: []Element{{Addr: netip.MustParseAddr("10.99.0.1"), Verdict: Verdict{Kind: Accept}}}}
		t.Sets = append([]*Set{dup}, t.Sets...)
		return t
	}
	dupChain := func(interval bool) *Table {
		t := r11Table(100, "dup", false)
		if !interval {
			t = r10PlainTable("dup")
		}
		t.Chains = append(append([]*Chain(nil), t.Chains...), &Chain{Name: t.Chains[0].Name,
			Hook: &Hook{Type: "filter", Hook: "input", Priority: 0, Policy: Accept}})
		return t
	}
	missing := func(interval bool) *Table {
		t := r11Bad(100, "missing")
		if !interval {
			t.Sets[0].Interval, t.Sets[0].PerAddress = false, true
		}
		return t
	}
	cases := map[string]func(bool) *Table{
		"two sets named s":          dupSet,
		"two base chains named out": dupChain,
		"jump to a missing chain":   missing,
	}
	for name, make := range cases {
		for _, over := range []string{"in force", "nothing"} {
			for _, interval := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/over %s/interval %v", name, over, interval), func(t *testing.T) {
					ns, c := r11NS(t)
					old := r11Table(1000, "old", false)
					if over == "in force" {
						if _, err := c.Apply(old); err != nil {
							t.Fatal(err)
						}
					}
					bad := make(interval)
					if err := bad.Validate(); err != nil {
						t.Logf("Validate refuses it: %v", err)
					}
					_, err := c.ApplyGuarded(bad, func(string, bool) error { return nil })
					t.Logf("write: %v", err)
					if err == nil {
						t.Fatal("written")
					}
					if errors.Is(err, ErrGenerationChanged) {
						t.Errorf("bad content, no other writer, and the error wraps ErrGenerationChanged: a caller retries it as a conflict")
					}
					out := r9Tables(t, ns)
					if strings.Contains(out, HandoverTable("nftpolicy")) {
						t.Errorf("left behind:\n%s", out)
					}
					if over == "in force" {
						r9AssertClean(t, ns, c, old, "after the refused write")
					} else if strings.Contains(out, "nftpolicy") {
						t.Errorf("a refused first write left:\n%s", out)
					}
				})
			}
		}
	}
}

// A table whose name is valid (at most 255 bytes) but whose handover
// table's name is not (HandoverTable adds 9 bytes): every write of it,
// even the first and one without an interval set, is refused when apply
// reads the handover table (ERANGE), before anything is sent; Delete too.
// Recorded, not one of the promises: the errors are not conflicts
// (holds); Table.Validate does not refuse the name.
func TestHostileRound11LongTableName(t *testing.T) {
	_, c := r11NS(t)
	name := strings.Repeat("n", 250)
	mk := func(comment string) *Table {
		t := r11Table(100, comment, false)
		t.Name = name
		return t
	}
	plain := r10PlainTable("plain")
	plain.Name = name
	t.Logf("Validate: %v", mk("x").Validate())
	for what, tbl := range map[string]*Table{"interval": mk("first"), "plain": plain} {
		_, err := c.Apply(tbl)
		msg := fmt.Sprint(err)
		t.Logf("%s write of a table named with %d bytes: %s", what, len(name), msg[max(0, len(msg)-120):])
		if errors.Is(err, ErrGenerationChanged) {
			t.Errorf("refused as a conflict: %v", err)
		}
	}
	err := c.Delete(FamilyInet, name)
	msg := fmt.Sprint(err)
	t.Logf("Delete: %s", msg[max(0, len(msg)-120):])
}
