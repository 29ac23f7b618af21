package enforcer

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"go4.org/netipx"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	policyv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/nftpolicy/nftpolicy/nft"
)

// This file compiles ClusterNetworkPolicy (policy.networking.k8s.io
// v1beta1): the Admin tier, judged ahead of NetworkPolicy, and the
// Baseline tier, judged where no NetworkPolicy isolates the pod. See
// "Cluster network policy" in doc.go for the layout and why.

// Tier names as the API spells them, and as chains and explanations
// print them.
const (
	tierAdmin    = "admin"
	tierBaseline = "baseline"
)

// A clusterPolicyState is one ClusterNetworkPolicy as compiled. Its rules
// follow from the spec alone and are built once per spec; which pods of
// this node it applies to follows from their labels and their
// namespaces'.
type clusterPolicyState struct {
	name string
	cnp  *policyv1beta1.ClusterNetworkPolicy
	tier string

	// The subject: pods whose namespace matches namespaces and whose
	// labels match pods. Both nil: it selects nothing (a problem says why).
	subjectNS, subjectPods labels.Selector

	// rules: by direction name, what its spec compiles to, in the order
	// they are judged.
	rules map[string][]tierRule

	problems    []Problem // reported while active, as a NetworkPolicy's are
	selProblems []Problem
	peerUses    []peerUse
	portUses    []portUse
	namedPeers  []namedPeer // its egress rules on named ports, with their peers

	active bool // some pod of this node is its subject: its sets are in the table

	// denyOnly is the policy with its Deny rules alone, for the pods it
	// may select but whose namespace's labels are not known (see
	// mayBeSubject); origin is the policy a denyOnly is of.
	denyOnly, origin *clusterPolicyState
}

// A tierRule is one rule of a policy in one direction: the chain rule
// that matches protocol, port and verdict, and the peer it asks of the
// peer address, which the tier's address classes decide (layoutGroup).
type tierRule struct {
	rule nft.Rule
	// peer is the key of the peer sets the peer address must be in; ""
	// for any address.
	peer string
	// family is the one family whose packets the rule judges (a named
	// port's set is of one family); 0 for both.
	family nft.IPFamily
	ref    ClusterRuleRef // the spec rule it is
}

// groupName is what a tier chain's key and comment call the policy.
func (p *clusterPolicyState) groupName() string {
	if p.origin != nil {
		return p.name + " (deny rules only)"
	}
	return p.name
}

// A ClusterRuleRef is one rule of a ClusterNetworkPolicy:
// spec.ingress[Rule] or spec.egress[Rule], with its action.
type ClusterRuleRef struct {
	Policy    string // the ClusterNetworkPolicy's name
	Tier      string // "admin" or "baseline"
	Direction string
	Rule      int
	Name      string // the rule's own name, when it has one
	Action    string // "Accept", "Deny" or "Pass"
}

func (r ClusterRuleRef) String() string {
	s := fmt.Sprintf("ClusterNetworkPolicy %s (%s) %s[%d]", r.Policy, r.Tier, r.Direction, r.Rule)
	if r.Name != "" {
		s += " " + r.Name
	}
	return s + ": " + r.Action
}

func clusterPolicyObject(name string) string { return "ClusterNetworkPolicy " + name }

// clusterOrder is the order policies of one tier are judged in: lower
// priority first; policies of equal priority by name. The API leaves the
// order of equal priorities to the implementation; by name is stable
// across restarts and nodes.
func clusterOrder(a, b *clusterPolicyState) int {
	return cmp.Or(cmp.Compare(a.tier, b.tier), cmp.Compare(a.cnp.Spec.Priority, b.cnp.Spec.Priority), cmp.Compare(a.name, b.name))
}

// A clusterGroup is the chain of one tier and direction for the pods of
// this node that the same policies select: their rules in order. Pods
// selected alike share it, so a namespace-wide guardrail is one chain,
// not one per pod.
//
// It is one chain per family, entered by the packets of that family, and
// laid out by the peer address (layoutGroup): the entry chain looks the
// address up in the family's class map, which sends it to the chain of
// its class, the rules whose peer may hold it, in order. A packet pays
// one lookup per tier, however many rules and peers the tier has.
type clusterGroup struct {
	key     string
	tier    string
	dir     direction
	members []*clusterPolicyState
	accepts bool // some rule accepts: the pod chain checks our bit after it

	// rules are the members' rules for each family, in order (nil for a
	// family none judges); the layout follows from them and the peer
	// sets.
	rules [][]tierRule
	// chains are the entry chains by family, as families lists them (nil
	// for a family without rules); maps their class maps.
	chains []*nft.Chain
	maps   []*nft.Set
	// classes are the class chains by name, and refs the spec rule of
	// each of their rules.
	classes map[string]*nft.Chain
	refs    map[string][]ClusterRuleRef
	// classBySig names, by family, the class chain of each class (its
	// sig), for the pairs whose Pass goes on to it; gen counts layouts
	// (0: not laid out yet).
	classBySig []map[string]string
	gen        int
}

// enter is how the chain of pd enters the group: a jump (or goto) to the
// chain of each family, taken by the packets of that family. A pod of one
// family takes its family's alone, without asking: its chain is only
// entered through its own addresses (the dispatch maps), so every packet
// in it is of that family.
func (g *clusterGroup) enter(kind nft.VerdictKind, comment string, pd *pod) []nft.Rule {
	own := podFamilies(pd)
	var out []nft.Rule
	for i, f := range families {
		ch := g.chains[i]
		if ch == nil || (len(own) == 1 && own[0] != f) {
			continue
		}
		r := nft.Rule{Exprs: []nft.Expr{nft.NfprotoEq{Family: f}, nft.Verdict{Kind: kind, Chain: ch.Name}}, Comment: comment}
		if len(own) == 1 {
			r.Exprs = r.Exprs[1:]
		}
		out = append(out, r)
	}
	return out
}

// podFamilies are the families of pd's addresses, in families' order.
func podFamilies(pd *pod) []nft.IPFamily {
	var out []nft.IPFamily
	for _, f := range families {
		if slices.ContainsFunc(pd.ips, func(ip netip.Addr) bool { return nft.FamilyOf(ip) == f }) {
			out = append(out, f)
		}
	}
	return out
}

// reads reports whether the group's layout reads one of the peer sets
// whose keys changed.
func (g *clusterGroup) reads(changed map[string]bool) bool {
	for _, rules := range g.rules {
		for _, r := range rules {
			if r.peer != "" && changed[r.peer] {
				return true
			}
		}
	}
	return false
}

// classOf is the class chain that judges a packet of family f whose peer
// address is addr ("" when no rule of the group may match it): what the
// class map holds, read as the kernel reads it.
func (g *clusterGroup) classOf(f nft.IPFamily, addr netip.Addr) string {
	i := slices.Index(families, f)
	if i < 0 || g.maps[i] == nil {
		return ""
	}
	elems := g.maps[i].Elements
	j, _ := slices.BinarySearchFunc(elems, addr, func(el nft.Element, a netip.Addr) int { return lastOf(el).Compare(a) })
	if j < len(elems) && elems[j].Addr.Compare(addr) <= 0 {
		return elems[j].Verdict.Chain
	}
	return ""
}

// podTiers are the groups a pod of this node is judged by in one direction.
type podTiers struct{ admin, baseline *clusterGroup }

func (c *Compiler) syncClusterPolicies(cnps []*policyv1beta1.ClusterNetworkPolicy, ch *changes) {
	key := func(p *policyv1beta1.ClusterNetworkPolicy) objKey { return objKey{name: p.Name} }
	c.clusterList = walkChanges(c.clusterList, cnps, key, func(k objKey, _, cnp *policyv1beta1.ClusterNetworkPolicy) {
		old := c.cluster[k.name]
		if old != nil && cnp != nil && equality.Semantic.DeepEqual(old.cnp.Spec, cnp.Spec) {
			old.cnp = cnp
			return
		}
		ch.cluster = true
		if old != nil {
			if old.active {
				c.deactivateCluster(old)
			}
			for _, u := range old.peerUses {
				c.releasePeersName(u.key)
			}
			c.letGoNamedPorts(old.namedPeers)
			for _, u := range old.portUses {
				if !u.ingress {
					c.releasePortSets(u)
				}
			}
			delete(c.cluster, k.name)
		}
		if cnp != nil {
			p := c.planClusterPolicy(cnp)
			// Egress named-port sets follow the policy, not its
			// activation, as a NetworkPolicy's do (addPolicy).
			for _, u := range p.portUses {
				if !u.ingress {
					c.acquirePortSets(u)
				}
			}
			c.holdNamedPorts(p.namedPeers)
			c.cluster[k.name] = p
		}
	})
}

// planClusterPolicy builds what follows from a policy's spec.
func (c *Compiler) planClusterPolicy(cnp *policyv1beta1.ClusterNetworkPolicy) *clusterPolicyState {
	p := &clusterPolicyState{name: cnp.Name, cnp: cnp, rules: map[string][]tierRule{}}
	obj := clusterPolicyObject(cnp.Name)
	switch cnp.Spec.Tier {
	case policyv1beta1.AdminTier:
		p.tier = tierAdmin
	case policyv1beta1.BaselineTier:
		p.tier = tierBaseline
	default:
		p.selProblems = append(p.selProblems, Problem{Object: obj, Err: fmt.Errorf("spec.tier %q is neither Admin nor Baseline (policy ignored)", cnp.Spec.Tier)})
		return p
	}
	var err error
	switch s := cnp.Spec.Subject; {
	case s.Namespaces != nil && s.Pods == nil:
		p.subjectNS, err = metav1.LabelSelectorAsSelector(s.Namespaces)
		p.subjectPods = labels.Everything()
	case s.Pods != nil && s.Namespaces == nil:
		p.subjectNS, err = metav1.LabelSelectorAsSelector(&s.Pods.NamespaceSelector)
		if err == nil {
			p.subjectPods, err = metav1.LabelSelectorAsSelector(&s.Pods.PodSelector)
		}
	default:
		err = fmt.Errorf("exactly one of namespaces and pods must be set")
	}
	if err != nil {
		p.subjectNS, p.subjectPods = nil, nil
		p.selProblems = append(p.selProblems, Problem{Object: obj, Err: fmt.Errorf("spec.subject: %w (policy selects no pod)", err)})
		return p
	}
	for _, d := range directions {
		c.clusterRules(p, d)
	}
	p.denyOnly = &clusterPolicyState{name: p.name, cnp: cnp, tier: p.tier, subjectNS: p.subjectNS, subjectPods: p.subjectPods,
		rules: map[string][]tierRule{}, origin: p}
	for _, d := range directions {
		for _, r := range p.rules[d.name] {
			if r.ref.Action == string(policyv1beta1.ClusterNetworkPolicyRuleActionDeny) {
				p.denyOnly.rules[d.name] = append(p.denyOnly.rules[d.name], r)
			}
		}
	}
	return p
}

// A clusterPeer is one peer of a rule, whichever direction.
type clusterPeer struct {
	namespaces *metav1.LabelSelector
	pods       *policyv1beta1.NamespacedPod
	nodes      *metav1.LabelSelector
	networks   []policyv1beta1.CIDR
	domains    []policyv1beta1.DomainName
}

type clusterRuleSpec struct {
	name      string
	action    policyv1beta1.ClusterNetworkPolicyRuleAction
	peers     []clusterPeer
	protocols []policyv1beta1.ClusterNetworkPolicyProtocol
}

func clusterRuleSpecs(cnp *policyv1beta1.ClusterNetworkPolicy, d direction) []clusterRuleSpec {
	var out []clusterRuleSpec
	if d == ingress {
		for _, r := range cnp.Spec.Ingress {
			s := clusterRuleSpec{name: r.Name, action: r.Action, protocols: r.Protocols}
			for _, p := range r.From {
				s.peers = append(s.peers, clusterPeer{namespaces: p.Namespaces, pods: p.Pods})
			}
			out = append(out, s)
		}
		return out
	}
	for _, r := range cnp.Spec.Egress {
		s := clusterRuleSpec{name: r.Name, action: r.Action, protocols: r.Protocols}
		for _, p := range r.To {
			s.peers = append(s.peers, clusterPeer{namespaces: p.Namespaces, pods: p.Pods, nodes: p.Nodes, networks: p.Networks, domains: p.DomainNames})
		}
		out = append(out, s)
	}
	return out
}

// clusterRules compiles one direction of a policy into the rules its tier
// chains inline. Verdicts:
//
//   - Deny drops;
//   - Accept in the Admin tier sets our allow bit and returns: the pod
//     chain returns at once, skipping NetworkPolicy and Baseline, and the
//     other direction's check still runs (an egress Accept does not
//     override the destination's ingress policy);
//   - Pass returns without the bit: the rest of the tier is skipped, and
//     the pod chain goes on to the next stage;
//   - in the Baseline tier, the last stage, Accept and Pass both return.
//
// What the compiler cannot read fails closed, as the API asks: a peer
// with no field we know (a newer CRD), or a protocol entry with none,
// makes an Accept rule match nothing through it and a Deny or Pass rule
// deny all.
func (c *Compiler) clusterRules(p *clusterPolicyState, d direction) {
	obj := clusterPolicyObject(p.name)
	var accept, pass []nft.Expr
	if p.tier == tierAdmin {
		accept = []nft.Expr{nft.SetMark{Clear: c.opts.MarkMask, Set: c.bit}, nft.Verdict{Kind: nft.Return}}
	} else {
		accept = []nft.Expr{nft.Verdict{Kind: nft.Return}}
	}
	pass = []nft.Expr{nft.Verdict{Kind: nft.Return}}
	deny := []nft.Expr{nft.Verdict{Kind: nft.Drop}}
	if c.opts.Counters {
		// Every rule counts what it decided (see countedRules).
		accept = append([]nft.Expr{nft.Counter{}}, accept...)
		pass = append([]nft.Expr{nft.Counter{}}, pass...)
		deny = append([]nft.Expr{nft.Counter{}}, deny...)
	}
	problem := func(err error) { p.problems = append(p.problems, Problem{Object: obj, Err: err}) }

	for i, r := range clusterRuleSpecs(p.cnp, d) {
		where := fmt.Sprintf("spec.%s[%d]", d.name, i)
		ref := ClusterRuleRef{Policy: p.name, Tier: p.tier, Direction: d.name, Rule: i, Name: r.name, Action: string(r.action)}
		comment := fmt.Sprintf("%s %s[%d] %s", p.name, d.name, i, r.action)
		if r.name != "" {
			comment += " " + r.name
		}
		comment = truncateComment(comment)
		denyAll := func(why string) {
			problem(fmt.Errorf("%s: %s (rule denies all, failing closed)", where, why))
			ref.Action = string(policyv1beta1.ClusterNetworkPolicyRuleActionDeny)
			p.rules[d.name] = append(p.rules[d.name], tierRule{rule: nft.Rule{Exprs: slices.Clone(deny), Comment: comment}, ref: ref})
		}
		var verdict []nft.Expr
		switch r.action {
		case policyv1beta1.ClusterNetworkPolicyRuleActionAccept:
			verdict = accept
		case policyv1beta1.ClusterNetworkPolicyRuleActionDeny:
			verdict = deny
		case policyv1beta1.ClusterNetworkPolicyRuleActionPass:
			verdict = pass
		default:
			// An action we do not know: deny all, as for an unknown peer.
			denyAll(fmt.Sprintf("unknown action %q", r.action))
			continue
		}
		isAccept := r.action == policyv1beta1.ClusterNetworkPolicyRuleActionAccept
		add := func(exprs []nft.Expr, peer string, f nft.IPFamily) {
			r := nft.Rule{Exprs: append(exprs, verdict...), Comment: comment}
			p.rules[d.name] = append(p.rules[d.name], tierRule{rule: r, peer: peer, family: f, ref: ref})
		}

		parsed, key, unknown, err := c.parseClusterPeers(r.peers, d, r.action == policyv1beta1.ClusterNetworkPolicyRuleActionDeny)
		if err != nil {
			if isAccept {
				problem(fmt.Errorf("%s: %w (rule ignored: it accepts nothing)", where, err))
				continue
			}
			denyAll(err.Error())
			continue
		}
		if len(unknown) > 0 {
			if !isAccept {
				denyAll(strings.Join(unknown, "; "))
				continue
			}
			problem(fmt.Errorf("%s: %s (those peers accept nothing)", where, strings.Join(unknown, "; ")))
		}
		if parsed == nil {
			continue // an Accept whose every peer matches nothing
		}

		type portMatch struct {
			exprs []nft.Expr
			named *portUse
		}
		var ports []portMatch
		unknownProto := false
		for j, pr := range r.protocols {
			var proto nft.Proto
			var port *policyv1beta1.Port
			switch {
			case pr.TCP != nil:
				proto, port = nft.ProtoTCP, pr.TCP.DestinationPort
			case pr.UDP != nil:
				proto, port = nft.ProtoUDP, pr.UDP.DestinationPort
			case pr.SCTP != nil:
				proto, port = nft.ProtoSCTP, pr.SCTP.DestinationPort
			case pr.DestinationNamedPort != "":
				name := pr.DestinationNamedPort
				if msgs := validation.IsValidPortName(name); len(msgs) > 0 {
					problem(fmt.Errorf("%s.protocols[%d]: port %q: %s (entry ignored)", where, j, name, strings.Join(msgs, "; ")))
					continue
				}
				// A container port names its protocol; the name matches
				// whichever it is.
				for _, pp := range []nft.Proto{nft.ProtoTCP, nft.ProtoUDP, nft.ProtoSCTP} {
					use := portUse{name: name, proto: pp, ingress: d == ingress}
					ports = append(ports, portMatch{named: &use})
				}
				continue
			default:
				unknownProto = true
				continue
			}
			exprs := []nft.Expr{nft.L4ProtoEq{Proto: proto}}
			switch {
			case port == nil:
			case port.Range != nil:
				if port.Range.Start < 1 || port.Range.End > 65535 || port.Range.Start > port.Range.End {
					problem(fmt.Errorf("%s.protocols[%d]: port range %d-%d is not within 1-65535 in order (entry ignored)", where, j, port.Range.Start, port.Range.End))
					continue
				}
				exprs = append(exprs, nft.DportRange{First: uint16(port.Range.Start), Last: uint16(port.Range.End)})
			case port.Number >= 1 && port.Number <= 65535:
				exprs = append(exprs, nft.DportRange{First: uint16(port.Number), Last: uint16(port.Number)})
			default:
				problem(fmt.Errorf("%s.protocols[%d]: port %d is not within 1-65535 (entry ignored)", where, j, port.Number))
				continue
			}
			ports = append(ports, portMatch{exprs: exprs})
		}
		if unknownProto {
			if !isAccept {
				denyAll("a protocols entry has no field this version knows")
				continue
			}
			problem(fmt.Errorf("%s: a protocols entry has no field this version knows (it accepts nothing)", where))
		}
		if len(r.protocols) > 0 && len(ports) == 0 {
			if !isAccept && !unknownProto {
				// Every entry was ignored: matching nothing would open
				// what the rule denies.
				denyAll("no protocols entry could be compiled")
			}
			continue
		}
		if len(r.protocols) == 0 {
			ports = []portMatch{{}}
		}

		// The peer is asked by the tier's address classes, not by the
		// rule; its sets are kept (and in the table) for them to read.
		//
		// Except a peer that names the pods of every namespace (a default
		// deny's `namespaces: {}`): every pod that comes or goes anywhere
		// changes it, and the class maps of every tier reading it would
		// change with it (hack/bench/events: 9x the messages per pod
		// event at 100 cluster policies). Its rule keeps its set lookup
		// and is in every class, so the set alone follows the pods.
		peer, wide := "", false
		if !parsed.all {
			peer = key
			p.peerUses = append(p.peerUses, peerUse{key: key, parsed: parsed})
			c.acquirePeersName(key)
			wide = namesEveryNamespace(parsed)
		}
		lookup := func(f nft.IPFamily) nft.Expr {
			return nft.AddrInSet{Family: f, Field: d.peerField, Set: c.peersSetName(key, f)}
		}
		for _, pm := range ports {
			switch {
			case pm.named != nil:
				p.portUses = append(p.portUses, *pm.named)
				if d == egress {
					p.namedPeers = append(p.namedPeers, namedPeerOf(*pm.named, key, parsed))
				}
				for _, f := range families {
					named := []nft.Expr{nft.AddrProtoPortInSet{Family: f, Field: nft.Daddr, Set: namedPortSetName(*pm.named, f)}}
					if wide {
						add(append([]nft.Expr{lookup(f)}, named...), "", f)
						continue
					}
					add(named, peer, f)
				}
			case wide:
				for _, f := range families {
					// Protocol and port first: two comparisons that fail
					// most packets cost less than the set lookup.
					add(append(slices.Clone(pm.exprs), lookup(f)), "", f)
				}
			default:
				add(slices.Clone(pm.exprs), peer, 0)
			}
		}
	}
}

// namesEveryNamespace reports whether some selector of parsed names pods
// of every namespace: a namespace selector that selects everything.
func namesEveryNamespace(parsed *parsedPeers) bool {
	return slices.ContainsFunc(parsed.selectors, func(s peerSelector) bool { return s.namespaces != nil && s.namespaces.Empty() })
}

// parseClusterPeers parses a rule's peers into the peer set they share
// with every rule, of any policy, that names the same peers (the key reads
// as a NetworkPolicy's would where the two mean the same). all is set
// when the peers are every address. unknown lists the peers that match
// nothing we can enforce: no field we know, or domainNames, which we do
// not support. parsed is nil when no peer is left.
//
// A Deny rule's namespace selectors name every namespace they may name
// (deny): a quarantined namespace, whose true labels are not known, is
// named by a Deny rule that reads its labels, and by no Accept or Pass
// rule (a Pass skips the Admin tier's later Denies).
func (c *Compiler) parseClusterPeers(peers []clusterPeer, d direction, deny bool) (parsed *parsedPeers, key string, unknown []string, err error) {
	field := "from"
	if d == egress {
		field = "to"
	}
	// namespaces, pods and networks read as a NetworkPolicy's peers do: a
	// namespaceSelector alone, both selectors, ipBlocks. parsePeers and
	// peerKey take them from there.
	var asNP []networkingv1.NetworkPolicyPeer
	var nodes []labels.Selector
	var nodeKey strings.Builder
	for k, peer := range peers {
		switch {
		case peer.namespaces != nil:
			asNP = append(asNP, networkingv1.NetworkPolicyPeer{NamespaceSelector: peer.namespaces})
		case peer.pods != nil:
			asNP = append(asNP, networkingv1.NetworkPolicyPeer{NamespaceSelector: &peer.pods.NamespaceSelector, PodSelector: &peer.pods.PodSelector})
		case len(peer.networks) > 0:
			for n, cidr := range peer.networks {
				pfx, err := netip.ParsePrefix(string(cidr))
				if err != nil {
					return nil, "", nil, fmt.Errorf("%s[%d].networks[%d]: %w", field, k, n, err)
				}
				asNP = append(asNP, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: pfx.Masked().String()}})
			}
		case peer.nodes != nil:
			sel, err := metav1.LabelSelectorAsSelector(peer.nodes)
			if err != nil {
				return nil, "", nil, fmt.Errorf("%s[%d].nodes: %w", field, k, err)
			}
			nodes = append(nodes, sel)
			fmt.Fprintf(&nodeKey, "node:%s;", metav1.FormatLabelSelector(peer.nodes))
		case len(peer.domains) > 0:
			unknown = append(unknown, fmt.Sprintf("%s[%d].domainNames is not supported by nftpolicy", field, k))
		default:
			unknown = append(unknown, fmt.Sprintf("%s[%d] has no field this version knows", field, k))
		}
	}
	if len(asNP) == 0 && len(nodes) == 0 {
		return nil, "", unknown, nil
	}
	out := &parsedPeers{}
	if len(asNP) > 0 {
		if out, err = parsePeers("", asNP); err != nil {
			return nil, "", nil, fmt.Errorf("%s: %w", field, err)
		}
	}
	for i := range out.selectors {
		out.selectors[i].mayBe = deny
	}
	out.nodes = nodes
	out.all = out.blocks != nil && len(out.selectors) == 0 && len(nodes) == 0 && isEverything(out.blocks)
	key = peerKey("", asNP) + nodeKey.String()
	if deny && len(out.selectors) > 0 {
		key = "deny:" + key // not the set of the same selectors in other rules
	}
	return out, key, unknown, nil
}

// isEverything reports whether s holds every IPv4 and IPv6 address.
func isEverything(s *netipx.IPSet) bool {
	return s.ContainsPrefix(netip.MustParsePrefix("0.0.0.0/0")) && s.ContainsPrefix(netip.MustParsePrefix("::/0"))
}

// hasRules reports whether p judges direction d: a policy without rules
// in a direction does not affect it, nor a denyOnly without Deny rules.
func (p *clusterPolicyState) hasRules(d direction) bool {
	if p.tier == "" || p.subjectNS == nil {
		return false
	}
	if p.origin != nil {
		return len(p.rules[d.name]) > 0
	}
	if d == ingress {
		return len(p.cnp.Spec.Ingress) > 0
	}
	return len(p.cnp.Spec.Egress) > 0
}

// subjects reports whether pd is one of p's subjects: host-network pods
// take no part (see podOf), and a quarantined pod, whose labels are not
// known, is selected by nothing.
func (c *Compiler) subjects(p *clusterPolicyState, pd *pod) bool {
	return p.subjectNS != nil && c.namespaceSelected(p.subjectNS, pd.key.namespace) && pd.matchedBy(p.subjectPods)
}

// mayBeSubject reports whether pd, which p does not select as far as its
// namespace's known labels say, may be p's subject all the same: its
// namespace is quarantined (its true labels are not known) and p's
// namespace selector reads them. Such a pod is judged by p's Deny rules
// alone: left out, it would escape them; judged by its Accept or Pass
// rules, it could be let through or past the Admin tier's later Denies.
//
// A quarantined pod, whose own labels are not known, may be the subject
// of any policy whose namespace selector may select its namespace. On
// the forward hook it is isolated with nothing allowed anyway; the Deny
// rules matter for its connections to its own node (node.go), which
// NetworkPolicy would allow.
func (c *Compiler) mayBeSubject(p *clusterPolicyState, pd *pod) bool {
	if p.subjectNS == nil {
		return false
	}
	ns := c.namespaceView(pd.key.namespace)
	if pd.quarantined {
		return ns.mayBeSelectedBy(p.subjectNS, pd.key.namespace)
	}
	return c.quarantinedNS[pd.key.namespace] && pd.matchedBy(p.subjectPods) && ns.mayBeSelectedBy(p.subjectNS, pd.key.namespace)
}

// refreshCluster re-selects the subjects of every ClusterNetworkPolicy
// among this node's pods when a policy, a pod of this node or a namespace
// changed, and brings the tier chains and the policies' sets in step.
func (c *Compiler) refreshCluster(ch *changes) {
	if ch.cluster || ch.localPods || len(ch.namespaces) > 0 {
		c.reselectCluster(ch)
	}
	// Then the layouts: of each new group, and of each whose peer sets
	// changed (a pod came or went anywhere in the cluster).
	for _, g := range c.groups {
		if g.gen == 0 || g.reads(c.changedPeers) {
			c.layoutGroup(g)
		}
	}
	// A pair follows its groups. One whose groups went is dropped: its
	// pods' tiers changed, so their chains are rebuilt in this compile
	// and take another.
	for _, p := range c.pairs {
		switch gone, relaid := c.pairStale(p); {
		case gone:
			c.dropPair(p)
		case relaid:
			c.layoutPair(p)
		}
	}
	clear(c.changedPeers)
}

// reselectCluster is refreshCluster's re-selection: the groups each pod
// of this node is judged by, and the sets of the policies now in use.
func (c *Compiler) reselectCluster(ch *changes) {
	ordered := slices.SortedFunc(maps.Values(c.cluster), clusterOrder)
	want := map[string]*clusterGroup{}
	tiers := map[podChainKey]podTiers{}
	active := map[*clusterPolicyState]bool{}
	var selecting []*clusterPolicyState
	for _, ns := range slices.Sorted(maps.Keys(c.localByNS)) {
		for _, pd := range c.localByNS[ns] {
			selecting = selecting[:0]
			for _, p := range ordered {
				switch {
				case c.subjects(p, pd):
					selecting = append(selecting, p)
				case c.mayBeSubject(p, pd):
					selecting = append(selecting, p.denyOnly)
				}
			}
			for _, d := range directions {
				var t podTiers
				for _, tier := range []string{tierAdmin, tierBaseline} {
					var members []*clusterPolicyState
					for _, p := range selecting {
						if p.tier == tier && p.hasRules(d) {
							members = append(members, p)
							active[cmp.Or(p.origin, p)] = true
						}
					}
					if len(members) == 0 {
						continue
					}
					g := c.clusterGroupFor(want, tier, d, members)
					if tier == tierAdmin {
						t.admin = g
					} else {
						t.baseline = g
					}
				}
				if t.admin != nil || t.baseline != nil {
					tiers[podChainKey{pd.key, d.name}] = t
				}
			}
		}
	}
	// Sets first, so that a group's chain never names a set that is not
	// in the table.
	for _, p := range ordered {
		switch {
		case active[p] && !p.active:
			c.activateCluster(p)
		case !active[p] && p.active:
			c.deactivateCluster(p)
		}
	}
	// A group that goes takes its chains and maps with it; one that
	// comes is laid out by refreshCluster, after (the same key may come
	// back with other members, and its chains under the same names).
	for key, g := range c.groups {
		if want[key] != g {
			c.dropGroup(g)
			if want[key] == nil {
				c.chainNames.release(key)
			}
		}
	}
	c.groups = want
	for k, t := range tiers {
		if c.podTiers[k] != t {
			ch.podChainNS[k.pod.namespace] = true
		}
	}
	for k := range c.podTiers {
		if _, ok := tiers[k]; !ok {
			ch.podChainNS[k.pod.namespace] = true
		}
	}
	c.podTiers = tiers
}

// clusterGroupFor returns the group of tier and d for members, reusing
// the previous call's when its members are the same states. A new group
// is not laid out yet (refreshCluster does, once the sets it reads are
// in use).
func (c *Compiler) clusterGroupFor(want map[string]*clusterGroup, tier string, d direction, members []*clusterPolicyState) *clusterGroup {
	names := make([]string, len(members))
	for i, m := range members {
		names[i] = m.groupName()
	}
	key := tier + "-" + d.name + "\x00" + strings.Join(names, "\x00")
	if g := want[key]; g != nil {
		return g
	}
	if g := c.groups[key]; g != nil && slices.Equal(g.members, members) {
		want[key] = g
		return g
	}
	if c.groups[key] == nil {
		c.chainNames.acquire(key, func(hash string) string { return tier + "-" + d.name + "-" + hash })
	}
	n := len(families)
	g := &clusterGroup{key: key, tier: tier, dir: d, members: members,
		rules: make([][]tierRule, n), chains: make([]*nft.Chain, n), maps: make([]*nft.Set, n),
		classes: map[string]*nft.Chain{}, refs: map[string][]ClusterRuleRef{}, classBySig: make([]map[string]string, n)}
	base := c.chainNames.name(key)
	for i, f := range families {
		for _, m := range members {
			for _, r := range m.rules[d.name] {
				if r.family == 0 || r.family == f {
					g.rules[i] = append(g.rules[i], r)
					g.accepts = g.accepts || r.ref.Action == string(policyv1beta1.ClusterNetworkPolicyRuleActionAccept)
				}
			}
		}
		if len(g.rules[i]) == 0 {
			continue
		}
		// Whether a family has a chain follows from the rules alone, so
		// that the pod chains entering it stay put while peers change.
		name := base + "-" + familySuffix(f)
		g.chains[i] = &nft.Chain{Name: name, Rules: []nft.Rule{{
			Exprs:   []nft.Expr{nft.AddrVmap{Family: f, Field: d.peerField, Map: name + "-classes"}},
			Comment: truncateComment(fmt.Sprintf("%s tier, %s, for the pods selected by %s: the rules the peer may match", tier, d.name, strings.Join(names, ", "))),
		}}}
	}
	want[key] = g
	return g
}

// layoutGroup (re)builds the class maps and chains of g from the peer
// sets as they are now, and puts what changed in the table.
//
// A class is the list of rules whose peer may hold an address: the
// addresses of a family are cut where some rule's peer range starts or
// ends, and each piece is mapped to the chain of its class, which holds
// those rules (without their peer match) in order. A piece no rule's
// peer holds has no element: the lookup misses and the tier decides
// nothing. The map is an address interval map (the kernel's rbtree set):
// unlike a concatenation's pipapo set, its lookup takes no vector unit,
// whose state the first lookup of a packet would save and restore.
func (c *Compiler) layoutGroup(g *clusterGroup) {
	old := g.classes
	g.classes, g.refs = map[string]*nft.Chain{}, map[string][]ClusterRuleRef{}
	for i, f := range families {
		entry := g.chains[i]
		g.classBySig[i] = map[string]string{}
		if entry == nil {
			continue
		}
		rules := g.rules[i]
		pieces := c.classPieces(rules, f)
		names := c.classNames(entry.Name, pieces)
		elems := make([]nft.Element, len(pieces))
		for j, p := range pieces {
			name := names[p.sig]
			if g.classes[name] == nil {
				g.classes[name], g.refs[name] = classChain(name, rules, p.rules)
				g.classBySig[i][p.sig] = name
			}
			elems[j] = p.element(name)
		}
		g.maps[i] = classMap(entry.Name, f, g.tier, elems)
		c.putSet(g.maps[i])
	}
	c.putLayout(g, old)
}

// putLayout puts a (re)laid out group's chains in the table: the entry
// chains the first time, the class chains that are new or changed, and
// drops those of old it no longer has. It counts the layout (gen).
func (c *Compiler) putLayout(g *clusterGroup, old map[string]*nft.Chain) {
	first := g.gen == 0
	for name := range old {
		if g.classes[name] == nil {
			c.dropChain(name)
		}
	}
	for name, ch := range g.classes {
		// A name stays with its class unless short hashes collide, when
		// the numbering may give it another.
		if prev := old[name]; prev == nil || first || !slices.EqualFunc(prev.Rules, ch.Rules, nft.Rule.Equal) {
			c.putChain(clusterSortKey(g)+name, ch)
		}
	}
	if first {
		for _, ch := range g.chains {
			if ch != nil {
				c.putChain(clusterSortKey(g)+ch.Name, ch)
			}
		}
	}
	g.gen++
}

// classMap is the class map of an entry chain.
func classMap(entry string, f nft.IPFamily, tier string, elems []nft.Element) *nft.Set {
	return &nft.Set{
		Name:     entry + "-classes",
		Comment:  truncateComment(fmt.Sprintf("%s peer address -> the chain of the %s rules its peer may match", familyName(f), tier)),
		Key:      addrKey(f),
		Interval: true,
		Verdict:  true,
		Elements: elems,
	}
}

// A classPiece is a range of peer addresses that the same rules' peers
// hold, and no other's: rules are their indices, in order, and sig spells
// them ("0,3,").
type classPiece struct {
	first, last netip.Addr
	rules       []int
	sig         string
}

// appendSig spells one more rule index of a class.
func appendSig(sig []byte, k int) []byte {
	return append(strconv.AppendInt(sig, int64(k), 10), ',')
}

// sigOf spells a class of rule indices, each less offset.
func sigOf(rules []int, offset int) string {
	var sig []byte
	for _, k := range rules {
		sig = appendSig(sig, k-offset)
	}
	return string(sig)
}

func (p classPiece) element(chain string) nft.Element {
	e := nft.Element{Addr: p.first, Verdict: nft.Verdict{Kind: nft.Goto, Chain: chain}}
	if p.last != p.first {
		e.Last = p.last
	}
	return e
}

// classPieces cuts the addresses of family f where some rule's peer range
// starts or ends, and returns the pieces some rule's peer holds, in
// address order, touching pieces of one class merged.
func (c *Compiler) classPieces(rules []tierRule, f nft.IPFamily) []classPiece {
	type bound struct {
		at   netip.Addr
		rule int
		open bool
	}
	var bounds []bound
	for k, r := range rules {
		for _, rg := range c.peerRanges(r.peer, f) {
			bounds = append(bounds, bound{rg.From(), k, true})
			if next := rg.To().Next(); next.IsValid() {
				bounds = append(bounds, bound{next, k, false})
			}
		}
	}
	// At one address, what ends ends before what starts: a peer's
	// ranges may touch.
	slices.SortFunc(bounds, func(a, b bound) int {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(boolInt(a.open), boolInt(b.open)))
	})
	var pieces []classPiece
	active := make([]bool, len(rules))
	var sig []byte
	for j := 0; j < len(bounds); {
		at := bounds[j].at
		for ; j < len(bounds) && bounds[j].at == at; j++ {
			active[bounds[j].rule] = bounds[j].open
		}
		last := lastAddr(f)
		if j < len(bounds) {
			last = bounds[j].at.Prev()
		}
		sig = sig[:0]
		for k, on := range active {
			if on {
				sig = appendSig(sig, k)
			}
		}
		if len(sig) == 0 {
			continue
		}
		if n := len(pieces); n > 0 && pieces[n-1].sig == string(sig) && pieces[n-1].last.Next() == at {
			pieces[n-1].last = last
			continue
		}
		var idx []int
		for k, on := range active {
			if on {
				idx = append(idx, k)
			}
		}
		pieces = append(pieces, classPiece{at, last, idx, string(sig)})
	}
	return pieces
}

// classChain is the chain of one class: the rules it lists, in order,
// each with its own comment (policy, direction, index, action, name).
func classChain(name string, rules []tierRule, class []int) (*nft.Chain, []ClusterRuleRef) {
	ch := &nft.Chain{Name: name}
	refs := make([]ClusterRuleRef, len(class))
	for j, k := range class {
		ch.Rules = append(ch.Rules, rules[k].rule)
		refs[j] = rules[k].ref
	}
	return ch, refs
}

// classNames names the class chains of one entry chain: the entry's name
// and a hash of the class, so that a class keeps its chain however the
// others change, and the name follows from the classes alone (a fresh
// compile names them as the running one did). Classes whose short hashes
// collide are numbered in their sorted order, which keeps every name
// unique.
func (c *Compiler) classNames(entry string, pieces []classPiece) map[string]string {
	byHash := map[string][]string{}
	seen := map[string]bool{}
	for _, p := range pieces {
		k := p.sig
		if seen[k] {
			continue
		}
		seen[k] = true
		sum := c.chainNames.sum(k)
		h := hex.EncodeToString(sum[:4])
		byHash[h] = append(byHash[h], k)
	}
	out := make(map[string]string, len(seen))
	for h, ks := range byHash {
		if len(ks) == 1 {
			out[ks[0]] = entry + "-" + h
			continue
		}
		slices.Sort(ks)
		for i, k := range ks {
			out[k] = fmt.Sprintf("%s-%s-%d", entry, h, i)
		}
	}
	return out
}

// dropGroup takes g's chains and maps out of the table.
func (c *Compiler) dropGroup(g *clusterGroup) {
	for i, ch := range g.chains {
		if ch != nil && g.gen > 0 {
			c.dropChain(ch.Name)
			c.dropSet(g.maps[i].Name)
		}
	}
	for name := range g.classes {
		c.dropChain(name)
	}
}

// peerRanges are the address ranges of family f that a rule's peer holds:
// every address for "" (any), else its peer sets' ranges.
func (c *Compiler) peerRanges(key string, f nft.IPFamily) []netipx.IPRange {
	if key == "" {
		return []netipx.IPRange{netipx.IPRangeFrom(firstAddr(f), lastAddr(f))}
	}
	e, ok := c.peers.get(key)
	if !ok || e.sets[f] == nil {
		return nil
	}
	out := make([]netipx.IPRange, len(e.sets[f].Elements))
	for i, el := range e.sets[f].Elements {
		out[i] = netipx.IPRangeFrom(el.Addr, lastOf(el))
	}
	return out
}

func firstAddr(f nft.IPFamily) netip.Addr {
	if f == nft.IPv6 {
		return netip.IPv6Unspecified()
	}
	return netip.IPv4Unspecified()
}

func lastAddr(f nft.IPFamily) netip.Addr {
	if f == nft.IPv6 {
		return netip.AddrFrom16([16]byte{0: 0xff, 1: 0xff, 2: 0xff, 3: 0xff, 4: 0xff, 5: 0xff, 6: 0xff, 7: 0xff, 8: 0xff, 9: 0xff, 10: 0xff, 11: 0xff, 12: 0xff, 13: 0xff, 14: 0xff, 15: 0xff})
	}
	return netip.AddrFrom4([4]byte{0xff, 0xff, 0xff, 0xff})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// clusterSortKey orders tier chains after the policy chains and before
// the pod chains (see chainSortKey).
func clusterSortKey(g *clusterGroup) string { return "1\x01" + g.key }

func (c *Compiler) activateCluster(p *clusterPolicyState) {
	p.active = true
	for _, u := range p.peerUses {
		c.acquirePeers(u.key, u.parsed)
	}
	for _, u := range p.portUses {
		if u.ingress { // egress ones follow the policy (syncClusterPolicies)
			c.acquirePortSets(u)
		}
	}
	c.addNamedParts(p.namedPeers)
}

func (c *Compiler) deactivateCluster(p *clusterPolicyState) {
	p.active = false
	c.removeNamedParts(p.namedPeers)
	for _, u := range p.peerUses {
		c.releasePeers(u.key)
	}
	for _, u := range p.portUses {
		if u.ingress {
			c.releasePortSets(u)
		}
	}
}

// clusterProblems lists the problems of ClusterNetworkPolicies by name:
// what makes one select nothing always, the rest while it applies here.
func (c *Compiler) clusterProblems() []Problem {
	var out []Problem
	for _, name := range slices.Sorted(maps.Keys(c.cluster)) {
		p := c.cluster[name]
		out = append(out, p.selProblems...)
		if p.active {
			out = append(out, p.problems...)
		}
	}
	return out
}

// A nodeView is what node peers read of a Node: its labels and the
// addresses of its status.
type nodeView struct {
	labels labels.Set
	addrs  []netip.Addr
}

// syncNodes follows the Nodes for node peers, noting a change in what
// they read.
func (c *Compiler) syncNodes(nodes []*corev1.Node, ch *changes) {
	key := func(n *corev1.Node) objKey { return objKey{name: n.Name} }
	c.nodeList = walkChanges(c.nodeList, nodes, key, func(k objKey, _, n *corev1.Node) {
		old, had := c.nodes[k.name]
		if n == nil {
			if had {
				delete(c.nodes, k.name)
				ch.nodes = true
			}
			return
		}
		v := nodeView{labels: labels.Set(n.Labels)}
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && !slices.Contains(v.addrs, ip.Unmap()) {
				v.addrs = append(v.addrs, ip.Unmap())
			}
		}
		slices.SortFunc(v.addrs, netip.Addr.Compare)
		if had && maps.Equal(old.labels, v.labels) && slices.Equal(old.addrs, v.addrs) {
			return
		}
		c.nodes[k.name] = v
		ch.nodes = true
	})
}

// nodeAddrs are the addresses of the nodes sel selects.
func (c *Compiler) nodeAddrs(sel labels.Selector) []netip.Addr {
	var out []netip.Addr
	for _, name := range slices.Sorted(maps.Keys(c.nodes)) {
		if v := c.nodes[name]; sel.Matches(v.labels) {
			out = append(out, v.addrs...)
		}
	}
	return out
}

// A pair lays out the Admin and the Baseline tier of one direction
// together, for the pods no NetworkPolicy isolates (and that are not
// quarantined): for them the two tiers are all there is, and one lookup
// of the peer address can serve both. It is a clusterGroup whose tier is
// "admin+baseline" and whose members are those of its two groups; its
// chains are its own, its rules theirs:
//
//   - a piece of addresses that only Baseline rules' peers hold goes to
//     the baseline group's class chain;
//   - one that Admin rules' peers hold goes to a chain of those rules,
//     then `goto` the baseline group's class chain of the piece, if it
//     has one. An Admin Pass goes there too, skipping the Admin rules
//     left; an Admin Accept returns, skipping Baseline: with no stage
//     after it, it needs no allow bit, and the pod chain no check of it.
//
// A pair is shared by the pods with the same two groups; it is laid out
// when its first pod chain takes it and again whenever either group is.
type pair struct {
	*clusterGroup
	admin, baseline *clusterGroup // baseline may be nil
	built           [2]int        // the groups' gen it was laid out from
	users           int
}

func pairKey(admin, baseline *clusterGroup) string {
	k := "pair\x00" + admin.key
	if baseline != nil {
		k += "\x00\x00" + baseline.key
	}
	return k
}

// acquirePair returns the pair of t's two groups, laid out, and counts one
// more pod chain using it.
func (c *Compiler) acquirePair(t podTiers) *pair {
	key := pairKey(t.admin, t.baseline)
	if p := c.pairs[key]; p != nil {
		p.users++
		return p
	}
	d := t.admin.dir
	c.chainNames.acquire(key, func(hash string) string { return "tiers-" + d.name + "-" + hash })
	n := len(families)
	g := &clusterGroup{key: key, tier: "admin+baseline", dir: d, members: slices.Clone(t.admin.members),
		chains: make([]*nft.Chain, n), maps: make([]*nft.Set, n), classes: map[string]*nft.Chain{}, refs: map[string][]ClusterRuleRef{},
		classBySig: make([]map[string]string, n)}
	if t.baseline != nil {
		g.members = append(g.members, t.baseline.members...)
	}
	base := c.chainNames.name(key)
	for i, f := range families {
		if t.admin.chains[i] == nil && (t.baseline == nil || t.baseline.chains[i] == nil) {
			continue
		}
		name := base + "-" + familySuffix(f)
		g.chains[i] = &nft.Chain{Name: name, Rules: []nft.Rule{{
			Exprs:   []nft.Expr{nft.AddrVmap{Family: f, Field: d.peerField, Map: name + "-classes"}},
			Comment: truncateComment(fmt.Sprintf("admin and baseline tiers, %s, for the pods no NetworkPolicy isolates selected by %s", d.name, strings.Join(memberNames(g.members), ", "))),
		}}}
	}
	p := &pair{clusterGroup: g, admin: t.admin, baseline: t.baseline, users: 1}
	c.pairs[key] = p
	c.layoutPair(p)
	return p
}

// releasePair counts one pod chain fewer using p; the last takes it out.
func (c *Compiler) releasePair(p *pair) {
	if p.users--; p.users > 0 || c.pairs[p.key] != p {
		return
	}
	c.dropPair(p)
}

func (c *Compiler) dropPair(p *pair) {
	c.dropGroup(p.clusterGroup)
	delete(c.pairs, p.key)
	c.chainNames.release(p.key)
}

// layoutPair (re)builds p's class maps and chains from its groups' rules
// and class chains as they are now.
func (c *Compiler) layoutPair(p *pair) {
	g := p.clusterGroup
	old := g.classes
	g.classes, g.refs = map[string]*nft.Chain{}, map[string][]ClusterRuleRef{}
	for i, f := range families {
		entry := g.chains[i]
		if entry == nil {
			continue
		}
		admin := p.admin.rules[i]
		var baseline []tierRule
		if p.baseline != nil {
			baseline = p.baseline.rules[i]
		}
		pieces := c.classPieces(append(slices.Clip(admin), baseline...), f)
		// A piece's Admin rules are its first indices (up to cuts[j]); the
		// rest, less len(admin), are its Baseline class, whose chain is
		// next[j] ("" for none).
		var own []classPiece
		cuts := make([]int, len(pieces))
		next := make([]string, len(pieces))
		for j, pc := range pieces {
			cuts[j], _ = slices.BinarySearch(pc.rules, len(admin))
			if cuts[j] < len(pc.rules) {
				next[j] = p.baseline.classBySig[i][sigOf(pc.rules[cuts[j]:], len(admin))]
			}
			if cuts[j] > 0 {
				own = append(own, pc)
			}
		}
		names := c.classNames(entry.Name, own)
		elems := make([]nft.Element, len(pieces))
		for j, pc := range pieces {
			cut := cuts[j]
			if cut == 0 {
				elems[j] = pc.element(next[j])
				continue
			}
			name := names[pc.sig]
			if g.classes[name] == nil {
				ch, refs := classChain(name, admin, pc.rules[:cut])
				for k, r := range ch.Rules {
					ch.Rules[k] = pairRule(r, refs[k].Action, next[j])
				}
				if next[j] != "" {
					ch.Rules = append(ch.Rules, nft.Rule{Exprs: []nft.Expr{nft.Verdict{Kind: nft.Goto, Chain: next[j]}}, Comment: "no admin rule decided: the baseline tier"})
				}
				g.classes[name], g.refs[name] = ch, refs
			}
			elems[j] = pc.element(name)
		}
		g.maps[i] = classMap(entry.Name, f, g.tier, elems)
		c.putSet(g.maps[i])
	}
	c.putLayout(g, old)
	p.built = [2]int{p.admin.gen, 0}
	if p.baseline != nil {
		p.built[1] = p.baseline.gen
	}
}

// pairRule is an Admin rule as a pair's class chain holds it: an Accept
// returns without our bit, a Pass goes on to the baseline class chain
// (next; it returns when there is none).
func pairRule(r nft.Rule, action, next string) nft.Rule {
	var exprs []nft.Expr
	for _, e := range r.Exprs {
		switch e := e.(type) {
		case nft.SetMark:
			continue
		case nft.Verdict:
			if action == string(policyv1beta1.ClusterNetworkPolicyRuleActionPass) && next != "" {
				exprs = append(exprs, nft.Verdict{Kind: nft.Goto, Chain: next})
				continue
			}
			exprs = append(exprs, e)
		default:
			exprs = append(exprs, e)
		}
	}
	r.Exprs = exprs
	return r
}

// pairStale reports whether p's groups are no longer the ones in use
// (gone), or were laid out again since p was (relaid).
func (c *Compiler) pairStale(p *pair) (gone, relaid bool) {
	if c.groups[p.admin.key] != p.admin || (p.baseline != nil && c.groups[p.baseline.key] != p.baseline) {
		return true, false
	}
	relaid = p.built[0] != p.admin.gen || (p.baseline != nil && p.built[1] != p.baseline.gen)
	return false, relaid
}

func memberNames(members []*clusterPolicyState) []string {
	out := make([]string, len(members))
	for i, m := range members {
		out[i] = m.groupName()
	}
	return out
}
