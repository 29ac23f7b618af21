package k8s

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"
)

// A DirUpdate is the state of a manifests directory, sent by WatchDir.
type DirUpdate struct {
	// Snapshot holds every file's objects: as the file is now, or, for a
	// file that cannot be read or parsed now, as they were when it last
	// could be. It is the same pointer as in the previous update when it did
	// not change, and nil until the directory could be listed once.
	Snapshot *Snapshot
	// Errors are the objects left out of Snapshot or kept at their last
	// good version (KeptLastGood), and the warnings, as LoadDir reports
	// them; and for a file whose previous objects are kept, what is wrong
	// with it now.
	Errors []*ObjectError
	// Err says why Snapshot is not the directory's current content, each
	// problem naming its path: the directory cannot be listed (every
	// object is kept), or files cannot be read or parsed (their last good
	// objects are kept). Nil when Snapshot is current.
	Err error
	// Unlisted is set when the directory itself cannot be listed (it was
	// removed, say): Snapshot is what it last held.
	Unlisted bool
	// Polling says why the directory is polled rather than watched with
	// inotify; set in the first update only, nil when it is watched.
	Polling error
}

// MaxErrorInterval bounds the backoff with which WatchDir repeats an
// update whose Err persists.
const MaxErrorInterval = time.Minute

// WatchDir loads dir and sends an update when its content changes, until
// ctx ends. It follows the directory with inotify and rescans it every
// rescan as a safety net; where inotify cannot be set up it polls it every
// interval instead, as it always did, and the first update says why
// (Polling). Both durations must be positive.
//
// Content, not modification time, decides: rewriting a file with the same
// bytes causes no update.
//
// A half-written file is never loaded (a YAML file cut short after "from:"
// is a valid policy whose null from list allows every peer). A change is
// loaded once every file that changed is settled, all at once, so that a
// change spread over several files is one update:
//
//   - A file renamed into the directory (the atomic replace every writer
//     should use: write a temporary name in the same directory that is not
//     read, a dot name or another extension, then rename it over the old
//     one), a symlink created or swapped, a directory or FIFO in a
//     manifest's place, and the swap of a ConfigMap volume's ..data link
//     are complete when they happen: the file is read, then read again to
//     confirm the same content, and loaded at once.
//   - A file written in place (or created, or removed) is loaded once it was
//     closed after its last write and nothing touched it for one interval,
//     then read twice alike. A writer that pauses less than one interval
//     between writes, even one that closes the file and opens it again, is
//     never caught half-way; that is what the two-poll rule guaranteed.
//     A slower writer can be, as it could before: rename atomically.
//   - A change no event announced (inotify overflowed, a network filesystem
//     written from another node, a file reached through a symlink into
//     another directory) is found by the rescan and loaded once a read one
//     interval later agrees, the two-poll rule again; so is every file at
//     the start. A file modified and never closed counts as settled after
//     one rescan interval without a write.
//
// Without inotify, a change is loaded once two consecutive polls, one
// interval apart, read the same content of the whole directory.
//
// State is kept per file, so that one bad file does not stop the others'
// updates: a removed file drops its objects; a file that cannot be read (a
// dangling link, a link loop, no permission, a manifest name that is a
// directory, a FIFO or a link to one) or that no longer parses keeps the
// objects of its last good version, and Err says so, naming the file. A
// directory that cannot be listed keeps everything. Within a file that
// parses, an object whose edit is rejected keeps its last good version,
// and so on, as the package documentation says (mergeOver); the
// ObjectError says so (KeptLastGood). While Err is set the update is sent
// again, at one interval and then at doubling intervals up to
// MaxErrorInterval, so that the problem is not logged once and forgotten.
func WatchDir(ctx context.Context, dir string, interval, rescan time.Duration) <-chan DirUpdate {
	out := make(chan DirUpdate, 1)
	switch {
	case interval <= 0:
		out <- DirUpdate{Err: fmt.Errorf("watch %s: poll interval %v is not positive", dir, interval)}
		close(out)
		return out
	case rescan <= 0:
		out <- DirUpdate{Err: fmt.Errorf("watch %s: rescan interval %v is not positive", dir, rescan)}
		close(out)
		return out
	}
	l, err := newDirLoop(dir, interval, rescan)
	if err != nil {
		go pollDir(ctx, newDirWatcher(dir, interval), interval, fmt.Errorf("watch %s with inotify: %w; polling it every %v instead", dir, err, interval), out)
		return out
	}
	go l.run(ctx, out)
	return out
}

// pollDir polls w every interval and sends its updates on out, the first
// with why (DirUpdate.Polling), until ctx ends.
func pollDir(ctx context.Context, w *dirWatcher, interval time.Duration, why error, out chan<- DirUpdate) {
	defer close(out)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		if u, ok := w.tick(); ok {
			u.Polling, why = why, nil
			select {
			case out <- u:
			case <-ctx.Done():
				return
			}
		}
		select {
		case <-ticker.C:
		case <-ctx.Done():
			return
		}
	}
}

// A dirWatcher holds WatchDir's state between loads: what is in effect.
type dirWatcher struct {
	dir    string
	fsys   fs.FS
	files  map[string]*watchedFile // by name, as in effect
	effect map[string]polledFile   // by name, what each entry read when the state in effect was made (no data)
	snap   *Snapshot               // merged from files
	errs   []*ObjectError          // of snap

	seen, loaded [sha256.Size]byte // digests of the previous poll and of the state in effect
	hasLoaded    bool
	last         DirUpdate // the update of the state in effect
	// An update with an error is repeated after wait polls, wait doubling
	// up to maxWait; waited counts the polls since it was last sent.
	wait, waited, maxWait int
}

func newDirWatcher(dir string, interval time.Duration) *dirWatcher {
	return &dirWatcher{
		dir: dir, fsys: manifestDir(dir), files: map[string]*watchedFile{},
		maxWait: max(1, int(MaxErrorInterval/interval)),
	}
}

// tick polls the directory once and returns the update to send, if any:
// the polling mode of WatchDir.
func (w *dirWatcher) tick() (DirUpdate, bool) {
	p := w.poll()
	switch {
	case p.sum != w.seen:
		// New since the previous poll, maybe mid-write: load it when the
		// next poll reads the same.
		w.seen = p.sum
	case !w.hasLoaded || p.sum != w.loaded:
		return w.load(p), true
	case w.last.Err != nil:
		if w.waited++; w.waited >= w.wait {
			w.wait, w.waited = min(2*w.wait, w.maxWait), 0
			return w.last, true
		}
	}
	return DirUpdate{}, false
}

// load makes p the state in effect and returns its update.
func (w *dirWatcher) load(p dirPoll) DirUpdate {
	w.last = w.apply(p)
	w.loaded, w.hasLoaded = p.sum, true
	w.wait, w.waited = 1, 0
	return w.last
}

// A watchedFile is what one file contributes to the snapshot.
type watchedFile struct {
	sum   [sha256.Size]byte // of the content this state was made from; zero when it could not be read
	load  *fileLoad         // the objects in effect and the errors to report
	good  bool              // load.defs come from a version that parsed whole
	stale error             // why load.defs are not the file's current content
	held  []objectKey       // the objects this file holds in the snapshot (see mergeOver)
}

// A dirPoll is one reading of the directory.
type dirPoll struct {
	sum   [sha256.Size]byte // of everything below
	err   error             // the directory could not be listed
	files []polledFile      // in name order
}

type polledFile struct {
	name string
	sum  [sha256.Size]byte
	data []byte // nil when the content is the one in effect
	err  error
}

// key identifies what a read of f found: its content, or its error.
func (f polledFile) key() [sha256.Size]byte {
	if f.err != nil {
		return sha256.Sum256([]byte("error: " + f.err.Error()))
	}
	return f.sum
}

// poll reads the names and contents of the files LoadDir would read.
func (w *dirWatcher) poll() dirPoll {
	var p dirPoll
	entries, err := manifestFiles(w.fsys)
	if err != nil {
		p.err = inDir(w.dir, err)
	}
	for _, e := range entries {
		p.files = append(p.files, w.read(e))
	}
	p.sum = pollSum(p.err, p.files)
	return p
}

// read reads one entry of the directory; data is nil when the content is
// the one in effect, to hold one copy, not two.
func (w *dirWatcher) read(e manifestEntry) polledFile {
	f := polledFile{name: e.name, err: e.err}
	if f.err == nil {
		f.data, f.err = fs.ReadFile(w.fsys, e.name)
	}
	if f.err != nil {
		f.err = inDir(w.dir, f.err)
		f.data = nil
		return f
	}
	f.sum = sha256.Sum256(f.data)
	if old := w.files[f.name]; old != nil && old.sum == f.sum {
		f.data = nil
	}
	return f
}

// pollSum is the digest of a reading of the directory.
func pollSum(err error, files []polledFile) [sha256.Size]byte {
	h := sha256.New()
	if err != nil {
		fmt.Fprintf(h, "directory: %v\x00", err)
	}
	for _, f := range files {
		fmt.Fprintf(h, "%s\x00%x\x00", f.name, f.key())
	}
	var sum [sha256.Size]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// apply makes p the state in effect and returns the update for it.
func (w *dirWatcher) apply(p dirPoll) DirUpdate {
	if p.err != nil {
		return DirUpdate{Snapshot: w.snap, Errors: w.errs, Err: fmt.Errorf("%w; keeping every object it held", p.err), Unlisted: true}
	}
	files := make(map[string]*watchedFile, len(p.files))
	w.effect = make(map[string]polledFile, len(p.files))
	for _, f := range p.files {
		f.data = nil
		w.effect[f.name] = f
	}
	changed := w.snap == nil
	var problems []error
	for _, f := range p.files {
		old := w.files[f.name]
		var now *watchedFile
		switch {
		case f.err != nil && old != nil:
			now = &watchedFile{load: old.load, good: old.good, held: old.held,
				stale: fmt.Errorf("%w; keeping the objects it held before", f.err)}
		case f.err != nil:
			problems = append(problems, f.err)
		case old != nil && old.sum == f.sum:
			now = old
		default:
			fl := loadFile(f.name, f.data)
			now = &watchedFile{sum: f.sum, load: fl, good: fl.syntax == nil}
			if fl.syntax != nil && old != nil && old.good {
				// Most likely caught mid-write, or a bad edit: the
				// objects of the version that parsed are the better
				// guess, and the errors are of the version on disk.
				now.load = &fileLoad{defs: old.load.defs, errs: fl.errs, syntax: fl.syntax}
				now.good = true
				now.stale = fmt.Errorf("%s: %w; keeping the objects of its last version that parsed",
					location(filepath.Join(w.dir, f.name), fl.syntax.Doc, fl.syntax.Item), fl.syntax.Err)
			}
		}
		if now == nil {
			continue
		}
		if now.stale != nil {
			problems = append(problems, now.stale)
		}
		if old == nil || now.load != old.load {
			changed = true
		}
		files[f.name] = now
	}
	for name := range w.files {
		if files[name] == nil {
			changed = true
		}
	}
	if changed {
		// The state in effect is what a rejected edit falls back on: an
		// object keeps its last good version, and a file keeps what it
		// held (mergeOver).
		var prev *previous
		if w.snap != nil {
			prev = previousOf(w.snap)
		}
		loads := make([]*fileLoad, 0, len(p.files))
		var kept []*watchedFile
		for _, f := range p.files { // in name order
			if wf := files[f.name]; wf != nil {
				loads = append(loads, wf.load)
				kept = append(kept, wf)
				if prev != nil {
					var held []objectKey
					if old := w.files[f.name]; old != nil {
						held = old.held
					}
					prev.held = append(prev.held, held)
				}
			}
		}
		var held [][]objectKey
		w.snap, w.errs, held = mergeOver(loads, prev)
		for i, wf := range kept {
			wf.held = held[i]
		}
	}
	w.files = files
	return DirUpdate{Snapshot: w.snap, Errors: w.errs, Err: errors.Join(problems...)}
}

// inDir names the path of an error from an os.DirFS of dir as the user
// knows it: os.DirFS reports paths relative to dir ("open .: ...").
// The error of a listed entry is read again (a confirming read): a copy is
// named, never the entry's own.
func inDir(dir string, err error) error {
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		return err
	}
	if pe == err {
		named := *pe
		named.Path = filepath.Join(dir, pe.Path)
		return &named
	}
	pe.Path = filepath.Join(dir, pe.Path)
	return err
}
