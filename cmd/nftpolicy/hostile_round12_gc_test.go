package main

import (
	"fmt"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"testing"

	"go.uber.org/zap"
)

// Hostile round 12: the collector settings through the daemon's start as
// runDaemon takes it (limitMemory first, the informers' list under it,
// collectorTarget once the caches synced, steadyCollectorTarget after
// the first sync), under each environment an operator may give.

// r12Settings reads GOGC (-1 for off) and the soft memory limit without
// changing them.
func r12Settings() (gogc, limit int64) {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64()), int64(s[1].Value.Uint64()) // off is an unsigned -1
}

// TestHostileRound12StartSequence: what GOGC and GOMEMLIMIT set is never
// changed, the limit derived from the cgroup (this process's own, read
// the way limitMemory reads it) is never raised and stays through the
// start, and the daemon ends at daemonGCPercent unless GOGC says
// otherwise.
func TestHostileRound12StartSequence(t *testing.T) {
	prevGOGC := debug.SetGCPercent(100)
	prevLimit := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() {
		debug.SetGCPercent(prevGOGC)
		debug.SetMemoryLimit(prevLimit)
	})
	cg, _, hasCg := cgroupMemoryLimit("/proc/self/cgroup", "/sys/fs/cgroup")
	cgSoft := int64(math.MaxInt64)
	if hasCg {
		cgSoft = int64(float64(cg) * memoryLimitShare)
	}
	t.Logf("this process's cgroup: limit %d (found %v), soft limit %d", cg, hasCg, cgSoft)
	for _, tc := range []struct {
		gogc, memlimit string
		rtGOGC         int   // what the runtime took from GOGC at start
		rtLimit        int64 // and from GOMEMLIMIT
		listGOGC       int64 // while the informers list
		syncGOGC       int64 // from the caches' sync to the first sync's end
		steadyGOGC     int64
		limit          int64 // throughout
	}{
		{"", "", 100, math.MaxInt64, 100, firstSyncGCPercent, daemonGCPercent, cgSoft},
		{"80", "", 80, math.MaxInt64, 80, 80, 80, cgSoft},
		{"off", "", -1, math.MaxInt64, -1, -1, -1, cgSoft},
		{"garbage", "", 100, math.MaxInt64, 100, 100, 100, cgSoft}, // the runtime reads it as 100; still the operator's
		{"", "100MiB", 100, 100 << 20, 100, firstSyncGCPercent, daemonGCPercent, 100 << 20},
		{"", "off", 100, math.MaxInt64, 100, firstSyncGCPercent, daemonGCPercent, math.MaxInt64},
		{"60", "50MiB", 60, 50 << 20, 60, 60, 60, 50 << 20},
	} {
		t.Run(fmt.Sprintf("GOGC=%q,GOMEMLIMIT=%q", tc.gogc, tc.memlimit), func(t *testing.T) {
			t.Setenv("GOGC", tc.gogc)
			t.Setenv("GOMEMLIMIT", tc.memlimit)
			debug.SetGCPercent(tc.rtGOGC)
			debug.SetMemoryLimit(tc.rtLimit)
			expect := func(when string, gogc, limit int64) {
				t.Helper()
				if g, l := r12Settings(); g != gogc || l != limit {
					t.Errorf("%s: GOGC %d, soft limit %d; want %d, %d", when, g, l, gogc, limit)
				}
			}
			log := zap.NewNop()
			limitMemory(log)
			expect("listing", tc.listGOGC, tc.limit)
			collectorTarget(log)
			expect("first sync", tc.syncGOGC, tc.limit)
			steadyCollectorTarget(log)
			expect("steady", tc.steadyGOGC, tc.limit)
			// A second daemon start in the same process (the tests') or a
			// repeated call changes nothing further.
			limitMemory(log)
			steadyCollectorTarget(log)
			expect("steady, again", tc.steadyGOGC, tc.limit)
		})
	}
}
