package k8s

import (
	"context"
	"crypto/sha256"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// A dirEvent is what the notifier saw happen in the directory (or to it).
type dirEvent struct {
	op    eventOp
	name  string // of the entry, for the ops on one
	isDir bool   // the entry is a directory
}

type eventOp int

const (
	opWrite    eventOp = iota // written to (IN_MODIFY; truncation too)
	opClosed                  // closed after writing (IN_CLOSE_WRITE)
	opMovedIn                 // renamed into the directory (IN_MOVED_TO)
	opCreated                 // created (IN_CREATE): a file, link, directory or FIFO
	opRemoved                 // removed or renamed away (IN_DELETE, IN_MOVED_FROM)
	opAttrib                  // metadata changed (IN_ATTRIB): mode, owner, link count
	opOverflow                // events were lost (IN_Q_OVERFLOW)
	opDirLost                 // the watch on the directory ended: removed, renamed, unmounted
	opDirEntry                // the directory's own entry in its parent changed
)

// A pendingFile is a manifest name that changed since the state in effect
// and is not loaded yet.
type pendingFile struct {
	since   time.Time         // of the last event on it, or of the read that found it changed
	heard   bool              // inotify reported it: the events say when it is settled
	atomic  bool              // complete as it is (renamed in, a link): due at once
	writing bool              // written and not closed since
	read    bool              // key holds a read made since its last event
	key     [sha256.Size]byte // of that read (polledFile.key, or absentKey)
}

// absentKey is the key of a name the directory does not list.
var absentKey = sha256.Sum256([]byte("absent"))

// A dirLoop is WatchDir's state when it follows the directory with
// inotify: what is in effect (w) and what changed since (pending).
type dirLoop struct {
	w                *dirWatcher
	n                *notifier
	interval, rescan time.Duration

	pending  map[string]*pendingFile
	full     bool      // read every file: at the start, on a rescan, when events were lost
	swapped  bool      // a link or directory in the directory changed: every file may have
	rewatch  bool      // add the watch on the directory again
	watched  bool      // the directory is watched
	retryAt  time.Time // when to try watching it again, while it is not
	rescanAt time.Time

	// While the update in effect has an error it is sent again at
	// repeatAt, the wait doubling up to MaxErrorInterval.
	repeatAt time.Time
	wait     time.Duration
}

// newDirLoop sets up inotify on dir; an error says it cannot be.
func newDirLoop(dir string, interval, rescan time.Duration) (*dirLoop, error) {
	n, err := newNotifier(dir)
	if err != nil {
		return nil, err
	}
	l := &dirLoop{
		w: newDirWatcher(dir, interval), n: n, interval: interval, rescan: rescan,
		pending: map[string]*pendingFile{}, full: true,
	}
	// The watch comes before the first read, so that nothing written
	// after that read goes unseen.
	if l.watched, err = n.watch(); err != nil {
		n.close()
		return nil, err
	}
	return l, nil
}

// run sends l's updates on out until ctx ends.
func (l *dirLoop) run(ctx context.Context, out chan<- DirUpdate) {
	defer close(out)
	defer l.n.close()
	stop := context.AfterFunc(ctx, l.n.wake)
	defer stop()
	for ctx.Err() == nil {
		now := time.Now()
		l.events(now)
		if u, ok := l.step(now); ok {
			select {
			case out <- u:
			case <-ctx.Done():
				return
			}
			continue
		}
		l.n.wait(time.Until(l.next(now)))
	}
}

// events takes the events that arrived.
func (l *dirLoop) events(now time.Time) {
	l.n.drain(func(ev dirEvent) { l.handle(ev, now) })
}

// handle notes one event.
func (l *dirLoop) handle(ev dirEvent, now time.Time) {
	switch ev.op {
	case opOverflow:
		l.full = true
		return
	case opDirLost, opDirEntry:
		l.rewatch, l.full = true, true
		return
	}
	if !isManifestName(ev.name) {
		// A temporary file is nobody's business until it is renamed in.
		// But a manifest may be a link through a link or directory of
		// this one: a ConfigMap volume swaps ..data, a link to a
		// timestamped directory, by rename.
		if ev.isDir || strings.HasPrefix(ev.name, "..") || l.isLink(ev.name) {
			l.swapped = true
		}
		return
	}
	p := l.pending[ev.name]
	if p == nil {
		p = &pendingFile{}
		l.pending[ev.name] = p
	}
	fresh := !p.heard
	p.since, p.heard, p.read = now, true, false
	switch ev.op {
	case opWrite:
		p.writing, p.atomic = true, false
	case opClosed:
		p.writing, p.atomic = false, false
	case opMovedIn:
		p.writing, p.atomic = false, true
	case opCreated:
		// A link, directory or FIFO is whole when it appears; a regular
		// file is being written (or was linked in: waiting costs one
		// interval).
		fi, err := os.Lstat(filepath.Join(l.w.dir, ev.name))
		if err == nil && !fi.Mode().IsRegular() {
			p.writing, p.atomic = false, true
		} else {
			p.atomic = false
		}
	case opRemoved:
		// Not at once: a writer that removes a file and writes it anew
		// would otherwise open, for an interval, what the file isolated.
		p.writing, p.atomic = false, false
	case opAttrib:
		// chmod, touch: nothing half-written, unless a write is under way.
		if fresh {
			p.atomic = true
		}
	}
}

func (l *dirLoop) isLink(name string) bool {
	fi, err := os.Lstat(filepath.Join(l.w.dir, name))
	return err == nil && fi.Mode()&fs.ModeSymlink != 0
}

// dueAt is when p is settled enough to be read for loading.
func (l *dirLoop) dueAt(p *pendingFile) time.Time {
	switch {
	case p.atomic:
		return p.since
	case p.writing:
		// Never closed: a writer that keeps the file open. It counts as
		// settled once no write came for a rescan interval.
		return p.since.Add(max(l.interval, l.rescan))
	}
	return p.since.Add(l.interval)
}

// next is when step has something to do, barring events.
func (l *dirLoop) next(now time.Time) time.Time {
	t := l.rescanAt
	if !l.watched {
		t = minTime(t, l.retryAt)
	}
	if l.w.hasLoaded && l.w.last.Err != nil {
		t = minTime(t, l.repeatAt)
	}
	for _, p := range l.pending {
		t = minTime(t, l.dueAt(p))
	}
	return t
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// step loads what has settled and returns the update to send, if any.
func (l *dirLoop) step(now time.Time) (DirUpdate, bool) {
	w := l.w
	if l.rewatch || !now.Before(l.rescanAt) || !l.watched && !now.Before(l.retryAt) {
		if !now.Before(l.rescanAt) {
			l.full, l.rescanAt = true, now.Add(l.rescan)
		}
		was := l.watched
		l.rewatch = false
		l.watched, _ = l.n.watch()
		l.retryAt = now.Add(l.interval)
		if l.watched != was {
			l.full = true
		}
	}
	entries, err := manifestFiles(w.fsys)
	if err != nil {
		// Nothing is read here, so nothing is half-written: say so at
		// once, keeping every object; read every file when it is back.
		l.full = true
		p := dirPoll{err: inDir(w.dir, err)}
		p.sum = pollSum(p.err, nil)
		if !w.hasLoaded || p.sum != w.loaded {
			return l.loaded(w.load(p), now), true
		}
		return l.repeat(now)
	}
	listed := make(map[string]manifestEntry, len(entries))
	for _, e := range entries {
		listed[e.name] = e
	}
	if l.swapped {
		l.swapped = false
		for _, name := range l.names(listed) {
			switch p := l.pending[name]; {
			case p == nil:
				l.pending[name] = &pendingFile{since: now, heard: true, atomic: true}
			case !p.writing && l.isLink(name):
				// Caught by an earlier read between the new target's
				// making and the swap, it waited for a quiet interval;
				// the swap is what completes it.
				p.since, p.heard, p.atomic, p.read = now, true, true, false
			}
		}
	}
	if l.full {
		l.full = false
		for _, name := range l.names(listed) {
			_, key := l.readName(name, listed)
			l.discover(name, key, now)
		}
	}

	// Everything that changed loads together, once all of it settled: a
	// change spread over files (a policy moved from one to another) is
	// one update, as when the whole directory had to be stable.
	for _, p := range l.pending {
		if now.Before(l.dueAt(p)) {
			return l.repeat(now)
		}
	}
	confirmed := make(map[string]polledFile, len(l.pending))
	settled := true
	for name, p := range l.pending {
		f, key := l.readName(name, listed)
		switch {
		case p.read && p.key == key:
			// The same as the read before, made an interval or more
			// earlier, with no event since.
		case p.heard:
			// Read again to confirm: a writer that is still at it
			// (through a file it renamed in while writing) shows.
			if _, again := l.readName(name, listed); again != key {
				p.since, p.atomic, p.read, p.key = now, false, true, again
				settled = false
				continue
			}
		default:
			// Found by a rescan, not by an event: nothing says when its
			// writer is done, so it loads once a read an interval later
			// agrees (the two-poll rule).
			p.since, p.read, p.key = now, true, key
			settled = false
			continue
		}
		p.read, p.key = true, key
		if key != absentKey {
			confirmed[name] = f
		}
	}
	if !settled {
		return l.repeat(now)
	}
	var files []polledFile
	for _, name := range l.names(listed) {
		if _, changed := l.pending[name]; changed {
			if f, ok := confirmed[name]; ok {
				files = append(files, f)
			}
		} else if f, ok := w.effect[name]; ok {
			// Unchanged, as far as events tell; a rescan checks.
			files = append(files, f)
		}
		// Listed, never loaded and not pending: its events are on their
		// way, or were lost, and then the rescan finds it.
	}
	clear(l.pending)
	p := dirPoll{files: files, sum: pollSum(nil, files)}
	if w.hasLoaded && p.sum == w.loaded {
		return l.repeat(now)
	}
	return l.loaded(w.load(p), now), true
}

// names are the names listed and those in effect, in order.
func (l *dirLoop) names(listed map[string]manifestEntry) []string {
	names := make([]string, 0, len(listed)+len(l.w.effect))
	for name := range listed {
		names = append(names, name)
	}
	for name := range l.w.effect {
		if _, ok := listed[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// readName reads name as the listing has it, and returns the key of what
// it found (absentKey when it is not listed).
func (l *dirLoop) readName(name string, listed map[string]manifestEntry) (polledFile, [sha256.Size]byte) {
	e, ok := listed[name]
	if !ok {
		return polledFile{name: name}, absentKey
	}
	f := l.w.read(e)
	return f, f.key()
}

// discover notes what a rescan read of name: a difference from what is in
// effect that no event announced.
func (l *dirLoop) discover(name string, key [sha256.Size]byte, now time.Time) {
	eff, inEffect := l.w.effect[name]
	same := inEffect && eff.key() == key || !inEffect && key == absentKey
	p := l.pending[name]
	switch {
	case p != nil && p.heard:
		// Its events say when it is settled.
	case same:
		delete(l.pending, name)
	case p == nil:
		l.pending[name] = &pendingFile{since: now, read: true, key: key}
	case !p.read || p.key != key:
		p.since, p.read, p.key = now, true, key
	}
}

// loaded notes that u, just loaded, is sent, and returns it.
func (l *dirLoop) loaded(u DirUpdate, now time.Time) DirUpdate {
	l.wait = l.interval
	l.repeatAt = now.Add(l.wait)
	return u
}

// repeat returns the update in effect when its error is due to be sent
// again.
func (l *dirLoop) repeat(now time.Time) (DirUpdate, bool) {
	w := l.w
	if !w.hasLoaded || w.last.Err == nil || now.Before(l.repeatAt) {
		return DirUpdate{}, false
	}
	l.wait = min(2*l.wait, max(l.interval, MaxErrorInterval))
	l.repeatAt = now.Add(l.wait)
	return w.last, true
}
