package enforcer

import (
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// TestHostileRound16UnionsInTheKernel syncs the round 16 union world
// (hostile_round16_unions_test.go) into a throwaway namespace with a
// Syncer, 40 syncs of churn for each of two seeds, and after each sync
// reads every peer set the compiler holds back from the kernel (`nft -j
// list table`, parsed here: npKernelTable) and holds it to the oracle of
// the world, family by family: the lists and their unions as the kernel
// has them after the deltas, not as the model says.
//
// Held: the kernel holds the oracle's addresses in every peer set.
func TestHostileRound16UnionsInTheKernel(t *testing.T) {
	for _, seed := range []uint64{3, 5} {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			netns, conn := openKernelNS(t, "r16u")
			opts := Options{Node: testNode}
			s := NewSyncer(conn, opts, PrioritySetting{Auto: true}, zap.NewNop())
			w := newR16World(seed)
			checked := 0
			var history []string
			for i := range 40 {
				var events []string
				if i > 0 {
					for range 1 + w.r.IntN(4) {
						events = append(events, w.event())
					}
				}
				history = append(history, fmt.Sprintf("sync %d: %q", i, events))
				if len(history) > 3 {
					history = history[1:]
				}
				where := fmt.Sprintf("seed %d, last syncs:\n\t%s\n", seed, strings.Join(history, "\n\t"))
				res, err := s.Sync(w.snapshot())
				if err != nil {
					t.Fatalf("%s: sync: %v", where, err)
				}
				if i > 0 && res.Batch.Full {
					t.Fatalf("%s: a whole write, not a delta: %+v", where, res.Batch)
				}
				want := w.oracle()
				_, ksets := npKernelTable(t, netns, res.Table.Name)
				for e := range s.compiler.peers.values() {
					exp, ok := want[e.key]
					if e.parts != nil {
						exp, ok = nil, true
						for _, k := range e.parts {
							if p, found := want[k]; !found {
								ok = false
							} else if exp == nil {
								exp = p
							} else {
								exp = r16Union(exp, p)
							}
						}
					}
					if !ok {
						t.Fatalf("%s: the compiler holds peers %q, no rule of the world has", where, e.key)
					}
					for _, f := range families {
						name := e.sets[f].Name
						got, found := ksets[name]
						if !found || got == nil {
							t.Fatalf("%s: peers %q: the kernel has no address set %s", where, e.key, name)
						}
						if wf := r16Family(exp, f); !got.Equal(wf) {
							t.Fatalf("%s: peers %q (%d parts): the kernel's set %s holds %v, the oracle %v", where, e.key, len(e.parts), name, got.Ranges(), wf.Ranges())
						}
						checked++
					}
				}
			}
			t.Logf("%d kernel sets checked", checked)
		})
	}
}
