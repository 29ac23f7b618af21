package enforcer

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	policyv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// TestHostileRound6NamedPairs: every pair of a list of events aimed at the
// egress named-port sets, both in one snapshot (the order the compiler
// walks them in is its own) and one after the other, from a few base
// states. After each compile the incremental table must render as a fresh
// compile, and every connection of the 3x3 cluster (TCP and UDP on 53,
// 80, 81, 8080) must be judged as the reference judges it.
//
// The pods name their ports per namespace, so that a named port resolves
// to a different number per destination: x's pods serve web on TCP 80,
// y's on TCP 81, z's on UDP 80 (and web on TCP 8080 for z/c); every pod
// serves dns on UDP 53.
func TestHostileRound6NamedPairs(t *testing.T) {
	webOf := map[string][]corev1.ContainerPort{
		"x": {{Name: "web", ContainerPort: 80, Protocol: tcp}},
		"y": {{Name: "web", ContainerPort: 81, Protocol: tcp}},
		"z": {{Name: "web", ContainerPort: 80, Protocol: udp}},
	}
	dns := corev1.ContainerPort{Name: "dns", ContainerPort: 53, Protocol: udp}
	mkPod := func(ns, name string, tweaks ...func(*k8s.Pod)) *k8s.Pod {
		return testPod(ns, name, append([]func(*k8s.Pod){func(p *k8s.Pod) {
			p.Spec.Ports = append(slices.Clone(webOf[ns]), dns)
			if ns == "z" && name == "c" {
				p.Spec.Ports = append(p.Spec.Ports, corev1.ContainerPort{Name: "web", ContainerPort: 8080, Protocol: tcp})
			}
		}}, tweaks...)...)
	}
	base := func() *k8s.Snapshot {
		s := cluster()
		for i, p := range s.Pods {
			s.Pods[i] = mkPod(p.Namespace, p.Name)
		}
		// y/c and z/b live on another node: peers, not targets.
		for i, p := range s.Pods {
			if (p.Namespace == "y" && p.Name == "c") || (p.Namespace == "z" && p.Name == "b") {
				q := *p
				q.Spec.NodeName = "node-2"
				s.Pods[i] = &q
			}
		}
		s.Nodes = append(s.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}})
		return s
	}
	webTCP, webUDP := namedPort(tcp, "web"), namedPort(udp, "web")
	npA := func(to []networkingv1.NetworkPolicyPeer) *networkingv1.NetworkPolicy {
		return policy("x", "a", selecting("a"), denyEgress, egressRule(to, webTCP, webUDP))
	}
	toYb := peers(nsPodPeer("y", "b"))
	npB := policy("z", "b", selecting("nobody"), denyEgress, egressRule(nil, webTCP))
	npC := policy("y", "c", selecting("a"), denyEgress, egressRule(peers(nsPeer("z")), webUDP), egressRule(peers(podPeer("b")), webTCP))
	ingressSame := policy("x", "in", selecting("b"), denyIngress, ingressRule(toYb, webTCP))
	cnp := &policyv1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "deny-web"}}
	cnp.Spec.Tier = policyv1beta1.AdminTier
	cnp.Spec.Subject.Namespaces = &metav1.LabelSelector{MatchLabels: map[string]string{"ns": "x"}}
	cnp.Spec.Egress = []policyv1beta1.ClusterNetworkPolicyEgressRule{{
		Action: policyv1beta1.ClusterNetworkPolicyRuleActionDeny,
		To: []policyv1beta1.ClusterNetworkPolicyEgressPeer{{Pods: &policyv1beta1.NamespacedPod{
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"ns": "y"}},
			PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{"pod": "b"}}}}},
		Protocols: []policyv1beta1.ClusterNetworkPolicyProtocol{{DestinationNamedPort: "web"}},
	}}
	pass := cnp.DeepCopy()
	pass.Name = "pass-web"
	pass.Spec.Priority = 5
	pass.Spec.Egress[0].Action = policyv1beta1.ClusterNetworkPolicyRuleActionPass
	pass.Spec.Egress[0].To = []policyv1beta1.ClusterNetworkPolicyEgressPeer{{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"ns": "z"}}}}
	baseline := cnp.DeepCopy()
	baseline.Name = "baseline-accept"
	baseline.Spec.Tier = policyv1beta1.BaselineTier
	baseline.Spec.Subject.Namespaces = &metav1.LabelSelector{}
	baseline.Spec.Egress[0].Action = policyv1beta1.ClusterNetworkPolicyRuleActionDeny
	baseline.Spec.Egress[0].To = []policyv1beta1.ClusterNetworkPolicyEgressPeer{{Namespaces: &metav1.LabelSelector{}}}

	editPod := func(ns, name string, f func(*k8s.Pod)) func(*k8s.Snapshot) {
		return func(s *k8s.Snapshot) {
			for i, p := range s.Pods {
				if p.Namespace == ns && p.Name == name {
					q := *p
					q.Labels = maps.Clone(p.Labels)
					q.Spec.Ports = slices.Clone(p.Spec.Ports)
					f(&q)
					s.Pods[i] = &q
				}
			}
		}
	}
	setPolicy := func(np *networkingv1.NetworkPolicy) func(*k8s.Snapshot) {
		return func(s *k8s.Snapshot) {
			s.Policies = slices.DeleteFunc(s.Policies, func(o *networkingv1.NetworkPolicy) bool { return o.Namespace == np.Namespace && o.Name == np.Name })
			s.Policies = append(s.Policies, np)
		}
	}
	dropPolicy := func(ns, name string) func(*k8s.Snapshot) {
		return func(s *k8s.Snapshot) {
			s.Policies = slices.DeleteFunc(s.Policies, func(o *networkingv1.NetworkPolicy) bool { return o.Namespace == ns && o.Name == name })
		}
	}
	setCNP := func(c *policyv1beta1.ClusterNetworkPolicy, on bool) func(*k8s.Snapshot) {
		return func(s *k8s.Snapshot) {
			s.ClusterPolicies = slices.DeleteFunc(s.ClusterPolicies, func(o *policyv1beta1.ClusterNetworkPolicy) bool { return o.Name == c.Name })
			if on {
				s.ClusterPolicies = append(s.ClusterPolicies, c)
			}
		}
	}
	type event struct {
		name string
		f    func(*k8s.Snapshot)
	}
	events := []event{
		{"NP x/a to y/b on web", setPolicy(npA(toYb))},
		{"NP x/a goes", dropPolicy("x", "a")},
		{"NP x/a to an ipBlock of y", setPolicy(npA(peers(ipBlock("10.0.2.0/24"), ipBlock("fd00::2:0/112"))))},
		{"NP x/a to every namespace", setPolicy(npA(peers(networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{}})))},
		{"NP x/a to own pods b and z", setPolicy(npA(peers(podPeer("b"), nsPeer("z"))))},
		{"inactive NP z/b to every destination", setPolicy(npB)},
		{"NP y/c (z on web/udp, own b on web/tcp)", setPolicy(npC)},
		{"ingress NP with the same peers", setPolicy(ingressSame)},
		{"y/b relabelled pod=c", editPod("y", "b", func(p *k8s.Pod) { p.Labels["pod"] = "c" })},
		{"y/c relabelled pod=b", editPod("y", "c", func(p *k8s.Pod) { p.Labels["pod"] = "b" })},
		{"y/b's web renumbered to 8080", editPod("y", "b", func(p *k8s.Pod) { p.Spec.Ports[0].ContainerPort = 8080 })},
		{"y/b's web becomes UDP 53", editPod("y", "b", func(p *k8s.Pod) { p.Spec.Ports[0].Protocol, p.Spec.Ports[0].ContainerPort = udp, 53 })},
		{"y/b's web renamed", editPod("y", "b", func(p *k8s.Pod) { p.Spec.Ports[0].Name = "www" })},
		{"y/b deleted", func(s *k8s.Snapshot) {
			s.Pods = slices.DeleteFunc(s.Pods, func(p *k8s.Pod) bool { return p.Namespace == "y" && p.Name == "b" })
		}},
		{"y/b replaced by z/d at its addresses (web udp/80)", func(s *k8s.Snapshot) {
			s.Pods = slices.DeleteFunc(s.Pods, func(p *k8s.Pod) bool { return p.Namespace == "y" && p.Name == "b" })
			v4, v6 := podIPs("y", "b")
			s.Pods = append(s.Pods, mkPod("z", "d", func(p *k8s.Pod) {
				p.Labels["pod"] = "b"
				p.Status.PodIPs = []corev1.PodIP{{IP: v4.String()}, {IP: v6.String()}}
			}))
		}},
		{"y/b moves to 10.0.2.9 / fd00::2:9", editPod("y", "b", func(p *k8s.Pod) {
			p.Status.PodIPs = []corev1.PodIP{{IP: "10.0.2.9"}, {IP: "fd00::2:9"}}
		})},
		{"y/b single-stack IPv6", editPod("y", "b", func(p *k8s.Pod) { p.Status.PodIPs = p.Status.PodIPs[1:] })},
		{"y/b host network", editPod("y", "b", func(p *k8s.Pod) { p.Spec.HostNetwork = true })},
		{"y/b finished", editPod("y", "b", func(p *k8s.Pod) { p.Status.Phase = corev1.PodSucceeded })},
		{"y/b quarantined", func(s *k8s.Snapshot) {
			editPod("y", "b", func(p *k8s.Pod) { p.Spec.Ports = nil })(s)
			s.Quarantined = append(s.Quarantined, ktypes.NamespacedName{Namespace: "y", Name: "b"})
		}},
		{"namespace y quarantined", func(s *k8s.Snapshot) { s.QuarantinedNamespaces = append(s.QuarantinedNamespaces, "y") }},
		{"x/a relabelled pod=q (NP x/a inactive)", editPod("x", "a", func(p *k8s.Pod) { p.Labels["pod"] = "q" })},
		{"x/a deleted", func(s *k8s.Snapshot) {
			s.Pods = slices.DeleteFunc(s.Pods, func(p *k8s.Pod) bool { return p.Namespace == "x" && p.Name == "a" })
		}},
		{"x/a to node-2", editPod("x", "a", func(p *k8s.Pod) { p.Spec.NodeName = "node-2" })},
		{"namespace y relabelled ns=w", func(s *k8s.Snapshot) {
			for i, n := range s.Namespaces {
				if n.Name == "y" {
					m := n.DeepCopy()
					m.Labels["ns"] = "w"
					s.Namespaces[i] = m
				}
			}
		}},
		{"Admin Deny x -> y/b on web", setCNP(cnp, true)},
		{"Admin Deny goes", setCNP(cnp, false)},
		{"Admin Pass x -> z on web", setCNP(pass, true)},
		{"Baseline Deny everyone -> everyone on web", setCNP(baseline, true)},
	}
	bases := []struct {
		name   string
		events []int
	}{
		{"plain", nil},
		{"NP x/a and Admin Deny", []int{0, 25}},
		{"NP x/a, NP y/c, inactive NP z/b, Pass and Baseline", []int{0, 6, 5, 27, 28}},
	}
	apply := func(s *k8s.Snapshot, evs ...int) *k8s.Snapshot {
		n := *s
		n.Pods = slices.Clone(s.Pods)
		n.Policies = slices.Clone(s.Policies)
		n.ClusterPolicies = slices.Clone(s.ClusterPolicies)
		n.Namespaces = slices.Clone(s.Namespaces)
		n.Quarantined = slices.Clone(s.Quarantined)
		n.QuarantinedNamespaces = slices.Clone(s.QuarantinedNamespaces)
		for _, e := range evs {
			events[e].f(&n)
		}
		n.Sort()
		return &n
	}
	opts := Options{Node: testNode}
	failures := 0
	verify := func(inc *Compiler, snap *k8s.Snapshot, where string) bool {
		got, _ := inc.Compile(snap, DefaultPriority)
		_ = inc.Delta()
		fresh, _ := NewCompiler(opts).Compile(snap, DefaultPriority)
		if a, b := nft.Render(got), nft.Render(fresh); a != b {
			t.Errorf("MISMATCH %s: the incremental table is not a fresh compile's\n%s", where, r6FirstDiff(a, b))
			return false
		}
		if diffs := r6Check(got, snap); len(diffs) > 0 {
			if len(diffs) > 6 {
				diffs = append(diffs[:6], fmt.Sprintf("... and %d more", len(diffs)-6))
			}
			t.Errorf("%s: the table and the reference disagree:\n  %s\ncluster:\n%s", where, strings.Join(diffs, "\n  "), r6Yaml(snap))
			return false
		}
		return true
	}
	for _, b := range bases {
		start := apply(base(), b.events...)
		for i := range events {
			for j := i + 1; j < len(events); j++ {
				if failures > 10 {
					t.Fatal("too many failures")
				}
				// Both in one snapshot.
				inc := NewCompiler(opts)
				where := fmt.Sprintf("base %q, then {%s + %s} in one snapshot", b.name, events[i].name, events[j].name)
				ok := verify(inc, start, "base "+b.name) && verify(inc, apply(start, i, j), where)
				// One after the other, then back to the base.
				if ok {
					inc = NewCompiler(opts)
					mid := apply(start, i)
					ok = verify(inc, start, "base "+b.name) &&
						verify(inc, mid, fmt.Sprintf("base %q, then %s", b.name, events[i].name)) &&
						verify(inc, apply(mid, j), fmt.Sprintf("base %q, then %s, then %s", b.name, events[i].name, events[j].name)) &&
						verify(inc, start, fmt.Sprintf("base %q, then %s, then %s, then the base again", b.name, events[i].name, events[j].name))
				}
				if !ok {
					failures++
				}
			}
		}
	}
}
