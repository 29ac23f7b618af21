package enforcer

import (
	"maps"
	"net/netip"
	"slices"
	"sort"

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
// around them are split or merged, in one pass over the set (editRanges):
// at 150k pods a namespace of 1,500 pods moves thousands of addresses in
// and out of sets of thousands of ranges. The result is the same set
// computePeers would build (TestIncrementalMatchesFull compares them); a
// node change still rebuilds it whole.

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
// by address, and returns the addresses it took out or put in; ok is
// false when it cannot (the set was never counted, or it names nodes),
// and the caller rebuilds it.
func (c *Compiler) patchPeers(e *peerSets, ch *changes) (moved []netip.Addr, ok bool) {
	if e.dups == nil || len(e.parsed.nodes) > 0 {
		return nil, false
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
		// A pod resolved twice in this compile (a pod later in the walk
		// claimed its address) changes view twice: old to mid, then mid
		// to new. mid joined as the namespace reads now, and must leave
		// the same way, or a relabel of its namespace in the same compile
		// leaves its addresses in the set, or takes out another pod's.
		made := map[*pod]bool{}
		for _, pc := range changed {
			if pc.new != nil {
				made[pc.new] = true
			}
		}
		for _, pc := range changed {
			view := before(ns)
			if made[pc.old] {
				view = c.namespaceView(ns)
			}
			if pc.old != nil && e.peerSelects(pc.old, view) {
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
	gone, came := byFamily(slices.Collect(maps.Keys(mp.gone))), byFamily(slices.Collect(maps.Keys(mp.came)))
	for _, f := range families {
		c.editPeerSet(e, f, gone[f], came[f])
		moved = append(append(moved, gone[f]...), came[f]...)
	}
	return moved, true
}

// byFamily splits addrs by family, each list sorted and without repeats.
func byFamily(addrs []netip.Addr) map[nft.IPFamily][]netip.Addr {
	out := map[nft.IPFamily][]netip.Addr{}
	for _, ip := range addrs {
		f := nft.FamilyOf(ip)
		out[f] = append(out[f], ip)
	}
	for f, l := range out {
		slices.SortFunc(l, netip.Addr.Compare)
		out[f] = slices.Compact(l)
	}
	return out
}

// editPeerSet takes the addresses gone out of e's set of family f and
// puts those in came into it, in one pass (editRanges), and gives the
// delta the exact change, so that the writer need not compare two sets of
// thousands of ranges to find the few an event moved. gone and came are
// of f, sorted, without repeats, and share no address.
func (c *Compiler) editPeerSet(e *peerSets, f nft.IPFamily, gone, came []netip.Addr) {
	if len(gone) == 0 && len(came) == 0 {
		return
	}
	elems, removed, added := editRanges(e.sets[f].Elements, gone, came)
	c.patchPeerSet(e, f, elems, removed, added)
}

// patchPeerSet makes elems e's set of family f (setPeerElements), and
// gives the delta the exact change from what the set held: the ranges
// removed and added (sorted). Only for the set of the previous table: a
// set already replaced in this compile leaves its change to the
// comparison.
func (c *Compiler) patchPeerSet(e *peerSets, f nft.IPFamily, elems, removed, added []nft.Element) {
	before := e.sets[f]
	_, replaced := c.sets.touched[c.peersSetName(e.key, f)]
	c.putPeerElements(e, f, elems, removed, added, true)
	if before == nil || e.sets[f] == before || replaced || e.sets[f].Name != before.Name {
		return
	}
	c.patches[before] = nft.SetUpdate{Old: before, New: e.sets[f], Exact: true, Removed: removed, Added: added}
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

// editRanges returns ranges (sorted and merged, as rangesOf leaves them)
// without the addresses in gone and with those in came, sorted and merged
// the same way: a new list, made in one pass that copies the runs of
// ranges no edit reaches whole. It also returns the ranges of the old
// list the new one lacks and those of the new one the old lacks, sorted:
// the exact change, found among the ranges the edits reached. gone and
// came are sorted, of the family of ranges, and share no address; an
// address of gone that ranges do not hold, or of came that they do,
// changes nothing.
func editRanges(ranges []nft.Element, gone, came []netip.Addr) (out, removed, added []nft.Element) {
	out = make([]nft.Element, 0, len(ranges)+len(came))
	var reached []nft.Element // ranges of the old list an edit reached
	var written []int         // indices of out emit wrote or extended, in order
	// emit appends first..last, which starts at or after every range
	// emitted before it, merging it with the last one if they touch.
	emit := func(first, last netip.Addr) {
		if n := len(out); n > 0 {
			end := lastOf(out[n-1])
			if first.Compare(end) <= 0 || end.Next() == first {
				if last.Compare(end) > 0 {
					if len(written) == 0 || written[len(written)-1] != n-1 {
						// A range copied as it was: the old list's.
						reached = append(reached, out[n-1])
						written = append(written, n-1)
					}
					out[n-1] = rangeOf(out[n-1].Addr, last)
				}
				return
			}
		}
		out = append(out, rangeOf(first, last))
		written = append(written, len(out)-1)
	}
	// copyRun appends run, ranges no edit reaches: only the first may
	// touch what was emitted before it.
	copyRun := func(run []nft.Element) {
		if len(run) > 0 {
			reached = append(reached, run[0])
			emit(run[0].Addr, lastOf(run[0]))
			out = append(out, run[1:]...)
		}
	}
	g, a := 0, 0 // gone[:g] and came[:a] are done
	cameBefore := func(ip netip.Addr) {
		for ; a < len(came) && came[a].Less(ip); a++ {
			emit(came[a], came[a])
		}
	}
	// edit emits r without the addresses of gone it holds, and the
	// addresses of came before each of its pieces.
	edit := func(r nft.Element) {
		reached = append(reached, r)
		first, last := r.Addr, lastOf(r)
		for g < len(gone) && gone[g].Less(first) {
			g++ // not held
		}
		from := first
		for ; g < len(gone) && gone[g].Compare(last) <= 0; g++ {
			ip := gone[g]
			if from.Less(ip) {
				cameBefore(from)
				emit(from, ip.Prev())
			}
			if ip == last {
				g++
				return
			}
			from = ip.Next()
		}
		cameBefore(from)
		emit(from, last)
	}
	i := 0 // ranges[:i] are done
	for g < len(gone) || a < len(came) {
		var x netip.Addr // the next edit
		if a == len(came) || g < len(gone) && gone[g].Less(came[a]) {
			x = gone[g]
		} else {
			x = came[a]
		}
		// The ranges that end before x are as they were (emit merges x
		// with the last of them if they touch); the next may hold x.
		k := i + sort.Search(len(ranges)-i, func(j int) bool { return lastOf(ranges[i+j]).Compare(x) >= 0 })
		copyRun(ranges[i:k])
		if k == len(ranges) {
			i = k
			break
		}
		edit(ranges[k])
		i = k + 1
	}
	copyRun(ranges[i:])
	for ; a < len(came); a++ {
		emit(came[a], came[a])
	}
	// Every range of either list outside reached and written is in both.
	byAddr := func(a, b nft.Element) int { return a.Addr.Compare(b.Addr) }
	slices.SortFunc(reached, byAddr)
	for _, r := range slices.Compact(reached) {
		if !holdsRange(out, r) {
			removed = append(removed, r)
		}
	}
	for _, k := range written {
		if !holdsRange(ranges, out[k]) {
			added = append(added, out[k])
		}
	}
	if len(out) == 0 {
		out = nil // as rangesOf leaves an empty set
	}
	return out, removed, added
}

// holdsRange reports whether the sorted ranges hold el, as a range.
func holdsRange(ranges []nft.Element, el nft.Element) bool {
	i, found := slices.BinarySearchFunc(ranges, el.Addr, func(r nft.Element, a netip.Addr) int { return r.Addr.Compare(a) })
	return found && ranges[i] == el
}
