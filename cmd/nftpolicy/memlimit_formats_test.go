package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCgroupMemoryLimitFormats feeds cgroupMemoryLimit the
// /proc/self/cgroup formats a DaemonSet or a unit meets.
func TestCgroupMemoryLimitFormats(t *testing.T) {
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
		ok     bool
	}{
		{"cgroup namespace: the container's cgroup is the mount's root",
			map[string]string{"memory.max": "268435456\n"}, "0::/\n", 268435456, true},
		{"cgroup namespace, no limit", map[string]string{"memory.max": "max\n"}, "0::/\n", 0, false},
		{"hybrid: v1 controllers and an empty unified hierarchy",
			map[string]string{"memory/kubepods/memory.limit_in_bytes": "268435456\n"},
			"12:memory:/kubepods\n1:name=systemd:/kubepods\n0::/kubepods\n", 0, false},
		{"systemd unit, nested slices",
			map[string]string{"system.slice/memory.max": "max\n", "system.slice/nftpolicy.service/memory.max": "1073741824\n"},
			"0::/system.slice/nftpolicy.service\n", 1073741824, true},
		{"a parent lower than the leaf",
			map[string]string{"a/memory.max": "1000\n", "a/b/memory.max": "2000\n", "a/b/c/memory.max": "max\n"},
			"0::/a/b/c\n", 1000, true},
		{"no trailing newline", map[string]string{"p/memory.max": "4096"}, "0::/p", 4096, true},
		{"garbage value skipped", map[string]string{"p/memory.max": "lots\n", "memory.max": "8192\n"}, "0::/p\n", 8192, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for p, d := range tc.files {
				write(filepath.Join(root, p), d)
			}
			proc := filepath.Join(t.TempDir(), "cgroup")
			write(proc, tc.cgroup)
			limit, _, ok := cgroupMemoryLimit(proc, root)
			if limit != tc.limit || ok != tc.ok {
				t.Errorf("got %d %v, want %d %v", limit, ok, tc.limit, tc.ok)
			}
		})
	}
}
