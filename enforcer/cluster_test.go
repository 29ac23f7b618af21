package enforcer

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// The builders of ClusterNetworkPolicies for the 3×3 test cluster.

func cnp(name string, tier cnpv1.Tier, priority int32, tweaks ...func(*cnpv1.ClusterNetworkPolicy)) *cnpv1.ClusterNetworkPolicy {
	p := &cnpv1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: cnpv1.ClusterNetworkPolicySpec{Tier: tier, Priority: priority}}
	for _, t := range tweaks {
		t(p)
	}
	return p
}

func admin(name string, priority int32, tweaks ...func(*cnpv1.ClusterNetworkPolicy)) *cnpv1.ClusterNetworkPolicy {
	return cnp(name, cnpv1.AdminTier, priority, tweaks...)
}

func baseline(name string, priority int32, tweaks ...func(*cnpv1.ClusterNetworkPolicy)) *cnpv1.ClusterNetworkPolicy {
	return cnp(name, cnpv1.BaselineTier, priority, tweaks...)
}

func nsLabels(ns ...string) *metav1.LabelSelector {
	if len(ns) == 0 {
		return &metav1.LabelSelector{}
	}
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "ns", Operator: metav1.LabelSelectorOpIn, Values: ns}}}
}

// subjectNS makes the policy apply to every pod of the namespaces (all
// when none is named).
func subjectNS(ns ...string) func(*cnpv1.ClusterNetworkPolicy) {
	return func(p *cnpv1.ClusterNetworkPolicy) {
		p.Spec.Subject = cnpv1.ClusterNetworkPolicySubject{Namespaces: nsLabels(ns...)}
	}
}

func subjectPod(ns, pod string) func(*cnpv1.ClusterNetworkPolicy) {
	return func(p *cnpv1.ClusterNetworkPolicy) {
		p.Spec.Subject = cnpv1.ClusterNetworkPolicySubject{Pods: &cnpv1.NamespacedPod{
			NamespaceSelector: *nsLabels(ns),
			PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{"pod": pod}},
		}}
	}
}

func fromNS(ns ...string) cnpv1.ClusterNetworkPolicyIngressPeer {
	return cnpv1.ClusterNetworkPolicyIngressPeer{Namespaces: nsLabels(ns...)}
}

func toNS(ns ...string) cnpv1.ClusterNetworkPolicyEgressPeer {
	return cnpv1.ClusterNetworkPolicyEgressPeer{Namespaces: nsLabels(ns...)}
}

func tcpPort(n int32) cnpv1.ClusterNetworkPolicyProtocol {
	return cnpv1.ClusterNetworkPolicyProtocol{TCP: &cnpv1.ClusterNetworkPolicyProtocolTCP{DestinationPort: &cnpv1.Port{Number: n}}}
}

func udpRange(first, last int32) cnpv1.ClusterNetworkPolicyProtocol {
	return cnpv1.ClusterNetworkPolicyProtocol{UDP: &cnpv1.ClusterNetworkPolicyProtocolUDP{DestinationPort: &cnpv1.Port{Range: &cnpv1.PortRange{Start: first, End: last}}}}
}

func cnpIn(action cnpv1.ClusterNetworkPolicyRuleAction, from []cnpv1.ClusterNetworkPolicyIngressPeer, protos ...cnpv1.ClusterNetworkPolicyProtocol) func(*cnpv1.ClusterNetworkPolicy) {
	return func(p *cnpv1.ClusterNetworkPolicy) {
		p.Spec.Ingress = append(p.Spec.Ingress, cnpv1.ClusterNetworkPolicyIngressRule{Action: action, From: from, Protocols: protos})
	}
}

func cnpOut(action cnpv1.ClusterNetworkPolicyRuleAction, to []cnpv1.ClusterNetworkPolicyEgressPeer, protos ...cnpv1.ClusterNetworkPolicyProtocol) func(*cnpv1.ClusterNetworkPolicy) {
	return func(p *cnpv1.ClusterNetworkPolicy) {
		p.Spec.Egress = append(p.Spec.Egress, cnpv1.ClusterNetworkPolicyEgressRule{Action: action, To: to, Protocols: protos})
	}
}

func from(ps ...cnpv1.ClusterNetworkPolicyIngressPeer) []cnpv1.ClusterNetworkPolicyIngressPeer {
	return ps
}
func to(ps ...cnpv1.ClusterNetworkPolicyEgressPeer) []cnpv1.ClusterNetworkPolicyEgressPeer { return ps }

const (
	cnpAccept = cnpv1.ClusterNetworkPolicyRuleActionAccept
	cnpDeny   = cnpv1.ClusterNetworkPolicyRuleActionDeny
	cnpPass   = cnpv1.ClusterNetworkPolicyRuleActionPass
)

// withCluster adds ClusterNetworkPolicies to a snapshot.
func withCluster(s *k8s.Snapshot, cnps ...*cnpv1.ClusterNetworkPolicy) *k8s.Snapshot {
	s.ClusterPolicies = append(s.ClusterPolicies, cnps...)
	s.Sort()
	return s
}

// allowAllIngress isolates the namespace's pods for ingress and allows
// everything: NetworkPolicy decides, and allows.
func allowAllIngress(ns string) *networkingv1.NetworkPolicy {
	return policy(ns, "allow-all", ingressRule(nil))
}

func fromTo(fromNS, toNS []string) reach {
	return func(from, to string) bool {
		return !(slices.Contains(fromNS, ns(from)) && slices.Contains(toNS, ns(to))) || from == to
	}
}

var clusterCases = []compileCase{
	{
		name: "admin deny overrides a NetworkPolicy allow",
		snap: withCluster(cluster(allowAllIngress("x")),
			admin("deny-y-to-x", 10, subjectNS("x"), cnpIn(cnpDeny, from(fromNS("y")), tcpPort(80)))),
		matrices: []matrixCase{
			{nft.ProtoTCP, 80, fromTo([]string{"y"}, []string{"x"})},
			{nft.ProtoTCP, 81, everything},
		},
	},
	{
		name: "admin accept overrides a NetworkPolicy deny",
		snap: withCluster(cluster(policy("x", "deny", denyIngress)),
			admin("accept-y", 10, subjectNS("x"), cnpIn(cnpAccept, from(fromNS("y"))))),
		matrices: []matrixCase{{nft.ProtoUDP, 81, func(from, to string) bool {
			return ns(to) != "x" || ns(from) == "y" || from == to
		}}},
	},
	{
		name: "admin pass hands over to NetworkPolicy, ahead of a lower deny",
		snap: withCluster(cluster(allowAllIngress("x")),
			admin("pass-y", 1, subjectNS("x"), cnpIn(cnpPass, from(fromNS("y")))),
			admin("deny-all", 2, subjectNS("x"), cnpIn(cnpDeny, from(fromNS())))),
		matrices: []matrixCase{{nft.ProtoTCP, 80, func(from, to string) bool {
			return ns(to) != "x" || ns(from) == "y" || from == to
		}}},
	},
	{
		name: "an egress accept does not override the destination's ingress policy",
		snap: withCluster(cluster(policy("x", "deny", denyIngress)),
			admin("accept-to-x", 10, subjectNS("y"), cnpOut(cnpAccept, to(toNS("x"))))),
		matrices: []matrixCase{{nft.ProtoTCP, 80, func(from, to string) bool { return ns(to) != "x" || from == to }}},
	},
	{
		name: "an egress accept overrides the source's egress policy",
		snap: withCluster(cluster(policy("y", "deny", denyEgress)),
			admin("accept-to-x", 10, subjectNS("y"), cnpOut(cnpAccept, to(toNS("x"))))),
		matrices: []matrixCase{{nft.ProtoTCP, 80, func(from, to string) bool { return ns(from) != "y" || ns(to) == "x" || from == to }}},
	},
	{
		name: "baseline applies only where no NetworkPolicy isolates the pod",
		snap: withCluster(cluster(allowAllIngress("y")),
			baseline("deny-from-z", 10, subjectNS(), cnpIn(cnpDeny, from(fromNS("z"))))),
		matrices: []matrixCase{{nft.ProtoTCP, 80, fromTo([]string{"z"}, []string{"x", "z"})}},
	},
	{
		name: "a baseline pass is the default: allowed",
		snap: withCluster(cluster(),
			baseline("pass-z", 1, subjectNS(), cnpIn(cnpPass, from(fromNS("z")))),
			baseline("deny-y-z", 2, subjectNS(), cnpIn(cnpDeny, from(fromNS("y", "z"))))),
		matrices: []matrixCase{{nft.ProtoTCP, 80, fromTo([]string{"y"}, []string{"x", "y", "z"})}},
	},
	{
		name: "the lower priority number wins",
		snap: withCluster(cluster(),
			admin("deny-later", 5, subjectNS("x"), cnpIn(cnpDeny, from(fromNS("y", "z")))),
			admin("accept-first", 1, subjectNS("x"), cnpIn(cnpAccept, from(fromNS("y"))))),
		matrices: []matrixCase{{nft.ProtoTCP, 80, fromTo([]string{"z"}, []string{"x"})}},
	},
	{
		name: "equal priorities are judged by name",
		snap: withCluster(cluster(),
			admin("b-deny", 5, subjectNS("x"), cnpIn(cnpDeny, from(fromNS("y")))),
			admin("a-accept", 5, subjectNS("x"), cnpIn(cnpAccept, from(fromNS("y"))))),
		matrices: []matrixCase{{nft.ProtoTCP, 80, everything}},
	},
	{
		name: "rules of one policy are judged in the order written",
		snap: withCluster(cluster(),
			admin("web-only", 5, subjectNS("x"),
				cnpIn(cnpAccept, from(fromNS("y")), tcpPort(80)),
				cnpIn(cnpDeny, from(fromNS("y"))))),
		matrices: []matrixCase{
			{nft.ProtoTCP, 80, everything},
			{nft.ProtoTCP, 81, fromTo([]string{"y"}, []string{"x"})},
		},
	},
	{
		name: "a pod subject, port ranges and protocols",
		snap: withCluster(cluster(),
			admin("deny-udp", 5, subjectPod("x", "a"), cnpIn(cnpDeny, from(fromNS()), udpRange(80, 81)))),
		matrices: []matrixCase{
			{nft.ProtoUDP, 81, func(from, to string) bool { return to != "x/a" || from == to }},
			{nft.ProtoTCP, 81, everything},
		},
	},
	{
		name: "a named port resolves on the destination pod",
		snap: withCluster(cluster(),
			admin("deny-named", 5, subjectNS("x"), cnpIn(cnpDeny, from(fromNS("y")),
				cnpv1.ClusterNetworkPolicyProtocol{DestinationNamedPort: "serve-80-tcp"}))),
		matrices: []matrixCase{
			{nft.ProtoTCP, 80, fromTo([]string{"y"}, []string{"x"})},
			{nft.ProtoUDP, 80, everything},
			{nft.ProtoTCP, 81, everything},
		},
	},
	{
		name: "egress to networks matches pod addresses too",
		snap: withCluster(cluster(),
			admin("deny-z-v4", 5, subjectNS("x"), cnpOut(cnpDeny, to(cnpv1.ClusterNetworkPolicyEgressPeer{Networks: []cnpv1.CIDR{"10.0.3.0/24", "192.0.2.0/24"}})))),
		probes: []probe{
			deny("x/a", "10.0.3.1", nft.ProtoTCP, 80),
			allow("x/a", "fd00::3:1", nft.ProtoTCP, 80),
			deny("x/b", "192.0.2.7", nft.ProtoUDP, 53),
			allow("x/b", "198.51.100.7", nft.ProtoUDP, 53),
			allow("y/a", "10.0.3.1", nft.ProtoTCP, 80),
		},
	},
	{
		name: "egress to nodes matches their status addresses",
		snap: func() *k8s.Snapshot {
			s := withCluster(cluster(),
				admin("deny-db-nodes", 5, subjectNS("x"), cnpOut(cnpDeny, to(cnpv1.ClusterNetworkPolicyEgressPeer{Nodes: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "db"}}}))))
			s.Nodes = append(s.Nodes, &corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: "db-1", Labels: map[string]string{"role": "db"}},
				Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
					{Type: corev1.NodeInternalIP, Address: "192.0.2.10"},
					{Type: corev1.NodeInternalIP, Address: "2001:db8::10"},
					{Type: corev1.NodeHostName, Address: "db-1"},
				}},
			})
			s.Sort()
			return s
		}(),
		probes: []probe{
			deny("x/a", "192.0.2.10", nft.ProtoTCP, 5432),
			deny("x/a", "2001:db8::10", nft.ProtoTCP, 5432),
			allow("x/a", "192.0.2.11", nft.ProtoTCP, 5432),
			allow("y/a", "192.0.2.10", nft.ProtoTCP, 5432),
		},
	},
	{
		name: "a pod reaching itself is not subject to cluster policy",
		snap: withCluster(cluster(),
			admin("deny-all", 1, subjectNS(), cnpIn(cnpDeny, from(fromNS())), cnpOut(cnpDeny, to(toNS())))),
		matrices: []matrixCase{{nft.ProtoTCP, 80, func(from, to string) bool { return from == to }}},
	},
	{
		name: "admin, NetworkPolicy and baseline together",
		// x: the admin tier passes y, denies z; NetworkPolicy in x allows
		// y only on 80. Elsewhere the baseline denies y.
		snap: withCluster(cluster(policy("x", "y-web", ingressRule(peers(nsPeer("y")), port(corev1.ProtocolTCP, 80)))),
			admin("guard-x", 1, subjectNS("x"), cnpIn(cnpPass, from(fromNS("y"))), cnpIn(cnpDeny, from(fromNS("z")))),
			baseline("no-y", 1, subjectNS(), cnpIn(cnpDeny, from(fromNS("y"))))),
		matrices: []matrixCase{
			{nft.ProtoTCP, 80, func(from, to string) bool {
				if from == to {
					return true
				}
				if ns(to) == "x" {
					return ns(from) == "y"
				}
				return ns(from) != "y"
			}},
			{nft.ProtoTCP, 81, func(from, to string) bool {
				if from == to {
					return true
				}
				if ns(to) == "x" {
					return false
				}
				return ns(from) != "y"
			}},
		},
	},
}

func TestClusterPolicyTrace(t *testing.T) {
	for _, tc := range clusterCases {
		t.Run(tc.name, func(t *testing.T) { traceCase(t, tc) })
	}
}

// What the compiler cannot read fails closed: an Accept matches nothing
// through it, a Deny or a Pass denies all.
func TestClusterPolicyFailsClosed(t *testing.T) {
	unknown := cnpv1.ClusterNetworkPolicyIngressPeer{}
	for _, tc := range []struct {
		name    string
		policy  *cnpv1.ClusterNetworkPolicy
		allowed func(from, to string) bool
	}{
		{"accept through an unknown peer matches nothing",
			admin("p", 1, subjectNS("x"), cnpIn(cnpAccept, from(unknown)), cnpIn(cnpDeny, from(fromNS("y")))),
			fromTo([]string{"y"}, []string{"x"})},
		{"deny with an unknown peer denies all",
			admin("p", 1, subjectNS("x"), cnpIn(cnpDeny, from(fromNS("y"), unknown))),
			fromTo(testNamespaces, []string{"x"})},
		{"pass with an unknown peer denies all",
			admin("p", 1, subjectNS("x"), cnpIn(cnpPass, from(unknown))),
			fromTo(testNamespaces, []string{"x"})},
		{"deny with an unknown protocol entry denies all",
			baseline("p", 1, subjectNS("x"), cnpIn(cnpDeny, from(fromNS("y")), cnpv1.ClusterNetworkPolicyProtocol{})),
			fromTo(testNamespaces, []string{"x"})},
		{"domainNames are not supported: an accept through them matches nothing",
			admin("p", 1, subjectNS("x"),
				cnpOut(cnpAccept, to(cnpv1.ClusterNetworkPolicyEgressPeer{DomainNames: []cnpv1.DomainName{"example.com"}})),
				cnpOut(cnpDeny, to(toNS("y")))),
			fromTo([]string{"x"}, []string{"y"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table, problems := Compile(withCluster(cluster(), tc.policy), Options{Node: testNode})
			if len(problems) == 0 || !strings.HasPrefix(problems[0].Object, "ClusterNetworkPolicy p") {
				t.Errorf("problems = %v, want one naming ClusterNetworkPolicy p", problems)
			}
			for _, f := range families {
				for _, from := range allPods() {
					for _, to := range allPods() {
						pkt := nft.Packet{Src: addrOf(t, from, f), Dst: addrOf(t, to, f), Proto: nft.ProtoTCP, Dport: 80, DNAT: from == to}
						if got := traceAllowed(t, table, pkt); got != tc.allowed(from, to) {
							t.Errorf("%s %s→%s: allowed=%v", f.Keyword(), from, to, got)
						}
					}
				}
			}
		})
	}
}

// Pods selected by the same policies share one chain per tier and
// direction, and a policy without rules in a direction has no chain there.
func TestClusterPolicySharesTierChains(t *testing.T) {
	table, problems := Compile(withCluster(cluster(),
		admin("guard", 1, subjectNS(), cnpIn(cnpDeny, from(fromNS("z")))),
		baseline("base", 1, subjectNS("x", "y"), cnpOut(cnpDeny, to(toNS("z"))))), Options{Node: testNode})
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	var tierChains []string
	for _, ch := range table.Chains {
		// The entry chains; their class chains are named after them.
		if (strings.HasPrefix(ch.Name, "admin-") || strings.HasPrefix(ch.Name, "baseline-")) && (strings.HasSuffix(ch.Name, "-v4") || strings.HasSuffix(ch.Name, "-v6")) {
			tierChains = append(tierChains, ch.Name)
		}
	}
	if len(tierChains) != 4 || !strings.HasPrefix(tierChains[0], "admin-ingress-") || !strings.HasSuffix(tierChains[1], "-v6") ||
		!strings.HasPrefix(tierChains[2], "baseline-egress-") || !strings.HasSuffix(tierChains[3], "-v6") {
		t.Errorf("tier chains %v, want one admin-ingress and one baseline-egress, each one per family", tierChains)
	}
	addr := netip.MustParseAddr("10.0.3.1")
	for _, s := range table.Sets {
		if s.Name == "egress-pods-v4" && slices.ContainsFunc(s.List(), func(e nft.Element) bool { return e.Addr == addr }) {
			t.Errorf("z/a, no subject for egress, is in %s", s.Name)
		}
	}
}

// Explain names the tier and the rule that decided, and its verdict per
// side is the table's.
func TestClusterPolicyExplain(t *testing.T) {
	for _, tc := range clusterCases {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCompiler(Options{Node: testNode})
			table, _ := c.Compile(tc.snap, DefaultPriority)
			for _, f := range families {
				for _, from := range allPods() {
					for _, to := range allPods() {
						for _, pp := range []struct {
							proto nft.Proto
							port  uint16
						}{{nft.ProtoTCP, 80}, {nft.ProtoTCP, 81}, {nft.ProtoUDP, 81}} {
							pkt := nft.Packet{Src: addrOf(t, from, f), Dst: addrOf(t, to, f), Proto: pp.proto, Dport: pp.port, DNAT: from == to}
							x, err := c.Explain(table, pkt)
							if err != nil {
								t.Fatal(err)
							}
							allowed := (x.Egress == nil || x.Egress.Allowed()) && (x.Ingress == nil || x.Ingress.Allowed())
							if allowed != (x.Verdict == nft.Accept) {
								t.Errorf("%s→%s %s/%d: table says %s, explanation allowed=%v:\n%s", from, to, pp.proto, pp.port, x.Verdict, allowed, x)
							}
						}
					}
				}
			}
		})
	}
	c := NewCompiler(Options{Node: testNode})
	table, _ := c.Compile(clusterCases[len(clusterCases)-1].snap, DefaultPriority)
	x, err := c.Explain(table, nft.Packet{Src: netip.MustParseAddr("10.0.3.1"), Dst: netip.MustParseAddr("10.0.1.2"), Proto: nft.ProtoTCP, Dport: 80})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"verdict: drop", "admin tier (guard-x): ClusterNetworkPolicy guard-x (admin) ingress[1]: Deny", "dropped by the admin tier"} {
		if !strings.Contains(x.String(), want) {
			t.Errorf("explanation lacks %q:\n%s", want, x)
		}
	}
}

// A namespace whose labels are not known (quarantined) may be what a Deny
// rule's selector reads: it is denied as if it were, and neither accepted
// nor passed as if it were.
func TestClusterPolicyQuarantinedNamespaceFailsClosed(t *testing.T) {
	snap := withCluster(cluster(),
		admin("accept-y", 0, subjectNS("x"), cnpIn(cnpAccept, from(fromNS("y")))),
		admin("deny-y", 1, subjectNS("x"), cnpIn(cnpDeny, from(fromNS("y")))),
		admin("pass-y", 0, subjectNS("y"), cnpIn(cnpPass, from(fromNS("z")))),
		admin("guard-y", 1, subjectNS("y"), cnpIn(cnpDeny, from(fromNS("z")))))
	snap.QuarantinedNamespaces = []string{"y"}
	traceCase(t, compileCase{snap: snap, matrices: []matrixCase{{nft.ProtoTCP, 80, func(from, to string) bool {
		// y's own pods may be in the namespace labelled ns=z, as far as
		// guard-y's Deny knows.
		return from == to || !(ns(from) == "y" && ns(to) == "x" || ns(from) != "x" && ns(to) == "y")
	}}}})
}

// A pod's connections to its own node cross the input hook, not forward:
// cluster policies judge them there; NetworkPolicy, when it isolates the
// pod, allows them, as it always does.
func TestClusterPolicyOwnNode(t *testing.T) {
	nodeAddr := netip.MustParseAddr("192.0.2.50")
	withNode := func(s *k8s.Snapshot) *k8s.Snapshot {
		s.Nodes[0].Labels = map[string]string{"role": "worker"}
		s.Nodes[0].Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeAddr.String()}}
		return s
	}
	nodes := cnpv1.ClusterNetworkPolicyEgressPeer{Nodes: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "worker"}}}
	all := cnpv1.ClusterNetworkPolicyEgressPeer{Networks: []cnpv1.CIDR{"0.0.0.0/0", "::/0"}}
	for _, tc := range []struct {
		name    string
		snap    *k8s.Snapshot
		allowed map[string]bool // by pod
	}{
		{"admin deny to nodes", withCluster(withNode(cluster()), admin("no-nodes", 1, subjectNS("x"), cnpOut(cnpDeny, to(nodes)))),
			map[string]bool{"x/a": false, "y/a": true}},
		{"admin deny to every network", withCluster(withNode(cluster()), admin("no-out", 1, subjectNS("x"), cnpOut(cnpDeny, to(all)))),
			map[string]bool{"x/a": false, "y/a": true}},
		{"admin accept ahead of a deny", withCluster(withNode(cluster()),
			admin("ok", 0, subjectNS("x"), cnpOut(cnpAccept, to(nodes))), admin("no-out", 1, subjectNS("x"), cnpOut(cnpDeny, to(all)))),
			map[string]bool{"x/a": true}},
		{"baseline deny, NetworkPolicy isolating x", withCluster(withNode(cluster(policy("x", "deny-egress", denyEgress))),
			baseline("no-nodes", 1, subjectNS(), cnpOut(cnpDeny, to(nodes)))),
			map[string]bool{"x/a": true, "y/a": false}},
		{"a quarantined pod is judged by the Denies that may be its", func() *k8s.Snapshot {
			s := withCluster(withNode(cluster()), admin("no-nodes", 1, subjectPod("x", "a"), cnpOut(cnpDeny, to(nodes))),
				admin("accept-nodes", 0, subjectNS("x"), cnpOut(cnpAccept, to(nodes))))
			s.Quarantined = []ktypes.NamespacedName{{Namespace: "x", Name: "b"}}
			return s
		}(), map[string]bool{"x/a": true, "x/b": false, "y/a": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCompiler(Options{Node: testNode})
			table, problems := c.Compile(tc.snap, DefaultPriority)
			if len(problems) > 0 {
				t.Fatal(problems)
			}
			for pod, want := range tc.allowed {
				pkt := nft.Packet{Src: addrOf(t, pod, nft.IPv4), Dst: nodeAddr, Proto: nft.ProtoTCP, Dport: 10250}
				res, err := nft.Trace(table, inputChainName(), pkt)
				if err != nil {
					t.Fatal(err)
				}
				if got := res.Verdict == nft.Accept; got != want {
					t.Errorf("%s → its node: allowed=%v, want %v\n%s", pod, got, want, strings.Join(res.Path, "\n"))
				}
				// explain traces the input hook, and says why.
				x, err := c.Explain(table, pkt)
				if err != nil {
					t.Fatal(err)
				}
				if x.Verdict != res.Verdict || (x.Egress != nil && x.Egress.Allowed() != want) || !strings.Contains(x.String(), "(this node)") {
					t.Errorf("%s → its node: explanation disagrees with the table (%s):\n%s", pod, res.Verdict, x)
				}
			}
		})
	}
	// Without cluster policies the table has no input chain.
	if table, _ := Compile(cluster(policy("x", "deny-egress", denyEgress)), Options{Node: testNode}); slices.ContainsFunc(table.Chains, func(c *nft.Chain) bool { return c.Name == inputChainName() }) {
		t.Error("an input chain without cluster policies")
	}
}
