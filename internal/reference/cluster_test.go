package reference

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// The test cluster. This node is node-1.
//
//	namespaces  x {team: a}, y {team: b}, z {}
//	x/a  app=a  node-1  10.0.0.1  ports web 80/TCP, dns 53/UDP
//	x/b  app=b  node-1  10.0.0.2
//	y/a  app=a  node-1  10.0.1.1  ports web 8080/TCP
//	y/b  app=b  node-2  10.0.1.2
//	z/c  app=c  node-1  10.0.2.1
//	z/host      node-1  hostNetwork: 192.168.0.1 (node-1's)
//	z/done      node-1  Succeeded, 10.0.2.9
//	node-1 {role: worker}  InternalIP 192.168.0.1, InternalIP 10.0.3.1 (its
//	                       bridge, in the pod network), Hostname node-1
//	node-2 {role: infra}   InternalIP 192.168.0.2, ExternalIP 203.0.113.2,
//	                       Hostname 198.51.100.2, InternalDNS node-2.example
//
// Outside: 192.0.2.1.
const node = "node-1"

var addr = map[string]netip.Addr{
	"x/a": netip.MustParseAddr("10.0.0.1"), "x/b": netip.MustParseAddr("10.0.0.2"),
	"y/a": netip.MustParseAddr("10.0.1.1"), "y/b": netip.MustParseAddr("10.0.1.2"),
	"z/c": netip.MustParseAddr("10.0.2.1"), "z/host": netip.MustParseAddr("192.168.0.1"),
	"z/done": netip.MustParseAddr("10.0.2.9"), "node-2": netip.MustParseAddr("192.168.0.2"),
	"node-2-ext": netip.MustParseAddr("203.0.113.2"), "node-2-hostname": netip.MustParseAddr("198.51.100.2"),
	"node-1-bridge": netip.MustParseAddr("10.0.3.1"), "outside": netip.MustParseAddr("192.0.2.1"),
	"outside2": netip.MustParseAddr("192.0.2.2"),
}

func testCluster() *k8s.Snapshot {
	ns := func(name string, labels map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	pod := func(key, app, nodeName string, ports ...corev1.ContainerPort) *k8s.Pod {
		nsName, name, _ := strings.Cut(key, "/")
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: nsName, Name: name},
			Spec:       corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Ports: ports}}},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: addr[key].String()},
		}
		if app != "" {
			p.Labels = map[string]string{"app": app}
		}
		return k8s.NewPod(p)
	}
	host := pod("z/host", "", node)
	host.Spec.HostNetwork = true
	done := pod("z/done", "c", node)
	done.Status.Phase = corev1.PodSucceeded
	nodeObj := func(name string, labels map[string]string, addrs ...corev1.NodeAddress) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Status: corev1.NodeStatus{Addresses: addrs}}
	}
	return &k8s.Snapshot{
		Namespaces: []*corev1.Namespace{ns("x", map[string]string{"team": "a"}), ns("y", map[string]string{"team": "b"}), ns("z", nil)},
		Pods: []*k8s.Pod{
			pod("x/a", "a", node, corev1.ContainerPort{Name: "web", ContainerPort: 80}, corev1.ContainerPort{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}),
			pod("x/b", "b", node),
			pod("y/a", "a", node, corev1.ContainerPort{Name: "web", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}),
			pod("y/b", "b", "node-2"),
			pod("z/c", "c", node),
			host, done,
		},
		Nodes: []*corev1.Node{
			nodeObj("node-1", map[string]string{"role": "worker"},
				corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "192.168.0.1"},
				corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.3.1"},
				corev1.NodeAddress{Type: corev1.NodeHostName, Address: "node-1"}),
			nodeObj("node-2", map[string]string{"role": "infra"},
				corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "192.168.0.2"},
				corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.2"},
				corev1.NodeAddress{Type: corev1.NodeHostName, Address: "198.51.100.2"},
				corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: "node-2.example"}),
		},
	}
}

// Builders of ClusterNetworkPolicies.

func cnp(name string, tier cnpv1.Tier, priority int32, subject cnpv1.ClusterNetworkPolicySubject, rules ...func(*cnpv1.ClusterNetworkPolicySpec)) *cnpv1.ClusterNetworkPolicy {
	p := &cnpv1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: cnpv1.ClusterNetworkPolicySpec{Tier: tier, Priority: priority, Subject: subject}}
	for _, r := range rules {
		r(&p.Spec)
	}
	return p
}

func admin(name string, priority int32, subject cnpv1.ClusterNetworkPolicySubject, rules ...func(*cnpv1.ClusterNetworkPolicySpec)) *cnpv1.ClusterNetworkPolicy {
	return cnp(name, cnpv1.AdminTier, priority, subject, rules...)
}

func baseline(name string, priority int32, subject cnpv1.ClusterNetworkPolicySubject, rules ...func(*cnpv1.ClusterNetworkPolicySpec)) *cnpv1.ClusterNetworkPolicy {
	return cnp(name, cnpv1.BaselineTier, priority, subject, rules...)
}

func sel(kv ...string) *metav1.LabelSelector {
	s := &metav1.LabelSelector{}
	for i := 0; i+1 < len(kv); i += 2 {
		if s.MatchLabels == nil {
			s.MatchLabels = map[string]string{}
		}
		s.MatchLabels[kv[i]] = kv[i+1]
	}
	return s
}

func subjNS(kv ...string) cnpv1.ClusterNetworkPolicySubject {
	return cnpv1.ClusterNetworkPolicySubject{Namespaces: sel(kv...)}
}

func subjPods(ns, pods *metav1.LabelSelector) cnpv1.ClusterNetworkPolicySubject {
	return cnpv1.ClusterNetworkPolicySubject{Pods: &cnpv1.NamespacedPod{NamespaceSelector: *ns, PodSelector: *pods}}
}

type peer = cnpv1.ClusterNetworkPolicyEgressPeer

func peerNS(kv ...string) peer { return peer{Namespaces: sel(kv...)} }
func peerPods(ns, pods *metav1.LabelSelector) peer {
	return peer{Pods: &cnpv1.NamespacedPod{NamespaceSelector: *ns, PodSelector: *pods}}
}
func peerNodes(kv ...string) peer { return peer{Nodes: sel(kv...)} }
func peerNets(cidrs ...string) peer {
	p := peer{}
	for _, c := range cidrs {
		p.Networks = append(p.Networks, cnpv1.CIDR(c))
	}
	return p
}
func peerDomains(names ...string) peer {
	p := peer{}
	for _, n := range names {
		p.DomainNames = append(p.DomainNames, cnpv1.DomainName(n))
	}
	return p
}

type proto = cnpv1.ClusterNetworkPolicyProtocol

func tcp(n int32) proto {
	return proto{TCP: &cnpv1.ClusterNetworkPolicyProtocolTCP{DestinationPort: &cnpv1.Port{Number: n}}}
}
func tcpRange(a, b int32) proto {
	return proto{TCP: &cnpv1.ClusterNetworkPolicyProtocolTCP{DestinationPort: &cnpv1.Port{Range: &cnpv1.PortRange{Start: a, End: b}}}}
}
func udp(n int32) proto {
	return proto{UDP: &cnpv1.ClusterNetworkPolicyProtocolUDP{DestinationPort: &cnpv1.Port{Number: n}}}
}
func sctpAny() proto          { return proto{SCTP: &cnpv1.ClusterNetworkPolicyProtocolSCTP{}} }
func named(name string) proto { return proto{DestinationNamedPort: name} }

// ingress appends an ingress rule: action, its from peers (only their
// namespaces and pods fields), protocols.
func ingress(action cnpv1.ClusterNetworkPolicyRuleAction, from []peer, protos ...proto) func(*cnpv1.ClusterNetworkPolicySpec) {
	return func(s *cnpv1.ClusterNetworkPolicySpec) {
		r := cnpv1.ClusterNetworkPolicyIngressRule{Action: action, From: []cnpv1.ClusterNetworkPolicyIngressPeer{}, Protocols: protos}
		for _, p := range from {
			if p.Nodes != nil || p.Networks != nil || p.DomainNames != nil {
				panic("an ingress peer has only namespaces and pods")
			}
			r.From = append(r.From, cnpv1.ClusterNetworkPolicyIngressPeer{Namespaces: p.Namespaces, Pods: p.Pods})
		}
		s.Ingress = append(s.Ingress, r)
	}
}

func egress(action cnpv1.ClusterNetworkPolicyRuleAction, to []peer, protos ...proto) func(*cnpv1.ClusterNetworkPolicySpec) {
	return func(s *cnpv1.ClusterNetworkPolicySpec) {
		s.Egress = append(s.Egress, cnpv1.ClusterNetworkPolicyEgressRule{Action: action, To: to, Protocols: protos})
	}
}

func peers(p ...peer) []peer { return p }

const (
	accept = cnpv1.ClusterNetworkPolicyRuleActionAccept
	deny   = cnpv1.ClusterNetworkPolicyRuleActionDeny
	pass   = cnpv1.ClusterNetworkPolicyRuleActionPass
)

// Builders of NetworkPolicies.

// npIngress isolates the pods of ns that sel selects for ingress,
// allowing from the namespaces nsFrom selects (none when nil).
func npIngress(ns, name string, podSel *metav1.LabelSelector, nsFrom *metav1.LabelSelector) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: *podSel, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
	if nsFrom != nil {
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: nsFrom}}}}
	}
	return np
}

func npEgress(ns, name string, podSel *metav1.LabelSelector, nsTo *metav1.LabelSelector) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: *podSel, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}}
	if nsTo != nil {
		np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: nsTo}}}}
	}
	return np
}

// conn is "src dst proto/port" with src and dst keys of addr, e.g.
// "y/a x/a tcp/80", "x/a outside icmp", "x/a x/a tcp/80 dnat".
func conn(s string) Conn {
	f := strings.Fields(s)
	c := Conn{Src: addr[f[0]], Dst: addr[f[1]]}
	if !c.Src.IsValid() || !c.Dst.IsValid() {
		panic("unknown address in " + s)
	}
	p, port, _ := strings.Cut(f[2], "/")
	c.Proto = map[string]nft.Proto{"tcp": nft.ProtoTCP, "udp": nft.ProtoUDP, "sctp": nft.ProtoSCTP, "icmp": nft.ProtoICMP}[p]
	if port != "" {
		var n uint16
		fmt.Sscan(port, &n)
		c.Port = n
	}
	c.DNAT = len(f) > 3 && f[3] == "dnat"
	return c
}

// summary is a Decision in short: "Tier Action [policy dir[rule]] [pass:policy dir[rule]...]".
func summary(d *Decision) string {
	if d == nil {
		return "-"
	}
	s := fmt.Sprintf("%s %s", d.Tier, d.Action)
	if d.Rule >= 0 {
		s += fmt.Sprintf(" %s[%d]", d.Policy, d.Rule)
	}
	for _, p := range d.Passed {
		s += fmt.Sprintf(" pass:%s[%d]", p.Policy, p.Rule)
	}
	return s
}

type check struct {
	conn            string
	allowed         bool
	egress, ingress string // summary(); "" leaves it unchecked
}

func TestClusterNetworkPolicy(t *testing.T) {
	all := metav1.LabelSelector{}
	x := subjNS(corev1.LabelMetadataName, "x")
	for _, tc := range []struct {
		name   string
		cnps   []*cnpv1.ClusterNetworkPolicy
		nps    []*networkingv1.NetworkPolicy
		tweak  func(*k8s.Snapshot)
		checks []check
	}{{
		name: "no policy: the default allows",
		checks: []check{
			{"y/a x/a tcp/80", true, "Default Accept", "Default Accept"},
			{"x/a y/b tcp/80", true, "Default Accept", "-"}, // y/b's own node checks its ingress
			{"y/b x/a tcp/80", true, "-", "Default Accept"},
			{"outside x/a icmp", true, "-", "Default Accept"},
		},
	}, {
		name: "admin deny, ingress from namespaces",
		cnps: []*cnpv1.ClusterNetworkPolicy{admin("deny-b", 10, subjNS("team", "a"), ingress(deny, peers(peerNS("team", "b"))))},
		checks: []check{
			{"y/a x/a tcp/80", false, "Default Accept", "Admin Deny deny-b[0]"},
			{"y/b x/b udp/53", false, "-", "Admin Deny deny-b[0]"},
			{"z/c x/a tcp/80", true, "", "Default Accept"},
			{"x/a y/a tcp/80", true, "Default Accept", "Default Accept"}, // ingress rules only: egress unaffected
		},
	}, {
		name: "admin accept overrides a NetworkPolicy that isolates",
		cnps: []*cnpv1.ClusterNetworkPolicy{admin("accept-b", 10, x, ingress(accept, peers(peerNS("team", "b"))))},
		nps:  []*networkingv1.NetworkPolicy{npIngress("x", "deny-all", &all, nil)},
		checks: []check{
			{"y/a x/a tcp/80", true, "", "Admin Accept accept-b[0]"},
			{"z/c x/a tcp/80", false, "", "NetworkPolicy Deny"},
		},
	}, {
		name: "admin egress accept leaves the destination's ingress check to run",
		cnps: []*cnpv1.ClusterNetworkPolicy{admin("accept-to-y", 10, x, egress(accept, peers(peerNS("team", "b"))))},
		nps:  []*networkingv1.NetworkPolicy{npIngress("y", "deny-all", &all, nil), npEgress("x", "deny-egress", &all, nil)},
		checks: []check{
			{"x/a y/a tcp/80", false, "Admin Accept accept-to-y[0]", "NetworkPolicy Deny"},
			{"x/a y/b tcp/80", true, "Admin Accept accept-to-y[0]", "-"},
			{"x/a z/c tcp/80", false, "NetworkPolicy Deny", "Default Accept"},
		},
	}, {
		name: "priority: lower number first",
		cnps: []*cnpv1.ClusterNetworkPolicy{
			admin("deny", 20, x, ingress(deny, peers(peerNS()))),
			admin("accept", 10, x, ingress(accept, peers(peerNS("team", "b")))),
		},
		checks: []check{
			{"y/a x/a tcp/80", true, "", "Admin Accept accept[0]"},
			{"z/c x/a tcp/80", false, "", "Admin Deny deny[0]"},
		},
	}, {
		name: "priority ties: by name",
		cnps: []*cnpv1.ClusterNetworkPolicy{
			admin("b-deny", 5, x, ingress(deny, peers(peerNS()))),
			admin("a-accept", 5, x, ingress(accept, peers(peerNS("team", "b")))),
			admin("c-accept", 5, x, ingress(accept, peers(peerNS()))),
		},
		checks: []check{
			{"y/a x/a tcp/80", true, "", "Admin Accept a-accept[0]"},
			{"z/c x/a tcp/80", false, "", "Admin Deny b-deny[0]"},
		},
	}, {
		name: "rules in the order written",
		cnps: []*cnpv1.ClusterNetworkPolicy{admin("web-only", 1, x,
			ingress(accept, peers(peerNS()), tcp(80)),
			ingress(deny, peers(peerNS())),
			ingress(accept, peers(peerNS())))},
		checks: []check{
			{"y/a x/a tcp/80", true, "", "Admin Accept web-only[0]"},
			{"y/a x/a tcp/81", false, "", "Admin Deny web-only[1]"},
			{"y/a x/a icmp", false, "", "Admin Deny web-only[1]"},
		},
	}, {
		name: "admin pass hands over to NetworkPolicy",
		cnps: []*cnpv1.ClusterNetworkPolicy{
			admin("pass-b", 1, x, ingress(pass, peers(peerNS("team", "b")))),
			admin("deny-all", 2, x, ingress(deny, peers(peerNS()))),
		},
		nps: []*networkingv1.NetworkPolicy{npIngress("x", "from-b", sel("app", "a"), sel("team", "b"))},
		checks: []check{
			{"y/a x/a tcp/80", true, "", "NetworkPolicy Accept pass:pass-b[0]"},
			{"y/a x/b tcp/80", true, "", "Default Accept pass:pass-b[0]"}, // not isolated: on to Baseline, default
			{"z/c x/a tcp/80", false, "", "Admin Deny deny-all[0]"},
		},
	}, {
		name: "admin pass skips lower admin rules; NetworkPolicy denies",
		cnps: []*cnpv1.ClusterNetworkPolicy{
			admin("pass-b", 1, x, ingress(pass, peers(peerNS("team", "b")))),
			admin("accept-all", 2, x, ingress(accept, peers(peerNS()))),
		},
		nps: []*networkingv1.NetworkPolicy{npIngress("x", "deny-all", &all, nil)},
		checks: []check{
			{"y/a x/a tcp/80", false, "", "NetworkPolicy Deny pass:pass-b[0]"},
			{"z/c x/a tcp/80", true, "", "Admin Accept accept-all[0]"},
		},
	}, {
		// Conformance, CNPAdminTierIntegration (api_integration/standard-anp-np-banp.yaml).
		name: "integration: admin deny wins over NetworkPolicy allow",
		cnps: []*cnpv1.ClusterNetworkPolicy{
			admin("pass-example", 10, subjNS("team", "a"), ingress(deny, peers(peerNS("team", "b"))), egress(deny, peers(peerNS("team", "b")))),
			baseline("default", 10, subjNS("team", "a"), ingress(deny, peers(peerNS("team", "b"))), egress(deny, peers(peerNS("team", "b")))),
		},
		nps: []*networkingv1.NetworkPolicy{npIngress("x", "allow-in", &all, sel("team", "b")), npEgress("x", "allow-out", &all, sel("team", "b"))},
		checks: []check{
			{"y/a x/a tcp/80", false, "", "Admin Deny pass-example[0]"},
			{"x/a y/a tcp/80", false, "Admin Deny pass-example[0]", ""},
		},
	}, {
		name: "integration: admin pass, then NetworkPolicy allows",
		cnps: []*cnpv1.ClusterNetworkPolicy{
			admin("pass-example", 10, subjNS("team", "a"), ingress(pass, peers(peerNS("team", "b"))), egress(pass, peers(peerNS("team", "b")))),
			baseline("default", 10, subjNS("team", "a"), ingress(deny, peers(peerNS("team", "b"))), egress(deny, peers(peerNS("team", "b")))),
		},
		nps: []*networkingv1.NetworkPolicy{npIngress("x", "allow-in", &all, sel("team", "b")), npEgress("x", "allow-out", &all, sel("team", "b"))},
		checks: []check{
			{"y/a x/a tcp/80", true, "", "NetworkPolicy Accept pass:pass-example[0]"},
			{"y/a x/a tcp/8080", true, "", "NetworkPolicy Accept pass:pass-example[0]"},
			{"x/a y/a tcp/80", true, "NetworkPolicy Accept pass:pass-example[0]", ""},
		},
	}, {
		name: "integration: admin pass, no NetworkPolicy, baseline denies",
		cnps: []*cnpv1.ClusterNetworkPolicy{
			admin("pass-example", 10, subjNS("team", "a"), ingress(pass, peers(peerNS("team", "b"))), egress(pass, peers(peerNS("team", "b")))),
			baseline("default", 10, subjNS("team", "a"), ingress(deny, peers(peerNS("team", "b"))), egress(deny, peers(peerNS("team", "b")))),
		},
		checks: []check{
			{"y/a x/a tcp/80", false, "", "Baseline Deny default[0] pass:pass-example[0]"},
			{"x/a y/a tcp/80", false, "Baseline Deny default[0] pass:pass-example[0]", ""},
			{"z/c x/a tcp/80", true, "", "Default Accept"},
		},
	}, {
		// Conformance, CNPAdminTierPriorityField (admin_tier/standard-priority-field.yaml).
		name: "priority field: deny at 50 before pass at 60",
		cnps: priorityField(60),
		checks: []check{
			{"y/a x/a tcp/80", false, "", "Admin Deny priority-50-example[0]"},
			{"x/a y/a tcp/8080", false, "Admin Deny priority-50-example[0]", ""},
		},
	}, {
		name: "priority field: pass at 40 before deny at 50, baseline accepts",
		cnps: priorityField(40),
		nps:  []*networkingv1.NetworkPolicy{npIngress("z", "deny-all", &all, nil)},
		checks: []check{
			{"y/a x/a tcp/80", true, "", "Baseline Accept default[0] pass:old-priority-60-new-priority-40-example[0]"},
			{"x/a y/a tcp/8080", true, "Baseline Accept default[0] pass:old-priority-60-new-priority-40-example[0]", ""},
		},
	}, {
		// Conformance, CNPAdminTierSamePriority (admin_tier/standard-same-priority.yaml),
		// with x gryffindor, y slytherin, z hufflepuff.
		name: "same priority: one policy's rules never apply to another's subject",
		cnps: []*cnpv1.ClusterNetworkPolicy{
			admin("same-priority-gryffindor-slytherin", 15, x,
				ingress(deny, peers(peerNS(corev1.LabelMetadataName, "y")), tcp(80)),
				egress(deny, peers(peerNS(corev1.LabelMetadataName, "y")), tcp(80))),
			admin("same-priority-gryffindor-hufflepuff", 15, x,
				ingress(deny, peers(peerNS(corev1.LabelMetadataName, "z")), tcp(80)),
				egress(deny, peers(peerNS(corev1.LabelMetadataName, "z")), tcp(80))),
			admin("same-priority-hufflepuff-slytherin", 15, subjNS(corev1.LabelMetadataName, "z"),
				ingress(deny, peers(peerNS(corev1.LabelMetadataName, "y")), tcp(8080)),
				egress(deny, peers(peerNS(corev1.LabelMetadataName, "y")), tcp(8080))),
		},
		checks: []check{
			{"y/a x/a tcp/80", false, "", "Admin Deny same-priority-gryffindor-slytherin[0]"},
			{"x/a y/a tcp/80", false, "Admin Deny same-priority-gryffindor-slytherin[0]", ""},
			{"z/c x/a tcp/80", false, "", "Admin Deny same-priority-gryffindor-hufflepuff[0]"},
			{"x/a z/c tcp/80", false, "Admin Deny same-priority-gryffindor-hufflepuff[0]", ""},
			{"y/a z/c tcp/8080", false, "", "Admin Deny same-priority-hufflepuff-slytherin[0]"},
			{"z/c y/a tcp/8080", false, "Admin Deny same-priority-hufflepuff-slytherin[0]", ""},
			{"y/a x/a tcp/8080", true, "", "Default Accept"},
			{"x/a y/a tcp/8080", true, "Default Accept", ""},
			{"y/a z/c tcp/80", true, "", "Default Accept"},
			{"z/c y/a tcp/80", true, "Default Accept", ""},
		},
	}, {
		name: "baseline: a NetworkPolicy that isolates overrides it",
		cnps: []*cnpv1.ClusterNetworkPolicy{baseline("deny-all", 1, subjNS(), ingress(deny, peers(peerNS())))},
		nps:  []*networkingv1.NetworkPolicy{npIngress("x", "from-b", sel("app", "a"), sel("team", "b"))},
		checks: []check{
			{"y/a x/a tcp/80", true, "", "NetworkPolicy Accept"},
			{"z/c x/a tcp/80", false, "", "NetworkPolicy Deny"},
			{"y/a x/b tcp/80", false, "", "Baseline Deny deny-all[0]"},
		},
	}, {
		name: "baseline: accept, and pass on to the default",
		cnps: []*cnpv1.ClusterNetworkPolicy{
			baseline("pass-b", 1, subjNS(), ingress(pass, peers(peerNS("team", "b")))),
			baseline("accept-c", 2, subjNS(), ingress(accept, peers(peerPods(sel(), sel("app", "c"))))),
			baseline("deny-all", 3, subjNS(), ingress(deny, peers(peerNS()))),
		},
		checks: []check{
			{"y/a x/a tcp/80", true, "", "Default Accept pass:pass-b[0]"},
			{"z/c x/a tcp/80", true, "", "Baseline Accept accept-c[0]"},
			{"x/b x/a tcp/80", false, "", "Baseline Deny deny-all[0]"},
		},
	}, {
		name: "subject: pods is namespace AND pod selector; metadata.name",
		cnps: []*cnpv1.ClusterNetworkPolicy{
			admin("a-in-team-a", 1, subjPods(sel("team", "a"), sel("app", "a")), ingress(deny, peers(peerNS()))),
			admin("in-z-by-name", 2, subjNS(corev1.LabelMetadataName, "z"), ingress(deny, peers(peerNS()))),
		},
		checks: []check{
			{"y/a x/a tcp/80", false, "", "Admin Deny a-in-team-a[0]"},
			{"y/a x/b tcp/80", true, "", "Default Accept"},
			{"x/a y/a tcp/80", true, "", "Default Accept"},
			{"x/a z/c tcp/80", false, "", "Admin Deny in-z-by-name[0]"},
		},
	}, {
		name: "subject: empty pods selectors select every pod",
		cnps: []*cnpv1.ClusterNetworkPolicy{admin("all", 1, subjPods(sel(), sel()), ingress(deny, peers(peerNS())))},
		checks: []check{
			{"y/a x/a tcp/80", false, "", "Admin Deny all[0]"},
			{"x/a z/c tcp/80", false, "", "Admin Deny all[0]"},
		},
	}, {
		name: "subject: neither field selects nothing",
		cnps: []*cnpv1.ClusterNetworkPolicy{admin("none", 1, cnpv1.ClusterNetworkPolicySubject{}, ingress(deny, peers(peerNS())))},
		checks: []check{
			{"y/a x/a tcp/80", true, "", "Default Accept"},
		},
	}, {
		name: "host-network and finished pods are neither subjects nor selector peers",
		cnps: []*cnpv1.ClusterNetworkPolicy{
			admin("z", 1, subjNS(corev1.LabelMetadataName, "z"), egress(deny, peers(peerNets("0.0.0.0/0")))),
			admin("from-pods", 2, x, ingress(deny, peers(peerNS(), peerPods(sel(), sel())))),
		},
		checks: []check{
			{"z/host x/a tcp/80", true, "-", "Default Accept"},
			{"z/done x/a tcp/80", true, "-", "Default Accept"},
			{"z/c x/a tcp/80", false, "Admin Deny z[0]", "Admin Deny from-pods[0]"},
		},
	}, {
		name: "networks: any CIDR, in-cluster addresses too",
		cnps: []*cnpv1.ClusterNetworkPolicy{admin("nets", 1, x, egress(deny, peers(peerNets("192.0.2.0/24", "10.0.1.0/24"))))},
		checks: []check{
			{"x/a y/a tcp/80", false, "Admin Deny nets[0]", ""},
			{"x/a y/b tcp/80", false, "Admin Deny nets[0]", "-"},
			{"x/a outside udp/53", false, "Admin Deny nets[0]", "-"},
			{"x/a outside icmp", false, "Admin Deny nets[0]", "-"},
			{"x/a z/c tcp/80", true, "Default Accept", ""},
		},
	}, {
		name: "nodes: every IP in status.addresses of the selected nodes",
		cnps: []*cnpv1.ClusterNetworkPolicy{
			admin("infra", 1, x, egress(deny, peers(peerNodes("role", "infra")))),
			admin("worker", 2, x, egress(deny, peers(peerNodes("role", "worker")))),
		},
		checks: []check{
			{"x/a node-2 tcp/80", false, "Admin Deny infra[0]", "-"},
			{"x/a node-2-ext tcp/80", false, "Admin Deny infra[0]", "-"},
			{"x/a node-2-hostname tcp/80", false, "Admin Deny infra[0]", "-"},
			{"x/a z/host tcp/80", false, "Admin Deny worker[0]", "-"}, // the node's address, a host-network pod's too
			{"x/a node-1-bridge tcp/80", false, "Admin Deny worker[0]", "-"},
			{"x/a outside tcp/80", true, "Default Accept", "-"},
			{"x/a y/a tcp/80", true, "Default Accept", ""},
		},
	}, {
		name: "nodes: an empty selector selects every node",
		cnps: []*cnpv1.ClusterNetworkPolicy{admin("nodes", 1, x, egress(deny, peers(peerNodes())))},
		checks: []check{
			{"x/a node-2 tcp/80", false, "Admin Deny nodes[0]", "-"},
			{"x/a node-1-bridge tcp/80", false, "Admin Deny nodes[0]", "-"},
			{"x/a outside tcp/80", true, "Default Accept", "-"},
		},
	}, {
		name: "domainNames match nothing in accept, deny all in deny",
		cnps: []*cnpv1.ClusterNetworkPolicy{
			admin("names", 1, x, egress(accept, peers(peerDomains("example.com"))), egress(deny, peers(peerDomains("*.example.com")))),
		},
		nps: []*networkingv1.NetworkPolicy{npEgress("x", "deny-egress", &all, nil)},
		checks: []check{
			{"x/a outside tcp/443", false, "Admin Deny names[1]", "-"},
		},
	}, {
		name: "unknown peer: nothing in accept",
		cnps: []*cnpv1.ClusterNetworkPolicy{admin("unknown", 1, x, ingress(accept, peers(peer{})))},
		nps:  []*networkingv1.NetworkPolicy{npIngress("x", "deny-all", &all, nil)},
		checks: []check{
			{"y/a x/a tcp/80", false, "", "NetworkPolicy Deny"},
		},
	}, {
		name: "unknown peer: the deny rule denies all, one peer of several",
		cnps: []*cnpv1.ClusterNetworkPolicy{admin("unknown", 1, x, egress(deny, peers(peerNS("team", "b"), peer{}), tcp(80)))},
		checks: []check{
			{"x/a outside tcp/80", false, "Admin Deny unknown[0]", "-"},
			{"x/a z/c tcp/80", false, "Admin Deny unknown[0]", ""},
			{"x/a z/c tcp/81", false, "Admin Deny unknown[0]", ""}, // whatever its protocols
		},
	}, {
		name: "unknown peer: a pass rule denies all",
		cnps: []*cnpv1.ClusterNetworkPolicy{
			admin("unknown", 1, x, ingress(pass, peers(peer{}))),
			admin("accept", 2, x, ingress(accept, peers(peerNS()))),
			baseline("deny", 1, x, ingress(deny, peers(peerNS()))),
		},
		checks: []check{
			{"y/a x/a tcp/80", false, "", "Admin Deny unknown[0]"},
			{"outside x/a tcp/80", false, "", "Admin Deny unknown[0]"},
		},
	}, {
		name: "empty from or to list matches nothing",
		cnps: []*cnpv1.ClusterNetworkPolicy{admin("empty", 1, x, ingress(deny, peers()), egress(deny, peers()))},
		checks: []check{
			{"y/a x/a tcp/80", true, "", "Default Accept"},
			{"x/a y/a tcp/80", true, "Default Accept", ""},
		},
	}, {
		name: "protocols: absent is everything, ICMP included",
		cnps: []*cnpv1.ClusterNetworkPolicy{admin("all", 1, x, ingress(deny, peers(peerNS())))},
		checks: []check{
			{"y/a x/a icmp", false, "", "Admin Deny all[0]"},
			{"y/a x/a sctp/9", false, "", "Admin Deny all[0]"},
		},
	}, {
		name: "protocols: number, range, protocol alone",
		cnps: []*cnpv1.ClusterNetworkPolicy{admin("ports", 1, x, ingress(deny, peers(peerNS()), tcp(53), tcpRange(80, 81), udp(53), sctpAny()))},
		checks: []check{
			{"y/a x/a tcp/53", false, "", "Admin Deny ports[0]"},
			{"y/a x/a tcp/80", false, "", "Admin Deny ports[0]"},
			{"y/a x/a tcp/81", false, "", "Admin Deny ports[0]"},
			{"y/a x/a tcp/82", true, "", "Default Accept"},
			{"y/a x/a tcp/79", true, "", "Default Accept"},
			{"y/a x/a udp/53", false, "", "Admin Deny ports[0]"},
			{"y/a x/a udp/80", true, "", "Default Accept"},
			{"y/a x/a sctp/8080", false, "", "Admin Deny ports[0]"},
			{"y/a x/a icmp", true, "", "Default Accept"},
		},
	}, {
		name: "protocols: a named port is the destination pod's, by name, protocol and number",
		cnps: []*cnpv1.ClusterNetworkPolicy{
			admin("in", 1, x, ingress(deny, peers(peerNS()), named("web"), named("dns"))),
			admin("out", 1, subjNS(corev1.LabelMetadataName, "z"), egress(deny, peers(peerNS()), named("web"))),
		},
		checks: []check{
			{"y/a x/a tcp/80", false, "", "Admin Deny in[0]"}, // web is 80, TCP by default
			{"y/a x/a udp/80", true, "", "Default Accept"},
			{"y/a x/a tcp/8080", true, "", "Default Accept"},
			{"y/a x/a udp/53", false, "", "Admin Deny in[0]"},
			{"y/a x/a tcp/53", true, "", "Default Accept"},
			{"y/a x/b tcp/80", true, "", "Default Accept"}, // x/b declares no ports
			{"z/c y/a tcp/8080", false, "Admin Deny out[0]", ""},
			{"z/c y/a tcp/80", true, "Default Accept", ""},
			{"z/c x/a tcp/80", false, "Admin Deny out[0]", ""},
		},
	}, {
		name: "protocols: an entry with no field: nothing in accept, everything in deny",
		cnps: []*cnpv1.ClusterNetworkPolicy{
			admin("accept", 1, x, ingress(accept, peers(peerNS("team", "b")), proto{})),
			admin("deny", 2, x, ingress(deny, peers(peerNS()), proto{}, tcp(1))),
		},
		checks: []check{
			{"y/a x/a tcp/80", false, "", "Admin Deny deny[0]"},
			{"y/a x/a icmp", false, "", "Admin Deny deny[0]"},
		},
	}, {
		name: "a pod reaching itself through a Service is judged by no policy",
		cnps: []*cnpv1.ClusterNetworkPolicy{admin("deny", 1, subjNS(), ingress(deny, peers(peerNS())), egress(deny, peers(peerNets("0.0.0.0/0"))))},
		checks: []check{
			{"x/a x/a tcp/80 dnat", true, "Self Accept", "Self Accept"},
			{"x/a x/a tcp/80", false, "Admin Deny deny[0]", "Admin Deny deny[0]"},
		},
	}, {
		name: "a quarantined pod: nothing allowed whatever policies say; selectors do not name it",
		cnps: []*cnpv1.ClusterNetworkPolicy{
			admin("accept", 1, subjNS(), ingress(accept, peers(peerNS())), egress(accept, peers(peerNS()))),
			admin("deny-to-y/b", 2, x, egress(deny, peers(peerNets("10.0.1.2/32")))),
		},
		tweak: func(s *k8s.Snapshot) {
			s.Quarantined = []types.NamespacedName{{Namespace: "y", Name: "a"}, {Namespace: "y", Name: "b"}}
		},
		checks: []check{
			{"x/a y/a tcp/80", false, "Default Accept", "Quarantine Deny"},
			{"y/a x/a tcp/80", false, "Quarantine Deny", "Default Accept"},
			{"y/a y/a tcp/80 dnat", true, "Self Accept", "Self Accept"},
			{"x/a y/b tcp/80", false, "Admin Deny deny-to-y/b[0]", "-"},
			{"y/b z/c tcp/80", true, "-", "Default Accept"},
			{"z/c x/a tcp/80", true, "Admin Accept accept[0]", "Admin Accept accept[0]"},
		},
	}, {
		name: "a quarantined namespace: Deny rules take it as selected when they read its labels, Accept and Pass do not",
		cnps: []*cnpv1.ClusterNetworkPolicy{
			admin("accept-team-b", 0, x, ingress(accept, peers(peerNS("team", "b")))),
			admin("pass-team-b", 0, subjNS("team", "b"), egress(pass, peers(peerNets("192.0.2.2/32")))),
			admin("subject-team-b", 1, subjNS("team", "b"), ingress(deny, peers(peerNS())), egress(deny, peers(peerNets("192.0.2.2/32")))),
			admin("subject-name-y", 2, subjPods(sel(corev1.LabelMetadataName, "y"), sel("app", "a")), egress(deny, peers(peerNets("192.0.2.1/32")))),
			admin("peer-team-b", 3, x, ingress(deny, peers(peerNS("team", "b"), peerPods(sel("team", "b"), sel())), tcp(80))),
			admin("peer-name-y", 4, x, ingress(deny, peers(peerNS(corev1.LabelMetadataName, "y")), tcp(81))),
			admin("peer-all", 5, x, ingress(deny, peers(peerPods(sel(), sel("app", "a"))), tcp(82))),
		},
		tweak: func(s *k8s.Snapshot) { s.QuarantinedNamespaces = []string{"y"} },
		checks: []check{
			// y may be team b: the Deny of subject-team-b judges its pods,
			// the Pass of pass-team-b does not let them past it.
			{"z/c y/a tcp/80", false, "", "Admin Deny subject-team-b[0]"},
			{"y/a outside2 tcp/80", false, "Admin Deny subject-team-b[0]", "-"},
			{"y/a outside tcp/80", false, "Admin Deny subject-name-y[0]", "-"},
			// y/a may be a team b peer: accept-team-b does not accept it,
			// peer-team-b denies it.
			{"y/a x/a tcp/80", false, "", "Admin Deny peer-team-b[0]"},
			{"y/a x/a tcp/81", false, "", "Admin Deny peer-name-y[0]"},
			{"y/a x/a tcp/82", false, "", "Admin Deny peer-all[0]"},
			{"y/a x/a tcp/83", true, "", "Default Accept"},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			snap := testCluster()
			snap.ClusterPolicies = tc.cnps
			snap.Policies = tc.nps
			if tc.tweak != nil {
				tc.tweak(snap)
			}
			snap.Sort()
			r := New(snap, node)
			for _, ch := range tc.checks {
				c := conn(ch.conn)
				if got := r.Allowed(c); got != ch.allowed {
					t.Errorf("%s: allowed %v, want %v", ch.conn, got, ch.allowed)
				}
				e, i := r.Decide(c)
				if ch.egress != "" && summary(e) != ch.egress {
					t.Errorf("%s: egress %q, want %q", ch.conn, summary(e), ch.egress)
				}
				if ch.ingress != "" && summary(i) != ch.ingress {
					t.Errorf("%s: ingress %q, want %q", ch.conn, summary(i), ch.ingress)
				}
			}
		})
	}
}

// priorityField is the conformance suite's standard-priority-field.yaml
// with x as gryffindor and y as slytherin, the pass policy at priority p.
func priorityField(p int32) []*cnpv1.ClusterNetworkPolicy {
	gryffindor := subjPods(sel(corev1.LabelMetadataName, "x"), sel())
	slytherin := peers(peerPods(sel(corev1.LabelMetadataName, "y"), sel()))
	return []*cnpv1.ClusterNetworkPolicy{
		admin("priority-50-example", 50, gryffindor, ingress(deny, slytherin), egress(deny, slytherin)),
		admin("old-priority-60-new-priority-40-example", p, gryffindor, ingress(pass, slytherin), egress(pass, slytherin)),
		baseline("default", 10, gryffindor, ingress(accept, slytherin), egress(accept, slytherin)),
	}
}

// TestNetworkPolicyQuarantine: the NetworkPolicy tier reads the snapshot's
// quarantine as the compiler documents it.
func TestNetworkPolicyQuarantine(t *testing.T) {
	all := metav1.LabelSelector{}
	snap := testCluster()
	snap.Policies = []*networkingv1.NetworkPolicy{
		npIngress("x", "from-team-b", &all, sel("team", "b")),
		npIngress("z", "from-y-by-name", &all, sel(corev1.LabelMetadataName, "y")),
	}
	snap.QuarantinedNamespaces = []string{"y"}
	snap.Quarantined = []types.NamespacedName{{Namespace: "x", Name: "b"}}
	r := New(snap, node)
	for _, ch := range []check{
		{"y/a x/a tcp/80", false, "", "NetworkPolicy Deny"}, // team b is not known of y
		{"y/a z/c tcp/80", true, "", "NetworkPolicy Accept"},
		{"z/c x/b tcp/80", false, "", "Quarantine Deny"},
		{"x/b z/c tcp/80", false, "Quarantine Deny", "NetworkPolicy Deny"},
		{"x/b x/b tcp/80 dnat", true, "Self Accept", "Self Accept"},
	} {
		c := conn(ch.conn)
		if got := r.Allowed(c); got != ch.allowed {
			t.Errorf("%s: allowed %v, want %v", ch.conn, got, ch.allowed)
		}
		e, i := r.Decide(c)
		if ch.egress != "" && summary(e) != ch.egress {
			t.Errorf("%s: egress %q, want %q", ch.conn, summary(e), ch.egress)
		}
		if ch.ingress != "" && summary(i) != ch.ingress {
			t.Errorf("%s: ingress %q, want %q", ch.conn, summary(i), ch.ingress)
		}
	}
	e, _ := r.Explain(conn("x/b z/c tcp/80"))
	if e == nil || !e.Quarantined || len(e.Isolating) != 0 {
		t.Errorf("Explain of a quarantined pod: %+v", e)
	}
}
