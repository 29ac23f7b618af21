package enforcer

import (
	"errors"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// These tests run the Syncer on nft.Fake, without root and on any
// platform: the paths that matter when something goes wrong (a refused
// batch, a generation conflict, drift) and Run. The *_linux_test.go tests
// run the same Syncer on a real kernel.

// fakeKernel is an nft.Fake as a Syncer's kernel, its monitor returned
// as the interface, as connKernel does for an *nft.Conn.
type fakeKernel struct{ *nft.Fake }

func (k fakeKernel) Watch(table string) (commitMonitor, error) { return k.Fake.Monitor(table) }

func newFakeSyncer(t *testing.T) (*Syncer, *nft.Fake) {
	t.Helper()
	return newFakeSyncerWith(t, Options{Node: testNode})
}

// newFakeSyncerWith is newFakeSyncer with opts.
func newFakeSyncerWith(t *testing.T, opts Options) (*Syncer, *nft.Fake) {
	t.Helper()
	f := nft.NewFake()
	s := newSyncer(fakeKernel{f}, opts, PrioritySetting{Auto: true}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	t.Cleanup(func() {
		s.StopWatchingCommits()
		s.Close()
	})
	return s, f
}

var (
	fakeSnapA = cluster(policy("x", "deny", denyIngress))
	fakeSnapB = cluster(policy("x", "allow-y", ingressRule(peers(nsPeer("y")), port(tcp, 80))))
	// fakeSnapC is B without pod y/b: a delta of elements from B.
	fakeSnapC = without(fakeSnapB, "y", "b")
)

func without(snap *k8s.Snapshot, ns, name string) *k8s.Snapshot {
	changed := *snap
	changed.Pods = slices.DeleteFunc(slices.Clone(snap.Pods), func(p *k8s.Pod) bool { return p.Namespace == ns && p.Name == name })
	return &changed
}

// holds fails the test unless the fake holds exactly the table snap
// compiles to, with s's owner record.
func holds(t *testing.T, s *Syncer, f *nft.Fake, snap *k8s.Snapshot) {
	t.Helper()
	want := mustCompile(t, snap)
	if drift, err := f.Drift(want); err != nil || drift != "" {
		t.Errorf("the kernel does not hold the table: %s %v\n%s", drift, err, f.Dump())
	}
	if c, err := f.TableComment(DefaultTable); err != nil || c != s.Owner().Comment() {
		t.Errorf("owner record %q, %v; want %q", c, err, s.Owner().Comment())
	}
}

// A batch the kernel refuses leaves the previous table programmed, and
// Status reports the error until a later sync succeeds, which writes the
// whole table: what the kernel holds after a failure is not taken on
// trust.
func TestSyncRefusedBatchKeepsPreviousTable(t *testing.T) {
	s, f := newFakeSyncer(t)
	if _, err := s.Sync(fakeSnapA); err != nil {
		t.Fatal(err)
	}
	before := f.Dump()
	boom := errors.New("boom")
	f.Refuse(1, boom)
	if _, err := s.Sync(fakeSnapB); !errors.Is(err, boom) {
		t.Fatalf("refused sync: %v, want boom", err)
	}
	if f.Dump() != before {
		t.Errorf("a refused batch changed the table")
	}
	if gen, err := s.Status(); gen != 1 || !errors.Is(err, boom) {
		t.Errorf("Status after the refusal: %d, %v; want 1, boom", gen, err)
	}
	res, err := s.Sync(fakeSnapB)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Batch.Full {
		t.Errorf("the sync after a refusal wrote %+v, want the whole table", res.Batch)
	}
	if gen, err := s.Status(); gen != 2 || err != nil {
		t.Errorf("Status after the next sync: %d, %v; want 2, nil", gen, err)
	}
	holds(t, s, f, fakeSnapB)
}

// Whatever syncs fail on the way, the table of each sync that succeeds is
// what the kernel holds: the Syncer's record of what is programmed (last)
// never lets a delta start from a table the kernel does not hold.
func TestSyncAfterRefusalsHoldsEachTable(t *testing.T) {
	s, f := newFakeSyncer(t)
	boom := errors.New("boom")
	for i, step := range []struct {
		snap   *k8s.Snapshot
		refuse bool
	}{
		{fakeSnapA, false}, {fakeSnapB, true}, {fakeSnapC, false}, {fakeSnapA, true},
		{fakeSnapB, true}, {fakeSnapC, false}, {fakeSnapB, false}, {fakeSnapA, false},
	} {
		if step.refuse {
			f.Refuse(1, boom)
		}
		_, err := s.Sync(step.snap)
		if step.refuse != (err != nil) {
			t.Fatalf("step %d: %v", i, err)
		}
		if err == nil {
			holds(t, s, f, step.snap)
		}
	}
}

// A delta refused because someone else committed is retried: against the
// new generation when only another table changed (read back, or settled by
// the monitor without a read), or replaced by the whole table when ours
// changed. (TestKernelOtherCommitRetriesDelta on the kernel.)
func TestSyncGenerationConflicts(t *testing.T) {
	s, f := newFakeSyncer(t)
	if _, err := s.Sync(fakeSnapB); err != nil {
		t.Fatal(err)
	}
	f.Commit() // another table
	res, err := s.Sync(fakeSnapC)
	if err != nil {
		t.Fatal(err)
	}
	if res.Batch.Full || res.Batch.ElementsDeleted == 0 {
		t.Errorf("after another table's commit: batch %+v, want the delta", res.Batch)
	}
	if s.Conflicts() != 1 || s.Repairs() != 0 || s.ReadBacks() != 1 {
		t.Errorf("conflicts %d, repairs %d, read-backs %d; want 1, 0, 1", s.Conflicts(), s.Repairs(), s.ReadBacks())
	}
	holds(t, s, f, fakeSnapC)

	s.WatchCommits()
	f.Commit()
	if res, err = s.Sync(fakeSnapB); err != nil {
		t.Fatal(err)
	}
	if res.Batch.Full || s.Conflicts() != 2 || s.ReadBacks() != 1 {
		t.Errorf("with the monitor: batch %+v, conflicts %d, read-backs %d; want a delta, 2, 1", res.Batch, s.Conflicts(), s.ReadBacks())
	}
	holds(t, s, f, fakeSnapB)

	f.Tamper(flushMap("ingress-pods-v4"))
	if res, err = s.Sync(fakeSnapC); err != nil {
		t.Fatal(err)
	}
	if !res.Batch.Full || s.Conflicts() != 3 || s.ReadBacks() != 2 || s.Repairs() != 1 {
		t.Errorf("our map flushed: batch %+v, conflicts %d, read-backs %d, repairs %d; want full, 3, 2, 1",
			res.Batch, s.Conflicts(), s.ReadBacks(), s.Repairs())
	}
	holds(t, s, f, fakeSnapC)
}

// A delta refused maxConflicts times in a row gives way to the whole
// table, whose guarded write retries its own conflicts.
func TestSyncConflictsInARowWriteTheWholeTable(t *testing.T) {
	s, f := newFakeSyncer(t)
	if _, err := s.Sync(fakeSnapB); err != nil {
		t.Fatal(err)
	}
	f.Refuse(maxConflicts+1, nft.ErrGenerationChanged)
	res, err := s.Sync(fakeSnapC)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Batch.Full || s.Conflicts() != maxConflicts+1 || s.Repairs() != 0 {
		t.Errorf("batch %+v, conflicts %d, repairs %d; want full, %d, 0", res.Batch, s.Conflicts(), s.Repairs(), maxConflicts+1)
	}
	holds(t, s, f, fakeSnapC)
}

// flushMap is `nft flush map inet nftpolicy <name>` by someone else.
func flushMap(name string) func(*nft.Table) {
	return func(t *nft.Table) {
		for _, set := range t.Sets {
			if set.Name == name {
				set.Elements = nil
			}
		}
	}
}

// Drift is repaired by writing the whole table; with the commit monitor a
// check reads the table only when someone else committed to it.
// (TestKernelDriftIsRepaired, TestKernelDriftCheckWithMonitor.)
func TestCheckDriftRepairs(t *testing.T) {
	s, f := newFakeSyncer(t)
	if _, err := s.Sync(fakeSnapB); err != nil {
		t.Fatal(err)
	}
	if repaired, err := s.CheckDrift(); err != nil || repaired || s.ReadBacks() != 1 {
		t.Fatalf("untouched table: repaired %v, %v, read-backs %d; want false, nil, 1", repaired, err, s.ReadBacks())
	}
	// A drop turned into an accept.
	f.Tamper(func(t *nft.Table) {
		for _, c := range t.Chains {
			for i, r := range c.Rules {
				if v, ok := r.Exprs[len(r.Exprs)-1].(nft.Verdict); ok && v.Kind == nft.Drop {
					c.Rules[i] = nft.Rule{Exprs: []nft.Expr{nft.Verdict{Kind: nft.Accept}}}
				}
			}
		}
	})
	batches := f.Batches()
	if repaired, err := s.CheckDrift(); err != nil || !repaired || s.Repairs() != 1 || f.Batches() != batches+1 {
		t.Fatalf("a drop made accept: repaired %v, %v, repairs %d, batches %d; want true, nil, 1, one more", repaired, err, s.Repairs(), f.Batches()-batches)
	}
	holds(t, s, f, fakeSnapB)

	s.WatchCommits()
	f.Commit()
	reads := s.ReadBacks()
	if repaired, err := s.CheckDrift(); err != nil || repaired || s.ReadBacks() != reads {
		t.Fatalf("with the monitor, another table's commit: repaired %v, %v, read-backs +%d; want false, nil, +0", repaired, err, s.ReadBacks()-reads)
	}
	f.DeleteTable()
	if repaired, err := s.CheckDrift(); err != nil || !repaired || s.ReadBacks() != reads+1 || s.Repairs() != 2 {
		t.Fatalf("with the monitor, our table deleted: repaired %v, %v, read-backs +%d, repairs %d; want true, nil, +1, 2", repaired, err, s.ReadBacks()-reads, s.Repairs())
	}
	holds(t, s, f, fakeSnapB)
}

// The wait after failed syncs doubles up to maxRetryFactor times Retry.
func TestRetryBackoff(t *testing.T) {
	const r = 10 * time.Millisecond
	want := []time.Duration{r, 2 * r, 4 * r, 8 * r, 8 * r, 8 * r}
	for i, w := range want {
		if got := retryAfter(r, i+1); got != w {
			t.Errorf("retryAfter(%v, %d) = %v, want %v", r, i+1, got, w)
		}
	}
}

// ResolvePriority is the one place a setting becomes a priority: against
// the live forward chains, or, with none to read (dump), as if there were
// none.
func TestResolvePriority(t *testing.T) {
	f := nft.NewFake()
	f.AddForwardChain(nft.BaseChain{Family: nft.FamilyIPv4, Table: "kube-proxy", Name: "forward", Type: "filter", Hook: "forward", Priority: DefaultPriority})
	for _, tc := range []struct {
		chains interface {
			BaseChains(string) ([]nft.BaseChain, error)
		}
		setting PrioritySetting
		want    int32
	}{
		{nil, PrioritySetting{Auto: true}, DefaultPriority},
		{nil, PrioritySetting{Value: 7}, 7},
		{f, PrioritySetting{Auto: true}, DefaultPriority - 1},
		{f, PrioritySetting{Value: 7}, 7},
	} {
		if got, err := ResolvePriority(tc.chains, tc.setting, DefaultTable, zap.NewNop()); err != nil || got != tc.want {
			t.Errorf("ResolvePriority(%v, %+v) = %d, %v; want %d", tc.chains != nil, tc.setting, got, err, tc.want)
		}
	}
}

// Cluster policies coming and going change which policies select a pod,
// so a tier's chains, its class map and the pair of tiers go as a whole
// and others come: each sync is a delta the kernel takes (the Fake checks
// a map that goes before the chains its elements go to, as the kernel
// does), and the kernel holds the table of each.
func TestSyncClusterPolicyChurnByDelta(t *testing.T) {
	guard := admin("guard", 1, subjectNS("x"), cnpIn(cnpDeny, from(fromNS("z"))), cnpOut(cnpPass, to(toNS("y"))))
	guard2 := admin("guard-2", 2, subjectNS("x", "y"), cnpIn(cnpAccept, from(fromNS("y"))))
	base := baseline("base", 1, subjectNS("x"), cnpOut(cnpDeny, to(toNS("z"))))
	steps := []*k8s.Snapshot{
		withCluster(cluster(), guard),
		withCluster(cluster(), guard, base),
		withCluster(cluster(), guard, guard2, base),
		withCluster(cluster(), guard2, base),
		withCluster(cluster(policy("x", "deny", denyIngress)), guard2, base),
		withCluster(cluster(), guard),
		cluster(),
	}
	s, f := newFakeSyncer(t)
	for i, snap := range steps {
		res, err := s.Sync(snap)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if i > 0 && res.Batch.Full {
			t.Errorf("step %d wrote the whole table, want a delta", i)
		}
		holds(t, s, f, snap)
	}
}
