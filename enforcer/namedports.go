package enforcer

import (
	"net/netip"
	"slices"

	"github.com/nftpolicy/nftpolicy/nft"
)

// Which pods an egress named-port set holds.
//
// An egress rule on a named port asks two things of a destination: that
// it is one of the rule's peers (its peer set, or the tier's classes for
// a ClusterNetworkPolicy) and that it serves the name with the packet's
// protocol on the packet's port (the named-port set, of address . protocol
// . port). So the named-port set need hold only the pods some rule on its
// port could let through: the pods of those rules' peer lists. Holding
// every pod of the cluster serving the name, it was 300k elements at 150k
// pods in internal/scale's mix, where the rules' peers named a pod or
// none: a third of the first batch, a second of the first sync and 60 MB
// of the heap (hack/bench/events), for elements no rule could use.
//
// A narrow set therefore follows its parts: the peer lists of the active
// rules on its port, lists of pods (below). held counts, for each
// address, the parts whose peer sets hold it (in both families); the set
// holds what the pod at each held address serves on the port. Each peer
// set change moves the counts (followPeers, from the peer set's own
// change), and each address that comes to be held or stops being held is
// brought up to date at the end of the Compile (patchNarrowPortSet), with
// the addresses of pods that changed what they serve.
//
// A part is a list of the pods of its policy's own namespace (pod
// selectors without a namespace selector). Any other rule (no peers,
// which is every destination; an ipBlock; nodes; a ClusterNetworkPolicy's
// networks; and a namespace selector) makes the set hold every pod serving
// the name while any policy of the cluster has one (anyPod, counted
// whether the policy is active or not, as the set is held: addPolicy), as
// all sets did before. A part comes and goes with its policy's activation,
// so its pods are written or taken out when one pod of this node starts
// or stops being the policy's target: bounded by a namespace, that is
// what the part's own peer set costs then. A namespace selector may name
// every pod of the cluster (`namespaceSelector: {}` is a common "any pod"
// peer), whose peer set another active policy may keep while the named
// port's set, as a part, would come and go with one pod: 300k elements
// written for a pod event at 150k pods (the hostile review's
// TestHostileRound6NamedScaleActivation). The set of every pod does not
// move then.

// A namedPeer is an egress rule's named port with the peer list it goes
// with: the set of the port must hold the pods of that list (key), or
// every pod serving it (anyPod).
type namedPeer struct {
	use    portUse
	key    string
	anyPod bool
}

// namedPeerOf is the namedPeer of an egress rule on use with peers parsed
// (nil: none) under key.
func namedPeerOf(use portUse, key string, parsed *parsedPeers) namedPeer {
	ownPods := parsed != nil && parsed.blocks == nil && len(parsed.nodes) == 0 && !parsed.all &&
		!slices.ContainsFunc(parsed.selectors, func(s peerSelector) bool { return s.namespaces != nil })
	if !ownPods {
		return namedPeer{use: use, anyPod: true}
	}
	return namedPeer{use: use, key: key}
}

// holdNamedPorts counts the rules of a policy that is now in the cluster
// (its port sets are held): those that need every pod.
func (c *Compiler) holdNamedPorts(nps []namedPeer) {
	for _, np := range nps {
		if np.anyPod {
			c.heldPortSets(np.use).anyPod++
		}
	}
}

// letGoNamedPorts undoes holdNamedPorts, before the sets are released.
func (c *Compiler) letGoNamedPorts(nps []namedPeer) {
	for _, np := range nps {
		if np.anyPod {
			c.heldPortSets(np.use).anyPod--
		}
	}
}

// addNamedParts makes the peer lists of an activated policy's rules parts
// of their ports' sets. Their peer sets must be held (activate acquires
// them first).
func (c *Compiler) addNamedParts(nps []namedPeer) {
	for _, np := range nps {
		if np.anyPod {
			continue
		}
		e := c.heldPortSets(np.use)
		if e.parts[np.key]++; e.parts[np.key] > 1 {
			continue
		}
		addTo(&c.namedParts, np.key, e)
		e.holdPeers(c.heldPeers(np.key), 1)
	}
}

// removeNamedParts undoes addNamedParts, while the peer sets are still
// held (deactivate lets them go after).
func (c *Compiler) removeNamedParts(nps []namedPeer) {
	for _, np := range nps {
		if np.anyPod {
			continue
		}
		e := c.heldPortSets(np.use)
		if e.parts[np.key]--; e.parts[np.key] > 0 {
			continue
		}
		delete(e.parts, np.key)
		removeFrom(c.namedParts, np.key, e)
		e.holdPeers(c.heldPeers(np.key), -1)
	}
}

func (c *Compiler) heldPortSets(u portUse) *portSets {
	e, ok := c.portSets.get(u)
	if !ok {
		panic("enforcer: a named-port set in use is not held: " + namedPortSetName(u, nft.IPv4))
	}
	return e
}

func (c *Compiler) heldPeers(key string) *peerSets {
	e, ok := c.peers.get(key)
	if !ok {
		panic("enforcer: the peer set of a named port's rule is not held: " + key)
	}
	return e
}

// holdPeers counts every address of ps's sets by delta.
func (e *portSets) holdPeers(ps *peerSets, delta int32) {
	for _, f := range families {
		e.holdRanges(ps.sets[f].Elements, delta)
	}
}

// holdRanges counts each address of ranges by delta.
func (e *portSets) holdRanges(ranges []nft.Element, delta int32) {
	for _, r := range ranges {
		for a := range nft.Addresses(r) {
			n := e.held[a] + delta
			if n == 0 {
				delete(e.held, a)
			} else {
				e.held[a] = n
			}
			if (n == 0) != (n == delta) {
				e.moved[a] = true
			}
		}
	}
}

// followPeers moves the counts of the named-port sets that e's list is a
// part of, as its set of family f goes from old to elems. removed and
// added, when exact, are the ranges the change took out and put in
// (patchPeerSet's); otherwise the two lists are compared.
func (c *Compiler) followPeers(e *peerSets, old, elems, removed, added []nft.Element, exact bool) {
	users := c.namedParts[e.key]
	if len(users) == 0 {
		return
	}
	if !exact {
		removed, added = old, elems
	}
	lost, gained := nft.AddressDiff(removed, added), nft.AddressDiff(added, removed)
	for ps := range users {
		ps.holdRanges(lost, -1)
		ps.holdRanges(gained, 1)
	}
}

// makeNarrowPortSet makes e's sets hold what the pod at each held address
// serves on the port.
func (c *Compiler) makeNarrowPortSet(e *portSets) {
	var elems []nft.Element
	for a := range e.held {
		elems = c.appendPortElementsAt(elems, e.use, a)
	}
	slices.SortFunc(elems, compareElements)
	clear(e.dups)
	c.putPortElements(e, elems, func(nft.Element) {}) // one pod an address: no repeats
	e.narrow = true
}

// patchNarrowPortSet brings e's sets up to date at the addresses that
// moved, and at the held addresses of pods that changed what they serve.
func (c *Compiler) patchNarrowPortSet(e *portSets, ch *changes) {
	at := make(map[netip.Addr]bool, len(e.moved))
	for a := range e.moved {
		at[a] = true
	}
	for _, changed := range ch.pods {
		for _, pc := range changed {
			if !pc.servesOtherwise() {
				continue
			}
			for _, pd := range []*pod{pc.old, pc.new} {
				if pd == nil {
					continue
				}
				for _, a := range pd.ips {
					if e.held[a] > 0 {
						at[a] = true
					}
				}
			}
		}
	}
	var gone, came []nft.Element
	for a := range at {
		var want []nft.Element
		if e.held[a] > 0 {
			want = c.appendPortElementsAt(nil, e.use, a)
		}
		have := elementsAt(e.sets[nft.FamilyOf(a)].Chunks, a)
		for _, el := range have {
			if !slices.Contains(want, el) {
				gone = append(gone, el)
			}
		}
		for _, el := range want {
			if !slices.Contains(have, el) {
				came = append(came, el)
			}
		}
	}
	c.patchPortSet(e, gone, came)
}

// appendPortElementsAt appends the elements of u the pod holding address
// a gives at a, if any pod does.
func (c *Compiler) appendPortElementsAt(dst []nft.Element, u portUse, a netip.Addr) []nft.Element {
	w := c.claims.winner(a)
	if w == nil || w.effective == nil || !slices.Contains(w.effective.ips, a) {
		return dst
	}
	start := len(dst)
	for _, cp := range w.effective.ports {
		if u.servedBy(cp) {
			el := nft.Element{Addr: a, Proto: u.proto, Port: uint16(cp.ContainerPort)}
			if !slices.Contains(dst[start:], el) { // two containers may name one port
				dst = append(dst, el)
			}
		}
	}
	return dst
}

// elementsAt are the elements of sorted chunks at address a.
func elementsAt(chunks [][]nft.Element, a netip.Addr) []nft.Element {
	first := nft.Element{Addr: a}
	i, _ := slices.BinarySearchFunc(chunks, first, func(c []nft.Element, el nft.Element) int {
		return compareElements(c[len(c)-1], el)
	})
	var out []nft.Element
	for ; i < len(chunks); i++ {
		j, _ := slices.BinarySearchFunc(chunks[i], first, compareElements)
		for _, el := range chunks[i][j:] {
			if el.Addr != a {
				return out
			}
			out = append(out, el)
		}
	}
	return out
}
