package enforcer

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestTableObjectsOrderFollowsChanges puts and drops names at random, as
// compiles do, and checks after each round that the patched order is what
// sorting every held object afresh gives: sort keys first, names breaking
// ties, nothing dropped, nothing twice.
func TestTableObjectsOrderFollowsChanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var o tableObjects[string]
	o.startCall()
	for round := range 300 {
		for range rng.IntN(40) {
			name := fmt.Sprintf("n%03d", rng.IntN(200))
			switch rng.IntN(3) {
			case 0:
				o.drop(name)
			default:
				// Few sort keys, so that names must break ties.
				o.put(name, fmt.Sprintf("k%d", rng.IntN(5)), name)
			}
		}
		got := o.appendSorted(nil)
		type held struct{ key, name string }
		var want []held
		for name, e := range o.byName {
			want = append(want, held{e.sortKey, name})
		}
		slices.SortFunc(want, func(a, b held) int {
			if a.key != b.key {
				return strings.Compare(a.key, b.key)
			}
			return strings.Compare(a.name, b.name)
		})
		wantNames := make([]string, len(want))
		for i, h := range want {
			wantNames[i] = h.name
		}
		if !slices.Equal(got, wantNames) {
			t.Fatalf("round %d: order %v, want %v", round, got, wantNames)
		}
	}
}
