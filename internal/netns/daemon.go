package netns

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nftpolicy/nftpolicy/internal/testbin"
)

// DaemonOptions configure StartDaemons.
type DaemonOptions struct {
	// Binary is the path of a prebuilt nftpolicy. Default: testbin.Path,
	// $NFTPOLICY_BIN or one built once per process.
	Binary string
	// Args are extra flags for `nftpolicy run`, e.g. "--priority", "-10".
	Args []string
	// SyncTimeout bounds every wait for a sync. Default 20s.
	SyncTimeout time.Duration
}

// Daemons are one `nftpolicy run` per node of a cluster, all following one
// manifests directory, as a DaemonSet would: each programs its node's
// namespace with the ruleset of that node's pods, so egress is enforced on
// the source node and ingress on the destination node.
//
// Changes go through WriteFile and RemoveFile (or Change), which return once
// every daemon has programmed them: each daemon's /readyz reports "synced
// generation N", N counting syncs, one per change of the directory's
// content, and a change is programmed when every N has grown. Nothing sleeps.
type Daemons struct {
	dir     string
	timeout time.Duration
	procs   []*daemon

	mu sync.Mutex // serializes changes: one change, one generation
}

type daemon struct {
	node *Node
	*testbin.Daemon
}

// StartDaemons starts `nftpolicy run --manifests dir --node N --netns NS` for
// every node N of c (the processes run in the caller's namespace and program
// the node's namespace over netlink) and returns once each has synced the
// directory's current content. Stop, or the cluster's end, stops them.
func (c *Cluster) StartDaemons(dir string, opts DaemonOptions) (*Daemons, error) {
	if opts.SyncTimeout <= 0 {
		opts.SyncTimeout = 20 * time.Second
	}
	bin := opts.Binary
	if bin == "" {
		var err error
		if bin, err = testbin.Path(); err != nil {
			return nil, err
		}
	}
	d := &Daemons{dir: dir, timeout: opts.SyncTimeout}
	for _, n := range c.Nodes() {
		args := append([]string{"--manifests", dir, "--node", n.Name(), "--netns", n.NetnsPath()}, opts.Args...)
		p, err := testbin.StartDaemon(bin, args...)
		if err != nil {
			d.Stop()
			return nil, fmt.Errorf("nftpolicy for %s: %w", n.Name(), err)
		}
		d.procs = append(d.procs, &daemon{node: n, Daemon: p})
	}
	c.mu.Lock()
	c.daemons = append(c.daemons, d)
	c.mu.Unlock()
	if err := d.WaitSynced(make([]uint64, len(d.procs))); err != nil {
		d.Stop()
		return nil, err
	}
	return d, nil
}

// stop sends SIGTERM (the daemon leaves its table in place, and the
// namespace goes with the cluster) and kills it if it is not gone within a
// second.
func (p *daemon) stop() { _ = p.Stop(time.Second) }

// Dir is the manifests directory the daemons follow.
func (d *Daemons) Dir() string { return d.dir }

// Logs returns what the daemon of node has logged so far.
func (d *Daemons) Logs(node *Node) string {
	for _, p := range d.procs {
		if p.node == node {
			return p.Logs()
		}
	}
	return ""
}

// Stop stops every daemon. It is safe to call more than once.
func (d *Daemons) Stop() {
	for _, p := range d.procs {
		p.stop()
	}
}

// Kill kills every daemon with SIGKILL, as a crash or an OOM kill would:
// nothing of the daemon runs after it, and its table stays as it was.
func (d *Daemons) Kill() {
	for _, p := range d.procs {
		_ = p.Daemon.Kill()
	}
}

// generation returns the daemon's /readyz. A daemon that is not ready
// still reports the generation it last synced: a test that fixes a fault
// waits for the sync after that one, not for the first 200, which may come
// before the fix is programmed.
func (d *Daemons) generation(p *daemon) (testbin.Readyz, error) {
	r, err := p.Readyz()
	if err != nil {
		return r, fmt.Errorf("nftpolicy for %s: %w", p.node.Name(), err)
	}
	return r, nil
}

// Generations returns every daemon's synced generation, in node order,
// ready or not. A /readyz that does not answer (a daemon starved of CPU on
// a busy machine) is asked again until DaemonOptions.SyncTimeout.
func (d *Daemons) Generations() ([]uint64, error) {
	deadline := time.Now().Add(d.timeout)
	gens := make([]uint64, len(d.procs))
	for i, p := range d.procs {
		for {
			r, err := d.generation(p)
			if err == nil {
				gens[i] = r.Generation
				break
			}
			if time.Now().After(deadline) || errors.Is(err, testbin.ErrExited) {
				return nil, err
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return gens, nil
}

// WaitSynced waits until every daemon is ready with a generation above
// after[i] (from Generations, taken before a change), polling /readyz every
// 10ms, for at most DaemonOptions.SyncTimeout.
func (d *Daemons) WaitSynced(after []uint64) error {
	deadline := time.Now().Add(d.timeout)
	for i, p := range d.procs {
		for {
			r, err := d.generation(p)
			if err == nil && r.Ready && r.Generation > after[i] {
				break
			}
			if time.Now().After(deadline) || errors.Is(err, testbin.ErrExited) {
				return fmt.Errorf("nftpolicy for %s did not sync past generation %d within %v (last /readyz %q, error %v); its log:\n%s",
					p.node.Name(), after[i], d.timeout, r.Body, err, tail(p.Logs(), 40))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// WaitUnready waits until every daemon's /readyz fails with a body that
// contains want (a file's name, a cause), for at most
// DaemonOptions.SyncTimeout, and returns the first daemon's body.
func (d *Daemons) WaitUnready(want string) (string, error) {
	deadline := time.Now().Add(d.timeout)
	var first string
	for i, p := range d.procs {
		for {
			r, err := d.generation(p)
			if err == nil && !r.Ready && strings.Contains(r.Body, want) {
				if i == 0 {
					first = r.Body
				}
				break
			}
			if time.Now().After(deadline) || errors.Is(err, testbin.ErrExited) {
				return "", fmt.Errorf("nftpolicy for %s did not turn unready naming %q within %v (last /readyz %q, error %v); its log:\n%s",
					p.node.Name(), want, d.timeout, r.Body, err, tail(p.Logs(), 40))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return first, nil
}

func tail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// Change runs f, which must change the content of the manifests directory
// in one step (or the daemons may sync a half-done change and report it),
// and returns once every daemon has synced after it.
func (d *Daemons) Change(f func() error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	before, err := d.Generations()
	if err != nil {
		return err
	}
	if err := f(); err != nil {
		return err
	}
	return d.WaitSynced(before)
}

// WriteFile writes content to name in the manifests directory atomically (a
// hidden temporary file, which the manifests source ignores, renamed over
// it) and waits until every daemon has programmed it. Writing what the file
// already holds changes nothing and returns at once.
func (d *Daemons) WriteFile(name, content string) error {
	path := filepath.Join(d.dir, name)
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, []byte(content)) {
		return nil
	}
	return d.Change(func() error { return WriteFileAtomic(path, []byte(content)) })
}

// RemoveFile removes name from the manifests directory and waits until every
// daemon has programmed that. Removing a file that does not exist changes
// nothing and returns at once.
func (d *Daemons) RemoveFile(name string) error {
	path := filepath.Join(d.dir, name)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return d.Change(func() error { return os.Remove(path) })
}

// WriteFileAtomic writes data to path through a temporary file in the same
// directory, named with a leading dot so that the manifests source never
// reads it, renamed over path: a reader sees the old content or the new,
// never a mix.
func WriteFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}
