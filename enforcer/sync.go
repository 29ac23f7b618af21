package enforcer

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// A PrioritySetting is the --priority flag: Auto, or a fixed Value.
type PrioritySetting struct {
	Auto  bool
	Value int32
}

// A Syncer programs snapshots into the kernel: it resolves the priority
// from the live ruleset, compiles, and applies the table in one batch.
type Syncer struct {
	conn     *nft.Conn
	opts     Options
	priority PrioritySetting
	log      *zap.Logger

	mu         sync.Mutex
	generation uint64 // successful syncs so far
	lastErr    error
	lastText   string // rendered table of the last successful sync
}

// NewSyncer returns a Syncer writing through conn. opts.Priority is ignored:
// the priority comes from setting at each sync.
func NewSyncer(conn *nft.Conn, opts Options, setting PrioritySetting, log *zap.Logger) *Syncer {
	if opts.Table == "" {
		opts.Table = DefaultTable
	}
	if opts.MarkMask == 0 {
		opts.MarkMask = DefaultMarkMask
	}
	return &Syncer{conn: conn, opts: opts, priority: setting, log: log}
}

// A SyncResult reports one sync.
type SyncResult struct {
	Generation uint64
	Priority   int32
	Problems   []Problem
	Table      *nft.Table
	Unchanged  bool // the table was already programmed; nothing was written
}

// Priority resolves the priority setting against the base chains now on the
// forward hook, logging a warning for an explicit value that is not ahead.
func (s *Syncer) Priority() (int32, error) {
	others, err := s.conn.BaseChains("forward")
	if err != nil {
		return 0, fmt.Errorf("read forward chains: %w", err)
	}
	if s.priority.Auto {
		return ChoosePriority(others, s.opts.Table)
	}
	for _, w := range CheckPriority(s.priority.Value, others, s.opts.Table) {
		s.log.Warn("explicit priority is not ahead of every forward chain", zap.String("warning", w))
	}
	return s.priority.Value, nil
}

// Sync compiles snap and programs it. On error the kernel keeps the table of
// the previous successful sync.
func (s *Syncer) Sync(snap *k8s.Snapshot) (SyncResult, error) {
	res, err := s.sync(snap)
	s.mu.Lock()
	s.lastErr = err
	if err == nil {
		s.generation++
		res.Generation = s.generation
	}
	s.mu.Unlock()
	return res, err
}

func (s *Syncer) sync(snap *k8s.Snapshot) (SyncResult, error) {
	prio, err := s.Priority()
	if err != nil {
		return SyncResult{}, err
	}
	opts := s.opts
	opts.Priority = prio
	table, problems := Compile(snap, opts)
	for _, p := range problems {
		s.log.Warn("skipped part of the snapshot", zap.String("object", p.Object), zap.Error(p.Err))
	}
	res := SyncResult{Priority: prio, Problems: problems, Table: table}
	text := nft.Render(table)
	s.mu.Lock()
	unchanged := s.lastText != "" && text == s.lastText
	s.mu.Unlock()
	if unchanged {
		res.Unchanged = true
		return res, nil
	}
	start := time.Now()
	if err := s.conn.Apply(table); err != nil {
		return res, err
	}
	s.mu.Lock()
	s.lastText = text
	s.mu.Unlock()
	s.log.Info("programmed table",
		zap.String("table", "inet "+table.Name),
		zap.Int32("priority", prio),
		zap.Int("chains", len(table.Chains)),
		zap.Int("sets", len(table.Sets)),
		zap.Duration("apply", time.Since(start)))
	if ce := s.log.Check(zap.DebugLevel, "ruleset"); ce != nil {
		ce.Write(zap.String("nft", text))
	}
	return res, nil
}

// Status reports the number of successful syncs (a sync that found the
// table already programmed counts: it confirms the state) and the error of
// the most recent sync, if it failed.
func (s *Syncer) Status() (generation uint64, lastErr error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.generation, s.lastErr
}

// Run syncs every snapshot that arrives on updates until ctx ends. Updates
// arriving within debounce of each other are coalesced into the last one; a
// failed sync is retried after retry with the newest snapshot. Run returns
// when ctx is done and leaves the table programmed.
func (s *Syncer) Run(ctx context.Context, updates <-chan *k8s.Snapshot, debounce, retry time.Duration) {
	var pending *k8s.Snapshot
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case snap := <-updates:
			pending = snap
			timer.Reset(debounce)
		case <-timer.C:
			if pending == nil {
				continue
			}
			if _, err := s.Sync(pending); err != nil {
				s.log.Error("sync failed; the previous table stays programmed", zap.Error(err), zap.Duration("retry", retry))
				timer.Reset(retry)
				continue
			}
			pending = nil
		}
	}
}
