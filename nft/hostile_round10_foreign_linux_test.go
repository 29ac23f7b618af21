package nft

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// Hostile review, round 10: foreign tables under the handover table's
// name, stale reads of what is in force, guards that panic, and large
// tables.

// r10BigTable is intervalTable with n more ranges in 12.0.0.0/6, for a
// write that takes a while to encode and commit: long enough for a
// counter of packets to see a table replaced while it commits.
func r10BigTable(n int, comment string) *Table {
	t := intervalTable(0, comment)
	s := t.Sets[0]
	for i := range n {
		a := uint32(0x0c000000) + uint32(i)*8
		first := netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)})
		b := a + 3
		last := netip.AddrFrom4([4]byte{byte(b >> 24), byte(b >> 16), byte(b >> 8), byte(b)})
		s.Elements = append(s.Elements, Element{Addr: first, Last: last})
	}
	return t
}

const r10Foreign = `table inet nftpolicy-handover {
	comment "another program's table";
	chain keep { type filter hook output priority 10; policy accept; counter; }
}
`

// Promise 3 against Apply (no generation, no guard): apply reads whether
// a table named nftpolicy-handover exists and is ours (its comment) once,
// at its start, and its first batch then deletes whatever is under that
// name and writes the handover table there, unchecked. Another program
// that creates its own table under that name while the batch is being
// encoded loses it.
//
// FAILED before the later batches asserted tokens (now holds): "another program's table inet nftpolicy-handover, made while
// Apply encoded its first batch, was deleted by it" (Apply returned nil).
// ApplyGuarded reads the handover table again after the guard's
// generation, and ApplyAt's first batch is checked against gen: both hold
// (subtests).
//
// The other program writes from the hook that runs once the write's
// planning reads are done (betweenBatches(0)). It used to write 30 ms
// after the write began, which on a loaded machine fired after the first
// batch had made our handover table, so that its own write was refused
// and the test failed in its set-up.
func TestHostileRound10ForeignHandoverMadeDuringEncode(t *testing.T) {
	for _, how := range []string{"Apply", "ApplyGuarded", "ApplyAt"} {
		t.Run(how, func(t *testing.T) {
			ns, c := r9NS(t)
			if _, err := c.Apply(intervalTable(0, "old")); err != nil {
				t.Fatal(err)
			}
			gen, err := c.Generation()
			if err != nil {
				t.Fatal(err)
			}
			big := r10BigTable(1000, "big")
			made := false
			c.betweenBatches = func(n int) {
				if n == 0 {
					testns.Nft(t, ns, r10Foreign, "-f", "-")
					made = true
				}
			}
			switch how {
			case "Apply":
				_, err = c.Apply(big)
			case "ApplyGuarded":
				_, err = c.ApplyGuarded(big, func(string, bool) error { return nil })
			case "ApplyAt":
				_, err = c.ApplyAt(big, gen)
			}
			c.betweenBatches = nil
			if !made {
				t.Fatalf("%s returned %v without planning a write", how, err)
			}
			t.Logf("%s: %v", how, err)
			comment, cerr := c.TableComment(HandoverTable("nftpolicy"))
			if cerr != nil || comment != "another program's table" {
				t.Errorf("another program's table inet %s, made while %s encoded its first batch, was deleted by it (now: comment %q, %v; %s returned %v)",
					HandoverTable("nftpolicy"), how, comment, cerr, how, err)
			}
			if err == nil {
				return
			}
			if !errors.Is(err, ErrGenerationChanged) && !errors.Is(err, ErrHandoverNotOurs) {
				t.Errorf("refused with %v", err)
			}
			if d, err := c.Drift(intervalTable(0, "old")); d != "" || err != nil {
				t.Errorf("after the refused write: %q %v", d, err)
			}
		})
	}
}

// Promise 1 with a stale read of what is in force: apply decides on one
// batch when our table is not awake, read once at its start (nothing to
// protect). If another writer puts the table in force while the batch is
// encoded, the one batch replaces a table in force, interval set
// included: exactly the write the handover table exists to avoid.
//
// FAILED: e.g. "try 0: the write went in one batch (handover false) over a
// table in force: 12375 of 461798 packets both states allow were dropped,
// 12369 both drop got through" (try 1: 10667 / 10666; timing-dependent,
// one try of two sometimes counts 0). Now the one batch names our table
// by the handle read, or creates it only if there is none: the other
// writer's table refuses it (ErrGenerationChanged), and the other state
// stays in force.
//
// The other writer acts from the hook that runs once the write's
// planning reads are done (betweenBatches(0)), not 20 ms after it began:
// on a loaded machine such a timer could fire after the write.
func TestHostileRound10StaleLivenessOneBatch(t *testing.T) {
	ns, c := r9NS(t)
	other, err := Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	const tries = 2
	for i := range tries {
		if err := c.Delete(FamilyInet, "nftpolicy"); err != nil {
			t.Fatal(err)
		}
		big := r10BigTable(240000, "big")
		var v *verdictCounter
		c.betweenBatches = func(n int) {
			if n != 0 {
				return
			}
			// The other writer: a small table in force, judging
			// alike, once the write has planned and before it
			// encodes.
			if _, err := other.Apply(intervalTable(0, "other")); err != nil {
				t.Fatal(err)
			}
			v = startVerdictCounter(t, ns)
		}
		var r struct {
			st  BatchStats
			err error
		}
		r.st, r.err = c.ApplyGuarded(big, func(string, bool) error { return nil })
		c.betweenBatches = nil
		if v == nil {
			t.Fatalf("try %d: ApplyGuarded returned %v without planning a write", i, r.err)
		}
		v.finish()
		t.Logf("try %d: handover %v, %v; %d sent, %d blocks, %d leaks", i, r.st.Handover, r.err, v.sent.Load(), v.blocks.Load(), v.leaks.Load())
		refused := errors.Is(r.err, ErrGenerationChanged)
		if r.err != nil && !refused {
			t.Fatal(r.err)
		}
		if b, l := v.blocks.Load(), v.leaks.Load(); b != 0 || l != 0 {
			t.Errorf("try %d: the write went in one batch (handover %v) over a table in force: %d of %d packets both states allow were dropped, %d both drop got through",
				i, r.st.Handover, b, v.sent.Load(), l)
		}
		if !refused {
			r9AssertClean(t, ns, c, big, "after the write")
		}
	}
}

// A guard that panics, recovered by the caller. (It ran twice per write
// then, and at its second call, the batch that writes our table dormant,
// the write was neither finished nor undone; it runs once now, at the
// first batch.) Promise 2 does not cover a panic; recorded: the new state is in
// force through the handover table, ours dormant with the old, and the
// next write finishes cleanly (holds), with no packet misjudged.
func TestHostileRound10GuardPanics(t *testing.T) {
	ns, c := r9NS(t)
	old, new := intervalTable(5000, "old"), intervalTable(5000, "new")
	if _, err := c.Apply(old); err != nil {
		t.Fatal(err)
	}
	v := startVerdictCounter(t, ns)
	for _, at := range []int{1} {
		calls := 0
		func() {
			defer func() {
				if r := recover(); r == nil {
					t.Errorf("panic at call %d: not raised", at)
				}
			}()
			c.ApplyGuarded(new, func(string, bool) error {
				calls++
				if calls == at {
					panic("r10 guard")
				}
				return nil
			})
		}()
		oursLive, _ := c.live("nftpolicy")
		hoLive, _ := c.live(HandoverTable("nftpolicy"))
		t.Logf("panic at guard call %d: ours awake %v, handover awake %v; tables:\n%s", at, oursLive, hoLive, r9Tables(t, ns))
		if !oursLive && !hoLive {
			t.Errorf("panic at guard call %d left nothing in force", at)
		}
		if _, err := c.ApplyGuarded(old, func(string, bool) error { return nil }); err != nil {
			t.Fatal(err)
		}
		r9AssertClean(t, ns, c, old, fmt.Sprintf("after the write following a panic at call %d", at))
	}
	v.finish()
	if b, l := v.blocks.Load(), v.leaks.Load(); b != 0 || l != 0 || v.sent.Load() == 0 {
		t.Errorf("%d of %d blocked, %d leaked", b, v.sent.Load(), l)
	}
}

// Promise 1 across kinds of table: a whole write alternates between a
// table with an interval set (through the handover table, over one in
// force) and one without (one batch, replacing one in force that has an
// interval set), with the same verdicts. Holds.
func TestHostileRound10IntervalAndPlainAlternate(t *testing.T) {
	ns, c := r9NS(t)
	if _, err := c.Apply(intervalTable(20000, "i")); err != nil {
		t.Fatal(err)
	}
	v := startVerdictCounter(t, ns)
	for i := range 10 {
		var tbl *Table
		if i%2 == 0 {
			tbl = r10PlainTable(fmt.Sprint("p", i))
		} else {
			tbl = intervalTable(20000, fmt.Sprint("i", i))
		}
		st, err := c.Apply(tbl)
		if err != nil {
			v.finish()
			t.Fatal(err)
		}
		if st.Handover != (i%2 == 1) {
			t.Errorf("write %d: handover %v", i, st.Handover)
		}
	}
	v.finish()
	t.Logf("%d sent", v.sent.Load())
	if b, l := v.blocks.Load(), v.leaks.Load(); b != 0 || l != 0 || v.sent.Load() == 0 {
		t.Errorf("%d of %d blocked, %d leaked", b, v.sent.Load(), l)
	}
	r9AssertClean(t, ns, c, intervalTable(20000, "i9"), "after the writes")
}

// ApplyAt at a stale generation, over each state a stopped write leaves
// (handover table dormant; awake over ours dormant): refused with
// ErrGenerationChanged, changing nothing; then a fresh write cleans up.
// Delete of the half-done state removes both. Holds.
func TestHostileRound10StaleApplyAtOverHalfDoneWrite(t *testing.T) {
	ns, c := r9NS(t)
	old, new := intervalTable(2000, "old"), intervalTable(2000, "new")
	marker, err := tableUserdataAttr(handoverComment)
	if err != nil {
		t.Fatal(err)
	}
	for _, awake := range []bool{false, true} {
		if _, err := c.Apply(old); err != nil {
			t.Fatal(err)
		}
		stale, err := c.Generation()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.replace("test", new, replaceStep{name: HandoverTable("nftpolicy"), dormant: true, comment: marker}, 0, nil); err != nil {
			t.Fatal(err)
		}
		if awake {
			if _, err := c.replace("test", nil, replaceStep{wake: HandoverTable("nftpolicy"), sleep: "nftpolicy"}, 0, nil); err != nil {
				t.Fatal(err)
			}
		}
		before := r9Tables(t, ns)
		bOurs, _ := c.live("nftpolicy")
		bHo, _ := c.live(HandoverTable("nftpolicy"))
		_, err = c.ApplyAt(new, stale)
		if !errors.Is(err, ErrGenerationChanged) {
			t.Errorf("awake %v: stale ApplyAt: %v", awake, err)
		}
		aOurs, _ := c.live("nftpolicy")
		aHo, _ := c.live(HandoverTable("nftpolicy"))
		if after := r9Tables(t, ns); after != before || aOurs != bOurs || aHo != bHo {
			t.Errorf("awake %v: a refused stale ApplyAt changed the state: %q -> %q, ours %v->%v, handover %v->%v", awake, before, after, bOurs, aOurs, bHo, aHo)
		}
		if awake {
			if err := c.Delete(FamilyInet, "nftpolicy"); err != nil {
				t.Fatal(err)
			}
			if out := r9Tables(t, ns); strings.Contains(out, "nftpolicy") {
				t.Errorf("Delete of a half-done write left:\n%s", out)
			}
			continue
		}
		if _, err := c.ApplyAt(new, 0); err != nil {
			t.Fatal(err)
		}
		r9AssertClean(t, ns, c, new, "after a fresh write")
	}
}

// Promise 1 with a large table (80k ranges) replaced whole twice while
// packets ask it. Holds.
func TestHostileRound10LargeTable(t *testing.T) {
	ns, c := r9NS(t)
	if _, err := c.Apply(r10BigTable(80000, "a")); err != nil {
		t.Fatal(err)
	}
	v := startVerdictCounter(t, ns)
	for i := range 2 {
		if _, err := c.ApplyGuarded(r10BigTable(80000, fmt.Sprint("b", i)), func(string, bool) error { return nil }); err != nil {
			v.finish()
			t.Fatal(err)
		}
	}
	v.finish()
	t.Logf("%d sent", v.sent.Load())
	if b, l := v.blocks.Load(), v.leaks.Load(); b != 0 || l != 0 || v.sent.Load() == 0 {
		t.Errorf("%d of %d blocked, %d leaked", b, v.sent.Load(), l)
	}
	r9AssertClean(t, ns, c, r10BigTable(80000, "b1"), "after the writes")
}
