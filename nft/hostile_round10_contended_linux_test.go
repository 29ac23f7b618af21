package nft

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// Hostile review, round 10: a write refused half way while another
// program keeps committing (a busy kube-proxy, a firewall manager), and
// a program flipping the handover table's dormant flag (promise 2).

// r10Busy commits, from its own Conn, a tiny table of its own again and
// again, as fast as it can, until stop.
type r10Busy struct {
	stop    atomic.Bool
	done    sync.WaitGroup
	commits atomic.Int64
}

func r10StartBusy(t *testing.T, ns string) *r10Busy {
	o, err := Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	b := &r10Busy{}
	b.done.Add(1)
	go func() {
		defer b.done.Done()
		defer o.Close()
		tbl := &Table{Family: FamilyInet, Name: "busy"}
		for !b.stop.Load() {
			if _, err := o.replace("busy program", tbl, replaceStep{name: "busy"}, 0, nil); err == nil {
				b.commits.Add(1)
			}
		}
	}()
	return b
}

func (b *r10Busy) finish() int64 {
	b.stop.Store(true)
	b.done.Wait()
	return b.commits.Load()
}

// Promise 2, ApplyAt refused at its third batch by another program's
// commit. apply then undoes its second batch (undoHandover: ours, dormant
// with the old state, woken; the handover table deleted), and returns an
// error saying "the old state is back in force". But the undo is one more
// batch checked against a generation it read three netlink round trips
// earlier, and its failure is ignored: with another program committing
// all along (the very reason the third batch was refused), it is refused
// too, and the error is returned as if it had gone.
//
// FAILED before the later batches asserted tokens (now holds): 8 of 8 tries, e.g.
//
//	error "... our table still holds the old state); the old state is back in force"
//	try 0: handover table awake true, ours awake false (the new state is in force)
//
// and r9AssertClean: "the handover table is left behind", "our table
// exists true, flags 0x1", "drift: table flags are 0x1 (dormant ...)".
func TestHostileRound10BusyCommitterDefeatsUndo(t *testing.T) {
	ns, c := r9NS(t)
	old, new := intervalTable(2000, "old"), intervalTable(2000, "new")
	const tries = 8
	bad := 0
	for i := range tries {
		if _, err := c.Apply(old); err != nil {
			t.Fatal(err)
		}
		gen, err := c.Generation()
		if err != nil {
			t.Fatal(err)
		}
		var busy *r10Busy
		c.betweenBatches = func(n int) {
			if n == 2 {
				busy = r10StartBusy(t, ns)
				for busy.commits.Load() == 0 {
					runtimeGosched()
				}
			}
		}
		_, err = c.ApplyAt(new, gen)
		c.betweenBatches = nil
		if busy != nil {
			busy.finish()
		}
		if err == nil || !strings.Contains(err.Error(), "the old state is back in force") {
			t.Logf("try %d: %v (not the undo path)", i, err)
			continue
		}
		oursLive, _ := c.live("nftpolicy")
		hoLive, _ := c.live(HandoverTable("nftpolicy"))
		if !oursLive || hoLive {
			bad++
			if bad == 1 {
				t.Logf("try %d: error %q", i, err)
				r9AssertClean(t, ns, c, old, "after an ApplyAt whose error says the old state is back in force")
			}
			t.Logf("try %d: handover table awake %v, ours awake %v", i, hoLive, oursLive)
		}
	}
	if bad > 0 {
		t.Errorf("the error said the old state is back in force, but it was not, %d of %d tries", bad, tries)
	}
}

// Promise 2, a whole write refused at its second batch by another
// program's commit (Apply, ApplyGuarded and ApplyAt all check the second
// batch against the first's generation). apply then drops the dormant
// handover table the first batch wrote (dropHandover), in one more batch
// checked against a generation it read two round trips earlier, and
// ignores its failure.
//
// FAILED before the later batches asserted tokens (now holds): e.g. "a dormant table inet nftpolicy-handover (the refused state)
// is left behind in nft list tables, 8 of 8 tries", all three modes.
func TestHostileRound10BusyCommitterLeavesDormantHandover(t *testing.T) {
	for _, how := range []string{"Apply", "ApplyGuarded", "ApplyAt"} {
		t.Run(how, func(t *testing.T) {
			ns, c := r9NS(t)
			old, new := intervalTable(2000, "old"), intervalTable(2000, "new")
			if _, err := c.Apply(old); err != nil {
				t.Fatal(err)
			}
			const tries = 8
			left := 0
			for i := range tries {
				// Clear what the last try left (a whole write over a
				// dormant handover table of ours takes it away).
				if _, err := c.Apply(old); err != nil {
					t.Fatal(err)
				}
				gen, err := c.Generation()
				if err != nil {
					t.Fatal(err)
				}
				var busy *r10Busy
				c.betweenBatches = func(n int) {
					if n == 1 {
						busy = r10StartBusy(t, ns)
						for busy.commits.Load() == 0 {
							runtimeGosched()
						}
					}
				}
				switch how {
				case "Apply":
					_, err = c.Apply(new)
				case "ApplyGuarded":
					_, err = c.ApplyGuarded(new, func(string, bool) error { return nil })
				case "ApplyAt":
					_, err = c.ApplyAt(new, gen)
				}
				c.betweenBatches = nil
				if busy != nil {
					busy.finish()
				}
				if !errors.Is(err, ErrGenerationChanged) {
					t.Logf("try %d: %v (not refused at the second batch)", i, err)
					continue
				}
				if strings.Contains(r9Tables(t, ns), HandoverTable("nftpolicy")) {
					left++
					if left == 1 {
						t.Logf("try %d: error %q; tables:\n%s", i, err, r9Tables(t, ns))
					}
				}
				if d, err := c.Drift(old); d != "" || err != nil {
					t.Errorf("try %d: the old state is not in force: %q %v", i, d, err)
				}
			}
			if left > 0 {
				t.Errorf("a dormant table inet %s (the refused state) is left behind in nft list tables, %d of %d tries",
					HandoverTable("nftpolicy"), left, tries)
			}
		})
	}
}

// Promise 2 with the dormant flag flipped between batches by `nft`. Two
// one-line commands another program (or an admin) may run:
//
//   - after the first batch, `nft add table inet nftpolicy-handover`
//     (nft sends flags 0: it wakes a dormant table). The second batch is
//     refused (generation); dropHandover deletes the handover table only
//     if it is dormant, so an awake copy of the refused state stays, in
//     force next to the old one.
//   - after the second batch, `nft add table inet nftpolicy-handover {
//     flags dormant; }`: ApplyAt's third batch is refused (generation);
//     undoHandover undoes only an awake handover table, so it does
//     nothing: both tables stay dormant, nothing is in force, and the
//     error says "the old state is back in force".
//
// FAILED: both subtests: "error ... the old state stays in force; ours
// awake true, handover awake true" + "the handover table is left behind";
// and "error ... the old state is back in force; ours awake false,
// handover awake false" + handover left + "table flags are 0x1
// (dormant...)". The next write finished cleanly in both (held).
// Now the later batches assert tokens (empty sets) of the tables the
// write made, not the generation: a flag flipped by another program
// does not refuse them, and the write lands, clean.
func TestHostileRound10DormantFlagFlippedBetweenBatches(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after int
		nft   string
	}{
		{"handover woken after batch 1", 1, "add table inet nftpolicy-handover\n"},
		{"handover made dormant after batch 2", 2, "add table inet nftpolicy-handover { flags dormant; }\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, c := r9NS(t)
			old, new := intervalTable(2000, "old"), intervalTable(2000, "new")
			if _, err := c.Apply(old); err != nil {
				t.Fatal(err)
			}
			gen, err := c.Generation()
			if err != nil {
				t.Fatal(err)
			}
			c.betweenBatches = func(n int) {
				if n == tc.after {
					testns.Nft(t, ns, tc.nft, "-f", "-")
				}
			}
			_, err = c.ApplyAt(new, gen)
			c.betweenBatches = nil
			oursLive, _ := c.live("nftpolicy")
			hoLive, _ := c.live(HandoverTable("nftpolicy"))
			t.Logf("error %v; ours awake %v, handover awake %v", err, oursLive, hoLive)
			if err == nil {
				r9AssertClean(t, ns, c, new, "after the write")
			} else {
				r9AssertClean(t, ns, c, old, "after the refused write")
			}
			// The next write must finish cleanly either way.
			if _, err := c.Apply(new); err != nil {
				t.Fatal(err)
			}
			r9AssertClean(t, ns, c, new, "after the next write")
		})
	}
}
