package k8s

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
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
