package enforcer

import (
	"maps"
	"slices"

	"github.com/nftpolicy/nftpolicy/nft"
)

// Deferred unions.
//
// A fragment chain asks one peer set, the union of the peer lists allowed
// on its ports (flat.go). When an event gives a pod's fragment a set of
// peer lists no fragment had before (a policy edit that takes one list
// off port 443, where 15 others stay), that union's sets are new: at 10k
// policies, thousands of intervals the kernel must insert before the
// event's batch commits (~15 ms of a 35 ms p99 policy edit here).
//
// With Options.DeferUnions, an incremental compile does not build such a
// union at once. The new fragment chain asks each of its parts' sets,
// which the table already holds, one rule per part: it allows exactly the
// peers the union would, at one lookup per part for a while. The next
// compile merges the union and gives the chain its one lookup: a change's
// own, or one of the same snapshot that Syncer.Run runs a debounce later
// when no change is pending, in a batch of its own that no event waits
// on. A first compile, or one whose table the Syncer writes whole, never
// defers: a fresh compile and a settled one produce the same table.

// deferUnionElements is the smallest union, in its parts' elements of
// both families, worth deferring: smaller ones cost the kernel less than
// the follow-up sync does. A variable for the tests, which defer every
// union of their small clusters.
var deferUnionElements = 1024

// holdUnion holds what the fragment chain of the union of keys (its key
// ukey) asks: the union (acquireUnion), or, when it defers it, the parts,
// which releaseParts lets go. It reports whether it deferred.
func (c *Compiler) holdUnion(plan *flatPlan, keys []string, ukey string) (deferred bool) {
	_, built := c.peers.get(ukey)
	if !c.opts.DeferUnions || c.call <= 1 || c.wholeWrite || len(keys) < 2 || built {
		c.acquireUnion(plan, keys, ukey, nil)
		return false
	}
	size := 0
	for _, k := range keys {
		c.acquirePeersName(k)
		c.acquirePeers(k, plan.peers[k])
		e, _ := c.peers.get(k)
		for _, s := range e.sets {
			size += len(s.Elements)
		}
	}
	if size < deferUnionElements {
		c.acquireUnion(plan, keys, ukey, nil)
		c.releaseParts(keys)
		return false
	}
	return true
}

// releaseParts lets go of the peer lists a deferred fragment chain holds.
func (c *Compiler) releaseParts(keys []string) {
	for _, k := range keys {
		c.releasePeers(k)
		c.releasePeersName(k)
	}
}

// settleDeferred merges the unions of the fragment chains deferred by
// earlier compiles and gives each chain its one lookup. It runs after the
// compile's other work, so it merges from the parts as they are now.
func (c *Compiler) settleDeferred() {
	for _, k := range slices.Sorted(maps.Keys(c.deferred)) {
		ac := c.deferred[k]
		if ac.deferredAt == c.call {
			continue // this compile's own: the next one merges them
		}
		delete(c.deferred, k)
		// The union holds its parts too; then the chain's own hold goes.
		c.acquireUnion(&flatPlan{}, ac.parts, ac.key, nil)
		c.releaseParts(ac.parts)
		ac.parts = nil
		ac.chain = &nft.Chain{Name: ac.chain.Name, Rules: c.unionRules(ac.dir, []string{ac.key})}
		c.putChain("3\x00"+k, ac.chain)
	}
}

// deferredNow is the number of fragment chains this compile deferred.
func (c *Compiler) deferredNow() int {
	n := 0
	for _, ac := range c.deferred {
		if ac.deferredAt == c.call {
			n++
		}
	}
	return n
}

// hasDeferred reports whether fragment chains of the last compile still
// wait for their unions.
func (s *Syncer) hasDeferred() bool {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	return len(s.compiler.deferred) > 0
}
