package enforcer

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nftpolicy/nftpolicy/nft"
)

// The flat NetworkPolicy stage (see "Per packet" in doc.go).
//
// A pod chain that jumped to the chain of every policy selecting its pod
// cost about 80 ns per policy per NEW packet: a pod selected by 100
// policies paid 8 µs. The flat stage asks one question per family
// instead, whatever the number of policies: which peers may reach this
// pod on this protocol and port? Every rule of every selecting policy is
// folded into port fragments: disjoint protocol and port ranges, each
// with the union of the peer lists of the rules covering it. The pod's
// address, protocol and port are then one exact lookup in a verdict map
// (a hash set in the kernel) that jumps to the fragment's chain, where
// one interval lookup per family in the union's peer set decides.

// A flatRule is one port entry of one rule of a policy, as the flat stage
// reads it.
type flatRule struct {
	key    string       // peerKey of its peers; "" for every address (no peers)
	parsed *parsedPeers // its peers, as its policy's chain reads them
	// proto 0: every protocol and port (a rule without ports); otherwise
	// the ports first-last of proto, or, with named, the container ports
	// of that name and protocol.
	proto       nft.Proto
	first, last uint16
	named       string
}

// maxExpanded is the widest port fragment written as exact elements of
// the ports map, one per port; a wider one is a rule of the pod chain,
// which every NEW packet of the pod evaluates. Port ranges that wide are
// rare in NetworkPolicy (endPort), and a fragment spanning them is one
// rule however many policies share it.
const maxExpanded = 64

// A fragment is a range of ports of one protocol on which the same peers
// are allowed: the peer lists keys (sorted, distinct), or every address.
type fragment struct {
	proto       nft.Proto
	first, last uint16
	keys        []string // nil when all
	all         bool
}

// A flatPlan is the NetworkPolicy stage of one pod chain in the flat
// layout.
type flatPlan struct {
	fragments []fragment
	// anyAll: some rule allows every address on every port; anyKeys:
	// the peer lists of the rules allowing every port.
	anyAll  bool
	anyKeys []string
	// named are egress rules on named ports: the port depends on the
	// destination, so each is a rule of its own (see flatRules).
	named []namedCheck
	peers map[string]*parsedPeers // by key
}

type namedCheck struct {
	key string // "" for every address
	use portUse
}

// planFlat folds the rules of policies (those selecting pd for d) into a
// flatPlan. Ingress named ports resolve on pd's own container ports.
func planFlat(pd *pod, d direction, policies []*policyState) *flatPlan {
	plan := &flatPlan{peers: map[string]*parsedPeers{}}
	type span struct {
		first, last uint16
		key         string // "" for every address
	}
	spans := map[nft.Proto][]span{}
	anyKeys := map[string]bool{}
	named := map[namedCheck]bool{}
	for _, p := range policies {
		for _, r := range p.flat[d.i] {
			if r.key != "" {
				plan.peers[r.key] = r.parsed
			}
			switch {
			case r.proto == 0:
				if r.key == "" {
					plan.anyAll = true
				} else {
					anyKeys[r.key] = true
				}
			case r.named != "" && d == egress:
				named[namedCheck{key: r.key, use: portUse{name: r.named, proto: r.proto}}] = true
			case r.named != "":
				for _, cp := range pd.ports {
					if (portUse{name: r.named, proto: r.proto}).servedBy(cp) {
						port := uint16(cp.ContainerPort)
						spans[r.proto] = append(spans[r.proto], span{port, port, r.key})
					}
				}
			case r.last < r.first:
				// An inverted range holds no port (the API refuses it).
			default:
				spans[r.proto] = append(spans[r.proto], span{r.first, r.last, r.key})
			}
		}
	}
	if plan.anyAll {
		return plan // every packet is allowed: nothing else to ask
	}
	plan.anyKeys = sortedKeys(anyKeys)
	for nc := range named { // nc.key "" asks no peer set
		plan.named = append(plan.named, nc)
	}
	slices.SortFunc(plan.named, func(a, b namedCheck) int {
		return cmp.Or(cmp.Compare(a.use.name, b.use.name), cmp.Compare(a.use.proto, b.use.proto), cmp.Compare(a.key, b.key))
	})
	for _, proto := range slices.Sorted(maps.Keys(spans)) {
		ss := spans[proto]
		// Cut the port space at every span's ends; each piece between two
		// cuts is covered by the same spans throughout.
		cuts := make([]int, 0, 2*len(ss))
		for _, s := range ss {
			cuts = append(cuts, int(s.first), int(s.last)+1)
		}
		slices.Sort(cuts)
		cuts = slices.Compact(cuts)
		for i := 0; i+1 < len(cuts); i++ {
			lo, hi := cuts[i], cuts[i+1]-1
			keys := map[string]bool{}
			all := false
			for _, s := range ss {
				if int(s.first) <= lo && hi <= int(s.last) {
					all = all || s.key == ""
					keys[s.key] = true
				}
			}
			if len(keys) == 0 {
				continue
			}
			f := fragment{proto: proto, first: uint16(lo), last: uint16(hi), all: all}
			if !all {
				f.keys = sortedKeys(keys)
			}
			// Adjacent pieces allowing the same peers are one fragment.
			if n := len(plan.fragments); n > 0 {
				prev := &plan.fragments[n-1]
				if prev.proto == proto && int(prev.last)+1 == lo && prev.all == all && slices.Equal(prev.keys, f.keys) {
					prev.last = f.last
					continue
				}
			}
			plan.fragments = append(plan.fragments, f)
		}
	}
	return plan
}

func sortedKeys(m map[string]bool) []string {
	return slices.Sorted(maps.Keys(m))
}

// unionKey is the peer key of the union of the peer lists keys. A union
// of several is marked as one (no peer list's key starts so), since its
// sets are merged from its parts' (mergeUnion) while a list's are
// computed from the pods, and a rule whose peers are those of two lists
// would otherwise share its sets.
//
// Its parts are written with their lengths: the union of lists "A;B;" and
// "C;" and that of "A;" and "B;C;" are the same peers but not the same
// parts, and the union holds its parts (acquireUnion), so two part lists
// must never share a key (the hostile review found them sharing one).
func unionKey(keys []string) string {
	if len(keys) == 1 {
		return keys[0]
	}
	var b strings.Builder
	b.WriteString(unionPrefix)
	for _, k := range keys {
		fmt.Fprintf(&b, "%d:%s", len(k), k)
	}
	return b.String()
}

const unionPrefix = "union:"

// A flatUse is what a flat pod chain holds while it is in the table: the
// peer sets of the unions it asks about and the chains of its fragments.
type flatUse struct {
	peerKeys []string
	allows   []string // allowChainKey of each fragment chain
}

// allowChain is a fragment's chain: it sets our allow bit and returns
// when the peer is in the union, and returns alone otherwise. Fragments
// allowing the same peers in the same direction share it, across pods.
type allowChain struct {
	chain *nft.Chain
	key   string // the union's peer key; "" for every address
	// While deferred (see settle.go), the chain asks each of parts, which
	// it holds, in place of their union, whose sets are not built yet;
	// deferredAt is the compile that deferred it.
	parts      []string
	dir        direction
	deferredAt uint64
}

func allowChainKey(d direction, key string, all bool) string {
	if all {
		return d.name + "\x00all"
	}
	return d.name + "\x00peers\x00" + key
}

// acquireAllowChain returns the name of the fragment chain allowing the
// union of keys (every address when all) in direction d, and counts one
// more user of it; release with releaseAllowChain(allowChainKey(...)).
func (c *Compiler) acquireAllowChain(d direction, plan *flatPlan, keys []string, all bool, use *flatUse) string {
	ukey := unionKey(keys)
	k := allowChainKey(d, ukey, all)
	use.allows = append(use.allows, k)
	ac := c.allowChains.acquire(k, func() *allowChain {
		name := c.chainNames.acquire("allow\x00"+k, func(hash string) string { return d.name + "-allow-" + hash })
		ch := &nft.Chain{Name: name}
		allow := c.fragmentAllows(d)
		if all {
			ch.Rules = []nft.Rule{{Exprs: allow, Comment: "every peer is allowed on these ports"}}
			c.putChain("3\x00"+k, ch)
			return &allowChain{chain: ch}
		}
		ac := &allowChain{chain: ch, key: ukey, dir: d}
		if c.holdUnion(plan, keys, ukey) {
			ac.parts, ac.deferredAt = keys, c.call
			c.deferred[k] = ac
			ch.Rules = c.unionRules(d, keys)
		} else {
			ch.Rules = c.unionRules(d, []string{ukey})
		}
		c.putChain("3\x00"+k, ch)
		return ac
	})
	return ac.chain.Name
}

// unionRules are a fragment chain's rules allowing the peers of keys in
// d: per key, one set lookup per family that sets our bit and returns.
func (c *Compiler) unionRules(d direction, keys []string) []nft.Rule {
	var rules []nft.Rule
	for _, key := range keys {
		for _, f := range families {
			exprs := append([]nft.Expr{nft.AddrInSet{Family: f, Field: d.peerField, Set: c.peersSetName(key, f)}}, c.fragmentAllows(d)...)
			rules = append(rules, nft.Rule{Exprs: exprs, Comment: peersComment(key)})
		}
	}
	return rules
}

// acceptsAtOnce reports whether the flat stage of direction d accepts
// what it allows where it finds it, rather than setting our bit for the
// pod chain to read. Ingress does: it is the forward chain's last check
// (egress was decided before it), so an accept there ends our chain as
// the pod chain's return would, and the packet skips the returns and the
// bit's set, test and clear, about 130 ns a NEW packet
// (hack/bench/pps). Egress must return for ingress to be checked.
func acceptsAtOnce(d direction) bool { return d == ingress }

// allows is what a rule of d's flat stage does with what it allows:
// accept, or set our bit for the pod chain to read (acceptsAtOnce).
func (c *Compiler) allows(d direction) nft.Expr {
	if acceptsAtOnce(d) {
		return nft.Verdict{Kind: nft.Accept}
	}
	return nft.SetMark{Clear: c.opts.MarkMask, Set: c.bit}
}

// fragmentAllows ends a fragment chain's rule that allows in d: allows,
// and a return to the pod chain where the bit is to be read there.
func (c *Compiler) fragmentAllows(d direction) []nft.Expr {
	if acceptsAtOnce(d) {
		return []nft.Expr{c.allows(d)}
	}
	return []nft.Expr{c.allows(d), nft.Verdict{Kind: nft.Return}}
}

// releaseAllowChain drops one user of the fragment chain k; the last one
// takes it and its union's peer sets out of the table.
func (c *Compiler) releaseAllowChain(k string) {
	ac, last := c.allowChains.release(k)
	if !last {
		return
	}
	c.dropChain(ac.chain.Name)
	c.chainNames.release("allow\x00" + k)
	switch {
	case ac.parts != nil:
		delete(c.deferred, k)
		c.releaseParts(ac.parts)
	case ac.key != "":
		c.releaseUnion(ac.key)
	}
}

// acquireUnion holds the peer sets of the union of keys, each a peer list
// of the plan; use, if not nil, records it for release. A union of several
// lists holds each of them too, and is merged from their sets.
func (c *Compiler) acquireUnion(plan *flatPlan, keys []string, ukey string, use *flatUse) {
	if use != nil {
		use.peerKeys = append(use.peerKeys, ukey)
	}
	c.acquirePeersName(ukey)
	if len(keys) == 1 {
		c.acquirePeers(ukey, plan.peers[ukey])
		return
	}
	for _, k := range keys {
		c.acquirePeersName(k)
		c.acquirePeers(k, plan.peers[k])
	}
	c.peers.acquire(ukey, func() *peerSets {
		e := &peerSets{key: ukey, sets: map[nft.IPFamily]*nft.Set{}, parts: keys}
		c.mergeUnion(e)
		c.peerIdx.add(e)
		return e
	})
}

// releaseUnion lets go of what acquireUnion(…, ukey, …) held.
func (c *Compiler) releaseUnion(ukey string) {
	e, _ := c.peers.get(ukey)
	c.releasePeers(ukey)
	c.releasePeersName(ukey)
	for _, k := range e.parts {
		c.releasePeers(k)
		c.releasePeersName(k)
	}
}

// flatRules builds the NetworkPolicy stage of pd's chain for d from plan:
// the lookups that may set our allow bit, each bounded whatever the
// number of policies, and the elements pd gives the ports maps. use
// collects what the rules hold.
func (c *Compiler) flatRules(pd *pod, d direction, plan *flatPlan, policies []*policyState, use *flatUse) ([]nft.Rule, []nft.Element) {
	allows := c.allows(d)
	if plan.anyAll {
		return []nft.Rule{{Exprs: []nft.Expr{allows}, Comment: "a rule allows every peer on every port"}}, nil
	}
	var rules []nft.Rule
	var elems []nft.Element
	var wide []nft.Rule
	for _, f := range plan.fragments {
		chain := c.acquireAllowChain(d, plan, f.keys, f.all, use)
		if int(f.last)-int(f.first) < maxExpanded {
			// goto: the fragment chain takes the ports chain's place, so
			// that its return (or its end) lands in the pod chain at once
			// rather than in the ports chain's remaining rule, about 50 ns
			// a NEW packet less (hack/bench/pps, docs/performance.md).
			for port := int(f.first); port <= int(f.last); port++ {
				for _, ip := range pd.ips {
					elems = append(elems, nft.Element{Addr: ip, Proto: f.proto, Port: uint16(port), Verdict: nft.Verdict{Kind: nft.Goto, Chain: chain}})
				}
			}
			continue
		}
		exprs := []nft.Expr{nft.L4ProtoEq{Proto: f.proto}}
		if f.first != 0 || f.last != 65535 {
			exprs = append(exprs, nft.DportRange{First: f.first, Last: f.last})
		}
		wide = append(wide, nft.Rule{Exprs: append(exprs, nft.Verdict{Kind: nft.Jump, Chain: chain}), Comment: "a wide port range"})
	}
	if len(elems) > 0 {
		rules = append(rules, nft.Rule{
			Exprs:   []nft.Expr{nft.Verdict{Kind: nft.Jump, Chain: portsChainName(d)}},
			Comment: truncateComment(fmt.Sprintf("%s of %s", d.name, policyNames(policies))),
		})
	}
	rules = append(rules, wide...)
	for _, nc := range plan.named {
		// The selecting policy holds the named-port set (activate).
		if nc.key != "" {
			c.acquireUnion(plan, []string{nc.key}, nc.key, use)
		}
		for _, f := range families {
			var exprs []nft.Expr
			if nc.key != "" {
				exprs = append(exprs, nft.AddrInSet{Family: f, Field: d.peerField, Set: c.peersSetName(nc.key, f)})
			}
			exprs = append(exprs, nft.AddrProtoPortInSet{Family: f, Field: nft.Daddr, Set: namedPortSetName(nc.use, f)}, allows)
			rules = append(rules, nft.Rule{Exprs: exprs, Comment: truncateComment("named port " + nc.use.name + " of the destination")})
		}
	}
	if len(plan.anyKeys) > 0 {
		ukey := unionKey(plan.anyKeys)
		c.acquireUnion(plan, plan.anyKeys, ukey, use)
		for _, f := range families {
			rules = append(rules, nft.Rule{
				Exprs:   []nft.Expr{nft.AddrInSet{Family: f, Field: d.peerField, Set: c.peersSetName(ukey, f)}, allows},
				Comment: "allowed on every port",
			})
		}
	}
	slices.SortFunc(elems, compareElements)
	return rules, elems
}

// portsChains are the chains, one per direction, that ask the ports maps:
// a flat pod chain with elements in them jumps to its direction's.
//
// The lookup sits in one shared chain, not in every pod chain, for the
// kernel's sake: at each commit that adds a jump, a lookup or a verdict
// element (nearly every one), nf_tables checks the whole table for loops,
// and it walks every element of a verdict map once for each rule that
// looks it up. With the lookup in each of 112 pod chains, that walk was
// most of the ~5 ms every event's commit paid at 10k policies; a chain the
// check has already seen at the same depth is not walked again (kernels
// since late 2025), so one shared chain walks each map once. A packet
// pays one more jump for it.
func portsChains() []*nft.Chain {
	var out []*nft.Chain
	for _, d := range []direction{ingress, egress} {
		ch := &nft.Chain{Name: portsChainName(d)}
		for _, f := range families {
			ch.Rules = append(ch.Rules, nft.Rule{
				Exprs:   []nft.Expr{nft.AddrProtoPortVmap{Family: f, Field: d.podField, Map: portsMapName(d, f)}},
				Comment: fmt.Sprintf("the %s fragment of the pod's address, protocol and port", d.name),
			})
		}
		out = append(out, ch)
	}
	return out
}

// portsChainName is the chain of portsChains for d. Policy and pod chain
// names hold a slash (namespace/name), allow chains a hash: none is this.
func portsChainName(d direction) string { return d.name + "-ports" }

// policyNames names the policies of a pod chain's comment: every one,
// with how many there are first when it may be cut (truncateComment).
func policyNames(policies []*policyState) string {
	names := make([]string, len(policies))
	for i, p := range policies {
		names[i] = p.key.name
	}
	if len(names) == 1 {
		return "policy " + names[0]
	}
	return fmt.Sprintf("%d policies: %s", len(names), strings.Join(names, ", "))
}
