package testbin

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A Daemon is one `nftpolicy run` process serving /readyz on Health.
type Daemon struct {
	*Proc
	// Health is the --health-addr it was given, host:port.
	Health string

	logs   LockedBuffer
	client *http.Client
}

// StartDaemon starts `bin run --health-addr ADDR args...`, ADDR a free port
// on 127.0.0.1 chosen here, with stdout and stderr kept for Logs. It does
// not wait for anything: Readyz fails until the daemon listens.
func StartDaemon(bin string, args ...string) (*Daemon, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	d := &Daemon{Health: addr, client: &http.Client{Timeout: 2 * time.Second}}
	cmd := exec.Command(bin, append([]string{"run", "--health-addr", addr}, args...)...)
	cmd.Stdout, cmd.Stderr = &d.logs, &d.logs
	if d.Proc, err = Start(cmd); err != nil {
		return nil, fmt.Errorf("start nftpolicy run: %w", err)
	}
	return d, nil
}

// FreeAddr returns 127.0.0.1:PORT for a TCP port that was free a moment
// ago: the kernel's pick for port 0, released for the caller to bind.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Logs returns what the daemon has written so far.
func (d *Daemon) Logs() string { return d.logs.String() }

// ErrExited is returned by Readyz once the daemon has exited.
var ErrExited = errors.New("nftpolicy exited")

// Readyz asks /readyz. It fails when the daemon has exited (ErrExited),
// does not answer (not listening yet, or starved of CPU), or answers
// something ParseReadyz does not read.
func (d *Daemon) Readyz() (Readyz, error) {
	if d.Exited() {
		return Readyz{}, fmt.Errorf("%w: %v", ErrExited, d.Wait())
	}
	resp, err := d.client.Get("http://" + d.Health + "/readyz")
	if err != nil {
		return Readyz{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return Readyz{}, err
	}
	return ParseReadyz(resp.StatusCode, string(body))
}

// Readyz is an answer of /readyz.
type Readyz struct {
	// Ready is a 200 answer.
	Ready bool
	// Generation is the number of successful syncs, from the last line,
	// "synced generation N"; 0 before the first. A daemon that is not
	// ready still reports the generation it last synced.
	Generation uint64
	// Body is the answer as it came, reasons first.
	Body string
}

// Reasons is the body without its generation line: why the daemon is not
// ready, "" when it is.
func (r Readyz) Reasons() string {
	body := strings.TrimSuffix(r.Body, "\n")
	if r.Generation == 0 {
		return body
	}
	i := strings.LastIndexByte(body, '\n')
	if i < 0 {
		return ""
	}
	return body[:i]
}

var generationLine = regexp.MustCompile(`^synced generation ([1-9][0-9]*)$`)

// ParseReadyz reads an answer of /readyz: 200 and the single line "synced
// generation N" (N ≥ 1), or 503 and one reason or more (each a line, or
// several), then "synced generation N" if a sync ever succeeded. Anything
// else is an error.
func ParseReadyz(status int, body string) (Readyz, error) {
	r := Readyz{Ready: status == http.StatusOK, Body: body}
	if status != http.StatusOK && status != http.StatusServiceUnavailable {
		return r, fmt.Errorf("/readyz answered %d: %q", status, body)
	}
	if !strings.HasSuffix(body, "\n") {
		return r, fmt.Errorf("/readyz %d: no final newline: %q", status, body)
	}
	lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
	if m := generationLine.FindStringSubmatch(lines[len(lines)-1]); m != nil {
		gen, err := strconv.ParseUint(m[1], 10, 64)
		if err != nil {
			return r, fmt.Errorf("/readyz %d: %q: %w", status, body, err)
		}
		r.Generation = gen
		lines = lines[:len(lines)-1]
	}
	switch {
	case r.Ready && (r.Generation == 0 || len(lines) > 0):
		return r, fmt.Errorf("/readyz 200 is not the single line \"synced generation N\": %q", body)
	case !r.Ready && (len(lines) == 0 || strings.TrimSpace(lines[0]) == ""):
		return r, fmt.Errorf("/readyz 503 gives no reason: %q", body)
	}
	return r, nil
}

// A LockedBuffer is a bytes.Buffer that a process's output goroutines and
// a test may use at once.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// FreePorts returns n distinct TCP ports free on 127.0.0.1 just now: all
// n are held open until every one is chosen, so none is handed out twice.
func FreePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Tail returns the last lines of the file at path, or the error reading
// it, for a failure message.
func Tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	parts := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return string(bytes.Join(parts, []byte("\n")))
}
