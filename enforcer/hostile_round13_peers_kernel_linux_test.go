package enforcer

import (
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/nftpolicy/nftpolicy/k8s"
	networkingv1 "k8s.io/api/networking/v1"
)

// Hostile review, round 13: the peer world of hostile_round13_peers_test.go
// synced into a kernel, delta by delta, with and without DeferUnions: after
// each sync the kernel holds a fresh compile by content (npCheckKernel:
// Drift, and nft -j for the interval sets), and the synced table decides
// as the reference does (r13Check).
func TestHostileRound13PeersKernel(t *testing.T) {
	var p4, p6 []string
	for i := range 96 {
		p4 = append(p4, fmt.Sprintf("10.0.0.%d", i))
		p6 = append(p6, fmt.Sprintf("fd00::%x", i))
	}
	for _, crowded := range []bool{false, true} {
		for _, deferUnions := range []bool{false, true} {
			for seed := uint64(1); seed <= 4; seed++ {
				t.Run(fmt.Sprintf("crowded=%v/defer=%v/%d", crowded, deferUnions, seed), func(t *testing.T) {
					netns, conn := openKernelNS(t, "r13pk")
					opts := Options{Node: testNode, DeferUnions: deferUnions}
					s := NewSyncer(conn, opts, PrioritySetting{Auto: true}, zap.NewNop())
					t.Cleanup(func() { s.Close() })
					w := newR13World(seed)
					if crowded {
						w.pool4, w.pool6, w.names = p4, p6, 40
						for i := range 100 {
							w.pod([]string{"x", "y", "z"}[i%3], fmt.Sprintf("p%d", i%40))
						}
					}
					var hist []string
					for i := range 25 {
						var evs []string
						for range 1 + w.r.IntN(3) {
							evs = append(evs, w.event())
						}
						hist = append(hist, fmt.Sprintf("%d: %q", i, evs))
						if len(hist) > 3 {
							hist = hist[1:]
						}
						where := fmt.Sprintf("seed %d, last:\n\t%s", seed, strings.Join(hist, "\n\t"))
						snap := w.snapshot()
						res, err := s.Sync(snap)
						if err != nil {
							t.Fatalf("%s: sync: %v", where, err)
						}
						if res.Deferred > 0 {
							r13Check(t, res.Table, snap, where+" (interim)")
							if d, err := s.conn.Drift(res.Table); err != nil || d != "" {
								t.Fatalf("%s: kernel differs from the interim table: %q %v", where, d, err)
							}
							if res, err = s.Sync(snap); err != nil {
								t.Fatalf("%s: follow-up sync: %v", where, err)
							}
						}
						fresh, _ := NewCompiler(Options{Node: testNode}).Compile(snap, s.prio)
						fresh.Comment = res.Table.Comment
						npCheckKernel(t, s, netns, fresh, where)
						r13Check(t, res.Table, snap, where)
					}
				})
			}
		}
	}
}

func newR13World(seed uint64) *r13World {
	w := &r13World{r: newR13Rand(seed), nsLabels: map[string]map[string]string{"x": {"ns": "x"}, "y": {"ns": "y"}, "z": {"ns": "z"}},
		pods: map[string]*k8s.Pod{}, pols: map[string]*networkingv1.NetworkPolicy{}}
	for i := range 8 {
		w.pod([]string{"x", "y", "z"}[i%3], fmt.Sprintf("p%d", i))
	}
	w.policy("np0")
	w.policy("np1")
	return w
}
