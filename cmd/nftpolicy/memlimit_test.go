package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"go.uber.org/zap"
)

// TestCgroupMemoryLimit feeds cgroupMemoryLimit the /proc/self/cgroup
// formats and memory.max files a DaemonSet or a unit meets: the lowest
// limit on the path wins, and where it is set is reported.
func TestCgroupMemoryLimit(t *testing.T) {
	write := func(path, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		files  map[string]string
		cgroup string
		limit  int64
		where  string
		ok     bool
	}{
		{"the pod's limit binds its container",
			map[string]string{"kubepods/pod1/ctr/memory.max": "max\n", "kubepods/pod1/memory.max": "536870912\n", "kubepods/memory.max": "8589934592\n"},
			"0::/kubepods/pod1/ctr\n", 536870912, "/kubepods/pod1", true},
		{"a parent's limit", map[string]string{"kubepods/memory.max": "8589934592\n"}, "0::/kubepods\n", 8589934592, "/kubepods", true},
		{"no limit anywhere", map[string]string{"system.slice/x.service/memory.max": "max\n"}, "0::/system.slice/x.service\n", 0, "", false},
		{"cgroup v1 only", map[string]string{"kubepods/pod1/memory.max": "536870912\n"}, "12:memory:/kubepods/pod1\n", 0, "", false},
		{"cgroup namespace: the container's cgroup is the mount's root",
			map[string]string{"memory.max": "268435456\n"}, "0::/\n", 268435456, "/", true},
		{"cgroup namespace, no limit", map[string]string{"memory.max": "max\n"}, "0::/\n", 0, "", false},
		{"hybrid: v1 controllers and an empty unified hierarchy",
			map[string]string{"memory/kubepods/memory.limit_in_bytes": "268435456\n"},
			"12:memory:/kubepods\n1:name=systemd:/kubepods\n0::/kubepods\n", 0, "", false},
		{"systemd unit, nested slices",
			map[string]string{"system.slice/memory.max": "max\n", "system.slice/nftpolicy.service/memory.max": "1073741824\n"},
			"0::/system.slice/nftpolicy.service\n", 1073741824, "/system.slice/nftpolicy.service", true},
		{"a parent lower than the leaf",
			map[string]string{"a/memory.max": "1000\n", "a/b/memory.max": "2000\n", "a/b/c/memory.max": "max\n"},
			"0::/a/b/c\n", 1000, "/a", true},
		{"no trailing newline", map[string]string{"p/memory.max": "4096"}, "0::/p", 4096, "/p", true},
		{"garbage value skipped", map[string]string{"p/memory.max": "lots\n", "memory.max": "8192\n"}, "0::/p\n", 8192, "/", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for p, d := range tc.files {
				write(filepath.Join(root, p), d)
			}
			proc := filepath.Join(t.TempDir(), "cgroup")
			write(proc, tc.cgroup)
			limit, where, ok := cgroupMemoryLimit(proc, root)
			if limit != tc.limit || where != tc.where || ok != tc.ok {
				t.Errorf("got %d %q %v, want %d %q %v", limit, where, ok, tc.limit, tc.where, tc.ok)
			}
		})
	}
}

// TestCollectorTarget: the daemon collects at firstSyncGCPercent until
// its first sync is done and at daemonGCPercent after, and GOGC, when
// set, wins throughout.
func TestCollectorTarget(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	t.Setenv("GOGC", "")
	collectorTarget(zap.NewNop())
	if got := debug.SetGCPercent(100); got != firstSyncGCPercent {
		t.Errorf("GOGC unset: the collector target until the first sync is %d, want %d", got, firstSyncGCPercent)
	}
	steadyCollectorTarget(zap.NewNop())
	if got := debug.SetGCPercent(100); got != daemonGCPercent {
		t.Errorf("GOGC unset: the collector target after the first sync is %d, want %d", got, daemonGCPercent)
	}
	t.Setenv("GOGC", "100")
	collectorTarget(zap.NewNop())
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC=100: the collector target is %d, want 100", got)
	}
	steadyCollectorTarget(zap.NewNop())
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC=100: the collector target after the first sync is %d, want 100", got)
	}
}
