package scale

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	policyv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/nftpolicy/nftpolicy/k8s"
)

// NameLabels gives every namespace of s the kubernetes.io/metadata.name
// label, as the API server does, replacing each namespace that lacks it
// with a labelled copy (Cluster's namespaces carry only team). Cluster
// policies select namespaces by that label.
func NameLabels(s *k8s.Snapshot) {
	for i, ns := range s.Namespaces {
		if ns.Labels[corev1.LabelMetadataName] == ns.Name {
			continue
		}
		ns = ns.DeepCopy()
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[corev1.LabelMetadataName] = ns.Name
		s.Namespaces[i] = ns
	}
}

// ClusterPolicies builds count ClusterNetworkPolicies, named cnp-N, for a
// Cluster of the given number of namespaces: cnp-N selects the namespace
// ns-(N mod namespaces) by its kubernetes.io/metadata.name label (see
// NameLabels). Three in four are Admin guardrails, priority 10+N, each
// with three ingress rules (Deny a team's namespaces on TCP 22 first,
// then Accept monitoring pods on TCP 9090, then Pass an ipBlock) and two
// egress rules (Deny the cloud metadata address, Accept one namespace's
// dns pods on UDP 53); every fourth is a Baseline default, priority N,
// allowing ingress from the namespace's own team and denying the rest.
//
// The first ingress rule of every Admin policy has a numeric TCP port, for
// benchmarks that edit it (FirstClusterPort).
func ClusterPolicies(count, namespaces int) []*policyv1beta1.ClusterNetworkPolicy {
	var out []*policyv1beta1.ClusterNetworkPolicy
	for i := range count {
		ns := fmt.Sprintf("ns-%d", i%namespaces)
		cnp := &policyv1beta1.ClusterNetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cnp-%d", i)},
			Spec: policyv1beta1.ClusterNetworkPolicySpec{
				Subject: policyv1beta1.ClusterNetworkPolicySubject{Namespaces: NamespaceNamed(ns)},
			},
		}
		team := func(k int) *metav1.LabelSelector {
			return &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("team-%d", k%10)}}
		}
		if i%4 == 3 {
			cnp.Spec.Tier = policyv1beta1.BaselineTier
			cnp.Spec.Priority = int32(i % 1000)
			cnp.Spec.Ingress = []policyv1beta1.ClusterNetworkPolicyIngressRule{
				{Name: "same-team", Action: policyv1beta1.ClusterNetworkPolicyRuleActionAccept,
					From: []policyv1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: team(i % namespaces)}}},
				{Name: "default-deny", Action: policyv1beta1.ClusterNetworkPolicyRuleActionDeny,
					From: []policyv1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: &metav1.LabelSelector{}}}},
			}
		} else {
			cnp.Spec.Tier = policyv1beta1.AdminTier
			cnp.Spec.Priority = int32(10 + i%990)
			cnp.Spec.Ingress = []policyv1beta1.ClusterNetworkPolicyIngressRule{
				{Name: "no-ssh", Action: policyv1beta1.ClusterNetworkPolicyRuleActionDeny,
					From:      []policyv1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: team(i + 1)}},
					Protocols: []policyv1beta1.ClusterNetworkPolicyProtocol{TCPPort(22)}},
				{Name: "monitoring", Action: policyv1beta1.ClusterNetworkPolicyRuleActionAccept,
					From: []policyv1beta1.ClusterNetworkPolicyIngressPeer{{Pods: &policyv1beta1.NamespacedPod{
						NamespaceSelector: *team(i + 2),
						PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{"app": "app-0"}},
					}}},
					Protocols: []policyv1beta1.ClusterNetworkPolicyProtocol{TCPPort(9090)}},
				{Name: "lab", Action: policyv1beta1.ClusterNetworkPolicyRuleActionPass,
					From: []policyv1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: team(i + 3)}}},
			}
			cnp.Spec.Egress = []policyv1beta1.ClusterNetworkPolicyEgressRule{
				{Name: "no-metadata", Action: policyv1beta1.ClusterNetworkPolicyRuleActionDeny,
					To: []policyv1beta1.ClusterNetworkPolicyEgressPeer{{Networks: []policyv1beta1.CIDR{"169.254.169.254/32"}}}},
				{Name: "dns", Action: policyv1beta1.ClusterNetworkPolicyRuleActionAccept,
					To: []policyv1beta1.ClusterNetworkPolicyEgressPeer{{Pods: &policyv1beta1.NamespacedPod{
						NamespaceSelector: *NamespaceNamed("ns-0"),
						PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{"app": "app-3"}},
					}}},
					Protocols: []policyv1beta1.ClusterNetworkPolicyProtocol{UDPPort(53)}},
			}
		}
		out = append(out, cnp)
	}
	return out
}

// NamespaceNamed selects the namespace name by its
// kubernetes.io/metadata.name label.
func NamespaceNamed(name string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: name}}
}

// TCPPort is a cluster policy protocol entry: TCP to port.
func TCPPort(port int32) policyv1beta1.ClusterNetworkPolicyProtocol {
	return policyv1beta1.ClusterNetworkPolicyProtocol{TCP: &policyv1beta1.ClusterNetworkPolicyProtocolTCP{DestinationPort: &policyv1beta1.Port{Number: port}}}
}

// UDPPort is a cluster policy protocol entry: UDP to port.
func UDPPort(port int32) policyv1beta1.ClusterNetworkPolicyProtocol {
	return policyv1beta1.ClusterNetworkPolicyProtocol{UDP: &policyv1beta1.ClusterNetworkPolicyProtocolUDP{DestinationPort: &policyv1beta1.Port{Number: port}}}
}

// UDPPortRange is a cluster policy protocol entry: UDP to ports first to
// last.
func UDPPortRange(first, last int32) policyv1beta1.ClusterNetworkPolicyProtocol {
	return policyv1beta1.ClusterNetworkPolicyProtocol{UDP: &policyv1beta1.ClusterNetworkPolicyProtocolUDP{DestinationPort: &policyv1beta1.Port{Range: &policyv1beta1.PortRange{Start: first, End: last}}}}
}

// FirstClusterPort returns the port of the first ingress rule's first
// TCP or UDP entry with a single numeric port, nil if there is none.
func FirstClusterPort(cnp *policyv1beta1.ClusterNetworkPolicy) *policyv1beta1.Port {
	if len(cnp.Spec.Ingress) == 0 {
		return nil
	}
	for _, pr := range cnp.Spec.Ingress[0].Protocols {
		var p *policyv1beta1.Port
		switch {
		case pr.TCP != nil:
			p = pr.TCP.DestinationPort
		case pr.UDP != nil:
			p = pr.UDP.DestinationPort
		}
		if p != nil && p.Range == nil && p.Number != 0 {
			return p
		}
	}
	return nil
}
