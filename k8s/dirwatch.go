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
}

// MaxErrorInterval bounds the backoff with which WatchDir repeats an
// update whose Err persists.
const MaxErrorInterval = time.Minute

// WatchDir loads dir and sends an update when its content changes, checking
// every interval, until ctx ends; interval must be positive.
//
// Content, not modification time, decides: rewriting a file with the same
// bytes causes no update. A change is loaded only once two consecutive
// polls read the same content, so a file caught while it is being written
// is not programmed (a truncated `from:` reads as null, which allows every
// peer). Writers should still replace files atomically: write a temporary
// name in the same directory (a dot name, or another extension, is not
// read), then rename it over the old one; a writer slower than one
// interval can otherwise be read mid-way twice alike.
//
// State is kept per file, so that one bad file does not stop the others'
// updates: a removed file drops its objects; a file that cannot be read (a
// dangling link, a link loop, no permission, a manifest name that is a
// directory, a FIFO or a link to one) or that no longer parses keeps the
// objects of its last good version, and Err says so, naming the file. A directory that cannot be listed keeps everything. Within a file
// that parses, an object whose edit is rejected keeps its last good
// version, and so on, as the package documentation says (mergeOver); the
// ObjectError says so (KeptLastGood). While Err is
// set the update is sent again, at one interval and then at doubling
// intervals up to MaxErrorInterval, so that the problem is not logged
// once and forgotten.
//
// Polling keeps this dependency-free and works on every filesystem,
// including ConfigMap volumes that swap symlinks.
func WatchDir(ctx context.Context, dir string, interval time.Duration) <-chan DirUpdate {
	out := make(chan DirUpdate, 1)
	if interval <= 0 {
		out <- DirUpdate{Err: fmt.Errorf("watch %s: poll interval %v is not positive", dir, interval)}
		close(out)
		return out
	}
	go func() {
		defer close(out)
		w := newDirWatcher(dir, interval)
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			if u, ok := w.tick(); ok {
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
	}()
	return out
}

// A dirWatcher holds WatchDir's state between polls.
type dirWatcher struct {
	dir   string
	fsys  fs.FS
	files map[string]*watchedFile // by name, as in effect
	snap  *Snapshot               // merged from files
	errs  []*ObjectError          // of snap

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

// tick polls the directory once and returns the update to send, if any.
func (w *dirWatcher) tick() (DirUpdate, bool) {
	p := w.poll()
	switch {
	case p.sum != w.seen:
		// New since the previous poll, maybe mid-write: load it when the
		// next poll reads the same.
		w.seen = p.sum
	case !w.hasLoaded || p.sum != w.loaded:
		w.last = w.apply(p)
		w.loaded, w.hasLoaded = p.sum, true
		w.wait, w.waited = 1, 0
		return w.last, true
	case w.last.Err != nil:
		if w.waited++; w.waited >= w.wait {
			w.wait, w.waited = min(2*w.wait, w.maxWait), 0
			return w.last, true
		}
	}
	return DirUpdate{}, false
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
	files []polledFile
}

type polledFile struct {
	name string
	sum  [sha256.Size]byte
	data []byte // nil when the content is the one in effect
	err  error
}

// poll reads the names and contents of the files LoadDir would read.
func (w *dirWatcher) poll() dirPoll {
	var p dirPoll
	h := sha256.New()
	entries, err := manifestFiles(w.fsys)
	if err != nil {
		p.err = inDir(w.dir, err)
		fmt.Fprintf(h, "directory: %v\x00", p.err)
	}
	for _, e := range entries {
		f := polledFile{name: e.name, err: e.err}
		if f.err == nil {
			f.data, f.err = fs.ReadFile(w.fsys, e.name)
		}
		if f.err != nil {
			f.err = inDir(w.dir, f.err)
			f.data = nil
			fmt.Fprintf(h, "%s\x00error: %v\x00", f.name, f.err)
		} else {
			f.sum = sha256.Sum256(f.data)
			fmt.Fprintf(h, "%s\x00%x\x00", f.name, f.sum)
			if old := w.files[f.name]; old != nil && old.sum == f.sum {
				f.data = nil // already loaded: hold one copy, not two
			}
		}
		p.files = append(p.files, f)
	}
	copy(p.sum[:], h.Sum(nil))
	return p
}

// apply makes p the state in effect and returns the update for it.
func (w *dirWatcher) apply(p dirPoll) DirUpdate {
	if p.err != nil {
		return DirUpdate{Snapshot: w.snap, Errors: w.errs, Err: fmt.Errorf("%w; keeping every object it held", p.err), Unlisted: true}
	}
	files := make(map[string]*watchedFile, len(p.files))
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
func inDir(dir string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		pe.Path = filepath.Join(dir, pe.Path)
	}
	return err
}
