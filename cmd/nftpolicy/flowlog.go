package main

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nftpolicy/nftpolicy/enforcer"
	"github.com/nftpolicy/nftpolicy/flowlog"
)

// Flow logs (docs/operations.md, "Flow logs"). The table logs the first
// packet of connections of logged namespaces to an nflog group; the daemon
// reads the group in the node's network namespace, merges repeats of one
// connection within a second, and writes one line per connection. Nothing
// here touches readiness: flow logs are an observer, and a group another
// process holds, or a reader that falls behind, is logged with backoff and
// counted (nftpolicy_flow_log_errors_total), never made a reason.

const (
	// defaultFlowLogGroup is --flow-log-group's default.
	defaultFlowLogGroup = 100
	flowMergeWindow     = time.Second
	flowTick            = 250 * time.Millisecond
	flowRetryMin        = time.Second
	flowRetryMax        = 5 * time.Minute
)

// A flowLogger reads one nflog group and logs the connections it gets.
type flowLogger struct {
	netns   string // a path, or "" for the current namespace
	group   uint16
	res     *enforcer.FlowResolver
	log     *zap.Logger
	metrics *flowLogMetrics
}

// flowNetns is the path of the namespace --netns names, as nft.Open
// resolves it.
func flowNetns(netns string) string {
	if netns != "" && !strings.Contains(netns, "/") {
		return "/run/netns/" + netns
	}
	return netns
}

// run reads the group, once the table logs anything, until ctx ends.
func (fl *flowLogger) run(ctx context.Context) {
	recs := make(chan []flowlog.Record, 256)
	readErr := make(chan error, 1)
	merger := &flowlog.Merger{Window: flowMergeWindow}
	tick := time.NewTicker(flowTick)
	defer tick.Stop()
	var reader *flowlog.Reader
	retry, nextTry := flowRetryMin, time.Time{}
	defer func() {
		if reader != nil {
			reader.Close()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			fl.emit(merger.Flush(time.Now().Add(flowMergeWindow)))
			return
		case rs := <-recs:
			for _, r := range rs {
				fl.emit(merger.Add(r))
			}
		case err := <-readErr:
			reader.Close()
			reader = nil
			fl.metrics.errors.WithLabelValues("read").Inc()
			fl.log.Warn("flow log: reading the nflog group failed; reopening", zap.Uint16("group", fl.group), zap.Duration("retry", retry), zap.Error(err))
			nextTry, retry = time.Now().Add(retry), min(2*retry, flowRetryMax)
		case now := <-tick.C:
			fl.emit(merger.Flush(now))
			fl.res.Expire(now)
			if reader != nil || now.Before(nextTry) || !fl.res.Logging() {
				continue
			}
			r, err := flowlog.Open(fl.netns, fl.group)
			if err != nil {
				// EBUSY: another process (another nftpolicy, ulogd) reads
				// the group in this namespace; only one can.
				fl.metrics.errors.WithLabelValues("bind").Inc()
				fl.log.Warn("flow log: cannot read the nflog group; connections are logged to it but not written here", zap.Uint16("group", fl.group), zap.Duration("retry", retry), zap.Error(err))
				nextTry, retry = now.Add(retry), min(2*retry, flowRetryMax)
				continue
			}
			reader, retry = r, flowRetryMin
			fl.log.Info("flow log: reading the nflog group", zap.Uint16("group", fl.group))
			go fl.read(ctx, r, recs, readErr)
		}
	}
}

// read hands what r reads to recs until r fails. Records the kernel
// dropped because the reader fell behind are counted, and logged at most
// once per backoff period.
func (fl *flowLogger) read(ctx context.Context, r *flowlog.Reader, recs chan<- []flowlog.Record, readErr chan<- error) {
	var lost int
	var nextWarn time.Time
	wait := flowRetryMin
	for {
		rs, err := r.Read()
		if errors.Is(err, flowlog.ErrOverrun) {
			lost++
			fl.metrics.errors.WithLabelValues("overrun").Inc()
			if now := time.Now(); now.After(nextWarn) {
				fl.log.Warn("flow log: the kernel dropped logged packets: the reader fell behind", zap.Int("overruns", lost))
				lost, nextWarn, wait = 0, now.Add(wait), min(2*wait, flowRetryMax)
			}
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				readErr <- err
			}
			return
		}
		select {
		case recs <- rs:
		default:
			fl.metrics.errors.WithLabelValues("overrun").Inc() // the writer fell behind: as the kernel would
		}
	}
}

// emit writes one line per merged record.
func (fl *flowLogger) emit(rs []flowlog.Record) {
	for _, r := range rs {
		f, ok := fl.res.Resolve(r.Prefix, r.Tuple.Src, r.Tuple.Dst)
		fields := make([]zap.Field, 0, 13)
		if ok {
			fields = append(fields, zap.String("verdict", f.Verdict), zap.String("direction", f.Direction))
			if f.Policy != "" {
				fields = append(fields, zap.String("policy", f.Policy), zap.Int("rule", f.Rule))
			}
		} else {
			// Not a prefix of ours, or one expired: say what came.
			fields = append(fields, zap.String("verdict", "unknown"), zap.String("prefix", r.Prefix))
		}
		t := r.Tuple
		fields = append(fields,
			zap.String("proto", flowlog.ProtoName(t.Proto)),
			zap.String("src", t.Src.String()), zap.Uint16("sport", t.Sport),
			zap.String("dst", t.Dst.String()), zap.Uint16("dport", t.Dport),
			zap.String("srcPod", f.SrcPod), zap.String("dstPod", f.DstPod),
			zap.Int("count", r.Count))
		fl.log.Info("flow", fields...)
		fl.metrics.lines.Inc()
	}
}

// flowLogMetrics are the flow logger's counts.
type flowLogMetrics struct {
	lines  prometheus.Counter
	errors *prometheus.CounterVec
}

func newFlowLogMetrics() *flowLogMetrics {
	m := &flowLogMetrics{
		lines: prometheus.NewCounter(prometheus.CounterOpts{Name: "nftpolicy_flow_log_lines_total",
			Help: "Flow log lines written: connections logged, repeats within a second merged."}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nftpolicy_flow_log_errors_total",
			Help: "Flow log failures, by reason: bind (the nflog group could not be read, e.g. another process holds it), read, overrun (logged packets dropped: the reader fell behind)."},
			[]string{"reason"}),
	}
	for _, reason := range []string{"bind", "read", "overrun"} {
		m.errors.WithLabelValues(reason)
	}
	return m
}
