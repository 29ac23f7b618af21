package enforcer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/nftpolicy/nftpolicy/internal/testns"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// openSyncer is a daemon's Syncer on the namespace ns, released when the
// test ends.
func openSyncer(t *testing.T, ns string, opts Options) *Syncer {
	t.Helper()
	conn, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	opts.Node = testNode
	s := NewSyncer(conn, opts, PrioritySetting{Auto: true}, zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)))
	t.Cleanup(func() {
		s.Close()
		conn.Close()
	})
	return s
}

var (
	ownerSnap   = cluster(policy("x", "deny", denyIngress))
	ownerChange = cluster(policy("x", "allow-y", ingressRule(peers(nsPeer("y")), port(tcp, 80))))
)

// recordIn returns the owner record of our table in ns.
func recordIn(t *testing.T, s *Syncer) string {
	t.Helper()
	c, err := s.conn.TableComment(DefaultTable)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func generation(t *testing.T, s *Syncer) uint32 {
	t.Helper()
	gen, err := s.conn.Generation()
	if err != nil {
		t.Fatal(err)
	}
	return gen
}

// A second daemon on a namespace that a running one programs refuses to
// run, naming the owner, and writes nothing; the first goes on.
func TestKernelOwnerSecondRefused(t *testing.T) {
	ns := testns.New(t, "nftpt")
	first := openSyncer(t, ns, Options{})
	if _, err := first.Sync(ownerSnap); err != nil {
		t.Fatal(err)
	}
	if got, want := recordIn(t, first), first.Owner().Comment(); got != want {
		t.Fatalf("record %q, want %q", got, want)
	}
	if listing := testns.ListTable(t, ns, DefaultTable); !strings.Contains(listing, `comment "`+first.Owner().Comment()+`"`) {
		t.Errorf("nft list does not show the owner:\n%s", listing)
	}

	second := openSyncer(t, ns, Options{})
	before := generation(t, first)
	err := second.Claim()
	if !errors.Is(err, ErrOwned) || !strings.Contains(err.Error(), first.Owner().ID()) {
		t.Errorf("second daemon's claim: %v; want ErrOwned naming %s", err, first.Owner().ID())
	}
	if _, err := second.Sync(ownerChange); !errors.Is(err, ErrOwned) {
		t.Errorf("second daemon's sync: %v, want ErrOwned", err)
	}
	if _, err := second.Status(); err == nil {
		t.Error("the refused daemon reports ready")
	}
	if after := generation(t, first); after != before {
		t.Errorf("the refused daemon committed: generation %d, was %d", after, before)
	}
	if got := recordIn(t, first); got != first.Owner().Comment() {
		t.Errorf("record %q after the refusal, want the first owner's", got)
	}

	if _, err := first.Sync(ownerChange); err != nil {
		t.Errorf("first daemon after the refusal: %v", err)
	}
	if _, err := first.CheckDrift(); err != nil {
		t.Errorf("first daemon's drift check: %v", err)
	}
	if _, err := first.Status(); err != nil {
		t.Errorf("first daemon not ready: %v", err)
	}
}

// Told to, a second daemon takes over; the one it replaced finds out at
// its next drift check or its next write, goes unready naming the new
// owner, and writes nothing from then on.
func TestKernelOwnerTakeOver(t *testing.T) {
	ns := testns.New(t, "nftpt")
	a := openSyncer(t, ns, Options{})
	if _, err := a.Sync(ownerSnap); err != nil {
		t.Fatal(err)
	}
	b := openSyncer(t, ns, Options{TakeOver: true})
	if err := b.Claim(); err != nil {
		t.Fatalf("claim with TakeOver: %v", err)
	}
	if _, err := b.Sync(ownerSnap); err != nil {
		t.Fatalf("take-over sync: %v", err)
	}
	if got := recordIn(t, b); got != b.Owner().Comment() {
		t.Fatalf("record %q after the take-over, want %q", got, b.Owner().Comment())
	}
	if _, err := b.Status(); err != nil {
		t.Errorf("new owner not ready: %v", err)
	}

	// a finds out at its drift check (its table's content did not change).
	before := generation(t, a)
	_, err := a.CheckDrift()
	if !errors.Is(err, ErrTakenOver) || !strings.Contains(err.Error(), b.Owner().ID()) {
		t.Errorf("old owner's drift check: %v; want ErrTakenOver naming %s", err, b.Owner().ID())
	}
	if _, err := a.Status(); !errors.Is(err, ErrTakenOver) || !strings.Contains(err.Error(), b.Owner().ID()) {
		t.Errorf("old owner's status: %v; want ErrTakenOver naming %s", err, b.Owner().ID())
	}
	if _, err := a.Sync(ownerChange); !errors.Is(err, ErrTakenOver) {
		t.Errorf("old owner's sync: %v, want ErrTakenOver", err)
	}
	if after := generation(t, a); after != before {
		t.Errorf("the old owner wrote after losing the table: generation %d, was %d", after, before)
	}

	// b, replaced in turn, finds out at its next write.
	c := openSyncer(t, ns, Options{TakeOver: true})
	if _, err := c.Sync(ownerSnap); err != nil {
		t.Fatal(err)
	}
	before = generation(t, b)
	if _, err := b.Sync(ownerChange); !errors.Is(err, ErrTakenOver) || !strings.Contains(err.Error(), c.Owner().ID()) {
		t.Errorf("replaced owner's next write: %v; want ErrTakenOver naming %s", err, c.Owner().ID())
	}
	if _, err := b.Status(); !errors.Is(err, ErrTakenOver) {
		t.Errorf("replaced owner's status: %v", err)
	}
	if _, err := b.CheckDrift(); !errors.Is(err, ErrTakenOver) {
		t.Errorf("replaced owner's drift check: %v", err)
	}
	if after := generation(t, b); after != before {
		t.Errorf("the replaced owner wrote: generation %d, was %d", after, before)
	}
	if got := recordIn(t, c); got != c.Owner().Comment() {
		t.Errorf("record %q, want the last owner's %q", got, c.Owner().Comment())
	}
	if _, err := c.Status(); err != nil {
		t.Errorf("last owner not ready: %v", err)
	}
}

// ownerHelperEnv names the namespace a helper daemon programs.
const ownerHelperEnv = "NFTPOLICY_TEST_OWNER_NETNS"

// TestKernelOwnerHelperProcess is the daemon that TestKernelOwnerRestartAfterKill
// kills with -9; it does nothing in a normal run.
func TestKernelOwnerHelperProcess(t *testing.T) {
	ns := os.Getenv(ownerHelperEnv)
	if ns == "" {
		t.Skip("helper process of TestKernelOwnerRestartAfterKill")
	}
	conn, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	s := NewSyncer(conn, Options{Node: testNode}, PrioritySetting{Auto: true}, zap.NewNop())
	if _, err := s.Sync(ownerSnap); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("synced %s\n", s.Owner().ID())
	time.Sleep(time.Hour) // until killed
}

// A daemon killed with -9 leaves its record; while it runs a second one is
// refused, and once it is dead its restart claims the table with no flag.
func TestKernelOwnerRestartAfterKill(t *testing.T) {
	ns := testns.New(t, "nftpt")
	cmd := exec.Command(os.Args[0], "-test.run=^TestKernelOwnerHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), ownerHelperEnv+"="+ns)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(out)
	id := ""
	for lines.Scan() {
		if rest, ok := strings.CutPrefix(lines.Text(), "synced "); ok {
			id = rest
			break
		}
	}
	if id == "" {
		cmd.Wait()
		t.Fatalf("the helper daemon did not sync: %v", lines.Err())
	}

	restarted := openSyncer(t, ns, Options{})
	if err := restarted.Claim(); !errors.Is(err, ErrOwned) || !strings.Contains(err.Error(), id) {
		t.Errorf("while the first daemon runs: %v; want ErrOwned naming %s", err, id)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if rec, ok := nft.ParseOwner(recordIn(t, restarted)); !ok || rec.ID() != id {
		t.Fatalf("the killed daemon's record is %+v, %v; want %s", rec, ok, id)
	}
	if err := restarted.Claim(); err != nil {
		t.Errorf("after kill -9, the restart is refused: %v", err)
	}
	if _, err := restarted.Sync(ownerSnap); err != nil {
		t.Errorf("after kill -9, the restart cannot sync: %v", err)
	}
	if got := recordIn(t, restarted); got != restarted.Owner().Comment() {
		t.Errorf("record %q after the restart, want %q", got, restarted.Owner().Comment())
	}
}

// ApplyOnce refuses to write over a running daemon's table unless told
// to; its own record does not hold back a daemon started after it.
func TestKernelOwnerApplyOnce(t *testing.T) {
	ns := testns.New(t, "nftpt")
	d := openSyncer(t, ns, Options{})
	if _, err := d.Sync(ownerSnap); err != nil {
		t.Fatal(err)
	}
	table := mustCompile(t, ownerChange)
	conn := d.conn
	if _, err := ApplyOnce(conn, table, false, zap.NewNop()); !errors.Is(err, ErrOwned) {
		t.Errorf("apply over a running daemon: %v, want ErrOwned", err)
	}
	if _, err := ApplyOnce(conn, table, true, zap.NewNop()); err != nil {
		t.Fatalf("apply with take-over: %v", err)
	}
	if _, err := d.CheckDrift(); !errors.Is(err, ErrTakenOver) {
		t.Errorf("daemon after a take-over by apply: %v, want ErrTakenOver", err)
	}
	later := openSyncer(t, ns, Options{})
	if _, err := later.Sync(ownerSnap); err != nil {
		t.Errorf("a daemon after a one-shot apply: %v", err)
	}
}

// runSyncer runs s.Run until the test ends.
func runSyncer(t *testing.T, s *Syncer, updates <-chan *k8s.Snapshot) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.Run(ctx, updates, Timing{Debounce: 10 * time.Millisecond, MaxDelay: 100 * time.Millisecond, Retry: 100 * time.Millisecond})
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// waitFor polls cond until it holds, failing the test after a generous
// timeout: the kernel and the Run loop are fast, the CI machine may not be.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ourForwardPriority is the priority of our forward chain in the kernel.
func ourForwardPriority(t *testing.T, s *Syncer) (int32, bool) {
	t.Helper()
	chains, err := s.conn.BaseChains("forward")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chains {
		if c.Family == nft.FamilyInet && c.Table == DefaultTable {
			return c.Priority, true
		}
	}
	return 0, false
}

// Another table's forward chain registered at our priority makes Run
// re-place ours at once, with no cluster change.
func TestKernelForeignForwardChainReresolvesPriority(t *testing.T) {
	ns := testns.New(t, "nftpt")
	s := openSyncer(t, ns, Options{})
	updates := make(chan *k8s.Snapshot, 1)
	updates <- ownerSnap
	runSyncer(t, s, updates)
	waitFor(t, "the first sync and the commit monitor", func() bool {
		gen, _ := s.Status()
		return gen > 0 && s.forwardChains() != nil
	})
	ours, ok := ourForwardPriority(t, s)
	if !ok {
		t.Fatal("no forward chain of ours")
	}
	testns.Nft(t, ns, fmt.Sprintf("add table ip kube\nadd chain ip kube kube-forward { type filter hook forward priority %d; }\n", ours), "-f", "-")
	waitFor(t, "our forward chain to move ahead of kube-forward", func() bool {
		p, ok := ourForwardPriority(t, s)
		return ok && p < ours
	})
	if _, err := s.Status(); err != nil {
		t.Errorf("after re-placing the chain: %v", err)
	}
}

// A deleted namespace is reported, and nothing more is written.
func TestKernelNetnsDeletedIsNotReady(t *testing.T) {
	ns := testns.New(t, "nftpt")
	s := openSyncer(t, ns, Options{})
	if _, err := s.Sync(ownerSnap); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns del: %v: %s", err, out)
	}
	if _, err := s.CheckDrift(); !errors.Is(err, nft.ErrNetnsGone) {
		t.Errorf("drift check after ip netns del: %v, want ErrNetnsGone", err)
	}
	if _, err := s.Status(); !errors.Is(err, nft.ErrNetnsGone) || !strings.Contains(err.Error(), ns) {
		t.Errorf("status after ip netns del: %v, want ErrNetnsGone naming %s", err, ns)
	}
	if _, err := s.Sync(ownerChange); !errors.Is(err, nft.ErrNetnsGone) {
		t.Errorf("sync after ip netns del: %v, want ErrNetnsGone", err)
	}
}
