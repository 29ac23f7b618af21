package k8s

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultNamespace fills in what the API server would on create: the
// kubernetes.io/metadata.name label (always overwritten with the name, as
// upstream does, so a selector on it cannot be spoofed) and phase Active. A
// namespace is cluster-scoped, so metadata.namespace is cleared, as the API
// server clears it for cluster-scoped objects.
func DefaultNamespace(ns *corev1.Namespace) {
	ns.Namespace = ""
	if ns.Name != "" {
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[corev1.LabelMetadataName] = ns.Name
	}
	if ns.Status.Phase == "" {
		ns.Status.Phase = corev1.NamespaceActive
	}
}

// DefaultPod fills in the fields the compiler reads that the API server
// would default: metadata.namespace "default" (what kubectl sends for a
// manifest without one), TCP for container ports without a protocol, and
// status.podIP and status.podIPs from each other, as the v1 conversion does.
func DefaultPod(pod *corev1.Pod) {
	if pod.Namespace == "" {
		pod.Namespace = metav1.NamespaceDefault
	}
	defaultContainerPorts(pod.Spec.InitContainers)
	defaultContainerPorts(pod.Spec.Containers)
	st := &pod.Status
	switch {
	case st.PodIP != "" && len(st.PodIPs) == 0:
		st.PodIPs = []corev1.PodIP{{IP: st.PodIP}}
	case st.PodIP == "" && len(st.PodIPs) != 0:
		st.PodIP = st.PodIPs[0].IP
	}
}

func defaultContainerPorts(containers []corev1.Container) {
	for i := range containers {
		for j := range containers[i].Ports {
			if containers[i].Ports[j].Protocol == "" {
				containers[i].Ports[j].Protocol = corev1.ProtocolTCP
			}
		}
	}
}

// DefaultNode clears metadata.namespace (nodes are cluster-scoped) and fills
// spec.podCIDR and spec.podCIDRs from each other, as the v1 conversion does.
func DefaultNode(node *corev1.Node) {
	node.Namespace = ""
	sp := &node.Spec
	switch {
	case sp.PodCIDR != "" && len(sp.PodCIDRs) == 0:
		sp.PodCIDRs = []string{sp.PodCIDR}
	case sp.PodCIDR == "" && len(sp.PodCIDRs) != 0:
		sp.PodCIDR = sp.PodCIDRs[0]
	}
}

// DefaultNetworkPolicy applies the API server's defaults
// (pkg/apis/networking/v1/defaults.go) plus the namespace kubectl would
// send:
//
//   - metadata.namespace "" becomes "default";
//   - a port without a protocol is TCP;
//   - empty policyTypes becomes [Ingress], plus Egress when spec.egress has
//     at least one rule. An "egress: []" therefore does not make a policy an
//     egress policy unless policyTypes says so, exactly as upstream.
//
// It never turns a nil ingress/egress/from/to list into an empty one or back:
// the compiler gives them different meanings.
func DefaultNetworkPolicy(np *networkingv1.NetworkPolicy) {
	if np.Namespace == "" {
		np.Namespace = metav1.NamespaceDefault
	}
	for i := range np.Spec.Ingress {
		defaultPolicyPorts(np.Spec.Ingress[i].Ports)
	}
	for i := range np.Spec.Egress {
		defaultPolicyPorts(np.Spec.Egress[i].Ports)
	}
	np.Spec.PolicyTypes = PolicyTypes(&np.Spec)
}

// PolicyTypes returns the policy types a spec has once the API server has
// defaulted it: its own when it lists any; otherwise Ingress, plus Egress
// when spec.egress has at least one rule. It does not modify spec.
func PolicyTypes(spec *networkingv1.NetworkPolicySpec) []networkingv1.PolicyType {
	if len(spec.PolicyTypes) != 0 {
		return spec.PolicyTypes
	}
	types := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	if len(spec.Egress) != 0 {
		types = append(types, networkingv1.PolicyTypeEgress)
	}
	return types
}

func defaultPolicyPorts(ports []networkingv1.NetworkPolicyPort) {
	for i := range ports {
		if ports[i].Protocol == nil {
			tcp := corev1.ProtocolTCP
			ports[i].Protocol = &tcp
		}
	}
}

// The normalize functions run after validation succeeded, so every address
// they touch parses. They rewrite addresses into one spelling so that the
// compiler, the rendered ruleset and `explain` never see two spellings of
// one address: IPs in netip's canonical form, CIDRs masked to their prefix
// (10.0.0.1/24 becomes 10.0.0.0/24, which is what the API server's
// ParseCIDRSloppy and every enforcer make of it anyway).

func normalizePod(pod *corev1.Pod) {
	st := &pod.Status
	st.PodIP = canonicalIP(st.PodIP)
	for i := range st.PodIPs {
		st.PodIPs[i].IP = canonicalIP(st.PodIPs[i].IP)
	}
}

func normalizeNode(node *corev1.Node) {
	sp := &node.Spec
	sp.PodCIDR = canonicalCIDR(sp.PodCIDR)
	for i := range sp.PodCIDRs {
		sp.PodCIDRs[i] = canonicalCIDR(sp.PodCIDRs[i])
	}
	for i, a := range node.Status.Addresses {
		if isIPAddressType(a.Type) {
			node.Status.Addresses[i].Address = canonicalIP(a.Address)
		}
	}
}

func normalizeNetworkPolicy(np *networkingv1.NetworkPolicy) {
	for _, r := range np.Spec.Ingress {
		normalizePeers(r.From)
	}
	for _, r := range np.Spec.Egress {
		normalizePeers(r.To)
	}
}

func normalizePeers(peers []networkingv1.NetworkPolicyPeer) {
	for _, p := range peers {
		if p.IPBlock == nil {
			continue
		}
		p.IPBlock.CIDR = canonicalCIDR(p.IPBlock.CIDR)
		for i := range p.IPBlock.Except {
			p.IPBlock.Except[i] = canonicalCIDR(p.IPBlock.Except[i])
		}
	}
}

// canonicalIP returns s in canonical form, or s itself if it does not parse
// (only possible if validation was skipped).
func canonicalIP(s string) string {
	if a, err := netip.ParseAddr(s); err == nil {
		// Almost every address is canonical already: keep s then,
		// rather than a new string of the same bytes per pod.
		var buf [64]byte
		if c := a.AppendTo(buf[:0]); string(c) != s {
			return string(c)
		}
	}
	return s
}

// canonicalCIDR returns s masked to its prefix, or s itself if it does not
// parse.
func canonicalCIDR(s string) string {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked().String()
	}
	return s
}
