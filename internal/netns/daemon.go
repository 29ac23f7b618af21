package netns

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// NftpolicyEnv names the environment variable that may hold the path of a
// prebuilt nftpolicy binary; when it is empty StartDaemons builds one.
const NftpolicyEnv = "NFTPOLICY_BIN"

// DaemonOptions configure StartDaemons.
type DaemonOptions struct {
	// Binary is the path of a prebuilt nftpolicy. Default: $NFTPOLICY_BIN,
	// else built once per process with `go build ./cmd/nftpolicy`.
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
	client  *http.Client

	mu sync.Mutex // serializes changes: one change, one generation
}

type daemon struct {
	node   *Node
	cmd    *exec.Cmd
	addr   string // health address, host:port on the caller's loopback
	logs   *lockedBuffer
	done   chan struct{}
	waitEr error
}

// StartDaemons starts `nftpolicy run --manifests dir --node N --netns NS` for
// every node N of c (the processes run in the caller's namespace and program
// the node's namespace over netlink) and returns once each has synced the
// directory's current content. Stop, or the cluster's end, stops them.
func (c *Cluster) StartDaemons(dir string, opts DaemonOptions) (*Daemons, error) {
	if opts.SyncTimeout <= 0 {
		opts.SyncTimeout = 20 * time.Second
	}
	bin, err := nftpolicyBinary(opts.Binary)
	if err != nil {
		return nil, err
	}
	d := &Daemons{dir: dir, timeout: opts.SyncTimeout, client: &http.Client{Timeout: 2 * time.Second}}
	for _, n := range c.Nodes() {
		p, err := startDaemon(bin, n, dir, opts)
		if err != nil {
			d.Stop()
			return nil, err
		}
		d.procs = append(d.procs, p)
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

// healthAddrRE finds the address in the daemon's "serving health" log line
// (zap console encoding: `... serving health	{"addr": "127.0.0.1:40123"}`).
var healthAddrRE = regexp.MustCompile(`serving health\s+\{"addr": "([^"]+)"`)

func startDaemon(bin *tool, n *Node, dir string, opts DaemonOptions) (*daemon, error) {
	args := append([]string{"run", "--manifests", dir, "--node", n.Name(), "--netns", n.NetnsPath(),
		"--health-addr", "127.0.0.1:0"}, opts.Args...)
	cmd := exec.Command(bin.path, args...)
	if bin.file != nil {
		cmd.ExtraFiles = []*os.File{bin.file}
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	p := &daemon{node: n, cmd: cmd, logs: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout = p.logs
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start nftpolicy for %s: %w", n.Name(), err)
	}
	addrc := make(chan string, 1)
	go func() {
		br := bufio.NewReader(stderr)
		found := false
		for {
			line, err := br.ReadString('\n')
			p.logs.Write([]byte(line))
			if m := healthAddrRE.FindStringSubmatch(line); m != nil && !found {
				found = true
				addrc <- m[1]
			}
			if err != nil {
				break
			}
		}
		p.waitEr = cmd.Wait()
		close(p.done)
	}()
	select {
	case p.addr = <-addrc:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("nftpolicy for %s exited: %v\n%s", n.Name(), p.waitEr, p.logs.String())
	case <-time.After(opts.SyncTimeout):
		p.stop()
		return nil, fmt.Errorf("nftpolicy for %s: no health address after %v\n%s", n.Name(), opts.SyncTimeout, p.logs.String())
	}
}

// stop sends SIGTERM (the daemon leaves its table in place, and the
// namespace goes with the cluster) and kills it if it is not gone within a
// second.
func (p *daemon) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(time.Second):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Dir is the manifests directory the daemons follow.
func (d *Daemons) Dir() string { return d.dir }

// Logs returns what the daemon of node has logged so far.
func (d *Daemons) Logs(node *Node) string {
	for _, p := range d.procs {
		if p.node == node {
			return p.logs.String()
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
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// readyzRE finds the synced generation in a /readyz body, 200 or 503.
var readyzRE = regexp.MustCompile(`(?m)^synced generation (\d+)$`)

// generation returns the daemon's synced generation (0 before its first
// successful sync), whether /readyz said ready, and its body. A daemon that
// is not ready still reports the generation it last synced: a test that
// fixes a fault waits for the sync after that one, not for the first 200,
// which may come before the fix is programmed.
func (d *Daemons) generation(p *daemon) (gen uint64, ready bool, body string, err error) {
	select {
	case <-p.done:
		return 0, false, "", fmt.Errorf("nftpolicy for %s %w: %v", p.node.Name(), errExited, p.waitEr)
	default:
	}
	resp, err := d.client.Get("http://" + p.addr + "/readyz")
	if err != nil {
		return 0, false, "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false, "", err
	}
	body = strings.TrimSpace(string(raw))
	ready = resp.StatusCode == http.StatusOK
	m := readyzRE.FindStringSubmatch(body)
	if m == nil {
		if ready {
			return 0, false, body, fmt.Errorf("unexpected /readyz body %q", body)
		}
		return 0, false, body, nil
	}
	gen, err = strconv.ParseUint(m[1], 10, 64)
	return gen, ready, body, err
}

// Generations returns every daemon's synced generation, in node order,
// ready or not. A /readyz that does not answer (a daemon starved of CPU on
// a busy machine) is asked again until DaemonOptions.SyncTimeout.
func (d *Daemons) Generations() ([]uint64, error) {
	deadline := time.Now().Add(d.timeout)
	gens := make([]uint64, len(d.procs))
	for i, p := range d.procs {
		for {
			g, _, _, err := d.generation(p)
			if err == nil {
				gens[i] = g
				break
			}
			if time.Now().After(deadline) || errors.Is(err, errExited) {
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
			g, ready, body, err := d.generation(p)
			if err == nil && ready && g > after[i] {
				break
			}
			if time.Now().After(deadline) || errors.Is(err, errExited) {
				return fmt.Errorf("nftpolicy for %s did not sync past generation %d within %v (last /readyz %q, error %v); its log:\n%s",
					p.node.Name(), after[i], d.timeout, body, err, tail(p.logs.String(), 40))
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
			_, ready, body, err := d.generation(p)
			if err == nil && !ready && strings.Contains(body, want) {
				if i == 0 {
					first = body
				}
				break
			}
			if time.Now().After(deadline) || errors.Is(err, errExited) {
				return "", fmt.Errorf("nftpolicy for %s did not turn unready naming %q within %v (last /readyz %q, error %v); its log:\n%s",
					p.node.Name(), want, d.timeout, body, err, tail(p.logs.String(), 40))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return first, nil
}

var errExited = errors.New("exited")

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

var (
	nftpolicyOnce  sync.Once
	nftpolicyBuilt *tool
	nftpolicyErr   error
)

// nftpolicyBinary returns the prebuilt binary at path (or $NFTPOLICY_BIN), or
// builds one, once per process.
func nftpolicyBinary(path string) (*tool, error) {
	if path == "" {
		path = os.Getenv(NftpolicyEnv)
	}
	if path != "" {
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(abs); err != nil {
			return nil, fmt.Errorf("netns: prebuilt nftpolicy (DaemonOptions.Binary or $%s): %w", NftpolicyEnv, err)
		}
		return &tool{path: abs}, nil
	}
	nftpolicyOnce.Do(func() { nftpolicyBuilt, nftpolicyErr = buildNftpolicy() })
	return nftpolicyBuilt, nftpolicyErr
}

const nftpolicyPkg = "github.com/nftpolicy/nftpolicy/cmd/nftpolicy"

// buildNftpolicy builds the daemon like buildNettool builds nettool: into a
// temporary directory removed at once, the binary kept open and run as
// /proc/self/fd/3.
func buildNftpolicy() (*tool, error) {
	dir, err := os.MkdirTemp("", "nftpolicy-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out, err := BuildNftpolicy(dir, "")
	if err != nil {
		return nil, err
	}
	f, err := os.Open(out)
	if err != nil {
		return nil, err
	}
	return &tool{path: "/proc/self/fd/3", file: f}, nil
}

// BuildNftpolicy builds the daemon into dir with the linker flags ldflags
// ("" for none; the tests of an upgrade build an older layout with -X, see
// enforcer.Layout) and returns the binary's path, for
// DaemonOptions.Binary.
func BuildNftpolicy(dir, ldflags string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("netns: building nftpolicy needs the go command (or set %s): %w", NftpolicyEnv, err)
	}
	out := filepath.Join(dir, "nftpolicy")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := []string{"build", "-o", out}
	if ldflags != "" {
		args = append(args, "-ldflags", ldflags)
	}
	cmd := exec.CommandContext(ctx, goBin, append(args, nftpolicyPkg)...)
	if _, file, _, ok := runtime.Caller(0); ok {
		if fi, err := os.Stat(filepath.Dir(file)); err == nil && fi.IsDir() {
			cmd.Dir = filepath.Dir(file)
		}
	}
	// The caller's environment as it is (no CGO_ENABLED=0): the packages
	// are then those `go test` and `go vet` already compiled, and the build
	// costs a link, not a cold compile of client-go.
	if _, err := output(cmd, nil); err != nil {
		return "", fmt.Errorf("netns: build nftpolicy: %w", err)
	}
	return out, nil
}
