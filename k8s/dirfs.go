package k8s

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
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
	return f, nil
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
