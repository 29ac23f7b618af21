package k8s

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// watchUpdates starts WatchDir on dir and returns a function that waits for
// its next update. The 5 s bound only turns a hang into a failure.
func watchUpdates(t *testing.T, dir string, interval, rescan time.Duration) func() DirUpdate {
	ctx, cancel := context.WithCancel(context.Background())
	updates := WatchDir(ctx, dir, interval, rescan)
	t.Cleanup(func() {
		cancel()
		for range updates {
		}
	})
	return func() DirUpdate {
		t.Helper()
		select {
		case u := <-updates:
			if u.Polling != nil {
				t.Fatalf("not watched with inotify: %v", u.Polling)
			}
			return u
		case <-time.After(5 * time.Second):
			t.Fatal("no update within 5s")
		}
		return DirUpdate{}
	}
}

// replace writes content to a dot name and renames it over name, as
// editors, kubectl wrappers and the bench do.
func replace(t *testing.T, dir, name, content string) {
	t.Helper()
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// With a poll interval and a rescan of an hour, nothing but inotify can
// make WatchDir read the directory after the first load: every rename
// still produces its update, with the new content.
func TestWatchDirRenameLoadsAtOnce(t *testing.T) {
	dir := t.TempDir()
	next := watchUpdates(t, dir, time.Hour, time.Hour)
	if u := next(); u.Err != nil || u.Snapshot == nil || !isEmptySnapshot(u.Snapshot) {
		t.Fatalf("empty directory: %+v", u)
	}
	for i := range 20 {
		name := "ns-" + strconv.Itoa(i)
		replace(t, dir, "ns.yaml", nsDoc(name))
		u := next()
		if u.Err != nil || len(u.Snapshot.Namespaces) != 1 || u.Snapshot.Namespaces[0].Name != name {
			t.Fatalf("rename %d: %v, %v, want namespace %s", i, names(u.Snapshot), u.Err, name)
		}
	}
	// A removal settles for an interval (a writer may be writing the
	// file anew), but a rename in right after it is one change with it.
	if err := os.Remove(filepath.Join(dir, "ns.yaml")); err != nil {
		t.Fatal(err)
	}
	replace(t, dir, "other.yaml", nsDoc("other"))
	replace(t, dir, "ns.yaml", nsDoc("back"))
	u := next()
	if got := strings.Join(names(u.Snapshot), ","); u.Err != nil || got != "Namespace back,Namespace other" {
		t.Fatalf("removed and renamed in again: %s, %v", got, u.Err)
	}
}

// A link created dangling, or made to point at a directory, is whole when
// it appears: its error is reported at once and read again alike (an
// entry's error once changed on every read, and never confirmed).
func TestWatchDirLinkErrorsAtOnce(t *testing.T) {
	dir := t.TempDir()
	next := watchUpdates(t, dir, time.Hour, time.Hour)
	next()
	replace(t, dir, "ns.yaml", nsDoc("a"))
	next()
	link := filepath.Join(dir, "dangling.yaml")
	if err := os.Symlink("missing.yaml", link); err != nil {
		t.Fatal(err)
	}
	if u := next(); u.Err == nil || !strings.Contains(u.Err.Error(), link+": no such file or directory") || names(u.Snapshot)[0] != "Namespace a" {
		t.Fatalf("dangling link: %v, %v", names(u.Snapshot), u.Err)
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("d", filepath.Join(dir, ".tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, ".tmp"), link); err != nil {
		t.Fatal(err)
	}
	u := next()
	for u.Err != nil && !strings.Contains(u.Err.Error(), "not a regular file") { // the mkdir, first
		u = next()
	}
	if u.Err == nil || !strings.Contains(u.Err.Error(), link+": not a regular file (a directory)") {
		t.Fatalf("link to a directory: %v", u.Err)
	}
}

func isEmptySnapshot(s *Snapshot) bool {
	return len(s.Namespaces)+len(s.Pods)+len(s.Nodes)+len(s.Policies) == 0
}

// A loopStepper drives a dirLoop by hand, with the events inotify really
// delivered and a clock the test sets: which step loads what, without
// sleeping.
type loopStepper struct {
	t  *testing.T
	l  *dirLoop
	t0 time.Time
}

func newLoopStepper(t *testing.T, dir string, interval, rescan time.Duration) *loopStepper {
	l, err := newDirLoop(dir, interval, rescan)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.n.close)
	return &loopStepper{t: t, l: l, t0: time.Now()}
}

// at takes the events that arrived, steps at t0+d, and returns the update
// sent, or nil.
func (s *loopStepper) at(d time.Duration) *DirUpdate {
	now := s.t0.Add(d)
	s.l.events(now)
	u, ok := s.l.step(now)
	if !ok {
		return nil
	}
	return &u
}

// A writer that writes half a file, closes it, pauses for less than an
// interval, and opens it again for the rest closes it twice: the first
// close must not load the half (a from list cut short reads as null,
// which allows every peer).
func TestWatchDirTwoStepWriterNeverLoadsHalf(t *testing.T) {
	dir := t.TempDir()
	s := newLoopStepper(t, dir, time.Second, time.Hour)
	if u := s.at(0); u == nil || !isEmptySnapshot(u.Snapshot) {
		t.Fatalf("empty directory: %+v", u)
	}
	path := filepath.Join(dir, "policy.yaml")
	cut := strings.Index(allowFromY, "from:") + len("from:")
	appendTo := func(flags int, content string) {
		f, err := os.OpenFile(path, flags|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(content); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	appendTo(os.O_CREATE|os.O_TRUNC, allowFromY[:cut]+"\n")
	for _, d := range []time.Duration{10 * time.Millisecond, 500 * time.Millisecond, 900 * time.Millisecond} {
		if u := s.at(d); u != nil {
			t.Fatalf("at %v, before an interval passed since the first close: %v", d, u.Snapshot.Policies)
		}
	}
	// The rest, 900 ms after the first close (the interval is 1 s).
	appendTo(os.O_APPEND, allowFromY[cut:])
	for _, d := range []time.Duration{900 * time.Millisecond, 1100 * time.Millisecond, 1800 * time.Millisecond} {
		if u := s.at(d); u != nil {
			t.Fatalf("at %v, an interval after the first close but not after the second: %+v", d, u.Snapshot.Policies)
		}
	}
	u := s.at(1901 * time.Millisecond)
	if u == nil || u.Err != nil || len(u.Snapshot.Policies) != 1 || u.Snapshot.Policies[0].Spec.Ingress[0].From == nil {
		t.Fatalf("an interval after the second close: %+v, want the whole policy", u)
	}
}

// Events lost to a full inotify queue (IN_Q_OVERFLOW) make the next step
// read every file: a rename whose events were dropped is still loaded,
// once a read an interval later agrees.
func TestWatchDirOverflowRescans(t *testing.T) {
	dir := t.TempDir()
	replace(t, dir, "b.yaml", nsDoc("b1"))
	s := newLoopStepper(t, dir, time.Second, time.Hour)
	if u := s.at(0); u != nil {
		t.Fatalf("loaded at the first read: %+v", u)
	}
	if u := s.at(time.Second); u == nil || names(u.Snapshot)[0] != "Namespace b1" {
		t.Fatalf("start: %+v", u)
	}

	// Fill the queue with events of a dot file (two per write: IN_MODIFY
	// and IN_CLOSE_WRITE), then rename b.yaml: its events are dropped.
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events")
	if err != nil {
		t.Skip(err)
	}
	limit, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || limit > 1<<20 {
		t.Skipf("max_queued_events %q", b)
	}
	filler := filepath.Join(dir, ".filler")
	for i := range limit/2 + 100 {
		if err := os.WriteFile(filler, []byte(strconv.Itoa(i%2)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	replace(t, dir, "b.yaml", nsDoc("b2"))

	now := s.t0.Add(2 * time.Second)
	overflowed := false
	s.l.n.drain(func(ev dirEvent) {
		overflowed = overflowed || ev.op == opOverflow
		if ev.op != opOverflow && isManifestName(ev.name) {
			t.Errorf("an event on %s came through the full queue", ev.name)
		}
		s.l.handle(ev, now)
	})
	if !overflowed {
		t.Fatal("the queue did not overflow")
	}
	if u, ok := s.l.step(now); ok {
		t.Fatalf("loaded at the read after the overflow: %+v", u)
	}
	if u := s.at(3 * time.Second); u == nil || names(u.Snapshot)[0] != "Namespace b2" {
		t.Fatalf("after the overflow: %+v, want b2", u)
	}
}

// A change no event announces (here, a link into another directory whose
// target is edited) is found by the periodic rescan, and loaded once a
// read an interval later agrees: a target still changing waits.
func TestWatchDirRescanFindsUnannouncedChange(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	target := filepath.Join(elsewhere, "ns.yaml")
	write := func(content string) {
		if err := os.WriteFile(target, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(nsDoc("a"))
	if err := os.Symlink(target, filepath.Join(dir, "ns.yaml")); err != nil {
		t.Fatal(err)
	}
	s := newLoopStepper(t, dir, time.Second, 10*time.Second)
	s.at(0)
	if u := s.at(time.Second); u == nil || names(u.Snapshot)[0] != "Namespace a" {
		t.Fatalf("start: %+v", u)
	}
	write(nsDoc("b"))
	if u := s.at(2 * time.Second); u != nil {
		t.Fatalf("an edit outside the directory was seen before the rescan: %+v", u)
	}
	if u := s.at(10 * time.Second); u != nil {
		t.Fatalf("loaded at the first read of the rescan: %+v", u)
	}
	write(nsDoc("c")) // still being edited
	if u := s.at(11 * time.Second); u != nil {
		t.Fatalf("loaded although the read an interval later differs: %+v", u)
	}
	if u := s.at(12 * time.Second); u == nil || names(u.Snapshot)[0] != "Namespace c" {
		t.Fatalf("after the rescan: %+v, want c", u)
	}
}

// A mounted ConfigMap: each key a link into ..data, ..data a link to a
// timestamped directory, an update a new directory and a rename of a new
// ..data over the old one. No event names a manifest; the swap of ..data
// alone must load the new content, at once (interval and rescan of an
// hour).
func TestWatchDirConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	at := func(name string) string { return filepath.Join(dir, name) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	next := watchUpdates(t, dir, time.Hour, time.Hour)
	if u := next(); !isEmptySnapshot(u.Snapshot) {
		t.Fatalf("empty directory: %+v", u)
	}
	update := func(ts, port string) {
		t.Helper()
		must(os.Mkdir(at(ts), 0o755))
		must(os.WriteFile(at(ts+"/bdeny.yaml"), []byte(wPolicy("networking.k8s.io/v1", "NetworkPolicy", "b-deny", port)), 0o644))
		must(os.Symlink(ts, at("..data_tmp")))
		must(os.Rename(at("..data_tmp"), at("..data")))
	}
	update("..2024_01_01_00_00_00.1", "80")
	must(os.Symlink("..data/bdeny.yaml", at("bdeny.yaml")))
	if u := next(); u.Err != nil || shape(u.Snapshot) != "NetworkPolicy x/b-deny port 80" {
		t.Fatalf("ConfigMap mounted: %s, %v", shape(u.Snapshot), u.Err)
	}
	for i, port := range []string{"81", "82", "83"} {
		old := fmt.Sprintf("..2024_01_01_00_00_00.%d", i+1)
		update(fmt.Sprintf("..2024_01_01_00_00_00.%d", i+2), port)
		u := next()
		if u.Err != nil || shape(u.Snapshot) != "NetworkPolicy x/b-deny port "+port {
			t.Fatalf("ConfigMap update %d: %s, %v", i, shape(u.Snapshot), u.Err)
		}
		must(os.RemoveAll(at(old)))
	}
}

// A directory removed is reported at once, keeping every object; created
// again, it is watched again (through its parent's watch) and loads.
func TestWatchDirRemovedAndRecreated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "manifests")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	replace(t, dir, "ns.yaml", nsDoc("a"))
	next := watchUpdates(t, dir, 20*time.Millisecond, time.Hour)
	if u := next(); u.Err != nil || names(u.Snapshot)[0] != "Namespace a" {
		t.Fatalf("start: %+v", u)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	u := next()
	for u.Err == nil && isEmptySnapshot(u.Snapshot) { // the files may go first
		u = next()
	}
	if !u.Unlisted || u.Snapshot == nil || names(u.Snapshot)[0] != "Namespace a" {
		t.Fatalf("removed: %+v, want every object kept and Unlisted", u)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	replace(t, dir, "ns.yaml", nsDoc("b"))
	for u = next(); u.Err != nil || isEmptySnapshot(u.Snapshot); u = next() {
	}
	if got := names(u.Snapshot); len(got) != 1 || got[0] != "Namespace b" {
		t.Fatalf("recreated: %v, want b", got)
	}
}

// BenchmarkWatchDirReplace times a file replace (write a temporary file,
// rename it over the old one) to the update that carries it, over 200
// changes, with inotify and with polling every 200 ms (WatchDir before
// inotify, and its fallback): p50 and p99 in ms.
//
//	go test -run '^$' -bench WatchDirReplace -benchtime 1x ./k8s/
func BenchmarkWatchDirReplace(b *testing.B) {
	const changes = 200
	for _, mode := range []struct {
		name  string
		start func(ctx context.Context, dir string) <-chan DirUpdate
	}{
		{"inotify", func(ctx context.Context, dir string) <-chan DirUpdate {
			return WatchDir(ctx, dir, 200*time.Millisecond, 10*time.Second)
		}},
		{"poll-200ms", func(ctx context.Context, dir string) <-chan DirUpdate {
			out := make(chan DirUpdate, 1)
			go pollDir(ctx, newDirWatcher(dir, 200*time.Millisecond), 200*time.Millisecond, nil, out)
			return out
		}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			for range b.N {
				dir := b.TempDir()
				// A few other files, as a real directory has.
				for i := range 10 {
					if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("other-%d.yaml", i)), []byte(nsDoc(fmt.Sprintf("other-%d", i))), 0o644); err != nil {
						b.Fatal(err)
					}
				}
				ctx, cancel := context.WithCancel(context.Background())
				updates := mode.start(ctx, dir)
				<-updates
				var lat []time.Duration
				for i := range changes {
					name := fmt.Sprintf("ns-%d", i)
					tmp := filepath.Join(dir, ".ns.yaml.tmp")
					if err := os.WriteFile(tmp, []byte(nsDoc(name)), 0o644); err != nil {
						b.Fatal(err)
					}
					start := time.Now()
					if err := os.Rename(tmp, filepath.Join(dir, "ns.yaml")); err != nil {
						b.Fatal(err)
					}
					for u := range updates {
						if slices.ContainsFunc(u.Snapshot.Namespaces, func(n *corev1.Namespace) bool { return n.Name == name }) {
							break
						}
					}
					lat = append(lat, time.Since(start))
				}
				cancel()
				for range updates {
				}
				slices.Sort(lat)
				ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
				b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
				b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
				b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
			}
		})
	}
}
