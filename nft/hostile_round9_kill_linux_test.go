package nft

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Hostile review, round 9: a writer killed with SIGKILL at random moments
// of its whole writes (promise 3).

const r9ChildEnv = "NFTPOLICY_R9_KILL_CHILD_NS"

// TestHostileRound9KillChild is the writer the test below kills: run on
// its own it does nothing. It writes the interval table whole, again and
// again, with ApplyGuarded as the daemon does, alternating its comment,
// until it is killed.
func TestHostileRound9KillChild(t *testing.T) {
	ns := os.Getenv(r9ChildEnv)
	if ns == "" {
		t.Skip("run by TestHostileRound9KilledWholeWrites")
	}
	c, err := Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("ready\n")
	for i := 0; ; i++ {
		if _, err := c.ApplyGuarded(intervalTable(20000, fmt.Sprint("child", i%2)), func(string, bool) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
}

// A whole writer killed with SIGKILL at random moments, over and over,
// while packets ask the table: at every moment a complete table (the old
// state or the new, which judge alike) is in force, so nothing it allows
// is dropped and nothing it drops gets through; after each kill the
// kernel holds a complete state awake (ours, or the handover table when
// the writer died between its second and third batch); the next whole
// write leaves exactly our table, and Delete leaves nothing.
func TestHostileRound9KilledWholeWrites(t *testing.T) {
	ns, c := r9NS(t)
	if _, err := c.Apply(intervalTable(20000, "first")); err != nil {
		t.Fatal(err)
	}
	v := startVerdictCounter(t, ns)
	const kills = 20
	states := map[string]int{}
	for i := range kills {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHostileRound9KillChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), r9ChildEnv+"="+ns)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 6)
		if _, err := out.Read(buf); err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal(err)
		}
		if i%2 == 0 {
			// The kill lands at a random moment of some write (one
			// takes about a tenth of a second here).
			time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
		} else {
			// The kill lands right after a second batch made ours
			// dormant, if it can be caught (else after a while).
			deadline := time.Now().Add(2 * time.Second)
			for time.Now().Before(deadline) {
				if live, err := c.live("nftpolicy"); err == nil && !live {
					break
				}
			}
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		_, hOK, herr := c.tableFlagsOf("nftpolicy")
		oursLive, err1 := c.live("nftpolicy")
		hoLive, err2 := c.live(HandoverTable("nftpolicy"))
		if hOK != true || herr != nil || err1 != nil || err2 != nil {
			t.Fatalf("kill %d: our table exists %v (%v %v %v)", i, hOK, herr, err1, err2)
		}
		states[fmt.Sprintf("ours live %v, handover live %v", oursLive, hoLive)]++
		if !oursLive && !hoLive {
			t.Errorf("kill %d: neither our table nor the handover table is awake", i)
		}
		if oursLive && hoLive {
			t.Errorf("kill %d: both our table and the handover table are awake", i)
		}
	}
	// Recovery while packets still flow.
	final := intervalTable(20000, "final")
	if _, err := c.ApplyGuarded(final, func(string, bool) error { return nil }); err != nil {
		v.finish()
		t.Fatal(err)
	}
	v.finish()
	t.Logf("%d packets sent over %d kills; states after the kills: %v", v.sent.Load(), kills, states)
	if b, l := v.blocks.Load(), v.leaks.Load(); b != 0 || l != 0 {
		t.Errorf("across the kills, %d packets both states allow were dropped and %d both drop got through", b, l)
	}
	r9AssertClean(t, ns, c, final, "after the recovery write")
	if err := c.Delete(FamilyInet, "nftpolicy"); err != nil {
		t.Fatal(err)
	}
	if out := r9Tables(t, ns); strings.Contains(out, "nftpolicy") {
		t.Errorf("Delete left:\n%s", out)
	}
}
