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
// event costs about 1. When only pods changed, the set is patched
// instead: each changed pod's addresses leave or join it, and the
// ranges around them are split or merged. The result is the same set
// computePeers would build (TestIncrementalMatchesFull compares them);
// a namespace or node change still rebuilds it whole.

// peerSelects reports whether e's selectors name pd, as selectPods would.
func (c *Compiler) peerSelects(e *peerSets, pd *pod) bool {
	for _, s := range e.parsed.selectors {
		if s.namespaces == nil {
			if pd.key.namespace == e.parsed.policyNS && pd.matchedBy(s.pods) {
				return true
			}
			continue
		}
		if c.namespaceView(pd.key.namespace).selects(s, pd.key.namespace) && pd.matchedBy(s.pods) {
			return true
		}
	}
	return false
}

// patchPeers brings e in step with the pods that changed, by address; it
// reports false when it cannot (the set was never counted, or it names
// nodes), and the caller rebuilds it.
func (c *Compiler) patchPeers(e *peerSets, ch *changes) bool {
	if e.dups == nil || len(e.parsed.nodes) > 0 {
		return false
	}
	// Outside the ipBlocks (never counted: edit leaves them), an address
	// is in the set while some selected pod holds it.
	mp := newMemberPatch(e.dups, func(ip netip.Addr) bool {
		return inRangeElements(e.sets[nft.FamilyOf(ip)].Elements, ip)
	})
	for _, changed := range ch.pods {
		for _, pc := range changed {
			if pc.old != nil && c.peerSelects(e, pc.old) {
				for _, ip := range pc.old.ips {
					if !e.inBlocks(ip) {
						mp.leave(ip)
					}
				}
			}
			if pc.new != nil && c.peerSelects(e, pc.new) {
				for _, ip := range pc.new.ips {
					if !e.inBlocks(ip) {
						mp.join(ip)
					}
				}
			}
		}
	}
	elems := map[nft.IPFamily][]nft.Element{}
	edit := func(ip netip.Addr, add bool) {
		f := nft.FamilyOf(ip)
		if _, ok := elems[f]; !ok {
			elems[f] = slices.Clone(e.sets[f].Elements)
		}
		if add {
			elems[f] = addAddr(elems[f], ip)
		} else {
			elems[f] = removeAddr(elems[f], ip)
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
			c.setPeerElements(e, f, next)
		}
	}
	return true
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
// merging it with a neighbour it touches.
func addAddr(ranges []nft.Element, ip netip.Addr) []nft.Element {
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
	return slices.Replace(ranges, lo, hi, rangeOf(first, last))
}

// removeAddr takes ip out of the ranges, splitting the one holding it.
func removeAddr(ranges []nft.Element, ip netip.Addr) []nft.Element {
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
	return slices.Replace(ranges, i, i+1, parts...)
}
