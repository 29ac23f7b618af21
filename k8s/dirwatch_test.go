package k8s

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestWatchDirReportsContentChanges(t *testing.T) {
	dir := t.TempDir()
	ns := func(name string) string {
		return "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + name + "\n"
	}
	// Written whole and renamed into place, as editors and ConfigMap
	// updates do: the poller must never see a half-written file (it once
	// caught os.WriteFile's truncation and read an empty directory).
	write := func(content string) {
		tmp := filepath.Join(dir, ".ns.yaml.tmp")
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "ns.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	write(ns("a"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	updates := WatchDir(ctx, dir, 10*time.Millisecond)

	next := func() DirUpdate {
		t.Helper()
		select {
		case u := <-updates:
			return u
		case <-time.After(5 * time.Second):
			t.Fatal("no update within 5s")
		}
		return DirUpdate{}
	}
	if u := next(); u.Err != nil || len(u.Snapshot.Namespaces) != 1 || u.Snapshot.Namespaces[0].Name != "a" {
		t.Fatalf("first update = %+v", u)
	}
	write(ns("a")) // same bytes, new mtime: no reload
	write(ns("b"))
	if u := next(); u.Err != nil || len(u.Snapshot.Namespaces) != 1 || u.Snapshot.Namespaces[0].Name != "b" {
		t.Fatalf("update after change = %+v", u)
	}
	select {
	case u := <-updates:
		t.Fatalf("unexpected update without a change: %+v", u)
	case <-time.After(100 * time.Millisecond):
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	// RemoveAll empties the directory before removing it: a poll in
	// between may report the empty directory first.
	u := next()
	if u.Err == nil && u.Snapshot != nil && len(u.Snapshot.Namespaces) == 0 {
		u = next()
	}
	if u.Err == nil {
		t.Fatalf("removed directory reported no error: %+v", u)
	}
	cancel()
	for range updates { // the channel closes when the context ends
	}
}

// A watchDir drives a dirWatcher one poll at a time, so that tests say
// which poll sees what without any clock.
type watchDir struct {
	t   *testing.T
	dir string
	w   *dirWatcher
}

func newWatchDir(t *testing.T) *watchDir {
	dir := t.TempDir()
	return &watchDir{t: t, dir: dir, w: newDirWatcher(dir, time.Second)}
}

// write replaces name in place, not atomically, as a slow writer would.
func (d *watchDir) write(name, content string) {
	d.t.Helper()
	if err := os.WriteFile(filepath.Join(d.dir, name), []byte(content), 0o644); err != nil {
		d.t.Fatal(err)
	}
}

// poll polls once and returns the update sent, or nil.
func (d *watchDir) poll() *DirUpdate {
	u, ok := d.w.tick()
	if !ok {
		return nil
	}
	return &u
}

// settle polls until an update is sent (at most three polls) and returns it.
func (d *watchDir) settle() DirUpdate {
	d.t.Helper()
	for range 3 {
		if u := d.poll(); u != nil {
			return *u
		}
	}
	d.t.Fatal("no update after three polls of an unchanging directory")
	return DirUpdate{}
}

func nsDoc(name string) string {
	return "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + name + "\n"
}

// allowFromY is a policy whose from list, cut short after "from:", reads as
// null: every peer.
const allowFromY = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: x, name: allow-from-y}
spec:
  podSelector: {}
  ingress:
  - from:
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: "y"}}
`

// A change is loaded only once two polls in a row read the same content: a
// file caught half-written (here, a from list cut short, which allows every
// peer) is never loaded.
func TestWatchDirLoadsOnlyStableContent(t *testing.T) {
	d := newWatchDir(t)
	d.write("ns.yaml", nsDoc("x"))
	if u := d.poll(); u != nil {
		t.Fatalf("first poll loaded before a second one confirmed the content: %+v", u)
	}
	if u := d.poll(); u == nil || u.Err != nil || len(u.Snapshot.Namespaces) != 1 {
		t.Fatalf("second poll of the same content: %+v, want it loaded", u)
	}

	half := allowFromY[:strings.Index(allowFromY, "from:")+len("from:")] + "\n"
	d.write("policy.yaml", half)
	if u := d.poll(); u != nil {
		t.Fatalf("half-written file loaded at once: %+v", u.Snapshot.Policies)
	}
	d.write("policy.yaml", allowFromY)
	if u := d.poll(); u != nil {
		t.Fatalf("content that changed since the previous poll loaded: %+v", u.Snapshot.Policies)
	}
	u := d.poll()
	if u == nil || u.Err != nil || len(u.Snapshot.Policies) != 1 || u.Snapshot.Policies[0].Spec.Ingress[0].From == nil {
		t.Fatalf("completed policy: %+v, want it loaded with its from list", u)
	}
	if u := d.poll(); u != nil {
		t.Fatalf("update without a change: %+v", u)
	}
}

// Each file keeps its own last good state: a file that stops parsing or
// cannot be read keeps the objects it had, Err names it, and the other
// files keep updating. A removed file drops its objects.
func TestWatchDirKeepsLastGoodPerFile(t *testing.T) {
	d := newWatchDir(t)
	d.write("a.yaml", nsDoc("a"))
	d.write("b.yaml", nsDoc("b1"))
	namesOf := func(u DirUpdate) string { return strings.Join(names(u.Snapshot), ",") }
	if u := d.settle(); u.Err != nil || namesOf(u) != "Namespace a,Namespace b1" {
		t.Fatalf("start: %v, %v", namesOf(u), u.Err)
	}

	for _, tc := range []struct {
		name    string
		change  func()
		want    string // objects
		wantErr string // in Err, "" for none
	}{
		{"a stops parsing", func() { d.write("a.yaml", nsDoc("a2")+"  labels: {x: [\n") },
			"Namespace a,Namespace b1", filepath.Join(d.dir, "a.yaml") + " doc 0: invalid YAML"},
		{"b still updates", func() { d.write("b.yaml", nsDoc("b2")) },
			"Namespace a,Namespace b2", "a.yaml doc 0: invalid YAML"},
		{"a parses again", func() { d.write("a.yaml", nsDoc("a3")) },
			"Namespace a3,Namespace b2", ""},
		{"a becomes a dangling link", func() {
			os.Remove(filepath.Join(d.dir, "a.yaml"))
			os.Symlink("missing.yaml", filepath.Join(d.dir, "a.yaml"))
		}, "Namespace a3,Namespace b2", filepath.Join(d.dir, "a.yaml") + ": no such file or directory"},
		{"a link loop next to it", func() { os.Symlink("loop.yaml", filepath.Join(d.dir, "loop.yaml")) },
			"Namespace a3,Namespace b2", filepath.Join(d.dir, "loop.yaml") + ": too many levels of symbolic links"},
		{"b still updates past both", func() { d.write("b.yaml", nsDoc("b3")) },
			"Namespace a3,Namespace b3", "loop.yaml"},
		{"removed files drop their objects", func() {
			os.Remove(filepath.Join(d.dir, "a.yaml"))
			os.Remove(filepath.Join(d.dir, "loop.yaml"))
		}, "Namespace b3", ""},
		{"a new file that never parsed gives what it can", func() { d.write("c.yaml", nsDoc("c")+"---\n"+"kind: [\n") },
			"Namespace b3,Namespace c", ""},
		{"the directory is removed: everything is kept", func() { os.RemoveAll(d.dir) },
			"Namespace b3,Namespace c", d.dir + ": no such file or directory; keeping every object"},
		{"recreated empty: holds nothing", func() { os.Mkdir(d.dir, 0o755) }, "", ""},
	} {
		tc.change()
		u := d.settle()
		if got := namesOf(u); got != tc.want {
			t.Errorf("%s: objects %q, want %q", tc.name, got, tc.want)
		}
		switch {
		case tc.wantErr == "" && u.Err != nil:
			t.Errorf("%s: Err %v, want none", tc.name, u.Err)
		case tc.wantErr != "" && (u.Err == nil || !strings.Contains(u.Err.Error(), tc.wantErr)):
			t.Errorf("%s: Err %v, want %q", tc.name, u.Err, tc.wantErr)
		}
	}
}

// An error is sent again while it lasts, after 1, 2, 4, ... polls, and an
// unchanged snapshot is the same pointer.
func TestWatchDirRepeatsErrorsWithBackoff(t *testing.T) {
	d := newWatchDir(t)
	d.w.maxWait = 4
	d.write("a.yaml", nsDoc("a"))
	first := d.settle()
	if err := os.Symlink("missing", filepath.Join(d.dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	u := d.settle()
	if u.Err == nil || u.Snapshot != first.Snapshot {
		t.Fatalf("dangling link: Err %v, same snapshot %v", u.Err, u.Snapshot == first.Snapshot)
	}
	var sentAt []int
	for i := 1; i <= 16; i++ {
		if u := d.poll(); u != nil {
			if u.Err == nil || u.Snapshot != first.Snapshot {
				t.Fatalf("repeat: %+v", u)
			}
			sentAt = append(sentAt, i)
		}
	}
	if diff := cmp.Diff([]int{1, 3, 7, 11, 15}, sentAt); diff != "" {
		t.Errorf("polls that repeated the error (-want +got):\n%s", diff)
	}
	os.Remove(filepath.Join(d.dir, "b.yaml"))
	if u := d.settle(); u.Err != nil {
		t.Errorf("after the link is removed: %v", u.Err)
	}
	if u := d.poll(); u != nil {
		t.Errorf("no error and no change, but an update: %+v", u)
	}
}

func TestWatchDirRefusesNonPositiveInterval(t *testing.T) {
	for _, interval := range []time.Duration{0, -time.Second} {
		var got []DirUpdate
		for u := range WatchDir(context.Background(), t.TempDir(), interval) {
			got = append(got, u)
		}
		if len(got) != 1 || got[0].Err == nil || !strings.Contains(got[0].Err.Error(), "not positive") {
			t.Errorf("interval %v: %+v, want one update with an error", interval, got)
		}
	}
}
