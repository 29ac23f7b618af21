package enforcer

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// deferEveryUnion makes the test's small clusters defer every new union.
func deferEveryUnion(t *testing.T) {
	old := deferUnionElements
	deferUnionElements = 0
	t.Cleanup(func() { deferUnionElements = old })
}

// unionEdits is manyPolicies(k) edited step by step as the events bench
// edits policies: step s moves the first port of one policy onto the port
// of another, so that the two peer lists share a port no union covered.
func unionEdits(k, steps int) []*k8s.Snapshot {
	base := manyPolicies(k)
	out := []*k8s.Snapshot{base}
	cur := base
	for s := range steps {
		edited := fmt.Sprintf("team-%03d", (s*7)%k)
		next := *cur
		next.Policies = nil
		for _, np := range cur.Policies {
			if np.Namespace == "x" && np.Name == edited {
				np = np.DeepCopy()
				np.Spec.Ingress[0].Ports[0] = port(tcp, int32(1000+(s*13+5)%k))
			}
			next.Policies = append(next.Policies, np)
		}
		out = append(out, &next)
		cur = &next
	}
	return out
}

// A compile that defers new unions writes no union set, decides every
// connection as the full compile does, and its Delta is the tables' true
// difference; the next compile of the same snapshot gives exactly the full
// compile's table.
func TestDeferredUnionsDecideAsMergedThenSettle(t *testing.T) {
	deferEveryUnion(t)
	const k = 30
	opts := Options{Node: testNode, DeferUnions: true}
	inc := NewCompiler(opts)
	var prev *nft.Table
	deferredSteps := 0
	ports := []uint16{0, 79, 80, 81, 5000, 5050}
	for i := range k {
		ports = append(ports, uint16(1000+i))
	}
	snaps := unionEdits(k, 40)
	for step, snap := range snaps {
		where := fmt.Sprintf("step %d", step)
		got, gotProblems := inc.Compile(snap, DefaultPriority)
		deferred := inc.deferredNow()
		if step == 0 && deferred > 0 {
			t.Fatalf("the first compile deferred %d unions", deferred)
		}
		if deferred == 0 {
			prev = checkCompiled(t, inc, opts, prev, got, gotProblems, snap, DefaultPriority, where)
			continue
		}
		deferredSteps++
		if len(gotProblems) > 0 {
			t.Fatalf("%s: %v", where, gotProblems)
		}
		requireUniqueElements(t, got)
		checkDelta(t, inc, prev, got, where)
		before := map[string]bool{}
		for _, s := range prev.Sets {
			before[s.Name] = true
		}
		for _, s := range got.Sets {
			if !before[s.Name] && strings.HasPrefix(s.Comment, "peers "+unionPrefix) {
				t.Errorf("%s: the deferring compile added union set %s (%s)", where, s.Name, s.Comment)
			}
		}
		full, _ := NewCompiler(opts).Compile(snap, DefaultPriority)
		for _, from := range allTestPods() {
			for _, f := range families {
				for _, proto := range []nft.Proto{nft.ProtoTCP, nft.ProtoUDP} {
					for _, port := range ports {
						p := nft.Packet{Src: addrOf(t, from, f), Dst: addrOf(t, "x/a", f), Proto: proto, Dport: port}
						if d, want := traceAllowed(t, got, p), traceAllowed(t, full, p); d != want {
							t.Errorf("%s: %s→x/a %s/%d: deferred allowed=%v, merged allowed=%v", where, from, proto, port, d, want)
						}
					}
				}
			}
		}
		if step%2 == 1 {
			// Undone before the merge: the deferred chain goes, and
			// with it what it held.
			undone := checkIncremental(t, inc, opts, got, snaps[step-1], DefaultPriority, where+" (undone)")
			if len(inc.deferred) > 0 {
				t.Fatalf("%s: undone, %d fragment chains still wait for a union", where, len(inc.deferred))
			}
			got, _ = inc.Compile(snap, DefaultPriority)
			checkDelta(t, inc, undone, got, where+" (redone)")
		}
		// The next compile, of the same snapshot, merges them.
		prev = checkIncremental(t, inc, opts, got, snap, DefaultPriority, where+" (merged)")
		if n := inc.deferredNow(); n > 0 {
			t.Fatalf("%s: the merging compile deferred %d unions", where, n)
		}
	}
	t.Logf("%d of 40 edits deferred a union", deferredSteps)
	if deferredSteps < 5 {
		t.Errorf("only %d of 40 edits deferred a union; the test edits to defer them", deferredSteps)
	}
}

// Run merges deferred unions by itself, in a sync of the same snapshot
// once the window of the sync that deferred them ends: every snapshot
// ends up programmed as a full compile writes it.
func TestRunMergesDeferredUnions(t *testing.T) {
	deferEveryUnion(t)
	s, f := newFakeSyncerWith(t, Options{Node: testNode, DeferUnions: true})
	var deferredSyncs, syncs int
	s.OnSync(func(res SyncResult, err error) {
		syncs++
		if res.Deferred > 0 {
			deferredSyncs++
		}
	})
	snaps := unionEdits(30, 12)
	updates := make(chan *k8s.Snapshot)
	startRun(t, s, updates, Timing{Debounce: 50 * time.Millisecond, MaxDelay: time.Hour, Retry: time.Hour})
	for i, snap := range snaps {
		updates <- snap
		eventually(t, fmt.Sprintf("snapshot %d programmed, its unions merged", i), func() bool {
			gen, err := s.Status()
			if err != nil || gen == 0 {
				return false
			}
			want := mustCompile(t, snap)
			drift, err := f.Drift(want)
			return err == nil && drift == ""
		})
	}
	if deferredSyncs == 0 {
		t.Fatalf("no sync of %d deferred a union", syncs)
	}
	holds(t, s, f, snaps[len(snaps)-1])
}
