//go:build linux

package enforcer

import (
	"maps"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	policyv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/nftpolicy/nftpolicy/internal/netns"
	"github.com/nftpolicy/nftpolicy/internal/reference"
	"github.com/nftpolicy/nftpolicy/internal/testns"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// TestHostileRound6NamedKernelPackets: real packets through egress rules on
// named ports whose sets now hold only the pods the rules' peers name.
// Pods x/a, x/b, y/a, y/b, z/a on one node, each serving TCP 80 and 81;
// which of the two a pod calls "web" is set per pod in the snapshot (the
// servers answer on both), so the port a named rule allows differs per
// destination. A sequence of changes, each written as the Compiler's delta
// (the first table whole): destinations relabelled into the peers, their
// "web" renumbered, an Admin Deny on "web", a pod record replaced by
// another at the same address with another "web", the policy's only
// target relabelled out and back (inactive, active), the peers widened
// to every namespace. At each state every probe (TCP 80 and 81, both
// families) must get through exactly when the tracer of the compiled table
// says so and when the reference says it should; and the incremental
// table must render as a fresh compile.
func TestHostileRound6NamedKernelPackets(t *testing.T) {
	testns.RequireRoot(t, "ip", "nft")
	cl, err := netns.NewCluster(netns.Options{Name: "nftr6", TCPPorts: []int{80, 81}, UDPPorts: []int{80}, Timeout: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	node, err := cl.AddNode("n1")
	if err != nil {
		t.Fatal(err)
	}
	var pods []*netns.Pod
	for _, k := range []string{"x/a", "x/b", "y/a", "y/b", "z/a"} {
		nsName, name, _ := strings.Cut(k, "/")
		p, err := cl.AddPod(node, nsName, name)
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	base, objErrs, err := k8s.LoadFS(fstest.MapFS{"cluster.yaml": {Data: []byte(cl.Manifests())}})
	if err != nil || len(objErrs) > 0 {
		t.Fatal(err, objErrs)
	}
	conn, err := nft.Open(node.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	web := func(port int32) []corev1.ContainerPort {
		return []corev1.ContainerPort{{Name: "web", ContainerPort: port, Protocol: corev1.ProtocolTCP}}
	}
	// The state of the pods: web port, labels, and the name the record of
	// the pod at y/a's address goes by.
	type podState struct {
		name   string
		labels map[string]string
		ports  []corev1.ContainerPort
	}
	state := map[string]*podState{}
	for _, p := range base.Pods {
		state[p.Namespace+"/"+p.Name] = &podState{name: p.Name, labels: maps.Clone(p.Labels), ports: web(80)}
	}
	state["y/b"].ports = web(81)
	state["z/a"].ports = web(81)
	snapshot := func(nps []*networkingv1.NetworkPolicy, cnps []*policyv1beta1.ClusterNetworkPolicy) *k8s.Snapshot {
		s := *base
		s.Pods = nil
		for _, p := range base.Pods {
			st := state[p.Namespace+"/"+p.Name]
			q := *p
			q.Name, q.Labels, q.Spec.Ports = st.name, maps.Clone(st.labels), st.ports
			q.CreationTimestamp = metav1.Unix(1_700_000_000, 0)
			if st.name != p.Name {
				q.CreationTimestamp = metav1.Unix(1_700_000_100, 0)
			}
			s.Pods = append(s.Pods, &q)
		}
		s.Policies = nps
		s.ClusterPolicies = cnps
		s.Sort()
		return &s
	}
	np := func(to []networkingv1.NetworkPolicyPeer) *networkingv1.NetworkPolicy {
		return policy("x", "egress-web", selecting("a"), types(networkingv1.PolicyTypeEgress), egressRule(to, namedPort(tcp, "web")))
	}
	// x/b may reach anything on 80 and 81 (so that the Admin Deny has
	// something to take away from it).
	open := policy("x", "open-b", selecting("b"), types(networkingv1.PolicyTypeEgress), egressRule(nil, port(tcp, 80), port(tcp, 81)))
	toYa := []networkingv1.NetworkPolicyPeer{nsPodPeer("y", "a")}
	everyNS := []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}}
	deny := &policyv1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "deny-y-web"}}
	deny.Spec.Tier = policyv1beta1.AdminTier
	deny.Spec.Subject.Namespaces = &metav1.LabelSelector{MatchLabels: map[string]string{"ns": "x"}}
	deny.Spec.Egress = []policyv1beta1.ClusterNetworkPolicyEgressRule{{
		Action:    policyv1beta1.ClusterNetworkPolicyRuleActionDeny,
		To:        []policyv1beta1.ClusterNetworkPolicyEgressPeer{{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"ns": "y"}}}},
		Protocols: []policyv1beta1.ClusterNetworkPolicyProtocol{{DestinationNamedPort: "web"}},
	}}

	inc := NewCompiler(Options{Node: node.Name()})
	var prev *nft.Table
	check := func(what string, snap *k8s.Snapshot) {
		t.Helper()
		got, _ := inc.Compile(snap, DefaultPriority)
		fresh, _ := NewCompiler(Options{Node: node.Name()}).Compile(snap, DefaultPriority)
		if a, b := nft.Render(got), nft.Render(fresh); a != b {
			t.Fatalf("%s: the incremental table is not a fresh compile's:\n%s", what, r6FirstDiff(a, b))
		}
		if prev == nil {
			if _, err := conn.Apply(got); err != nil {
				t.Fatalf("%s: the kernel refuses the table: %v", what, err)
			}
		} else {
			d := inc.Delta()
			if _, err := conn.WriteDeltaAt(d, got, 0); err != nil {
				t.Fatalf("%s: the kernel refuses the delta: %v\n%.3000s", what, err, nft.RenderDelta(d, got))
			}
		}
		if drift, err := conn.Drift(got); err != nil || drift != "" {
			t.Fatalf("%s: the kernel drifts from the table: %q, %v", what, drift, err)
		}
		prev = got
		tracer := nft.NewTracer(got)
		ref := reference.New(snap, node.Name())
		for _, family := range []string{netns.IPv4, netns.IPv6} {
			for _, port := range []int{80, 81} {
				expect := netns.NewMatrix(netns.Keys(pods), true)
				paths := map[[2]string]string{}
				for _, from := range pods {
					for _, to := range pods {
						if from == to {
							continue
						}
						pkt := nft.Packet{Src: from.Addr(family), Dst: to.Addr(family), Proto: nft.ProtoTCP, Dport: uint16(port)}
						tr, err := tracer.Trace(forwardChainName(), pkt)
						if err != nil {
							t.Fatal(err)
						}
						expect.Set(from.Key(), to.Key(), tr.Verdict == nft.Accept)
						paths[[2]string{from.Key(), to.Key()}] = strings.Join(tr.Path, " | ")
					}
				}
				m := cl.ProbeMatrixExpect(pods, family, netns.TCP, port, expect)
				for _, from := range pods {
					for _, to := range pods {
						if from == to {
							continue
						}
						want := ref.Allowed(reference.Conn{Src: from.Addr(family), Dst: to.Addr(family), Proto: nft.ProtoTCP, Port: uint16(port)})
						traced, kernel := expect.Get(from.Key(), to.Key()), m.Get(from.Key(), to.Key())
						if kernel != want || traced != want {
							kind := "LEAK"
							if !kernel {
								kind = "over-deny"
							}
							t.Errorf("%s: %s: %s -> %s %s tcp/%d: kernel %v, tracer %v, reference %v\n    %s",
								what, kind, from.Key(), to.Key(), family, port, kernel, traced, want, paths[[2]string{from.Key(), to.Key()}])
						}
					}
				}
			}
		}
	}

	check("x/a to y/a on web (80)", snapshot([]*networkingv1.NetworkPolicy{np(toYa), open}, nil))
	state["y/b"].labels["pod"] = "a"
	check("y/b relabelled into the peers (its web is 81)", snapshot([]*networkingv1.NetworkPolicy{np(toYa), open}, nil))
	state["y/b"].ports = web(80)
	check("y/b's web renumbered to 80", snapshot([]*networkingv1.NetworkPolicy{np(toYa), open}, nil))
	check("Admin Deny from x to y on web", snapshot([]*networkingv1.NetworkPolicy{np(toYa), open}, []*policyv1beta1.ClusterNetworkPolicy{deny}))
	state["y/a"].name, state["y/a"].labels, state["y/a"].ports = "a2", map[string]string{"pod": "other"}, web(81)
	check("y/a's address now y/a2 (pod=other, web 81)", snapshot([]*networkingv1.NetworkPolicy{np(toYa), open}, []*policyv1beta1.ClusterNetworkPolicy{deny}))
	check("the Admin Deny goes", snapshot([]*networkingv1.NetworkPolicy{np(toYa), open}, nil))
	state["x/a"].labels["pod"] = "idle"
	check("x/a relabelled out: egress-web inactive", snapshot([]*networkingv1.NetworkPolicy{np(toYa), open}, nil))
	state["y/a"].labels = map[string]string{"pod": "a"}
	state["z/a"].ports = web(80)
	check("while inactive: y/a2 back into the peers, z/a's web 80", snapshot([]*networkingv1.NetworkPolicy{np(toYa), open}, nil))
	state["x/a"].labels["pod"] = "a"
	check("x/a relabelled back: egress-web active", snapshot([]*networkingv1.NetworkPolicy{np(toYa), open}, nil))
	check("peers widened to every namespace", snapshot([]*networkingv1.NetworkPolicy{np(everyNS), open}, nil))
	check("and the Admin Deny back", snapshot([]*networkingv1.NetworkPolicy{np(everyNS), open}, []*policyv1beta1.ClusterNetworkPolicy{deny}))
	check("peers: every destination (no to)", snapshot([]*networkingv1.NetworkPolicy{np(nil), open}, []*policyv1beta1.ClusterNetworkPolicy{deny}))
	check("back to y/a alone", snapshot([]*networkingv1.NetworkPolicy{np(toYa), open}, []*policyv1beta1.ClusterNetworkPolicy{deny}))
}
