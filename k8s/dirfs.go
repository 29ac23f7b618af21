package k8s

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// manifestDir is os.DirFS of a manifests directory, but its Open never
// blocks: a name swapped for a FIFO between the check of its type and the
// read (a writer racing the watcher) would otherwise hang the read until
// someone opened the FIFO for writing, and every later change with it. It
// opens with O_NONBLOCK (which regular files ignore) and refuses, from the
// open file itself, anything but a regular file or a directory.
type manifestDir string

func (d manifestDir) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	f, err := os.OpenFile(d.path(name), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, relative(err, name)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() && !fi.IsDir() {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: name, Err: errNotRegular}
	}
	if fi.IsDir() {
		return f, nil
	}
	// Some "regular" files never end: /proc/kmsg, linked in, blocked the
	// watcher for good. A file the poller takes gets a deadline (a real
	// regular file refuses one and reads at disk speed), and no file is
	// read past maxManifestSize.
	if fi.Size() > maxManifestSize {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: name, Err: errTooLarge}
	}
	return bounded(f, name, manifestReadTimeout), nil
}

// bounded gives f a read deadline when the poller takes it (a real regular
// file refuses one) and caps what may be read of it.
func bounded(f *os.File, name string, timeout time.Duration) *cappedFile {
	_ = f.SetReadDeadline(time.Now().Add(timeout))
	return &cappedFile{File: f, name: name, left: maxManifestSize + 1}
}

// maxManifestSize bounds one manifest file: the largest test cluster (100k
// pods, 10k policies) is about 60 MB of YAML in all its files.
const maxManifestSize = 256 << 20

// manifestReadTimeout bounds reading a file that can be waited on.
const manifestReadTimeout = 10 * time.Second

var errTooLarge = fmt.Errorf("larger than %d MiB", maxManifestSize>>20)

// A cappedFile refuses to be read past maxManifestSize (a file that grows,
// or says it is empty as /proc files do): left starts one byte above it.
type cappedFile struct {
	*os.File
	name string
	left int64
}

func (f *cappedFile) Read(b []byte) (int, error) {
	if f.left <= 0 {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: errTooLarge}
	}
	if int64(len(b)) > f.left {
		b = b[:f.left]
	}
	n, err := f.File.Read(b)
	f.left -= int64(n)
	return n, err
}

// Stat is os.Stat (links followed), without opening anything.
func (d manifestDir) Stat(name string) (fs.FileInfo, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrInvalid}
	}
	fi, err := os.Stat(d.path(name))
	return fi, relative(err, name)
}

func (d manifestDir) path(name string) string {
	return filepath.Join(string(d), filepath.FromSlash(name))
}

// relative names the path of err as os.DirFS would: relative to the
// directory (see inDir).
func relative(err error, name string) error {
	if pe, ok := err.(*fs.PathError); ok {
		pe.Path = name
	}
	return err
}
