package enforcer

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/nftpolicy/nftpolicy/internal/scale"
	"github.com/nftpolicy/nftpolicy/internal/testns"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

func newTestSyncer(t *testing.T) (*Syncer, string) {
	t.Helper()
	ns := testns.New(t, "nftpt")
	conn, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return NewSyncer(conn, Options{Node: testNode}, PrioritySetting{Auto: true}, zap.NewNop()), ns
}

// A pod label change must reach the kernel as a batch of the elements it
// changes, not as the whole ruleset.
func TestKernelLabelChangeIsSmallBatch(t *testing.T) {
	s, ns := newTestSyncer(t)
	snap := scale.Cluster(20, 50, 5, 40, testNode, false) // 100 policies, 1000 pods
	first, err := s.Sync(snap)
	if err != nil {
		t.Fatal(err)
	}
	if !first.Batch.Full || first.Batch.Messages < 500 {
		t.Fatalf("first sync: %+v, want a full batch of the whole table", first.Batch)
	}

	// A remote pod of ns-0 leaves tier-0, which the policy-0 of every
	// namespace allows from team-0 namespaces: it leaves all those peer sets.
	changed := *snap
	changed.Pods = append([]*k8s.Pod(nil), snap.Pods...)
	i := slices.IndexFunc(snap.Pods, func(p *k8s.Pod) bool { return p.Namespace == "ns-0" && p.Name == "pod-3" })
	p := snap.Pods[i].DeepCopy()
	if p.Labels["tier"] != "tier-0" || p.Spec.NodeName == testNode {
		t.Fatalf("fixture changed: pod %s/%s is %v on %s", p.Namespace, p.Name, p.Labels, p.Spec.NodeName)
	}
	p.Labels["tier"] = "tier-1"
	changed.Pods[i] = p
	res, err := s.Sync(&changed)
	if err != nil {
		t.Fatal(err)
	}
	b := res.Batch
	t.Logf("full batch: %d messages; label change: %d messages, %d elements added, %d deleted, %d chains written",
		first.Batch.Messages, b.Messages, b.ElementsAdded, b.ElementsDeleted, b.ChainsWritten)
	if b.Full || b.ChainsWritten != 0 || b.ElementsDeleted == 0 {
		t.Errorf("label change batch %+v: want element changes only", b)
	}
	// Each set whose elements changed gets at most one delete and one add
	// message, and nothing else is written.
	touched := len(nft.Diff(first.Table, res.Table).UpdateSets)
	if touched == 0 || b.Messages > 2*touched || b.Messages*20 > first.Batch.Messages {
		t.Errorf("label change took %d messages for %d changed sets (full table: %d)", b.Messages, touched, first.Batch.Messages)
	}
	if d, err := s.conn.Drift(res.Table); err != nil || d != "" {
		t.Errorf("after the update: drift %q, %v", d, err)
	}
	oracle := testns.New(t, "nftpt")
	testns.Nft(t, oracle, nft.Render(res.Table), "-f", "-")
	if got, want := testns.ListTable(t, ns, "nftpolicy"), testns.ListTable(t, oracle, "nftpolicy"); got != want {
		t.Errorf("kernel after the label change differs from nft -f of the compiled table")
	}

	// The same snapshot again writes nothing.
	again, err := s.Sync(&changed)
	if err != nil || again.Batch.Messages != 0 {
		t.Errorf("resync of an unchanged snapshot: %+v, %v", again.Batch, err)
	}
}

func TestKernelDriftIsRepaired(t *testing.T) {
	s, ns := newTestSyncer(t)
	if _, err := s.Sync(cluster(policy("x", "deny", denyIngress))); err != nil {
		t.Fatal(err)
	}
	if repaired, err := s.CheckDrift(); err != nil || repaired {
		t.Fatalf("CheckDrift on an untouched table: %v, %v", repaired, err)
	}
	testns.Nft(t, ns, "", "flush", "map", "inet", "nftpolicy", "ingress-pods-v4")
	if repaired, err := s.CheckDrift(); err != nil || !repaired {
		t.Fatalf("CheckDrift after a flushed map: %v, %v", repaired, err)
	}
	if s.Repairs() != 1 {
		t.Errorf("Repairs = %d, want 1", s.Repairs())
	}
	if listing := testns.ListTable(t, ns, "nftpolicy"); !strings.Contains(listing, "10.0.1.1 : jump ingress-pod-") {
		t.Errorf("the map was not repaired:\n%s", listing)
	}
}

// A commit by someone else between two syncs makes the kernel refuse the
// delta (its generation check); the syncer reads the table back and, as
// only another table changed, retries the same delta. With the commit
// monitor on, it knows that without the read.
func TestKernelOtherCommitRetriesDelta(t *testing.T) {
	s, ns := newTestSyncer(t)
	snap := cluster(policy("x", "allow-y", ingressRule(peers(nsPeer("y")), port(tcp, 80))))
	if _, err := s.Sync(snap); err != nil {
		t.Fatal(err)
	}
	testns.Nft(t, ns, "", "add", "table", "inet", "someone-else")

	changed := *snap
	changed.Pods = slices.DeleteFunc(slices.Clone(snap.Pods), func(p *k8s.Pod) bool { return p.Namespace == "y" && p.Name == "b" })
	res, err := s.Sync(&changed)
	if err != nil {
		t.Fatal(err)
	}
	if res.Batch.Full || res.Batch.ElementsDeleted == 0 {
		t.Errorf("after another table's commit: batch %+v, want the delta", res.Batch)
	}
	if s.Conflicts() != 1 || s.Repairs() != 0 || s.ReadBacks() != 1 {
		t.Errorf("conflicts %d, repairs %d, read-backs %d; want 1, 0, 1", s.Conflicts(), s.Repairs(), s.ReadBacks())
	}
	assertProgrammed(t, s, ns, res.Table)

	// Following commits (as Run does), the next conflict of that kind is
	// settled without reading our table back.
	s.WatchCommits()
	defer s.StopWatchingCommits()
	testns.Nft(t, ns, "", "add", "table", "inet", "someone-else-again")
	res, err = s.Sync(snap)
	if err != nil {
		t.Fatal(err)
	}
	if res.Batch.Full || s.Conflicts() != 2 || s.ReadBacks() != 1 {
		t.Errorf("with the monitor: batch %+v, conflicts %d, read-backs %d; want a delta, 2, 1", res.Batch, s.Conflicts(), s.ReadBacks())
	}
	assertProgrammed(t, s, ns, res.Table)

	// A change to our own table is still read back and repaired.
	testns.Nft(t, ns, "", "flush", "map", "inet", "nftpolicy", "ingress-pods-v4")
	res, err = s.Sync(&changed)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Batch.Full || s.ReadBacks() != 2 || s.Repairs() != 1 {
		t.Errorf("with the monitor, our map flushed: batch %+v, read-backs %d, repairs %d; want full, 2, 1", res.Batch, s.ReadBacks(), s.Repairs())
	}
	assertProgrammed(t, s, ns, res.Table)
}

// A change to our own table between two syncs is found when the delta is
// refused, and the table is rewritten whole rather than patched blind.
func TestKernelConcurrentChangeIsRepaired(t *testing.T) {
	s, ns := newTestSyncer(t)
	snap := cluster(policy("x", "allow-y", ingressRule(peers(nsPeer("y")), port(tcp, 80))))
	if _, err := s.Sync(snap); err != nil {
		t.Fatal(err)
	}
	testns.Nft(t, ns, "", "flush", "map", "inet", "nftpolicy", "ingress-pods-v4")

	changed := *snap
	changed.Pods = slices.DeleteFunc(slices.Clone(snap.Pods), func(p *k8s.Pod) bool { return p.Namespace == "y" && p.Name == "b" })
	res, err := s.Sync(&changed)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Batch.Full {
		t.Errorf("after our map was flushed: batch %+v, want the whole table", res.Batch)
	}
	if s.Conflicts() != 1 || s.Repairs() != 1 {
		t.Errorf("conflicts %d, repairs %d; want 1, 1", s.Conflicts(), s.Repairs())
	}
	assertProgrammed(t, s, ns, res.Table)
}

// assertProgrammed checks the kernel holds exactly table: nothing drifted,
// and the listing is what nft -f of its text gives.
func assertProgrammed(t *testing.T, s *Syncer, ns string, table *nft.Table) {
	t.Helper()
	if d, err := s.conn.Drift(table); err != nil || d != "" {
		t.Errorf("drift %q, %v", d, err)
	}
	oracle := testns.New(t, "nftpt")
	testns.Nft(t, oracle, nft.Render(table), "-f", "-")
	if got, want := testns.ListTable(t, ns, "nftpolicy"), testns.ListTable(t, oracle, "nftpolicy"); got != want {
		t.Errorf("kernel differs from nft -f of the table:\n%s\nwant:\n%s", got, want)
	}
}

// With the commit monitor, a drift check reads our table back only when
// another process committed to it since it was last verified.
func TestKernelDriftCheckWithMonitor(t *testing.T) {
	s, ns := newTestSyncer(t)
	if _, err := s.Sync(cluster(policy("x", "deny", denyIngress))); err != nil {
		t.Fatal(err)
	}
	s.WatchCommits()
	defer s.StopWatchingCommits()
	// The monitor started at our commit's generation: it sees everything
	// after it, so no check needs a read until our table is touched.
	if repaired, err := s.CheckDrift(); err != nil || repaired || s.ReadBacks() != 0 {
		t.Fatalf("first check: repaired %v, %v, read-backs %d; want false, nil, 0", repaired, err, s.ReadBacks())
	}
	testns.Nft(t, ns, "", "add", "table", "inet", "someone-else")
	if repaired, err := s.CheckDrift(); err != nil || repaired || s.ReadBacks() != 0 {
		t.Fatalf("after another table's commit: repaired %v, %v, read-backs %d; want false, nil, 0", repaired, err, s.ReadBacks())
	}
	testns.Nft(t, ns, "", "flush", "map", "inet", "nftpolicy", "ingress-pods-v4")
	if repaired, err := s.CheckDrift(); err != nil || !repaired || s.ReadBacks() != 1 || s.Repairs() != 1 {
		t.Fatalf("after our map was flushed: repaired %v, %v, read-backs %d, repairs %d; want true, nil, 1, 1", repaired, err, s.ReadBacks(), s.Repairs())
	}
	if listing := testns.ListTable(t, ns, "nftpolicy"); !strings.Contains(listing, "10.0.1.1 : jump ingress-pod-") {
		t.Errorf("the map was not repaired:\n%s", listing)
	}
	// Our own repair is not someone else's change.
	if repaired, err := s.CheckDrift(); err != nil || repaired || s.ReadBacks() != 1 {
		t.Fatalf("after our repair: repaired %v, %v, read-backs %d; want false, nil, 1", repaired, err, s.ReadBacks())
	}
}

// Run repairs a change someone else commits to our table as soon as the
// commit monitor sees it, not at the next periodic drift check (an hour
// away here): `nft flush ruleset` must not leave pods open for a drift
// period.
func TestKernelRunRepairsForeignCommitAtOnce(t *testing.T) {
	s, ns := newTestSyncer(t)
	updates := make(chan *k8s.Snapshot, 1)
	updates <- cluster(policy("x", "deny", denyIngress))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, updates, Timing{Debounce: 10 * time.Millisecond, MaxDelay: 100 * time.Millisecond, Retry: 100 * time.Millisecond, DriftCheck: time.Hour})
	}()
	defer func() {
		cancel()
		<-done
	}()
	// poll waits for cond, failing after a timeout far beyond what the
	// kernel and the loop need, so a slow machine does not fail the test.
	poll := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	programmed := func() bool {
		out, err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "inet", "nftpolicy").CombinedOutput()
		return err == nil && strings.Contains(string(out), "10.0.1.1 : jump ingress-pod-") && !strings.Contains(string(out), "dormant")
	}
	poll("the first sync and the commit monitor", func() bool { return programmed() && s.foreignCommits() != nil })

	for _, tamper := range []string{
		"flush ruleset",
		"add table inet nftpolicy { flags dormant; }",
		"flush map inet nftpolicy ingress-pods-v4",
	} {
		before := s.Repairs()
		testns.Nft(t, ns, "", tamper)
		poll("the repair after "+tamper, func() bool { return programmed() && s.Repairs() > before })
	}
}
