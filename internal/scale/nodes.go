package scale

import (
	"fmt"
	"math/rand/v2"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// An APICluster is a synthetic cluster as the objects to create through
// an API server, for measuring the daemon against one: core/v1 objects
// whatever records a Snapshot keeps of them, status included (which an
// API server takes only through the status subresource).
type APICluster struct {
	Namespaces []*corev1.Namespace
	Nodes      []*corev1.Node
	Pods       []*corev1.Pod
	Policies   []*networkingv1.NetworkPolicy
}

// NodeName is the name of node i of ClusterOnNodes: node-i.
func NodeName(i int) string { return fmt.Sprintf("node-%d", i) }

// ClusterOnNodes is the cluster Cluster builds (uniquePeers false), its
// pods spread over nodes Nodes, node-0 to node-(nodes-1), so that any one
// of them can be the node under test of a whole cluster: each holds
// len(Pods)/nodes pods (one more for some). Which pods share a node is a
// fixed pseudo-random draw, so that a node's pods, like a real node's,
// carry all sorts of labels (a round robin would give a node every
// nodes-th pod: with nodes a multiple of 10, a single app label).
//
// Pods are Cluster's pods, as core/v1 objects: the same names, labels,
// container ports and addresses (10.0.0.0/8 and fd00::/104, numbered in
// creation order, unique up to 2^24 pods). Every Node has an InternalIP
// of its own in 172.16.0.0/12 (node i: 172.16.0.0 + i + 1) and one in
// 2001:db8::/64, ranges no pod and no policy of Cluster uses.
func ClusterOnNodes(namespaces, podsPerNS, policiesPerNS, nodes int) *APICluster {
	if nodes < 1 || nodes > 1<<20-2 {
		panic(fmt.Sprintf("scale: %d nodes: want 1 to %d", nodes, 1<<20-2))
	}
	// Cluster's namespaces and policies; its pods are made below.
	s := Cluster(namespaces, 0, policiesPerNS, 1, NodeName(0), false)
	c := &APICluster{Namespaces: s.Namespaces, Policies: s.Policies}
	// Pod i goes to node perm[i] mod nodes.
	perm := rand.New(rand.NewPCG(1, 2)).Perm(namespaces * podsPerNS)
	for n := range namespaces {
		for p := range podsPerNS {
			i := n*podsPerNS + p
			c.Pods = append(c.Pods, clusterPod(i, fmt.Sprintf("ns-%d", n), p, NodeName(perm[i]%nodes)))
		}
	}
	for i := range nodes {
		k := i + 1
		v4 := netip.AddrFrom4([4]byte{172, 16 | byte(k>>16)&0x0f, byte(k >> 8), byte(k)})
		v6 := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 12: byte(k >> 24), byte(k >> 16), byte(k >> 8), byte(k)})
		name := NodeName(i)
		c.Nodes = append(c.Nodes, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: v4.String()},
				{Type: corev1.NodeInternalIP, Address: v6.String()},
				{Type: corev1.NodeHostName, Address: name},
			}},
		})
	}
	return c
}

// clusterPod is pod p of namespace ns, the i-th pod of the cluster, as
// Cluster makes it (TestClusterOnNodesPods holds the two together).
func clusterPod(i int, ns string, p int, node string) *corev1.Pod {
	v4 := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	v6 := netip.AddrFrom16([16]byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, byte(i >> 16), byte(i >> 8), byte(i)})
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("pod-%d", p),
			Labels: map[string]string{"app": fmt.Sprintf("app-%d", p%10), "tier": fmt.Sprintf("tier-%d", p%3)}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{
			{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
			{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
		}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: v4.String(), PodIPs: []corev1.PodIP{{IP: v4.String()}, {IP: v6.String()}}},
	}
}
