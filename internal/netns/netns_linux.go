package netns

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// inNetns runs f on an OS thread switched into the network namespace at path.
// Sockets f creates belong to that namespace for their whole life.
//
// f runs on a goroutine of its own that locks its thread and never unlocks
// it: when the goroutine ends the runtime destroys the thread (Go 1.10+), so
// no thread in a foreign namespace ever returns to the scheduler, even if f
// panics or switching back would have failed. Threads the runtime starts
// meanwhile come from its template thread and stay in the original namespace.
func inNetns(path string, f func()) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("open %s: %w", path, err)
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			errc <- fmt.Errorf("setns %s: %w", path, err)
			return
		}
		defer func() { errc <- nil }()
		f()
	}()
	return <-errc
}

// Do runs f on an OS thread switched into the network namespace at path
// (see inNetns): sockets f opens stay in that namespace.
func Do(path string, f func() error) error {
	var ferr error
	if err := inNetns(path, func() { ferr = f() }); err != nil {
		return err
	}
	return ferr
}
