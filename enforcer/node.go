package enforcer

import (
	"fmt"
	"slices"

	"github.com/nftpolicy/nftpolicy/nft"
)

// A pod's connections to its own node (any address of the node: its
// InternalIP, a node-local DNS cache, a hostNetwork pod's port) never
// cross the forward hook: they end on the node, through the input hook.
// NetworkPolicy always allows them, so nftpolicy had no reason to look
// there. A ClusterNetworkPolicy's egress rules do judge them: a nodes
// peer selects the node's addresses, and networks "will also match
// cluster-internal traffic" (0.0.0.0/0 is every node too). So when a pod
// of this node is an egress subject of a cluster policy, its connections
// to the node go through a chain of their own on the input hook:
//
//	filter-input            ct state established,related accept
//	                        IPv6 neighbour discovery accept
//	                        ip saddr vmap @node-egress-pods-v4 → jump node-egress-…
//	node-egress-<h>-ns/pod  the Admin tier; NetworkPolicy, when one isolates
//	                        the pod for egress, allows (as it always does
//	                        for the pod's own node); otherwise the Baseline tier
//
// The input chain and its maps are in the table only while some pod of
// this node has such a chain, so a node without cluster policies keeps
// the layout it had. Traffic from the node to a pod (the output hook) is
// judged by nothing: no ingress peer can name a node.

// inputChainName is the name of the base chain on the input hook.
func inputChainName() string { return "filter-input" }

// nodeMapName is `node-egress-pods-v4`: a local pod's address to its
// node-egress chain.
func nodeMapName(f nft.IPFamily) string { return "node-egress-pods-" + familySuffix(f) }

// refreshNodeChain brings the node-egress chain of a pod of this node in
// step with its egress tiers: none when it has none.
func (c *Compiler) refreshNodeChain(pd *pod, tiers podTiers, npIsolated bool, ch *changes) {
	old := c.nodeChains[pd.key]
	if tiers == (podTiers{}) {
		if old != nil {
			c.dropNodeChain(pd.key, old)
			ch.dispatch = true
		}
		return
	}
	name := ""
	if old != nil {
		name = old.chain.Name
	} else {
		name = c.acquireChainName("node-egress", pd.key.namespace, pd.key.name)
	}
	chain := &nft.Chain{Name: name, Rules: append([]nft.Rule{c.clearBitsRule()}, c.adminTierRules(pd, tiers)...)}
	if npIsolated && !pd.quarantined {
		// A quarantined pod's true policies are not known: the
		// baseline's Denies may be its, and apply.
		chain.Rules = append(chain.Rules, nft.Rule{
			Exprs:   []nft.Expr{nft.Verdict{Kind: nft.Return}},
			Comment: truncateComment(fmt.Sprintf("%s: NetworkPolicy isolates it and always allows its own node", pd.key)),
		})
	} else {
		chain.Rules = append(chain.Rules, baselineTierRules(pd, tiers)...)
	}
	if old != nil && old.pod == pd && slices.EqualFunc(old.chain.Rules, chain.Rules, nft.Rule.Equal) {
		return
	}
	if old == nil || !slices.Equal(old.pod.ips, pd.ips) {
		ch.dispatch = true
	}
	c.nodeChains[pd.key] = &podChain{pod: pd, chain: chain}
	c.putChain(chainSortKey(3, pd.key, egress), chain)
}

func (c *Compiler) dropNodeChain(k objKey, pc *podChain) {
	delete(c.nodeChains, k)
	c.dropChain(pc.chain.Name)
	c.releaseChainName("node-egress", k.namespace, k.name)
}

// inputChain is the base chain on the input hook; nil while no pod has a
// node-egress chain.
func (c *Compiler) inputChain() *nft.Chain {
	if len(c.nodeChains) == 0 {
		return nil
	}
	ch := &nft.Chain{
		Name: inputChainName(),
		Hook: &nft.Hook{Type: "filter", Hook: "input", Priority: DefaultPriority, Policy: nft.Accept},
		Rules: []nft.Rule{{
			Exprs:   []nft.Expr{nft.CtStateEstablishedRelated{}, nft.Verdict{Kind: nft.Accept}},
			Comment: "policy is decided once per connection, on its first packet",
		}, {
			Exprs:   []nft.Expr{nft.ICMPv6TypeRange{First: icmpv6RouterSolicit, Last: icmpv6Redirect, HopLimit: ndHopLimit}, nft.Verdict{Kind: nft.Accept}},
			Comment: "IPv6 neighbour discovery is not subject to policy, as ARP is not",
		}},
	}
	for _, f := range families {
		ch.Rules = append(ch.Rules, nft.Rule{Exprs: []nft.Expr{nft.AddrVmap{Family: f, Field: nft.Saddr, Map: nodeMapName(f)}}})
	}
	return ch
}

// nodeMaps are the maps of inputChain; nil with it.
func (c *Compiler) nodeMaps() []*nft.Set {
	if len(c.nodeChains) == 0 {
		return nil
	}
	var out []*nft.Set
	for _, f := range families {
		s := &nft.Set{
			Name:    nodeMapName(f),
			Comment: fmt.Sprintf("%s address of each pod on this node that cluster policies judge for egress -> its chain for connections to this node", familyName(f)),
			Key:     addrKey(f),
			Verdict: true,
		}
		for _, pc := range c.nodeChains {
			for _, ip := range pc.pod.ips {
				if nft.FamilyOf(ip) == f {
					s.Elements = append(s.Elements, nft.Element{Addr: ip, Verdict: nft.Verdict{Kind: nft.Jump, Chain: pc.chain.Name}})
				}
			}
		}
		slices.SortFunc(s.Elements, func(a, b nft.Element) int { return a.Addr.Compare(b.Addr) })
		out = append(out, s)
	}
	return out
}
