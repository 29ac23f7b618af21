package enforcer

import (
	"fmt"
	"maps"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftpolicy/nftpolicy/internal/scale"
	"github.com/nftpolicy/nftpolicy/k8s"
)

// The test cluster is the upstream netpol e2e one: namespaces x, y, z, each
// with pods a, b, c, all on node-1 (the node under test) unless a case moves
// one. Labels: namespaces ns=<name>, pods pod=<name>.
//
// IP plan: namespace index n (x=1, y=2, z=3), pod index p (a=1, b=2, c=3):
//
//	IPv4 10.0.n.p      IPv6 fd00::n:p
//
// Every pod serves serve-80-tcp, serve-81-tcp, serve-80-udp, serve-81-udp,
// serve-80-sctp and serve-81-sctp on the port and protocol its name says.
const testNode = "node-1"

var (
	testNamespaces = []string{"x", "y", "z"}
	testPods       = []string{"a", "b", "c"}
)

func podIPs(ns, name string) (netip.Addr, netip.Addr) {
	n := map[string]int{"x": 1, "y": 2, "z": 3}[ns]
	p := map[string]int{"a": 1, "b": 2, "c": 3}[name]
	return netip.MustParseAddr(fmt.Sprintf("10.0.%d.%d", n, p)), netip.MustParseAddr(fmt.Sprintf("fd00::%d:%d", n, p))
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"ns": name}}}
}

func testPod(ns, name string, tweaks ...func(*k8s.Pod)) *k8s.Pod {
	v4, v6 := podIPs(ns, name)
	var ports []corev1.ContainerPort
	for _, port := range []int32{80, 81} {
		for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP} {
			ports = append(ports, corev1.ContainerPort{
				Name:          fmt.Sprintf("serve-%d-%s", port, map[corev1.Protocol]string{"TCP": "tcp", "UDP": "udp", "SCTP": "sctp"}[proto]),
				ContainerPort: port,
				Protocol:      proto,
			})
		}
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"pod": name}},
		Spec: corev1.PodSpec{
			NodeName:   testNode,
			Containers: []corev1.Container{{Name: "c", Ports: ports}},
		},
		Status: corev1.PodStatus{
			Phase:  corev1.PodRunning,
			PodIP:  v4.String(),
			PodIPs: []corev1.PodIP{{IP: v4.String()}, {IP: v6.String()}},
		},
	}
	rec := k8s.NewPod(p)
	rec.Labels = maps.Clone(rec.Labels) // its own: tweaks edit it
	for _, t := range tweaks {
		t(rec)
	}
	return rec
}

// cluster returns the 3×3 test cluster plus the given policies.
func cluster(policies ...*networkingv1.NetworkPolicy) *k8s.Snapshot {
	s := &k8s.Snapshot{Policies: policies}
	for _, ns := range testNamespaces {
		s.Namespaces = append(s.Namespaces, namespace(ns))
		for _, p := range testPods {
			s.Pods = append(s.Pods, testPod(ns, p))
		}
	}
	s.Nodes = []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: testNode}}}
	return s
}

func policy(ns, name string, tweaks ...func(*networkingv1.NetworkPolicy)) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for _, t := range tweaks {
		t(np)
	}
	return np
}

func selecting(podLabel string) func(*networkingv1.NetworkPolicy) {
	return func(np *networkingv1.NetworkPolicy) {
		np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"pod": podLabel}}
	}
}

func types(ts ...networkingv1.PolicyType) func(*networkingv1.NetworkPolicy) {
	return func(np *networkingv1.NetworkPolicy) { np.Spec.PolicyTypes = ts }
}

// denyIngress makes the policy isolate for ingress with an empty (non-nil)
// rule list.
func denyIngress(np *networkingv1.NetworkPolicy) {
	np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{}
	np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
}

func denyEgress(np *networkingv1.NetworkPolicy) {
	np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{}
	np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
}

func ingressRule(peers []networkingv1.NetworkPolicyPeer, ports ...networkingv1.NetworkPolicyPort) func(*networkingv1.NetworkPolicy) {
	return func(np *networkingv1.NetworkPolicy) {
		np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: peers, Ports: ports})
	}
}

func egressRule(peers []networkingv1.NetworkPolicyPeer, ports ...networkingv1.NetworkPolicyPort) func(*networkingv1.NetworkPolicy) {
	return func(np *networkingv1.NetworkPolicy) {
		np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: peers, Ports: ports})
	}
}

func peers(ps ...networkingv1.NetworkPolicyPeer) []networkingv1.NetworkPolicyPeer { return ps }

func nsPeer(ns string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ns": ns}}}
}

func podPeer(pod string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pod": pod}}}
}

func nsPodPeer(ns, pod string) networkingv1.NetworkPolicyPeer {
	p := nsPeer(ns)
	p.PodSelector = podPeer(pod).PodSelector
	return p
}

func exprPeer(nsExpr, podExpr *metav1.LabelSelectorRequirement) networkingv1.NetworkPolicyPeer {
	var p networkingv1.NetworkPolicyPeer
	if nsExpr != nil {
		p.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{*nsExpr}}
	}
	if podExpr != nil {
		p.PodSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{*podExpr}}
	}
	return p
}

// The policy port and peer builders of the synthetic clusters.
var (
	ipBlock   = scale.IPBlock
	port      = scale.Port
	portRange = scale.PortRange
	namedPort = scale.NamedPort
)

func protoOnly(proto corev1.Protocol) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: &proto}
}
