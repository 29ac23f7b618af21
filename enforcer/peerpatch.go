package enforcer

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/nftpolicy/nftpolicy/nft"
)

// Patching peer sets. A peer set that names many pods (a namespace
// selector matching every namespace, as "from every namespace" rules and
// baseline guardrails have) was rebuilt whole on every pod event: the
// selectors matched against every pod of the cluster and the addresses
// merged into ranges again, 10-19 ms at 10k pods, where the rest of the
// event costs about 1. When only pods and namespaces changed, the set is
// patched instead: each changed pod's addresses, and those of the pods of
// a namespace whose labels changed, leave or join it, and the ranges
// around them are split or merged. The result is the same set
// computePeers would build (TestIncrementalMatchesFull compares them); a
// node change, or a patch of more edits than computing the set again
// costs (patchBudget), still rebuilds it whole.

// peerSelects reports whether e's selectors name pd, as selectPods would,
// with the namespace of pd read as view.
func (e *peerSets) peerSelects(pd *pod, view nsView) bool {
	for _, s := range e.parsed.selectors {
		if s.namespaces == nil {
			if pd.key.namespace == e.parsed.policyNS && pd.matchedBy(s.pods) {
				return true
			}
			continue
		}
		if view.selects(s, pd.key.namespace) && pd.matchedBy(s.pods) {
			return true
		}
	}
	return false
}

// patchBudget bounds the work of a patch: each address it adds or removes
// may move every range of the set once (slices.Replace), so a patch of k
// addresses into n ranges costs about k*n moves, where computing the set
// again costs about n. A namespace of many pods that changes its labels,
// or a burst of pod events, past this many moves rebuilds the set. A
// variable for the tests, which also run with every patch refused.
var patchBudget = 1 << 16

// viewsBefore returns what namespace selectors read of each namespace
// before the changes in ch: the old view of a namespace that changed, the
// current one of any other.
func (c *Compiler) viewsBefore(ch *changes) func(ns string) nsView {
	if len(ch.namespaces) == 0 {
		return c.namespaceView
	}
	old := make(map[string]nsView, len(ch.namespaces))
	for _, nc := range ch.namespaces {
		old[nc.name] = nc.old
	}
	return func(ns string) nsView {
		if v, ok := old[ns]; ok {
			return v
		}
		return c.namespaceView(ns)
	}
}

// unchangedPods are the pods of a changed namespace that did not change
// themselves: their addresses move with the namespace's view alone.
func (c *Compiler) unchangedPods(ch *changes, ns string) []*pod {
	changed := map[*pod]bool{}
	for _, pc := range ch.pods[ns] {
		changed[pc.new] = true
	}
	var out []*pod
	for _, pd := range c.byNS[ns] {
		if !changed[pd] {
			out = append(out, pd)
		}
	}
	return out
}

// patchPeers brings e in step with the pods and namespaces that changed,
// by address; it reports false when it cannot (the set was never counted,
// it names nodes, or the patch would cost more than computing the set:
// patchBudget), and the caller rebuilds it.
func (c *Compiler) patchPeers(e *peerSets, ch *changes) bool {
	if e.dups == nil || len(e.parsed.nodes) > 0 {
		return false
	}
	// Outside the ipBlocks (never counted: edit leaves them), an address
	// is in the set while some selected pod holds it.
	mp := newMemberPatch(e.dups, func(ip netip.Addr) bool {
		return inRangeElements(e.sets[nft.FamilyOf(ip)].Elements, ip)
	})
	give := func(pd *pod, join bool) {
		for _, ip := range pd.ips {
			switch {
			case e.inBlocks(ip):
			case join:
				mp.join(ip)
			default:
				mp.leave(ip)
			}
		}
	}
	before := c.viewsBefore(ch)
	for ns, changed := range ch.pods {
		for _, pc := range changed {
			if pc.old != nil && e.peerSelects(pc.old, before(ns)) {
				give(pc.old, false)
			}
			if pc.new != nil && e.peerSelects(pc.new, c.namespaceView(ns)) {
				give(pc.new, true)
			}
		}
	}
	for _, nc := range ch.namespaces {
		for _, pd := range c.unchangedPods(ch, nc.name) {
			was, is := e.peerSelects(pd, nc.old), e.peerSelects(pd, nc.new)
			if was != is {
				give(pd, is)
			}
		}
	}
	if n := len(mp.gone) + len(mp.came); n*(e.sets[nft.IPv4].Len()+e.sets[nft.IPv6].Len()) > patchBudget {
		return false // e.dups, which the patch began to edit, computePeers counts again
	}
	elems := map[nft.IPFamily][]nft.Element{}
	edits := map[nft.IPFamily]*rangeEdits{}
	edit := func(ip netip.Addr, add bool) {
		f := nft.FamilyOf(ip)
		if _, ok := elems[f]; !ok {
			elems[f] = slices.Clone(e.sets[f].Elements)
			edits[f] = &rangeEdits{}
		}
		if add {
			elems[f] = addAddr(elems[f], ip, edits[f])
		} else {
			elems[f] = removeAddr(elems[f], ip, edits[f])
		}
	}
	for _, ip := range slices.SortedFunc(maps.Keys(mp.gone), netip.Addr.Compare) {
		edit(ip, false)
	}
	for _, ip := range slices.SortedFunc(maps.Keys(mp.came), netip.Addr.Compare) {
		edit(ip, true)
	}
	for _, f := range families {
		if next, ok := elems[f]; ok {
			c.patchPeerSet(e, f, next, edits[f])
		}
	}
	return true
}

// rangeEdits are the ranges a patch of a peer set took out of the set as
// it was and put into it, each edit of one address composed with those
// before (a range put in and taken out again by a later edit is neither).
type rangeEdits struct{ removed, added map[nft.Element]bool }

func (r *rangeEdits) remove(el nft.Element) {
	if r.added[el] {
		delete(r.added, el)
		return
	}
	if r.removed == nil {
		r.removed = map[nft.Element]bool{}
	}
	r.removed[el] = true
}

func (r *rangeEdits) add(el nft.Element) {
	if r.removed[el] {
		delete(r.removed, el)
		return
	}
	if r.added == nil {
		r.added = map[nft.Element]bool{}
	}
	r.added[el] = true
}

// patchPeerSet makes elems, which edits made of what e's set of family f
// held, that set's ranges (setPeerElements), and gives the delta the
// exact change, so that the writer need not compare two sets of thousands
// of ranges to find the few an event moved. Only for the set of the
// previous table: a set already replaced in this compile leaves its
// change to the comparison.
func (c *Compiler) patchPeerSet(e *peerSets, f nft.IPFamily, elems []nft.Element, edits *rangeEdits) {
	before := e.sets[f]
	_, replaced := c.sets.touched[c.peersSetName(e.key, f)]
	c.setPeerElements(e, f, elems)
	if before == nil || e.sets[f] == before || replaced {
		return
	}
	byAddr := func(a, b nft.Element) int { return a.Addr.Compare(b.Addr) }
	c.patches[before] = nft.SetUpdate{Old: before, New: e.sets[f], Exact: true,
		Removed: slices.SortedFunc(maps.Keys(edits.removed), byAddr),
		Added:   slices.SortedFunc(maps.Keys(edits.added), byAddr)}
}

// inBlocks reports whether an ipBlock of e names ip.
func (e *peerSets) inBlocks(ip netip.Addr) bool {
	return e.parsed.blocks != nil && e.parsed.blocks.Contains(ip)
}

// inRangeElements reports whether ranges (sorted and merged, as rangesOf
// leaves them) hold ip.
func inRangeElements(ranges []nft.Element, ip netip.Addr) bool {
	i, _ := slices.BinarySearchFunc(ranges, ip, func(el nft.Element, ip netip.Addr) int { return lastOf(el).Compare(ip) })
	return i < len(ranges) && ranges[i].Addr.Compare(ip) <= 0
}

func lastOf(el nft.Element) netip.Addr {
	if el.Last.IsValid() {
		return el.Last
	}
	return el.Addr
}

// rangeOf is the element for first..last, as rangesOf writes it.
func rangeOf(first, last netip.Addr) nft.Element {
	if first == last {
		return nft.Element{Addr: first}
	}
	return nft.Element{Addr: first, Last: last}
}

// addAddr adds ip to ranges sorted and merged as rangesOf leaves them,
// merging it with a neighbour it touches. It records in edits (if not
// nil) the ranges it replaces and the one it puts in.
func addAddr(ranges []nft.Element, ip netip.Addr, edits *rangeEdits) []nft.Element {
	i, _ := slices.BinarySearchFunc(ranges, ip, func(el nft.Element, ip netip.Addr) int { return lastOf(el).Compare(ip) })
	if i < len(ranges) && ranges[i].Addr.Compare(ip) <= 0 {
		return ranges // already in ranges[i]
	}
	first, last := ip, ip
	lo, hi := i, i // ranges[lo:hi] merge into the new one
	if i > 0 && lastOf(ranges[i-1]).Next() == ip {
		first, lo = ranges[i-1].Addr, i-1
	}
	if i < len(ranges) && ip.Next() == ranges[i].Addr {
		last, hi = lastOf(ranges[i]), i+1
	}
	if edits != nil {
		for _, el := range ranges[lo:hi] {
			edits.remove(el)
		}
		edits.add(rangeOf(first, last))
	}
	return slices.Replace(ranges, lo, hi, rangeOf(first, last))
}

// removeAddr takes ip out of the ranges, splitting the one holding it,
// and records in edits (if not nil) the range it takes out and the parts
// it puts in.
func removeAddr(ranges []nft.Element, ip netip.Addr, edits *rangeEdits) []nft.Element {
	i, _ := slices.BinarySearchFunc(ranges, ip, func(el nft.Element, ip netip.Addr) int { return lastOf(el).Compare(ip) })
	if i == len(ranges) || ranges[i].Addr.Compare(ip) > 0 {
		return ranges // not there
	}
	el := ranges[i]
	var parts []nft.Element
	if el.Addr != ip {
		parts = append(parts, rangeOf(el.Addr, ip.Prev()))
	}
	if lastOf(el) != ip {
		parts = append(parts, rangeOf(ip.Next(), lastOf(el)))
	}
	if edits != nil {
		edits.remove(el)
		for _, p := range parts {
			edits.add(p)
		}
	}
	return slices.Replace(ranges, i, i+1, parts...)
}
