package k8s

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// A notifier is an inotify instance watching a manifests directory, and
// the directory's parent for the directory's own entry (removed, created
// again, a link to it swapped), with an eventfd that wakes a wait.
//
// golang.org/x/sys/unix rather than fsnotify: the rules of WatchDir need
// IN_CLOSE_WRITE (fsnotify v1.10 reports only create, write, remove,
// rename and chmod; its close-write op is unexported), IN_Q_OVERFLOW as an
// event in order, and one watch per directory without a goroutine of its
// own.
type notifier struct {
	fd, wakefd int
	dir        string
	parent     string
	base       string // the directory's name in parent
	wd, pwd    int    // watch descriptors, -1 for none
	buf        []byte
}

// dirMask is what is watched in the directory. IN_EXCL_UNLINK (Linux
// 2.6.36): a writer still writing to a file that was replaced or removed
// is no longer that name's business.
const dirMask = unix.IN_CLOSE_WRITE | unix.IN_MODIFY | unix.IN_MOVED_TO | unix.IN_MOVED_FROM |
	unix.IN_CREATE | unix.IN_DELETE | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
	unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// parentMask is what is watched in the parent: entries only, not writes,
// so that a busy parent (/tmp) costs little.
const parentMask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_DELETE |
	unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

func newNotifier(dir string) (*notifier, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	wakefd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	return &notifier{
		fd: fd, wakefd: wakefd, dir: dir, parent: filepath.Dir(abs), base: filepath.Base(abs),
		wd: -1, pwd: -1, buf: make([]byte, 64<<10),
	}, nil
}

// watch (re)adds the watches and reports whether the directory is
// watched. A directory that is missing, or no directory, or not readable
// is not watched yet; any other failure (the limit of watches,
// fs.inotify.max_user_watches) is an error.
func (n *notifier) watch() (bool, error) {
	if n.pwd < 0 {
		if wd, err := unix.InotifyAddWatch(n.fd, n.parent, parentMask); err == nil {
			n.pwd = wd
		}
	}
	wd, err := unix.InotifyAddWatch(n.fd, n.dir, dirMask)
	if err != nil {
		n.drop()
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EACCES) {
			return false, nil
		}
		return false, fmt.Errorf("inotify_add_watch %s: %w", n.dir, err)
	}
	if wd != n.wd {
		// Another directory at that path now: forget the one before.
		n.drop()
		n.wd = wd
	}
	return true, nil
}

// drop removes the watch on the directory, if any.
func (n *notifier) drop() {
	if n.wd >= 0 && n.wd != n.pwd {
		unix.InotifyRmWatch(n.fd, uint32(n.wd))
	}
	n.wd = -1
}

// wait blocks until an event arrives, d passes, or wake is called.
func (n *notifier) wait(d time.Duration) {
	ms := int(math.Ceil(float64(d) / float64(time.Millisecond)))
	switch {
	case d <= 0:
		return
	case d > time.Hour:
		ms = int(time.Hour / time.Millisecond)
	}
	fds := []unix.PollFd{{Fd: int32(n.fd), Events: unix.POLLIN}, {Fd: int32(n.wakefd), Events: unix.POLLIN}}
	unix.Poll(fds, ms) // EINTR: the caller looks again
}

// wake ends a wait, now and for good.
func (n *notifier) wake() {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(n.wakefd, one[:])
}

// drain calls fn with every event that arrived, in order, without
// waiting.
func (n *notifier) drain(fn func(dirEvent)) {
	for {
		k, err := unix.Read(n.fd, n.buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || k <= 0 {
			return // EAGAIN: nothing more
		}
		for off := 0; off+unix.SizeofInotifyEvent <= k; {
			b := n.buf[off:]
			wd := int32(binary.NativeEndian.Uint32(b[0:]))
			mask := binary.NativeEndian.Uint32(b[4:])
			size := int(binary.NativeEndian.Uint32(b[12:]))
			name := string(bytes.TrimRight(b[unix.SizeofInotifyEvent:unix.SizeofInotifyEvent+size], "\x00"))
			off += unix.SizeofInotifyEvent + size
			n.translate(int(wd), mask, name, fn)
		}
	}
}

// eventOps maps inotify's bits on an entry to ours.
var eventOps = []struct {
	mask uint32
	op   eventOp
}{
	{unix.IN_MODIFY, opWrite},
	{unix.IN_CLOSE_WRITE, opClosed},
	{unix.IN_MOVED_TO, opMovedIn},
	{unix.IN_CREATE, opCreated},
	{unix.IN_DELETE, opRemoved},
	{unix.IN_MOVED_FROM, opRemoved},
	{unix.IN_ATTRIB, opAttrib},
}

func (n *notifier) translate(wd int, mask uint32, name string, fn func(dirEvent)) {
	switch {
	case mask&unix.IN_Q_OVERFLOW != 0:
		fn(dirEvent{op: opOverflow})
	case wd == n.wd && mask&(unix.IN_IGNORED|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_UNMOUNT) != 0:
		fn(dirEvent{op: opDirLost})
	case wd == n.wd:
		for _, o := range eventOps {
			if mask&o.mask != 0 {
				fn(dirEvent{op: o.op, name: name, isDir: mask&unix.IN_ISDIR != 0})
			}
		}
	case wd == n.pwd && mask&unix.IN_IGNORED != 0:
		n.pwd = -1 // the parent went: watch() tries again
		fn(dirEvent{op: opDirEntry})
	case wd == n.pwd && name == n.base:
		fn(dirEvent{op: opDirEntry})
	}
	// Anything else is of a watch dropped since.
}

func (n *notifier) close() {
	unix.Close(n.fd)
	unix.Close(n.wakefd)
}
