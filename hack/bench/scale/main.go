package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nftpolicy/nftpolicy/enforcer"
	"github.com/nftpolicy/nftpolicy/internal/apiserver"
	"github.com/nftpolicy/nftpolicy/internal/scale"
)

// node is the node under test, one of ClusterOnNodes's.
var node = scale.NodeName(0)

func main() { os.Exit(run()) }

type config struct {
	pods, policies, nodes, namespaces int
	events, parallel                  int
	bin, daemonArgs, daemonLog        string
	daemonEnv                         string
	heapProfile                       string
	gap, settle, readyTimeout         time.Duration
}

func run() int {
	var cfg config
	flag.IntVar(&cfg.pods, "pods", 10000, "pods in the cluster (rounded down to a multiple of -namespaces)")
	flag.IntVar(&cfg.policies, "policies", 1000, "NetworkPolicies in the cluster (rounded down to a multiple of -namespaces)")
	flag.IntVar(&cfg.nodes, "nodes", 100, "Nodes the pods are spread over; node-0 is the node under test")
	flag.IntVar(&cfg.namespaces, "namespaces", 0, "namespaces (default -policies/100: 100 policies a namespace)")
	flag.IntVar(&cfg.events, "events", 100, "events of each kind")
	flag.IntVar(&cfg.parallel, "parallel", 32, "parallel API clients creating the cluster")
	flag.StringVar(&cfg.bin, "bin", "", "a prebuilt nftpolicy binary (default: build ./cmd/nftpolicy into a temporary directory)")
	flag.StringVar(&cfg.daemonArgs, "daemon-args", "", "more flags for `nftpolicy run`, space-separated")
	flag.StringVar(&cfg.daemonEnv, "daemon-env", "", "more environment for `nftpolicy run`, space-separated KEY=VALUE: GOMEMLIMIT=410MiB is what a 512Mi container limit makes the daemon set itself (80%), which this machine's hybrid cgroups cannot show it")
	flag.StringVar(&cfg.daemonLog, "daemon-log", "", "write the daemon's log to this file and keep it (default: a temporary file)")
	flag.StringVar(&cfg.heapProfile, "heap-profile", "", "write a heap profile of the daemon, taken after the steady memory reading, to this file (runs the daemon with --profiling)")
	flag.DurationVar(&cfg.gap, "gap", enforcer.DefaultDebounce+100*time.Millisecond, "quiet before each event, from the kernel holding the previous one (more than the daemon's --debounce, so each event is synced on the leading edge)")
	flag.DurationVar(&cfg.settle, "settle", 10*time.Second, "from ready to the steady memory reading")
	flag.DurationVar(&cfg.readyTimeout, "ready-timeout", 30*time.Minute, "how long the daemon may take to be ready")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "scale: unexpected arguments %q\n", flag.Args())
		return 2
	}
	if cfg.namespaces == 0 {
		cfg.namespaces = max(1, cfg.policies/100)
	}
	switch {
	case cfg.namespaces < 1 || cfg.pods < cfg.namespaces || cfg.policies < cfg.namespaces:
		fmt.Fprintln(os.Stderr, "scale: -pods and -policies must be at least -namespaces, which must be at least 1")
		return 2
	case cfg.nodes < 2:
		fmt.Fprintln(os.Stderr, "scale: -nodes must be at least 2: events need pods on another node than the one under test")
		return 2
	case cfg.events < 1 || cfg.parallel < 1:
		fmt.Fprintln(os.Stderr, "scale: -events and -parallel must be at least 1")
		return 2
	}

	// An interrupt cancels ctx instead of killing the process, so that
	// the deferred clean-up (daemon, API server, netns) runs.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	err := bench(ctx, cfg, os.Stdout)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("interrupted (%w)", err)
		}
		fmt.Fprintln(os.Stderr, "scale:", err)
		return 1
	}
	fmt.Printf("end to end: %s\n", seconds(time.Since(start)))
	return 0
}

// results are what the summary line says, filled in as they are measured.
type results struct {
	pods, policies, nodes, namespaces, localPods int
	createTime                                   time.Duration
	createObjects                                int
	toProgrammed, toReady                        time.Duration
	rss, hwm, rssPeak, heapInuse, heapAlloc      uint64 // bytes
	rxReady, rxTotal                             int64
	metrics                                      map[string]float64 // the daemon's, at the steady reading
	events                                       []kindResult
}

func bench(ctx context.Context, cfg config, out io.Writer) error {
	perNSPods, perNSPolicies := cfg.pods/cfg.namespaces, cfg.policies/cfg.namespaces
	snap := scale.ClusterOnNodes(cfg.namespaces, perNSPods, perNSPolicies, cfg.nodes)
	res := &results{pods: len(snap.Pods), policies: len(snap.Policies), nodes: len(snap.Nodes), namespaces: len(snap.Namespaces)}
	for _, p := range snap.Pods {
		if p.Spec.NodeName == node {
			res.localPods++
		}
	}
	fmt.Fprintf(out, "cluster: %d namespaces, %d pods (%d on %s), %d policies, %d nodes\n",
		res.namespaces, res.pods, res.localPods, node, res.policies, res.nodes)
	plan, err := planEvents(snap, cfg.events)
	if err != nil {
		return err
	}

	work, err := os.MkdirTemp("", "nftbench-scale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	bin := cfg.bin
	if bin == "" {
		bin = filepath.Join(work, "nftpolicy")
		t := time.Now()
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/nftpolicy/nftpolicy/cmd/nftpolicy")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build nftpolicy (give a binary with -bin): %w", err)
		}
		fmt.Fprintf(out, "built %s in %s\n", bin, seconds(time.Since(t)))
	}

	t := time.Now()
	apiDir := filepath.Join(work, "apiserver")
	if err := os.Mkdir(apiDir, 0o700); err != nil {
		return err
	}
	srv, err := apiserver.Start(apiserver.Options{Dir: apiDir})
	if err != nil {
		return fmt.Errorf("start the API server: %w", err)
	}
	defer srv.Close()
	fmt.Fprintf(out, "API server %s ready in %s\n", srv.URL, seconds(time.Since(t)))
	client, err := newClient(srv)
	if err != nil {
		return err
	}

	if err := createCluster(ctx, srv, snap, cfg.parallel, out, res); err != nil {
		if ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("create the cluster: %w (kube-apiserver log tail:\n%s)", err, srv.LogTail("kube-apiserver.log", 20))
	}

	netns := fmt.Sprintf("nftbench-scale-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", netns).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns add %s: %v: %s", netns, err, out)
	}
	defer exec.Command("ip", "netns", "del", netns).Run()

	u, err := url.Parse(srv.URL)
	if err != nil {
		return err
	}
	proxy, err := startProxy(u.Host)
	if err != nil {
		return err
	}
	defer proxy.Close()
	kubeconfig := filepath.Join(work, "kubeconfig")
	if err := writeKubeconfig(kubeconfig, "https://"+proxy.Addr(), srv.CAFile, srv.AdminToken); err != nil {
		return err
	}
	k, err := openKernel(netns)
	if err != nil {
		return err
	}
	defer k.Close()

	logPath := cfg.daemonLog
	if logPath == "" {
		logPath = filepath.Join(work, "nftpolicy.log")
	}
	args := strings.Fields(cfg.daemonArgs)
	if cfg.heapProfile != "" {
		args = append(args, "--profiling")
	}
	d, err := startDaemon(ctx, bin, logPath, kubeconfig, netns, args, strings.Fields(cfg.daemonEnv))
	if err != nil {
		return err
	}
	defer func() {
		d.Stop()
		if cfg.daemonLog != "" {
			fmt.Fprintf(out, "daemon log: %s\n", cfg.daemonLog)
		}
	}()
	// Whatever happens next, what the daemon said is worth seeing.
	defer printDaemonProblems(out, logPath)

	if err := waitStarted(ctx, d, k, proxy, cfg.readyTimeout, out, res); err != nil {
		return err
	}
	if err := sleep(ctx, cfg.settle); err != nil {
		return err
	}
	if res.rss, _, err = d.memory(); err != nil {
		return err
	}
	if res.metrics, err = d.metrics(); err != nil {
		return err
	}
	res.heapInuse, res.heapAlloc = uint64(res.metrics["go_memstats_heap_inuse_bytes"]), uint64(res.metrics["go_memstats_heap_alloc_bytes"])
	fmt.Fprintf(out, "steady, %s after ready: rss %s MB, go heap in use %s MB (allocated %s MB); table: %.0f chains, %.0f rules, %.0f sets, %.0f elements\n",
		cfg.settle, mb(res.rss), mb(res.heapInuse), mb(res.heapAlloc),
		res.metrics["nftpolicy_programmed_chains"], res.metrics["nftpolicy_programmed_rules"],
		res.metrics["nftpolicy_programmed_sets"], res.metrics["nftpolicy_programmed_elements"])

	if cfg.heapProfile != "" {
		// After the readings above: the profile's gc=1 collects first.
		if err := d.heapProfile(cfg.heapProfile); err != nil {
			return err
		}
		fmt.Fprintf(out, "heap profile: %s (go tool pprof -sample_index=inuse_space %s)\n", cfg.heapProfile, cfg.heapProfile)
	}

	ev := &eventRunner{ctx: ctx, client: client, k: k, d: d, gap: cfg.gap, out: out}
	if res.events, err = ev.run(plan); err != nil {
		return err
	}

	if _, res.hwm, err = d.memory(); err != nil {
		return err
	}
	res.rssPeak = d.peakRSS()
	res.rxTotal = proxy.Received()
	fmt.Fprintf(out, "end: VmHWM %s MB, largest VmRSS sampled %s MB, from the API server %s MB in all\n", mb(res.hwm), mb(res.rssPeak), mb(uint64(res.rxTotal)))
	if err := d.Exited(); err != nil {
		return err
	}
	fmt.Fprintln(out, res.summary())
	return nil
}

// summary is the one line a run ends with: the fields the brief names
// first, in a stable order, then the others.
func (r *results) summary() string {
	var all []time.Duration
	for _, k := range r.events {
		all = append(all, k.took...)
	}
	f := []string{
		fmt.Sprintf("pods=%d", r.pods),
		fmt.Sprintf("policies=%d", r.policies),
		fmt.Sprintf("nodes=%d", r.nodes),
		fmt.Sprintf("start_to_programmed_s=%.2f", r.toProgrammed.Seconds()),
		fmt.Sprintf("start_to_ready_s=%.2f", r.toReady.Seconds()),
		"rss_mb=" + mb(r.rss),
		"hwm_mb=" + mb(r.hwm),
		"heap_mb=" + mb(r.heapInuse),
		"api_rx_mb=" + mb(uint64(r.rxReady)),
		"event_p99_ms=" + millis(percentile(all, 0.99)),
		fmt.Sprintf("namespaces=%d", r.namespaces),
		fmt.Sprintf("local_pods=%d", r.localPods),
		"rss_peak_mb=" + mb(r.rssPeak),
		"heap_alloc_mb=" + mb(r.heapAlloc),
		"api_rx_total_mb=" + mb(uint64(r.rxTotal)),
		fmt.Sprintf("create_s=%.0f", r.createTime.Seconds()),
		fmt.Sprintf("create_objects_per_s=%.0f", float64(r.createObjects)/r.createTime.Seconds()),
		fmt.Sprintf("elements=%.0f", r.metrics["nftpolicy_programmed_elements"]),
	}
	for _, k := range r.events {
		f = append(f, k.name+"_p50_ms="+millis(percentile(k.took, 0.50)), k.name+"_p99_ms="+millis(percentile(k.took, 0.99)))
	}
	return "scale: " + strings.Join(f, " ")
}

// percentile returns the q-quantile of ds by the nearest-rank method
// (q = 1 is the maximum), 0 for none.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(i, 0)]
}

func millis(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }

func seconds(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func mb(b uint64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

// sleep waits d, or less if ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errExited reports a daemon that exited before the run was over: its
// figures would be those of a dead process.
var errExited = errors.New("the daemon exited")
