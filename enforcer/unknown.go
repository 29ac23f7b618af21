package enforcer

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"go4.org/netipx"
	corev1 "k8s.io/api/core/v1"

	"github.com/nftpolicy/nftpolicy/nft"
)

// This file closes the addresses of this node's pod CIDRs that belong to
// no pod the daemon knows (Options.DenyUnknown).
//
// A pod is started, gets its address and can send before its object with
// that address reaches the daemon and its rules reach the kernel
// (kube-router #873, #2079; kubernetes #85966). Without policy rules the
// pod's address misses the dispatch maps, and its traffic is allowed. With
// DenyUnknown, every address of this node's pod CIDRs that is not a known
// pod of this node is in the set unknown-local-v4 (or -v6), and the base
// chain drops forwarded traffic from or to it. Once the pod is known its
// address leaves the set, in the same batch that adds its pod chains if
// policies select it, so from then on its own policies decide (no policy:
// allowed, as before).
//
// Only pods of this node count as known: an address of this node's pod
// CIDRs is a pod of this node, whatever a stale object elsewhere says.

// unknownSetName is the set of one family's unknown addresses.
func unknownSetName(f nft.IPFamily) string { return "unknown-local-" + familySuffix(f) }

// podCIDRs are the pod CIDRs of this node: Options.PodCIDRs when given,
// else the node's spec.podCIDRs (spec.podCIDR on old clusters).
func (c *Compiler) podCIDRs(nodes []*corev1.Node) ([]netip.Prefix, []Problem) {
	if len(c.opts.PodCIDRs) > 0 {
		return c.opts.PodCIDRs, nil
	}
	object := "Node " + c.opts.Node
	i, ok := slices.BinarySearchFunc(nodes, c.opts.Node, func(n *corev1.Node, name string) int { return strings.Compare(n.Name, name) })
	if !ok {
		return nil, []Problem{{Object: object, Err: fmt.Errorf("no Node object and no pod CIDRs given: --default-deny-unknown closes nothing")}}
	}
	n := nodes[i]
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	var out []netip.Prefix
	var problems []Problem
	for _, s := range cidrs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			problems = append(problems, Problem{Object: object, Err: fmt.Errorf("spec.podCIDRs %q: %w (not closed)", s, err)})
			continue
		}
		out = append(out, p.Masked())
	}
	if len(out) == 0 && len(problems) == 0 {
		problems = append(problems, Problem{Object: object, Err: fmt.Errorf("spec.podCIDRs is empty and no --pod-cidr given: --default-deny-unknown closes nothing")})
	}
	return out, problems
}

// refreshUnknown recomputes the unknown sets when this node's pods or pod
// CIDRs changed.
func (c *Compiler) refreshUnknown(nodes []*corev1.Node, ch *changes) {
	if !c.opts.DenyUnknown {
		return
	}
	cidrs, problems := c.podCIDRs(nodes)
	c.unknownProblems = problems
	if !ch.localPods && c.unknownSets != nil && slices.Equal(cidrs, c.unknownCIDRs) {
		return
	}
	c.unknownCIDRs = cidrs
	var b netipx.IPSetBuilder
	for _, p := range cidrs {
		b.AddPrefix(p)
	}
	for _, pods := range c.localByNS {
		for _, pd := range pods {
			for _, ip := range pd.ips {
				b.Remove(ip)
			}
		}
	}
	unknown, _ := b.IPSet() // only fails for invalid addresses, which neither holds
	if c.unknownSets == nil {
		c.unknownSets = map[nft.IPFamily]*nft.Set{}
	}
	for _, f := range families {
		elems := rangesOf(unknown, f)
		if old := c.unknownSets[f]; old != nil && slices.Equal(old.Elements, elems) {
			continue
		}
		s := &nft.Set{
			Name:     unknownSetName(f),
			Comment:  "addresses of this node's pod CIDRs that are no known pod: closed until known",
			Key:      addrKey(f),
			Interval: true,
			Elements: elems,
		}
		c.unknownSets[f] = s
		c.putSet(s)
	}
}

// unknownRules drop what is forwarded from or to an unknown address:
//
//	ip saddr @unknown-local-v4 drop
//	ip daddr @unknown-local-v4 drop
func (c *Compiler) unknownRules() []nft.Rule {
	if !c.opts.DenyUnknown {
		return nil
	}
	var out []nft.Rule
	for _, f := range families {
		for _, field := range []nft.AddrField{nft.Saddr, nft.Daddr} {
			out = append(out, nft.Rule{
				Exprs:   []nft.Expr{nft.AddrInSet{Family: f, Field: field, Set: unknownSetName(f)}, nft.Verdict{Kind: nft.Drop}},
				Comment: "an address of this node's pod CIDRs that is no known pod",
			})
		}
	}
	return out
}
