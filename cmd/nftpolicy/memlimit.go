package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// memoryLimitShare is the part of the memory limit of its cgroup that the
// daemon gives the Go runtime as a soft limit (debug.SetMemoryLimit): the
// rest is for what the Go heap does not count (stacks, the runtime's own
// data, netlink buffers) and for the margin the kernel needs before it
// OOM-kills.
const memoryLimitShare = 0.8

// daemonGCPercent is the daemon's collector target (GOGC) once its
// first sync is done: the heap may grow by 40% of its live data between
// collections, not by all of it as by Go's default (100). Afterwards a
// pod event allocates about 1 MB, so a collection every eighty events or
// so costs nothing to speak of. During the informers' first list the
// heap is still small and the collector's extra work would take CPU from
// decoding (and, on a shared machine, from the API server), so the
// default holds until then. At 150k pods and 10k policies
// (hack/bench/scale, one run each, the same cluster): GOGC=50 from the
// start peaked at 600 MB and was programmed 22.0 s after start, GOGC=100
// throughout 756 MB and 20.1 s. Since the first sync stopped being the
// peak, the events are: 40 against 50 brought the daemon's high-water
// mark under churn from 398-406 MB to 384 MB (two interleaved rounds
// each, docs/performance.md "Round seven").
const daemonGCPercent = 40

// firstSyncGCPercent is the collector target from the informers' sync to
// the end of the first sync, the daemon's peak: the decoded cluster, the
// compiler's state, the table and the batch alive at once, with most of
// what the compile allocates garbage within the second. Collecting when
// the heap has grown by a quarter of that, not a half, keeps the peak
// lower for a little more collector work, once (docs/performance.md,
// "Round six").
const firstSyncGCPercent = 25

// collectorTarget sets firstSyncGCPercent, unless GOGC says otherwise;
// steadyCollectorTarget then sets daemonGCPercent.
func collectorTarget(log *zap.Logger) {
	if v := os.Getenv("GOGC"); v != "" { // empty is unset, to Go too
		log.Info("collector target from GOGC", zap.String("GOGC", v))
		return
	}
	debug.SetGCPercent(firstSyncGCPercent)
	log.Info("collector target", zap.Int("GOGC", firstSyncGCPercent), zap.String("why", "the first sync is the daemon's peak; GOGC sets another"))
}

// steadyCollectorTarget sets daemonGCPercent once the first sync is done,
// unless GOGC says otherwise.
func steadyCollectorTarget(log *zap.Logger) {
	if os.Getenv("GOGC") != "" {
		return
	}
	debug.SetGCPercent(daemonGCPercent)
	log.Info("collector target", zap.Int("GOGC", daemonGCPercent), zap.String("why", "first sync done"))
}

// limitMemory makes the Go garbage collector hold the heap under the
// memory limit of the daemon's cgroup (a DaemonSet's limits.memory, a
// systemd unit's MemoryMax=), unless GOMEMLIMIT says otherwise.
//
// By default the collector lets the heap grow to twice the live data
// between collections. Every node watches every pod of the cluster, so on
// a large cluster live data is a few hundred MB, and twice that is what
// gets the daemon OOM-killed and leaves policy behind the cluster. With a
// soft limit the collector runs more often as the heap nears it instead.
// Live data above the limit still grows the heap (a soft limit never fails
// an allocation): the limit must fit the cluster (docs/performance.md).
func limitMemory(log *zap.Logger) {
	if v := os.Getenv("GOMEMLIMIT"); v != "" { // empty is unset, to Go too
		log.Info("memory limit from GOMEMLIMIT", zap.String("GOMEMLIMIT", v))
		return
	}
	limit, where, ok := cgroupMemoryLimit("/proc/self/cgroup", "/sys/fs/cgroup")
	if !ok {
		log.Info("no memory limit: no cgroup v2 memory.max on the daemon's path sets one (GOMEMLIMIT sets one)")
		return
	}
	soft := int64(float64(limit) * memoryLimitShare)
	debug.SetMemoryLimit(soft)
	log.Info("memory limit from the cgroup", zap.String("cgroup", where),
		zap.Int64("cgroup_bytes", limit), zap.Int64("go_soft_limit_bytes", soft))
}

// cgroupMemoryLimit reads the memory limit of the process's cgroup (v2,
// the unified hierarchy: "0::/path" in procCgroup) from memory.max under
// root, walking up to the root because a parent's limit binds a child
// too; the lowest limit wins. ok is false when no cgroup on the way sets
// one ("max"), or on cgroup v1.
func cgroupMemoryLimit(procCgroup, root string) (limit int64, where string, ok bool) {
	data, err := os.ReadFile(procCgroup)
	if err != nil {
		return 0, "", false
	}
	var path string
	found := false
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if p, cut := strings.CutPrefix(line, "0::"); cut {
			path, found = p, true
		}
	}
	if !found {
		return 0, "", false
	}
	for dir := filepath.Clean("/" + path); ; dir = filepath.Dir(dir) {
		raw, err := os.ReadFile(filepath.Join(root, dir, "memory.max"))
		if err == nil {
			if v, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64); err == nil && v > 0 && (!ok || v < limit) {
				limit, where, ok = v, dir, true
			}
		}
		if dir == "/" {
			return limit, where, ok
		}
	}
}
