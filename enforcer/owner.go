package enforcer

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/nftpolicy/nftpolicy/nft"
)

// Ownership.
//
// One table has one writer. A Syncer writes its owner record (nft.Owner:
// host, pid, a random token, its start time) into the table's comment with
// every whole-table write, and holds a beacon in the namespace it
// programs that the kernel drops when the process dies (nft.Conn.Hold:
// why a beacon, and not a stable identity or a lease). Before writing
// over a table whose record names someone else, a Syncer asks whether
// that owner lives:
//
//   - alive: it refuses (ErrOwned, naming the owner) unless Options.TakeOver
//     is set, and then takes the table over and says so in the log;
//   - gone (killed, crashed, stopped, restarted: every process has a new
//     token): it claims the table; a restart never needs a flag or a
//     manual step;
//   - no record (no table, or one written by nft -f): it writes.
//
// A Syncer that has written its record and later finds another one has
// been taken over: it stops for good (ErrTakenOver in Status and from
// every Sync) and writes nothing more, not even a drift repair, so two
// daemons never take turns. It finds out at its next write (the batch of
// a whole table is checked against the record in the kernel, in the same
// generation, see nft.Conn.ApplyGuarded; a delta fails its generation
// check and the record is read), or at its next drift check.
//
// A deleted network namespace (nft.ErrNetnsGone) also stops a Syncer for
// good: nobody can reach what it would program.

// ErrOwned reports a table owned by another nftpolicy that is alive.
var ErrOwned = errors.New("the table is owned by another running nftpolicy")

// ErrTakenOver reports that another nftpolicy took over the table this
// Syncer owned. The Syncer writes nothing more.
var ErrTakenOver = errors.New("another nftpolicy took over the table")

// ownership is a Syncer's side of the owner record. Fields other than stop
// belong to whoever holds syncMu; stop is under mu.
type ownership struct {
	me        nft.Owner
	beacon    *nft.Beacon // held from the first claim until Close
	owned     bool        // our record has been committed to the table
	announced string      // token of the last owner whose replacement was logged
	stop      error       // why nothing more is written; nil while running
}

// Owner returns the record this Syncer writes into the table.
func (s *Syncer) Owner() nft.Owner {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	return s.owner()
}

// owner returns s.own.me, made on first use; syncMu is held.
func (s *Syncer) owner() nft.Owner {
	if s.own.me.Token == "" {
		s.own.me = nft.NewOwner(time.Now())
	}
	return s.own.me
}

// Claim checks, before anything is compiled, that this Syncer may own the
// table (see Ownership): it returns an error wrapping ErrOwned, naming the
// owner, while another nftpolicy that is alive owns it and TakeOver is not
// set, or one wrapping nft.ErrNetnsGone. The first Sync claims as well, so
// calling Claim is optional: a daemon calls it once at start to refuse to
// run rather than to stay unready. It writes nothing.
func (s *Syncer) Claim() error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	return s.claim()
}

// claim is Claim; syncMu is held. Once the record is ours it only checks
// that nothing stopped the Syncer and that the namespace is still there.
func (s *Syncer) claim() error {
	if err := s.stopped(); err != nil {
		return err
	}
	if err := s.checkNetns(); err != nil {
		return err
	}
	if s.own.beacon == nil {
		b, err := s.conn.Hold(s.owner())
		if err != nil {
			return err
		}
		s.own.beacon = b
	}
	if s.own.owned {
		return nil
	}
	comment, err := s.conn.TableComment(s.opts.Table)
	if errors.Is(err, nft.ErrNoTable) {
		return nil
	}
	if err != nil {
		return err
	}
	return s.judge(comment, true)
}

// Close releases the Syncer's owner beacon: its record in the table, which
// stays programmed, is from then on that of an owner that is gone, and the
// next nftpolicy claims the table without a flag. The process ending does
// the same.
func (s *Syncer) Close() error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if s.own.beacon == nil {
		return nil
	}
	err := s.own.beacon.Close()
	s.own.beacon = nil
	return err
}

// judge decides whether this Syncer may write over the table whose comment
// is comment (exists false: there is no table). syncMu is held.
func (s *Syncer) judge(comment string, exists bool) error {
	me := s.owner()
	rec, ok := nft.ParseOwner(comment)
	if !exists || !ok || rec.Same(me) {
		return nil
	}
	if s.own.owned {
		err := fmt.Errorf("%w: table inet %s now records %q; this nftpolicy (%s) writes nothing more",
			ErrTakenOver, s.opts.Table, rec.Comment(), me.ID())
		s.log.Error("lost ownership of the table; not writing any more",
			zap.String("table", "inet "+s.opts.Table), zap.String("owner", rec.ID()),
			zap.Time("ownerSince", rec.Since), zap.String("self", me.ID()))
		s.halt(err)
		return err
	}
	alive, err := s.conn.Alive(rec)
	if err != nil {
		return err
	}
	if alive && !s.opts.TakeOver {
		return fmt.Errorf("%w: table inet %s records %q; stop it, or take over explicitly",
			ErrOwned, s.opts.Table, rec.Comment())
	}
	if s.own.announced != rec.Token {
		s.own.announced = rec.Token
		if alive {
			s.log.Warn("taking over the table from a running nftpolicy, as told to",
				zap.String("table", "inet "+s.opts.Table), zap.String("owner", rec.ID()),
				zap.Time("ownerSince", rec.Since), zap.String("self", me.ID()))
		} else {
			s.log.Info("claiming the table of an nftpolicy that is gone",
				zap.String("table", "inet "+s.opts.Table), zap.String("owner", rec.ID()),
				zap.Time("ownerSince", rec.Since), zap.String("self", me.ID()))
		}
	}
	return nil
}

// checkOwner reads the table's record and judges it; a missing table is
// not an error (drift repair rewrites it). syncMu is held.
func (s *Syncer) checkOwner() error {
	if err := s.stopped(); err != nil {
		return err
	}
	if err := s.checkNetns(); err != nil {
		return err
	}
	comment, err := s.conn.TableComment(s.opts.Table)
	if errors.Is(err, nft.ErrNoTable) {
		return nil
	}
	if err != nil {
		return err
	}
	return s.judge(comment, true)
}

// checkNetns stops the Syncer if its namespace is gone. syncMu is held.
func (s *Syncer) checkNetns() error {
	err := s.conn.CheckNetns()
	if errors.Is(err, nft.ErrNetnsGone) {
		err = fmt.Errorf("%w; nothing is written to it any more", err)
		s.log.Error("the network namespace is gone; not writing any more", zap.Error(err))
		s.halt(err)
	}
	return err
}

// applyOwned writes the whole table t with our record, unless the table
// now belongs to someone else (see judge), retrying when another commit
// slips between the read of the record and the write.
func (s *Syncer) applyOwned(t *nft.Table) (nft.BatchStats, error) {
	t.Comment = s.owner().Comment()
	for i := 0; ; i++ {
		batch, err := s.conn.ApplyGuarded(t, s.judge)
		if errors.Is(err, nft.ErrGenerationChanged) && i < maxConflicts {
			s.mu.Lock()
			s.conflicts++
			s.mu.Unlock()
			continue
		}
		if err == nil {
			s.own.owned = true
		}
		return batch, err
	}
}

// halt stops the Syncer for good with err (the first reason stays).
func (s *Syncer) halt(err error) {
	s.mu.Lock()
	if s.own.stop == nil {
		s.own.stop = err
	}
	s.mu.Unlock()
}

// stopped returns why the Syncer writes nothing more, nil while it runs.
func (s *Syncer) stopped() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.own.stop
}

// ApplyOnce writes table whole for a one-shot apply, recording this
// process as its owner: a record whose owner is gone as soon as the
// process ends, so a daemon started later claims the table without a
// flag. Like a daemon, it refuses (ErrOwned) to write over the table of a
// running nftpolicy unless takeOver is set; that daemon then stops
// writing (ErrTakenOver).
func ApplyOnce(conn *nft.Conn, table *nft.Table, takeOver bool, log *zap.Logger) (nft.BatchStats, error) {
	if log == nil {
		log = zap.NewNop()
	}
	s := &Syncer{conn: conn, opts: Options{Table: table.Name, TakeOver: takeOver}, log: log}
	if err := s.checkNetns(); err != nil {
		return nft.BatchStats{}, err
	}
	return s.applyOwned(table)
}

// ReresolvePriority resolves the forward priority against the base chains
// now in the namespace, and reports whether it moved: when another table's
// forward chain took our slot or moved ahead of us, the table must be
// written again (Run does it at once, on the commit monitor's notice).
func (s *Syncer) ReresolvePriority() (bool, error) {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	p, err := ResolvePriority(s.conn, s.priority, s.opts.Table, s.log)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	old := s.prio
	s.prio, s.prioResolved = p, true
	s.mu.Unlock()
	if p == old {
		return false, nil
	}
	s.log.Info("another table's forward chain moved in; re-placing ours",
		zap.Int32("priority", p), zap.Int32("was", old))
	return true, nil
}

// forwardChains is the commit monitor's signal of other tables' new
// forward chains; nil (never ready) while no monitor runs.
func (s *Syncer) forwardChains() <-chan struct{} {
	s.mu.Lock()
	m := s.monitor
	s.mu.Unlock()
	if m == nil {
		return nil
	}
	return m.ForwardChains()
}
