package k8s

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Opening a manifest that turned into a FIFO (swapped in after its type
// was checked) fails at once instead of blocking the watcher until someone
// writes to it.
func TestManifestDirNeverBlocksOnAFIFO(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "p.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ok.yaml"), []byte("kind: Namespace\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		f, err := manifestDir(dir).Open("p.yaml")
		if err == nil {
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, errNotRegular) {
			t.Errorf("open of a FIFO: %v, want errNotRegular", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("open of a FIFO blocked")
	}
	if f, err := manifestDir(dir).Open("ok.yaml"); err != nil {
		t.Errorf("open of a regular file: %v", err)
	} else {
		f.Close()
	}
}

// A file that never ends (a pipe-like /proc file linked in) or that is
// too large is an error, never a watcher stuck reading or a heap the size
// of the file.
func TestManifestDirBoundsReads(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, maxManifestSize+1); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.ReadFile(manifestDir(dir), "big.yaml"); !errors.Is(err, errTooLarge) {
		t.Errorf("a file over the limit: %v, want errTooLarge", err)
	}
	// /proc/kmsg stats as a regular file but reads like a pipe that never
	// ends (reading it here would take the host's kernel log): a pipe
	// stands in for it, bounded as Open bounds every file.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	f := bounded(r, "pipe", 100*time.Millisecond)
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(f); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("reading a file that never ends: %v, want a deadline error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("reading a file that never ends blocked")
	}
}
