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
	"strconv"
	"strings"
	"time"

	"github.com/nftpolicy/nftpolicy/internal/testbin"
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
}

func (t *tool) command(ctx context.Context, ns string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, t.path}, args...)...)
}

// nettoolPkg is nettool, relative to the module.
const nettoolPkg = "./internal/netns/cmd/nettool"

// nettool returns the prebuilt binary at path, or one built once per
// process (testbin.Command; static, CGO_ENABLED=0).
func nettool(path string) (*tool, error) {
	if path == "" {
		built, err := testbin.Command(nettoolPkg, "CGO_ENABLED=0")
		if err != nil {
			return nil, fmt.Errorf("netns: build nettool (or set %s): %w", NettoolEnv, err)
		}
		return &tool{path: built}, nil
	}
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

// A server is a `nettool serve` running in a pod.
type server struct {
	proc  *testbin.Proc
	stdin *os.File // closing it makes nettool exit (--exit-on-eof)
	errb  *testbin.LockedBuffer
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
	s := &server{stdin: inW, errb: &testbin.LockedBuffer{}}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, s.errb
	s.proc, err = testbin.Start(cmd)
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("start nettool in %s: %w", ns, err)
	}

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
	_ = s.proc.WaitOrKill(time.Second)
}

func joinPorts(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}
