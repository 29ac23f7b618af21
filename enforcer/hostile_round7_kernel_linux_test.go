package enforcer

import (
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/nftpolicy/nftpolicy/internal/testns"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// runR7Kernel syncs the round-7 world (hostile_round7_world_test.go) into
// a throwaway network namespace, unions crossing kind at unionRunLength 1.
// Every restartEvery syncs the Syncer is replaced by a new one on the
// same table (a restarted daemon: its first write is whole); every
// conflictEvery syncs another table is committed just before the sync, so
// that the delta is refused for its generation, our table read back and
// the delta retried (never a repair: nobody touched our table). After each
// sync the kernel must hold a fresh compile of the snapshot
// (npCheckKernel), and at each crossover the table must decide as the
// reference does.
func runR7Kernel(t *testing.T, v r7Variant, seed uint64, syncs, restartEvery, conflictEvery int) (flips int) {
	t.Helper()
	netns, conn := openKernelNS(t, "r7k")
	newSyncer := func() *Syncer { return NewSyncer(conn, v.opts, PrioritySetting{Auto: true}, zap.NewNop()) }
	s := newSyncer()
	t.Cleanup(func() { s.Close() })
	freshOpts := v.opts
	freshOpts.DeferUnions = false
	w := newR7World(seed, v.flow)
	var history []string
	var prev *nft.Table
	first := true
	conflicts := 0
	for i := 0; i < syncs; i++ {
		events := w.batch(3)
		history = append(history, fmt.Sprintf("sync %d: %q", i, events))
		if len(history) > 3 {
			history = history[1:]
		}
		where := fmt.Sprintf("%s seed %d, last syncs:\n\t%s\n", v.name, seed, strings.Join(history, "\n\t"))
		if restartEvery > 0 && i > 0 && i%restartEvery == 0 {
			s.Close() // the daemon dies: its beacon goes
			s = newSyncer()
			first = true
			where += " (restarted Syncer)"
		}
		conflict := conflictEvery > 0 && !first && i%conflictEvery == conflictEvery-1
		if conflict {
			testns.Nft(t, netns, "", "add", "table", "inet", fmt.Sprintf("someone-else-%d", i))
			where += " (after a foreign commit)"
		}
		repairs, before := s.Repairs(), s.Conflicts()
		snap := w.snapshot()
		res, err := s.Sync(snap)
		if err != nil {
			t.Fatalf("%s: sync: %v\n--- table:\n%s", where, err, nft.Render(res.Table))
		}
		if !first && res.Batch.Full {
			t.Fatalf("%s: a full write, not an incremental one: %+v", where, res.Batch)
		}
		if s.Repairs() != repairs {
			t.Fatalf("%s: the Syncer repaired its table (%d repairs), which nobody touched", where, s.Repairs())
		}
		if conflict && res.Batch.Messages > 0 {
			if s.Conflicts() == before {
				t.Fatalf("%s: the foreign commit did not refuse the delta", where)
			}
			conflicts++
		}
		if res.Deferred > 0 {
			if d, err := s.conn.Drift(res.Table); err != nil || d != "" {
				t.Fatalf("%s: the kernel differs from the interim table: %q, %v", where, d, err)
			}
			if res, err = s.Sync(snap); err != nil {
				t.Fatalf("%s: the follow-up sync: %v", where, err)
			}
			if res.Deferred > 0 || res.Batch.Full {
				t.Fatalf("%s: the follow-up sync deferred %d, batch %+v", where, res.Deferred, res.Batch)
			}
			where += " (follow-up sync)"
		}
		first = false
		fresh, _ := NewCompiler(freshOpts).Compile(snap, s.prio)
		fresh.Comment = res.Table.Comment
		npCheckKernel(t, s, netns, fresh, where)
		if d := nft.Diff(fresh, res.Table); !d.Empty() {
			t.Fatalf("%s: the synced table differs from a fresh compile", where)
		}
		n := 0
		if prev != nil {
			n = kindChanges(prev, res.Table)
		}
		flips += n
		if n > 0 {
			r7RefCheck(t, res.Table, snap, where)
		}
		prev = res.Table
	}
	if conflictEvery > 0 && conflicts == 0 {
		t.Fatalf("%s seed %d: no sync met a foreign commit", v.name, seed)
	}
	return flips
}

func TestHostileRound7UnionKindKernel(t *testing.T) {
	lowerUnionRunLength(t, 1)
	for _, v := range r7Variants {
		t.Run(v.name, func(t *testing.T) {
			if v.opts.DeferUnions {
				deferEveryUnion(t)
			}
			flips := 0
			from, n := r7Seeds(3, 2)
			for seed := from; seed < from+n; seed++ {
				flips += runR7Kernel(t, v, seed, 30, 11, 5)
			}
			t.Logf("%d unions changed kind", flips)
			if flips < 5 {
				t.Fatalf("only %d unions changed kind: the crossover is not exercised", flips)
			}
		})
	}
}

// TestHostileRound7UnionFlapKernel is TestHostileRound7UnionFlapCost
// through a Syncer: each one-pod event at the threshold is a delta the
// kernel takes (the new set, the pod chain rewritten, the old set gone),
// and the kernel holds a fresh compile after it; the batch adds at most
// the union's elements once.
func TestHostileRound7UnionFlapKernel(t *testing.T) {
	netns, conn := openKernelNS(t, "r7f")
	s := NewSyncer(conn, Options{Node: testNode}, PrioritySetting{Auto: true}, zap.NewNop())
	t.Cleanup(func() { s.Close() })
	const runs = 250
	with, without := r7FlapSnap(runs, true), r7FlapSnap(runs, false)
	if _, err := s.Sync(with); err != nil {
		t.Fatal(err)
	}
	worst := 0
	for i, snap := range []*k8s.Snapshot{without, with, without, with} {
		where := fmt.Sprintf("flap %d", i)
		res, err := s.Sync(snap)
		if err != nil {
			t.Fatalf("%s: sync: %v", where, err)
		}
		if res.Batch.Full {
			t.Fatalf("%s: a whole write", where)
		}
		fresh, _ := NewCompiler(Options{Node: testNode}).Compile(snap, s.prio)
		fresh.Comment = res.Table.Comment
		npCheckKernel(t, s, netns, fresh, where)
		t.Logf("%s: batch %+v", where, res.Batch)
		worst = max(worst, res.Batch.ElementsAdded)
	}
	if worst > 4*runs+1 {
		t.Errorf("one pod of %d coming or going: the kernel batch adds %d elements, more than the union once", 4*runs+1, worst)
	}
}

// TestHostileRound7UnionsEdgesKernel runs the union world of
// hostile_unions_world_test.go (pods and ipBlocks at both ends of both
// address spaces) with unions changing kind at unionRunLength 1, a
// foreign commit before every fourth sync (the delta refused for its
// generation, our table read back, compared and the delta retried: never
// a repair) and a restart of the Syncer halfway.
func TestHostileRound7UnionsEdgesKernel(t *testing.T) {
	lowerUnionRunLength(t, 1)
	for _, seed := range []uint64{33, 34} {
		netns, conn := openKernelNS(t, "r7e")
		opts := Options{Node: testNode, Counters: true}
		s := NewSyncer(conn, opts, PrioritySetting{Auto: true}, zap.NewNop())
		w := newUUWorld(seed, seed%2 == 0)
		first, flips, conflicts := true, 0, 0
		var prev *nft.Table
		for i := 0; i < 24; i++ {
			events := w.batch(4)
			where := fmt.Sprintf("seed %d sync %d: %q", seed, i, events)
			if i == 12 {
				s.Close()
				s = NewSyncer(conn, opts, PrioritySetting{Auto: true}, zap.NewNop())
				first = true
				where += " (restarted Syncer)"
			}
			conflict := !first && i%4 == 3
			if conflict {
				testns.Nft(t, netns, "", "add", "table", "inet", fmt.Sprintf("other-%d", i))
			}
			repairs, before := s.Repairs(), s.Conflicts()
			snap := w.snapshot()
			res, err := s.Sync(snap)
			if err != nil {
				t.Fatalf("%s: sync: %v", where, err)
			}
			if !first && res.Batch.Full {
				t.Fatalf("%s: a full write: %+v", where, res.Batch)
			}
			if s.Repairs() != repairs {
				t.Fatalf("%s: the Syncer repaired a table nobody touched (conflict %v)", where, conflict)
			}
			if conflict && res.Batch.Messages > 0 {
				if s.Conflicts() == before {
					t.Fatalf("%s: the foreign commit did not refuse the delta", where)
				}
				conflicts++
			}
			first = false
			fresh, _ := NewCompiler(opts).Compile(snap, s.prio)
			fresh.Comment = res.Table.Comment
			npCheckKernel(t, s, netns, fresh, where)
			if prev != nil {
				flips += kindChanges(prev, res.Table)
			}
			prev = res.Table
		}
		s.Close()
		t.Logf("seed %d: %d unions changed kind, %d conflicts", seed, flips, conflicts)
		if flips < 3 || conflicts < 2 {
			t.Fatalf("seed %d: %d flips, %d conflicts: not exercised", seed, flips, conflicts)
		}
	}
}
