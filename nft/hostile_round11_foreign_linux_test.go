package nft

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// Hostile review, round 11: promise 3 on the path that finishes a write
// stopped half way (our handover table in force, ours dormant). apply
// reads the handover table (ours: it has our comment), then its first
// batch adds two tokens to the table of that NAME, unchecked for Apply
// (no generation, no guard), and the later batches assert those tokens,
// write ours dormant, wake it, and delete the table of that name. If
// another program replaced our handover table with a table of its own
// under that name between the read and that first batch, the write uses
// the other program's table (tokens into it), makes ours dormant under
// it, and then deletes it.
//
// Each try: a write stopped after its second batch (a panic in the hook,
// recovered: the state a SIGKILL there leaves); then B (Apply) finishes
// it while another program, a random few hundred microseconds in,
// replaces table inet nftpolicy-handover with its own (comment
// "foreign", empty), in one batch.
//
// FAILS (Apply only): e.g. "another program's table inet
// nftpolicy-handover was used or deleted by Apply in 59 of 248 tries":
// "the other program's table is gone ...; B: <nil>; now ours in force,
// handover absent" (B returned nil: its tokens went into the other
// program's table, its last batch deleted that table by name).
// ApplyGuarded (the guard reads the handover table again, after the
// generation its batch is checked against) and ApplyAt (checked against
// the caller's generation) hold.
func TestHostileRound11ForeignHandoverSwappedDuringFinish(t *testing.T) {
	for _, how := range []string{"Apply", "ApplyGuarded", "ApplyAt"} {
		t.Run(how, func(t *testing.T) {
			d := 6 * time.Second
			if how == "Apply" {
				d = 12 * time.Second
			}
			r11ForeignSwap(t, how, d)
		})
	}
}

func r11ForeignSwap(t *testing.T, how string, d time.Duration) {
	ns, c := r11NS(t)
	a, err := Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	hostile, err := Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer hostile.Close()
	const fill = 200
	foreignAttr, err := tableUserdataAttr("foreign")
	if err != nil {
		t.Fatal(err)
	}
	h := HandoverTable("nftpolicy")
	used, tries, swapped := 0, 0, 0
	outcomes := map[string]int{}
	deadline := time.Now().Add(d)
	for tries = 0; tries < 300 && time.Now().Before(deadline); tries++ {
		// Clean start, then a write stopped after its second batch.
		if err := c.Delete(FamilyInet, "nftpolicy"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Apply(r11Table(fill, "old", false)); err != nil {
			t.Fatal(err)
		}
		func() {
			defer func() { recover() }()
			a.betweenBatches = func(n int) {
				if n == 2 {
					panic("stopped")
				}
			}
			a.Apply(r11Table(fill, "a", false))
		}()
		a.betweenBatches = nil
		if o, _ := c.tableState("nftpolicy"); o.awake {
			t.Fatalf("set-up: %s", r11State(t, c))
		}
		done := make(chan error, 1)
		gen, err := c.Generation()
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			var err error
			switch how {
			case "Apply":
				_, err = c.Apply(r11Table(fill, "b", false))
			case "ApplyGuarded":
				_, err = c.ApplyGuarded(r11Table(fill, "b", false), func(string, bool) error { return nil })
			case "ApplyAt":
				_, err = c.ApplyAt(r11Table(fill, "b", false), gen)
			}
			done <- err
		}()
		spin(time.Duration(rand.IntN(600)) * time.Microsecond)
		_, herr := hostile.replace("another program", &Table{Family: FamilyInet, Name: h}, replaceStep{name: h, comment: foreignAttr}, 0, nil)
		berr := <-done
		if herr == nil {
			swapped++
		}
		comment, cerr := c.TableComment(h)
		toks := r11Tokens(t, ns)
		var in []string
		for _, tok := range toks {
			if strings.HasPrefix(tok, h+"/") {
				in = append(in, tok)
			}
		}
		switch {
		case herr != nil:
			outcomes["the other program's batch failed"]++
		case cerr != nil || comment != "foreign":
			used++
			outcomes["foreign table gone or replaced"]++
			if used <= 3 {
				t.Logf("try %d: the other program's table is gone (comment %q, %v); B: %v; now %s", tries, comment, cerr, berr, r11State(t, c))
			}
		case len(in) > 0:
			used++
			outcomes["tokens in the foreign table"]++
			if used <= 3 {
				t.Logf("try %d: tokens %v in the other program's table; B: %v; now %s", tries, in, berr, r11State(t, c))
			}
		default:
			outcomes[fmt.Sprintf("held (B error: %v)", berr != nil)]++
		}
		// The other program's table goes (by hand), with whatever is left.
		testns.Nft(t, ns, "add table inet "+h+"\ndelete table inet "+h+"\n", "-f", "-")
	}
	t.Logf("%d tries (%d swaps): %v", tries, swapped, outcomes)
	if used > 0 {
		t.Errorf("another program's table inet %s was used or deleted by %s in %d of %d tries", h, how, used, tries)
	}
}
