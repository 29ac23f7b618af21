package enforcer

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// startRun runs s.Run with t until the test ends, and returns its error
// channel.
func startRun(tb testing.TB, s *Syncer, updates <-chan *k8s.Snapshot, timing Timing) <-chan error {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, updates, timing) }()
	tb.Cleanup(func() {
		cancel()
		<-done
	})
	return done
}

// eventually polls cond until it holds. The timeout is a safety net far
// beyond what the loop needs, not a measure of it.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func synced(s *Syncer, n uint64) func() bool {
	return func() bool { gen, err := s.Status(); return gen >= n && err == nil }
}

// A burst of updates queued before Run looks is one sync, of its last
// snapshot: the sync after a quiet period starts at once, and drains what
// has queued first.
func TestRunCoalescesABurst(t *testing.T) {
	for _, timing := range []Timing{
		{Debounce: time.Hour, MaxDelay: 100 * time.Millisecond, Retry: time.Hour},
		{Debounce: 100 * time.Millisecond, MaxDelay: time.Hour, Retry: time.Hour},
	} {
		s, f := newFakeSyncer(t)
		updates := make(chan *k8s.Snapshot, 3)
		updates <- fakeSnapA
		updates <- fakeSnapB
		updates <- fakeSnapC
		startRun(t, s, updates, timing)
		eventually(t, "the sync of the burst", synced(s, 1))
		if gen, _ := s.Status(); gen != 1 || f.Batches() != 1 {
			t.Errorf("%+v: %d syncs, %d batches for a burst of 3; want 1, 1", timing, gen, f.Batches())
		}
		holds(t, s, f, fakeSnapC)
	}
}

// The leading edge: a change after a quiet period is synced at once, with
// no debounce to wait out (an hour here); changes within the window after
// a sync are merged into one sync when the window ends, of the newest.
func TestRunSyncsAtOnceAfterQuietAndMergesAfterASync(t *testing.T) {
	s, f := newFakeSyncer(t)
	updates := make(chan *k8s.Snapshot)
	startRun(t, s, updates, Timing{Debounce: time.Hour, MaxDelay: time.Hour, Retry: time.Hour})
	updates <- fakeSnapA
	eventually(t, "the first change synced at once", synced(s, 1))
	holds(t, s, f, fakeSnapA)

	s2, f2 := newFakeSyncer(t)
	updates2 := make(chan *k8s.Snapshot)
	startRun(t, s2, updates2, Timing{Debounce: time.Second, MaxDelay: time.Hour, Retry: time.Hour})
	updates2 <- fakeSnapA
	eventually(t, "the first change synced at once", synced(s2, 1))
	updates2 <- fakeSnapB // within the second after the sync: wait for its end,
	updates2 <- fakeSnapC // merged with this one
	eventually(t, "the merged sync", synced(s2, 2))
	holds(t, s2, f2, fakeSnapC)
	if n := f2.Batches(); n != 2 {
		t.Errorf("%d batches for a change and a burst of two after it; want 2", n)
	}
}

// A sync the kernel refuses makes the daemon unready with the reason, and
// is retried with the newest snapshot until it goes through.
func TestRunRetriesARefusedSync(t *testing.T) {
	s, f := newFakeSyncer(t)
	boom := errors.New("boom")
	f.Refuse(1<<30, boom)
	updates := make(chan *k8s.Snapshot)
	startRun(t, s, updates, Timing{Debounce: time.Millisecond, Retry: time.Millisecond})
	updates <- fakeSnapA
	eventually(t, "a refused sync in Status", func() bool { _, err := s.Status(); return errors.Is(err, boom) })
	eventually(t, "retries", func() bool { return f.Batches() >= 3 })
	updates <- fakeSnapB // while failing: the retry takes the newest
	f.Refuse(0, nil)
	eventually(t, "the retry going through", synced(s, 1))
	holds(t, s, f, fakeSnapB)
}

// A commit by someone else to our table makes Run check it for drift and
// repair it at once, not at the next periodic check (none here).
// (TestKernelRunRepairsForeignCommitAtOnce on the kernel.)
func TestRunRepairsForeignCommitAtOnce(t *testing.T) {
	s, f := newFakeSyncer(t)
	updates := make(chan *k8s.Snapshot, 1)
	updates <- fakeSnapB
	startRun(t, s, updates, Timing{Debounce: time.Millisecond, Retry: time.Millisecond})
	eventually(t, "the first sync and the commit monitor", func() bool { return synced(s, 1)() && s.foreignCommits() != nil })
	for i, tamper := range []func(){
		func() { f.Tamper(flushMap("ingress-pods-v4")) },
		f.DeleteTable,
	} {
		tamper()
		eventually(t, "the repair", func() bool { return s.Repairs() == uint64(i+1) })
		holds(t, s, f, fakeSnapB)
	}
}

// Another table's forward chain at our priority makes Run re-place ours
// at once, with no cluster change. (TestKernelForeignForwardChainReresolvesPriority.)
func TestRunReplacesOurChainWhenAnotherTakesItsPriority(t *testing.T) {
	s, f := newFakeSyncer(t)
	updates := make(chan *k8s.Snapshot, 1)
	updates <- fakeSnapA
	startRun(t, s, updates, Timing{Debounce: time.Millisecond, Retry: time.Millisecond})
	eventually(t, "the first sync and the commit monitor", func() bool { return synced(s, 1)() && s.forwardChains() != nil })
	if p := fakeForwardPriority(t, f); p != DefaultPriority {
		t.Fatalf("first priority %d, want %d", p, DefaultPriority)
	}
	f.AddForwardChain(nft.BaseChain{Family: nft.FamilyIPv4, Table: "kube-proxy", Name: "forward", Type: "filter", Hook: "forward", Priority: DefaultPriority})
	eventually(t, "our chain re-placed", func() bool { return fakeForwardPriority(t, f) == DefaultPriority-1 })
}

func fakeForwardPriority(t *testing.T, f *nft.Fake) int32 {
	t.Helper()
	chains, err := f.BaseChains("forward")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chains {
		if c.Table == DefaultTable {
			return c.Priority
		}
	}
	t.Fatal("our forward chain is not there")
	return 0
}

// A deleted namespace makes the daemon unready within a netns check, for
// good. (TestKernelRunNetnsDeletedIsNotReadySoon.)
func TestRunNetnsDeleted(t *testing.T) {
	s, f := newFakeSyncer(t)
	updates := make(chan *k8s.Snapshot, 1)
	updates <- fakeSnapA
	startRun(t, s, updates, Timing{Debounce: time.Millisecond, Retry: time.Millisecond})
	eventually(t, "the first sync", synced(s, 1))
	f.DeleteNetns()
	eventually(t, "ErrNetnsGone in Status", func() bool { _, err := s.Status(); return errors.Is(err, nft.ErrNetnsGone) })
}

// Syncs that write nothing (a change the table does not hold: a label no
// selector reads, a deletion timestamp) open no debounce window. The first
// after a quiet period holds nothing back (a deletion's removal follows
// its deletion timestamp at once); each one after holds the next sync
// back noOpHold times its own length, so that a tenant relabelling its
// pods in a loop costs at most a tenth of the time in compiles. A lower
// bound on the gaps: a slow machine only widens them.
func TestRunNoOpSyncsHoldTheNextBack(t *testing.T) {
	s, _ := newFakeSyncer(t)
	type done struct {
		at    time.Time
		took  time.Duration
		wrote bool
	}
	var mu sync.Mutex
	var syncs []done
	s.OnSync(func(res SyncResult, err error) {
		mu.Lock()
		defer mu.Unlock()
		syncs = append(syncs, done{time.Now(), res.CompileTime + res.WriteTime, err == nil && res.Batch.Messages > 0})
	})
	updates := make(chan *k8s.Snapshot)
	debounce := 200 * time.Millisecond
	startRun(t, s, updates, Timing{Debounce: debounce, MaxDelay: time.Hour, Retry: time.Hour})
	updates <- fakeSnapA
	eventually(t, "the first sync", synced(s, 1))
	time.Sleep(debounce + 50*time.Millisecond) // quiet
	for range 40 {
		same := *fakeSnapA // a new snapshot, the same table
		updates <- &same
	}
	time.Sleep(debounce)
	mu.Lock()
	defer mu.Unlock()
	noOps := 0
	for i := 3; i < len(syncs); i++ { // syncs[1], after the quiet period, holds nothing
		prev := syncs[i-1]
		if prev.wrote {
			continue
		}
		noOps++
		if gap := syncs[i].at.Sub(prev.at); gap < 9*prev.took { // noOpHold
			t.Errorf("sync %d came %v after a sync that wrote nothing and took %v; want at least 9 times that", i, gap, prev.took)
		}
	}
	if noOps == 0 {
		t.Fatalf("no sync that wrote nothing was followed by another: %d syncs", len(syncs))
	}
	t.Logf("%d syncs for 40 no-op changes, %d of them held the next back", len(syncs)-1, noOps)
}
