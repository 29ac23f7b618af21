package k8s

import (
	"errors"
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
