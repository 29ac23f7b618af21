package nft

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// Hostile review, round 10: two writers of the same table, and the
// instants between the batches of a whole write through the handover
// table (handover_linux.go).

// r10PlainTable is intervalTable's verdicts with a hash set: a table
// without an interval set, written in one batch.
func r10PlainTable(comment string) *Table {
	t := intervalTable(0, comment)
	t.Sets[0].Interval, t.Sets[0].PerAddress = false, true
	return t
}

// r10Gap records, from the betweenBatches hook, whether any table of ours
// (ours or the handover table) was awake at that instant.
type r10Gap struct {
	mu    sync.Mutex
	notes []string
}

func (g *r10Gap) look(t *testing.T, c *Conn, n int) {
	ours, err1 := c.live("nftpolicy")
	ho, err2 := c.live(HandoverTable("nftpolicy"))
	if err1 != nil || err2 != nil {
		t.Errorf("after batch %d: %v %v", n, err1, err2)
		return
	}
	if !ours && !ho {
		g.mu.Lock()
		g.notes = append(g.notes, fmt.Sprintf("after batch %d neither table inet nftpolicy nor %s is awake", n, HandoverTable("nftpolicy")))
		g.mu.Unlock()
	}
}

// Promises 1 and 5 with a second nftpolicy writer (another Conn; in the
// daemon, another process whose owner check lets it write) that writes the
// same table whole while the first is between its second and third batch
// (handover table in force, ours dormant). The second sees an awake
// handover table over a dormant ours, takes it for a write that stopped
// half way, finishes it with its own state (ours awake, the handover table
// deleted) and returns. The first then goes on: its third batch deletes
// our table, which is now the one in force, and writes it dormant; until
// its fourth batch wakes it, no table of ours is on the hooks.
//
// FAILED before the later batches asserted tokens (now holds): every subtest where the first writer is Apply or ApplyGuarded
// (ApplyAt's third batch is refused by its generation), e.g.
//
//	after batch 3 neither table inet nftpolicy nor nftpolicy-handover is awake
//	packets both states allow were dropped: 0, that both drop got through: 3633 (2236-8900)
//
// (the hook sleeps 20 ms after batch 3, as a preempted writer would; with
// no sleep the gap is the time to build and send batch 4, and the
// concurrent test below still counts leaks). The third batch is unchecked
// (Apply) or checked against a generation read afresh (ApplyGuarded),
// and never asks whether what it replaces is still the dormant table its
// second batch left.
func TestHostileRound10SecondWriterBetweenBatches(t *testing.T) {
	seconds := map[string]func(*Conn) error{
		"second writes interval table": func(o *Conn) error { _, err := o.Apply(intervalTable(20000, "second")); return err },
		"second writes plain table":    func(o *Conn) error { _, err := o.Apply(r10PlainTable("second")); return err },
	}
	for _, how := range []string{"Apply", "ApplyGuarded", "ApplyAt"} {
		for sname, second := range seconds {
			t.Run(how+"/"+sname, func(t *testing.T) {
				ns, c := r9NS(t)
				other, err := Open(ns)
				if err != nil {
					t.Fatal(err)
				}
				defer other.Close()
				old, new := intervalTable(20000, "old"), intervalTable(20000, "new")
				if _, err := c.Apply(old); err != nil {
					t.Fatal(err)
				}
				var gap r10Gap
				var secondErr error
				c.betweenBatches = func(n int) {
					switch n {
					case 2:
						secondErr = second(other)
					case 3:
						gap.look(t, c, n)
						time.Sleep(20 * time.Millisecond)
					}
				}
				v := startVerdictCounter(t, ns)
				gen, err := c.Generation()
				if err != nil {
					v.finish()
					t.Fatal(err)
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
				v.finish()
				t.Logf("first writer: %v; second writer: %v; %d packets sent", err, secondErr, v.sent.Load())
				for _, n := range gap.notes {
					t.Error(n)
				}
				if b, l := v.blocks.Load(), v.leaks.Load(); b != 0 || l != 0 {
					t.Errorf("packets both states allow were dropped: %d, that both drop got through: %d", b, l)
				}
				if secondErr != nil {
					t.Fatalf("second writer: %v", secondErr)
				}
				// Whoever won, a next write leaves it clean.
				final := intervalTable(20000, "final")
				if _, err := c.Apply(final); err != nil {
					t.Fatal(err)
				}
				r9AssertClean(t, ns, c, final, "after a next write")
			})
		}
	}
}

// The same without any hook: two Conns write the table whole at the same
// time, over and over, with ApplyGuarded (check: accept) as a daemon
// does, while packets ask it. Every state written judges the two
// addresses alike, so any block or leak is a moment with no complete
// state in force.
//
// FAILED before the later batches asserted tokens (now holds): as above, without a widened window, e.g. "over 2x15 writes: 0
// blocks, 1155 leaks".
func TestHostileRound10TwoConcurrentWriters(t *testing.T) {
	ns, c := r9NS(t)
	other, err := Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := c.Apply(intervalTable(10000, "start")); err != nil {
		t.Fatal(err)
	}
	v := startVerdictCounter(t, ns)
	const writes = 15
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := map[string]int{}
	for w, conn := range []*Conn{c, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range writes {
				var tbl *Table
				if i%3 == 2 {
					tbl = r10PlainTable(fmt.Sprint("w", w))
				} else {
					tbl = intervalTable(10000, fmt.Sprint("w", w))
				}
				if _, err := conn.ApplyGuarded(tbl, func(string, bool) error { return nil }); err != nil {
					msg := err.Error()
					if i := strings.Index(msg, "kernel refused"); i >= 0 {
						msg = msg[i:]
					}
					if len(msg) > 120 {
						msg = msg[:120]
					}
					mu.Lock()
					errs[msg]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	v.finish()
	t.Logf("%d packets sent; refused writes: %v", v.sent.Load(), errs)
	if b, l := v.blocks.Load(), v.leaks.Load(); b != 0 || l != 0 {
		t.Errorf("over 2x%d writes: %d blocks, %d leaks", writes, b, l)
	}
	final := intervalTable(10000, "final")
	if _, err := c.Apply(final); err != nil {
		t.Fatal(err)
	}
	r9AssertClean(t, ns, c, final, "after a next write")
}

// Delete (another Conn) between each pair of batches of a whole write.
// Accepted outcomes: the write returns nil with exactly its state in
// force (it came after the delete); or it returns an error, and nothing
// of ours is left (the delete came last), or the error says the new state
// is in force and the next write finishes cleanly. Holds.
func TestHostileRound10DeleteBetweenBatches(t *testing.T) {
	for _, how := range []string{"Apply", "ApplyGuarded", "ApplyAt"} {
		for after := 1; after <= 3; after++ {
			t.Run(fmt.Sprintf("%s/after batch %d", how, after), func(t *testing.T) {
				ns, c := r9NS(t)
				other, err := Open(ns)
				if err != nil {
					t.Fatal(err)
				}
				defer other.Close()
				old, new := intervalTable(2000, "old"), intervalTable(2000, "new")
				if _, err := c.Apply(old); err != nil {
					t.Fatal(err)
				}
				var delErr error
				c.betweenBatches = func(n int) {
					if n == after {
						delErr = other.Delete(FamilyInet, "nftpolicy")
					}
				}
				gen, err := c.Generation()
				if err != nil {
					t.Fatal(err)
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
				if delErr != nil {
					t.Fatal(delErr)
				}
				t.Logf("write: %v; tables:\n%s", err, r9Tables(t, ns))
				switch {
				case err == nil:
					r9AssertClean(t, ns, c, new, "after a write that returned nil")
				case strings.Contains(err.Error(), "the new state is in force"):
					if _, err := c.Apply(new); err != nil {
						t.Fatal(err)
					}
					r9AssertClean(t, ns, c, new, "after the next write")
				default:
					if out := r9Tables(t, ns); strings.Contains(out, "nftpolicy") {
						t.Errorf("a refused write after a delete left:\n%s", out)
					}
				}
			})
		}
	}
}
