package enforcer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
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

// nftConn is the *nft.Conn under a Syncer that openSyncer made.
func nftConn(s *Syncer) *nft.Conn { return s.conn.(connKernel).Conn }

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
	conn := nftConn(d)
	if _, err := ApplyOnce(conn, table, false, zap.NewNop()); !errors.Is(err, ErrOwned) {
		t.Errorf("apply over a running daemon: %v, want ErrOwned", err)
	}
	if _, err := ApplyOnce(conn, table, true, zap.NewNop()); err != nil {
		t.Fatalf("apply with take-over: %v", err)
	}
	// The one-shot's record names an owner that is not running: to the
	// daemon that is drift, and it writes its own table back.
	if repaired, err := d.CheckDrift(); err != nil || !repaired {
		t.Errorf("daemon after a take-over by apply: repaired %v, %v; want its table back", repaired, err)
	}
	if got := recordIn(t, d); got != d.Owner().Comment() {
		t.Errorf("record %q after the daemon's check, want its own %q", got, d.Owner().Comment())
	}
	d.Close() // the daemon stops
	if _, err := ApplyOnce(conn, table, false, zap.NewNop()); err != nil {
		t.Fatalf("apply over a stopped daemon's table: %v", err)
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

// deadOwner is the record of an nftpolicy that is not running (no beacon
// of its token is held anywhere).
var deadOwner = nft.Owner{Host: "evil", PID: 1, Token: "00000000deadbeef", Since: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)}

// restoreWithRecord replaces our table in ns with listing (an `nft list
// table` of it) carrying the record rec instead of its own, as restoring
// an old `nft list ruleset` backup does.
func restoreWithRecord(t *testing.T, ns, listing string, rec nft.Owner) {
	t.Helper()
	restored := ownerRE.ReplaceAllString(listing, `comment "`+rec.Comment()+`"`)
	if restored == listing {
		t.Fatalf("no owner record to replace in:\n%s", listing)
	}
	testns.Nft(t, ns, "delete table inet "+DefaultTable+"\n"+restored, "-f", "-")
}

var ownerRE = regexp.MustCompile(`comment "nftpolicy owner=[^"]*"`)

// A record naming an owner that is not running is drift, not a take-over:
// restoring an old backup of the table (same content, another record) is
// repaired by the drift check, which writes our record back; the daemon
// stays ready.
func TestKernelOwnerStaleRecordIsRepaired(t *testing.T) {
	ns := testns.New(t, "nftpt")
	s := openSyncer(t, ns, Options{})
	if _, err := s.Sync(ownerSnap); err != nil {
		t.Fatal(err)
	}
	restoreWithRecord(t, ns, testns.ListTable(t, ns, DefaultTable), deadOwner)
	if got := recordIn(t, s); got != deadOwner.Comment() {
		t.Fatalf("record %q after the restore, want %q", got, deadOwner.Comment())
	}
	repaired, err := s.CheckDrift()
	if err != nil || !repaired {
		t.Errorf("drift check over a dead owner's record: repaired %v, %v; want repaired", repaired, err)
	}
	if got := recordIn(t, s); got != s.Owner().Comment() {
		t.Errorf("record %q after the drift check, want ours %q", got, s.Owner().Comment())
	}
	if _, err := s.Status(); err != nil {
		t.Errorf("not ready after repairing a stale record: %v", err)
	}
	if _, err := s.Sync(ownerChange); err != nil {
		t.Errorf("sync after the repair: %v", err)
	}
}

// The reproducer of the adversarial pass: while Run runs, `nft -f` of a new
// table whose comment names a dead owner. The commit monitor's notice makes
// Run check at once; it rewrites the table with its record and stays ready.
func TestKernelRunRepairsForeignDeadRecord(t *testing.T) {
	ns := testns.New(t, "nftpt")
	s := openSyncer(t, ns, Options{})
	updates := make(chan *k8s.Snapshot, 1)
	updates <- ownerSnap
	runSyncer(t, s, updates) // no periodic drift check: only the monitor
	waitFor(t, "the first sync and the commit monitor", func() bool {
		gen, _ := s.Status()
		return gen > 0 && s.foreignCommits() != nil
	})
	testns.Nft(t, ns, fmt.Sprintf("delete table inet %s\ntable inet %s {\n\tcomment %q\n\tchain filter-forward { type filter hook forward priority 0; policy accept; }\n}\n",
		DefaultTable, DefaultTable, deadOwner.Comment()), "-f", "-")
	waitFor(t, "our record back in the table", func() bool {
		return recordIn(t, s) == s.Owner().Comment()
	})
	if listing := testns.ListTable(t, ns, DefaultTable); !strings.Contains(listing, "chain ingress-pod-") {
		t.Errorf("the table was not rewritten whole:\n%s", listing)
	}
	if _, err := s.Status(); err != nil {
		t.Errorf("not ready after the repair: %v", err)
	}
}

// A daemon taken over by a running one writes nothing and is not ready
// while that one runs, keeps checking, and takes the table back when the
// new owner is gone (its beacon released, as when it dies).
func TestKernelOwnerTakenOverTakesTableBack(t *testing.T) {
	ns := testns.New(t, "nftpt")
	a := openSyncer(t, ns, Options{})
	updates := make(chan *k8s.Snapshot, 1)
	updates <- ownerSnap
	runSyncer(t, a, updates)
	waitFor(t, "the first sync", func() bool {
		gen, _ := a.Status()
		return gen > 0
	})
	b := openSyncer(t, ns, Options{TakeOver: true})
	if _, err := b.Sync(ownerChange); err != nil {
		t.Fatalf("take-over: %v", err)
	}
	waitFor(t, "the old owner to find it was taken over", func() bool {
		_, err := a.Status()
		return errors.Is(err, ErrTakenOver) && strings.Contains(err.Error(), b.Owner().ID())
	})
	// Several of a's checks go by: it writes nothing while b runs.
	before := generation(t, a)
	time.Sleep(3 * netnsCheck)
	if after := generation(t, a); after != before {
		t.Errorf("the taken-over daemon committed while the new owner runs: generation %d, was %d", after, before)
	}
	if got := recordIn(t, a); got != b.Owner().Comment() {
		t.Errorf("record %q while the new owner runs, want %q", got, b.Owner().Comment())
	}
	if _, err := a.Status(); !errors.Is(err, ErrTakenOver) {
		t.Errorf("taken-over daemon's status while the new owner runs: %v", err)
	}
	// Nor does it grab the table when the table goes while the new owner
	// runs: that owner writes it again.
	testns.Nft(t, ns, "", "delete", "table", "inet", DefaultTable)
	time.Sleep(3 * netnsCheck)
	if _, err := a.conn.TableComment(DefaultTable); !errors.Is(err, nft.ErrNoTable) {
		t.Errorf("the taken-over daemon wrote a table while the new owner runs: %v", err)
	}

	b.Close() // the new owner dies
	waitFor(t, "the old owner to take the table back", func() bool {
		_, err := a.Status()
		return err == nil && recordIn(t, a) == a.Owner().Comment()
	})
	if listing := testns.ListTable(t, ns, DefaultTable); strings.Contains(listing, "allow-y") {
		t.Errorf("the table taken back is still the new owner's:\n%s", listing)
	}
}

// Two daemons started at the same moment both find the table free at
// Claim; the one that writes second finds a running owner before it ever
// wrote, and Run returns ErrOwned naming it, as Claim does for a daemon
// started second.
func TestKernelOwnerSimultaneousStartLoserStops(t *testing.T) {
	ns := testns.New(t, "nftpt")
	first := openSyncer(t, ns, Options{})
	if _, err := first.Sync(ownerSnap); err != nil {
		t.Fatal(err)
	}
	restoreWithRecord(t, ns, testns.ListTable(t, ns, DefaultTable), deadOwner)
	first.Close()

	a := openSyncer(t, ns, Options{})
	b := openSyncer(t, ns, Options{})
	if err := a.Claim(); err != nil {
		t.Fatalf("a's claim over a dead owner's table: %v", err)
	}
	if err := b.Claim(); err != nil {
		t.Fatalf("b's claim over a dead owner's table: %v", err)
	}
	if _, err := a.Sync(ownerSnap); err != nil {
		t.Fatalf("a's sync: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	updates := make(chan *k8s.Snapshot, 1)
	updates <- ownerChange
	done := make(chan error, 1)
	go func() {
		done <- b.Run(ctx, updates, Timing{Debounce: 10 * time.Millisecond, MaxDelay: 100 * time.Millisecond, Retry: 100 * time.Millisecond})
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrOwned) || !strings.Contains(err.Error(), a.Owner().ID()) {
			t.Errorf("the second writer's Run: %v; want ErrOwned naming %s", err, a.Owner().ID())
		}
	case <-time.After(10 * time.Second):
		cancel()
		<-done
		t.Fatal("the second writer's Run still runs after 10s; want it to return ErrOwned")
	}
	if got := recordIn(t, a); got != a.Owner().Comment() {
		t.Errorf("record %q, want the first writer's %q", got, a.Owner().Comment())
	}
}

// ip netns del makes Run's Syncer unready within about a second, not at
// the next drift check.
func TestKernelRunNetnsDeletedIsNotReadySoon(t *testing.T) {
	ns := testns.New(t, "nftpt")
	s := openSyncer(t, ns, Options{})
	updates := make(chan *k8s.Snapshot, 1)
	updates <- ownerSnap
	runSyncer(t, s, updates) // no periodic drift check
	waitFor(t, "the first sync", func() bool {
		gen, err := s.Status()
		return gen > 0 && err == nil
	})
	if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns del: %v: %s", err, out)
	}
	start := time.Now()
	for {
		_, err := s.Status()
		if errors.Is(err, nft.ErrNetnsGone) {
			t.Logf("not ready %v after ip netns del: %v", time.Since(start).Round(time.Millisecond), err)
			break
		}
		if time.Since(start) > 10*netnsCheck {
			t.Fatalf("still ready %v after ip netns del: %v", time.Since(start).Round(time.Millisecond), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A foreign forward chain at the lowest priority leaves no slot ahead of
// it: ours moves right after it, the daemon stays ready (policy is still
// enforced: an accept ends only its own base chain), and it goes on
// following changes instead of freezing every update.
func TestKernelRunNoPriorityAheadGoesOnRightAfter(t *testing.T) {
	ns := testns.New(t, "nftpt")
	s := openSyncer(t, ns, Options{})
	updates := make(chan *k8s.Snapshot, 1)
	updates <- ownerSnap
	runSyncer(t, s, updates)
	waitFor(t, "the first sync and the commit monitor", func() bool {
		gen, err := s.Status()
		return gen > 0 && err == nil && s.forwardChains() != nil
	})
	testns.Nft(t, ns, "add table ip kube\nadd chain ip kube kube-forward { type filter hook forward priority -2147483648; }\n", "-f", "-")
	waitFor(t, "ours right after the chain at the lowest priority", func() bool {
		return strings.Contains(testns.ListTable(t, ns, DefaultTable), "hook forward priority -2147483647;")
	})
	gen, err := s.Status()
	if err != nil {
		t.Fatalf("not ready after moving right after the lowest chain: %v", err)
	}
	next := *ownerSnap
	next.Policies = nil
	updates <- &next
	waitFor(t, "the next change programmed", func() bool {
		g, err := s.Status()
		return err == nil && g > gen && !strings.Contains(testns.ListTable(t, ns, DefaultTable), "chain ingress-pod-")
	})
}

// Cleanup refuses to delete the table of a running nftpolicy, naming it,
// unless forced; it deletes that of an owner that is gone, and nothing.
func TestKernelCleanupRefusesRunningOwner(t *testing.T) {
	ns := testns.New(t, "nftpt")
	d := openSyncer(t, ns, Options{})
	if _, err := d.Sync(ownerSnap); err != nil {
		t.Fatal(err)
	}
	log := zaptest.NewLogger(t)
	err := Cleanup(nftConn(d), DefaultTable, false, log)
	if !errors.Is(err, ErrOwned) || !strings.Contains(err.Error(), d.Owner().ID()) {
		t.Errorf("cleanup under a running daemon: %v; want ErrOwned naming %s", err, d.Owner().ID())
	}
	if got := recordIn(t, d); got != d.Owner().Comment() {
		t.Errorf("record %q after a refused cleanup", got)
	}
	if err := Cleanup(nftConn(d), DefaultTable, true, log); err != nil {
		t.Errorf("forced cleanup: %v", err)
	}
	if _, err := d.conn.TableComment(DefaultTable); !errors.Is(err, nft.ErrNoTable) {
		t.Errorf("table after a forced cleanup: %v, want none", err)
	}
	if repaired, err := d.CheckDrift(); err != nil || !repaired {
		t.Errorf("the daemon after a forced cleanup: repaired %v, %v", repaired, err)
	}
	d.Close() // the daemon stops
	for i := 0; i < 2; i++ {
		if err := Cleanup(nftConn(d), DefaultTable, false, log); err != nil {
			t.Errorf("cleanup #%d after the daemon stopped: %v", i+1, err)
		}
	}
	if _, err := d.conn.TableComment(DefaultTable); !errors.Is(err, nft.ErrNoTable) {
		t.Errorf("table after cleanup: %v, want none", err)
	}
}
