// Command events measures event → kernel latency of the daemon's Syncer on
// a synthetic cluster (internal/scale). Six kinds of event, each one object
// changed in a new snapshot:
//
//   - pod add: a new pod on another node that peer selectors select;
//   - pod delete: a pod on another node that peer selectors select;
//   - pod label change: a pod on another node gets another tier label, so
//     that it leaves a peer set, or (every other event) enters one;
//   - namespace label change: a namespace's team label, moving its pods in
//     or out of peer sets;
//   - policy add: a copy of a policy that selects pods of this node;
//   - policy edit: a changed port in a rule of such a policy.
//
// With -cluster-policies N the cluster also has N ClusterNetworkPolicies
// (internal/scale.ClusterPolicies: Admin and Baseline guardrails, each
// selecting one namespace, so pods of this node), every kind above runs
// with them present, and three kinds more measure them:
//
//   - cnp edit: a changed port in the first rule of an Admin policy that
//     selects pods of this node;
//   - cnp add: a copy of such a policy under a new name (N → N+1);
//   - cnp delete: such a policy deleted (N → N-1).
//
// An add is undone, and a delete's policy restored, by an untimed sync
// ahead of the next event (eventKind.prepare), so every event of these
// two changes one policy of N.
//
// Which pods are peers, and which label change moves a pod into or out of
// a peer set, is the compiler's answer (peerOracle), not a copy of its
// selection.
//
// Events of a kind follow one another (200 pod adds are 200 new pods); each
// kind starts again from the base cluster. Every event must write a delta
// batch to the kernel: the command fails if one writes nothing or rewrites
// the whole table, so that it cannot time no-ops.
//
// It measures two ways in one run:
//
//  1. Sync called for each event, no debounce: the whole Sync, and its
//     CompileTime and WriteTime, the netlink messages and the bytes the
//     Go heap allocated (runtime/metrics) per event. With
//     -defer-unions (the default, as the daemon runs), an event whose sync
//     left new unions of peer lists to merge later (enforcer.Options.
//     DeferUnions) is followed by an untimed sync that merges them, as Run
//     does once the cluster is quiet; the deferred column counts them.
//  2. The daemon's loop, Syncer.Run with -debounce and -max-delay: each
//     event's snapshot is sent on the updates channel, and the time is
//     from the send until Status reports the sync done. Events are sent one
//     at a time, so each waits out the whole debounce.
//
// Output is fixed-width tables that are also markdown, for
// docs/performance.md. Needs root: it programs a throwaway network
// namespace, deleted on exit.
//
// Flags: -namespaces, -pods (per namespace), -policies (per namespace),
// -cluster-policies, -local (pods on the node under test), -events (of
// each kind), -debounce and -max-delay (those of Run; the defaults are the
// daemon's).
//
//	go run ./hack/bench/events -namespaces 100 -pods 100 -policies 10 -events 200
//	go run ./hack/bench/events -policies 100 -pods 1000   # 10k policies, 100k pods
//	go run ./hack/bench/events -policies 100 -cluster-policies 100
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go4.org/netipx"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	policyv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/nftpolicy/nftpolicy/enforcer"
	"github.com/nftpolicy/nftpolicy/internal/scale"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// node is the node under test: its pods are the policies' targets.
const node = "node-1"

// The labels scale.Cluster's peer selectors read: policy k allows pods with
// tier-(k%3) in namespaces with team-(k%10).
const (
	tierLabel = "tier"
	teamLabel = "team"
)

// pollInterval is how often the Run mode reads Status while waiting for an
// event to land: fine against a debounce of milliseconds, coarse enough not
// to steal the syncer's CPU.
const pollInterval = 75 * time.Microsecond

func main() { os.Exit(run()) }

type config struct {
	namespaces, pods, policies, local, events int
	clusterPolicies                           int
	timing                                    enforcer.Timing
	walkPolicies, deferUnions                 bool
	kinds                                     map[string]bool // the event kinds to measure; all when empty
	viaRun                                    bool
	cpuProfile                                string
	firstProfile                              string
	heapProfile                               string
}

func run() int {
	var cfg config
	flag.IntVar(&cfg.namespaces, "namespaces", 100, "namespaces")
	flag.IntVar(&cfg.pods, "pods", 100, "pods per namespace")
	flag.IntVar(&cfg.policies, "policies", 10, "policies per namespace")
	flag.IntVar(&cfg.clusterPolicies, "cluster-policies", 0, "ClusterNetworkPolicies in the cluster; above 0 adds the cnp event kinds")
	flag.IntVar(&cfg.local, "local", 110, "pods on the node under test (about)")
	flag.IntVar(&cfg.events, "events", 200, "events of each kind")
	flag.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of the measured events (not the first sync) to this file, and allocation profiles before and after them to FILE.allocs-before and FILE.allocs-after")
	flag.StringVar(&cfg.firstProfile, "first-profile", "", "write a CPU profile of the first sync (the whole table, compile and write) to this file, and allocation profiles before and after it to FILE.allocs-before and FILE.allocs-after")
	flag.StringVar(&cfg.heapProfile, "heapprofile", "", "write a heap profile, taken after the first sync and a collection, to this file: what the compiler and its table hold (the snapshot included)")
	flag.Func("kinds", "comma-separated event kinds to measure (as the tables name them, e.g. \"namespace label change,policy edit\"); all when not given", func(v string) error {
		cfg.kinds = map[string]bool{}
		for _, k := range strings.Split(v, ",") {
			cfg.kinds[strings.TrimSpace(k)] = true
		}
		return nil
	})
	flag.BoolVar(&cfg.viaRun, "run", true, "also measure each event through Run (debounce, send -> sync done)")
	flag.BoolVar(&cfg.deferUnions, "defer-unions", true, "let an event's sync leave new large unions of peer lists to the next sync (enforcer.Options.DeferUnions), as nftpolicy run does; the measured Sync is then followed by an untimed one that merges them, as Run does once the cluster is quiet")
	flag.BoolVar(&cfg.walkPolicies, "walk-policies", false, "pod chains walk every selecting policy (enforcer.Options.WalkPolicies), the layout before the flat stage")
	// The daemon's defaults (cmd/nftpolicy: --debounce, --max-delay).
	flag.DurationVar(&cfg.timing.Debounce, "debounce", 100*time.Millisecond, "Run's debounce, for the second table")
	flag.DurationVar(&cfg.timing.MaxDelay, "max-delay", time.Second, "Run's max delay, for the second table")
	flag.Parse()
	cfg.timing.Retry = time.Second
	if cfg.namespaces < 1 || cfg.pods < 1 || cfg.policies < 1 || cfg.events < 1 {
		fmt.Fprintln(os.Stderr, "-namespaces, -pods, -policies and -events must be at least 1")
		return 2
	}
	if cfg.clusterPolicies < 0 {
		fmt.Fprintln(os.Stderr, "-cluster-policies must not be negative")
		return 2
	}
	if cfg.local < 1 || cfg.local > cfg.namespaces*cfg.pods {
		fmt.Fprintln(os.Stderr, "-local must be between 1 and the number of pods")
		return 2
	}

	// An interrupt cancels ctx instead of killing the process, so that the
	// deferred netns deletion runs.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := bench(ctx, cfg, os.Stdout); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("interrupted (%w)", err)
		}
		fmt.Fprintln(os.Stderr, "events:", err)
		return 1
	}
	return 0
}

func bench(ctx context.Context, cfg config, out io.Writer) error {
	base := scale.Cluster(cfg.namespaces, cfg.pods, cfg.policies, cfg.local, node, false)
	if cfg.clusterPolicies > 0 {
		// As the API server labels namespaces: cluster policies select by
		// the name label.
		scale.NameLabels(base)
		base.ClusterPolicies = scale.ClusterPolicies(cfg.clusterPolicies, cfg.namespaces)
		base.Sort()
	}
	c, err := newCluster(base)
	if err != nil {
		return err
	}
	kinds, err := eventKinds(c, cfg.events)
	if err != nil {
		return err
	}
	if len(cfg.kinds) > 0 {
		var chosen []eventKind
		for _, k := range kinds {
			if cfg.kinds[k.name] {
				chosen = append(chosen, k)
				delete(cfg.kinds, k.name)
			}
		}
		for name := range cfg.kinds {
			return fmt.Errorf("-kinds: no event kind %q", name)
		}
		kinds = chosen
	}

	netns := fmt.Sprintf("nftbench-ev-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", netns).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns add: %v: %s", err, out)
	}
	defer exec.Command("ip", "netns", "del", netns).Run()
	conn, err := nft.Open(netns)
	if err != nil {
		return err
	}
	defer conn.Close()
	s := enforcer.NewSyncer(conn, enforcer.Options{Node: node, WalkPolicies: cfg.walkPolicies, DeferUnions: cfg.deferUnions}, enforcer.PrioritySetting{Auto: true}, zap.NewNop())

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	stopFirst, err := startProfiles(cfg.firstProfile)
	if err != nil {
		return err
	}
	start := time.Now()
	first, err := s.Sync(base)
	took := time.Since(start)
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if perr := stopFirst(); err == nil {
		err = perr
	}
	if err != nil {
		return fmt.Errorf("first sync: %w", err)
	}
	local := 0
	for _, p := range base.Pods {
		if p.Spec.NodeName == node {
			local++
		}
	}
	fmt.Fprintf(out, "event -> kernel: %d namespaces, %d pods (%d on this node), %d policies, %d cluster policies; %d events of each kind\n",
		len(base.Namespaces), len(base.Pods), local, len(base.Policies), len(base.ClusterPolicies), cfg.events)
	fmt.Fprintf(out, "first sync (whole table): %s (compile %s, write %s), %d messages, %.1f MB allocated, %d collections\n",
		seconds(took), seconds(first.CompileTime), seconds(first.WriteTime), first.Batch.Messages,
		float64(after.TotalAlloc-before.TotalAlloc)/1e6, after.NumGC-before.NumGC)
	var rules, elements int
	for _, ch := range first.Table.Chains {
		rules += len(ch.Rules)
	}
	for _, set := range first.Table.Sets {
		elements += set.Len()
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Fprintf(out, "table: %d chains, %d rules, %d sets, %d elements; Go heap in use after it %.1f MB\n",
		len(first.Table.Chains), rules, len(first.Table.Sets), elements, float64(ms.HeapInuse)/1e6)
	if cfg.heapProfile != "" {
		f, err := os.Create(cfg.heapProfile)
		if err != nil {
			return err
		}
		err = pprof.WriteHeapProfile(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}

	stopEvents, err := startProfiles(cfg.cpuProfile)
	if err != nil {
		return err
	}
	direct, err := measureSync(ctx, s, base, kinds, cfg.events)
	if perr := stopEvents(); err == nil {
		err = perr
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nSync per event, no debounce:\n\n")
	direct.print(out)

	if !cfg.viaRun {
		return nil
	}
	// Run takes over the same Syncer, now holding the base cluster again:
	// from here on only Run may call Sync.
	viaRun, err := measureRun(ctx, s, base, kinds, cfg.events, cfg.timing)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nThrough Run (debounce %v, max-delay %v), one event at a time, send -> sync done:\n\n",
		cfg.timing.Debounce, cfg.timing.MaxDelay)
	viaRun.print(out)
	return nil
}

// measureSync applies every kind's events by calling Sync, checking that
// each writes a delta, and syncs base again after each kind. The messages
// column is the mean netlink messages of an event's batch.
func measureSync(ctx context.Context, s *enforcer.Syncer, base *k8s.Snapshot, kinds []eventKind, events int) (table, error) {
	t := table{header: []string{"event", "sync p50", "sync p99", "sync max", "compile p50", "compile p99", "write p50", "write p99", "mean messages", "mean allocated", "deferred"}}
	allocs := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	for _, kind := range kinds {
		var syncs, compiles, writes []time.Duration
		messages, deferred := 0, 0
		var allocated uint64
		cur := base
		for i := range events {
			if err := ctx.Err(); err != nil {
				return t, err
			}
			if kind.prepare != nil {
				prep, err := kind.prepare(cur, i)
				if err != nil {
					return t, fmt.Errorf("%s #%d: prepare: %w", kind.name, i, err)
				}
				if _, err := s.Sync(prep); err != nil {
					return t, fmt.Errorf("%s #%d: prepare: sync: %w", kind.name, i, err)
				}
				cur = prep
			}
			next, err := kind.next(cur, i)
			if err != nil {
				return t, fmt.Errorf("%s #%d: %w", kind.name, i, err)
			}
			metrics.Read(allocs)
			before := allocs[0].Value.Uint64()
			start := time.Now()
			res, err := s.Sync(next)
			took := time.Since(start)
			metrics.Read(allocs)
			allocated += allocs[0].Value.Uint64() - before
			if err != nil {
				return t, fmt.Errorf("%s #%d: sync: %w", kind.name, i, err)
			}
			if res.Batch.Messages == 0 {
				return t, fmt.Errorf("%s #%d wrote nothing to the kernel: the event changes nothing, so it measures nothing", kind.name, i)
			}
			if res.Batch.Full {
				return t, fmt.Errorf("%s #%d rewrote the whole table (%d messages) instead of a delta", kind.name, i, res.Batch.Messages)
			}
			syncs = append(syncs, took)
			compiles = append(compiles, res.CompileTime)
			writes = append(writes, res.WriteTime)
			messages += res.Batch.Messages
			cur = next
			if res.Deferred > 0 {
				// Run merges them in a sync of its own once the cluster
				// is quiet (or in the next event's): here, untimed.
				deferred++
				merged, err := s.Sync(next)
				if err != nil {
					return t, fmt.Errorf("%s #%d: merging deferred unions: %w", kind.name, i, err)
				}
				if merged.Batch.Messages == 0 || merged.Deferred > 0 {
					return t, fmt.Errorf("%s #%d: the sync merging %d deferred unions wrote %d messages and deferred %d", kind.name, i, res.Deferred, merged.Batch.Messages, merged.Deferred)
				}
			}
		}
		if _, err := s.Sync(base); err != nil {
			return t, fmt.Errorf("back to the base cluster after %s: %w", kind.name, err)
		}
		t.rows = append(t.rows, []string{kind.name,
			millis(percentile(syncs, 0.50)), millis(percentile(syncs, 0.99)), millis(percentile(syncs, 1)),
			millis(percentile(compiles, 0.50)), millis(percentile(compiles, 0.99)),
			millis(percentile(writes, 0.50)), millis(percentile(writes, 0.99)),
			fmt.Sprintf("%.1f", float64(messages)/float64(events)),
			fmt.Sprintf("%.0f kB", float64(allocated)/float64(events)/1e3),
			fmt.Sprint(deferred),
		})
	}
	return t, nil
}

// measureRun replays the same events through s.Run, one at a time: each
// snapshot is sent on the updates channel and timed until s.Status reports
// one more successful sync. s must hold base and nothing else may call its
// Sync meanwhile.
func measureRun(ctx context.Context, s *enforcer.Syncer, base *k8s.Snapshot, kinds []eventKind, events int, timing enforcer.Timing) (table, error) {
	t := table{header: []string{"event", "p50", "p99", "max"}}
	runCtx, stopRun := context.WithCancel(ctx)
	updates := make(chan *k8s.Snapshot)
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		s.Run(runCtx, updates, timing)
	}()
	// Run must have returned before the caller closes the connection.
	defer func() {
		stopRun()
		<-runDone
	}()

	// Generous: the wait is the debounce (or max delay) plus one sync,
	// which is well under a minute at any scale this command is run at.
	timeout := timing.Debounce + timing.MaxDelay + time.Minute
	// send hands snap to Run and waits for it to be programmed.
	send := func(snap *k8s.Snapshot) (time.Duration, error) {
		before, _ := s.Status()
		start := time.Now()
		select {
		case updates <- snap:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		deadline := start.Add(timeout)
		for {
			gen, err := s.Status()
			if gen > before {
				return time.Since(start), nil
			}
			if err != nil {
				return 0, fmt.Errorf("sync failed: %w", err)
			}
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("not programmed after %v", timeout)
			}
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			time.Sleep(pollInterval)
		}
	}

	for _, kind := range kinds {
		var took []time.Duration
		cur := base
		for i := range events {
			if kind.prepare != nil {
				prep, err := kind.prepare(cur, i)
				if err != nil {
					return t, fmt.Errorf("%s #%d: prepare: %w", kind.name, i, err)
				}
				if _, err := send(prep); err != nil {
					return t, fmt.Errorf("%s #%d: prepare through Run: %w", kind.name, i, err)
				}
				cur = prep
			}
			next, err := kind.next(cur, i)
			if err != nil {
				return t, fmt.Errorf("%s #%d: %w", kind.name, i, err)
			}
			d, err := send(next)
			if err != nil {
				return t, fmt.Errorf("%s #%d through Run: %w", kind.name, i, err)
			}
			took = append(took, d)
			cur = next
		}
		if _, err := send(base); err != nil {
			return t, fmt.Errorf("back to the base cluster after %s, through Run: %w", kind.name, err)
		}
		t.rows = append(t.rows, []string{kind.name,
			millis(percentile(took, 0.50)), millis(percentile(took, 0.99)), millis(percentile(took, 1))})
	}
	return t, nil
}

// percentile returns the q-quantile of ds by the nearest-rank method
// (q = 1 is the maximum). It sorts ds.
func percentile(ds []time.Duration, q float64) time.Duration {
	slices.Sort(ds)
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[max(i, 0)]
}

func millis(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

// startProfiles starts a CPU profile to path, after writing the
// allocation profile so far to path.allocs-before; stop ends it and
// writes path.allocs-after. With no path, it does nothing.
func startProfiles(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	if err := writeAllocs(path + ".allocs-before"); err != nil {
		return nil, err
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return err
		}
		return writeAllocs(path + ".allocs-after")
	}, nil
}

// writeAllocs writes the allocation profile so far to path: two of them,
// before and after, give what happened between (go tool pprof
// -sample_index=alloc_space -base BEFORE AFTER). The profile counts what
// was allocated up to the last collection: one runs first.
func writeAllocs(path string) error {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// A table prints as fixed-width columns that are also a markdown table:
// the first column left-aligned, the others (numbers) right-aligned.
type table struct {
	header []string
	rows   [][]string
}

func (t table) print(w io.Writer) {
	widths := make([]int, len(t.header))
	for _, row := range append([][]string{t.header}, t.rows...) {
		for c, cell := range row {
			widths[c] = max(widths[c], len(cell))
		}
	}
	line := func(cells []string) {
		var b strings.Builder
		for c, cell := range cells {
			if c == 0 {
				fmt.Fprintf(&b, "| %-*s ", widths[c], cell)
			} else {
				fmt.Fprintf(&b, "| %*s ", widths[c], cell)
			}
		}
		fmt.Fprintln(w, b.String()+"|")
	}
	line(t.header)
	rule := make([]string, len(widths))
	for c, width := range widths {
		rule[c] = strings.Repeat("-", width)
		if c > 0 {
			rule[c] = rule[c][1:] + ":" // right-aligned in markdown
		}
	}
	line(rule)
	for _, row := range t.rows {
		line(row)
	}
}

// An eventKind makes events of one kind: next returns the snapshot after
// event i, given cur, the snapshot after event i-1 (the base cluster for
// i = 0). It never modifies cur or its objects, which the syncer holds.
//
// prepare, when set, returns the snapshot synced, untimed, just before
// event i (given the snapshot after event i-1): next then starts from it.
// It undoes what the previous event did where events of a kind must each
// start from the same number of objects.
type eventKind struct {
	name    string
	next    func(cur *k8s.Snapshot, i int) (*k8s.Snapshot, error)
	prepare func(cur *k8s.Snapshot, i int) (*k8s.Snapshot, error)
}

// eventKinds returns the six kinds of event (nine with cluster policies in
// the base cluster), checking that the base
// cluster has enough objects for events of each.
func eventKinds(c *cluster, events int) ([]eventKind, error) {
	if len(c.remotePeers) == 0 {
		return nil, errors.New("no pod on another node is a peer of a policy active on this node")
	}
	if len(c.remotePeers) < events {
		return nil, fmt.Errorf("only %d pods on other nodes are peers of active policies, fewer than -events %d pod deletes", len(c.remotePeers), events)
	}
	if len(c.active) == 0 {
		return nil, errors.New("no policy selects a pod of this node")
	}
	relabels, err := c.relabels(events)
	if err != nil {
		return nil, err
	}
	var editable []*networkingv1.NetworkPolicy
	for _, np := range c.active {
		if firstNumericPort(np) != nil {
			editable = append(editable, np)
		}
	}
	if len(editable) == 0 {
		return nil, errors.New("no active policy has an ingress rule with a numeric port to edit")
	}

	kinds := []eventKind{
		{name: "pod add", next: func(cur *k8s.Snapshot, i int) (*k8s.Snapshot, error) {
			// A copy of a peer pod, under a new name and addresses, is
			// selected by the same peer selectors.
			p := c.remotePeers[i%len(c.remotePeers)].DeepCopy()
			p.Name = fmt.Sprintf("added-%d", i)
			v4, v6 := addedPodIPs(i)
			p.Status.PodIPs = []corev1.PodIP{{IP: v4.String()}, {IP: v6.String()}}
			pods, err := withInserted(cur.Pods, p)
			next := *cur
			next.Pods = pods
			return &next, err
		}},
		{name: "pod delete", next: func(cur *k8s.Snapshot, i int) (*k8s.Snapshot, error) {
			gone := c.remotePeers[i]
			pods, err := withDeleted(cur.Pods, gone.Namespace, gone.Name)
			next := *cur
			next.Pods = pods
			return &next, err
		}},
		{name: "pod label change", next: func(cur *k8s.Snapshot, i int) (*k8s.Snapshot, error) {
			r := relabels[i]
			pods, err := withEdited(cur.Pods, r.pod.Namespace, r.pod.Name, func(p *k8s.Pod) *k8s.Pod {
				p = p.DeepCopy()
				p.Labels[tierLabel] = r.tier
				return p
			})
			next := *cur
			next.Pods = pods
			return &next, err
		}},
		{name: "namespace label change", next: func(cur *k8s.Snapshot, i int) (*k8s.Snapshot, error) {
			ns, err := c.reteam(cur, i)
			if err != nil {
				return nil, err
			}
			namespaces, err := withEdited(cur.Namespaces, "", ns.Name, func(*corev1.Namespace) *corev1.Namespace { return ns })
			next := *cur
			next.Namespaces = namespaces
			return &next, err
		}},
		{name: "policy add", next: func(cur *k8s.Snapshot, i int) (*k8s.Snapshot, error) {
			// A copy of an active policy selects the same pods of this node.
			np := c.active[i%len(c.active)].DeepCopy()
			np.Name = fmt.Sprintf("added-%d", i)
			policies, err := withInserted(cur.Policies, np)
			next := *cur
			next.Policies = policies
			return &next, err
		}},
		{name: "policy edit", next: func(cur *k8s.Snapshot, i int) (*k8s.Snapshot, error) {
			// Editing a policy again later gives its port another value:
			// every edit is a change.
			edited := editable[i%len(editable)]
			policies, err := withEdited(cur.Policies, edited.Namespace, edited.Name, func(np *networkingv1.NetworkPolicy) *networkingv1.NetworkPolicy {
				np = np.DeepCopy()
				*firstNumericPort(np) = intstr.FromInt32(int32(1024 + i%60000))
				return np
			})
			next := *cur
			next.Policies = policies
			return &next, err
		}},
	}
	if len(c.base.ClusterPolicies) == 0 {
		return kinds, nil
	}
	if len(c.activeAdmin) == 0 {
		return nil, errors.New("no Admin ClusterNetworkPolicy with a numeric port in its first ingress rule selects a pod of this node")
	}
	withClusterPolicies := func(cur *k8s.Snapshot, list []*policyv1beta1.ClusterNetworkPolicy, err error) (*k8s.Snapshot, error) {
		next := *cur
		next.ClusterPolicies = list
		return &next, err
	}
	addedName := func(i int) string { return fmt.Sprintf("added-cnp-%d", i) }
	return append(kinds,
		eventKind{name: "cnp edit", next: func(cur *k8s.Snapshot, i int) (*k8s.Snapshot, error) {
			// As for policy edit: each edit of a policy gives its port
			// another value.
			edited := c.activeAdmin[i%len(c.activeAdmin)]
			list, err := withEdited(cur.ClusterPolicies, "", edited.Name, func(cnp *policyv1beta1.ClusterNetworkPolicy) *policyv1beta1.ClusterNetworkPolicy {
				cnp = cnp.DeepCopy()
				scale.FirstClusterPort(cnp).Number = int32(1024 + i%60000)
				return cnp
			})
			return withClusterPolicies(cur, list, err)
		}},
		eventKind{name: "cnp add",
			// The previous event's copy goes first, untimed.
			prepare: func(cur *k8s.Snapshot, i int) (*k8s.Snapshot, error) {
				if i == 0 {
					return cur, nil
				}
				list, err := withDeleted(cur.ClusterPolicies, "", addedName(i-1))
				return withClusterPolicies(cur, list, err)
			},
			// A copy of an active Admin policy selects the same pods of
			// this node: their Admin chain gains its rules.
			next: func(cur *k8s.Snapshot, i int) (*k8s.Snapshot, error) {
				cnp := c.activeAdmin[i%len(c.activeAdmin)].DeepCopy()
				cnp.Name = addedName(i)
				list, err := withInserted(cur.ClusterPolicies, cnp)
				return withClusterPolicies(cur, list, err)
			}},
		eventKind{name: "cnp delete",
			// The previous event's policy comes back first, untimed.
			prepare: func(cur *k8s.Snapshot, i int) (*k8s.Snapshot, error) {
				if i == 0 {
					return cur, nil
				}
				list, err := withInserted(cur.ClusterPolicies, c.activeAdmin[(i-1)%len(c.activeAdmin)])
				return withClusterPolicies(cur, list, err)
			},
			next: func(cur *k8s.Snapshot, i int) (*k8s.Snapshot, error) {
				gone := c.activeAdmin[i%len(c.activeAdmin)]
				list, err := withDeleted(cur.ClusterPolicies, "", gone.Name)
				return withClusterPolicies(cur, list, err)
			}},
	), nil
}

// addedPodIPs are the addresses of added pod i, outside the ranges
// scale.Cluster numbers its pods from (10/8 and fd00::/104).
func addedPodIPs(i int) (netip.Addr, netip.Addr) {
	v4 := netip.AddrFrom4([4]byte{100, 64 | byte(i>>16)&0x3f, byte(i >> 8), byte(i)})
	v6 := netip.AddrFrom16([16]byte{0xfd, 0, 0, 0, 0, 0, 0, 1, 12: byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)})
	return v4, v6
}

// firstNumericPort returns the port of the first ingress rule's first
// numeric single port, nil if there is none.
func firstNumericPort(np *networkingv1.NetworkPolicy) *intstr.IntOrString {
	if len(np.Spec.Ingress) == 0 {
		return nil
	}
	for j, p := range np.Spec.Ingress[0].Ports {
		if p.Port != nil && p.Port.Type == intstr.Int && p.EndPort == nil {
			return np.Spec.Ingress[0].Ports[j].Port
		}
	}
	return nil
}

// A cluster is what the events need to know of the base snapshot.
type cluster struct {
	base *k8s.Snapshot
	// peers tells which change moves a pod into or out of a peer set.
	peers *peerOracle
	// active are the policies that select a pod of this node, so their
	// chains and peer sets are in the table.
	active []*networkingv1.NetworkPolicy
	// activeAdmin are the Admin ClusterNetworkPolicies that select a pod
	// of this node and have a numeric port in their first ingress rule.
	activeAdmin []*policyv1beta1.ClusterNetworkPolicy
	// remote are the pods on other nodes (that take part in policy),
	// remotePeers those of them that are in a peer set of the base table.
	remote, remotePeers []*k8s.Pod
	// The values of the labels peer selectors read, to relabel with.
	tiers, teams []string
}

func newCluster(base *k8s.Snapshot) (*cluster, error) {
	c := &cluster{base: base, tiers: labelValues(base.Pods, tierLabel), teams: labelValues(base.Namespaces, teamLabel)}
	localByNS := map[string][]*k8s.Pod{}
	for _, p := range base.Pods {
		if p.Spec.NodeName == node && takesPart(p) {
			localByNS[p.Namespace] = append(localByNS[p.Namespace], p)
		}
	}
	for _, np := range base.Policies {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			continue
		}
		if slices.ContainsFunc(localByNS[np.Namespace], func(p *k8s.Pod) bool { return sel.Matches(labels.Set(p.Labels)) }) {
			c.active = append(c.active, np)
		}
	}
	nsLabels := map[string]labels.Set{}
	for _, ns := range base.Namespaces {
		nsLabels[ns.Name] = ns.Labels
	}
	for _, cnp := range base.ClusterPolicies {
		if cnp.Spec.Tier != policyv1beta1.AdminTier || scale.FirstClusterPort(cnp) == nil {
			continue
		}
		nsSel, podSel, err := clusterSubject(cnp)
		if err != nil {
			continue
		}
		for ns, pods := range localByNS {
			if nsSel.Matches(nsLabels[ns]) && slices.ContainsFunc(pods, func(p *k8s.Pod) bool { return podSel.Matches(labels.Set(p.Labels)) }) {
				c.activeAdmin = append(c.activeAdmin, cnp)
				break
			}
		}
	}
	c.peers = newPeerOracle()
	inPeerSet, err := c.peers.addresses(base)
	if err != nil {
		return nil, err
	}
	for _, p := range base.Pods {
		if p.Spec.NodeName == node || !takesPart(p) {
			continue
		}
		c.remote = append(c.remote, p)
		if inPeerSet.Contains(podAddr(p)) {
			c.remotePeers = append(c.remotePeers, p)
		}
	}
	return c, nil
}

// clusterSubject returns the namespace and pod selectors of a cluster
// policy's subject.
func clusterSubject(cnp *policyv1beta1.ClusterNetworkPolicy) (ns, pods labels.Selector, err error) {
	if s := cnp.Spec.Subject.Namespaces; s != nil {
		ns, err = metav1.LabelSelectorAsSelector(s)
		return ns, labels.Everything(), err
	}
	if s := cnp.Spec.Subject.Pods; s != nil {
		if ns, err = metav1.LabelSelectorAsSelector(&s.NamespaceSelector); err != nil {
			return nil, nil, err
		}
		pods, err = metav1.LabelSelectorAsSelector(&s.PodSelector)
		return ns, pods, err
	}
	return nil, nil, errors.New("no subject")
}

// takesPart reports whether the enforcer counts p: it has an address of
// its own and is not finished.
func takesPart(p *k8s.Pod) bool {
	return !p.Spec.HostNetwork && len(p.Status.PodIPs) > 0 &&
		p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// A relabel is one pod label change: pod gets tier as its tier label.
type relabel struct {
	pod  *k8s.Pod
	tier string
}

// relabels plans events pod label changes, each of another pod on another
// node and each changing the peer sets the pod is in: even events take it
// out of a peer set (out of every one, where few policies leave tiers
// unselected), odd ones put it into one it was not in (where many policies
// select every tier, while taking it out of another).
func (c *cluster) relabels(events int) ([]relabel, error) {
	used := map[*k8s.Pod]bool{}
	// next finds, from *cursor on in c.remote, an unused pod and a tier
	// that makes it leave a peer set (or enter one).
	next := func(cursor *int, leave bool) (relabel, bool) {
		for ; *cursor < len(c.remote); *cursor++ {
			p := c.remote[*cursor]
			if used[p] {
				continue
			}
			for _, tier := range c.tiers {
				if tier == p.Labels[tierLabel] {
					continue
				}
				relabelled := p.DeepCopy()
				relabelled.Labels = withLabel(p.Labels, tierLabel, tier)
				pods, err := withEdited(c.base.Pods, p.Namespace, p.Name, func(*k8s.Pod) *k8s.Pod { return relabelled })
				if err != nil {
					continue
				}
				to := *c.base
				to.Pods = pods
				entered, left, _ := c.peers.moved(c.base, &to, podAddr(p))
				if leave && left || !leave && entered {
					used[p] = true
					return relabel{p, tier}, true
				}
			}
		}
		return relabel{}, false
	}
	var leaving, entering int // cursors
	out := make([]relabel, 0, events)
	for i := range events {
		cursor, leave, what := &entering, false, "into"
		if i%2 == 0 {
			cursor, leave, what = &leaving, true, "out of"
		}
		r, ok := next(cursor, leave)
		if !ok {
			return nil, fmt.Errorf("pod label change #%d: no pod left whose %s label takes it %s a peer set; lower -events", i, tierLabel, what)
		}
		out = append(out, r)
	}
	return out, nil
}

// reteam returns namespace event i: a copy of a namespace of cur with
// another team label, one that moves some of its pods into or out of peer
// sets. It starts from the (i mod n)th namespace, so events go round them.
func (c *cluster) reteam(cur *k8s.Snapshot, i int) (*corev1.Namespace, error) {
	teams := c.teams // sorted
	for j := range cur.Namespaces {
		ns := cur.Namespaces[(i+j)%len(cur.Namespaces)]
		// Try the other teams in turn, starting after the present one.
		k := slices.Index(teams, ns.Labels[teamLabel])
		for step := 1; step < len(teams); step++ {
			changed := ns.DeepCopy()
			changed.Labels = withLabel(ns.Labels, teamLabel, teams[(k+step+len(teams))%len(teams)])
			namespaces, err := withEdited(cur.Namespaces, "", ns.Name, func(*corev1.Namespace) *corev1.Namespace { return changed })
			if err != nil {
				return nil, err
			}
			to := *cur
			to.Namespaces = namespaces
			if _, _, moves := c.peers.moved(cur, &to, netip.Addr{}); moves {
				return changed, nil
			}
		}
	}
	return nil, fmt.Errorf("no change of a namespace's %s label moves a pod into or out of a peer set", teamLabel)
}

// labelValues lists the values objs give label key, sorted, and one that
// none of them has (an In selector selects no object with it).
func labelValues[T metav1.Object](objs []T, key string) []string {
	seen := map[string]bool{}
	for _, o := range objs {
		if v, ok := o.GetLabels()[key]; ok {
			seen[v] = true
		}
	}
	values := []string{key + "-unused"}
	for v := range seen {
		values = append(values, v)
	}
	slices.Sort(values)
	return values
}

// withLabel returns a copy of the labels m with key set to value.
func withLabel(m map[string]string, key, value string) map[string]string {
	out := make(map[string]string, len(m)+1)
	maps.Copy(out, m)
	out[key] = value
	return out
}

// A peerOracle asks the compiler, not a copy of its selection, which
// addresses a change moves into or out of the table's peer sets: it
// compiles the snapshots before and after the change with a Compiler of
// its own (incrementally, so a one-object change costs what an event's
// compile does) and reads the difference of the two tables.
type peerOracle struct {
	c    *enforcer.Compiler
	last *k8s.Snapshot // what c compiled last
	prev *nft.Table    // and the table it returned
}

func newPeerOracle() *peerOracle {
	return &peerOracle{c: enforcer.NewCompiler(enforcer.Options{Node: node})}
}

// isPeerSet reports whether s is a set of addresses (peer pods, in
// interval sets with the ipBlocks), not a verdict map (dispatch) or an
// address . protocol . port set (named ports).
func isPeerSet(s *nft.Set) bool {
	return !s.Verdict && (s.Key == nft.KeyIPv4 || s.Key == nft.KeyIPv6)
}

// compile compiles snap unless it was the last one compiled, and returns
// its table.
func (o *peerOracle) compile(snap *k8s.Snapshot) *nft.Table {
	if snap != o.last {
		o.prev, _ = o.c.Compile(snap, 0)
		o.last = snap
	}
	return o.prev
}

// addresses returns the addresses in the peer sets of snap's table.
func (o *peerOracle) addresses(snap *k8s.Snapshot) (*netipx.IPSet, error) {
	var b netipx.IPSetBuilder
	for _, s := range o.compile(snap).Sets {
		if isPeerSet(s) {
			for _, e := range s.Elements {
				b.AddRange(elementRange(e))
			}
		}
	}
	return b.IPSet()
}

// moved reports whether addr (none: netip.Addr{}) enters a peer set and
// whether it leaves one from the table of from to that of to, and whether
// any peer set's addresses change at all.
func (o *peerOracle) moved(from, to *k8s.Snapshot, addr netip.Addr) (entered, left, changed bool) {
	before := o.compile(from)
	o.compile(to)
	d := o.c.Delta()
	for _, u := range d.UpdateSets {
		if !isPeerSet(u.New) {
			continue
		}
		changed = true
		in, out := contains(u.Old.Elements, addr), contains(u.New.Elements, addr)
		entered = entered || !in && out
		left = left || in && !out
	}
	for _, s := range d.AddSets {
		if isPeerSet(s) && len(s.Elements) > 0 {
			changed = true
			entered = entered || contains(s.Elements, addr)
		}
	}
	for _, s := range before.Sets {
		if isPeerSet(s) && len(s.Elements) > 0 && slices.Contains(d.DeleteSets, s.Name) {
			changed = true
			left = left || contains(s.Elements, addr)
		}
	}
	return entered, left, changed
}

// elementRange is the addresses of an element: Addr, or Addr to Last in
// an interval set.
func elementRange(e nft.Element) netipx.IPRange {
	if e.Last.IsValid() {
		return netipx.IPRangeFrom(e.Addr, e.Last)
	}
	return netipx.IPRangeFrom(e.Addr, e.Addr)
}

// contains reports whether an element of elems holds addr.
func contains(elems []nft.Element, addr netip.Addr) bool {
	return addr.IsValid() && slices.ContainsFunc(elems, func(e nft.Element) bool { return elementRange(e).Contains(addr) })
}

// podAddr is the pod's first address, the one in IPv4 peer sets.
func podAddr(p *k8s.Pod) netip.Addr {
	a, _ := netip.ParseAddr(p.Status.PodIPs[0].IP)
	return a
}

// Snapshot lists are sorted by namespace and name; these helpers return
// new lists, leaving the one given (which the syncer may hold) as it was.

type named interface {
	GetNamespace() string
	GetName() string
}

// find returns where namespace/name is or would go in list.
func find[T named](list []T, namespace, name string) (int, bool) {
	return slices.BinarySearchFunc(list, [2]string{namespace, name}, func(o T, key [2]string) int {
		return cmp.Or(cmp.Compare(o.GetNamespace(), key[0]), cmp.Compare(o.GetName(), key[1]))
	})
}

// withInserted returns a copy of list with o at its sorted place.
func withInserted[T named](list []T, o T) ([]T, error) {
	i, found := find(list, o.GetNamespace(), o.GetName())
	if found {
		return nil, fmt.Errorf("%s/%s exists already", o.GetNamespace(), o.GetName())
	}
	out := make([]T, 0, len(list)+1)
	out = append(out, list[:i]...)
	out = append(out, o)
	return append(out, list[i:]...), nil
}

// withDeleted returns a copy of list without namespace/name.
func withDeleted[T named](list []T, namespace, name string) ([]T, error) {
	i, found := find(list, namespace, name)
	if !found {
		return nil, fmt.Errorf("no %s/%s to delete", namespace, name)
	}
	out := make([]T, 0, len(list)-1)
	out = append(out, list[:i]...)
	return append(out, list[i+1:]...), nil
}

// withEdited returns a copy of list with namespace/name replaced by what
// edit returns for it; edit must return a new object, not modify it.
func withEdited[T named](list []T, namespace, name string, edit func(T) T) ([]T, error) {
	i, found := find(list, namespace, name)
	if !found {
		return nil, fmt.Errorf("no %s/%s to edit", namespace, name)
	}
	out := slices.Clone(list)
	out[i] = edit(list[i])
	return out, nil
}
