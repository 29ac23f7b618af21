package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/nftpolicy/nftpolicy/enforcer"
)

// defaultMetricsAddr is where run serves /metrics unless told otherwise
// (docs/operations.md): loopback, next to the health port of the examples.
const defaultMetricsAddr = "127.0.0.1:9809"

// Metrics. The enforcer knows nothing of Prometheus: the Syncer reports
// each sync (Syncer.OnSync), keeps counts (Syncer.Stats) and reads the
// connection counters of the kernel (Syncer.CountConnections); this file
// turns them into metrics, read at each scrape. docs/operations.md lists
// them.
var (
	descSyncs = prometheus.NewDesc("nftpolicy_syncs_total",
		"Syncs of a snapshot to the kernel, by result (success, failure).", []string{"result"}, nil)
	descRefused = prometheus.NewDesc("nftpolicy_batches_refused_total",
		"Batches the kernel refused (not counting generation conflicts).", nil, nil)
	descConflicts = prometheus.NewDesc("nftpolicy_generation_conflicts_total",
		"Delta batches refused because another process committed since our last one.", nil, nil)
	descRepairs = prometheus.NewDesc("nftpolicy_drift_repairs_total",
		"Times our table was found changed by someone else and written again.", nil, nil)
	descSkipped = prometheus.NewDesc("nftpolicy_skipped_objects_total",
		"Objects or parts of objects the compiler left out as invalid, each counted when it appears.", nil, nil)
	descChains = prometheus.NewDesc("nftpolicy_programmed_chains",
		"Chains of the table last programmed.", nil, nil)
	descRules = prometheus.NewDesc("nftpolicy_programmed_rules",
		"Rules of the table last programmed.", nil, nil)
	descSets = prometheus.NewDesc("nftpolicy_programmed_sets",
		"Sets and verdict maps of the table last programmed.", nil, nil)
	descElements = prometheus.NewDesc("nftpolicy_programmed_elements",
		"Elements of the sets and maps of the table last programmed.", nil, nil)
	descIsolated = prometheus.NewDesc("nftpolicy_isolated_pods",
		"Pods of this node judged by policy in at least one direction (isolated by a NetworkPolicy, or a subject of a ClusterNetworkPolicy), in the table last programmed.", nil, nil)
	descLastSync = prometheus.NewDesc("nftpolicy_last_successful_sync_timestamp_seconds",
		"Unix time of the last successful sync; 0 before the first.", nil, nil)
	descAllowed = prometheus.NewDesc("nftpolicy_policy_allowed_connections_total",
		"Connections a NetworkPolicy allowed to or from a pod of this node, by policy and direction; only where pod chains walk their policies (--walk-policies, or a namespace with flow logs).", []string{"namespace", "policy", "direction"}, nil)
	descPodAllowed = prometheus.NewDesc("nftpolicy_pod_allowed_connections_total",
		"Connections to or from an isolated pod of this node that its NetworkPolicies allowed, by pod and direction (the flat layout, which decides with one lookup, does not know which policy allowed).", []string{"namespace", "pod", "direction"}, nil)
	descDenied = prometheus.NewDesc("nftpolicy_pod_denied_connections_total",
		"Connections to or from an isolated pod of this node that no policy allowed, by pod and direction.", []string{"namespace", "pod", "direction"}, nil)
	descCluster = prometheus.NewDesc("nftpolicy_cluster_policy_connections_total",
		"Connections to or from a pod of this node that a ClusterNetworkPolicy rule decided (accepted, denied or passed), by policy, tier, direction, rule index and action.",
		[]string{"policy", "tier", "direction", "rule", "action"}, nil)
)

// newMetrics returns the registry of the daemon's metrics for s; the
// connection counters are read only with Options.Counters, the flow
// logger's counts only with flow logs (fl not nil).
func newMetrics(s *enforcer.Syncer, counters bool, log *zap.Logger, fl *flowLogMetrics) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	durations := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "nftpolicy_sync_duration_seconds",
		Help: "Time of a sync, by phase: compile (snapshot to table) and write (table to kernel, diff included).",
		// From a one-pod change (about 100 µs) to a first sync at 10k
		// policies (seconds).
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
	}, []string{"phase"})
	compile, write := durations.WithLabelValues("compile"), durations.WithLabelValues("write")
	s.OnSync(func(res enforcer.SyncResult, err error) {
		if res.Table == nil {
			return // failed before it compiled: nothing was timed
		}
		compile.Observe(res.CompileTime.Seconds())
		write.Observe(res.WriteTime.Seconds())
	})
	reg.MustRegister(durations,
		&syncerCollector{s: s, counters: counters, log: log},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if fl != nil {
		reg.MustRegister(fl.lines, fl.errors)
	}
	return reg
}

// A syncerCollector reads a Syncer's counts at each scrape.
type syncerCollector struct {
	s        *enforcer.Syncer
	counters bool
	log      *zap.Logger
}

func (c *syncerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSyncs, descRefused, descConflicts, descRepairs, descSkipped,
		descChains, descRules, descSets, descElements, descIsolated, descLastSync} {
		ch <- d
	}
	if c.counters {
		ch <- descAllowed
		ch <- descPodAllowed
		ch <- descDenied
		ch <- descCluster
	}
}

func (c *syncerCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter(descSyncs, st.Syncs, "success")
	counter(descSyncs, st.FailedSyncs, "failure")
	counter(descRefused, st.Refused)
	counter(descConflicts, st.Conflicts)
	counter(descRepairs, st.Repairs)
	counter(descSkipped, st.Skipped)
	var chains, rules, sets, elements int
	if t := st.Table; t != nil {
		chains, sets = len(t.Chains), len(t.Sets)
		for _, ch := range t.Chains {
			rules += len(ch.Rules)
		}
		for _, s := range t.Sets {
			elements += s.Len()
		}
	}
	gauge(descChains, float64(chains))
	gauge(descRules, float64(rules))
	gauge(descSets, float64(sets))
	gauge(descElements, float64(elements))
	gauge(descIsolated, float64(st.IsolatedPods))
	var last float64
	if !st.LastSuccess.IsZero() {
		last = float64(st.LastSuccess.UnixNano()) / 1e9
	}
	gauge(descLastSync, last)
	if !c.counters {
		return
	}
	counts, err := c.s.CountConnections()
	if err != nil {
		c.log.Warn("cannot read the connection counters", zap.Error(err))
		ch <- prometheus.NewInvalidMetric(descAllowed, err)
		return
	}
	for k, n := range counts {
		if k.Tier != "" {
			counter(descCluster, n, k.Policy, k.Tier, k.Direction, strconv.Itoa(k.Rule), k.Action)
			continue
		}
		switch {
		case k.Pod != "" && k.Allowed:
			counter(descPodAllowed, n, k.Namespace, k.Pod, k.Direction)
		case k.Pod != "":
			counter(descDenied, n, k.Namespace, k.Pod, k.Direction)
		default:
			counter(descAllowed, n, k.Namespace, k.Policy, k.Direction)
		}
	}
}

// serveMetrics serves /metrics of reg on addr until the returned stop is
// called. A listener that fails on the default address is logged and the
// daemon goes on without metrics (another daemon on this host may hold
// it); one given with --metrics-addr is an error.
func serveMetrics(addr string, given, profiling bool, reg *prometheus.Registry, log *zap.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil && !given {
		log.Warn("cannot serve metrics on the default address; running without them (give --metrics-addr)", zap.String("addr", addr), zap.Error(err))
		return func() {}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      zap.NewStdLog(log),
		ErrorHandling: promhttp.ContinueOnError, // the other metrics still count
	}))
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	log.Info("serving metrics", zap.String("addr", ln.Addr().String()), zap.Bool("profiling", profiling))
	return func() { srv.Close() }, nil
}
