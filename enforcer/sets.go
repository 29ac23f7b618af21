package enforcer

import (
	"cmp"
	"fmt"
	"maps"
	"math/bits"
	"net/netip"
	"slices"
	"strings"

	"go4.org/netipx"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nftpolicy/nftpolicy/nft"
)

// This file holds the sets shared between policies: peer sets, keyed by
// what a rule's peers say, and named-port sets, keyed by port name,
// protocol and direction. Both are reference counted by the active
// policies using them; peer sets are recomputed when a pod or namespace
// they could name changes, named-port sets patched with the pods that
// changed what they serve.

// parsedPeers is a rule's non-empty peer list with its selectors parsed.
type parsedPeers struct {
	policyNS  string
	selectors []peerSelector
	blocks    *netipx.IPSet // union of the ipBlock peers; nil when there are none
	// nodes select Nodes whose status addresses are peers (a
	// ClusterNetworkPolicy's nodes peer).
	nodes []labels.Selector
	// all: the peers are every address (a ClusterNetworkPolicy's networks
	// 0.0.0.0/0 and ::/0), matched without a set.
	all bool
}

// A peerSelector is one selector peer: namespaces nil means the policy's
// own namespace.
type peerSelector struct {
	namespaces labels.Selector
	pods       labels.Selector
	// mayBe: the selector names every namespace it may name (see
	// nsView.mayBeSelectedBy), for a ClusterNetworkPolicy's Deny rule.
	mayBe bool
}

// parsePeers parses a rule's peers; nil for a rule without peers, which
// allows every address.
func parsePeers(policyNS string, peers []networkingv1.NetworkPolicyPeer) (*parsedPeers, error) {
	if len(peers) == 0 {
		return nil, nil
	}
	out := &parsedPeers{policyNS: policyNS}
	var blocks netipx.IPSetBuilder
	hasBlocks := false
	for k, peer := range peers {
		if peer.IPBlock != nil {
			block, err := ipBlockSet(peer.IPBlock)
			if err != nil {
				return nil, fmt.Errorf("from/to[%d].ipBlock: %w", k, err)
			}
			blocks.AddSet(block)
			hasBlocks = true
			continue
		}
		s := peerSelector{pods: labels.Everything()}
		if peer.PodSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
			if err != nil {
				return nil, fmt.Errorf("from/to[%d]: podSelector: %w", k, err)
			}
			s.pods = sel
		}
		if peer.NamespaceSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
			if err != nil {
				return nil, fmt.Errorf("from/to[%d]: namespaceSelector: %w", k, err)
			}
			s.namespaces = sel
		}
		out.selectors = append(out.selectors, s)
	}
	if hasBlocks {
		set, err := blocks.IPSet()
		if err != nil {
			return nil, err
		}
		out.blocks = set
	}
	return out, nil
}

// Each ipBlock peer is its cidr minus its own excepts before the union: one
// peer's except never removes what another peer allows.
func ipBlockSet(b *networkingv1.IPBlock) (*netipx.IPSet, error) {
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return nil, fmt.Errorf("cidr %q: %w", b.CIDR, err)
	}
	var s netipx.IPSetBuilder
	s.AddPrefix(cidr.Masked())
	for _, e := range b.Except {
		ex, err := netip.ParsePrefix(e)
		if err != nil {
			return nil, fmt.Errorf("except %q: %w", e, err)
		}
		s.RemovePrefix(ex.Masked())
	}
	return s.IPSet()
}

// PeerSetComment is the comment of the peer sets of a NetworkPolicy rule
// whose peers are peers, in a policy of namespace policyNS, as `nft list`
// shows it: how a tool outside the compiler (hack/bench/scale) finds the
// set that holds a rule's peers. The comment is cut at 128 bytes, so two
// peer lists whose keys agree on their first 122 bytes share it: a tool
// must take a comment two sets carry for neither's.
func PeerSetComment(policyNS string, peers []networkingv1.NetworkPolicyPeer) string {
	return peersComment(peerKey(policyNS, peers))
}

// peersComment is the comment of the peer sets of key.
func peersComment(key string) string { return truncateComment("peers " + key) }

// peerKey identifies what a list of peers selects. A pod selector without a
// namespace selector means the policy's own namespace, so that namespace is
// part of the key; otherwise peers read the same anywhere.
func peerKey(policyNS string, peers []networkingv1.NetworkPolicyPeer) string {
	var b strings.Builder
	for _, p := range peers {
		switch {
		case p.IPBlock != nil:
			fmt.Fprintf(&b, "ip:%s", p.IPBlock.CIDR)
			if len(p.IPBlock.Except) > 0 {
				fmt.Fprintf(&b, " except %s", strings.Join(p.IPBlock.Except, ","))
			}
			b.WriteString(";")
		default:
			ns := "own:" + policyNS
			if p.NamespaceSelector != nil {
				ns = "ns:" + metav1.FormatLabelSelector(p.NamespaceSelector)
			}
			pods := "all"
			if p.PodSelector != nil {
				pods = metav1.FormatLabelSelector(p.PodSelector)
			}
			fmt.Fprintf(&b, "%s|pod:%s;", ns, pods)
		}
	}
	return b.String()
}

// peerSets are the addresses a peer list allows, as one set per family:
// sorted, merged ranges, held per address in the kernel unless an ipBlock
// of the family makes it an interval set (peersPerAddress), or, for a
// union, its ranges are long (longRuns). Their users
// are the rules of active policies matching against them.
type peerSets struct {
	key    string
	parsed *parsedPeers
	sets   map[nft.IPFamily]*nft.Set
	// dups counts, for patchPeers, the selected pods beyond the first
	// that hold an address (two may, briefly); usually empty. Whether an
	// address outside the ipBlocks is held at all, the set's ranges say:
	// a count of every address was a map of 100k entries for a peer set
	// naming a third of 150k pods. nil until counted.
	dups map[netip.Addr]int32
	// parts, for a union of peer lists (flat.go), are the keys of the
	// lists it unions: its sets are their sets merged (mergeUnion) or
	// patched with them (patchUnion), never computed from the pods, so it
	// has no parsed peers and no dups.
	parts []string
}

func (c *Compiler) acquirePeers(key string, parsed *parsedPeers) {
	c.peers.acquire(key, func() *peerSets {
		e := &peerSets{key: key, parsed: parsed, sets: map[nft.IPFamily]*nft.Set{}}
		c.computePeers(e)
		c.peerIdx.add(e)
		return e
	})
}

func (c *Compiler) releasePeers(key string) {
	if e, last := c.peers.release(key); last {
		c.peerIdx.remove(e)
		c.dropSets(e.sets)
	}
}

// dropSets takes the sets of each family out of the table.
func (c *Compiler) dropSets(sets map[nft.IPFamily]*nft.Set) {
	for _, f := range families {
		c.dropSet(sets[f].Name)
	}
}

// computePeers (re)builds the sets whose elements changed: the union of
// the ipBlocks and of the addresses of the pods the selectors name.
//
// The addresses are sorted and merged here (mergeAddrs), and the
// ipBlocks' ranges merged in after (mergeRanges), rather than all put
// through an IPSetBuilder, which keeps a range per address added and
// copies them three times over: at the first sync of 150k pods and 10k
// policies that was ~75 MB of the compile's allocations.
func (c *Compiler) computePeers(e *peerSets) {
	// Each pod once, however many selectors name it (see patchPeers). One
	// selector names each pod once (selectPods).
	var counted map[*pod]bool
	if len(e.parsed.selectors) > 1 {
		counted = map[*pod]bool{}
	}
	addrs := c.peerAddrs[:0]
	for _, s := range e.parsed.selectors {
		for _, pd := range c.selectPods(e.parsed.policyNS, s) {
			if counted != nil {
				if counted[pd] {
					continue
				}
				counted[pd] = true
			}
			addrs = append(addrs, pd.ips...)
		}
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	// An address held by more than one pod: counted beyond the first,
	// unless the ipBlocks name it whatever the pods do.
	e.dups = map[netip.Addr]int32{}
	for i := 1; i < len(addrs); i++ {
		if addrs[i] == addrs[i-1] && !e.inBlocks(addrs[i]) {
			e.dups[addrs[i]]++
		}
	}
	addrs = slices.Compact(addrs)
	if len(e.parsed.nodes) > 0 {
		for _, sel := range e.parsed.nodes {
			addrs = append(addrs, c.nodeAddrs(sel)...)
		}
		slices.SortFunc(addrs, netip.Addr.Compare)
		addrs = slices.Compact(addrs)
	}
	c.peerAddrs = addrs[:0] // the next call's, grown to the largest list
	if !slices.ContainsFunc(addrs, unusualAddr) {
		for _, f := range families {
			elems := mergeAddrs(addrs, f)
			if e.parsed.blocks != nil {
				elems = mergeRanges(elems, rangesOf(e.parsed.blocks, f))
			}
			c.setPeerElements(e, f, elems)
		}
		return
	}
	var all netipx.IPSetBuilder
	if e.parsed.blocks != nil {
		all.AddSet(e.parsed.blocks)
	}
	for _, ip := range addrs {
		all.Add(ip)
	}
	set, _ := all.IPSet() // only fails for invalid addresses, which pods never hold
	for _, f := range families {
		c.setPeerElements(e, f, rangesOf(set, f))
	}
}

// unusualAddr reports whether a is neither IPv4 nor an IPv6 address that
// is not IPv4-mapped (so invalid, or mapped): mergeAddrs takes none such.
func unusualAddr(a netip.Addr) bool { return !a.Is4() && (!a.Is6() || a.Is4In6()) }

// mergeAddrs is rangesOf for addresses sorted by netip.Addr.Compare,
// without repeats and none unusualAddr: the addresses of
// family f, each run of consecutive ones one range. The result is sized
// exactly (the set keeps it), and nil when there are none.
func mergeAddrs(sorted []netip.Addr, f nft.IPFamily) []nft.Element {
	// Compare orders IPv4 before IPv6.
	split, _ := slices.BinarySearchFunc(sorted, 0, func(a netip.Addr, _ int) int {
		if a.Is4() {
			return -1
		}
		return 1
	})
	of := sorted[:split]
	if f == nft.IPv6 {
		of = sorted[split:]
	}
	if len(of) == 0 {
		return nil
	}
	n := 1
	for i := 1; i < len(of); i++ {
		if of[i-1].Next() != of[i] {
			n++
		}
	}
	out := make([]nft.Element, 0, n)
	for i := 0; i < len(of); {
		j := i
		for j+1 < len(of) && of[j].Next() == of[j+1] {
			j++
		}
		out = append(out, rangeOf(of[i], of[j]))
		i = j + 1
	}
	return out
}

// setPeerElements makes elems the ranges of e's set of family f: a new
// set in the table, unless they are what it holds.
func (c *Compiler) setPeerElements(e *peerSets, f nft.IPFamily, elems []nft.Element) {
	c.putPeerElements(e, f, elems, nil, nil, false)
}

// putPeerElements is setPeerElements, told the ranges the change removed
// and added when they are exact (for the named-port sets following e).
func (c *Compiler) putPeerElements(e *peerSets, f nft.IPFamily, elems, removed, added []nft.Element, exact bool) {
	var old []nft.Element
	if e.sets[f] != nil {
		old = e.sets[f].Elements
		if slices.Equal(old, elems) {
			return
		}
	}
	c.followPeers(e, old, elems, removed, added, exact)
	perAddress := c.peersPerAddress(e, f)
	name := c.peersListName(e.key, f)
	if perAddress && e.parts != nil && longRuns(elems) {
		perAddress, name = false, name+"-ranges"
	}
	if prev := e.sets[f]; prev != nil && prev.Name != name {
		// A union changed kind (longRuns): its set goes under its old name,
		// and what asks it is rewritten with the new (renameUnions).
		c.dropSet(prev.Name)
		c.renamed[e.key] = true
	}
	s := &nft.Set{
		Name:       name,
		Comment:    peersComment(e.key),
		Key:        addrKey(f),
		Interval:   !perAddress,
		PerAddress: perAddress,
		Elements:   elems,
	}
	e.sets[f] = s
	c.putSet(s)
	c.changedPeers[e.key] = true
}

// unionRunLength is how many addresses a union's ranges must hold on
// average, and more, for it to be held as ranges rather than per address
// (longRuns). A variable for the tests, which lower it so that their small
// clusters change kind often.
var unionRunLength = 4

// longRuns reports whether a union of pod lists, ranges, is held as an
// interval set: when its ranges average more than unionRunLength
// addresses. Per address, the kernel holds an element an address; as
// intervals, two a range. Lists of scattered pods (the usual case:
// addresses given out per node) are ranges of an address or two, and
// stay per address for the hash lookup. But a union of lists that
// together name whole namespaces, whose pods were given consecutive
// addresses, is a few long runs: at 150k pods (hack/bench/scale) six such
// unions held 525,000 kernel elements per address, more than half of
// the first batch, where 251 ranges make 502 as intervals. The kind
// follows from the content, so that a fresh compile and an incremental
// one agree; a union whose content crosses over changes set name, which
// an interval set and a per-address one must not share. The price: a
// union whose runs average unionRunLength exactly changes kind with one
// pod, and is written whole under its other name each time
// (TestHostileRound7UnionFlapCost). Holding the old kind until the quiet
// sync that settles deferred unions (settle.go) would bound that to once
// per quiet period; not done.
func longRuns(ranges []nft.Element) bool {
	if len(ranges) == 0 {
		return false
	}
	n := 0
	for _, r := range ranges {
		for range nft.Addresses(r) {
			if n++; n > unionRunLength*len(ranges) {
				return true
			}
		}
	}
	return false
}

// peersPerAddress reports whether e's set of family f holds addresses of
// pods and nodes alone, no ipBlock: the kernel then holds it per address
// (nft.Set.PerAddress), a hash lookup a packet instead of a search of
// ranges, and one element a pod instead of an interval's two. A union may
// be held so when each of its parts is (unless its ranges are long:
// longRuns). The answer follows from e's key alone, so a list's set never
// changes kind under its name.
func (c *Compiler) peersPerAddress(e *peerSets, f nft.IPFamily) bool {
	if e.parts != nil {
		for _, k := range e.parts {
			if part, ok := c.peers.get(k); !ok || !c.peersPerAddress(part, f) {
				return false
			}
		}
		return true
	}
	if e.parsed.blocks == nil {
		return true
	}
	for _, r := range e.parsed.blocks.Ranges() {
		if nft.FamilyOf(r.From()) == f {
			return false
		}
	}
	return true
}

// selectPods returns the pods a selector peer names: podSelector alone
// means the policy's namespace, namespaceSelector alone means every pod of
// the matching namespaces, and both together must both match. It never
// names a quarantined pod (see pod.matchedBy), even for an empty
// podSelector: its addresses are allowed only by ipBlock peers. Nor does
// a namespace selector name the pods of a quarantined namespace, unless it
// reads only the namespace's name (see nsView.selectedBy); a podSelector
// alone still names the pods of the policy's own namespace, quarantined or
// not, as their own labels are known.
func (c *Compiler) selectPods(policyNS string, s peerSelector) []*pod {
	var out []*pod
	add := func(ns string) {
		for _, pd := range c.byNS[ns] {
			if pd.matchedBy(s.pods) {
				out = append(out, pd)
			}
		}
	}
	if s.namespaces == nil {
		add(policyNS)
		return out
	}
	for _, ns := range c.nsNames {
		if c.namespaceView(ns).selects(s, ns) {
			add(ns)
		}
	}
	return out
}

// refreshPeers recomputes the peer sets that a changed pod or namespace
// could be part of.
func (c *Compiler) refreshPeers(ch *changes) {
	if len(ch.pods) == 0 && len(ch.namespaces) == 0 && !ch.nodes {
		return
	}
	patched := map[string][]netip.Addr{} // by key of a list patched: the addresses its patch moved
	computed := map[string]bool{}        // keys of the lists computed again
	for e := range c.peerCandidates(ch) {
		if !c.peersTouched(e, ch) {
			continue
		}
		if moved, ok := c.patchPeers(e, ch); ok {
			patched[e.key] = moved
		} else {
			c.computePeers(e)
			computed[e.key] = true
		}
	}
	// Then the unions of those lists, from their parts as they are now. A
	// union none of whose parts was touched is what it was: after a
	// namespace change, merging every union again cost as much as all
	// their parts, whether the namespace was in them or not. A union is
	// patched at the addresses its parts' patches moved, or merged again
	// if a part was computed again.
	unions := map[*peerSets]bool{}
	for k := range patched {
		maps.Copy(unions, c.peerIdx.unions[k])
	}
	for k := range computed {
		maps.Copy(unions, c.peerIdx.unions[k])
	}
	for e := range unions {
		if slices.ContainsFunc(e.parts, func(k string) bool { return computed[k] }) {
			c.mergeUnion(e)
			continue
		}
		var moved []netip.Addr
		for _, k := range e.parts {
			moved = append(moved, patched[k]...)
		}
		c.patchUnion(e, moved)
	}
	c.renameUnions(ch)
}

// renameUnions rewrites what asks a union whose set changed name in this
// compile (longRuns): the fragment chains asking it, in place, and the
// pod chains asking it about every port, rebuilt with their namespace's.
// Unions change content in refreshPeers alone; elsewhere they are made
// anew, under the name their content gives.
func (c *Compiler) renameUnions(ch *changes) {
	if len(c.renamed) == 0 {
		return
	}
	for ac := range c.allowChains.values() {
		if ac.key != "" && ac.parts == nil && c.renamed[ac.key] {
			ac.chain = &nft.Chain{Name: ac.chain.Name, Rules: c.unionRules(ac.dir, []string{ac.key})}
			c.putChain("3\x00"+allowChainKey(ac.dir, ac.key, false), ac.chain)
		}
	}
	for _, pc := range c.podChains {
		if pc.use != nil && slices.ContainsFunc(pc.use.peerKeys, func(k string) bool { return c.renamed[k] }) {
			ch.podChainNS[pc.pod.key.namespace] = true
		}
	}
	clear(c.renamed)
}

// mergeRanges is the union of lists of ranges, each sorted and merged as
// rangesOf leaves them, sorted and merged the same way: one k-way merge,
// whose output is its only allocation and exactly its size. (A merge two
// by two, each step sized for both inputs, held 47 MB of intermediate
// lists at once at the first sync of 150k pods, and kept the unions at
// the capacity of all their parts. Growing the output by append's
// doubling and trimming it allocated three times the union, 60 MB there;
// sizing it for all its lists' ranges, as many as all the parts together
// when they overlap: 64 lists naming the same 20k pods took 114 MB for a
// 1.8 MB union, TestHostileRound16MergeRangesMemory.) So the merge runs
// twice, counting the ranges, then writing them.
func mergeRanges(lists ...[]nft.Element) []nft.Element {
	n := 0
	eachMerged(lists, func(nft.Element) { n++ })
	out := make([]nft.Element, 0, n) // empty, not nil, as rangesOf leaves an empty set
	eachMerged(lists, func(r nft.Element) { out = append(out, r) })
	return out
}

// eachMerged calls emit with each range of the union of lists (sorted and
// merged as rangesOf leaves them), in order.
func eachMerged(lists [][]nft.Element, emit func(nft.Element)) {
	// heads holds the lists not yet used up, as a min-heap by the address
	// each starts at now.
	heads := make([][]nft.Element, 0, len(lists))
	for _, l := range lists {
		if len(l) > 0 {
			heads = append(heads, l)
		}
	}
	less := func(i, j int) bool { return heads[i][0].Addr.Less(heads[j][0].Addr) }
	down := func(i int) {
		for {
			least := i
			for _, c := range [2]int{2*i + 1, 2*i + 2} {
				if c < len(heads) && less(c, least) {
					least = c
				}
			}
			if least == i {
				return
			}
			heads[i], heads[least] = heads[least], heads[i]
			i = least
		}
	}
	for i := len(heads)/2 - 1; i >= 0; i-- {
		down(i)
	}
	var cur nft.Element // the range being merged, emitted once the next starts past it
	started := false
	for len(heads) > 0 {
		el := heads[0][0]
		if heads[0] = heads[0][1:]; len(heads[0]) == 0 {
			heads[0] = heads[len(heads)-1]
			heads = heads[:len(heads)-1]
		}
		down(0)
		if started {
			last := lastOf(cur)
			if el.Addr.Compare(last) <= 0 || last.Next() == el.Addr {
				if lastOf(el).Compare(last) > 0 {
					cur = rangeOf(cur.Addr, lastOf(el))
				}
				continue
			}
			emit(cur)
		}
		cur, started = el, true
	}
	if started {
		emit(cur)
	}
}

// patchUnion brings a union in step with its parts, which are up to
// date, at the addresses whose membership of a part may have changed
// (moved, in any order, repeats allowed): such an address is in the union
// when it is in one of the parts.
func (c *Compiler) patchUnion(e *peerSets, moved []netip.Addr) {
	parts := c.unionParts(e)
	for f, addrs := range byFamily(moved) {
		want, has := make([]bool, len(addrs)), make([]bool, len(addrs))
		for _, part := range parts {
			markHeld(part.sets[f].Elements, addrs, want)
		}
		markHeld(e.sets[f].Elements, addrs, has)
		var gone, came []netip.Addr
		for i, ip := range addrs {
			switch {
			case want[i] && !has[i]:
				came = append(came, ip)
			case !want[i] && has[i]:
				gone = append(gone, ip)
			}
		}
		c.editPeerSet(e, f, gone, came)
	}
}

// markHeld sets held[i] for each of the sorted addrs that ranges (sorted
// and merged, as rangesOf leaves them) hold: a binary search for each
// when they are few, one walk of both lists when they are many (a
// namespace of 1,500 pods relabelled against unions of thousands of
// ranges).
func markHeld(ranges []nft.Element, addrs []netip.Addr, held []bool) {
	if len(addrs)*bits.Len(uint(len(ranges))) < len(ranges)+len(addrs) {
		for i, ip := range addrs {
			held[i] = held[i] || inRangeElements(ranges, ip)
		}
		return
	}
	j := 0
	for i, ip := range addrs {
		for j < len(ranges) && lastOf(ranges[j]).Less(ip) {
			j++
		}
		if j < len(ranges) && ranges[j].Addr.Compare(ip) <= 0 {
			held[i] = true
		}
	}
}

// unionParts are the peer sets of a union's parts, which it holds.
func (c *Compiler) unionParts(e *peerSets) []*peerSets {
	parts := make([]*peerSets, len(e.parts))
	for i, k := range e.parts {
		part, ok := c.peers.get(k)
		if !ok {
			panic("enforcer: a union's part is not held: " + k)
		}
		parts[i] = part
	}
	return parts
}

// mergeUnion (re)builds the sets of a union from its parts' sets: the
// ranges of all of them, merged. A union of many lists (every namespace
// selector of a pod's policies) would cost as much as all of them again,
// computed from the pods.
func (c *Compiler) mergeUnion(e *peerSets) {
	parts := c.unionParts(e)
	for _, f := range families {
		// Each part is sorted and merged already: merge them, rather
		// than sort them all again.
		lists := make([][]nft.Element, len(parts))
		for i, part := range parts {
			lists[i] = part.sets[f].Elements
		}
		c.setPeerElements(e, f, mergeRanges(lists...))
	}
}

// peersTouched reports whether a change could alter what e's selectors
// name: a namespace entering or leaving a namespace selector, or a pod in a
// selected namespace matching a pod selector before or after its change.
func (c *Compiler) peersTouched(e *peerSets, ch *changes) bool {
	if ch.nodes && len(e.parsed.nodes) > 0 {
		return true
	}
	for _, s := range e.parsed.selectors {
		if s.namespaces == nil {
			if podsMatch(s.pods, ch.pods[e.parsed.policyNS]) {
				return true
			}
			continue
		}
		for _, nc := range ch.namespaces {
			if nc.old.selects(s, nc.name) != nc.new.selects(s, nc.name) {
				return true
			}
		}
		for ns, changed := range ch.pods {
			if c.namespaceView(ns).selects(s, ns) && podsMatch(s.pods, changed) {
				return true
			}
		}
	}
	return false
}

func podsMatch(sel labels.Selector, changed []podChange) bool {
	for _, pc := range changed {
		if (pc.old != nil && pc.old.matchedBy(sel)) || (pc.new != nil && pc.new.matchedBy(sel)) {
			return true
		}
	}
	return false
}

// portSets are a named port resolved on the pods that can be destinations
// (see portUse), one set per family.
//
// An ingress one holds this node's pods serving the name. An egress one
// holds the pods that the rules on its port could let through: the pods
// of their peer lists, or every pod of the cluster serving the name while
// some rule's peers are not pods alone (namedports.go). Either is patched
// by a pod event rather than made again. An element is in its set while
// some pod gives it; two pods may briefly give the same one (a reused
// address), and dups counts the pods beyond the first, so that the element
// stays while one of them does. The set's own sorted elements say what is
// in it: at 150k pods a set of every pod has 300k elements, and a count of
// every element took 16 MB (52 MB keyed by the whole element) and a fifth
// of the first compile's time. The sets keep their elements in chunks
// (chunks.go), so that a patch copies only what it edits. The egress ones
// are held by every policy of the cluster using them, active or not
// (addPolicy); the ingress ones by active policies.
type portSets struct {
	use    portUse
	dups   map[nft.Element]int32 // pods giving an element beyond the first; usually empty (see memberPatch)
	sets   map[nft.IPFamily]*nft.Set
	madeIn uint64 // the Compile call (Compiler.call) that made them: made from the pods as they are now, they need no patch; 0 for an egress set not made yet

	// An egress set's scope (namedports.go). anyPod counts the policies of
	// the cluster with a rule on this port whose peers are not pods alone;
	// while there is one, the sets hold every pod serving the port, else
	// (narrow) the pods at the addresses held: those of the peer sets of
	// parts, the peer lists of active rules on this port (by key, with
	// how many rules name each), counted by how many parts hold each.
	// moved are the addresses that came to be held, or stopped, since the
	// sets were last brought up to date.
	anyPod int32
	narrow bool
	parts  map[string]int32
	held   map[netip.Addr]int32
	moved  map[netip.Addr]bool
}

// patchSorted returns a new sorted list: elems without removed, with
// added (all three sorted and without repeats). One allocation, and the
// runs between edits copied whole (the previous table keeps elems): it
// patches a chunk of a named-port set (patchChunks).
func patchSorted(elems, removed, added []nft.Element) []nft.Element {
	out := make([]nft.Element, 0, max(0, len(elems)-len(removed))+len(added))
	i := 0 // elems[:i] are copied or dropped
	for len(removed) > 0 || len(added) > 0 {
		remove := len(added) == 0 || len(removed) > 0 && compareElements(removed[0], added[0]) <= 0
		var el nft.Element
		if remove {
			el, removed = removed[0], removed[1:]
		} else {
			el, added = added[0], added[1:]
		}
		j, found := slices.BinarySearchFunc(elems[i:], el, compareElements)
		out = append(out, elems[i:i+j]...)
		i += j
		switch {
		case remove && found:
			i++ // dropped
		case !remove && !found:
			out = append(out, el)
		}
	}
	return append(out, elems[i:]...)
}

// namedPortSetName is `ingress-port-<name>-<proto>-v4` (this node's pods)
// or `egress-port-…` (every pod): port names are IANA service names
// (lowercase letters, digits and dashes, at most 15), so the set name can
// say what it holds.
func namedPortSetName(u portUse, f nft.IPFamily) string {
	dir := "egress"
	if u.ingress {
		dir = "ingress"
	}
	return dir + "-port-" + u.name + "-" + u.proto.String() + "-" + familySuffix(f)
}

// candidates are the pods whose addresses can be destinations of u, for
// a set that holds every one: this node's pods for ingress, every pod for
// egress.
func (c *Compiler) candidates(u portUse) []*pod {
	if !u.ingress {
		return c.everyPod()
	}
	var local []*pod
	for _, ns := range slices.Sorted(maps.Keys(c.localByNS)) {
		local = append(local, c.localByNS[ns]...)
	}
	return local
}

// acquirePortSets holds the sets of u. An ingress one is made at once; an
// egress one is empty until refreshPortSets, later in the same Compile,
// knows which pods it needs (the rules using it are planned and
// activated by then).
func (c *Compiler) acquirePortSets(u portUse) {
	c.portSets.acquire(u, func() *portSets {
		e := &portSets{use: u, dups: map[nft.Element]int32{}, sets: map[nft.IPFamily]*nft.Set{}}
		if !u.ingress {
			e.parts, e.held, e.moved = map[string]int32{}, map[netip.Addr]int32{}, map[netip.Addr]bool{}
			for _, f := range families {
				e.sets[f] = e.newSet(f, nil)
				c.putSet(e.sets[f])
			}
			return e
		}
		c.makeEveryPortSet(e)
		return e
	})
}

// makeEveryPortSet makes e's sets hold every candidate pod serving its
// port.
func (c *Compiler) makeEveryPortSet(e *portSets) {
	// One list of every element, sized first: at 150k pods it is 300k
	// elements, and growing it by appends allocated it several times over
	// at the first sync's peak.
	cands := c.candidates(e.use)
	n := 0
	for _, pd := range cands {
		n += pd.countPortElements(e.use)
	}
	every := make([]nft.Element, 0, n)
	for _, pd := range cands {
		every = pd.appendPortElements(every, e.use)
	}
	slices.SortFunc(every, compareElements)
	clear(e.dups)
	c.putPortElements(e, every, func(el nft.Element) { e.dups[el]++ })
	e.narrow = false
}

// putPortElements makes sorted elements e's sets, in chunks, each repeat
// passed to dup. Sorted, the IPv4 elements come first (netip.Addr orders
// by length): each family is a part of the list, made unique in place and
// then copied out in chunks, which the set keeps.
func (c *Compiler) putPortElements(e *portSets, sorted []nft.Element, dup func(nft.Element)) {
	v6 := slices.IndexFunc(sorted, func(el nft.Element) bool { return nft.FamilyOf(el.Addr) == nft.IPv6 })
	if v6 < 0 {
		v6 = len(sorted)
	}
	for _, f := range families {
		part := sorted[:v6]
		if f == nft.IPv6 {
			part = sorted[v6:]
		}
		kept := 0
		for _, el := range part {
			if kept > 0 && compareElements(part[kept-1], el) == 0 {
				dup(el)
				continue
			}
			part[kept] = el
			kept++
		}
		e.sets[f] = e.newSet(f, chunked(part[:kept]))
		c.putSet(e.sets[f])
	}
	e.madeIn = c.call
}

func (c *Compiler) releasePortSets(u portUse) {
	if e, last := c.portSets.release(u); last {
		c.dropSets(e.sets)
	}
}

func (e *portSets) newSet(f nft.IPFamily, chunks [][]nft.Element) *nft.Set {
	whose := "each pod serving it that a rule's peers name"
	switch {
	case e.use.ingress:
		whose = "each pod of this node serving it"
	case e.anyPod > 0:
		whose = "every pod serving it"
	}
	return &nft.Set{
		Name:    namedPortSetName(e.use, f),
		Comment: fmt.Sprintf("named port %s/%s: address . protocol . port of %s", e.use.name, e.use.proto, whose),
		Key:     protoPortKey(f),
		Chunks:  chunks,
	}
}

// refreshPortSets brings the named-port sets up to date: an egress one
// made, or made again when its scope changed (every pod or the parts'
// pods), the others patched with the pods that changed what they serve
// or where, and a narrow one at the addresses its parts moved too.
func (c *Compiler) refreshPortSets(ch *changes) {
	for e := range c.portSets.values() {
		switch {
		case !e.use.ingress && (e.madeIn == 0 || e.narrow != (e.anyPod == 0)):
			if e.anyPod > 0 {
				c.makeEveryPortSet(e)
			} else {
				c.makeNarrowPortSet(e)
			}
		case e.madeIn == c.call:
		case e.narrow:
			c.patchNarrowPortSet(e, ch)
		case len(ch.pods) > 0:
			c.patchEveryPortSet(e, ch)
		}
		clear(e.moved)
	}
}

// patchEveryPortSet patches a set of every candidate pod with the pods
// that changed what they serve or where.
func (c *Compiler) patchEveryPortSet(e *portSets, ch *changes) {
	mp := newMemberPatch(e.dups, func(el nft.Element) bool {
		return searchChunks(e.sets[nft.FamilyOf(el.Addr)].Chunks, el)
	})
	for _, changed := range ch.pods {
		for _, pc := range changed {
			if !pc.servesOtherwise() {
				continue // labels: nothing this set holds
			}
			for _, el := range pc.old.portElements(e.use) {
				mp.leave(el)
			}
			for _, el := range pc.new.portElements(e.use) {
				mp.join(el)
			}
		}
	}
	c.patchPortSet(e, slices.Collect(maps.Keys(mp.gone)), slices.Collect(maps.Keys(mp.came)))
}

// patchPortSet removes and adds elements (unsorted, either family) to e's
// sets, giving the delta their exact change: it need not compare two sets
// of every pod in the cluster.
func (c *Compiler) patchPortSet(e *portSets, gone, came []nft.Element) {
	for _, f := range families {
		var removed, added []nft.Element
		for _, el := range gone {
			if nft.FamilyOf(el.Addr) == f {
				removed = append(removed, el)
			}
		}
		for _, el := range came {
			if nft.FamilyOf(el.Addr) == f {
				added = append(added, el)
			}
		}
		if len(removed)+len(added) == 0 {
			continue
		}
		slices.SortFunc(removed, compareElements)
		slices.SortFunc(added, compareElements)
		before := e.sets[f]
		e.sets[f] = e.newSet(f, patchChunks(before.Chunks, removed, added))
		c.putSet(e.sets[f])
		c.patches[before] = nft.SetUpdate{Old: before, New: e.sets[f], Exact: true, Added: added, Removed: removed}
	}
}

// servesOtherwise reports whether the change may alter what the pod gives
// a named-port set: anything but its labels.
func (pc podChange) servesOtherwise() bool {
	return pc.old == nil || pc.new == nil || pc.old.local != pc.new.local ||
		!slices.Equal(pc.old.ips, pc.new.ips) || !slices.Equal(pc.old.ports, pc.new.ports)
}

// portElements are the elements a pod (nil: none) gives the set of named
// port u, unsorted: none from another node's pod for ingress.
func (p *pod) portElements(u portUse) []nft.Element { return p.appendPortElements(nil, u) }

// appendPortElements appends p's portElements to dst.
func (p *pod) appendPortElements(dst []nft.Element, u portUse) []nft.Element {
	if p == nil || (u.ingress && !p.local) {
		return dst
	}
	for _, cp := range p.ports {
		if !u.servedBy(cp) {
			continue
		}
		for _, ip := range p.ips {
			dst = append(dst, nft.Element{Addr: ip, Proto: u.proto, Port: uint16(cp.ContainerPort)})
		}
	}
	return dst
}

// countPortElements is len(p.portElements(u)), without making them.
func (p *pod) countPortElements(u portUse) int {
	if p == nil || (u.ingress && !p.local) {
		return 0
	}
	n := 0
	for _, cp := range p.ports {
		if u.servedBy(cp) {
			n += len(p.ips)
		}
	}
	return n
}

func compareElements(a, b nft.Element) int {
	return cmp.Or(a.Addr.Compare(b.Addr), cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.Port, b.Port))
}

// protoOf maps a policy port's protocol to nft. A port entry always has a
// protocol (TCP when unset, the API default); ok is false for an unknown one.
// hasPorts is false for the synthetic entry of a rule with no ports, which
// matches every protocol (proto 0).
func protoOf(p *corev1.Protocol, hasPorts bool) (nft.Proto, bool) {
	if !hasPorts {
		return 0, true
	}
	if p == nil {
		return nft.ProtoTCP, true
	}
	proto := protoName(*p)
	return proto, proto != 0
}

func protoName(p corev1.Protocol) nft.Proto {
	switch p {
	case corev1.ProtocolTCP, "":
		return nft.ProtoTCP
	case corev1.ProtocolUDP:
		return nft.ProtoUDP
	case corev1.ProtocolSCTP:
		return nft.ProtoSCTP
	}
	return 0
}

func rangesOf(s *netipx.IPSet, f nft.IPFamily) []nft.Element {
	ranges := s.Ranges()
	n := 0
	for _, r := range ranges {
		if nft.FamilyOf(r.From()) == f {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]nft.Element, 0, n) // exact: the set keeps it
	for _, r := range ranges {
		if nft.FamilyOf(r.From()) != f {
			continue
		}
		e := nft.Element{Addr: r.From()}
		if r.To() != r.From() {
			e.Last = r.To()
		}
		out = append(out, e)
	}
	return out
}

// portsMapName is the map of the flat layout from an isolated local pod's
// address . protocol . port to the chain of the peers allowed there.
func portsMapName(d direction, f nft.IPFamily) string {
	return d.name + "-ports-" + familySuffix(f)
}

func podsMapName(d direction, f nft.IPFamily) string {
	return d.name + "-pods-" + familySuffix(f)
}

func familyName(f nft.IPFamily) string {
	if f == nft.IPv6 {
		return "IPv6"
	}
	return "IPv4"
}

func familySuffix(f nft.IPFamily) string {
	if f == nft.IPv6 {
		return "v6"
	}
	return "v4"
}

func addrKey(f nft.IPFamily) nft.KeyType {
	if f == nft.IPv6 {
		return nft.KeyIPv6
	}
	return nft.KeyIPv4
}

func protoPortKey(f nft.IPFamily) nft.KeyType {
	if f == nft.IPv6 {
		return nft.KeyIPv6ProtoPort
	}
	return nft.KeyIPv4ProtoPort
}

// maxComment is the longest comment nft keeps (NFT_USERDATA_MAXLEN is 256,
// nft's own limit is 128).
const maxComment = 128

func truncateComment(s string) string {
	if len(s) > maxComment {
		return s[:maxComment]
	}
	return s
}
