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
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/nftpolicy/nftpolicy/enforcer"
	"github.com/nftpolicy/nftpolicy/internal/apiserver"
	"github.com/nftpolicy/nftpolicy/internal/scale"
)

// node is the node under test, one of ClusterOnNodes's.
var node = scale.NodeName(0)

func main() { os.Exit(run()) }

type config struct {
	pods, policies, nodes, namespaces int
	events, parallel, rounds          int
	bins                              []string // -bin, split at commas; none: build one
	daemonArgs, daemonLog             string
	daemonEnv                         string
	heapProfile, startProfile         string
	startHeaps                        string
	startProfileFor                   time.Duration
	gap, settle, readyTimeout         time.Duration
}

func run() int {
	var cfg config
	var bins string
	flag.IntVar(&cfg.pods, "pods", 10000, "pods in the cluster (rounded down to a multiple of -namespaces)")
	flag.IntVar(&cfg.policies, "policies", 1000, "NetworkPolicies in the cluster (rounded down to a multiple of -namespaces)")
	flag.IntVar(&cfg.nodes, "nodes", 100, "Nodes the pods are spread over; node-0 is the node under test")
	flag.IntVar(&cfg.namespaces, "namespaces", 0, "namespaces (default -policies/100: 100 policies a namespace)")
	flag.IntVar(&cfg.events, "events", 100, "events of each kind")
	flag.IntVar(&cfg.parallel, "parallel", 32, "parallel API clients creating the cluster")
	flag.StringVar(&bins, "bin", "", "prebuilt nftpolicy binaries, comma-separated, each measured in turn against the same cluster (default: build ./cmd/nftpolicy into a temporary directory)")
	flag.IntVar(&cfg.rounds, "rounds", 1, "how many times the -bin list is run, interleaved (a,b,a,b…), so that the machine's noise falls on every binary alike")
	flag.StringVar(&cfg.daemonArgs, "daemon-args", "", "more flags for `nftpolicy run`, space-separated")
	flag.StringVar(&cfg.daemonEnv, "daemon-env", "", "more environment for `nftpolicy run`, space-separated KEY=VALUE: GOMEMLIMIT=410MiB is what a 512Mi container limit makes the daemon set itself (80%), which this machine's hybrid cgroups cannot show it")
	flag.StringVar(&cfg.daemonLog, "daemon-log", "", "write the daemon's log to this file and keep it; with more than one daemon run, FILE-1.ext, FILE-2.ext… (default: a temporary file)")
	flag.StringVar(&cfg.heapProfile, "heap-profile", "", "write a heap profile of the daemon, taken after the steady memory reading, to this file (runs the daemon with --profiling); with more than one daemon run, numbered as -daemon-log")
	flag.StringVar(&cfg.startProfile, "start-profile", "", "write a CPU profile of the daemon's first -start-profile-for, from the moment it serves, to this file (runs the daemon with --profiling); with more than one daemon run, numbered as -daemon-log")
	flag.DurationVar(&cfg.startProfileFor, "start-profile-for", 25*time.Second, "how long -start-profile profiles")
	flag.StringVar(&cfg.startHeaps, "start-heaps", "", "write the daemon's heap profile every 250 ms from the moment it serves until it is ready to this directory (heap-NNN.pb.gz, NNN in tenths of a second since it served; runs the daemon with --profiling): what is live at the peak of the first sync; with more than one daemon run, numbered as -daemon-log")
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
	if bins != "" {
		cfg.bins = strings.Split(bins, ",")
	}
	switch {
	case cfg.namespaces < 1 || cfg.pods < cfg.namespaces || cfg.policies < cfg.namespaces:
		fmt.Fprintln(os.Stderr, "scale: -pods and -policies must be at least -namespaces, which must be at least 1")
		return 2
	case cfg.nodes < 2:
		fmt.Fprintln(os.Stderr, "scale: -nodes must be at least 2: events need pods on another node than the one under test")
		return 2
	case cfg.events < 1 || cfg.parallel < 1 || cfg.rounds < 1:
		fmt.Fprintln(os.Stderr, "scale: -events, -parallel and -rounds must be at least 1")
		return 2
	case max(1, len(cfg.bins))*cfg.rounds*cfg.events > maxAdded:
		fmt.Fprintf(os.Stderr, "scale: binaries × -rounds × -events must be at most %d: each daemon run adds pods at addresses of their own\n", maxAdded)
		return 2
	}
	// A binary that is not there would fail the run after the cluster,
	// minutes of it, is made.
	for _, b := range cfg.bins {
		if err := checkBinary(b); err != nil {
			fmt.Fprintln(os.Stderr, "scale: -bin:", err)
			return 2
		}
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

// checkBinary returns an error unless path is an executable file.
func checkBinary(path string) error {
	if path == "" {
		return errors.New("an empty path in the list")
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// results are what the summary line says, filled in as they are measured.
type results struct {
	pods, policies, nodes, namespaces, localPods int
	createTime                                   time.Duration
	createObjects                                int
	listPods                                     time.Duration // listFloor
	watchListPods                                time.Duration // watchListFloor
	bin                                          string        // the binary's label (binLabels)
	round                                        int           // from 1
	toProgrammed, toReady, rssPeakAt             time.Duration
	cpuProgrammed                                time.Duration // the daemon's CPU until programmed
	rss, hwm, rssPeak, heapInuse, heapAlloc      uint64        // bytes
	rssEvents                                    uint64        // the largest VmRSS sampled while the events ran
	rxReady, rxTotal                             int64
	metrics                                      map[string]float64 // the daemon's, at the steady reading
	events                                       []kindResult
}

// A bencher holds what the daemon runs of one invocation share: the
// cluster, its API server, the events' plan and the work directory.
type bencher struct {
	cfg    config
	out    io.Writer
	work   string
	srv    *apiserver.Server
	client kubernetes.Interface
	plan   *plan
	runs   int // daemon runs in all: binaries × rounds
}

func bench(ctx context.Context, cfg config, out io.Writer) error {
	perNSPods, perNSPolicies := cfg.pods/cfg.namespaces, cfg.policies/cfg.namespaces
	snap := scale.ClusterOnNodes(cfg.namespaces, perNSPods, perNSPolicies, cfg.nodes)
	cluster := results{pods: len(snap.Pods), policies: len(snap.Policies), nodes: len(snap.Nodes), namespaces: len(snap.Namespaces)}
	for _, p := range snap.Pods {
		if p.Spec.NodeName == node {
			cluster.localPods++
		}
	}
	fmt.Fprintf(out, "cluster: %d namespaces, %d pods (%d on %s), %d policies, %d nodes\n",
		cluster.namespaces, cluster.pods, cluster.localPods, node, cluster.policies, cluster.nodes)
	plan, err := planEvents(snap, cfg.events)
	if err != nil {
		return err
	}

	work, err := os.MkdirTemp("", "nftbench-scale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	bins := cfg.bins
	if len(bins) == 0 {
		bin := filepath.Join(work, "nftpolicy")
		t := time.Now()
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/nftpolicy/nftpolicy/cmd/nftpolicy")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build nftpolicy (give a binary with -bin): %w", err)
		}
		fmt.Fprintf(out, "built %s in %s\n", bin, seconds(time.Since(t)))
		bins = []string{bin}
	}
	labels := binLabels(bins)
	if len(cfg.bins) == 0 {
		labels = []string{"./cmd/nftpolicy"}
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

	if err := createCluster(ctx, srv, snap, cfg.parallel, out, &cluster); err != nil {
		if ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("create the cluster: %w (kube-apiserver log tail:\n%s)", err, srv.LogTail("kube-apiserver.log", 20))
	}

	if cluster.listPods, err = listFloor(ctx, client, len(snap.Pods)); err != nil {
		return err
	}
	fmt.Fprintf(out, "API floor: a protobuf list of every pod, from the watch cache, decoded: %s (the best of 2)\n", seconds(cluster.listPods))
	if cluster.watchListPods, err = watchListFloor(ctx, client, len(snap.Pods)); err != nil {
		return err
	}
	fmt.Fprintf(out, "API floor, streamed: a protobuf watch of every pod with its initial events (WatchList, as the daemon's informers), decoded: %s (the best of 2)\n", seconds(cluster.watchListPods))

	b := &bencher{cfg: cfg, out: out, work: work, srv: srv, client: client, plan: plan, runs: len(bins) * cfg.rounds}
	var all []*results
	for round := 1; round <= cfg.rounds; round++ {
		for i, bin := range bins {
			k := len(all)
			res := cluster // the cluster's fields; the daemon's are zero
			res.bin, res.round = labels[i], round
			if b.runs > 1 {
				fmt.Fprintf(out, "daemon run %d/%d: %s, round %d/%d\n", k+1, b.runs, labels[i], round, cfg.rounds)
			}
			if err := b.runDaemon(ctx, k, bin, &res); err != nil {
				return err
			}
			// The daemon is stopped and its namespace gone: put back what
			// the events left changed and check that the next daemon
			// meets the cluster the first one met.
			t := time.Now()
			if err := restoreCluster(ctx, client, plan, cfg.events); err != nil {
				return fmt.Errorf("restore the cluster after daemon run %d: %w", k+1, err)
			}
			if err := verifyCluster(ctx, client, snap, plan); err != nil {
				return fmt.Errorf("after daemon run %d: %w", k+1, err)
			}
			fmt.Fprintf(out, "cluster: back to its %d pods and policy %s/%s's port, checked in %s\n", len(snap.Pods), plan.edit.Namespace, plan.edit.Name, seconds(time.Since(t)))
			all = append(all, &res)
		}
	}
	if len(bins) > 1 {
		printComparison(out, labels, cfg.rounds, all)
	}
	return nil
}

// runDaemon measures one daemon, the k-th run (from 0) of bin, from
// scratch: a network namespace, a proxy and its byte count, a kubeconfig,
// a kernel reader and a log of its own, all gone (the daemon stopped
// first) when it returns, whatever happened.
func (b *bencher) runDaemon(ctx context.Context, k int, bin string, res *results) error {
	cfg, out := b.cfg, b.out
	netns := fmt.Sprintf("nftbench-scale-%d", os.Getpid())
	if b.runs > 1 {
		// A name of its own, so that no run can meet another's namespace.
		netns = fmt.Sprintf("%s-%d", netns, k+1)
	}
	if out, err := exec.Command("ip", "netns", "add", netns).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns add %s: %v: %s", netns, err, out)
	}
	defer func() {
		if out, err := exec.Command("ip", "netns", "del", netns).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "scale: ip netns del %s: %v: %s\n", netns, err, out)
		}
	}()

	u, err := url.Parse(b.srv.URL)
	if err != nil {
		return err
	}
	proxy, err := startProxy(u.Host)
	if err != nil {
		return err
	}
	defer proxy.Close()
	kubeconfig := filepath.Join(b.work, numbered("kubeconfig", k, b.runs))
	if err := writeKubeconfig(kubeconfig, "https://"+proxy.Addr(), b.srv.CAFile, b.srv.AdminToken); err != nil {
		return err
	}
	kern, err := openKernel(netns)
	if err != nil {
		return err
	}
	defer kern.Close()
	// A table already there would make start_to_programmed the time to
	// the daemon's first commit, whatever it wrote.
	if has, err := kern.hasTable(); err != nil {
		return err
	} else if has {
		return fmt.Errorf("the new namespace %s already holds table inet %s", netns, tableName)
	}

	logPath := numbered(cfg.daemonLog, k, b.runs)
	if logPath == "" {
		logPath = filepath.Join(b.work, numbered("nftpolicy.log", k, b.runs))
	}
	heapProfile := numbered(cfg.heapProfile, k, b.runs)
	startProfile := numbered(cfg.startProfile, k, b.runs)
	startHeaps := numbered(cfg.startHeaps, k, b.runs)
	args := strings.Fields(cfg.daemonArgs)
	if heapProfile != "" || startProfile != "" || startHeaps != "" {
		args = append(args, "--profiling")
	}
	d, err := startDaemon(ctx, bin, logPath, kubeconfig, netns, args, strings.Fields(cfg.daemonEnv))
	if err != nil {
		return err
	}
	if startProfile != "" {
		// From the moment the daemon serves: its start is what is asked.
		profiled := make(chan error, 1)
		go func() { profiled <- d.cpuProfile(ctx, startProfile, cfg.startProfileFor) }()
		defer func() {
			if err := <-profiled; err != nil {
				fmt.Fprintf(out, "start profile: %v\n", err)
				return
			}
			fmt.Fprintf(out, "start profile: %s, the first %s (go tool pprof %s %s)\n", startProfile, cfg.startProfileFor, bin, startProfile)
		}()
	}
	stopHeaps := func() {}
	if startHeaps != "" {
		var heapsCtx context.Context
		heapsCtx, stopHeaps = context.WithCancel(ctx)
		sampled := make(chan error, 1)
		go func() { sampled <- d.heapProfiles(heapsCtx, startHeaps, 250*time.Millisecond) }()
		defer func() {
			stopHeaps()
			if err := <-sampled; err != nil {
				fmt.Fprintf(out, "start heaps: %v\n", err)
				return
			}
			fmt.Fprintf(out, "start heaps: %s (go tool pprof -sample_index=inuse_space FILE; each shows what was live at the collection before it)\n", startHeaps)
		}()
	}
	defer func() {
		d.Stop()
		if cfg.daemonLog != "" {
			fmt.Fprintf(out, "daemon log: %s\n", logPath)
		}
	}()
	// Whatever happens next, what the daemon said is worth seeing.
	defer printDaemonProblems(out, logPath)

	if err := waitStarted(ctx, d, kern, proxy, cfg.readyTimeout, out, res); err != nil {
		return err
	}
	stopHeaps()
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

	if heapProfile != "" {
		// After the readings above: the profile's gc=1 collects first.
		if err := d.heapProfile(heapProfile); err != nil {
			return err
		}
		fmt.Fprintf(out, "heap profile: %s (go tool pprof -sample_index=inuse_space %s)\n", heapProfile, heapProfile)
	}

	d.resetPeakSince()
	ev := &eventRunner{ctx: ctx, client: b.client, k: kern, d: d, gap: cfg.gap, out: out, daemonRun: k}
	if res.events, err = ev.run(b.plan); err != nil {
		return err
	}

	if _, res.hwm, err = d.memory(); err != nil {
		return err
	}
	res.rssPeak, res.rssPeakAt = d.peakRSS(), d.peakRSSAt()
	res.rssEvents = d.peakRSSSince()
	res.rxTotal = proxy.Received()
	fmt.Fprintf(out, "end: VmHWM %s MB, largest VmRSS sampled %s MB (%.1f s after start), %s MB while the events ran; from the API server %s MB in all\n", mb(res.hwm), mb(res.rssPeak), res.rssPeakAt.Seconds(), mb(res.rssEvents), mb(uint64(res.rxTotal)))
	if err := d.Exited(); err != nil {
		return err
	}
	fmt.Fprintln(out, res.summary())
	return nil
}

// numbered is path as it is for a single daemon run, else with the run's
// number (from 1) before its extension: log.txt, log-1.txt, log-2.txt.
func numbered(path string, k, runs int) string {
	if path == "" || runs == 1 {
		return path
	}
	ext := filepath.Ext(path)
	return fmt.Sprintf("%s-%d%s", strings.TrimSuffix(path, ext), k+1, ext)
}

// binLabels names the binaries in the summary lines and the comparison:
// by base name if those differ, else by path (two builds are often
// a/nftpolicy and b/nftpolicy), and a binary given twice by its place too.
func binLabels(bins []string) []string {
	distinct := func(ls []string) bool {
		return len(slices.Compact(slices.Sorted(slices.Values(ls)))) == len(ls)
	}
	out := make([]string, len(bins))
	for i, b := range bins {
		out[i] = filepath.Base(b)
	}
	if distinct(out) {
		return out
	}
	copy(out, bins)
	if distinct(out) {
		return out
	}
	for i := range out {
		out[i] = fmt.Sprintf("%s#%d", out[i], i+1)
	}
	return out
}

// printComparison prints, for each binary, the median over its rounds of
// the figures a before/after comparison looks at first, and for the
// binaries after the first the change from it.
func printComparison(w io.Writer, labels []string, rounds int, all []*results) {
	type column struct {
		name string
		of   func(r *results) float64
	}
	cols := []column{
		{"start_to_programmed_s", func(r *results) float64 { return r.toProgrammed.Seconds() }},
		{"cpu_to_programmed_s", func(r *results) float64 { return r.cpuProgrammed.Seconds() }},
		{"rss_mb", func(r *results) float64 { return float64(r.rss) / (1 << 20) }},
		{"hwm_mb", func(r *results) float64 { return float64(r.hwm) / (1 << 20) }},
		{"heap_mb", func(r *results) float64 { return float64(r.heapInuse) / (1 << 20) }},
	}
	for j, kind := range all[0].events {
		cols = append(cols, column{kind.name + "_p99_ms", func(r *results) float64 {
			return float64(percentile(r.events[j].took, 0.99)) / float64(time.Millisecond)
		}})
	}
	medians := make([][]float64, len(labels))
	for i := range labels {
		for _, c := range cols {
			var vs []float64
			for k, r := range all {
				if k%len(labels) == i {
					vs = append(vs, c.of(r))
				}
			}
			medians[i] = append(medians[i], median(vs))
		}
	}
	fmt.Fprintf(w, "compare: the median of %d round(s) of each binary; in brackets, the change from %s\n", rounds, labels[0])
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := []string{"bin"}
	for _, c := range cols {
		head = append(head, c.name)
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for i, l := range labels {
		row := []string{l}
		for c, v := range medians[i] {
			cell := fmt.Sprintf("%.2f", v)
			if i > 0 {
				if base := medians[0][c]; base != 0 {
					cell += fmt.Sprintf(" (%+.1f%%)", 100*(v-base)/base)
				}
			}
			row = append(row, cell)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
}

// median is the middle of vs, or the mean of the two middle ones.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(vs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// summary is the one line a daemon run ends with: the fields the brief
// names first, in a stable order, then the others, the binary and the
// round last.
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
		fmt.Sprintf("rss_peak_at_s=%.2f", r.rssPeakAt.Seconds()),
		"rss_events_mb=" + mb(r.rssEvents),
		"heap_alloc_mb=" + mb(r.heapAlloc),
		"api_rx_total_mb=" + mb(uint64(r.rxTotal)),
		fmt.Sprintf("create_s=%.0f", r.createTime.Seconds()),
		fmt.Sprintf("create_objects_per_s=%.0f", float64(r.createObjects)/r.createTime.Seconds()),
		fmt.Sprintf("list_pods_s=%.2f", r.listPods.Seconds()),
		fmt.Sprintf("watchlist_pods_s=%.2f", r.watchListPods.Seconds()),
		fmt.Sprintf("cpu_to_programmed_s=%.2f", r.cpuProgrammed.Seconds()),
		fmt.Sprintf("elements=%.0f", r.metrics["nftpolicy_programmed_elements"]),
	}
	for _, k := range r.events {
		f = append(f, k.name+"_p50_ms="+millis(percentile(k.took, 0.50)), k.name+"_p99_ms="+millis(percentile(k.took, 0.99)))
	}
	f = append(f, "bin="+r.bin, fmt.Sprintf("round=%d", r.round))
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

// listFloor times the least any client must do before it knows every pod:
// one List of them all in protobuf, served from the API server's watch
// cache (resourceVersion 0) and decoded, the best of two. On a machine the
// API server shares with the daemon, start_to_programmed cannot beat it:
// it is what the API server's side of the daemon's first list costs.
func listFloor(ctx context.Context, client kubernetes.Interface, want int) (time.Duration, error) {
	best := time.Duration(math.MaxInt64)
	for range 2 {
		t := time.Now()
		l, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		took := time.Since(t)
		if err != nil {
			return 0, fmt.Errorf("list every pod: %w", err)
		}
		if len(l.Items) != want {
			return 0, fmt.Errorf("list every pod: %d pods, want %d", len(l.Items), want)
		}
		best = min(best, took)
	}
	return best, nil
}

// watchListFloor is listFloor as the daemon's informers list: one watch
// that sends every pod as an event first (sendInitialEvents, WatchList)
// and then a bookmark marking their end; each event decoded and dropped.
// The best of two.
func watchListFloor(ctx context.Context, client kubernetes.Interface, want int) (time.Duration, error) {
	best := time.Duration(math.MaxInt64)
	for range 2 {
		took, err := watchListOnce(ctx, client, want)
		if err != nil {
			return 0, fmt.Errorf("watch every pod with its initial events: %w", err)
		}
		best = min(best, took)
	}
	return best, nil
}

func watchListOnce(ctx context.Context, client kubernetes.Interface, want int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	yes := true
	t := time.Now()
	w, err := client.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{
		SendInitialEvents:    &yes,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		AllowWatchBookmarks:  true,
	})
	if err != nil {
		return 0, err
	}
	defer w.Stop()
	added := 0
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Added:
			added++
		case watch.Bookmark:
			m, err := meta.Accessor(ev.Object)
			if err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
				took := time.Since(t)
				if added != want {
					return 0, fmt.Errorf("%d pods before the end of the initial events, want %d", added, want)
				}
				return took, nil
			}
		case watch.Error:
			return 0, fmt.Errorf("%v", ev.Object)
		}
	}
	return 0, fmt.Errorf("the watch ended after %d pods, before the end of the initial events (%v)", added, ctx.Err())
}
