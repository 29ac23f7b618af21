package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"strconv"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/nftpolicy/nftpolicy/enforcer"
	"github.com/nftpolicy/nftpolicy/k8s"
)

// config is every flag of every subcommand, parsed in one place.
type config struct {
	manifests        string
	kubeconfig       string
	inCluster        bool // no --manifests or --kubeconfig, and KUBERNETES_SERVICE_HOST is set
	node             string
	netns            string
	priority         enforcer.PrioritySetting
	markMask         uint32
	allowMarkOverlap bool
	allowEmpty       bool
	takeOver         bool
	force            bool // cleanup: even while a running nftpolicy owns the table
	conntrackCleanup bool
	denyUnknown      bool
	podCIDRs         []netip.Prefix
	table            string
	logLevel         zapcore.Level
	logFormat        string
	metricsAddr      string
	metricsGiven     bool // --metrics-addr given: failing to listen is an error
	profiling        bool // serve net/http/pprof beside the metrics
	counters         bool // --connection-counters
	walkPolicies     bool // --walk-policies
	flowLog          enforcer.FlowLog
	healthAddr       string
	poll             time.Duration
	rescan           time.Duration
	debounce         time.Duration
	maxDelay         time.Duration
	driftCheck       time.Duration
	explain          explainFlags
	doctor           doctorFlags
}

func parseFlags(cmd string, args []string, stderr io.Writer) (*config, error) {
	cfg := &config{table: enforcer.DefaultTable, logLevel: zapcore.InfoLevel, logFormat: "console", flowLog: enforcer.FlowLog{Group: defaultFlowLogGroup}}
	fs := flag.NewFlagSet("nftpolicy "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.netns, "netns", "", "network namespace to program: a name under /run/netns or a path (default: the current one); entering it (setns) needs CAP_SYS_ADMIN besides CAP_NET_ADMIN")
	fs.Func("log-level", "debug, info, warn or error; debug logs the rendered ruleset of every sync", func(s string) error {
		return cfg.logLevel.Set(s)
	})
	fs.Func("log-format", "console (tab-separated, the default) or json (one object a line)", func(s string) error {
		if s != "console" && s != "json" {
			return fmt.Errorf("want console or json")
		}
		cfg.logFormat = s
		return nil
	})
	if cmd == "cleanup" {
		fs.BoolVar(&cfg.force, "force", false, "delete the table even while a running nftpolicy owns it (it writes the table again at once: stop it first)")
		return cfg, fs.Parse(args)
	}
	fs.StringVar(&cfg.manifests, "manifests", "", "directory of Kubernetes YAML/JSON manifests (Namespace, Pod, Node, NetworkPolicy, ClusterNetworkPolicy)")
	fs.StringVar(&cfg.kubeconfig, "kubeconfig", "", "kubeconfig file of the API server to follow (default: in-cluster when $KUBERNETES_SERVICE_HOST is set)")
	fs.StringVar(&cfg.node, "node", "", "this node's name (default: $NODE_NAME, then the hostname)")
	prio := fs.String("priority", "auto", "forward chain priority: auto (ahead of every other filter chain) or a number")
	mask := fs.String("mark-mask", fmt.Sprintf("0x%08x", enforcer.DefaultMarkMask), "packet-mark bits nftpolicy may use")
	fs.BoolVar(&cfg.allowMarkOverlap, "allow-mark-overlap", false, "accept a --mark-mask that overlaps bits of a known component")
	if cmd == "run" || cmd == "apply" || cmd == "dump" || cmd == "doctor" { // dump and doctor compile the table as run and apply write it
		fs.BoolVar(&cfg.conntrackCleanup, "conntrack-cleanup", true, "after a change, revoke the established flows the new ruleset no longer allows (a conntrack mark its base chain drops), so they stop at their next packet, whichever end sends it; run also judges every flow again at each --drift-check. "+
			"false: established flows outlive the changes that deny them, and at start the entries an earlier run revoked are deleted, so that their next packet is judged as a new connection (one the server sends first is judged server to client)")
	}
	if cmd == "run" || cmd == "apply" || cmd == "dump" || cmd == "doctor" { // doctor compares with the table as run writes it
		fs.BoolVar(&cfg.counters, "connection-counters", true, "count, in a rule counter of the kernel, the connections each isolated pod is allowed and denied, and with --walk-policies those each policy allows (run serves them as metrics)")
		fs.BoolVar(&cfg.walkPolicies, "walk-policies", false, "judge a new connection by walking the chain of every policy selecting the pod, as before the flat layout: counts per policy, at about 80 ns per selecting policy on every new connection (namespaces with flow logs always walk)")
	}
	if cmd == "run" || cmd == "apply" || cmd == "dump" || cmd == "doctor" { // doctor compares with the table as run writes it
		fs.BoolVar(&cfg.flowLog.All, "flow-log", false, "log the first packet of each connection of every namespace, as the annotation "+k8s.FlowLogAnnotation+`: "true" does for one (run writes a line per connection)`)
		fs.Func("flow-log-group", "the nflog group flow logs go to; 0 turns them off, annotations included. Only one process can read a group in a network namespace (default 100)", func(s string) error {
			v, err := strconv.ParseUint(s, 0, 16)
			cfg.flowLog.Group = uint16(v)
			return err
		})
		fs.Func("flow-log-rate", fmt.Sprintf("connections a second each logging rule logs at most, after a burst of twice as many; the kernel drops the rest of the lines, never the traffic (default %d)", enforcer.DefaultFlowLogRate), func(s string) error {
			v, err := strconv.ParseUint(s, 0, 32)
			if err == nil && v == 0 {
				err = errors.New("want a positive rate (--flow-log-group=0 turns flow logs off)")
			}
			cfg.flowLog.Rate = uint32(v)
			return err
		})
	}
	if cmd == "run" || cmd == "apply" {
		fs.BoolVar(&cfg.takeOver, "take-over", false, "write over a table another running nftpolicy owns (its owner record is the table's comment); that daemon stops writing and goes unready until this one is gone, then takes the table back (after apply, at once)")
	}
	fs.BoolVar(&cfg.denyUnknown, "default-deny-unknown", false, "drop forwarded traffic from or to an address of this node's pod CIDRs that is no known pod, until the pod is known")
	fs.Func("pod-cidr", "this node's pod CIDR for --default-deny-unknown (repeatable; default: the Node's spec.podCIDRs)", func(s string) error {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return err
		}
		if p != p.Masked() {
			return fmt.Errorf("%s has host bits set (did you mean %s?)", s, p.Masked())
		}
		cfg.podCIDRs = append(cfg.podCIDRs, p)
		return nil
	})
	fs.BoolVar(&cfg.allowEmpty, "allow-empty", false, "program an empty table when --manifests holds no objects, which enforces nothing (without it apply and dump fail, and run keeps the last programmed state); under run, also program a directory that comes back without any NetworkPolicy after it was removed or emptied")
	if cmd == "doctor" {
		fs.BoolVar(&cfg.doctor.json, "json", false, "print the report as JSON (fields in the doctor package's documentation)")
	}
	if cmd == "explain" {
		fs.StringVar(&cfg.explain.from, "from", "", "the connection's source: an address, or namespace/pod")
		fs.StringVar(&cfg.explain.to, "to", "", "the connection's destination: an address, or namespace/pod")
		fs.StringVar(&cfg.explain.proto, "proto", "tcp", "tcp, udp or sctp")
		fs.UintVar(&cfg.explain.port, "port", 0, "the destination port")
	}
	if cmd == "run" {
		fs.StringVar(&cfg.healthAddr, "health-addr", "", "serve /healthz and /readyz on this address, e.g. 127.0.0.1:9808")
		fs.StringVar(&cfg.metricsAddr, "metrics-addr", defaultMetricsAddr, "serve Prometheus metrics at /metrics on this address (empty: not at all)")
		fs.BoolVar(&cfg.profiling, "profiling", false, "serve Go profiles at /debug/pprof/ on --metrics-addr (heap, CPU, goroutines: for diagnosing memory and time at scale)")
		fs.DurationVar(&cfg.poll, "poll", 200*time.Millisecond, "how long a manifest written in place (not renamed in) must stay untouched before it is loaded, and how often to poll the directory where inotify cannot be set up (a file renamed into the directory is loaded at once)")
		fs.DurationVar(&cfg.rescan, "rescan", 10*time.Second, "how often to read every manifest anyway, for changes inotify does not report (a network filesystem written from elsewhere, a link into another directory, lost events)")
		fs.DurationVar(&cfg.debounce, "debounce", enforcer.DefaultDebounce, "a change after a quiet period is synced at once; changes within this long after a sync are merged into one sync when it ends (a burst costs a batch per window)")
		fs.DurationVar(&cfg.maxDelay, "max-delay", enforcer.DefaultMaxDelay, "sync at most this long after the first change of a burst")
		fs.DurationVar(&cfg.driftCheck, "drift-check", 30*time.Second, "how often to read the table back and repair it if it drifted (0: never)")
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	fs.Visit(func(f *flag.Flag) { cfg.metricsGiven = cfg.metricsGiven || f.Name == "metrics-addr" })
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if len(cfg.podCIDRs) > 0 && !cfg.denyUnknown {
		return nil, errors.New("--pod-cidr is only read with --default-deny-unknown")
	}
	if cmd == "run" {
		if err := cfg.checkDurations(); err != nil {
			return nil, err
		}
	}
	// The source: --manifests or --kubeconfig, else in-cluster when the
	// kubelet has told us where the API server is.
	switch {
	case cfg.manifests != "" && cfg.kubeconfig != "":
		return nil, errors.New("--manifests and --kubeconfig are exclusive")
	case cfg.manifests == "" && cfg.kubeconfig == "" && cmd == "doctor":
		// The doctor compares the table's content only with a source it is
		// given: it reads, and does not wait for an API server it was not
		// pointed at.
	case cfg.manifests == "" && cfg.kubeconfig == "":
		if os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
			return nil, errors.New("--manifests is required (or --kubeconfig, or run in a pod with $KUBERNETES_SERVICE_HOST set)")
		}
		cfg.inCluster = true
	}
	// An empty node name given on purpose is a configuration mistake (the
	// systemd environment file ships NODE_NAME= for the operator to fill
	// in), not a request for the hostname: a wrong node enforces nothing.
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "node" })
	env, envSet := os.LookupEnv("NODE_NAME")
	switch {
	case given && cfg.node == "":
		return nil, errors.New("--node is empty: give this node's name as in `kubectl get nodes`")
	case given:
	case envSet && env == "":
		return nil, errors.New("$NODE_NAME is set but empty: set it to this node's name as in `kubectl get nodes` (in /etc/default/nftpolicy under systemd), or unset it to use the hostname")
	default:
		cfg.node = env
	}
	if cfg.node == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("--node not given, $NODE_NAME empty, and no hostname: %w", err)
		}
		cfg.node = h
	}
	if *prio == "auto" {
		cfg.priority.Auto = true
	} else {
		v, err := strconv.ParseInt(*prio, 0, 32)
		if errors.Is(err, strconv.ErrRange) {
			return nil, fmt.Errorf("--priority %q: out of range: a priority is a 32-bit signed number (%d to %d)", *prio, math.MinInt32, math.MaxInt32)
		}
		if err != nil {
			return nil, fmt.Errorf("--priority %q: want auto or a number", *prio)
		}
		cfg.priority.Value = int32(v)
	}
	m, err := strconv.ParseUint(*mask, 0, 32)
	if err != nil {
		return nil, fmt.Errorf("--mark-mask %q: want a 32-bit mask such as 0x%08x: %w", *mask, enforcer.DefaultMarkMask, err)
	}
	cfg.markMask = uint32(m)
	// The doctor reports a mask that overlaps a known component's bits
	// rather than refuse it.
	if err := enforcer.CheckMarkMask(cfg.markMask, cfg.allowMarkOverlap || cmd == "doctor"); err != nil {
		return nil, err
	}
	return cfg, nil
}

// checkDurations refuses durations the loops cannot run with: a ticker of a
// non-positive interval panics, and a negative wait means nothing.
func (c *config) checkDurations() error {
	for _, d := range []struct {
		flag     string
		v        time.Duration
		zeroOK   bool
		zeroMean string
	}{
		{"--poll", c.poll, false, ""},
		{"--rescan", c.rescan, false, ""},
		{"--debounce", c.debounce, true, ""},
		{"--max-delay", c.maxDelay, true, ""},
		{"--drift-check", c.driftCheck, true, " (0 turns it off)"},
	} {
		if d.v < 0 || d.v == 0 && !d.zeroOK {
			want := "positive"
			if d.zeroOK {
				want = "zero or positive"
			}
			return fmt.Errorf("%s %v: want a %s duration%s", d.flag, d.v, want, d.zeroMean)
		}
	}
	return nil
}

func newLogger(w io.Writer, level zapcore.Level, format string) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	encoder := zapcore.NewConsoleEncoder(enc)
	if format == "json" {
		encoder = zapcore.NewJSONEncoder(enc)
	}
	core := zapcore.NewCore(encoder, zapcore.AddSync(w), level)
	return zap.New(core)
}

func (c *config) options() enforcer.Options {
	return enforcer.Options{Node: c.node, Table: c.table, MarkMask: c.markMask, TakeOver: c.takeOver, DenyUnknown: c.denyUnknown, PodCIDRs: c.podCIDRs,
		Revoke:   c.conntrackCleanup, // the cleanup marks what the table then drops
		Counters: c.counters, WalkPolicies: c.walkPolicies, FlowLog: c.flowLog,
		DeferUnions: true} // run merges them when quiet (Syncer.Run); apply compiles once and never defers
}

// source names where snapshots come from, for logs.
func (c *config) source() string {
	switch {
	case c.manifests != "":
		return "manifests " + c.manifests
	case c.inCluster:
		return "in-cluster API server"
	}
	return "kubeconfig " + c.kubeconfig
}
