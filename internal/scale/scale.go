// Package scale builds synthetic clusters of a chosen size, for benchmarks
// of the compiler, the applier and the daemon.
//
// # Shape
//
// Namespaces ns-N carry team=team-(N mod 10). Pods pod-P carry
// app=app-(P mod 10) and tier=tier-(P mod 3) and serve http (TCP 8080) and
// dns (UDP 53); one pod in every len(pods)/local is on the node under test.
// Every namespace has the same number of policies, alternating between
// selecting all pods and one app, each allowing ingress from a team's tier
// and an ipBlock with an except, on TCP 443, the named port http and a UDP
// range; every third also restricts egress to one pod's dns and to the
// internet outside 10/8 and fd00::/8.
package scale

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nftpolicy/nftpolicy/k8s"
)

// Cluster builds namespaces × podsPerNS pods, about localPods of them on
// the node under test, and policiesPerNS policies in every namespace, mixing
// the rule shapes of real clusters: namespace + pod selectors, numeric and
// named ports, endPort ranges and ipBlocks with excepts.
//
// With uniquePeers every policy's peers are spelled differently (an In
// expression naming a value no pod has), so no two rules share a peer set:
// the worst case for the compiler's peer cache.
func Cluster(namespaces, podsPerNS, policiesPerNS, localPods int, node string, uniquePeers bool) *k8s.Snapshot {
	s := &k8s.Snapshot{}
	localEvery := namespaces * podsPerNS / localPods
	i := 0
	for n := 0; n < namespaces; n++ {
		nsName := fmt.Sprintf("ns-%d", n)
		s.Namespaces = append(s.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: nsName, Labels: map[string]string{"team": fmt.Sprintf("team-%d", n%10)},
		}})
		for p := 0; p < podsPerNS; p++ {
			podNode := "node-other"
			if i%localEvery == 0 {
				podNode = node
			}
			v4 := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
			v6 := netip.AddrFrom16([16]byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, byte(i >> 16), byte(i >> 8), byte(i)})
			s.Pods = append(s.Pods, k8s.NewPod(&corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: nsName, Name: fmt.Sprintf("pod-%d", p),
					Labels: map[string]string{"app": fmt.Sprintf("app-%d", p%10), "tier": fmt.Sprintf("tier-%d", p%3)}},
				Spec: corev1.PodSpec{NodeName: podNode, Containers: []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{
					{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
					{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
				}}}},
				Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: v4.String()}, {IP: v6.String()}}},
			}))
			i++
		}
		for k := 0; k < policiesPerNS; k++ {
			np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: nsName, Name: fmt.Sprintf("policy-%d", k)}}
			if k%2 == 1 {
				np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("app-%d", k%10)}}
			}
			tiers := []string{fmt.Sprintf("tier-%d", k%3)}
			if uniquePeers {
				tiers = append(tiers, fmt.Sprintf("unique-%d-%d", n, k))
			}
			np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{
				{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("team-%d", k%10)}},
					PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
						{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: tiers},
					}},
				},
				IPBlock("192.168.0.0/16", "192.168.1.0/24"),
			}, Ports: []networkingv1.NetworkPolicyPort{Port(tcp, 443), NamedPort(tcp, "http"), PortRange(udp, 5000, 5100)}})
			if k%3 == 0 {
				np.Spec.Egress = append(np.Spec.Egress,
					networkingv1.NetworkPolicyEgressRule{
						To:    []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pod": fmt.Sprintf("pod-%d", k)}}}},
						Ports: []networkingv1.NetworkPolicyPort{NamedPort(udp, "dns")},
					},
					networkingv1.NetworkPolicyEgressRule{
						To: []networkingv1.NetworkPolicyPeer{IPBlock("0.0.0.0/0", "10.0.0.0/8"), IPBlock("::/0", "fd00::/8")},
					})
			}
			s.Policies = append(s.Policies, np)
		}
	}
	s.Sort()
	return s
}

const (
	tcp = corev1.ProtocolTCP
	udp = corev1.ProtocolUDP
)

// Port is a policy port by number.
func Port(proto corev1.Protocol, p int32) networkingv1.NetworkPolicyPort {
	v := intstr.FromInt32(p)
	return networkingv1.NetworkPolicyPort{Protocol: &proto, Port: &v}
}

// PortRange is a policy port range, first to last (endPort).
func PortRange(proto corev1.Protocol, first, last int32) networkingv1.NetworkPolicyPort {
	p := Port(proto, first)
	p.EndPort = &last
	return p
}

// NamedPort is a policy port by container port name.
func NamedPort(proto corev1.Protocol, name string) networkingv1.NetworkPolicyPort {
	v := intstr.FromString(name)
	return networkingv1.NetworkPolicyPort{Protocol: &proto, Port: &v}
}

// IPBlock is an ipBlock peer: cidr minus the excepts.
func IPBlock(cidr string, except ...string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}
}
