package enforcer

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nftpolicy/nftpolicy/internal/scale"
	"github.com/nftpolicy/nftpolicy/k8s"
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
				elements += s.Len()
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

// BenchmarkCompileEvent measures the incremental compiler alone for one pod
// label change, alternating between two snapshots, with the delta the
// applier then writes.
// Run: go test -run '^$' -bench CompileEvent -benchmem ./enforcer/
func BenchmarkCompileEvent(b *testing.B) {
	for _, policiesPerNS := range []int{10, 100} {
		snap, changed := labelChange(100, policiesPerNS)
		snaps := []*k8s.Snapshot{changed, snap}
		b.Run(fmt.Sprintf("policies=%d/pods=10000/pod-label", 100*policiesPerNS), func(b *testing.B) {
			benchAlternating(b, snap, snaps)
		})
	}
}

// benchAlternating compiles base, then measures compiling each of snaps in
// turn, each an event away from the one before, with its delta.
func benchAlternating(b *testing.B, base *k8s.Snapshot, snaps []*k8s.Snapshot) {
	c := NewCompiler(Options{Node: testNode})
	c.Compile(base, DefaultPriority)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		c.Compile(snaps[i%len(snaps)], DefaultPriority)
		if d := c.Delta(); d.Full || d.Empty() {
			b.Fatalf("delta %+v", d)
		}
		i++
	}
}

// labelChange returns a synthetic cluster of 100 pods per namespace and the
// same cluster after one pod label change that moves a pod out of peer
// sets: ns-0/pod-3 leaves tier-0, which team-0 policies allow.
func labelChange(namespaces, policiesPerNS int) (base, changed *k8s.Snapshot) {
	base = scale.Cluster(namespaces, 100, policiesPerNS, 100, testNode, false)
	next := *base
	next.Pods = slices.Clone(base.Pods)
	i := slices.IndexFunc(base.Pods, func(p *k8s.Pod) bool { return p.Namespace == "ns-0" && p.Name == "pod-3" })
	p := base.Pods[i].DeepCopy()
	p.Labels["tier"] = "tier-1"
	next.Pods[i] = p
	return base, &next
}

// BenchmarkCompileEventLarge measures the incremental compiler for one pod
// added to (then removed from) a cluster of 150k pods and 10k policies,
// where every pod serves the named ports of the egress named-port sets
// (300k elements): what a pod event costs at the size of issue 14, in
// time and, above all, in allocation (B/op), which drives the collector.
// Run: go test -run '^$' -bench CompileEventLarge -benchmem ./enforcer/
func BenchmarkCompileEventLarge(b *testing.B) {
	base := scale.Cluster(100, 1500, 100, 30, testNode, false)
	extra := base.Pods[3].DeepCopy() // a peer of the team-0 policies
	extra.Name, extra.Spec.NodeName = "extra", "node-other"
	extra.Status.PodIPs = []corev1.PodIP{{IP: "10.250.0.1"}, {IP: "fd00::fa:0:1"}}
	added := *base
	added.Pods = append(slices.Clone(base.Pods), extra)
	added.Sort()
	benchAlternating(b, base, []*k8s.Snapshot{&added, base})
}
