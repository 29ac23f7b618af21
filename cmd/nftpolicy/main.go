package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

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
	table            string
	logLevel         zapcore.Level
	healthAddr       string
	poll             time.Duration
	debounce         time.Duration
	maxDelay         time.Duration
	driftCheck       time.Duration
}

const usage = `usage: nftpolicy <command> [flags]

commands:
  apply    program the ruleset for this node's pods once, then exit
  run      program the ruleset and keep it in step with the cluster or the manifests
  dump     print the ruleset apply would program, as nft text
  cleanup  delete nftpolicy's table
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
	case "apply", "run", "dump", "cleanup":
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
	log := newLogger(stderr, cfg.logLevel)
	defer log.Sync()

	switch cmd {
	case "dump":
		err = dump(cfg, stdout, log)
	case "apply":
		err = apply(cfg, log)
	case "run":
		err = runDaemon(cfg, log)
	case "cleanup":
		err = cleanup(cfg)
	}
	if err != nil {
		fmt.Fprintf(stderr, "nftpolicy %s: %v\n", cmd, err)
		return 1
	}
	return 0
}

func parseFlags(cmd string, args []string, stderr io.Writer) (*config, error) {
	cfg := &config{table: enforcer.DefaultTable, logLevel: zapcore.InfoLevel}
	fs := flag.NewFlagSet("nftpolicy "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.netns, "netns", "", "network namespace to program: a name under /run/netns or a path (default: the current one)")
	fs.Func("log-level", "debug, info, warn or error; debug logs the rendered ruleset of every sync", func(s string) error {
		return cfg.logLevel.Set(s)
	})
	if cmd == "cleanup" {
		return cfg, fs.Parse(args)
	}
	fs.StringVar(&cfg.manifests, "manifests", "", "directory of Kubernetes YAML/JSON manifests (Namespace, Pod, Node, NetworkPolicy)")
	fs.StringVar(&cfg.kubeconfig, "kubeconfig", "", "kubeconfig file of the API server to follow (default: in-cluster when $KUBERNETES_SERVICE_HOST is set)")
	fs.StringVar(&cfg.node, "node", "", "this node's name (default: $NODE_NAME, then the hostname)")
	prio := fs.String("priority", "auto", "forward chain priority: auto (ahead of every other filter chain) or a number")
	mask := fs.String("mark-mask", fmt.Sprintf("0x%08x", enforcer.DefaultMarkMask), "packet-mark bits nftpolicy may use")
	fs.BoolVar(&cfg.allowMarkOverlap, "allow-mark-overlap", false, "accept a --mark-mask that overlaps bits of a known component")
	if cmd == "run" {
		fs.StringVar(&cfg.healthAddr, "health-addr", "", "serve /healthz and /readyz on this address, e.g. 127.0.0.1:9808")
		fs.DurationVar(&cfg.poll, "poll", 200*time.Millisecond, "how often to check the manifests directory for changes")
		fs.DurationVar(&cfg.debounce, "debounce", 100*time.Millisecond, "wait this long after a change for more before syncing")
		fs.DurationVar(&cfg.maxDelay, "max-delay", time.Second, "sync at most this long after the first change of a burst")
		fs.DurationVar(&cfg.driftCheck, "drift-check", 30*time.Second, "how often to read the table back and repair it if it drifted (0: never)")
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	// The source: --manifests or --kubeconfig, else in-cluster when the
	// kubelet has told us where the API server is.
	switch {
	case cfg.manifests != "" && cfg.kubeconfig != "":
		return nil, errors.New("--manifests and --kubeconfig are exclusive")
	case cfg.manifests == "" && cfg.kubeconfig == "":
		if os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
			return nil, errors.New("--manifests is required (or --kubeconfig, or run in a pod with $KUBERNETES_SERVICE_HOST set)")
		}
		cfg.inCluster = true
	}
	if cfg.node == "" {
		cfg.node = os.Getenv("NODE_NAME")
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
		if err != nil {
			return nil, fmt.Errorf("--priority %q: want auto or a number", *prio)
		}
		cfg.priority.Value = int32(v)
	}
	m, err := strconv.ParseUint(*mask, 0, 32)
	if err != nil {
		return nil, fmt.Errorf("--mark-mask %q: %w", *mask, err)
	}
	cfg.markMask = uint32(m)
	if err := enforcer.CheckMarkMask(cfg.markMask, cfg.allowMarkOverlap); err != nil {
		return nil, err
	}
	return cfg, nil
}

func newLogger(w io.Writer, level zapcore.Level) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(w), level)
	return zap.New(core)
}

func (c *config) options() enforcer.Options {
	return enforcer.Options{Node: c.node, Table: c.table, MarkMask: c.markMask}
}

// load reads the manifests, or lists the API server, logging every object
// it had to leave out.
func load(cfg *config, log *zap.Logger) (*k8s.Snapshot, error) {
	if cfg.manifests == "" {
		ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer cancel()
		in, err := startInformers(ctx, cfg, log)
		if err != nil {
			return nil, err
		}
		return in.Snapshot(), nil
	}
	snap, objErrs, err := k8s.LoadDir(cfg.manifests)
	if err != nil {
		return nil, err
	}
	logObjectErrors(log, objErrs)
	return snap, nil
}

func logObjectErrors(log *zap.Logger, objErrs []*k8s.ObjectError) {
	for _, e := range objErrs {
		log.Warn("skipped a manifest object", zap.String("at", e.Location()), zap.String("object", e.Object()), zap.Error(e.Err))
	}
}

func dump(cfg *config, stdout io.Writer, log *zap.Logger) error {
	snap, err := load(cfg, log)
	if err != nil {
		return err
	}
	opts := cfg.options()
	// dump never touches the kernel: an auto priority is shown as it would
	// be with no other chain on the hook.
	opts.Priority = enforcer.DefaultPriority
	if !cfg.priority.Auto {
		opts.Priority = cfg.priority.Value
	}
	table, problems := enforcer.Compile(snap, opts)
	enforcer.LogProblems(log, problems)
	_, err = io.WriteString(stdout, nft.Render(table))
	return err
}

func apply(cfg *config, log *zap.Logger) error {
	snap, err := load(cfg, log)
	if err != nil {
		return fmt.Errorf("nothing programmed: %w", err)
	}
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
	batch, err := conn.Apply(table)
	if err != nil {
		return fmt.Errorf("nothing programmed: %w", err)
	}
	log.Info("programmed table", zap.String("table", "inet "+table.Name), zap.Int32("priority", opts.Priority),
		zap.Int("messages", batch.Messages), zap.Duration("apply", time.Since(start)))
	return nil
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

func cleanup(cfg *config) error {
	conn, err := nft.Open(cfg.netns)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Delete(nft.FamilyInet, cfg.table)
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

	if cfg.healthAddr != "" {
		ln, err := net.Listen("tcp", cfg.healthAddr)
		if err != nil {
			return fmt.Errorf("--health-addr: %w", err)
		}
		srv := &http.Server{Handler: healthHandler(s), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
		log.Info("serving health", zap.String("addr", ln.Addr().String()))
	}

	log.Info("running", zap.String("node", cfg.node), zap.String("source", cfg.source()), zap.String("netns", cfg.netns))
	var updates <-chan *k8s.Snapshot
	if cfg.manifests == "" {
		in, err := startInformers(ctx, cfg, log)
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped before the caches synced
			}
			return err
		}
		updates = in.Watch(ctx)
	} else {
		updates = watchManifests(ctx, cfg, log)
	}
	go releaseAfterFirstSync(ctx, s)
	s.Run(ctx, updates, enforcer.Timing{
		Debounce: cfg.debounce, MaxDelay: cfg.maxDelay, Retry: time.Second, DriftCheck: cfg.driftCheck,
	})
	log.Info("stopping; the ruleset stays programmed")
	return nil
}

// watchManifests turns the directory's changes into snapshots. A directory
// that cannot be read is logged and skipped: the last programmed state
// stays.
func watchManifests(ctx context.Context, cfg *config, log *zap.Logger) <-chan *k8s.Snapshot {
	snapshots := make(chan *k8s.Snapshot)
	go func() {
		for u := range k8s.WatchDir(ctx, cfg.manifests, cfg.poll) {
			if u.Err != nil {
				log.Error("cannot read manifests; keeping the last programmed state", zap.Error(u.Err))
				continue
			}
			logObjectErrors(log, u.Errors)
			select {
			case snapshots <- u.Snapshot:
			case <-ctx.Done():
				return
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
// partial cluster (which would open or close traffic wrongly).
func startInformers(ctx context.Context, cfg *config, log *zap.Logger) (*k8s.Informers, error) {
	client, err := k8s.NewClient(cfg.kubeconfig, "nftpolicy/"+version)
	if err != nil {
		return nil, err
	}
	in := k8s.NewInformers(client, k8s.InformerOptions{Log: log})
	start := time.Now()
	log.Info("waiting for the informer caches", zap.String("source", cfg.source()))
	if err := in.Start(ctx); err != nil {
		return nil, err
	}
	log.Info("informer caches synced", zap.Duration("took", time.Since(start)))
	return in, nil
}

// healthHandler serves /healthz (the process is alive) and /readyz (the
// latest sync succeeded). /readyz's body is "synced generation N", N
// counting successful syncs, one per change of the manifests, so a test can
// wait for the sync that follows its change instead of sleeping.
func healthHandler(s *enforcer.Syncer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		gen, err := s.Status()
		switch {
		case err != nil:
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "last sync failed: %s\nsynced generation %d\n", strings.TrimSpace(err.Error()), gen)
		case gen == 0:
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "not synced yet\n")
		default:
			fmt.Fprintf(w, "synced generation %d\n", gen)
		}
	})
	return mux
}
