package reference

import (
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// A Conn is the first packet of a connection.
type Conn struct {
	Src, Dst netip.Addr
	Proto    nft.Proto
	Port     uint16 // destination port; 0 for ICMP
	// DNAT: the destination was translated on the way (a Service address
	// to an endpoint). A pod's packets to itself cross the node only so,
	// hairpinned through a Service; one that arrives untranslated with the
	// pod's own address as source and destination is forged.
	DNAT bool
}

// An Evaluator decides connections in one snapshot for one node.
type Evaluator struct {
	snap          *k8s.Snapshot
	node          string
	pods          map[netip.Addr]*k8s.Pod // the pods taking part, by address
	quarantined   map[types.NamespacedName]bool
	quarantinedNS map[string]bool
}

// New returns the evaluator of snap as seen by node.
func New(snap *k8s.Snapshot, node string) Evaluator {
	r := Evaluator{snap: snap, node: node, pods: map[netip.Addr]*k8s.Pod{},
		quarantined: map[types.NamespacedName]bool{}, quarantinedNS: map[string]bool{}}
	for _, q := range snap.Quarantined {
		r.quarantined[q] = true
	}
	for _, ns := range snap.QuarantinedNamespaces {
		r.quarantinedNS[ns] = true
	}
	for _, p := range snap.Pods {
		if TakesPart(p) {
			for _, a := range PodAddrs(p) {
				r.pods[a] = p
			}
		}
	}
	return r
}

// Allowed decides a connection: the egress check of its source, when that
// is a pod of this node, and the ingress check of its destination, when
// that is a pod of this node; it is allowed when both checks that belong
// to this node allow it (see Decide). A pod may always reach itself
// through a Service (see Conn.DNAT).
func (r Evaluator) Allowed(c Conn) bool {
	egress, ingress := r.Decide(c)
	return egress.Allowed() && ingress.Allowed()
}

// A Judgement is one direction's NetworkPolicy check of a connection at a
// pod of the node: the policies isolating the pod for it, and every rule of
// theirs that allows the connection, each "namespace/name direction[index]".
// A quarantined pod (k8s.Snapshot.Quarantined) is isolated by no policy and
// allowed by no rule: Quarantined says so.
type Judgement struct {
	Isolating   []string
	Allowing    []string
	Quarantined bool
}

// Explain is the NetworkPolicy tier of Allowed in detail: the egress check
// of the source and the ingress check of the destination, each nil when
// that end is no pod of this node taking part. It reads NetworkPolicies
// only, whatever ClusterNetworkPolicies decide before or after them (see
// Decide for the whole), and does not decide the self (DNAT) case.
func (r Evaluator) Explain(c Conn) (egress, ingress *Judgement) {
	src, dst := r.podAt(c.Src), r.podAt(c.Dst)
	judge := func(pod *k8s.Pod, t networkingv1.PolicyType, dir string) *Judgement {
		if pod == nil || pod.Spec.NodeName != r.node {
			return nil
		}
		j := &Judgement{Quarantined: r.isQuarantined(pod)}
		for _, np := range r.isolating(pod, t) {
			j.Isolating = append(j.Isolating, np.Namespace+"/"+np.Name)
			if t == networkingv1.PolicyTypeIngress {
				for i, rule := range np.Spec.Ingress {
					if r.peersMatch(np.Namespace, rule.From, c.Src, src) && portsMatch(rule.Ports, c, dst) {
						j.Allowing = append(j.Allowing, fmt.Sprintf("%s/%s %s[%d]", np.Namespace, np.Name, dir, i))
					}
				}
			} else {
				for i, rule := range np.Spec.Egress {
					if r.peersMatch(np.Namespace, rule.To, c.Dst, dst) && portsMatch(rule.Ports, c, dst) {
						j.Allowing = append(j.Allowing, fmt.Sprintf("%s/%s %s[%d]", np.Namespace, np.Name, dir, i))
					}
				}
			}
		}
		return j
	}
	return judge(src, networkingv1.PolicyTypeEgress, "egress"), judge(dst, networkingv1.PolicyTypeIngress, "ingress")
}

// TakesPart reports whether p takes part in policy: pods in phase Succeeded
// or Failed, without an IP, or on the host network do not.
func TakesPart(p *k8s.Pod) bool {
	return !p.Spec.HostNetwork && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed &&
		len(PodAddrs(p)) > 0
}

// PodAddrs is every address of p (its record holds status.podIP among
// status.podIPs), once each.
func PodAddrs(p *k8s.Pod) []netip.Addr {
	var out []netip.Addr
	for _, s := range podIPStrings(p) {
		if a, err := netip.ParseAddr(s); err == nil && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

func podIPStrings(p *k8s.Pod) []string {
	var out []string
	for _, ip := range p.Status.PodIPs {
		out = append(out, ip.IP)
	}
	return out
}

// podAt is the pod taking part that has the address, or nil.
func (r Evaluator) podAt(a netip.Addr) *k8s.Pod { return r.pods[a] }

// namespaceLabels are a namespace's labels with the immutable
// kubernetes.io/metadata.name label the control plane sets on every
// namespace.
func (r Evaluator) namespaceLabels(name string) map[string]string {
	out := map[string]string{}
	for _, ns := range r.snap.Namespaces {
		if ns.Name == name {
			for k, v := range ns.Labels {
				out[k] = v
			}
		}
	}
	out[corev1.LabelMetadataName] = name
	return out
}

// namespaceSelected reports whether a namespace selector selects the
// namespace. The true labels of a quarantined namespace
// (k8s.Snapshot.QuarantinedNamespaces) are not known, so only a selector
// that reads nothing but kubernetes.io/metadata.name (the empty one
// included), which is its name whatever else it carries, selects it.
func (r Evaluator) namespaceSelected(sel *metav1.LabelSelector, ns string) bool {
	if r.quarantinedNS[ns] && !readsOnlyName(sel) {
		return false
	}
	return selectorMatches(sel, r.namespaceLabels(ns))
}

// namespaceMaySelect is namespaceSelected for a ClusterNetworkPolicy's Deny
// rule, which fails closed the other way: naming too few namespaces would
// let through what it denies. A quarantined namespace may be selected by
// any selector that reads a label other than its name.
func (r Evaluator) namespaceMaySelect(sel *metav1.LabelSelector, ns string) bool {
	if r.quarantinedNS[ns] && !readsOnlyName(sel) {
		return true
	}
	return r.namespaceSelected(sel, ns)
}

func readsOnlyName(sel *metav1.LabelSelector) bool {
	for k := range sel.MatchLabels {
		if k != corev1.LabelMetadataName {
			return false
		}
	}
	for _, req := range sel.MatchExpressions {
		if req.Key != corev1.LabelMetadataName {
			return false
		}
	}
	return true
}

// isQuarantined reports whether the snapshot names pod in Quarantined: its
// true labels are not known, so it is isolated both ways with nothing
// allowed (but reaching itself), no policy selects it and no selector
// names it as a peer; address peers (ipBlock, networks, nodes) still match
// its addresses.
func (r Evaluator) isQuarantined(pod *k8s.Pod) bool {
	return r.quarantined[types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}]
}

// effectiveTypes is policyTypes as documented: "If this field is not
// specified, it will default based on the existence of ingress or egress
// rules; policies that contain an egress section are assumed to affect
// egress, and all policies (whether or not they contain an ingress section)
// are assumed to affect ingress."
func effectiveTypes(np *networkingv1.NetworkPolicy) []networkingv1.PolicyType {
	if len(np.Spec.PolicyTypes) > 0 {
		return np.Spec.PolicyTypes
	}
	types := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	if len(np.Spec.Egress) > 0 {
		types = append(types, networkingv1.PolicyTypeEgress)
	}
	return types
}

// isolating lists the policies that select pod (podSelector, within the
// policy's namespace) and apply to the direction: the pod is isolated for
// it when there is at least one.
func (r Evaluator) isolating(pod *k8s.Pod, t networkingv1.PolicyType) []*networkingv1.NetworkPolicy {
	var out []*networkingv1.NetworkPolicy
	if r.isQuarantined(pod) {
		return nil // no policy selects it (k8s.Snapshot.Quarantined)
	}
	for _, np := range r.snap.Policies {
		if np.Namespace == pod.Namespace && slices.Contains(effectiveTypes(np), t) && selectorMatches(&np.Spec.PodSelector, pod.Labels) {
			out = append(out, np)
		}
	}
	return out
}

// anyIngressAllows: "traffic is allowed if it matches at least one rule
// across all of the policies selecting the pod". A rule matches when the
// source matches one of its from peers (all sources when from is empty or
// missing) and the connection one of its ports (all when ports is empty
// or missing).
func (r Evaluator) anyIngressAllows(pols []*networkingv1.NetworkPolicy, c Conn, src, dst *k8s.Pod) bool {
	for _, np := range pols {
		for _, rule := range np.Spec.Ingress {
			if r.peersMatch(np.Namespace, rule.From, c.Src, src) && portsMatch(rule.Ports, c, dst) {
				return true
			}
		}
	}
	return false
}

func (r Evaluator) anyEgressAllows(pols []*networkingv1.NetworkPolicy, c Conn, dst *k8s.Pod) bool {
	for _, np := range pols {
		for _, rule := range np.Spec.Egress {
			if r.peersMatch(np.Namespace, rule.To, c.Dst, dst) && portsMatch(rule.Ports, c, dst) {
				return true
			}
		}
	}
	return false
}

// peersMatch: "If this field is empty or missing, this rule matches all
// sources (traffic not restricted by source). If this field is present and
// contains at least one item, this rule allows traffic only if the traffic
// matches at least one item in the from list." addr is the peer's address,
// pod the pod taking part that has it, if any.
func (r Evaluator) peersMatch(policyNS string, peers []networkingv1.NetworkPolicyPeer, addr netip.Addr, pod *k8s.Pod) bool {
	if len(peers) == 0 {
		return true
	}
	for _, peer := range peers {
		if peer.IPBlock != nil {
			if ipBlockContains(peer.IPBlock, addr) {
				return true
			}
			continue
		}
		if pod == nil || r.isQuarantined(pod) {
			// Selectors select pods, and only pods taking part; no
			// selector names a quarantined pod (k8s.Snapshot.Quarantined),
			// whose true labels are not known.
			continue
		}
		// "If namespaceSelector is also set, then the NetworkPolicyPeer as
		// a whole selects the pods matching podSelector in the Namespaces
		// selected by NamespaceSelector. Otherwise it selects the pods
		// matching podSelector in the policy's own namespace."
		nsOK := pod.Namespace == policyNS
		if peer.NamespaceSelector != nil {
			nsOK = r.namespaceSelected(peer.NamespaceSelector, pod.Namespace)
		}
		podOK := peer.PodSelector == nil || selectorMatches(peer.PodSelector, pod.Labels)
		if nsOK && podOK {
			return true
		}
	}
	return false
}

// ipBlockContains: the cidr, minus every except of this same ipBlock.
func ipBlockContains(b *networkingv1.IPBlock, a netip.Addr) bool {
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil || !cidr.Masked().Contains(a) {
		return false
	}
	for _, e := range b.Except {
		if ex, err := netip.ParsePrefix(e); err == nil && ex.Masked().Contains(a) {
			return false
		}
	}
	return true
}

// portsMatch: "If this field is empty or missing, this rule matches all
// ports (traffic not restricted by port). If this field is present and
// contains at least one item, then this rule allows traffic only if the
// traffic matches at least one port in the list."
func portsMatch(ports []networkingv1.NetworkPolicyPort, c Conn, dst *k8s.Pod) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		if portMatches(p, c, dst) {
			return true
		}
	}
	return false
}

// portMatches: "protocol ... If not specified, this field defaults to TCP";
// "port ... This can either be a numerical or named port on a pod. If this
// field is not provided, this matches all port names and numbers. If
// present, only traffic on the specified protocol AND port will be
// matched"; "endPort indicates that the range of ports from port to
// endPort if set, inclusive, should be allowed". A named port is the pod's:
// the destination's container port of that name and protocol.
func portMatches(p networkingv1.NetworkPolicyPort, c Conn, dst *k8s.Pod) bool {
	proto := corev1.ProtocolTCP
	if p.Protocol != nil {
		proto = *p.Protocol
	}
	if refProto(proto) != c.Proto {
		return false
	}
	switch {
	case p.Port == nil:
		return true
	case p.Port.Type == intstr.Int:
		last := p.Port.IntVal
		if p.EndPort != nil {
			last = *p.EndPort
		}
		return int32(c.Port) >= p.Port.IntVal && int32(c.Port) <= last
	}
	if dst == nil {
		return false
	}
	for _, cp := range dst.Spec.Ports {
		cpProto := cp.Protocol
		if cpProto == "" {
			cpProto = corev1.ProtocolTCP // the API default of a container port
		}
		if cp.Name == p.Port.StrVal && cpProto == proto && cp.ContainerPort == int32(c.Port) {
			return true
		}
	}
	return false
}

func refProto(p corev1.Protocol) nft.Proto {
	switch p {
	case corev1.ProtocolTCP:
		return nft.ProtoTCP
	case corev1.ProtocolUDP:
		return nft.ProtoUDP
	case corev1.ProtocolSCTP:
		return nft.ProtoSCTP
	}
	return 0
}

// selectorMatches is a label selector as the API documents it: "The
// requirements are ANDed. An empty label selector matches all objects."
// matchLabels entries are "equivalent to an element of matchExpressions,
// whose key field is key, the operator is In, and the values array
// contains only value".
func selectorMatches(sel *metav1.LabelSelector, lbls map[string]string) bool {
	for k, v := range sel.MatchLabels {
		if got, ok := lbls[k]; !ok || got != v {
			return false
		}
	}
	for _, req := range sel.MatchExpressions {
		v, ok := lbls[req.Key]
		switch req.Operator {
		case metav1.LabelSelectorOpIn:
			if !ok || !slices.Contains(req.Values, v) {
				return false
			}
		case metav1.LabelSelectorOpNotIn:
			if ok && slices.Contains(req.Values, v) {
				return false
			}
		case metav1.LabelSelectorOpExists:
			if !ok {
				return false
			}
		case metav1.LabelSelectorOpDoesNotExist:
			if ok {
				return false
			}
		default:
			return false
		}
	}
	return true
}
