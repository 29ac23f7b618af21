package k8s

import (
	"context"
	"crypto/sha256"
	"io/fs"
	"os"
	"time"
)

// A DirUpdate is one load of a manifests directory after it changed.
type DirUpdate struct {
	Snapshot *Snapshot
	Errors   []*ObjectError
	Err      error // the directory could not be read; Snapshot is nil
}

// WatchDir loads dir now and again whenever the content of its manifest
// files changes, checking every interval, until ctx ends. Content, not
// modification time, decides: editors that rewrite a file with the same
// bytes cause no reload. Polling keeps this dependency-free and works on
// every filesystem, including ConfigMap volumes that swap symlinks.
func WatchDir(ctx context.Context, dir string, interval time.Duration) <-chan DirUpdate {
	out := make(chan DirUpdate, 1)
	go func() {
		defer close(out)
		var last [sha256.Size]byte
		var lastErr string
		first := true
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			sum, err := dirDigest(dir)
			errText := ""
			if err != nil {
				errText = err.Error()
			}
			// Report a change of content, or a new failure; not the same
			// failure at every tick.
			if first || sum != last || errText != lastErr {
				first, last, lastErr = false, sum, errText
				snap, objErrs, loadErr := LoadDir(dir)
				if err == nil {
					err = loadErr
				}
				select {
				case out <- DirUpdate{Snapshot: snap, Errors: objErrs, Err: err}:
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

// dirDigest hashes the names and contents of the files LoadDir would read.
func dirDigest(dir string) ([sha256.Size]byte, error) {
	fsys := os.DirFS(dir)
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	names, err := manifestFiles(fsys, entries)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	h := sha256.New()
	for _, n := range names { // fs.ReadDir sorts by name
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return [sha256.Size]byte{}, err
		}
		h.Write([]byte(n))
		h.Write([]byte{0})
		h.Write(b)
		h.Write([]byte{0})
	}
	var sum [sha256.Size]byte
	copy(sum[:], h.Sum(nil))
	return sum, nil
}
