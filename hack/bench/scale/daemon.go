package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nftpolicy/nftpolicy/internal/testbin"
)

// A daemon is a running `nftpolicy run`.
type daemon struct {
	cmd         *exec.Cmd
	start       time.Time // just before the process started
	logPath     string
	healthAddr  string
	metricsAddr string
	hc          *http.Client

	done    chan struct{} // closed once the process has exited
	waitErr error         // its exit status, once done

	peak   atomic.Uint64 // largest VmRSS sampled, bytes
	peakAt atomic.Int64  // when it was sampled, nanoseconds after start
	// peakSince is the largest VmRSS sampled since resetPeakSince.
	peakSince atomic.Uint64
	stopOnce  sync.Once
	sampled   chan struct{} // closed once the sampler has stopped
}

// startDaemon starts bin run against kubeconfig in netns, its log to
// logPath, and samples its VmRSS every 100 ms until it exits.
func startDaemon(ctx context.Context, bin, logPath, kubeconfig, netns string, extra, env []string) (*daemon, error) {
	ports, err := testbin.FreePorts(2)
	if err != nil {
		return nil, err
	}
	d := &daemon{
		logPath:     logPath,
		healthAddr:  "127.0.0.1:" + strconv.Itoa(ports[0]),
		metricsAddr: "127.0.0.1:" + strconv.Itoa(ports[1]),
		hc:          &http.Client{Timeout: 10 * time.Second},
		done:        make(chan struct{}),
		sampled:     make(chan struct{}),
	}
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args := append([]string{"run", "--kubeconfig", kubeconfig, "--node", node, "--netns", netns,
		"--health-addr", d.healthAddr, "--metrics-addr", d.metricsAddr}, extra...)
	d.cmd = exec.Command(bin, args...)
	d.cmd.Env = append(os.Environ(), env...)
	d.cmd.Stdout, d.cmd.Stderr = log, log
	// Its own process group, and killed should this process die without
	// stopping it.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	d.start = time.Now()
	if err := testbin.StartLocked(d.cmd); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		d.waitErr = d.cmd.Wait()
		log.Close()
		close(d.done)
	}()
	go d.sample()
	return d, nil
}

// sample keeps the largest VmRSS, read every 100 ms, until the process
// exits.
func (d *daemon) sample() {
	defer close(d.sampled)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if rss, _, err := d.memory(); err == nil {
			if rss > d.peak.Load() {
				d.peak.Store(rss)
				d.peakAt.Store(int64(time.Since(d.start)))
			}
			if rss > d.peakSince.Load() {
				d.peakSince.Store(rss)
			}
		}
		select {
		case <-d.done:
			return
		case <-tick.C:
		}
	}
}

func (d *daemon) peakRSS() uint64 { return d.peak.Load() }

// resetPeakSince starts a new largest VmRSS for peakRSSSince.
func (d *daemon) resetPeakSince() { d.peakSince.Store(0) }

// peakRSSSince is the largest VmRSS sampled since resetPeakSince.
func (d *daemon) peakRSSSince() uint64 { return d.peakSince.Load() }

// peakRSSAt is when the largest VmRSS was sampled, after start.
func (d *daemon) peakRSSAt() time.Duration { return time.Duration(d.peakAt.Load()) }

// cpu returns the CPU time the process has used so far, user and system
// (/proc/PID/stat): on a machine where the API server shares the cores,
// a steadier measure of the daemon's own work than the time it takes.
func (d *daemon) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", d.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("daemon cpu: %w", err)
	}
	// The command may hold spaces and parentheses: the fields start after
	// the last ')'. utime and stime are fields 14 and 15, so the 12th and
	// 13th after it.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("daemon cpu: cannot read %q", b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("daemon cpu: cannot read %q", b)
	}
	var ticks uint64
	for _, v := range f[11:13] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("daemon cpu: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on
// every Linux architecture Go runs on.
const clockTicks = 100

// memory returns VmRSS and VmHWM of the process, in bytes.
func (d *daemon) memory() (rss, hwm uint64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		return 0, 0, fmt.Errorf("daemon memory: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		name, value, ok := strings.Cut(line, ":")
		if !ok || name != "VmRSS" && name != "VmHWM" {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("daemon memory: %s: %w", strings.TrimSpace(line), err)
		}
		if name == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	return rss, hwm, nil
}

// ready reports whether /readyz answers 200.
func (d *daemon) ready() bool {
	resp, err := d.hc.Get("http://" + d.healthAddr + "/readyz")
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// metrics returns the unlabelled samples of /metrics, by name.
func (d *daemon) metrics() (map[string]float64, error) {
	resp, err := d.hc.Get("http://" + d.metricsAddr + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("daemon metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("daemon metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.Contains(line, "{") {
			continue
		}
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

// cpuProfile writes a CPU profile of the daemon's next span (--profiling's
// /debug/pprof/profile) to path, asked for as soon as the metrics address
// answers.
func (d *daemon) cpuProfile(ctx context.Context, path string, span time.Duration) error {
	for {
		if _, err := d.metrics(); err == nil {
			break
		}
		if err := sleep(ctx, 2*time.Millisecond); err != nil {
			return err
		}
	}
	hc := &http.Client{Timeout: span + 30*time.Second}
	return saveProfile(hc, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", d.metricsAddr, int(span.Seconds())), path, "cpu profile")
}

// heapProfiles writes the daemon's heap profile (without a collection:
// each shows what the last one found live) to dir every period, from the
// moment its metrics address answers until ctx ends, as heap-NNN.pb.gz
// with NNN the tenths of a second since then.
func (d *daemon) heapProfiles(ctx context.Context, dir string, period time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for {
		if _, err := d.metrics(); err == nil {
			break
		}
		if err := sleep(ctx, 2*time.Millisecond); err != nil {
			return nil
		}
	}
	start := time.Now()
	for {
		name := filepath.Join(dir, fmt.Sprintf("heap-%03d.pb.gz", time.Since(start)/(100*time.Millisecond)))
		if err := saveProfile(d.hc, "http://"+d.metricsAddr+"/debug/pprof/heap", name, "heap profile"); err != nil && ctx.Err() == nil {
			return err
		}
		if err := sleep(ctx, period); err != nil {
			return nil
		}
	}
}

// heapProfile writes the daemon's heap profile (--profiling's
// /debug/pprof/heap, after a collection, so that it shows what is live)
// to path. The profile carries its symbols: it reads without the binary.
func (d *daemon) heapProfile(path string) error {
	return saveProfile(d.hc, "http://"+d.metricsAddr+"/debug/pprof/heap?gc=1", path, "heap profile")
}

// saveProfile writes what url (a /debug/pprof endpoint of --profiling)
// answers to path; what names the profile in errors.
func saveProfile(hc *http.Client, url, path, what string) error {
	resp, err := hc.Get(url)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s (is --profiling a flag of this nftpolicy?)", what, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", what, err)
	}
	return f.Close()
}

// Exited returns an error if the process has exited.
func (d *daemon) Exited() error {
	select {
	case <-d.done:
		return fmt.Errorf("%w: %v; log tail:\n%s", errExited, d.waitErr, testbin.Tail(d.logPath, 20))
	default:
		return nil
	}
}

// Stop ends the daemon: SIGTERM, then SIGKILL to its process group after
// 10 s.
func (d *daemon) Stop() {
	d.stopOnce.Do(func() {
		select {
		case <-d.done:
		default:
			d.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-d.done:
			case <-time.After(10 * time.Second):
				syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
				<-d.done
			}
		}
		<-d.sampled
	})
}

// waitStarted waits until the daemon has programmed its first table and
// answers /readyz with 200, and records both times from its start and the
// bytes it had read from the API server when ready.
func waitStarted(ctx context.Context, d *daemon, k *kernel, p *proxy, timeout time.Duration, out io.Writer, res *results) error {
	ready := make(chan time.Time, 1)
	readyCtx, stopReady := context.WithCancel(ctx)
	defer stopReady()
	go func() {
		for readyCtx.Err() == nil {
			if d.ready() {
				ready <- time.Now()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	gen, err := k.generation()
	if err != nil {
		return err
	}
	deadline := d.start.Add(timeout)
	nextNote := time.Now().Add(30 * time.Second)
	programmed, isReady := false, false
	for !programmed || !isReady {
		select {
		case at := <-ready:
			isReady = true
			res.rxReady = p.Received()
			res.toReady = at.Sub(d.start)
			fmt.Fprintf(out, "ready: /readyz 200 %s after start; %s MB from the API server until then\n", seconds(res.toReady), mb(uint64(res.rxReady)))
		default:
		}
		if !programmed {
			g, err := k.generation()
			if err != nil {
				return err
			}
			if g != gen {
				at := time.Now()
				gen = g
				if programmed, err = k.hasTable(); err != nil {
					return err
				} else if programmed {
					res.toProgrammed = at.Sub(d.start)
					cpu, err := d.cpu()
					if err != nil {
						return err
					}
					res.cpuProgrammed = cpu
					fmt.Fprintf(out, "programmed: table inet %s with content %s after start, with %s of the daemon's CPU\n", tableName, seconds(res.toProgrammed), seconds(cpu))
				}
			}
		}
		if err := d.Exited(); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		now := time.Now()
		if now.After(deadline) {
			return fmt.Errorf("the daemon is not ready %v after start (programmed: %v); log tail:\n%s", timeout, programmed, testbin.Tail(d.logPath, 20))
		}
		if now.After(nextNote) {
			rss, _, _ := d.memory()
			fmt.Fprintf(out, "waiting: %s after start, rss %s MB, %s MB from the API server\n", now.Sub(d.start).Round(time.Second), mb(rss), mb(uint64(p.Received())))
			nextNote = now.Add(30 * time.Second)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// printDaemonProblems prints the warnings and errors the daemon logged
// (the console encoder's level field: "\twarn\t", "\terror\t").
func printDaemonProblems(out io.Writer, logPath string) {
	b, err := os.ReadFile(logPath)
	if err != nil {
		fmt.Fprintf(out, "daemon log: %v\n", err)
		return
	}
	var problems []string
	for line := range strings.Lines(string(b)) {
		if strings.Contains(line, "\twarn\t") || strings.Contains(line, "\terror\t") || strings.Contains(line, "\tpanic\t") || strings.HasPrefix(line, "panic:") {
			problems = append(problems, strings.TrimRight(line, "\n"))
		}
	}
	fmt.Fprintf(out, "daemon log: %d lines, %d warnings or errors\n", bytes.Count(b, []byte("\n")), len(problems))
	for i, line := range problems {
		if i == 10 {
			fmt.Fprintf(out, "  … %d more\n", len(problems)-i)
			break
		}
		if len(line) > 400 {
			line = line[:400] + "…"
		}
		fmt.Fprintf(out, "  %s\n", line)
	}
}

// writeKubeconfig writes a kubeconfig for server, trusting the CA in
// caFile, authenticated with token.
func writeKubeconfig(path, server, caFile, token string) error {
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: bench
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: bench
  user:
    token: %s
contexts:
- name: bench
  context: {cluster: bench, user: bench}
current-context: bench
`, server, caFile, token)
	return os.WriteFile(path, []byte(kc), 0o600)
}

// A proxy passes TCP connections through to the API server, TLS and all,
// and counts the bytes each way.
type proxy struct {
	ln     net.Listener
	target string
	rx, tx atomic.Int64 // from the API server, to it

	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
	wg     sync.WaitGroup
}

func startProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is host:port to connect to.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

// Received is the bytes the API server sent through the proxy so far.
func (p *proxy) Received() int64 { return p.rx.Load() }

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, up) {
			return
		}
		p.wg.Add(2)
		go p.pipe(up, c, &p.rx)
		go p.pipe(c, up, &p.tx)
	}
}

// track registers a connection pair, false once the proxy is closed.
func (p *proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = true
	}
	return true
}

// pipe copies from src to dst, counting, until either end closes; then it
// closes both, so the other direction ends too.
func (p *proxy) pipe(src, dst net.Conn, n *atomic.Int64) {
	defer p.wg.Done()
	buf := make([]byte, 256<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			n.Add(int64(k))
			if _, werr := dst.Write(buf[:k]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	src.Close()
	dst.Close()
	p.mu.Lock()
	delete(p.conns, src)
	delete(p.conns, dst)
	p.mu.Unlock()
}

// Close stops accepting, closes every connection and waits for the
// copies to end.
func (p *proxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}
