package enforcer

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// Hostile review of Syncer.Run with Options.DeferUnions: the follow-up
// rewrite sync must not hold a later change (or a priority re-placement)
// back beyond what Run does without it, must survive refused batches,
// foreign commits and tampering, and must end in the fresh compile.

// hdSyncer is a Syncer on an nft.Fake with DeferUnions as given, and a
// record of its syncs.
type hdSyncs struct {
	mu   sync.Mutex
	list []SyncResult
	errs []error
	hook func(SyncResult, error) // called in OnSync, under no lock of ours
}

func (h *hdSyncs) snapshot() ([]SyncResult, []error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]SyncResult(nil), h.list...), append([]error(nil), h.errs...)
}

func hdSyncer(t *testing.T, deferUnions bool) (*Syncer, *nft.Fake, *hdSyncs) {
	t.Helper()
	s, f := newFakeSyncerWith(t, Options{Node: testNode, DeferUnions: deferUnions})
	h := &hdSyncs{}
	s.OnSync(func(res SyncResult, err error) {
		h.mu.Lock()
		h.list = append(h.list, res)
		h.errs = append(h.errs, err)
		hook := h.hook
		h.mu.Unlock()
		if hook != nil {
			hook(res, err)
		}
	})
	return s, f, h
}

// hdRunSnaps: base isolates x/a for ingress from namespace y on tcp/80;
// withUnion adds namespace z on the same port, a union no fragment had
// (deferred with deferEveryUnion); later is withUnion and a new policy
// whose chain names it, to tell when it is programmed.
func hdRunSnaps() (base, withUnion, later *k8s.Snapshot) {
	p1 := policy("x", "p1", selecting("a"), ingressRule(peers(nsPeer("y")), port(tcp, 80)))
	p2 := policy("x", "p2", selecting("a"), ingressRule(peers(nsPeer("z")), port(tcp, 80)))
	late := policy("y", "late", denyIngress)
	return cluster(p1), cluster(p1, p2), cluster(p1, p2, late)
}

// hdLateTiming: a debounce window far longer than MaxDelay, as the
// daemon's flags allow (--debounce, --max-delay: no order between them)
// and as TestRunCoalescesABurst runs Run. A change held for the window
// waits an hour, far beyond eventually's safety net: no wall-clock bound
// is asserted.
var hdLateTiming = Timing{Debounce: time.Hour, MaxDelay: 100 * time.Millisecond, Retry: time.Hour}

// A change that comes right after a sync that deferred a union is synced
// as it would be without DeferUnions: at its MaxDelay, when that ends
// before the debounce window (Run's own rule for a change within the
// window: at = min(window end, deadline)). A rewrite scheduled as a
// pending sync at the window's end kept Run from taking the change until
// then: with Debounce an hour, for an hour.
func TestHostileDeferRunLaterChangeKeepsMaxDelay(t *testing.T) {
	deferEveryUnion(t)
	for _, deferUnions := range []bool{false, true} {
		t.Run(fmt.Sprintf("defer=%v", deferUnions), func(t *testing.T) {
			s, f, h := hdSyncer(t, deferUnions)
			base, withUnion, later := hdRunSnaps()
			updates := make(chan *k8s.Snapshot)
			startRun(t, s, updates, hdLateTiming)
			updates <- base
			eventually(t, "the first sync", synced(s, 1))
			updates <- withUnion // within the window: synced at MaxDelay
			eventually(t, "the union's sync", synced(s, 2))
			list, _ := h.snapshot()
			if deferUnions && list[1].Deferred == 0 {
				t.Fatal("the union's sync deferred nothing: the test needs it to")
			}
			go func() {
				select {
				case updates <- later:
				case <-time.After(30 * time.Second):
				}
			}()
			eventually(t, "the later change programmed at its max delay, not the window's end", func() bool { return strings.Contains(f.Dump(), "y/late") })
		})
	}
}

// With the daemon's default timing, a change after a deferring sync is
// programmed, and the change's sync (which takes the rewrite's place)
// leaves the fresh compile programmed, after which no sync comes.
func TestHostileDeferRunLaterChangeDefaultTiming(t *testing.T) {
	deferEveryUnion(t)
	s, f, h := hdSyncer(t, true)
	base, withUnion, later := hdRunSnaps()
	updates := make(chan *k8s.Snapshot)
	startRun(t, s, updates, Timing{Debounce: DefaultDebounce, MaxDelay: DefaultMaxDelay, Retry: time.Hour})
	updates <- base
	eventually(t, "the first sync", synced(s, 1))
	time.Sleep(DefaultDebounce + 50*time.Millisecond)
	updates <- withUnion
	eventually(t, "the union's sync", synced(s, 2))
	updates <- later
	eventually(t, "the later change programmed", func() bool { return strings.Contains(f.Dump(), "y/late") })
	eventually(t, "the fresh compile programmed", func() bool {
		d, err := f.Drift(mustCompile(t, later))
		return err == nil && d == ""
	})
	// Settled: no more syncs come.
	time.Sleep(2 * DefaultDebounce)
	list, _ := h.snapshot()
	n := len(list)
	time.Sleep(2 * DefaultDebounce)
	if list, _ := h.snapshot(); len(list) != n {
		t.Errorf("%d syncs after the table settled", len(list)-n)
	}
}

// Another table's forward chain at our priority makes Run re-place ours
// at once (TestRunReplacesOurChainWhenAnotherTakesItsPriority), also
// while the rewrite of a deferring sync waits for its window: otherwise
// our chain would share its priority with another table's (undefined
// order, DESIGN.md) until then.
func TestHostileDeferRunForwardChainNotHeldByRewrite(t *testing.T) {
	deferEveryUnion(t)
	for _, deferUnions := range []bool{false, true} {
		t.Run(fmt.Sprintf("defer=%v", deferUnions), func(t *testing.T) {
			s, f, _ := hdSyncer(t, deferUnions)
			base, withUnion, _ := hdRunSnaps()
			updates := make(chan *k8s.Snapshot)
			startRun(t, s, updates, Timing{Debounce: time.Hour, MaxDelay: 50 * time.Millisecond, Retry: time.Hour})
			updates <- base
			eventually(t, "the first sync and the monitor", func() bool { return synced(s, 1)() && s.forwardChains() != nil })
			updates <- withUnion
			eventually(t, "the union's sync", synced(s, 2))
			f.AddForwardChain(nft.BaseChain{Family: nft.FamilyIPv4, Table: "kube-proxy", Name: "forward", Type: "filter", Hook: "forward", Priority: DefaultPriority})
			eventually(t, "our chain re-placed at once, not at the window's end", func() bool { return fakeForwardPriority(t, f) == DefaultPriority-1 })
		})
	}
}

// The rewrite sync refused by the kernel, then the deferring sync
// itself refused: Run retries, and ends with the fresh compile
// programmed, ready, and no fragment chain waiting.
func TestHostileDeferRunRefusedBatches(t *testing.T) {
	deferEveryUnion(t)
	s, f, h := hdSyncer(t, true)
	boom := errors.New("boom")
	var refusals int
	var mu sync.Mutex
	h.hook = func(res SyncResult, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err == nil && res.Deferred > 0 && refusals == 0 {
			refusals++
			f.Refuse(1, boom) // the rewrite
		}
	}
	base, withUnion, later := hdRunSnaps()
	updates := make(chan *k8s.Snapshot)
	startRun(t, s, updates, Timing{Debounce: 20 * time.Millisecond, MaxDelay: time.Second, Retry: 20 * time.Millisecond})
	updates <- base
	eventually(t, "the first sync", synced(s, 1))
	updates <- withUnion
	eventually(t, "the union, settled after the refused rewrite", func() bool {
		_, errs := h.snapshot()
		_, err := s.Status()
		d, derr := f.Drift(mustCompile(t, withUnion))
		return err == nil && derr == nil && d == "" && len(errs) >= 4
	})
	_, errs := h.snapshot()
	if !hdContainsErr(errs, boom) {
		t.Fatalf("no sync was refused: %v", errs)
	}
	// The deferring sync itself refused.
	f.Refuse(1, boom)
	p3 := policy("x", "p3", selecting("a"), ingressRule(peers(ipBlock("192.0.2.0/24")), port(tcp, 80)))
	next := &k8s.Snapshot{}
	*next = *later
	next.Policies = append(append(next.Policies[:0:0], later.Policies...), p3)
	updates <- next
	eventually(t, "the next union, settled after the refused sync", func() bool {
		_, err := s.Status()
		d, derr := f.Drift(mustCompile(t, next))
		return err == nil && derr == nil && d == ""
	})
	if n := len(s.compiler.deferred); n > 0 {
		t.Errorf("%d fragment chains still wait for their union", n)
	}
}

func hdContainsErr(errs []error, target error) bool {
	for _, e := range errs {
		if errors.Is(e, target) {
			return true
		}
	}
	return false
}

// Between the deferring sync and its rewrite, another process commits
// elsewhere and then tampers with our table (a peer set's elements
// flushed): the drift check repairs the interim table and the rewrite
// still ends in the fresh compile.
func TestHostileDeferRunForeignCommitAndTamper(t *testing.T) {
	deferEveryUnion(t)
	s, f, h := hdSyncer(t, true)
	var once sync.Once
	h.hook = func(res SyncResult, err error) {
		if err == nil && res.Deferred > 0 {
			once.Do(func() {
				go func() {
					f.Commit()
					f.Tamper(func(tb *nft.Table) {
						for _, st := range tb.Sets {
							if strings.HasPrefix(st.Name, "peers-") {
								st.Elements = nil
							}
						}
					})
				}()
			})
		}
	}
	base, withUnion, _ := hdRunSnaps()
	updates := make(chan *k8s.Snapshot)
	startRun(t, s, updates, Timing{Debounce: 30 * time.Millisecond, MaxDelay: time.Second, Retry: 20 * time.Millisecond, DriftCheck: time.Hour})
	updates <- base
	eventually(t, "the first sync and the monitor", func() bool { return synced(s, 1)() && s.forwardChains() != nil })
	updates <- withUnion
	eventually(t, "repaired and settled", func() bool {
		_, err := s.Status()
		d, derr := f.Drift(mustCompile(t, withUnion))
		return err == nil && derr == nil && d == "" && s.Repairs() >= 1
	})
	time.Sleep(100 * time.Millisecond)
	if d, err := f.Drift(mustCompile(t, withUnion)); err != nil || d != "" {
		t.Fatalf("after the repair and rewrite: %s %v", d, err)
	}
}

// With no debounce, a stream of changes that each defer ends with the
// fresh compile programmed, and the rewrite does not loop: once settled,
// no sync follows.
func TestHostileDeferRunDebounceZero(t *testing.T) {
	deferEveryUnion(t)
	s, f, h := hdSyncer(t, true)
	w := newHDWorld(7)
	updates := make(chan *k8s.Snapshot)
	startRun(t, s, updates, Timing{Debounce: 0, MaxDelay: 0, Retry: 10 * time.Millisecond})
	var last *k8s.Snapshot
	for range 40 {
		w.step()
		last = w.snapshot()
		updates <- last
	}
	eventually(t, "the last snapshot programmed as a fresh compile", func() bool {
		want, _ := Compile(last, Options{Node: testNode})
		d, err := f.Drift(want)
		return err == nil && d == ""
	})
	time.Sleep(50 * time.Millisecond)
	list, _ := h.snapshot()
	n := len(list)
	time.Sleep(150 * time.Millisecond)
	list, _ = h.snapshot()
	if len(list) != n {
		t.Errorf("%d syncs after the table settled", len(list)-n)
	}
	deferred := 0
	for _, r := range list {
		if r.Deferred > 0 {
			deferred++
		}
	}
	if deferred == 0 {
		t.Error("no sync deferred a union: the test does not exercise DeferUnions")
	}
}

// The daemon's first sync refused (a netlink error at start): the retry
// compiles the newest snapshot, a second compile, which may defer; the
// first table the daemon programs, written whole, then carries interim
// fragment chains. "A first compile never defers, so a settled table is
// exactly a fresh compile's" holds for the compile, not for the first
// table programmed.
func TestHostileDeferRunFirstTableAfterRefusedStart(t *testing.T) {
	deferEveryUnion(t)
	s, f, h := hdSyncer(t, true)
	boom := errors.New("boom")
	f.Refuse(1, boom)
	base, withUnion, _ := hdRunSnaps()
	updates := make(chan *k8s.Snapshot)
	startRun(t, s, updates, Timing{Debounce: 20 * time.Millisecond, MaxDelay: time.Second, Retry: 100 * time.Millisecond})
	updates <- base
	eventually(t, "the refused first sync", func() bool { _, errs := h.snapshot(); return len(errs) >= 1 })
	updates <- withUnion // taken when the retry is due
	eventually(t, "a successful sync", synced(s, 1))
	list, errs := h.snapshot()
	for i, r := range list {
		if errs[i] != nil {
			continue
		}
		if !r.Batch.Full {
			t.Fatalf("the first successful sync wrote a delta")
		}
		if r.Deferred > 0 {
			t.Errorf("the first table the daemon programmed (written whole) holds %d fragment chains asking their parts: not a fresh compile", r.Deferred)
		}
		break
	}
	eventually(t, "settled", func() bool {
		d, err := f.Drift(mustCompile(t, withUnion))
		return err == nil && d == ""
	})
}
