package enforcer

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// scaleCluster builds namespaces × podsPerNS pods, about localPods of them on
// the node under test, and policiesPerNS policies in every namespace, mixing
// the rule shapes of real clusters: namespace + pod selectors, numeric and
// named ports, endPort ranges and ipBlocks with excepts.
//
// With uniquePeers every policy's peers are spelled differently (an In
// expression naming a value no pod has), so no two rules share a peer set:
// the worst case for the compiler's peer cache.
func scaleCluster(namespaces, podsPerNS, policiesPerNS, localPods int, uniquePeers bool) *k8s.Snapshot {
	s := &k8s.Snapshot{}
	localEvery := namespaces * podsPerNS / localPods
	i := 0
	for n := 0; n < namespaces; n++ {
		nsName := fmt.Sprintf("ns-%d", n)
		s.Namespaces = append(s.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: nsName, Labels: map[string]string{"team": fmt.Sprintf("team-%d", n%10)},
		}})
		for p := 0; p < podsPerNS; p++ {
			node := "node-other"
			if i%localEvery == 0 {
				node = testNode
			}
			v4 := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
			v6 := netip.AddrFrom16([16]byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, byte(i >> 16), byte(i >> 8), byte(i)})
			s.Pods = append(s.Pods, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: nsName, Name: fmt.Sprintf("pod-%d", p),
					Labels: map[string]string{"app": fmt.Sprintf("app-%d", p%10), "tier": fmt.Sprintf("tier-%d", p%3)}},
				Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{
					{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
					{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
				}}}},
				Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: v4.String()}, {IP: v6.String()}}},
			})
			i++
		}
		for k := 0; k < policiesPerNS; k++ {
			np := policy(nsName, fmt.Sprintf("policy-%d", k))
			if k%2 == 1 {
				np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("app-%d", k%10)}}
			}
			tiers := []string{fmt.Sprintf("tier-%d", k%3)}
			if uniquePeers {
				tiers = append(tiers, fmt.Sprintf("unique-%d-%d", n, k))
			}
			ingressRule(peers(
				networkingv1.NetworkPolicyPeer{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("team-%d", k%10)}},
					PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
						{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: tiers},
					}},
				},
				ipBlock("192.168.0.0/16", "192.168.1.0/24"),
			), port(tcp, 443), namedPort(tcp, "http"), portRange(udp, 5000, 5100))(np)
			if k%3 == 0 {
				egressRule(peers(podPeer(fmt.Sprintf("pod-%d", k))), namedPort(udp, "dns"))(np)
				egressRule(peers(ipBlock("0.0.0.0/0", "10.0.0.0/8"), ipBlock("::/0", "fd00::/8")))(np)
			}
			s.Policies = append(s.Policies, np)
		}
	}
	return s
}

// BenchmarkCompile measures the compiler alone at 1k policies × 10k pods,
// 100 of them local. Run: go test -run '^$' -bench Compile -benchmem ./enforcer/
func BenchmarkCompile(b *testing.B) {
	for _, sc := range []struct {
		namespaces, pods, policies, local int
		unique                            bool
	}{
		{100, 100, 10, 100, false}, // 1k policies, 10k pods, peers repeat as in real clusters
		{100, 100, 10, 100, true},  // the same, every peer list spelled differently
	} {
		snap := scaleCluster(sc.namespaces, sc.pods, sc.policies, sc.local, sc.unique)
		name := fmt.Sprintf("policies=%d/pods=%d/local=%d/uniquePeers=%v", sc.namespaces*sc.policies, sc.namespaces*sc.pods, sc.local, sc.unique)
		b.Run(name, func(b *testing.B) {
			var table *nft.Table
			b.ReportAllocs()
			for b.Loop() {
				table, _ = Compile(snap, Options{Node: testNode})
			}
			elements := 0
			for _, s := range table.Sets {
				elements += len(s.Elements)
			}
			b.ReportMetric(float64(len(table.Chains)), "chains")
			b.ReportMetric(float64(elements), "elements")
		})
		b.Run(name+"/render", func(b *testing.B) {
			table, _ := Compile(snap, Options{Node: testNode})
			b.ReportAllocs()
			for b.Loop() {
				_ = nft.Render(table)
			}
		})
	}
}
