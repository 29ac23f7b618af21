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
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"k8s.io/klog/v2"

	"github.com/nftpolicy/nftpolicy/conntrack"
	"github.com/nftpolicy/nftpolicy/enforcer"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

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

func dump(cfg *config, stdout io.Writer, log *zap.Logger) error {
	snap, objErrs, err := load(cfg, log)
	if err != nil {
		return err
	}
	nodeErr := checkNode(cfg, snap, log)
	opts := cfg.options()
	// dump never touches the kernel: an auto priority is shown as it would
	// be with no other chain on the hook.
	priority, err := enforcer.ResolvePriority(nil, cfg.priority, opts.Table, log)
	if err != nil {
		return err
	}
	table, problems := enforcer.NewCompiler(opts).Compile(snap, priority)
	enforcer.LogProblems(log, problems)
	if _, err := io.WriteString(stdout, nft.Render(table)); err != nil {
		return err
	}
	return leftOut(objErrs, problems, nodeErr)
}

func apply(cfg *config, log *zap.Logger) error {
	// A one-shot run's live data peaks twice (the decoded manifests, then
	// the batch), and the collector's default lets the heap reach twice
	// that. At half (GOGC=50) a 10k-policy, 10k-pod apply peaks at 186
	// instead of 227 MB RSS for ~5 % more time (docs/performance.md).
	if os.Getenv("GOGC") == "" { // empty is unset, to Go too
		debug.SetGCPercent(50)
	}
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
	priority, err := enforcer.ResolvePriority(conn, cfg.priority, opts.Table, log)
	if err != nil {
		return fmt.Errorf("nothing programmed: %w", err)
	}
	// A one-shot compile, not a Syncer: nothing keeps the snapshot or the
	// compiler's indexes, so the decoded cluster can be collected while the
	// batch, the other peak of a large apply, is built and sent (at 10k
	// policies the peak RSS went from 450 to 260 MB).
	table, problems := enforcer.NewCompiler(opts).Compile(snap, priority)
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
	log.Info("programmed table", zap.String("table", "inet "+table.Name), zap.Int32("priority", priority),
		zap.Int("messages", batch.Messages), zap.Duration("apply", time.Since(start)))
	return leftOut(objErrs, problems, errors.Join(nodeErr, cleanErr))
}

// releaseAfterFirstSync hands the memory of the first sync back to the
// kernel once it is done, and sets the steady collector target.
// Decoding the whole cluster and writing the whole table is a peak (at
// 10k policies, a few hundred MB) the daemon never reaches again, and the
// Go runtime would otherwise return it only gradually, leaving the node's
// memory accounting showing the peak.
func releaseAfterFirstSync(ctx context.Context, s *enforcer.Syncer, log *zap.Logger) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if gen, _ := s.Status(); gen > 0 {
				debug.FreeOSMemory()
				steadyCollectorTarget(log)
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
	limitMemory(log)

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

	if cfg.profiling && cfg.metricsAddr == "" {
		log.Warn("--profiling is served on --metrics-addr, which is empty: no profiles")
	}
	if cfg.metricsAddr != "" {
		stop, err := serveMetrics(cfg.metricsAddr, cfg.metricsGiven, cfg.profiling, newMetrics(s, cfg.counters, log, flowMetrics), log)
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
		// From here: the first sync is the peak (daemonGCPercent), the
		// list before it is not.
		collectorTarget(log)
		updates = checkSnapshots(ctx, cfg, log, src, in)
	} else {
		collectorTarget(log)
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
	go releaseAfterFirstSync(ctx, s, log)
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
