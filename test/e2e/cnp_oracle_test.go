package e2e

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	policyv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/nftpolicy/nftpolicy/internal/netns"
	"github.com/nftpolicy/nftpolicy/k8s"
)

// A cnpOracle says what the policies of a conformance scenario allow,
// straight from the API's documented semantics (apis/v1beta1 of
// sigs.k8s.io/network-policy-api v0.3.0), written without looking at the
// enforcer. The upstream conformance tests assert a few cells per step;
// the oracle gives the full matrix, and every step checks that it agrees
// with each upstream assertion before anything is probed, so a wrong
// oracle fails as a case bug, not as a pass.
//
// A connection is allowed when the egress side of its source pod and the
// ingress side of its destination pod both allow it ("Accept ... but any
// ingress rules at the destination do apply"). One side of pod P is
// decided tier by tier:
//
//  1. Admin tier: the ClusterNetworkPolicies of tier Admin whose subject
//     selects P, by ascending priority; within one, its rules of that
//     direction in order. The first rule whose peers and protocols match
//     decides: Accept allows, Deny denies, Pass skips the rest of the tier.
//  2. NetworkPolicy tier: if any NetworkPolicy isolates P for the
//     direction, the connection is allowed exactly when one of their rules
//     allows it; that decision is final.
//  3. Baseline tier: as the Admin tier; Pass ends the tier.
//  4. Otherwise allowed.
//
// Policies of one tier with equal priority are taken in name order; the API
// leaves their order undefined, and the same-priority scenarios use rules
// that never match the same connection.
type cnpOracle struct {
	nsLabels map[string]map[string]string
	pods     []*oraclePod
	nodes    []*oracleNode
	cnps     []*policyv1beta1.ClusterNetworkPolicy
	nps      []*networkingv1.NetworkPolicy
}

type oraclePod struct {
	key, ns string
	labels  map[string]string
	addrs   map[string]netip.Addr // by family
	ports   []netns.ContainerPort
}

type oracleNode struct {
	name   string
	labels map[string]string
	addrs  map[string]netip.Addr
}

// An endpoint is one end of a connection: a pod or a node, and the address
// of the probed family.
type endpoint struct {
	pod  *oraclePod
	node *oracleNode
	addr netip.Addr
}

func (o *cnpOracle) pod(key string) *oraclePod {
	for _, p := range o.pods {
		if p.key == key {
			return p
		}
	}
	panic("oracle: no pod " + key)
}

func (o *cnpOracle) node(name string) *oracleNode {
	for _, n := range o.nodes {
		if n.name == name {
			return n
		}
	}
	panic("oracle: no node " + name)
}

// endpointOf resolves "namespace/pod" or "node:<name>" for family.
func (o *cnpOracle) endpointOf(key, family string) endpoint {
	if name, ok := strings.CutPrefix(key, "node:"); ok {
		n := o.node(name)
		return endpoint{node: n, addr: n.addrs[family]}
	}
	p := o.pod(key)
	return endpoint{pod: p, addr: p.addrs[family]}
}

// allowed reports whether from may open a connection to to over family,
// proto ("tcp", "udp", "sctp") and port.
func (o *cnpOracle) allowed(from, to, family, proto string, port int) bool {
	if from == to {
		return true // a pod always reaches itself
	}
	src, dst := o.endpointOf(from, family), o.endpointOf(to, family)
	if src.pod != nil && !o.side(true, src.pod, dst, dst.pod, proto, port) {
		return false
	}
	if dst.pod != nil && !o.side(false, dst.pod, src, dst.pod, proto, port) {
		return false
	}
	return true
}

// side decides one direction for subject: egress (peer is the destination)
// or ingress (peer is the source). dst is the destination pod, whose
// container ports name the ports (nil for a node).
func (o *cnpOracle) side(egress bool, subject *oraclePod, peer endpoint, dst *oraclePod, proto string, port int) bool {
	switch o.tier(policyv1beta1.AdminTier, egress, subject, peer, dst, proto, port) {
	case policyv1beta1.ClusterNetworkPolicyRuleActionAccept:
		return true
	case policyv1beta1.ClusterNetworkPolicyRuleActionDeny:
		return false
	}
	if isolating := o.isolating(egress, subject); len(isolating) > 0 {
		for _, np := range isolating {
			if o.npAllows(np, egress, peer, dst, proto, port) {
				return true
			}
		}
		return false
	}
	switch o.tier(policyv1beta1.BaselineTier, egress, subject, peer, dst, proto, port) {
	case policyv1beta1.ClusterNetworkPolicyRuleActionAccept:
		return true
	case policyv1beta1.ClusterNetworkPolicyRuleActionDeny:
		return false
	}
	return true
}

// tier returns the action of the first matching rule of tier for subject,
// "" when none matches, Pass when a Pass rule matched.
func (o *cnpOracle) tier(tier policyv1beta1.Tier, egress bool, subject *oraclePod, peer endpoint, dst *oraclePod, proto string, port int) policyv1beta1.ClusterNetworkPolicyRuleAction {
	var pols []*policyv1beta1.ClusterNetworkPolicy
	for _, p := range o.cnps {
		if p.Spec.Tier == tier && o.subjectSelects(p.Spec.Subject, subject) {
			pols = append(pols, p)
		}
	}
	slices.SortStableFunc(pols, func(a, b *policyv1beta1.ClusterNetworkPolicy) int {
		return cmp.Or(cmp.Compare(a.Spec.Priority, b.Spec.Priority), cmp.Compare(a.Name, b.Name))
	})
	for _, p := range pols {
		if egress {
			for _, r := range p.Spec.Egress {
				if o.egressPeersMatch(r.To, peer) && protocolsMatch(r.Protocols, dst, proto, port) {
					return r.Action
				}
			}
			continue
		}
		for _, r := range p.Spec.Ingress {
			if o.ingressPeersMatch(r.From, peer) && protocolsMatch(r.Protocols, dst, proto, port) {
				return r.Action
			}
		}
	}
	return ""
}

func (o *cnpOracle) subjectSelects(s policyv1beta1.ClusterNetworkPolicySubject, p *oraclePod) bool {
	switch {
	case s.Namespaces != nil:
		return selects(s.Namespaces, o.nsLabels[p.ns])
	case s.Pods != nil:
		return selects(&s.Pods.NamespaceSelector, o.nsLabels[p.ns]) && selects(&s.Pods.PodSelector, p.labels)
	}
	panic("oracle: subject with no field set")
}

func (o *cnpOracle) ingressPeersMatch(peers []policyv1beta1.ClusterNetworkPolicyIngressPeer, peer endpoint) bool {
	for _, p := range peers {
		if o.podPeerMatches(p.Namespaces, p.Pods, peer) {
			return true
		}
	}
	return false
}

func (o *cnpOracle) egressPeersMatch(peers []policyv1beta1.ClusterNetworkPolicyEgressPeer, peer endpoint) bool {
	for _, p := range peers {
		switch {
		case p.Namespaces != nil || p.Pods != nil:
			if o.podPeerMatches(p.Namespaces, p.Pods, peer) {
				return true
			}
		case p.Nodes != nil:
			if peer.node != nil && selects(p.Nodes, peer.node.labels) {
				return true
			}
		case len(p.Networks) > 0:
			for _, c := range p.Networks {
				if netip.MustParsePrefix(string(c)).Contains(peer.addr) {
					return true
				}
			}
		default:
			panic(fmt.Sprintf("oracle: unsupported egress peer %+v", p))
		}
	}
	return false
}

// podPeerMatches: namespaces and pods peers select pods only (never a
// node, and never a host-networked pod, of which the harness has none).
func (o *cnpOracle) podPeerMatches(ns *metav1.LabelSelector, pods *policyv1beta1.NamespacedPod, peer endpoint) bool {
	if peer.pod == nil {
		return false
	}
	if ns != nil {
		return selects(ns, o.nsLabels[peer.pod.ns])
	}
	return selects(&pods.NamespaceSelector, o.nsLabels[peer.pod.ns]) && selects(&pods.PodSelector, peer.pod.labels)
}

// protocolsMatch: no protocols match everything; otherwise any one of them.
func protocolsMatch(protos []policyv1beta1.ClusterNetworkPolicyProtocol, dst *oraclePod, proto string, port int) bool {
	if len(protos) == 0 {
		return true
	}
	for _, p := range protos {
		switch {
		case p.TCP != nil:
			if proto == netns.TCP && portMatches(p.TCP.DestinationPort, port) {
				return true
			}
		case p.UDP != nil:
			if proto == netns.UDP && portMatches(p.UDP.DestinationPort, port) {
				return true
			}
		case p.SCTP != nil:
			if proto == netns.SCTP && portMatches(p.SCTP.DestinationPort, port) {
				return true
			}
		case p.DestinationNamedPort != "":
			if dst != nil && namedPortIs(dst, p.DestinationNamedPort, proto, port) {
				return true
			}
		default:
			panic("oracle: protocol with no field set")
		}
	}
	return false
}

func portMatches(p *policyv1beta1.Port, port int) bool {
	switch {
	case p == nil:
		return true
	case p.Range != nil:
		return int(p.Range.Start) <= port && port <= int(p.Range.End)
	}
	return int(p.Number) == port
}

// namedPortIs: a named port is the destination pod's container port of
// that name, with its protocol.
func namedPortIs(dst *oraclePod, name, proto string, port int) bool {
	for _, cp := range dst.ports {
		if cp.Name == name && strings.EqualFold(cp.Protocol, proto) && cp.Port == port {
			return true
		}
	}
	return false
}

// isolating returns the NetworkPolicies that isolate p for the direction.
func (o *cnpOracle) isolating(egress bool, p *oraclePod) []*networkingv1.NetworkPolicy {
	want := networkingv1.PolicyTypeIngress
	if egress {
		want = networkingv1.PolicyTypeEgress
	}
	var out []*networkingv1.NetworkPolicy
	for _, np := range o.nps {
		if np.Namespace == p.ns && selects(&np.Spec.PodSelector, p.labels) && slices.Contains(k8s.PolicyTypes(&np.Spec), want) {
			out = append(out, np)
		}
	}
	return out
}

// npAllows: NetworkPolicy v1 rules, the subset the conformance manifests
// use (peers by namespace and pod selector, ipBlock; ports by number, name
// and range). Anything else panics rather than guess.
func (o *cnpOracle) npAllows(np *networkingv1.NetworkPolicy, egress bool, peer endpoint, dst *oraclePod, proto string, port int) bool {
	type rule struct {
		peers []networkingv1.NetworkPolicyPeer
		ports []networkingv1.NetworkPolicyPort
	}
	var rules []rule
	if egress {
		for _, r := range np.Spec.Egress {
			rules = append(rules, rule{r.To, r.Ports})
		}
	} else {
		for _, r := range np.Spec.Ingress {
			rules = append(rules, rule{r.From, r.Ports})
		}
	}
	for _, r := range rules {
		if o.npPeersMatch(np.Namespace, r.peers, peer) && npPortsMatch(r.ports, dst, proto, port) {
			return true
		}
	}
	return false
}

func (o *cnpOracle) npPeersMatch(policyNS string, peers []networkingv1.NetworkPolicyPeer, peer endpoint) bool {
	if len(peers) == 0 {
		return true
	}
	for _, p := range peers {
		if p.IPBlock != nil {
			if !netip.MustParsePrefix(p.IPBlock.CIDR).Contains(peer.addr) {
				continue
			}
			excepted := false
			for _, e := range p.IPBlock.Except {
				excepted = excepted || netip.MustParsePrefix(e).Contains(peer.addr)
			}
			if !excepted {
				return true
			}
			continue
		}
		if peer.pod == nil {
			continue
		}
		nsOK := peer.pod.ns == policyNS
		if p.NamespaceSelector != nil {
			nsOK = selects(p.NamespaceSelector, o.nsLabels[peer.pod.ns])
		}
		podOK := p.PodSelector == nil || selects(p.PodSelector, peer.pod.labels)
		if nsOK && podOK {
			return true
		}
	}
	return false
}

func npPortsMatch(ports []networkingv1.NetworkPolicyPort, dst *oraclePod, proto string, port int) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		pp := "TCP"
		if p.Protocol != nil {
			pp = string(*p.Protocol)
		}
		if !strings.EqualFold(pp, proto) {
			continue
		}
		switch {
		case p.Port == nil:
			return true
		case p.Port.Type == intstr.String:
			if dst != nil && namedPortIs(dst, p.Port.StrVal, proto, port) {
				return true
			}
		case p.EndPort != nil:
			if int(p.Port.IntVal) <= port && port <= int(*p.EndPort) {
				return true
			}
		case int(p.Port.IntVal) == port:
			return true
		}
	}
	return false
}

func selects(sel *metav1.LabelSelector, lbls map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		panic(fmt.Sprintf("oracle: bad selector %v: %v", sel, err))
	}
	return s.Matches(labels.Set(lbls))
}
