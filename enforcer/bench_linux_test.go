package enforcer

import (
	"fmt"
	"testing"

	"github.com/nftpolicy/nftpolicy/internal/scale"
	"github.com/nftpolicy/nftpolicy/internal/testns"
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
		elements += len(s.Elements)
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
