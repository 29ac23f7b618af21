package enforcer

import (
	"fmt"
	"testing"

	"github.com/nftpolicy/nftpolicy/internal/scale"
	"github.com/nftpolicy/nftpolicy/nft"
)

// BenchmarkCompile measures the compiler alone at 1k policies × 10k pods,
// 100 of them local. Run: go test -run '^$' -bench Compile -benchmem ./enforcer/
func BenchmarkCompile(b *testing.B) {
	for _, sc := range []struct {
		namespaces, pods, policies, local int
		unique                            bool
	}{
		{100, 100, 10, 100, false}, // 1k policies, 10k pods, peers repeat as in real clusters
		{100, 100, 10, 100, true},  // the same, every peer list spelled differently
	} {
		snap := scale.Cluster(sc.namespaces, sc.pods, sc.policies, sc.local, testNode, sc.unique)
		name := fmt.Sprintf("policies=%d/pods=%d/local=%d/uniquePeers=%v", sc.namespaces*sc.policies, sc.namespaces*sc.pods, sc.local, sc.unique)
		b.Run(name, func(b *testing.B) {
			var table *nft.Table
			b.ReportAllocs()
			for b.Loop() {
				table, _ = Compile(snap, Options{Node: testNode})
			}
			elements := 0
			for _, s := range table.Sets {
				elements += len(s.Elements)
			}
			b.ReportMetric(float64(len(table.Chains)), "chains")
			b.ReportMetric(float64(elements), "elements")
		})
		b.Run(name+"/render", func(b *testing.B) {
			table, _ := Compile(snap, Options{Node: testNode})
			b.ReportAllocs()
			for b.Loop() {
				_ = nft.Render(table)
			}
		})
	}
}
