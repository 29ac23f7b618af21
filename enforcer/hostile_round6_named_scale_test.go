package enforcer

import (
	"maps"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	policyv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/nftpolicy/nftpolicy/internal/scale"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// TestHostileRound6NamedScaleActivation: at 150k pods, an egress rule on
// a named port to `namespaceSelector: {}` (every pod of the cluster: a
// common "to any pod, on port http" rule) in a policy whose only target on
// this node is one pod. Its peers are pods alone, so its set is "narrow",
// but the narrow set of that peer list is every pod serving the name, and
// it follows the policy's activation. The peer set itself is kept held by
// another active policy (an ingress rule from the same peers), so that the
// only thing the single pod event can move is the named-port set.
//
// doc.go: "a set of every pod must not come and go, 300k elements at 150k
// pods, with the one local pod that makes such a policy active". A single
// pod event (the one target relabelled out, then back in) must patch the
// named-port sets by a few elements at most, as it did when the set held
// every pod whatever the activation.
func TestHostileRound6NamedScaleActivation(t *testing.T) {
	if testing.Short() {
		t.Skip("150k pods")
	}
	for _, variant := range []string{"NetworkPolicy", "ClusterNetworkPolicy"} {
		t.Run(variant, func(t *testing.T) {
			snap := scale.Cluster(100, 1500, 3, 30, testNode, false)
			// ns-0/pod-0 is a pod of this node (scale.Cluster); it alone
			// carries solo=yes.
			setSolo := func(s *k8s.Snapshot, on bool) {
				for i, p := range s.Pods {
					if p.Namespace == "ns-0" && p.Name == "pod-0" {
						q := *p
						q.Labels = maps.Clone(p.Labels)
						if on {
							q.Labels["solo"] = "yes"
						} else {
							delete(q.Labels, "solo")
						}
						s.Pods[i] = &q
					}
				}
			}
			setSolo(snap, true)
			every := []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}}
			keeper := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns-3", Name: "keeper"}}
			keeper.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
			keeper.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: every}}
			snap.Policies = append(snap.Policies, keeper)
			if variant == "NetworkPolicy" {
				solo := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns-0", Name: "solo-http"}}
				solo.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"solo": "yes"}}
				solo.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
				solo.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: every, Ports: []networkingv1.NetworkPolicyPort{scale.NamedPort(tcp, "http")}}}
				snap.Policies = append(snap.Policies, solo)
			} else {
				cnp := &policyv1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "solo-http"}}
				cnp.Spec.Tier = policyv1beta1.AdminTier
				cnp.Spec.Subject.Pods = &policyv1beta1.NamespacedPod{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"solo": "yes"}}}
				cnp.Spec.Egress = []policyv1beta1.ClusterNetworkPolicyEgressRule{{
					Action:    policyv1beta1.ClusterNetworkPolicyRuleActionAccept,
					To:        []policyv1beta1.ClusterNetworkPolicyEgressPeer{{Namespaces: &metav1.LabelSelector{}}},
					Protocols: []policyv1beta1.ClusterNetworkPolicyProtocol{{DestinationNamedPort: "http"}},
				}}
				snap.ClusterPolicies = append(snap.ClusterPolicies, cnp)
			}
			snap.Sort()
			opts := Options{Node: testNode, DeferUnions: true}
			inc := NewCompiler(opts)
			var first *nft.Table
			fresh := allocatedBy(func() { first, _ = inc.Compile(snap, DefaultPriority) })
			_ = inc.Delta()
			if s := hpSet(first, "egress-port-http-tcp-v4"); s == nil || s.Len() != 150000 {
				t.Fatalf("egress-port-http-tcp-v4: want 150000 elements to begin with")
			}
			cur := snap
			var worst int
			var worstEvent string
			var worstCost uint64
			var worstCostEvent string
			for _, ev := range []struct {
				name string
				on   bool
			}{{"ns-0/pod-0 relabelled out of the policy", false}, {"ns-0/pod-0 relabelled back in", true}, {"out again", false}} {
				next, got, d, cost := compileEvent(inc, cur, func(s *k8s.Snapshot) { setSolo(s, ev.on) })
				cur = next
				moved := 0
				for _, u := range d.UpdateSets {
					if strings.HasPrefix(u.New.Name, "egress-port-") {
						n := len(u.Added) + len(u.Removed)
						if !u.Exact {
							n = max(u.Old.Len(), u.New.Len())
						}
						moved += n
					}
				}
				for _, s := range d.AddSets {
					if strings.HasPrefix(s.Name, "egress-port-") {
						moved += s.Len()
					}
				}
				t.Logf("%s: named-port sets moved by %d elements; allocated %.1f MB (fresh compile %.1f MB); http v4 set now %d elements",
					ev.name, moved, mb(cost), mb(fresh), hpSet(got, "egress-port-http-tcp-v4").Len())
				if moved > worst {
					worst, worstEvent = moved, ev.name
				}
				if cost > worstCost {
					worstCost, worstCostEvent = cost, ev.name
				}
			}
			if worst > 4 {
				t.Errorf("COST: a single pod event (%s) rewrote %d elements of the egress named-port sets: the narrow set of a "+
					"`namespaceSelector: {}` peer list is every pod serving the name, and it comes and goes with the one local pod "+
					"that keeps its policy active (the set of every pod it replaced was held whatever the activation)", worstEvent, worst)
			}
			if worstCost*100 > fresh {
				t.Errorf("COST: a single pod event (%s) allocated %.1f MB, more than 1%% of a fresh compile's %.1f MB", worstCostEvent, mb(worstCost), mb(fresh))
			}
		})
	}
}
