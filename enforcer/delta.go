package enforcer

import (
	"maps"
	"slices"

	"github.com/nftpolicy/nftpolicy/nft"
)

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
	for _, name := range slices.Sorted(maps.Keys(c.chains.touched)) {
		d.RecordChain(c.chains.touched[name], c.chains.get(name))
	}
	sets := map[string][2]*nft.Set{}
	for i, s := range cur.Sets[:len(c.dispatch)] {
		sets[s.Name] = [2]*nft.Set{prev.Sets[i], s}
	}
	for name, before := range c.sets.touched {
		sets[name] = [2]*nft.Set{before, c.sets.get(name)}
	}
	for _, name := range slices.Sorted(maps.Keys(sets)) {
		before, after := sets[name][0], sets[name][1]
		if patch, ok := c.patches[before]; ok && patch.New == after && after != nil && !d.Full {
			d.UpdateSets = append(d.UpdateSets, patch)
			continue
		}
		d.RecordSet(before, after)
	}
	return d
}
