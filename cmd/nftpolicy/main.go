package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"

	"github.com/nftpolicy/nftpolicy/conntrack"
	"github.com/nftpolicy/nftpolicy/enforcer"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

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
	counters         bool // --connection-counters
	flowLog          enforcer.FlowLog
	healthAddr       string
	poll             time.Duration
	debounce         time.Duration
	maxDelay         time.Duration
	driftCheck       time.Duration
	explain          explainFlags
	doctor           doctorFlags
}

const usage = `usage: nftpolicy <command> [flags]

commands:
  apply    program the ruleset for this node's pods once, then exit
  run      program the ruleset and keep it in step with the cluster or the manifests
  dump     print the ruleset apply would program, as nft text
  explain  say why a connection is allowed or dropped on this node: the policies and rules deciding it
  doctor   check, read-only, what shares the hooks and marks with nftpolicy, its table and the kernel's features
  cleanup  delete nftpolicy's table (refused while a running daemon owns it, unless --force)
  version  print the version

run 'nftpolicy <command> -h' for the flags of a command.
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "nftpolicy %s\n", version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	case "apply", "run", "dump", "explain", "cleanup", "doctor":
	default:
		fmt.Fprintf(stderr, "nftpolicy: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	cfg, err := parseFlags(cmd, args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "nftpolicy %s: %v\n", cmd, err)
		return 2
	}
	log := newLogger(stderr, cfg.logLevel, cfg.logFormat)
	defer log.Sync()
	// client-go logs through klog: into our logger, so every line has one
	// format. klog's verbosity V(n) is zap level -n, below Debug: dropped.
	klog.SetLogger(zapr.NewLogger(log))

	switch cmd {
	case "dump":
		err = dump(cfg, stdout, log)
	case "explain":
		err = explain(cfg, stdout, log)
	case "doctor":
		err = runDoctor(cfg, stdout, log)
	case "apply":
		err = apply(cfg, log)
	case "run":
		err = runDaemon(cfg, log)
	case "cleanup":
		err = cleanup(cfg, log)
	}
	if err != nil {
		fmt.Fprintf(stderr, "nftpolicy %s: %v\n", cmd, err)
		if errors.Is(err, syscall.EPERM) {
			fmt.Fprintf(stderr, "nftpolicy %s: the kernel refused: nftpolicy needs CAP_NET_ADMIN (and CAP_SYS_ADMIN to enter another namespace with --netns)\n", cmd)
		}
		var partial *partialError
		if errors.As(err, &partial) {
			return exitPartial
		}
		return 1
	}
	return 0
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
	fs.StringVar(&cfg.manifests, "manifests", "", "directory of Kubernetes YAML/JSON manifests (Namespace, Pod, Node, NetworkPolicy)")
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
		fs.BoolVar(&cfg.counters, "connection-counters", true, "count, in a rule counter of the kernel, the connections each policy allows and each isolated pod is denied (run serves them as metrics)")
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
		fs.DurationVar(&cfg.poll, "poll", 200*time.Millisecond, "how often to check the manifests directory for changes")
		fs.DurationVar(&cfg.debounce, "debounce", 100*time.Millisecond, "a change after a quiet period is synced at once; changes within this long after a sync are merged into one sync when it ends (a burst costs a batch per window)")
		fs.DurationVar(&cfg.maxDelay, "max-delay", time.Second, "sync at most this long after the first change of a burst")
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
		Counters: c.counters, FlowLog: c.flowLog}
}

// load reads the manifests, or lists the API server, logging every object
// it had to leave out. Manifests that hold no object are an error unless
// --allow-empty is given: an empty table enforces nothing.
func load(cfg *config, log *zap.Logger) (*k8s.Snapshot, []*k8s.ObjectError, error) {
	if cfg.manifests == "" {
		ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer cancel()
		in, err := startInformers(ctx, cfg, log, nil)
		if err != nil {
			return nil, nil, err
		}
		return in.Snapshot(), nil, nil
	}
	snap, objErrs, err := k8s.LoadDir(cfg.manifests)
	if err != nil {
		return nil, nil, err
	}
	logObjectErrors(log, objErrs)
	if isEmpty(snap) {
		if !cfg.allowEmpty {
			return nil, nil, fmt.Errorf("%s holds no objects (%d skipped): an empty table enforces nothing; give --allow-empty if that is meant", cfg.manifests, len(objErrs))
		}
		log.Warn("the manifests hold no objects: the table enforces nothing (--allow-empty)", zap.String("dir", cfg.manifests))
	}
	return snap, objErrs, nil
}

// isEmpty reports whether a snapshot holds no object at all: an empty
// directory, or one whose files hold nothing usable.
func isEmpty(snap *k8s.Snapshot) bool {
	return len(snap.Namespaces)+len(snap.Pods)+len(snap.Nodes)+len(snap.Policies) == 0
}

// logObjectErrors logs each manifest object left out or kept at its last
// good version. Kinds nftpolicy does not read (a Service, a Deployment) are
// logged at info level: a directory may be shared with other manifests.
func logObjectErrors(log *zap.Logger, objErrs []*k8s.ObjectError) {
	for _, e := range objErrs {
		fields := []zap.Field{k8s.NameField("at", e.Location()), k8s.NameField("object", e.Object()), k8s.ErrorField(e.Err)}
		switch {
		case e.KeptLastGood:
			log.Warn("rejected a manifest object; its last good version stays in effect", fields...)
		case e.StandIn:
			log.Warn("rejected a manifest object; a stand-in that fails closed is in effect", fields...)
		case errors.Is(e, k8s.ErrUnsupportedKind):
			log.Info("ignored a manifest object of a kind nftpolicy does not read", fields...)
		case errors.Is(e, k8s.ErrIdenticalDuplicate):
			log.Warn("a manifest object is defined more than once, identically; it is used once", fields...)
		default:
			log.Warn("skipped a manifest object", fields...)
		}
	}
}

// maxReadyObjects bounds the objects /readyz names.
const maxReadyObjects = 5

// lostObjects returns why a load may lack objects that nothing stands for
// (see watchManifests): files that cannot be read (dirErr), and the object
// errors that are Lost, the first few named and the rest counted; nil when
// there is none.
func lostObjects(dirErr error, objErrs []*k8s.ObjectError) error {
	var problems []error
	if dirErr != nil {
		problems = append(problems, dirErr)
	}
	n := 0
	for _, e := range objErrs {
		if !e.Lost() {
			continue
		}
		if n++; n <= maxReadyObjects {
			problems = append(problems, errors.New(k8s.Shorten(e.Error(), 256)))
		}
	}
	if n > maxReadyObjects {
		problems = append(problems, fmt.Errorf("and %d more", n-maxReadyObjects))
	}
	if len(problems) == 0 {
		return nil
	}
	return oneLine(problems)
}

// oneLine joins errors with "; ".
type oneLine []error

func (o oneLine) Error() string {
	msgs := make([]string, len(o))
	for i, e := range o {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

func (o oneLine) Unwrap() []error { return o }

// notAsWritten returns the source problem of the object errors that make
// what is enforced differ from the files (every one but a Warning): the
// first few named, and how many there are; nil when there is none.
func notAsWritten(objErrs []*k8s.ObjectError) error {
	var lines []string
	n := 0
	for _, e := range objErrs {
		if e.Warning() {
			continue
		}
		if n++; n <= maxReadyObjects {
			lines = append(lines, k8s.Shorten(e.Error(), 512))
		}
	}
	if n == 0 {
		return nil
	}
	if n > maxReadyObjects {
		lines = append(lines, fmt.Sprintf("and %d more", n-maxReadyObjects))
	}
	return fmt.Errorf("manifest objects skipped or kept at their last good version (%d), so what is enforced is not what the files say; the rest is in effect:\n  %s",
		n, strings.Join(lines, "\n  "))
}

// maxListedNodes bounds the node names an unknown-node warning lists.
const maxListedNodes = 10

// unknownNode returns an error when no Node object and no pod's
// spec.nodeName carries node: nothing would be enforced, which almost
// always means a wrong --node or $NODE_NAME. It lists the names the source
// does know, at most maxListedNodes of them.
func unknownNode(node string, snap *k8s.Snapshot) error {
	known := map[string]bool{}
	for _, n := range snap.Nodes {
		known[n.Name] = true
	}
	for _, p := range snap.Pods {
		if p.Spec.NodeName != "" {
			known[p.Spec.NodeName] = true
		}
	}
	if known[node] {
		return nil
	}
	names := slices.Sorted(maps.Keys(known))
	list := "none"
	if len(names) > 0 {
		shown := names[:min(len(names), maxListedNodes)]
		for i, n := range shown {
			shown[i] = strconv.Quote(k8s.Shorten(n, 64))
		}
		list = strings.Join(shown, ", ")
		if more := len(names) - len(shown); more > 0 {
			list += fmt.Sprintf(" and %d more", more)
		}
	}
	return fmt.Errorf("node %q matches no Node and no pod, so nothing is enforced on it; check --node or $NODE_NAME (nodes known: %s)", k8s.Shorten(node, 256), list)
}

// exitPartial is the exit code of apply and dump when they programmed or
// printed the ruleset but left something out; 1 is "nothing programmed".
const exitPartial = 3

// A partialError lists what apply or dump left out of what it did.
type partialError struct{ summary string }

func (e *partialError) Error() string { return e.summary }

// maxSummaryLine bounds each line of a partialError: a name can be 20 KB.
const maxSummaryLine = 1024

// leftOut returns a partialError naming every manifest object and every
// part of the snapshot that was skipped, and an unknown node; nil when
// nothing was. Warnings (kinds nftpolicy does not read, identical
// duplicates) are not counted.
func leftOut(objErrs []*k8s.ObjectError, problems []enforcer.Problem, nodeErr error) error {
	var lines []string
	for _, e := range objErrs {
		if !e.Warning() {
			lines = append(lines, k8s.Shorten(e.Error(), maxSummaryLine))
		}
	}
	for _, p := range problems {
		lines = append(lines, k8s.Shorten(p.Error(), maxSummaryLine))
	}
	var parts []string
	if nodeErr != nil {
		parts = append(parts, nodeErr.Error())
	}
	if len(lines) > 0 {
		parts = append(parts, fmt.Sprintf("%d skipped (the rest is in effect):\n  %s", len(lines), strings.Join(lines, "\n  ")))
	}
	if len(parts) == 0 {
		return nil
	}
	return &partialError{strings.Join(parts, "\n")}
}

// checkNode warns about an unknown node in a snapshot that holds objects.
func checkNode(cfg *config, snap *k8s.Snapshot, log *zap.Logger) error {
	if isEmpty(snap) {
		return nil
	}
	err := unknownNode(cfg.node, snap)
	if err != nil {
		log.Warn("this node is unknown to the source", k8s.NameField("node", cfg.node), k8s.ErrorField(err))
	}
	return err
}

func dump(cfg *config, stdout io.Writer, log *zap.Logger) error {
	snap, objErrs, err := load(cfg, log)
	if err != nil {
		return err
	}
	nodeErr := checkNode(cfg, snap, log)
	opts := cfg.options()
	// dump never touches the kernel: an auto priority is shown as it would
	// be with no other chain on the hook.
	if opts.Priority, err = enforcer.ResolvePriority(nil, cfg.priority, opts.Table, log); err != nil {
		return err
	}
	table, problems := enforcer.Compile(snap, opts)
	enforcer.LogProblems(log, problems)
	if _, err := io.WriteString(stdout, nft.Render(table)); err != nil {
		return err
	}
	return leftOut(objErrs, problems, nodeErr)
}

func apply(cfg *config, log *zap.Logger) error {
	snap, objErrs, err := load(cfg, log)
	if err != nil {
		return fmt.Errorf("nothing programmed: %w", err)
	}
	nodeErr := checkNode(cfg, snap, log)
	conn, err := nft.Open(cfg.netns)
	if err != nil {
		return fmt.Errorf("nothing programmed: %w", err)
	}
	defer conn.Close()
	opts := cfg.options()
	if opts.Priority, err = enforcer.ResolvePriority(conn, cfg.priority, opts.Table, log); err != nil {
		return fmt.Errorf("nothing programmed: %w", err)
	}
	// A one-shot compile, not a Syncer: nothing keeps the snapshot or the
	// compiler's indexes, so the decoded cluster can be collected while the
	// batch, the other peak of a large apply, is built and sent (at 10k
	// policies the peak RSS went from 450 to 260 MB).
	table, problems := enforcer.Compile(snap, opts)
	enforcer.LogProblems(log, problems)
	start := time.Now()
	// Not over a table a running daemon owns, unless told to take over.
	batch, err := enforcer.ApplyOnce(conn, table, cfg.takeOver, log)
	if err != nil {
		return fmt.Errorf("nothing programmed: %w", err)
	}
	var cleanErr error
	if cfg.conntrackCleanup {
		// What was programmed before is not known here: every established
		// flow the new table denies is stopped. The table is programmed
		// either way: a failure is part of the exit-3 summary, not exit 1
		// ("nothing programmed").
		cleanErr = cleanConntrack(cfg.netns, table, log)
	} else {
		// After the write, not before: a refused one must leave a running
		// daemon's revoked connections as they are.
		forgetRevoked(cfg, log)
	}
	log.Info("programmed table", zap.String("table", "inet "+table.Name), zap.Int32("priority", opts.Priority),
		zap.Int("messages", batch.Messages), zap.Duration("apply", time.Since(start)))
	return leftOut(objErrs, problems, errors.Join(nodeErr, cleanErr))
}

// releaseAfterFirstSync hands the memory of the first sync back to the
// kernel once it is done. Decoding the whole cluster and writing the whole
// table is a peak (at 10k policies, a few hundred MB) the daemon never
// reaches again, and the Go runtime would otherwise return it only
// gradually, leaving the node's memory accounting showing the peak.
func releaseAfterFirstSync(ctx context.Context, s *enforcer.Syncer) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if gen, _ := s.Status(); gen > 0 {
				debug.FreeOSMemory()
				return
			}
		}
	}
}

// cleanup deletes the table, unless a running nftpolicy owns it: that
// daemon would write it again within a moment, so it must be stopped
// first (--force deletes it anyway, with a warning).
func cleanup(cfg *config, log *zap.Logger) error {
	conn, err := nft.Open(cfg.netns)
	if err != nil {
		return err
	}
	defer conn.Close()
	return enforcer.Cleanup(conn, cfg.table, cfg.force, log)
}

// runDaemon programs the manifests and follows their changes until SIGTERM
// or SIGINT. The table stays in the kernel when it exits: pods stay
// protected across restarts and upgrades.
func runDaemon(cfg *config, log *zap.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	conn, err := nft.Open(cfg.netns)
	if err != nil {
		return err
	}
	defer conn.Close()
	s := enforcer.NewSyncer(conn, cfg.options(), cfg.priority, log)
	// One owner per table: a second daemon on this netns is refused here,
	// before it serves health or writes anything, unless --take-over.
	if err := s.Claim(); err != nil {
		return err
	}
	defer s.Close()
	if cfg.conntrackCleanup {
		cl, err := conntrack.Open(cfg.netns)
		if err != nil {
			return fmt.Errorf("--conntrack-cleanup (turn it off with --conntrack-cleanup=false): %w", err)
		}
		defer cl.Close()
		s.FollowConntrack(cl)
	} else {
		// Before our first write, while the table an earlier run left still
		// drops them: no moment in which they pass.
		forgetRevoked(cfg, log)
	}
	src := &sourceState{}
	var flowMetrics *flowLogMetrics
	if cfg.flowLog.Group != 0 {
		flowMetrics = newFlowLogMetrics()
		fl := &flowLogger{netns: flowNetns(cfg.netns), group: cfg.flowLog.Group, res: enforcer.NewFlowResolver(s), log: log, metrics: flowMetrics}
		go fl.run(ctx)
	}

	if cfg.metricsAddr != "" {
		stop, err := serveMetrics(cfg.metricsAddr, cfg.metricsGiven, newMetrics(s, cfg.counters, log, flowMetrics), log)
		if err != nil {
			return err
		}
		defer stop()
	}

	if cfg.healthAddr != "" {
		ln, err := net.Listen("tcp", cfg.healthAddr)
		if err != nil {
			return fmt.Errorf("--health-addr: %w", err)
		}
		srv := &http.Server{Handler: healthHandler(s, src), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
		log.Info("serving health", zap.String("addr", ln.Addr().String()))
	}

	log.Info("running", zap.String("node", cfg.node), zap.String("source", cfg.source()), zap.String("netns", cfg.netns))
	var updates <-chan *k8s.Snapshot
	if cfg.manifests == "" {
		in, err := startInformers(ctx, cfg, log, src)
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped before the caches synced
			}
			return err
		}
		updates = checkSnapshots(ctx, cfg, log, src, in)
	} else {
		// A table already in the kernel is what the daemon before this one
		// programmed (a restart, kill -9, an upgrade): the last good state.
		_, err := conn.TableComment(cfg.table)
		if err != nil && !errors.Is(err, nft.ErrNoTable) {
			// Not knowing must not turn the restart protection off.
			return fmt.Errorf("read table inet %s: %w", cfg.table, err)
		}
		programmed := err == nil
		var tampered <-chan struct{}
		if programmed {
			// Ask the kernel to say when anyone else commits to the table
			// kept at the start, while it is kept.
			m, err := conn.Monitor(cfg.table)
			if err != nil {
				return fmt.Errorf("follow commits to table inet %s: %w", cfg.table, err)
			}
			defer m.Close()
			tampered = m.Foreign()
		}
		updates = watchManifests(ctx, cfg, log, src, programmed, tampered)
	}
	go releaseAfterFirstSync(ctx, s)
	// Run returns an error (ErrOwned) when another daemon started with this
	// one and wrote the table first: exit 1, as when started second.
	if err := s.Run(ctx, updates, enforcer.Timing{
		Debounce: cfg.debounce, MaxDelay: cfg.maxDelay, Retry: time.Second, DriftCheck: cfg.driftCheck,
	}); err != nil {
		return err
	}
	log.Info("stopping; the ruleset stays programmed")
	return nil
}

// A sourceState is the source's side of /readyz: why the snapshots it hands
// the Syncer are not the source's current, complete content, or why they
// enforce nothing. The Syncer reports its own side (Syncer.Status).
type sourceState struct {
	mu  sync.Mutex
	err error
}

func (st *sourceState) set(err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.err = err
}

func (st *sourceState) get() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.err
}

// sourceProblems joins the problems of a source under its name, e.g.
// "manifests source: /etc/nftpolicy/manifests: ..."; nil when there are none.
func sourceProblems(source string, problems ...error) error {
	if err := errors.Join(problems...); err != nil {
		return fmt.Errorf("%s: %w", source, err)
	}
	return nil
}

// A nodeWatch checks each snapshot for an unknown --node and logs when
// that changes, not at every snapshot.
type nodeWatch struct {
	node string
	log  *zap.Logger
	err  error
}

func (nw *nodeWatch) check(snap *k8s.Snapshot) error {
	var err error
	if !isEmpty(snap) {
		err = unknownNode(nw.node, snap)
	}
	switch {
	case err != nil && (nw.err == nil || nw.err.Error() != err.Error()):
		nw.log.Warn("this node is unknown to the source: nothing is enforced on it", k8s.NameField("node", nw.node), k8s.ErrorField(err))
	case err == nil && nw.err != nil:
		nw.log.Info("this node is known to the source again", k8s.NameField("node", nw.node))
	}
	nw.err = err
	return err
}

// checkSnapshots passes on the informers' snapshots, and keeps src telling
// why they may not be the API server's current content or enforce nothing
// here:
//
//   - a list or watch that fails (k8s.Informers.Health: the API server is
//     unreachable, or refuses us) makes the daemon not ready, naming the
//     API server and the error, until every informer has caught up again
//     (relisted, or resumed its watch without a gap). The table keeps the
//     last state meanwhile. The informers log the failure with backoff;
//   - an unknown node is logged and makes the daemon not ready.
func checkSnapshots(ctx context.Context, cfg *config, log *zap.Logger, src *sourceState, in *k8s.Informers) <-chan *k8s.Snapshot {
	out := make(chan *k8s.Snapshot)
	snapshots := in.Watch(ctx)
	go func() {
		nw := &nodeWatch{node: cfg.node, log: log}
		var nodeErr error
		for {
			changed, healthErr := in.Health()
			src.set(sourceProblems("API source", healthErr, nodeErr))
			select {
			case <-changed:
			case snap, ok := <-snapshots:
				if !ok {
					return
				}
				nodeErr = nw.check(snap)
				_, healthErr = in.Health()
				src.set(sourceProblems("API source", healthErr, nodeErr))
				select {
				case out <- snap:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// watchManifests turns the directory's changes into snapshots for the
// Syncer, and keeps src telling why they are not the directory's current
// content.
//
//   - A file or the directory that cannot be read or parsed keeps its last
//     good objects (k8s.WatchDir); the error is logged each time WatchDir
//     repeats it, with backoff, and makes the daemon not ready.
//   - A directory that holds no object (recreated empty, every file
//     removed) is not programmed without --allow-empty: an empty table
//     opens every pod. The last programmed state stays, and the daemon is
//     not ready until objects come back.
//   - Every NetworkPolicy gone at once, where the last programmed load held
//     some, is logged as an error naming how many (more than half of them
//     gone, as a warning). It is programmed: deleting every policy is a
//     legitimate change (the data-plane suite resets this way between
//     cases), and nothing tells it apart from a mistake. Except after the
//     directory was removed or emptied (states not programmed, see above):
//     a directory that comes back without any policy is most likely partly
//     restored, and dropping every policy opens every pod, so without
//     --allow-empty such a load is treated like an empty one: the last
//     programmed state stays and the daemon is not ready until a policy
//     comes back. A restore faster than two polls is not seen as one; a
//     restart has nothing to compare with.
//   - Objects rejected or duplicated (k8s.ObjectError that is not a
//     Warning) make the daemon not ready, naming the first few: what is
//     enforced (the rest, and the last good versions WatchDir keeps) is not
//     what the files say until they are fixed.
//   - An unknown --node is logged and makes the daemon not ready.
//
// When a table was programmed before this daemon started (held), the first
// load is sent only once nothing it lacks could open a pod: a restart has
// no last good version of an object to fall back on, so a file that cannot
// be read or does not parse, a document whose kind or name cannot be read,
// a kind typo, a Namespace with an invalid name or a rejected Node would
// drop objects that nothing stands for (k8s.ObjectError.Lost). Until then
// the table from before the restart (the last good state) stays, and the
// daemon is not ready, naming those errors. Errors whose objects have a
// stand-in that fails closed (k8s.ObjectError.StandIn: a rejected or
// differing NetworkPolicy isolates and allows nothing; a rejected Pod is
// kept at its addresses and quarantined when its labels are not all known,
// and one whose copies disagree on its address is quarantined at each; a
// rejected Namespace is quarantined, so no selector of its labels names
// its pods) do not
// hold it: the current manifests are programmed at once, so that valid
// changes (a new deny) take effect, and the daemon stays not ready naming
// the errors, as above.
func watchManifests(ctx context.Context, cfg *config, log *zap.Logger, src *sourceState, held bool, tampered <-chan struct{}) <-chan *k8s.Snapshot {
	snapshots := make(chan *k8s.Snapshot)
	go func() {
		nw := &nodeWatch{node: cfg.node, log: log}
		var seen, sent *k8s.Snapshot // last from WatchDir, last to the Syncer
		// emptied: since the last snapshot sent, the directory could not be
		// listed or held no object.
		emptied := false
		var nodeErr error      // of the last snapshot sent
		var last k8s.DirUpdate // the newest update, handled again when the hold ends
		// handle takes one update; false when ctx ended.
		handle := func(u k8s.DirUpdate) bool {
			last = u
			var problems []error
			if u.Err != nil {
				// Metrics: count source errors here once the daemon has
				// metrics (nftpolicy_source_errors_total{source="manifests"}).
				log.Error("cannot read all of the manifests; what cannot be read keeps its last good objects",
					zap.String("dir", cfg.manifests), k8s.ErrorField(u.Err))
				problems = append(problems, u.Err)
			}
			objErr := notAsWritten(u.Errors)
			problems = append(problems, objErr)
			snap := u.Snapshot
			if u.Unlisted || snap != nil && isEmpty(snap) {
				emptied = true
			}
			// Every policy gone at once, but not every object.
			var vanished int
			if snap != nil && !isEmpty(snap) && len(snap.Policies) == 0 && sent != nil {
				vanished = len(sent.Policies)
			}
			if snap != nil && snap != seen {
				seen = snap
				logObjectErrors(log, u.Errors)
				switch {
				case vanished > 0 && emptied && !cfg.allowEmpty:
					log.Error("the manifests came back without any NetworkPolicy after the directory was removed or emptied; keeping the last programmed state until one comes back (--allow-empty would program no policy, which isolates no pod)",
						zap.String("dir", cfg.manifests), zap.Int("vanished", vanished))
				case vanished > 0:
					log.Error("every NetworkPolicy vanished from the manifests at once: programming no policy, which isolates no pod",
						zap.String("dir", cfg.manifests), zap.Int("vanished", vanished))
				case sent != nil && !isEmpty(snap) && len(snap.Policies)*2 < len(sent.Policies):
					log.Warn("more than half of the NetworkPolicies vanished from the manifests at once",
						zap.String("dir", cfg.manifests), zap.Int("before", len(sent.Policies)), zap.Int("now", len(snap.Policies)))
				}
				if isEmpty(snap) && cfg.allowEmpty {
					log.Warn("the manifests hold no objects: programming an empty table, which enforces nothing (--allow-empty)", zap.String("dir", cfg.manifests))
				} else if isEmpty(snap) {
					log.Error("the manifests hold no objects; keeping the last programmed state (--allow-empty would program an empty table, which enforces nothing)",
						zap.String("dir", cfg.manifests), zap.Int("skipped", len(u.Errors)))
				}
			}
			if snap != nil && isEmpty(snap) && !cfg.allowEmpty {
				problems = append(problems, fmt.Errorf("%s holds no objects; keeping the last programmed state (--allow-empty to program an empty table)", cfg.manifests))
				snap = nil
			}
			if vanished > 0 && emptied && !cfg.allowEmpty {
				problems = append(problems, fmt.Errorf("%s came back without any NetworkPolicy after it was removed or emptied, where %d were programmed; keeping the last programmed state until one comes back (--allow-empty to program no policy)", cfg.manifests, vanished))
				snap = nil
			}
			if held && sent == nil && snap != nil {
				if lost := lostObjects(u.Err, u.Errors); lost != nil {
					problems = append(problems, fmt.Errorf("keeping the table programmed before this start until %s loads without errors that leave objects out with nothing failing closed in their place: %w", cfg.manifests, lost))
					log.Error("the manifests have errors that leave objects out, and there is no last good version of them since the start; keeping the table programmed before it until they are fixed",
						zap.String("dir", cfg.manifests), k8s.ErrorField(lost))
					snap = nil
				}
			}
			if snap != nil && snap != sent {
				nodeErr = nw.check(snap)
			}
			src.set(sourceProblems("manifests source", append(problems, nodeErr)...))
			if snap == nil || snap == sent {
				return true
			}
			sent, emptied = snap, false
			select {
			case snapshots <- snap:
				return true
			case <-ctx.Done():
				return false
			}
		}
		updates := k8s.WatchDir(ctx, cfg.manifests, cfg.poll)
		for {
			select {
			case u, ok := <-updates:
				if !ok || !handle(u) {
					return
				}
			case <-tampered:
				// While holding, the only copy of the last good state is
				// the table itself: once someone else changes it (deletes
				// it, makes it dormant), there is nothing left to keep,
				// and what loads (failing closed where it can) is better
				// than a table nobody repairs.
				tampered = nil
				if held && sent == nil {
					held = false
					log.Error("the table kept since the start was changed by someone else; programming what the manifests load", zap.String("dir", cfg.manifests))
					if last.Snapshot != nil && !handle(last) {
						return
					}
				}
			}
		}
	}()
	return snapshots
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

// startInformers connects to the API server and returns once the informer
// caches hold a complete list, so that the first sync never programs a
// partial cluster (which would open or close traffic wrongly). Meanwhile,
// when src is not nil, it keeps src telling why they have not (the API
// server unreachable, or refusing us).
func startInformers(ctx context.Context, cfg *config, log *zap.Logger, src *sourceState) (*k8s.Informers, error) {
	client, err := k8s.NewClient(cfg.kubeconfig, "nftpolicy/"+version)
	if err != nil {
		return nil, err
	}
	in := k8s.NewInformers(client, k8s.InformerOptions{Log: log})
	if src != nil {
		synced := make(chan struct{})
		followed := make(chan struct{})
		go func() {
			defer close(followed)
			for {
				changed, err := in.Health()
				src.set(sourceProblems("API source", err))
				select {
				case <-changed:
				case <-synced:
					return
				}
			}
		}()
		// checkSnapshots takes over src once this returns.
		defer func() { close(synced); <-followed }()
	}
	start := time.Now()
	log.Info("waiting for the informer caches", zap.String("source", cfg.source()))
	if err := in.Start(ctx); err != nil {
		return nil, err
	}
	log.Info("informer caches synced", zap.Duration("took", time.Since(start)))
	return in, nil
}

// healthHandler serves /healthz (the process is alive) and /readyz: ready
// when the latest sync succeeded and the source has no problem (src), each
// reason for not being ready on a line of its own, e.g.
//
//	manifests source: stat /etc/nftpolicy/manifests/x.yaml: too many levels of symbolic links; keeping the objects it held before
//	synced generation 4
//
// or, while the API server is away,
//
//	API source: cannot list and watch namespaces, pods, nodes, networkpolicies at the API server https://10.0.0.1:6443 since 2026-01-02T15:04:05Z (9 failed requests); the caches keep the state last listed: Get "https://10.0.0.1:6443/api/v1/pods?...": dial tcp 10.0.0.1:6443: connect: connection refused
//	synced generation 7
//
// The last line is "synced generation N" once a sync succeeded, N counting
// successful syncs, one per change of the manifests, so a test can wait for
// the sync that follows its change instead of sleeping.
func healthHandler(s *enforcer.Syncer, src *sourceState) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		gen, err := s.Status()
		var reasons []string
		if srcErr := src.get(); srcErr != nil {
			reasons = append(reasons, strings.TrimSpace(srcErr.Error()))
		}
		switch {
		case err != nil:
			reasons = append(reasons, "last sync failed: "+strings.TrimSpace(err.Error()))
		case gen == 0:
			reasons = append(reasons, "not synced yet")
		}
		if len(reasons) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, strings.Join(reasons, "\n")+"\n")
		}
		if gen > 0 {
			fmt.Fprintf(w, "synced generation %d\n", gen)
		}
	})
	return mux
}

// cleanConntrack deletes the conntrack entries of the flows table denies
// (apply's --conntrack-cleanup).
func cleanConntrack(netns string, table *nft.Table, log *zap.Logger) error {
	cl, err := conntrack.Open(netns)
	if err != nil {
		return fmt.Errorf("conntrack cleanup: %w", err)
	}
	defer cl.Close()
	st, err := cl.Narrowed(nil, table)
	if err != nil {
		return fmt.Errorf("conntrack cleanup: %w", err)
	}
	if st.Narrowed > 0 || st.Restored > 0 {
		log.Info("revoked the conntrack entries of flows the table does not allow", zap.Int("revoked", st.Revoked), zap.Int("deleted", st.Deleted),
			zap.Int("restored", st.Restored), zap.Duration("took", st.Total))
	}
	return nil
}

// forgetRevoked deletes the conntrack entries carrying the revoked bit of
// --mark-mask (enforcer.RevokedBit), for a table without the rule that
// drops them (--conntrack-cleanup=false): an earlier run revoked them, and
// they would pass as established. Their next packet is judged as new. It
// only logs a failure: conntrack may be out of reach, which is one reason
// to turn the cleanup off.
func forgetRevoked(cfg *config, log *zap.Logger) {
	bit := enforcer.RevokedBit(cfg.markMask)
	cl, err := conntrack.Open(cfg.netns)
	if err == nil {
		defer cl.Close()
		var n int
		if n, err = cl.DeleteMarked(bit); err == nil {
			if n > 0 {
				log.Info("--conntrack-cleanup=false: deleted the conntrack entries an earlier run revoked; their next packet is judged as new",
					zap.Int("deleted", n))
			}
			return
		}
	}
	log.Error("--conntrack-cleanup=false: cannot delete the conntrack entries an earlier run revoked; they pass as established until they end",
		zap.String("bit", fmt.Sprintf("0x%08x", bit)), zap.Error(err))
}
