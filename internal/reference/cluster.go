package reference

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	policyv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// A Tier is where a direction's check of a connection ended.
type Tier string

const (
	// TierAdmin: an Accept or Deny rule of an Admin ClusterNetworkPolicy.
	TierAdmin Tier = "Admin"
	// TierNetworkPolicy: NetworkPolicies isolate the pod for the direction
	// and decide (Accept when a rule allows, Deny when none does).
	TierNetworkPolicy Tier = "NetworkPolicy"
	// TierBaseline: an Accept or Deny rule of a Baseline
	// ClusterNetworkPolicy.
	TierBaseline Tier = "Baseline"
	// TierDefault: nothing decided; Kubernetes allows.
	TierDefault Tier = "Default"
	// TierQuarantine: the pod is quarantined (k8s.Snapshot.Quarantined):
	// nothing is allowed, whatever any policy says.
	TierQuarantine Tier = "Quarantine"
	// TierSelf: the pod reaches itself through a Service (Conn.DNAT), which
	// no policy of either kind judges.
	TierSelf Tier = "Self"
)

// An Action is what a check does with a connection. Accept and Deny end
// it; Pass (of a ClusterNetworkPolicy rule) skips the rest of its tier.
type Action string

const (
	Accept Action = "Accept"
	Deny   Action = "Deny"
	Pass   Action = "Pass"
)

// A Step names one ClusterNetworkPolicy rule: the policy, the direction
// and the rule's index in its ingress or egress list.
type Step struct {
	Tier   Tier // TierAdmin or TierBaseline
	Policy string
	Dir    string // "ingress" or "egress"
	Rule   int
}

func (s Step) String() string { return fmt.Sprintf("%s %s %s[%d]", s.Tier, s.Policy, s.Dir, s.Rule) }

// A Decision is one direction's check of a connection at a pod of this
// node, from ClusterNetworkPolicy's Admin tier through NetworkPolicy and
// the Baseline tier to the default, as the API orders them.
type Decision struct {
	Dir    string // "ingress" or "egress"
	Tier   Tier   // where the check ended
	Action Action // Accept or Deny: the outcome

	// Policy and Rule name the deciding rule in TierAdmin and
	// TierBaseline: the ClusterNetworkPolicy's name and the index of the
	// rule in its ingress or egress list. Rule is -1 in other tiers.
	Policy string
	Rule   int

	// Passed are the Pass rules that sent the check past their tier, in
	// the order met: at most one of the Admin tier, then at most one of
	// the Baseline tier.
	Passed []Step

	// NetworkPolicy is the NetworkPolicy tier's judgement (as Explain's)
	// when the check reached it and a NetworkPolicy isolates the pod for
	// the direction (Tier is then TierNetworkPolicy), else nil.
	NetworkPolicy *Judgement
}

// Allowed reports whether the check lets the connection through; a nil
// Decision (no check of this node) does.
func (d *Decision) Allowed() bool { return d == nil || d.Action == Accept }

func (d *Decision) String() string {
	if d == nil {
		return "not checked here"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %s", d.Dir, d.Action, d.Tier)
	if d.Rule >= 0 {
		fmt.Fprintf(&b, " %s %s[%d]", d.Policy, d.Dir, d.Rule)
	}
	if d.NetworkPolicy != nil {
		fmt.Fprintf(&b, " isolated by %v, allowed by %v", d.NetworkPolicy.Isolating, d.NetworkPolicy.Allowing)
	}
	for _, p := range d.Passed {
		fmt.Fprintf(&b, " (passed by %s)", p)
	}
	return b.String()
}

// Decide is Allowed in detail: the egress check of the source and the
// ingress check of the destination, each nil when that end is no pod of
// this node taking part (its own node checks it, or nobody). For a pod of
// this node, per direction:
//
//   - a quarantined pod (k8s.Snapshot.Quarantined) is denied (TierQuarantine);
//   - the Admin tier: the Admin ClusterNetworkPolicies whose subject selects
//     the pod and that have rules in the direction, by priority (lower
//     first), ties by name (the API leaves ties to the implementation; ours
//     is deterministic), their rules in the order written. The first rule
//     whose peers and protocols match decides: Accept allows this
//     direction (an egress Accept leaves the destination's ingress check
//     to run), Deny drops, Pass skips the rest of the tier;
//   - NetworkPolicy: if any isolates the pod for the direction, it decides
//     (a rule allows, or the connection is dropped) and nothing else does;
//   - the Baseline tier, as the Admin tier;
//   - the default: allowed.
//
// A pod reaching itself through a Service (Conn.DNAT) is judged by no
// policy: each end of this node gets TierSelf, Accept. The hairpin is
// exempt as NetworkPolicy has it here; the API overview prefers, but does
// not require, that ClusterNetworkPolicy judge it.
func (r Evaluator) Decide(c Conn) (egress, ingress *Decision) {
	src, dst := r.podAt(c.Src), r.podAt(c.Dst)
	local := func(p *k8s.Pod) bool { return p != nil && p.Spec.NodeName == r.node }
	if src != nil && src == dst && c.DNAT {
		self := func(dir string) *Decision { return &Decision{Dir: dir, Tier: TierSelf, Action: Accept, Rule: -1} }
		if local(src) {
			egress, ingress = self("egress"), self("ingress")
		}
		return egress, ingress
	}
	if local(src) {
		egress = r.decide(c, src, src, dst, "egress")
	}
	if local(dst) {
		ingress = r.decide(c, dst, src, dst, "ingress")
	}
	return egress, ingress
}

// decide runs one direction's check for pod, src and dst being the pods
// at the connection's ends (nil for none).
func (r Evaluator) decide(c Conn, pod, src, dst *k8s.Pod, dir string) *Decision {
	d := &Decision{Dir: dir, Rule: -1}
	if r.isQuarantined(pod) {
		d.Tier, d.Action = TierQuarantine, Deny
		return d
	}
	// The remote end: the peer the rules' from or to lists are held to.
	remote, remotePod := c.Dst, dst
	if dir == "ingress" {
		remote, remotePod = c.Src, src
	}
	tier := func(t policyv1beta1.Tier) bool {
		step, action, ok := r.clusterTier(t, pod, dir, c, remote, remotePod, dst)
		if !ok {
			return false
		}
		if action == Pass {
			d.Passed = append(d.Passed, step)
			return false
		}
		d.Tier, d.Action, d.Policy, d.Rule = step.Tier, action, step.Policy, step.Rule
		return true
	}
	if tier(policyv1beta1.AdminTier) {
		return d
	}

	t := networkingv1.PolicyTypeEgress
	if dir == "ingress" {
		t = networkingv1.PolicyTypeIngress
	}
	if pols := r.isolating(pod, t); len(pols) > 0 {
		var j *Judgement
		if dir == "ingress" {
			_, j = r.Explain(c)
		} else {
			j, _ = r.Explain(c)
		}
		d.Tier, d.NetworkPolicy, d.Action = TierNetworkPolicy, j, Deny
		if len(j.Allowing) > 0 {
			d.Action = Accept
		}
		return d
	}

	if tier(policyv1beta1.BaselineTier) {
		return d
	}
	d.Tier, d.Action = TierDefault, Accept
	return d
}

// clusterTier evaluates one tier of ClusterNetworkPolicies for pod in
// direction dir: the first rule that matches, with its action; ok is
// false when none does.
func (r Evaluator) clusterTier(t policyv1beta1.Tier, pod *k8s.Pod, dir string, c Conn, remote netip.Addr, remotePod, dst *k8s.Pod) (step Step, action Action, ok bool) {
	var pols []*policyv1beta1.ClusterNetworkPolicy
	denyOnly := map[*policyv1beta1.ClusterNetworkPolicy]bool{}
	for _, cnp := range r.snap.ClusterPolicies {
		if cnp.Spec.Tier != t {
			continue
		}
		if !r.subjectSelects(&cnp.Spec.Subject, pod) {
			if !r.subjectMaySelect(&cnp.Spec.Subject, pod) {
				continue
			}
			denyOnly[cnp] = true
		}
		if (dir == "ingress" && len(cnp.Spec.Ingress) == 0) || (dir == "egress" && len(cnp.Spec.Egress) == 0) {
			continue // "CNPs with no ingress rules do not affect ingress traffic"
		}
		pols = append(pols, cnp)
	}
	slices.SortStableFunc(pols, func(a, b *policyv1beta1.ClusterNetworkPolicy) int {
		return cmp.Or(cmp.Compare(a.Spec.Priority, b.Spec.Priority), cmp.Compare(a.Name, b.Name))
	})
	tierName := TierAdmin
	if t == policyv1beta1.BaselineTier {
		tierName = TierBaseline
	}
	for _, cnp := range pols {
		if dir == "ingress" {
			for i, rule := range cnp.Spec.Ingress {
				peers := make([]policyv1beta1.ClusterNetworkPolicyEgressPeer, len(rule.From))
				for k, p := range rule.From {
					peers[k] = policyv1beta1.ClusterNetworkPolicyEgressPeer{Namespaces: p.Namespaces, Pods: p.Pods}
				}
				if failsWhole(rule.Action, peers, rule.Protocols) {
					return Step{Tier: tierName, Policy: cnp.Name, Dir: dir, Rule: i}, Deny, true
				}
				if denyOnly[cnp] && ruleAction(rule.Action) != Deny {
					continue
				}
				if r.clusterRuleMatches(rule.Action, peers, rule.Protocols, c, remote, remotePod, dst) {
					return Step{Tier: tierName, Policy: cnp.Name, Dir: dir, Rule: i}, ruleAction(rule.Action), true
				}
			}
			continue
		}
		for i, rule := range cnp.Spec.Egress {
			if failsWhole(rule.Action, rule.To, rule.Protocols) {
				return Step{Tier: tierName, Policy: cnp.Name, Dir: dir, Rule: i}, Deny, true
			}
			if denyOnly[cnp] && ruleAction(rule.Action) != Deny {
				continue
			}
			if r.clusterRuleMatches(rule.Action, rule.To, rule.Protocols, c, remote, remotePod, dst) {
				return Step{Tier: tierName, Policy: cnp.Name, Dir: dir, Rule: i}, ruleAction(rule.Action), true
			}
		}
	}
	return Step{}, "", false
}

// ruleAction is a rule's action; one this reference does not know (an
// enum value of a newer CRD) fails closed, as Deny.
func ruleAction(a policyv1beta1.ClusterNetworkPolicyRuleAction) Action {
	switch a {
	case policyv1beta1.ClusterNetworkPolicyRuleActionAccept:
		return Accept
	case policyv1beta1.ClusterNetworkPolicyRuleActionPass:
		return Pass
	}
	return Deny
}

// A Deny or Pass rule with a part this reference cannot read (a peer or
// protocols entry with no field set, a field of a newer CRD) is, as the
// API's doc comment says, treated "as a 'Deny all' rule": the whole rule
// denies everything, whatever its other peers and protocols, a Pass rule
// too; a domainNames peer, which is not enforced, makes a Deny or Pass
// rule so as well. (Reading it as "only that part matches everything"
// would let a Pass rule pass all, skipping a lower Admin Deny: open.)

// failsWhole reports whether a rule is such a Deny all rule.
func failsWhole(action policyv1beta1.ClusterNetworkPolicyRuleAction, peers []policyv1beta1.ClusterNetworkPolicyEgressPeer,
	protocols []policyv1beta1.ClusterNetworkPolicyProtocol) bool {
	if !failClosed(action) || len(peers) == 0 {
		return false // an empty from/to list matches nothing, read as it may be
	}
	for _, p := range peers {
		if p.DomainNames != nil || (p.Namespaces == nil && p.Pods == nil && p.Nodes == nil && len(p.Networks) == 0) {
			return true
		}
	}
	return slices.ContainsFunc(protocols, func(p policyv1beta1.ClusterNetworkPolicyProtocol) bool {
		return p.TCP == nil && p.UDP == nil && p.SCTP == nil && p.DestinationNamedPort == ""
	})
}

// failClosed is what a part of a rule that this reference cannot read
// (a peer or protocol entry with no field set: a field of a newer CRD)
// matches: "For "Accept" rules, "fail closed" means: "treat the rule as
// matching no traffic". For "Deny" and "Pass" rules, "fail closed" means:
// "treat the rule as a 'Deny all' rule"." The part matches nothing in an
// Accept rule and everything in a Deny or Pass rule (a Pass rule then
// passes all that the rest of it matches).
func failClosed(a policyv1beta1.ClusterNetworkPolicyRuleAction) bool {
	return ruleAction(a) != Accept
}

// clusterRuleMatches: "If any element matches the [remote end] then the
// specified action is applied", and the protocols match. The from/to list
// "must be defined and contain at least one item": an empty one matches
// nothing.
func (r Evaluator) clusterRuleMatches(action policyv1beta1.ClusterNetworkPolicyRuleAction, peers []policyv1beta1.ClusterNetworkPolicyEgressPeer,
	protocols []policyv1beta1.ClusterNetworkPolicyProtocol, c Conn, remote netip.Addr, remotePod, dst *k8s.Pod) bool {
	if !slices.ContainsFunc(peers, func(p policyv1beta1.ClusterNetworkPolicyEgressPeer) bool {
		return r.clusterPeerMatches(action, p, remote, remotePod)
	}) {
		return false
	}
	if len(protocols) == 0 {
		return true // "If unspecified, protocol-specific attributes will not be used to match traffic."
	}
	return slices.ContainsFunc(protocols, func(p policyv1beta1.ClusterNetworkPolicyProtocol) bool {
		return protocolMatches(action, p, c, dst)
	})
}

// clusterPeerMatches holds one peer to the remote address (and the pod
// taking part that has it, if any). Exactly one field is set in a valid
// peer; of several, any matches.
func (r Evaluator) clusterPeerMatches(action policyv1beta1.ClusterNetworkPolicyRuleAction, p policyv1beta1.ClusterNetworkPolicyEgressPeer, addr netip.Addr, pod *k8s.Pod) bool {
	if p.Namespaces == nil && p.Pods == nil && p.Nodes == nil && len(p.Networks) == 0 && len(p.DomainNames) == 0 {
		return failClosed(action)
	}
	// "Note that host-networked pods are not included in this type of
	// peer": pods that take no part are not pods here, and no selector
	// names a quarantined pod.
	selectable := pod != nil && !r.isQuarantined(pod)
	nsSelects := r.namespaceSelected
	if ruleAction(action) == Deny {
		nsSelects = r.namespaceMaySelect
	}
	if p.Namespaces != nil && selectable && nsSelects(p.Namespaces, pod.Namespace) {
		return true
	}
	if p.Pods != nil && selectable && nsSelects(&p.Pods.NamespaceSelector, pod.Namespace) &&
		selectorMatches(&p.Pods.PodSelector, pod.Labels) {
		return true
	}
	if p.Nodes != nil && r.nodeAddress(p.Nodes, addr) {
		return true
	}
	for _, n := range p.Networks {
		// "cluster-internal traffic will be checked against the rule as
		// well". The schema demands a masked CIDR; one that does not
		// parse is a newer format: fail closed.
		prefix, err := netip.ParsePrefix(string(n))
		if err != nil {
			if failClosed(action) {
				return true
			}
			continue
		}
		if prefix.Masked().Contains(addr) {
			return true
		}
	}
	// DomainNames are not supported: such a peer matches nothing.
	return false
}

// nodeAddress: "It selects the nodeIPs as the peer type by matching on the
// IPs present in the node.Status.Addresses field of the node", of every
// node the selector selects ("if present but empty, it selects all
// Nodes"): every address there that parses as an IP, whatever its type.
func (r Evaluator) nodeAddress(sel *metav1.LabelSelector, addr netip.Addr) bool {
	for _, n := range r.snap.Nodes {
		if !selectorMatches(sel, n.Labels) {
			continue
		}
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && ip == addr {
				return true
			}
		}
	}
	return false
}

// subjectSelects: "Exactly one field must be set"; "host-networked pods
// are not included in subject selection". namespaces selects every pod
// of the namespaces it selects, pods those its pod selector selects in
// the namespaces its namespace selector selects ("if empty, it selects
// all"). A subject with no field set selects nothing; of several, any
// selects. Quarantined pods are no subject.
func (r Evaluator) subjectSelects(s *policyv1beta1.ClusterNetworkPolicySubject, pod *k8s.Pod) bool {
	if !TakesPart(pod) || r.isQuarantined(pod) {
		return false
	}
	if s.Namespaces != nil && r.namespaceSelected(s.Namespaces, pod.Namespace) {
		return true
	}
	return s.Pods != nil && r.namespaceSelected(&s.Pods.NamespaceSelector, pod.Namespace) &&
		selectorMatches(&s.Pods.PodSelector, pod.Labels)
}

// subjectMaySelect: a pod that subjectSelects does not select, but whose
// namespace is quarantined (its true labels are not known) and would be
// selected if the namespace selector read them so. Such a pod is judged
// by the policy's Deny rules alone: escaping them, or being let through
// or past the tier by its Accept or Pass rules, would both fail open.
func (r Evaluator) subjectMaySelect(s *policyv1beta1.ClusterNetworkPolicySubject, pod *k8s.Pod) bool {
	if !TakesPart(pod) || r.isQuarantined(pod) || !r.quarantinedNS[pod.Namespace] {
		return false
	}
	if s.Namespaces != nil && r.namespaceMaySelect(s.Namespaces, pod.Namespace) {
		return true
	}
	return s.Pods != nil && r.namespaceMaySelect(&s.Pods.NamespaceSelector, pod.Namespace) &&
		selectorMatches(&s.Pods.PodSelector, pod.Labels)
}

// protocolMatches holds one protocols entry to the connection; dst is the
// pod at its destination (the subject for ingress, the peer for egress),
// whose container ports give named ports their meaning.
//
//   - tcp, udp, sctp: that protocol; with destinationPort, the port
//     number or the range start..end inclusive; without, any port ("If
//     destinationPort is omitted, all ports for the specified protocol
//     match");
//   - destinationNamedPort: a container port of dst with that name whose
//     protocol (TCP when unset) and number are the connection's;
//   - no field (a newer CRD's) fails closed; so does a destinationPort
//     with neither number nor range, for its protocol.
func protocolMatches(action policyv1beta1.ClusterNetworkPolicyRuleAction, p policyv1beta1.ClusterNetworkPolicyProtocol, c Conn, dst *k8s.Pod) bool {
	if p.TCP == nil && p.UDP == nil && p.SCTP == nil && p.DestinationNamedPort == "" {
		return failClosed(action)
	}
	if p.TCP != nil && c.Proto == nft.ProtoTCP && portMatchesCluster(action, p.TCP.DestinationPort, c.Port) {
		return true
	}
	if p.UDP != nil && c.Proto == nft.ProtoUDP && portMatchesCluster(action, p.UDP.DestinationPort, c.Port) {
		return true
	}
	if p.SCTP != nil && c.Proto == nft.ProtoSCTP && portMatchesCluster(action, p.SCTP.DestinationPort, c.Port) {
		return true
	}
	if p.DestinationNamedPort != "" && dst != nil {
		for _, cp := range dst.Spec.Ports {
			proto := cp.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP // the API default of a container port
			}
			if cp.Name == p.DestinationNamedPort && refProto(proto) == c.Proto && cp.ContainerPort == int32(c.Port) {
				return true
			}
		}
	}
	return false
}

func portMatchesCluster(action policyv1beta1.ClusterNetworkPolicyRuleAction, p *policyv1beta1.Port, port uint16) bool {
	switch {
	case p == nil:
		return true
	case p.Number == 0 && p.Range == nil:
		return failClosed(action)
	}
	if p.Number != 0 && int32(port) == p.Number {
		return true
	}
	return p.Range != nil && int32(port) >= p.Range.Start && int32(port) <= p.Range.End
}
