package enforcer

import (
	"fmt"
	"testing"

	"go.uber.org/zap"

	"github.com/nftpolicy/nftpolicy/internal/scale"
	"github.com/nftpolicy/nftpolicy/internal/testns"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// BenchmarkKernelApply programs the 1k-policy × 10k-pod table into a fresh
// network namespace in one batch. Needs root.
// Run: go test -run '^$' -bench KernelApply -benchtime 3x ./enforcer/
func BenchmarkKernelApply(b *testing.B) {
	snap := scale.Cluster(100, 100, 10, 100, testNode, false)
	table, _ := Compile(snap, Options{Node: testNode})
	elements := 0
	for _, s := range table.Sets {
		elements += s.Len()
	}
	b.Run(fmt.Sprintf("chains=%d/sets=%d/elements=%d", len(table.Chains), len(table.Sets), elements), func(b *testing.B) {
		ns := testns.New(b, "nftbench")
		conn, err := nft.Open(ns)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		for b.Loop() {
			if _, err := conn.Apply(table); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkKernelEvent is the event → kernel time of the syncer, debounce
// excluded: one pod label change, compiled incrementally and written as a
// delta, alternating between two snapshots. Needs root.
// Run: go test -run '^$' -bench KernelEvent -benchtime 20x ./enforcer/
func BenchmarkKernelEvent(b *testing.B) {
	for _, sc := range []struct{ namespaces, policies int }{{100, 10}, {100, 100}} {
		snap, changed := labelChange(sc.namespaces, sc.policies)
		b.Run(fmt.Sprintf("policies=%d/pods=%d/pod-label", sc.namespaces*sc.policies, sc.namespaces*100), func(b *testing.B) {
			ns := testns.New(b, "nftbench")
			conn, err := nft.Open(ns)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			s := NewSyncer(conn, Options{Node: testNode}, PrioritySetting{Auto: true}, zap.NewNop())
			if _, err := s.Sync(snap); err != nil {
				b.Fatal(err)
			}
			snaps := []*k8s.Snapshot{changed, snap}
			i := 0
			for b.Loop() {
				res, err := s.Sync(snaps[i%2])
				if err != nil {
					b.Fatal(err)
				}
				if res.Batch.Full {
					b.Fatal("an event rewrote the whole table")
				}
				i++
			}
		})
	}
}

// BenchmarkKernelDrift is one read-back of the whole table by Conn.Drift, as
// a drift check or a conflict the commit monitor cannot settle makes it, on
// an untouched table (no drift: everything is read and compared). Needs
// root.
// Run: go test -run '^$' -bench KernelDrift -benchtime 3x ./enforcer/
func BenchmarkKernelDrift(b *testing.B) {
	for _, sc := range []struct{ namespaces, policies int }{{100, 10}, {100, 100}} {
		snap := scale.Cluster(sc.namespaces, 100, sc.policies, 100, testNode, false)
		table, _ := Compile(snap, Options{Node: testNode})
		b.Run(fmt.Sprintf("policies=%d/pods=%d", sc.namespaces*sc.policies, sc.namespaces*100), func(b *testing.B) {
			ns := testns.New(b, "nftbench")
			conn, err := nft.Open(ns)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Apply(table); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				d, err := conn.Drift(table)
				if err != nil {
					b.Fatal(err)
				}
				if d != "" {
					b.Fatalf("drift in an untouched table: %s", d)
				}
			}
		})
	}
}
