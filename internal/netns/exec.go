package netns

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// runCtx runs a command and returns its standard output; a failure names the
// command and carries its standard error.
func runCtx(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	return output(cmd, stdin)
}

func output(cmd *exec.Cmd, stdin []byte) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return stdout.Bytes(), fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, msg)
	}
	return stdout.Bytes(), nil
}

// A tool is a runnable nettool.
type tool struct {
	// path is what `ip netns exec` executes.
	path string
	// file, when set, is the open binary, passed to children as fd 3 and
	// executed as /proc/self/fd/3: the built binary is unlinked right after
	// the build, so no temporary file outlives the process however it ends.
	file *os.File
}

func (t *tool) command(ctx context.Context, ns string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, t.path}, args...)...)
	if t.file != nil {
		cmd.ExtraFiles = []*os.File{t.file}
	}
	return cmd
}

var (
	builtOnce sync.Once
	built     *tool
	builtErr  error
)

// nettool returns the prebuilt binary at path, or builds one (once per process).
func nettool(path string) (*tool, error) {
	if path != "" {
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, err
		}
		if fi, err := os.Stat(abs); err != nil {
			return nil, fmt.Errorf("netns: prebuilt nettool (Options.Nettool or $%s): %w", NettoolEnv, err)
		} else if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("netns: prebuilt nettool (Options.Nettool or $%s): %s is not an executable file", NettoolEnv, abs)
		}
		return &tool{path: abs}, nil
	}
	builtOnce.Do(func() { built, builtErr = buildNettool() })
	return built, builtErr
}

const nettoolPkg = "github.com/nftpolicy/nftpolicy/internal/netns/cmd/nettool"

func buildNettool() (*tool, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("netns: building nettool needs the go command (or set %s): %w", NettoolEnv, err)
	}
	dir, err := os.MkdirTemp("", "nettool-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "nettool")
	cmd := exec.Command(goBin, "build", "-o", out, nettoolPkg)
	// Build from this package's source directory when it is there, so the
	// import path resolves in this module whatever the caller's directory.
	if _, file, _, ok := runtime.Caller(0); ok {
		if fi, err := os.Stat(filepath.Dir(file)); err == nil && fi.IsDir() {
			cmd.Dir = filepath.Dir(file)
		}
	}
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if _, err := output(cmd, nil); err != nil {
		return nil, fmt.Errorf("netns: build nettool: %w", err)
	}
	f, err := os.Open(out)
	if err != nil {
		return nil, err
	}
	return &tool{path: "/proc/self/fd/3", file: f}, nil
}

// A server is a `nettool serve` running in a pod.
type server struct {
	cmd   *exec.Cmd
	stdin *os.File // closing it makes nettool exit (--exit-on-eof)
	errb  *lockedBuffer
	done  chan struct{}
}

const readyTimeout = 10 * time.Second

// startServer starts nettool serve in ns and waits until it says "ready",
// i.e. every listener is bound.
func (c *Cluster) startServer(ns string) (*server, error) {
	args := []string{"serve", "--exit-on-eof",
		"--tcp", joinPorts(c.opts.TCPPorts), "--udp", joinPorts(c.opts.UDPPorts)}
	cmd := c.tool.command(context.Background(), ns, args...)
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	s := &server{cmd: cmd, stdin: inW, errb: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, s.errb
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("start nettool in %s: %w", ns, err)
	}
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()

	ready := make(chan error, 1)
	go func() {
		defer outR.Close()
		br := bufio.NewReader(outR)
		line, err := br.ReadString('\n')
		if strings.TrimSpace(line) == "ready" {
			ready <- nil
		} else {
			ready <- fmt.Errorf("read %q: %v", line, err)
		}
		// Keep draining so that the server never blocks on a full pipe.
		_, _ = br.WriteTo(io.Discard)
	}()
	select {
	case err = <-ready:
	case <-time.After(readyTimeout):
		err = fmt.Errorf("not ready after %v", readyTimeout)
	}
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("nettool serve in %s: %w: %s", ns, err, strings.TrimSpace(s.errb.String()))
	}
	return s, nil
}

// stop asks the server to exit by closing its stdin, and kills it if it does
// not within a second.
func (s *server) stop() {
	s.stdin.Close()
	select {
	case <-s.done:
		return
	case <-time.After(time.Second):
	}
	_ = s.cmd.Process.Kill()
	<-s.done
}

func joinPorts(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
