package enforcer

import (
	"errors"
	"fmt"
	"io"
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
// A Syncer that has written its record and later finds another one (at
// its next write: the batch of a whole table is checked against the
// record in the kernel, in the same generation, see nft.Conn.ApplyGuarded;
// a delta fails its generation check and the record is read; or at its
// next drift check, one debounce after a foreign commit at the latest)
// asks the same question:
//
//   - alive: it was taken over. It writes nothing, not even a drift
//     repair, so two daemons never take turns; Status reports ErrTakenOver
//     naming the new owner. It stays a standby: Run asks again every
//     second (cheap: a table comment and a socket connect), and when that
//     owner is gone it takes the table back, rewriting it whole, and logs
//     it. Without that, a daemon that handed the table over for an upgrade
//     and then saw its successor crash would leave nobody enforcing.
//   - gone, or no record: the record is drift, not a take-over (a table
//     restored from an old `nft list ruleset`, or written with nft -f, a
//     one-shot apply --take-over whose process ended): the Syncer rewrites
//     the table whole with its own record, and logs it.
//
// A taken-over daemon stays live (/healthz 200) and unready (/readyz 503,
// naming the owner): failing liveness would make kubelet or systemd
// restart it, and the restart would be refused (ErrOwned, exit 1) as long
// as the new owner runs, a crash loop that protects nothing and loses the
// standby that takes the table back when the new owner goes.
//
// A Syncer that has never written its record and finds a live owner at
// its first write (two daemons started at the same moment both found the
// table free at Claim; the other wrote first) gets ErrOwned, exactly as if
// it had started second, and Run returns it: the daemon exits 1 naming
// the owner, as the one started later does. Whoever commits first owns the
// table, whatever the timing.
//
// A deleted network namespace (nft.ErrNetnsGone) stops a Syncer for good:
// nobody can reach what it would program. Run checks for it every second.

// ErrOwned reports a table owned by another nftpolicy that is alive.
var ErrOwned = errors.New("the table is owned by another running nftpolicy")

// ErrTakenOver reports that another nftpolicy, alive, took over the table
// this Syncer owned. The Syncer writes nothing while that owner runs, and
// takes the table back when it is gone.
var ErrTakenOver = errors.New("another nftpolicy took over the table")

// ownership is a Syncer's side of the owner record. Fields other than stop
// and lost belong to whoever holds syncMu; stop and lost are under mu.
type ownership struct {
	me        nft.Owner
	beacon    io.Closer // nft.Beacon, held from the first claim until Close
	owned     bool      // our record has been committed to the table
	foreign   bool      // the last record judged was not ours: only a whole write replaces it
	announced string    // what was last logged about another owner: a state and its token
	stop      error     // why nothing more is written, for good; nil while running
	lost      error     // ErrTakenOver while a live owner holds the table we owned
	taker     nft.Owner // who took the table over, while lost is set
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
		s.own.me.Layout = layoutVersion()
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

// claim is Claim; syncMu is held. While the record is ours it only checks
// that nothing stopped the Syncer and that the namespace is still there;
// taken over, it asks again whether the new owner runs (ErrTakenOver while
// it does).
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
	if s.own.owned && s.takenOver() == nil {
		return nil
	}
	_, err := s.checkOwner()
	return err
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

// judge decides whether this Syncer may write over the table whose
// comment is comment (exists false: there is no table), see Ownership, and
// notes in s.own.foreign whether the table holds a record other than ours,
// which only a whole-table write replaces. syncMu is held.
func (s *Syncer) judge(comment string, exists bool) error {
	me := s.owner()
	rec, ok := nft.ParseOwner(comment)
	s.own.foreign = exists && !(ok && rec.Same(me))
	table := zap.String("table", "inet "+s.opts.Table)
	if !ok && s.takenOver() != nil {
		// No table, or one without a record, while we stand by: as long
		// as the owner that took the table over runs, the table is its
		// to write again (its drift check does), not ours to grab.
		alive, err := s.conn.Alive(s.own.taker)
		if err != nil {
			return err
		}
		if alive {
			return s.takenOver()
		}
	}
	if !ok {
		if s.own.foreign && s.own.owned && s.announce("none", "") {
			s.log.Warn("our table holds no owner record (written by nft -f?); rewriting it with ours",
				table, zap.String("self", me.ID()))
		}
		return nil
	}
	if rec.Same(me) {
		return nil
	}
	alive, err := s.conn.Alive(rec)
	if err != nil {
		return err
	}
	fields := []zap.Field{table, zap.String("owner", rec.ID()), zap.Time("ownerSince", rec.Since), zap.String("self", me.ID())}
	if rec.Layout != me.Layout {
		// The whole-table write that follows moves the kernel from the
		// other layout to ours without a gap (see Layout).
		fields = append(fields, zap.Int("ownerLayout", rec.Layout), zap.Int("layout", me.Layout))
	}
	switch {
	case alive && s.own.owned:
		// Taken over, even if we were told to take over ourselves: that
		// was for our start, and taking the table back from a running
		// owner would be the fight that records exist to prevent.
		err := fmt.Errorf("%w: table inet %s records %q, which is running; this nftpolicy (%s) writes nothing while it runs, and takes the table back when it is gone",
			ErrTakenOver, s.opts.Table, rec.Comment(), me.ID())
		s.setLost(err)
		s.own.taker = rec
		if s.announce("lost", rec.Token) {
			s.log.Error("another running nftpolicy took over the table; not writing while it runs", fields...)
		}
		return err
	case alive && !s.opts.TakeOver:
		return fmt.Errorf("%w: table inet %s records %q; stop it, or take over explicitly",
			ErrOwned, s.opts.Table, rec.Comment())
	case alive:
		if s.announce("take", rec.Token) {
			s.log.Warn("taking over the table from a running nftpolicy, as told to", fields...)
		}
	case s.takenOver() != nil:
		if s.announce("back", rec.Token) {
			s.log.Warn("the nftpolicy that took over the table is gone; taking the table back", fields...)
		}
	case s.own.owned:
		if s.announce("stale", rec.Token) {
			s.log.Warn("the table records an nftpolicy that is not running (restored from a backup, written by nft -f or a one-shot apply); rewriting it with our record", fields...)
		}
	default:
		if s.announce("claim", rec.Token) {
			s.log.Info("claiming the table of an nftpolicy that is gone", fields...)
		}
	}
	return nil
}

// announce reports whether what judge found (a state, an owner's token)
// is news to log: each is logged once, until our record is written again.
// syncMu is held.
func (s *Syncer) announce(state, token string) bool {
	key := state + "/" + token
	if s.own.announced == key {
		return false
	}
	s.own.announced = key
	return true
}

// checkOwner reads the table's record and judges it, and reports whether
// it is another than ours (only a whole-table write puts ours back); a
// missing table is not an error (drift repair rewrites it). syncMu is held.
func (s *Syncer) checkOwner() (foreign bool, err error) {
	if err := s.stopped(); err != nil {
		return false, err
	}
	if err := s.checkNetns(); err != nil {
		return false, err
	}
	comment, err := s.conn.TableComment(s.opts.Table)
	exists := true
	if errors.Is(err, nft.ErrNoTable) {
		exists, err = false, nil
	}
	if err != nil {
		return false, err
	}
	if err := s.judge(comment, exists); err != nil {
		return false, err
	}
	return s.own.foreign, nil
}

// checkNetns stops the Syncer if its namespace is gone. It is a stat and
// touches nothing syncMu guards: Run calls it every second without syncMu.
func (s *Syncer) checkNetns() error {
	err := s.conn.CheckNetns()
	if errors.Is(err, nft.ErrNetnsGone) {
		err = fmt.Errorf("%w; nothing is written to it any more", err)
		if s.halt(err) {
			s.log.Error("the network namespace is gone; not writing any more", zap.Error(err))
		}
	}
	return err
}

// applyOwned writes the whole table t with our record, unless the table
// now belongs to someone else (see judge), retrying when another commit
// slips between the read of the record and the write.
func (s *Syncer) applyOwned(t *nft.Table) (nft.BatchStats, error) {
	t.Comment = s.owner().Comment()
	if s.own.foreign || s.takenOver() != nil {
		// Writing over a table another owner held (or a record of one
		// gone): what it let start is unknown, so the next conntrack
		// cleanup judges every flow.
		s.cleaned = nil
	}
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
			s.own.foreign = false
			s.own.announced = ""
			if s.takenOver() != nil {
				s.setLost(nil)
				s.log.Info("took the table back; writing again",
					zap.String("table", "inet "+s.opts.Table), zap.String("self", s.owner().ID()))
			}
		}
		return batch, err
	}
}

// halt stops the Syncer for good with err, and reports whether it was
// the first reason (the one that stays).
func (s *Syncer) halt(err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.own.stop != nil {
		return false
	}
	s.own.stop = err
	return true
}

// stopped returns why the Syncer writes nothing more, for good; nil while
// it runs.
func (s *Syncer) stopped() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.own.stop
}

// setLost records that a live owner took the table over (err wraps
// ErrTakenOver), or, with nil, that the table is ours again.
func (s *Syncer) setLost(err error) {
	s.mu.Lock()
	s.own.lost = err
	s.mu.Unlock()
}

// takenOver returns ErrTakenOver, naming the owner, while another running
// nftpolicy holds the table this Syncer owned; nil otherwise.
func (s *Syncer) takenOver() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.own.lost
}

// ApplyOnce writes table whole for a one-shot apply, recording this
// process as its owner: a record whose owner holds no beacon, gone as far
// as anyone can tell, so a daemon started later claims the table without
// a flag. Like a daemon, it refuses (ErrOwned) to write over the table of
// a running nftpolicy unless takeOver is set; that daemon then finds the
// record of an owner that is not running and rewrites its own table at
// once (see Ownership): a one-shot write over a running daemon lasts until
// its next check.
func ApplyOnce(conn *nft.Conn, table *nft.Table, takeOver bool, log *zap.Logger) (nft.BatchStats, error) {
	if log == nil {
		log = zap.NewNop()
	}
	s := &Syncer{conn: connKernel{conn}, opts: Options{Table: table.Name, TakeOver: takeOver}, log: log}
	if err := s.checkNetns(); err != nil {
		return nft.BatchStats{}, err
	}
	return s.applyOwned(table)
}

// Cleanup deletes the table (nothing if there is none), unless a running
// nftpolicy owns it: then it refuses with an error wrapping ErrOwned that
// names the owner, because that daemon would see the delete and write the
// table again within a moment, leaving traffic open meanwhile and the
// table back anyway. With force it deletes the table all the same and
// warns that the daemon will write it again. A table with no record, or
// whose owner is gone, is deleted. The record is judged in the generation
// the delete is checked against (nft.Conn.DeleteGuarded), so a daemon
// that claims the table meanwhile is not deleted from under.
func Cleanup(conn *nft.Conn, table string, force bool, log *zap.Logger) error {
	if log == nil {
		log = zap.NewNop()
	}
	for i := 0; ; i++ {
		var running *nft.Owner
		err := conn.DeleteGuarded(table, func(comment string, exists bool) error {
			running = nil
			rec, ok := nft.ParseOwner(comment)
			if !exists || !ok {
				return nil
			}
			alive, err := conn.Alive(rec)
			if err != nil || !alive {
				return err
			}
			if !force {
				return fmt.Errorf("%w: table inet %s records %q; stop that nftpolicy first (it would write the table again at once), or force the cleanup",
					ErrOwned, table, rec.Comment())
			}
			running = &rec
			return nil
		})
		if errors.Is(err, nft.ErrGenerationChanged) && i < maxConflicts {
			continue
		}
		if err == nil && running != nil {
			log.Warn("deleted the table of a running nftpolicy, as forced; it will write the table again at its next check: stop it to keep the table deleted",
				zap.String("table", "inet "+table), zap.String("owner", running.ID()), zap.Time("ownerSince", running.Since))
		}
		return err
	}
}

// ReresolvePriority resolves the forward priority against the base chains
// now in the namespace, and reports whether it moved: when another table's
// forward chain took our slot or moved ahead of us, the table must be
// written again (Run does it at once, on the commit monitor's notice).
func (s *Syncer) ReresolvePriority() (bool, error) {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	p, old, err := s.forwardPriority(true)
	if err != nil {
		return false, err
	}
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
