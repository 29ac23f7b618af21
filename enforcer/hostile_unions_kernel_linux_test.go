package enforcer

import (
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/nftpolicy/nftpolicy/nft"
)

// runUUKernel syncs the union world (hostile_unions_world_test.go) into a
// throwaway network namespace with a Syncer, and after each sync holds
// the kernel to a fresh compile of the snapshot (npCheckKernel: Conn.Drift,
// the chains and the address sets as `nft -j` lists them). With
// deferUnions, an interim sync (a union waiting) is held to its own table
// (Drift) and the fresh compile to the sync of the same snapshot after it.
func runUUKernel(t *testing.T, seed uint64, share, deferUnions bool, syncs int) {
	t.Helper()
	if deferUnions {
		deferEveryUnion(t)
	}
	netns, conn := openKernelNS(t, "uuk")
	opts := Options{Node: testNode, DeferUnions: deferUnions}
	s := NewSyncer(conn, opts, PrioritySetting{Auto: true}, zap.NewNop())
	w := newUUWorld(seed, share)
	var history []string
	interim := 0
	for i := 0; i < syncs; i++ {
		events := w.batch(5)
		history = append(history, fmt.Sprintf("sync %d: %q", i, events))
		if len(history) > 3 {
			history = history[1:]
		}
		where := fmt.Sprintf("seed %d share %v defer %v, last syncs:\n\t%s\n", seed, share, deferUnions, strings.Join(history, "\n\t"))
		snap := w.snapshot()
		res, err := s.Sync(snap)
		if err != nil {
			t.Fatalf("%s: sync: %v", where, err)
		}
		if i > 0 && res.Batch.Full {
			t.Fatalf("%s: a full write, not an incremental one: %+v", where, res.Batch)
		}
		if res.Deferred > 0 {
			interim++
			if d, err := s.conn.Drift(res.Table); err != nil || d != "" {
				t.Fatalf("%s: the kernel differs from the interim table: %q, %v", where, d, err)
			}
			if res, err = s.Sync(snap); err != nil {
				t.Fatalf("%s: the follow-up sync: %v", where, err)
			}
			if res.Deferred > 0 {
				t.Fatalf("%s: the follow-up sync deferred %d", where, res.Deferred)
			}
			where += " (follow-up sync)"
		}
		fresh, _ := NewCompiler(Options{Node: testNode}).Compile(snap, s.prio)
		fresh.Comment = res.Table.Comment // the owner record the Syncer adds
		npCheckKernel(t, s, netns, fresh, where)
		if d := nft.Diff(fresh, res.Table); !d.Empty() {
			t.Fatalf("%s: the synced table differs from a fresh compile", where)
		}
	}
	t.Logf("%d interim syncs", interim)
	if deferUnions && interim < 3 {
		t.Fatalf("only %d syncs deferred a union: DeferUnions not exercised", interim)
	}
}

func TestHostileUnionsKernel(t *testing.T) {
	runUUKernel(t, 21, true, false, 25)
}

func TestHostileUnionsKernelDeferred(t *testing.T) {
	runUUKernel(t, 204, true, true, 30)
}
