package enforcer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/nftpolicy/nftpolicy/conntrack"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// A Syncer programs snapshots into the kernel: it resolves the priority
// from the live ruleset, compiles, and applies the table in one batch.
type Syncer struct {
	conn     kernel // connKernel in production (see kernel)
	opts     Options
	priority PrioritySetting
	log      *zap.Logger
	syncMu   sync.Mutex // one Sync at a time: the compiler keeps state between them
	compiler *Compiler
	reported map[string]bool // problems logged and still there; syncMu held

	// Conntrack cleanup (see FollowConntrack); syncMu held.
	cleaner *conntrack.Cleaner
	// The table the last cleanup brought conntrack in line with; nil
	// before the first one and after a repair or a take-back, when what
	// the kernel enforced meanwhile is unknown: judge every flow then.
	cleaned *nft.Table

	mu         sync.Mutex
	generation uint64 // successful syncs so far
	lastErr    error  // of the most recent sync
	// last is the table the kernel holds, as last programmed; nil before
	// the first sync and whenever a write failed. Only the Syncer learns
	// whether a write went through, or a repair or a take-over replaced
	// it, so it alone keeps it (the Compiler knows what it returned, not
	// what was programmed). When set, it is the table of the previous
	// Compile: every sync that compiles writes, and each write records
	// its table or forgets last (see write), so the delta from it is the
	// compiler's.
	last         *nft.Table
	gen          uint32        // ruleset generation at which last was verified; 0 unknown
	repairs      uint64        // drift found and repaired
	conflicts    uint64        // deltas refused because someone else committed
	readBacks    uint64        // conflicts and drift checks the monitor could not settle
	monitor      commitMonitor // commits by others, while Run runs
	prio         int32         // resolved forward priority
	prioResolved bool          // prio is current; cleared by CheckDrift
	own          ownership     // the table's owner record (see owner.go)

	// For metrics (see Stats, OnSync); mu held.
	failedSyncs uint64
	refused     uint64     // batches the kernel refused (see countRefused)
	skipped     uint64     // problems reported, each once when it appeared
	lastOK      *nft.Table // the table of the last successful sync
	lastSuccess time.Time
	isolated    int // local pods isolated at the last successful sync
	onSync      func(SyncResult, error)

	countMu sync.Mutex  // held by CountConnections
	counts  ConnCounter // countMu held
	counted countedOf   // of the table the kernel held at the last sync or read; syncMu held
}

// NewSyncer returns a Syncer writing through conn. The priority of its
// forward chain comes from setting (see forwardPriority).
func NewSyncer(conn *nft.Conn, opts Options, setting PrioritySetting, log *zap.Logger) *Syncer {
	return newSyncer(connKernel{conn}, opts, setting, log)
}

// newSyncer is NewSyncer on any kernel: nft.Fake in the tests.
func newSyncer(conn kernel, opts Options, setting PrioritySetting, log *zap.Logger) *Syncer {
	if opts.Table == "" {
		opts.Table = DefaultTable
	}
	if opts.MarkMask == 0 {
		opts.MarkMask = DefaultMarkMask
	}
	return &Syncer{conn: conn, opts: opts, priority: setting, log: log, compiler: NewCompiler(opts)}
}

// A SyncResult reports one sync: the table compiled and what was written
// to bring the kernel to it. Generation and errors are in Status; skipped
// objects are logged.
type SyncResult struct {
	Table *nft.Table
	Batch nft.BatchStats // Messages is zero when nothing changed

	CompileTime time.Duration // snapshot to table
	WriteTime   time.Duration // table to kernel, diff included
	// Deferred counts the fragment chains this sync left asking their
	// union's parts one by one (Options.DeferUnions): the next sync, of
	// the same snapshot if nothing else changes, merges them.
	Deferred int
}

// Sync compiles snap and programs it. On error the kernel keeps the table of
// the previous successful sync. The compile is incremental (see Compiler):
// it costs what changed since the previous Sync's snapshot.
func (s *Syncer) Sync(snap *k8s.Snapshot) (SyncResult, error) {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	res, err := s.sync(snap)
	isolated := s.compiler.isolatedPods()
	s.mu.Lock()
	s.lastErr = err
	if err == nil {
		s.generation++
		s.lastOK, s.lastSuccess, s.isolated = res.Table, time.Now(), isolated
	} else {
		s.failedSyncs++
	}
	onSync := s.onSync
	s.mu.Unlock()
	if onSync != nil {
		onSync(res, err)
	}
	return res, err
}

func (s *Syncer) sync(snap *k8s.Snapshot) (SyncResult, error) {
	if err := s.claim(); err != nil {
		return SyncResult{}, err
	}
	s.keepCounted()
	prio, _, err := s.forwardPriority(false)
	if err != nil {
		return SyncResult{}, err
	}
	s.mu.Lock()
	prev := s.last
	s.mu.Unlock()
	// A table written whole (nothing of ours known to be programmed)
	// gains nothing by deferring unions: build them now (settle.go).
	s.compiler.wholeWrite = prev == nil
	start := time.Now()
	table, problems := s.compiler.Compile(snap, prio)
	// Every table, delta-written ones too, carries the record the kernel
	// holds, so that it renders as what is programmed.
	table.Comment = s.owner().Comment()
	s.reportProblems(problems)
	res := SyncResult{Table: table, CompileTime: time.Since(start), Deferred: s.compiler.deferredNow()}
	start = time.Now()
	batch, err := s.write(table)
	res.WriteTime = time.Since(start)
	if err != nil {
		return res, err
	}
	res.Batch = batch
	if err := s.cleanConntrack(prev, table, batch.Messages > 0); err != nil {
		return res, err
	}
	if batch.Messages > 0 {
		s.log.Info("programmed table",
			zap.String("table", "inet "+table.Name),
			zap.Int32("priority", prio),
			zap.Bool("full", batch.Full),
			zap.Int("messages", batch.Messages),
			zap.Int("chainsWritten", batch.ChainsWritten),
			zap.Int("elementsAdded", batch.ElementsAdded),
			zap.Int("elementsDeleted", batch.ElementsDeleted),
			zap.Duration("compile", res.CompileTime),
			zap.Duration("apply", res.WriteTime))
		if ce := s.log.Check(zap.DebugLevel, "ruleset"); ce != nil {
			ce.Write(zap.String("nft", nft.Render(table)))
		}
	}
	return res, nil
}

// maxConflicts bounds how often one sync retries a delta after finding
// that someone else committed meanwhile, before it replaces the table.
const maxConflicts = 3

// monitorWait bounds the wait for the commit monitor to have read the
// notifications of the generation a refused delta found.
const monitorWait = 100 * time.Millisecond

// write brings the kernel from the table last programmed to table: a delta
// batch checked against the generation of our last commit, or the whole
// table when nothing is known to be programmed. When the kernel refuses the
// delta because someone committed since (any table of the netns counts),
// the commit monitor (see Run) says whether those commits touched our
// table; if they did, or it cannot tell, our table is read back (seconds at
// 10k policies): unchanged, the delta is retried against the new
// generation; changed, the whole table is rewritten and the repair counted.
//
// The delta is the compiler's (Compiler.Delta), found from what the event
// touched: the kernel holds the previous table (see Syncer.last).
func (s *Syncer) write(table *nft.Table) (nft.BatchStats, error) {
	s.mu.Lock()
	last, gen := s.last, s.gen
	s.mu.Unlock()
	if s.own.foreign || s.takenOver() != nil {
		// Another record is in the table (see judge), or, taking the
		// table back, what it holds is not what we last programmed: only
		// a whole write puts ours there.
		last = nil
	}
	var delta *nft.Delta
	if last != nil {
		delta = s.compiler.Delta()
	}
	for range maxConflicts {
		if last == nil {
			break
		}
		batch, err := s.conn.WriteDeltaAt(delta, table, gen)
		if err == nil {
			s.programmed(table, batch.Generation)
			return batch, nil
		}
		if !errors.Is(err, nft.ErrGenerationChanged) {
			// The kernel kept its previous state, which may not be last:
			// forget it, so the next sync writes the whole table.
			s.countRefused(err)
			s.programmed(nil, 0)
			return nft.BatchStats{}, err
		}
		s.mu.Lock()
		s.conflicts++
		monitor := s.monitor
		s.mu.Unlock()
		since := gen
		if gen, err = s.conn.Generation(); err != nil {
			s.programmed(nil, 0)
			return nft.BatchStats{}, err
		}
		if monitor != nil && monitor.Untouched(since, gen, monitorWait) {
			continue // only other tables changed: the delta still holds
		}
		foreign, err := s.checkOwner()
		if err != nil {
			s.programmed(nil, 0)
			return nft.BatchStats{}, err
		}
		if foreign {
			// The table was replaced with another record (judge logged
			// it): rewrite it whole.
			s.mu.Lock()
			s.repairs++
			s.cleaned = nil
			s.mu.Unlock()
			break
		}
		s.mu.Lock()
		s.readBacks++
		s.mu.Unlock()
		drift, err := s.conn.Drift(last)
		if err != nil {
			s.programmed(nil, 0)
			return nft.BatchStats{}, err
		}
		if drift != "" {
			s.log.Warn("our table was changed by someone else; rewriting it", zap.String("drift", drift))
			s.mu.Lock()
			s.repairs++
			s.cleaned = nil
			s.mu.Unlock()
			break
		}
	}
	batch, err := s.applyOwned(table)
	if err != nil {
		s.countRefused(err)
		s.programmed(nil, 0)
		return nft.BatchStats{}, err
	}
	s.programmed(table, batch.Generation)
	return batch, nil
}

// programmed records the table now in the kernel and the generation it
// was verified at (nil, 0: unknown, the next sync rewrites it whole).
func (s *Syncer) programmed(t *nft.Table, gen uint32) {
	s.mu.Lock()
	s.last, s.gen = t, gen
	s.mu.Unlock()
}

// CheckDrift reads the table back from the kernel and, if its content is
// not what was last programmed (see nft.Conn.Drift: someone flushed a
// chain, turned a drop into an accept, swapped a map element, made the
// table dormant, set a policy or moved a base chain, deleted the table),
// writes the whole table again. With the commit monitor it reads only if
// another process has committed to our table since it was last verified.
// Run calls it every Timing.DriftCheck, and one debounce after the monitor
// sees another process commit to our table. It reports whether it
// repaired anything. A record in the table of another owner that is not
// running is drift too (see Ownership); that of a running one is
// ErrTakenOver, and nothing is written.
func (s *Syncer) CheckDrift() (bool, error) {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if err := s.stopped(); err != nil {
		return false, err
	}
	s.mu.Lock()
	last := s.last
	// Re-place our chain next time if another component moved in.
	s.prioResolved = false
	s.mu.Unlock()
	if last == nil {
		return false, s.takenOver()
	}
	// The generation is read first: a commit after it makes the next delta
	// fail its check and read the table again.
	gen, err := s.conn.Generation()
	if err != nil {
		return false, err
	}
	foreign, err := s.checkOwner()
	if err != nil {
		return false, err
	}
	if !foreign {
		s.mu.Lock()
		verified, monitor := s.gen, s.monitor
		s.mu.Unlock()
		if monitor != nil && verified != 0 && monitor.Untouched(verified, gen, monitorWait) {
			// Nobody else has committed to our table since we verified it: no
			// read needed (seconds at 10k policies, during which no event is
			// synced).
			s.programmed(last, gen)
			return false, nil
		}
		s.mu.Lock()
		s.readBacks++
		s.mu.Unlock()
		drift, err := s.conn.Drift(last)
		if err != nil {
			return false, err
		}
		if drift == "" {
			s.programmed(last, gen)
			return false, nil
		}
		s.log.Warn("ruleset drifted from what was programmed; rewriting it", zap.String("drift", drift))
	}
	batch, err := s.applyOwned(last)
	if err != nil {
		s.countRefused(err)
		s.programmed(nil, 0)
		return false, err
	}
	s.programmed(last, batch.Generation)
	s.mu.Lock()
	s.repairs++
	s.mu.Unlock()
	// Connections that started while the table was not what we programmed
	// (flushed, dormant, a rule replaced) must not outlive the repair.
	s.cleaned = nil
	if err := s.cleanConntrack(nil, last, true); err != nil {
		return true, err
	}
	return true, nil
}

// Conflicts counts the deltas the kernel refused because another process
// had committed since our last batch (each is followed by a read-back).
func (s *Syncer) Conflicts() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conflicts
}

// ReadBacks counts the reads of our table: at conflicts and drift checks
// the commit monitor could not settle by telling that nobody else had
// committed to our table.
func (s *Syncer) ReadBacks() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readBacks
}

// Repairs counts the drift repairs so far.
func (s *Syncer) Repairs() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.repairs
}

// LogProblems logs each part of a snapshot the compiler left out, names
// and errors cut to a readable length (a name can be kilobytes long).
func LogProblems(log *zap.Logger, problems []Problem) {
	for _, p := range problems {
		logProblem(log, p)
	}
}

func logProblem(log *zap.Logger, p Problem) {
	log.Warn("skipped part of the snapshot", k8s.NameField("object", p.Object), k8s.ErrorField(p.Err))
}

// reportProblems logs each problem once, when it appears, and once more
// when it is gone: a daemon syncing every second would otherwise repeat
// every skipped object at every sync, and a new problem would drown.
func (s *Syncer) reportProblems(problems []Problem) {
	now := make(map[string]bool, len(problems))
	for _, p := range problems {
		key := p.Error()
		now[key] = true
		if !s.reported[key] {
			logProblem(s.log, p)
			s.mu.Lock()
			s.skipped++
			s.mu.Unlock()
		}
	}
	for key := range s.reported {
		if !now[key] {
			s.log.Info("no longer skipped", k8s.ErrorField(errors.New(key)))
		}
	}
	s.reported = now
}

// Status reports the number of successful syncs (a sync that found the
// table already programmed counts: it confirms the state) and the error of
// the most recent sync, if it failed; or, for good once it happened, that
// the namespace is gone (nft.ErrNetnsGone); or, while another running
// nftpolicy holds the table this Syncer owned, ErrTakenOver naming it.
func (s *Syncer) Status() (generation uint64, lastErr error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.own.stop != nil {
		return s.generation, s.own.stop // the netns is gone
	}
	if s.own.lost != nil {
		return s.generation, s.own.lost // taken over, until we take it back
	}
	return s.generation, s.lastErr
}

// WatchCommits starts following the commits of the netns (nft.Monitor), so
// that a delta refused because another process committed is retried
// without reading our table back when only other tables changed, and so
// that Run checks our table as soon as another process commits to it. Run
// calls it after its first sync; without it (or if it fails) every such
// conflict and every periodic drift check reads the table, and a change by
// someone else waits for the next periodic check.
func (s *Syncer) WatchCommits() {
	m, err := s.conn.Watch(s.opts.Table)
	if err != nil {
		s.log.Warn("cannot follow the commits of other processes; each of their commits will cost a read of our table", zap.Error(err))
		return
	}
	s.mu.Lock()
	old := s.monitor
	s.monitor = m
	s.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

// foreignCommits is the commit monitor's signal of commits to our table by
// other processes (nft.Monitor.Foreign); nil, which never fires, without a
// monitor.
func (s *Syncer) foreignCommits() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.monitor == nil {
		return nil
	}
	return s.monitor.Foreign()
}

// StopWatchingCommits stops what WatchCommits started.
func (s *Syncer) StopWatchingCommits() {
	s.mu.Lock()
	m := s.monitor
	s.monitor = nil
	s.mu.Unlock()
	if m != nil {
		m.Close()
	}
}

// Timing configures Run.
// The daemon's default Timing: --debounce and --max-delay.
//
// A change after a quiet period is synced at once whatever the debounce;
// the debounce is the window after a sync in which changes merge, so it
// sets how many batches a burst costs: a sync for its first change, one
// per window, and one for the changes of the last window. 150 ms writes a
// rollout that changes 1,000 pods in a second as 9 batches
// (TestRunBurstOf1000Pods), where 100 ms took 12; a change that lands
// right after a sync waits for the window's end, at most 150 ms.
const (
	DefaultDebounce = 150 * time.Millisecond
	DefaultMaxDelay = time.Second
)

type Timing struct {
	// Debounce is the window after a sync in which changes are merged
	// into the next one, which starts when the window ends. A change
	// after a quiet period (no sync for Debounce) is synced at once.
	Debounce time.Duration
	// MaxDelay bounds the wait from the first change of a burst to its
	// sync, however long the burst goes on.
	MaxDelay time.Duration
	// Retry is the wait before a failed sync is tried again; it doubles
	// with each failure in a row, up to maxRetryFactor times Retry.
	Retry time.Duration
	// DriftCheck is the period of CheckDrift; zero disables it. A commit
	// to our table by another process, seen by the commit monitor, makes
	// Run check one Debounce after it whatever the period.
	DriftCheck time.Duration
}

// maxRetryFactor bounds the backoff of failed syncs: at most this many
// times Timing.Retry between tries (8 s for the daemon), so that a cause
// that goes away unannounced (a foreign forward chain deleted, which no
// notification reports) is noticed soon after.
const maxRetryFactor = 8

// retryAfter is the wait before the next try after n failed syncs in a
// row (n ≥ 1).
func retryAfter(retry time.Duration, n int) time.Duration {
	d := retry
	for i := 1; i < n && d < retry*maxRetryFactor; i++ {
		d *= 2
	}
	return min(d, retry*maxRetryFactor)
}

// netnsCheck is the period at which Run checks that the namespace is still
// there (a stat: ip netns del makes the daemon unready within a second,
// not at the next drift check) and, while taken over, whether the owner
// that took the table still runs.
const netnsCheck = time.Second

// noOpHold is how many times its own length a sync that wrote nothing,
// and did not come after a quiet period, holds back the next one (see
// Run).
const noOpHold = 9

// Run syncs every snapshot that arrives on updates until ctx ends: one
// after a quiet period at once, a burst merged into its last snapshot one
// window at a time (see Timing). Run is the one place changes are
// coalesced: sources send a snapshot per change. A failed sync is
// retried with the newest snapshot, with backoff. Run returns nil when ctx
// is done and leaves the table programmed. It returns an error wrapping
// ErrOwned if, before this Syncer ever wrote the table, another running
// nftpolicy wrote it first (two daemons started at once: the outcome is
// that of starting second, see Ownership). Taken over after it wrote, it
// keeps running as a standby and takes the table back when the new owner
// is gone.
func (s *Syncer) Run(ctx context.Context, updates <-chan *k8s.Snapshot, t Timing) error {
	// Commits are followed from the end of the first sync: a listener makes
	// the kernel build a notification per object of every commit, and for
	// the first, whole table that is one per rule, set and element (the
	// echoes of its rules alone were 28 MB at 10k policies).
	watching := false
	defer s.StopWatchingCommits()
	var (
		pending  *k8s.Snapshot
		synced   *k8s.Snapshot // the last snapshot programmed, for a re-sync without an update
		deadline time.Time     // of the current burst
		forward  <-chan struct{}
	)
	// The one coalescing stage between a change and the kernel. A change
	// after a quiet period is synced at once (the leading edge: the window
	// of exposure is the cost of the work, not of a timer). One that comes
	// within Debounce of the end of the last sync waits for the end of
	// that window, merged with every change that comes meanwhile, and
	// never longer than MaxDelay after the first of them: a burst (a
	// rollout) is written as one batch per window, not one per change.
	// While a sync is due, Run does not take snapshots: sources block on
	// their send and build the next snapshot only when Run takes one, so
	// a burst costs a source one snapshot per window, not one per change.
	// At the sync, Run drains what is waiting, so it takes the newest.
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var fireAt time.Time   // when timer fires; zero while it is stopped
	var lastSync time.Time // the window after it: see the sync below
	var lastEnd time.Time  // when the last sync ended
	settling := false      // pending is synced again, to merge deferred unions
	settleTimer := time.NewTimer(time.Hour)
	settleTimer.Stop()
	defer settleTimer.Stop()
	setTimer := func(d time.Duration) {
		fireAt = time.Now().Add(d)
		timer.Reset(d)
	}
	// syncBy brings the timer forward to at, never later.
	syncBy := func(at time.Time) {
		if fireAt.IsZero() || at.Before(fireAt) {
			setTimer(max(time.Until(at), 0))
		}
	}
	// A commit by someone else to our table (see nft.Monitor.Foreign: `nft
	// flush ruleset`, `flags dormant`) brings the drift check forward to
	// one debounce after it, rather than the next tick: a burst of such
	// commits costs one check, and later ones cannot put it off.
	var foreign <-chan struct{}
	checkSoon := time.NewTimer(time.Hour)
	checkSoon.Stop()
	checkArmed := false
	var drift <-chan time.Time
	if t.DriftCheck > 0 {
		ticker := time.NewTicker(t.DriftCheck)
		defer ticker.Stop()
		drift = ticker.C
	}
	netnsTicker := time.NewTicker(netnsCheck)
	defer netnsTicker.Stop()
	failures := 0 // failed syncs in a row
	// retake, while another running nftpolicy holds the table, tries the
	// newest snapshot again: Sync asks whether that owner still runs before
	// it compiles anything, and takes the table back once it is gone.
	retake := func() bool {
		if s.takenOver() == nil {
			return false
		}
		if pending == nil {
			pending = synced
		}
		if pending != nil {
			setTimer(0)
		}
		return true
	}
	// checkDrift runs a drift check. A failed one (the repair refused, the
	// conntrack cleanup failed) makes the daemon unready with the reason and
	// brings a sync of the last snapshot, retried with backoff like any
	// failed sync, which writes the whole table if the repair left it
	// unknown.
	checkDrift := func() {
		repaired, err := s.CheckDrift()
		if err == nil && !repaired {
			// A repair judged every flow; otherwise judge them again, so
			// that a revoked flow revived meanwhile is revoked again.
			err = s.RecheckConntrack()
		}
		if err == nil {
			return
		}
		s.mu.Lock()
		s.lastErr = fmt.Errorf("drift check: %w", err)
		s.mu.Unlock()
		failures++
		wait := retryAfter(t.Retry, failures)
		s.log.Error("drift check failed; syncing again", zap.Error(err), zap.Duration("retry", wait))
		if pending == nil {
			pending, deadline = synced, time.Now()
		}
		if pending != nil {
			setTimer(wait)
		}
	}
	for {
		in := updates
		if !fireAt.IsZero() {
			in = nil // a sync is due: see above
		}
		select {
		case <-ctx.Done():
			return nil
		case <-foreign:
			if !checkArmed {
				checkSoon.Reset(t.Debounce)
				checkArmed = true
			}
		case <-checkSoon.C:
			checkArmed = false
			if s.stopped() != nil || retake() {
				continue // it writes nothing any more, repairs included
			}
			s.log.Info("another process committed to our table; checking it for drift now")
			checkDrift()
		case snap, ok := <-in:
			if !ok {
				updates = nil // the source ended: nothing more comes
				continue
			}
			now := time.Now()
			if pending == nil {
				deadline = now.Add(t.MaxDelay)
			}
			pending = snap
			at := lastSync.Add(t.Debounce) // in the past after a quiet period
			if t.MaxDelay > 0 && at.After(deadline) {
				at = deadline
			}
			syncBy(at)
		case <-timer.C:
			fireAt = time.Time{}
			if pending == nil || s.stopped() != nil {
				continue // a stopped Syncer logged why once
			}
		drain:
			for {
				select {
				case snap, ok := <-updates:
					if !ok {
						updates = nil // the source ended: nothing more comes
						break drain
					}
					pending = snap
				default:
					break drain
				}
			}
			syncStart := time.Now()
			afterQuiet := syncStart.Sub(lastEnd) >= t.Debounce
			merging := settling && pending == synced
			settling = false
			res, err := s.Sync(pending)
			lastSync = time.Now()
			lastEnd = lastSync
			if err == nil && merging {
				// Merging deferred unions is no change of the cluster:
				// it opens no window for the next one.
				lastSync = lastSync.Add(-t.Debounce)
			}
			if err == nil && res.Batch.Messages == 0 {
				// A sync that wrote nothing cost the kernel nothing. After
				// a quiet period it holds nothing back: a pod deleted at
				// once comes as two events, its deletion timestamp (which
				// moves nothing) and its removal, and the removal waited
				// a whole window behind the first. Otherwise the next
				// change waits long enough to keep such syncs to a tenth
				// of the time (a tenant relabelling its pods in a loop
				// costs at most that), never the whole window.
				hold := time.Duration(0)
				if !afterQuiet {
					hold = min(noOpHold*lastSync.Sub(syncStart), t.Debounce)
				}
				lastSync = lastSync.Add(hold - t.Debounce)
			}
			switch {
			case errors.Is(err, ErrOwned):
				// Only before our record was ever written: another daemon
				// started with us and wrote first.
				s.log.Error("another running nftpolicy wrote the table first; stopping", zap.Error(err))
				return err
			case errors.Is(err, ErrTakenOver):
				// judge logged it; retake asks again every second.
				continue
			case err != nil:
				failures++
				wait := retryAfter(t.Retry, failures)
				s.log.Error("sync failed; the previous table stays programmed", zap.Error(err), zap.Duration("retry", wait))
				setTimer(wait)
				continue
			}
			failures = 0
			synced, pending = pending, nil
			if res.Deferred > 0 {
				// The sync left fragment chains asking their unions'
				// parts one by one (Options.DeferUnions): a sync of the
				// same snapshot merges them once the cluster is quiet for
				// a window. The timer holds nothing back: a change that
				// comes first is synced as any other, and merges them.
				settleTimer.Reset(min(t.Debounce, t.MaxDelay))
			}
			if !watching {
				s.WatchCommits()
				forward = s.forwardChains()
				watching = true
				foreign = s.foreignCommits()
			}
		case <-settleTimer.C:
			// Merge the unions the last sync deferred, unless a change is
			// due (its sync merges them) or nothing is left to merge.
			if pending != nil || synced == nil || s.stopped() != nil || s.takenOver() != nil || !s.hasDeferred() {
				continue
			}
			pending, deadline, settling = synced, time.Now(), true
			setTimer(0)
		case <-forward:
			// Another table's forward chain may have taken our priority
			// or moved ahead of us: re-place ours now, not at the next
			// cluster change.
			if s.stopped() != nil || s.takenOver() != nil {
				continue
			}
			moved, err := s.ReresolvePriority()
			if err != nil {
				// Our chain may no longer run first: not ready until the
				// priority resolves. The sync resolves it again, fails
				// with the reason (Status), and is retried with backoff
				// until the chain in the way goes.
				s.log.Error("cannot re-resolve the forward priority; not ready until it can be", zap.Error(err))
				if pending == nil {
					pending, deadline = synced, time.Now()
				}
				if pending != nil {
					setTimer(0)
				}
				continue
			}
			if moved && pending == nil {
				pending, deadline = synced, time.Now()
				setTimer(0)
			}
		case <-drift:
			if s.stopped() != nil || retake() {
				continue
			}
			checkDrift()
		case <-netnsTicker.C:
			if s.stopped() != nil || s.checkNetns() != nil {
				continue
			}
			retake()
		}
	}
}
