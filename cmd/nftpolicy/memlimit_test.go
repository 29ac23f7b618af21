package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCgroupMemoryLimit(t *testing.T) {
	root := t.TempDir()
	write := func(path, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "kubepods/pod1/ctr/memory.max"), "max\n")
	write(filepath.Join(root, "kubepods/pod1/memory.max"), "536870912\n")
	write(filepath.Join(root, "kubepods/memory.max"), "8589934592\n")
	proc := filepath.Join(t.TempDir(), "cgroup")
	for _, tc := range []struct {
		name, cgroup string
		limit        int64
		where        string
		ok           bool
	}{
		{"the pod's limit binds its container", "0::/kubepods/pod1/ctr\n", 536870912, "/kubepods/pod1", true},
		{"a parent's limit", "0::/kubepods\n", 8589934592, "/kubepods", true},
		{"no limit anywhere", "0::/system.slice/x.service\n", 0, "", false},
		{"cgroup v1 only", "12:memory:/kubepods/pod1\n", 0, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			write(proc, tc.cgroup)
			limit, where, ok := cgroupMemoryLimit(proc, root)
			if limit != tc.limit || where != tc.where || ok != tc.ok {
				t.Errorf("got %d %q %v, want %d %q %v", limit, where, ok, tc.limit, tc.where, tc.ok)
			}
		})
	}
}
