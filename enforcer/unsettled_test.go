package enforcer

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// A tcpProbe is one TCP connection a test expects allowed or not, why saying
// what decides it.
type tcpProbe struct {
	from, to string
	port     uint16
	want     bool
	why      string
}

// checkTCPProbes traces each probe over IPv4 and IPv6.
func checkTCPProbes(t *testing.T, table *nft.Table, probes []tcpProbe) {
	t.Helper()
	for _, f := range []nft.IPFamily{nft.IPv4, nft.IPv6} {
		for _, c := range probes {
			src, dst := addrOf(t, c.from, f), addrOf(t, c.to, f)
			if v4 := f == nft.IPv4; src.Is4() != v4 || dst.Is4() != v4 {
				continue // a literal address of the other family
			}
			pkt := nft.Packet{Src: src, Dst: dst, Proto: nft.ProtoTCP, Dport: c.port, Mark: otherMark}
			if got := traceAllowed(t, table, pkt); got != c.want {
				t.Errorf("%s %s→%s:%d allowed=%v, want %v (%s)", f.Keyword(), c.from, c.to, c.port, got, c.want, c.why)
			}
		}
	}
}

// quarantinedNSCluster is the test cluster with env: prod on namespace y
// (dropped when withoutY: the namespace object left out, as the manifests
// source left a rejected one out before quarantine) and the policies:
//
//   - x/b-notprod lets x/b in on port 81 from namespaces whose env is not
//     prod (the adversarial pass's reproduction);
//   - x/b-no-env lets x/b in on port 82 from namespaces without env;
//   - x/c-by-name lets x/c in from namespace y, named by its name label;
//   - x/a-every-ns lets x/a in from every namespace (an empty selector);
//   - z/a-ns-y lets z/a in from namespaces labelled ns=y;
//   - y/b-own lets y/b in from pod a of its own namespace (a podSelector
//     alone).
func quarantinedNSCluster(withoutY bool, quarantined ...string) *k8s.Snapshot {
	nsExpr := func(key string, op metav1.LabelSelectorOperator, values ...string) networkingv1.NetworkPolicyPeer {
		return exprPeer(&metav1.LabelSelectorRequirement{Key: key, Operator: op, Values: values}, nil)
	}
	snap := cluster(
		policy("x", "b-notprod", selecting("b"), ingressRule(peers(nsExpr("env", metav1.LabelSelectorOpNotIn, "prod")), port(tcp, 81))),
		policy("x", "b-no-env", selecting("b"), ingressRule(peers(nsExpr("env", metav1.LabelSelectorOpDoesNotExist)), port(tcp, 82))),
		policy("x", "c-by-name", selecting("c"), ingressRule(peers(networkingv1.NetworkPolicyPeer{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "y"}}}))),
		policy("x", "a-every-ns", selecting("a"), ingressRule(peers(networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{}}))),
		policy("z", "a-ns-y", selecting("a"), ingressRule(peers(nsPeer("y")))),
		policy("y", "b-own", selecting("b"), ingressRule(peers(podPeer("a")))),
	)
	var nss []*corev1.Namespace
	for _, ns := range snap.Namespaces {
		if ns.Name == "y" {
			if withoutY {
				continue
			}
			ns = ns.DeepCopy()
			ns.Labels["env"] = "prod"
		}
		nss = append(nss, ns)
	}
	snap.Namespaces = nss
	snap.QuarantinedNamespaces = quarantined
	return snap
}

// A quarantined namespace (its true labels unknown: a rejected Namespace)
// has its pods named by no namespace selector but one that reads only the
// namespace's name; its own policies still select its pods, and its pods
// still reach other namespaces' pods where nothing isolates them. Without
// the quarantine, the namespace left out carried only its name label, so
// "env NotIn [prod]" named its pods, where the true labels (env: prod)
// would not.
func TestCompileQuarantinedNamespace(t *testing.T) {
	ok := []tcpProbe{
		{"y/a", "x/b", 80, false, "x/b isolated, port 80 allowed to none"},
		{"z/a", "x/b", 81, true, "z has no env: env NotIn [prod]"},
		{"z/a", "x/b", 82, true, "z has no env: env DoesNotExist"},
		{"y/a", "x/c", 80, true, "y named by its name label"},
		{"z/a", "x/c", 80, false, "only y named by its name label"},
		{"y/a", "x/a", 80, true, "every namespace"},
		{"y/a", "y/b", 80, true, "pod a of y/b's own namespace"},
		{"y/c", "y/b", 80, false, "only pod a of y/b's own namespace"},
		{"y/a", "z/b", 80, true, "z/b is not isolated"},
	}
	for _, tc := range []struct {
		name   string
		snap   *k8s.Snapshot
		probes []tcpProbe
	}{{
		name: "y valid",
		snap: quarantinedNSCluster(false),
		probes: append(slicesClone(ok),
			tcpProbe{"y/a", "x/b", 81, false, "y is env: prod"},
			tcpProbe{"y/a", "x/b", 82, false, "y has env"},
			tcpProbe{"y/a", "z/a", 80, true, "y is ns=y"}),
	}, {
		name: "y left out, not quarantined: what the compiler does with a namespace it has no object for",
		snap: quarantinedNSCluster(true),
		probes: append(slicesClone(ok),
			tcpProbe{"y/a", "x/b", 81, true, "y has only its name label"},
			tcpProbe{"y/a", "z/a", 80, false, "y has only its name label"}),
	}, {
		name: "y quarantined, with the labels its stand-in kept",
		snap: quarantinedNSCluster(false, "y"),
		probes: append(slicesClone(ok),
			tcpProbe{"y/a", "x/b", 81, false, "quarantined: named by no selector on labels (the bug: open)"},
			tcpProbe{"y/a", "x/b", 82, false, "quarantined: named by no selector on labels"},
			tcpProbe{"y/a", "z/a", 80, false, "quarantined: not even a selector its kept labels match"}),
	}, {
		name: "y quarantined, no object",
		snap: quarantinedNSCluster(true, "y"),
		probes: append(slicesClone(ok),
			tcpProbe{"y/a", "x/b", 81, false, "quarantined: named by no selector on labels (the bug: open)"},
			tcpProbe{"y/a", "x/b", 82, false, "quarantined: named by no selector on labels"},
			tcpProbe{"y/a", "z/a", 80, false, "quarantined"}),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			table, problems := Compile(tc.snap, Options{Node: testNode})
			if len(problems) > 0 {
				t.Fatalf("problems: %v", problems)
			}
			checkTCPProbes(t, table, tc.probes)
		})
	}
}

func slicesClone(p []tcpProbe) []tcpProbe { return append([]tcpProbe(nil), p...) }

// A namespace entering or leaving quarantine with the same objects changes
// the peer sets at once, as a full compile would make them.
func TestIncrementalQuarantinedNamespace(t *testing.T) {
	free := quarantinedNSCluster(false)
	inc := NewCompiler(Options{Node: testNode})
	for i, q := range [][]string{nil, {"y"}, {"y", "z"}, {"z"}, nil} {
		s := *free
		s.QuarantinedNamespaces = q
		got, _ := inc.Compile(&s, DefaultPriority)
		want, _ := Compile(&s, Options{Node: testNode})
		if d := cmp.Diff(nft.Render(want), nft.Render(got)); d != "" {
			t.Fatalf("step %d (quarantined %v): incremental differs from a full compile (-full +incremental):\n%s", i, q, d)
		}
		wantOpen := len(q) == 0 || q[0] != "y"
		if got := traceAllowed(t, got, nft.Packet{Src: addrOf(t, "y/a", nft.IPv4), Dst: addrOf(t, "z/a", nft.IPv4), Proto: nft.ProtoTCP, Dport: 80}); got != wantOpen {
			t.Errorf("step %d (quarantined %v): y/a→z/a allowed=%v, want %v", i, q, got, wantOpen)
		}
	}
}

// unsettledCluster is the test cluster with x/b isolated for ingress by
// x/deny-b and pod y/c moved to node-2, x/b's Pod (whichever of its
// definitions) and the unsettled entry placing it on nodes at ips.
func unsettledCluster(nodes []string, ips ...string) *k8s.Snapshot {
	snap := cluster(policy("x", "deny-b", selecting("b"), denyIngress),
		policy("z", "from-x-b", selecting("a"), ingressRule(peers(nsPodPeer("x", "b")))))
	for i, p := range snap.Pods {
		if p.Namespace == "y" && p.Name == "c" {
			p = p.DeepCopy()
			p.Spec.NodeName = "node-2"
			snap.Pods[i] = p
		}
	}
	if nodes != nil {
		snap.Quarantined = []ktypes.NamespacedName{{Namespace: "x", Name: "b"}}
		snap.Unsettled = []k8s.UnsettledPod{{Namespace: "x", Name: "b", Nodes: nodes, IPs: ips}}
	}
	return snap
}

// A pod whose definitions disagree on where it is (k8s.Snapshot.Unsettled)
// is quarantined at every address they give, on this node when one names
// it; an address another pod holds stays that pod's on the same node, and
// this node's claim wins over another node's.
func TestCompileUnsettledPod(t *testing.T) {
	for _, tc := range []struct {
		name     string
		snap     *k8s.Snapshot
		probes   []tcpProbe
		problems []string
	}{{
		name: "settled",
		snap: unsettledCluster(nil),
		probes: []tcpProbe{
			{"y/a", "x/b", 80, false, "x/deny-b"},
			{"x/b", "z/a", 80, true, "z/from-x-b"},
			{"x/b", "y/a", 80, true, "x/b is not isolated for egress"},
		},
	}, {
		name: "at its address and another, on this node and node-2",
		snap: unsettledCluster([]string{"node-1", "node-2"}, "10.0.1.2", "10.0.1.99", "fd00::1:2"),
		probes: []tcpProbe{
			{"y/a", "x/b", 80, false, "quarantined"},
			{"y/a", "10.0.1.99", 80, false, "quarantined at every address a definition gives"},
			{"x/b", "y/a", 80, false, "quarantined: isolated for egress"},
			{"10.0.1.99", "y/a", 80, false, "quarantined: isolated for egress at every address"},
			{"x/b", "z/a", 80, false, "quarantined: named by no pod selector"},
			{"y/a", "x/c", 80, true, "other pods as before"},
		},
	}, {
		name: "one address another pod of this node holds: that pod's",
		snap: unsettledCluster([]string{"node-1"}, "10.0.1.2", "10.0.1.3", "fd00::1:2"),
		probes: []tcpProbe{
			{"y/a", "x/b", 80, false, "quarantined"},
			{"y/a", "x/c", 80, true, "x/c keeps its address: not isolated"},
			{"x/c", "y/a", 80, true, "x/c keeps its address: not isolated"},
		},
		problems: []string{"Pod x/b: pod IP 10.0.1.3 is also held by Pod x/c, which wins it (its definitions agree on where it is, this pod's do not): policy treats the address as that pod's"},
	}, {
		name: "an address a pod of another node holds: this node's claim wins here",
		snap: unsettledCluster([]string{"node-1"}, "10.0.1.2", "10.0.2.3", "fd00::1:2"),
		probes: []tcpProbe{
			{"y/a", "x/b", 80, false, "quarantined"},
			{"y/a", "10.0.2.3", 80, false, "quarantined here: y/c's own node isolates it as y/c"},
		},
		problems: []string{"Pod y/c: pod IP 10.0.2.3 is also held by Pod x/b, which wins it (on this node): policy treats the address as that pod's"},
	}, {
		name: "on another node only: not this node's to isolate, and no peer",
		snap: unsettledCluster([]string{"node-2"}, "10.0.1.2", "fd00::1:2"),
		probes: []tcpProbe{
			{"y/a", "x/b", 80, true, "isolated on node-2, not here"},
			{"x/b", "z/a", 80, false, "quarantined: named by no pod selector"},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			table, problems := Compile(tc.snap, Options{Node: testNode})
			if d := cmp.Diff(tc.problems, problemStrings(problems)); d != "" {
				t.Errorf("problems (-want +got):\n%s", d)
			}
			checkTCPProbes(t, table, tc.probes)
		})
	}
}

// A pod's unsettled entry may change while the source hands out the same
// Pod object: the Compiler follows it, as a full compile would.
func TestIncrementalUnsettledPod(t *testing.T) {
	inc := NewCompiler(Options{Node: testNode})
	base := unsettledCluster(nil)
	for i, u := range []*k8s.UnsettledPod{
		nil,
		{Namespace: "x", Name: "b", Nodes: []string{"node-2"}, IPs: []string{"10.0.1.2"}},
		{Namespace: "x", Name: "b", Nodes: []string{"node-1", "node-2"}, IPs: []string{"10.0.1.2"}},
		{Namespace: "x", Name: "b", Nodes: []string{"node-1", "node-2"}, IPs: []string{"10.0.1.2", "10.0.1.3"}},
		nil,
	} {
		s := *base
		if u != nil {
			s.Quarantined = []ktypes.NamespacedName{{Namespace: "x", Name: "b"}}
			s.Unsettled = []k8s.UnsettledPod{*u}
		}
		got, _ := inc.Compile(&s, DefaultPriority)
		want, _ := Compile(&s, Options{Node: testNode})
		if d := cmp.Diff(nft.Render(want), nft.Render(got)); d != "" {
			t.Fatalf("step %d (%v): incremental differs from a full compile (-full +incremental):\n%s", i, u, d)
		}
	}
}

// An unsettled pod's addresses may be two things: neither reaches the other
// as "itself" through a Service, nor itself, while a quarantined pod whose
// address is known still reaches itself through a Service.
func TestCompileUnsettledPodHasNoSelfExemption(t *testing.T) {
	table, _ := Compile(unsettledCluster([]string{"node-1"}, "10.0.1.2", "10.0.1.99", "fd00::1:2"), Options{Node: testNode})
	a, b := netip.MustParseAddr("10.0.1.2"), netip.MustParseAddr("10.0.1.99")
	for _, p := range []nft.Packet{
		{Src: a, Dst: b, Proto: nft.ProtoTCP, Dport: 80, DNAT: true},
		{Src: b, Dst: a, Proto: nft.ProtoTCP, Dport: 80, DNAT: true},
		{Src: a, Dst: a, Proto: nft.ProtoTCP, Dport: 80, DNAT: true},
	} {
		if traceAllowed(t, table, p) {
			t.Errorf("%s -> %s through a Service: allowed, though the pod is unsettled at both", p.Src, p.Dst)
		}
	}
	q := unsettledCluster(nil)
	for _, pod := range q.Pods {
		if pod.Namespace == "x" && pod.Name == "b" {
			q.Quarantined = []ktypes.NamespacedName{{Namespace: "x", Name: "b"}}
			self := netip.MustParseAddr(pod.Status.PodIPs[0].IP)
			table, _ := Compile(q, Options{Node: testNode})
			if !traceAllowed(t, table, nft.Packet{Src: self, Dst: self, Proto: nft.ProtoTCP, Dport: 80, DNAT: true}) {
				t.Errorf("a quarantined pod at a known address cannot reach itself through a Service")
			}
		}
	}
}

// A quarantined pod that becomes unsettled at the same addresses, the
// same object, loses its self-exemption at once: its view (and claim) is
// the same, but its chains read whether it is unsettled (the hostile
// review of issue 15 found them kept).
func TestBecomingUnsettledRebuildsItsChains(t *testing.T) {
	q := cluster()
	q.Quarantined = []ktypes.NamespacedName{{Namespace: "x", Name: "a"}}
	u := cluster()
	u.Pods = q.Pods
	u.Quarantined = q.Quarantined
	v4, v6 := podIPs("x", "a")
	u.Unsettled = []k8s.UnsettledPod{{Namespace: "x", Name: "a", Nodes: []string{testNode}, IPs: []string{v4.String(), v6.String()}}}
	opts := Options{Node: testNode}
	inc := NewCompiler(opts)
	prev := checkIncremental(t, inc, opts, nil, q, DefaultPriority, "quarantined")
	prev = checkIncremental(t, inc, opts, prev, u, DefaultPriority, "unsettled")
	checkIncremental(t, inc, opts, prev, q, DefaultPriority, "quarantined again")
}
