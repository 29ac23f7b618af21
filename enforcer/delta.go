package enforcer

import (
	"maps"
	"slices"

	"github.com/nftpolicy/nftpolicy/nft"
)

// touched records what one Compile call registered or dropped: for each
// chain and set name, what the table held under it before the call (nil:
// nothing). Delta compares only these, so its cost follows the event.
type touched struct {
	chains map[string]*nft.Chain
	sets   map[string]*nft.Set
	// patches are exact element changes, keyed by the set they apply to,
	// for sets too large to compare whole on every event.
	patches map[*nft.Set]nft.SetUpdate
}

func (c *Compiler) touchChain(name string) {
	if _, ok := c.touched.chains[name]; ok {
		return
	}
	var before *nft.Chain
	if e, ok := c.chains[name]; ok {
		before = e.chain
	}
	c.touched.chains[name] = before
}

func (c *Compiler) touchSet(name string) {
	if _, ok := c.touched.sets[name]; ok {
		return
	}
	var before *nft.Set
	if e, ok := c.sets[name]; ok {
		before = e.set
	}
	c.touched.sets[name] = before
}

// DeltaFrom returns what changes from old, a table this Compiler or anyone
// returned, to the last table Compile returned: Delta when old is the
// table before it, nft.Diff of the two otherwise (after a failed write).
func (c *Compiler) DeltaFrom(old *nft.Table) *nft.Delta {
	if old != nil && old == c.prevTable {
		return c.Delta()
	}
	return nft.Diff(old, c.lastTable)
}

// Delta returns what changed between the two tables the last two Compile
// calls returned: what nft.Diff of them would return (TestIncrementalMatchesFull
// checks it), found from what the last call touched instead of from every
// chain and set of both tables. After the first call it is Full.
func (c *Compiler) Delta() *nft.Delta {
	prev, cur := c.prevTable, c.lastTable
	if prev == nil || cur == nil {
		return &nft.Delta{Full: true, Reason: "nothing programmed yet"}
	}
	d := &nft.Delta{}
	// The base chain is built by every call; the dispatch maps by calls
	// where a pod chain changed.
	d.RecordChain(prev.Chains[0], cur.Chains[0])
	for _, name := range slices.Sorted(maps.Keys(c.touched.chains)) {
		var after *nft.Chain
		if e, ok := c.chains[name]; ok {
			after = e.chain
		}
		d.RecordChain(c.touched.chains[name], after)
	}
	sets := map[string][2]*nft.Set{}
	for i, s := range cur.Sets[:len(c.dispatch)] {
		sets[s.Name] = [2]*nft.Set{prev.Sets[i], s}
	}
	for name, before := range c.touched.sets {
		var after *nft.Set
		if e, ok := c.sets[name]; ok {
			after = e.set
		}
		sets[name] = [2]*nft.Set{before, after}
	}
	for _, name := range slices.Sorted(maps.Keys(sets)) {
		before, after := sets[name][0], sets[name][1]
		if patch, ok := c.touched.patches[before]; ok && patch.New == after && after != nil && !d.Full {
			d.UpdateSets = append(d.UpdateSets, patch)
			continue
		}
		d.RecordSet(before, after)
	}
	return d
}
