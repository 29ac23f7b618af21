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
	// The base chains are built by every call (the input chain comes and
	// goes with pods judged for their node: node.go); the dispatch maps by
	// calls where a pod chain changed. Both lead their lists.
	base := map[string][2]*nft.Chain{}
	for i, t := range []*nft.Table{prev, cur} {
		for _, ch := range t.Chains {
			if ch.Hook == nil {
				break
			}
			b := base[ch.Name]
			b[i] = ch
			base[ch.Name] = b
		}
	}
	for _, name := range slices.Sorted(maps.Keys(base)) {
		d.RecordChain(base[name][0], base[name][1])
	}
	for _, name := range slices.Sorted(maps.Keys(c.chains.touched)) {
		d.RecordChain(c.chains.touched[name], c.chains.get(name))
	}
	sets := map[string][2]*nft.Set{}
	for i, t := range []*nft.Table{prev, cur} {
		for _, s := range t.Sets {
			if !isDispatchMap(s.Name) {
				break
			}
			p := sets[s.Name]
			p[i] = s
			sets[s.Name] = p
		}
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

// isDispatchMap reports whether name is one of the maps that lead a
// table's sets: dispatchMaps.
func isDispatchMap(name string) bool {
	for _, f := range families {
		if name == podsMapName(ingress, f) || name == podsMapName(egress, f) || name == nodeMapName(f) ||
			name == portsMapName(ingress, f) || name == portsMapName(egress, f) {
			return true
		}
	}
	return false
}
