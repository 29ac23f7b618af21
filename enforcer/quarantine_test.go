package enforcer

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// quarantineCluster is the test cluster with x/c moved to node-2, and
// policies that would grant a pod without the label tier everything:
//
//   - x/no-tier selects the pods of x without a tier label and allows
//     every ingress and egress;
//   - y/from-every-pod lets y/a in from every pod of every namespace;
//   - y/from-no-tier lets y/b in from every pod without a tier label;
//   - z/from-x-block lets z/a in from x's addresses, by ipBlock.
//
// Every pod lacks tier, so each of these selects a stand-in that lost its
// labels: only a quarantine keeps them from opening it.
func quarantineCluster(quarantined ...string) *k8s.Snapshot {
	noTier := &metav1.LabelSelectorRequirement{Key: "tier", Operator: metav1.LabelSelectorOpDoesNotExist}
	snap := cluster(
		policy("x", "no-tier", func(np *networkingv1.NetworkPolicy) {
			np.Spec.PodSelector = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{*noTier}}
		}, types(networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress),
			ingressRule(nil), egressRule(nil)),
		policy("y", "from-every-pod", selecting("a"),
			ingressRule(peers(networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{}, NamespaceSelector: &metav1.LabelSelector{}}))),
		policy("y", "from-no-tier", selecting("b"),
			ingressRule(peers(exprPeer(&metav1.LabelSelectorRequirement{Key: "ns", Operator: metav1.LabelSelectorOpExists}, noTier)))),
		policy("z", "from-x-block", selecting("a"),
			ingressRule(peers(ipBlock("10.0.1.0/24"), ipBlock("fd00::1:0/112")))),
	)
	for i, p := range snap.Pods {
		if p.Namespace == "x" && p.Name == "c" {
			p = p.DeepCopy()
			p.Spec.NodeName = "node-2"
			snap.Pods[i] = p
		}
	}
	for _, q := range quarantined {
		ns, name, _ := strings.Cut(q, "/")
		snap.Quarantined = append(snap.Quarantined, ktypes.NamespacedName{Namespace: ns, Name: name})
	}
	return snap
}

// A quarantined pod (its true labels unknown) is isolated both ways with
// nothing allowed, is selected by no policy (not even one on the absence
// of a label), and is no pod selector's peer; ipBlock peers still match
// its addresses, and it still reaches itself through a Service.
func TestCompileQuarantinedPod(t *testing.T) {
	type check struct {
		from, to string
		want     bool
		why      string
	}
	for _, tc := range []struct {
		name   string
		snap   *k8s.Snapshot
		checks []check
	}{{
		name: "none quarantined",
		snap: quarantineCluster(),
		checks: []check{
			{"y/b", "x/a", true, "x/no-tier allows every ingress"},
			{"x/a", "y/c", true, "x/no-tier allows every egress"},
			{"x/c", "y/a", true, "a pod is a peer of y/from-every-pod"},
			{"x/c", "y/b", true, "a pod without tier is a peer of y/from-no-tier"},
		},
	}, {
		name: "x/a and x/c quarantined",
		snap: quarantineCluster("x/a", "x/c"),
		checks: []check{
			{"y/b", "x/a", false, "quarantined: isolated for ingress, selected by no policy"},
			{"x/b", "x/a", false, "quarantined: isolated for ingress"},
			{"x/a", "y/c", false, "quarantined: isolated for egress"},
			{"x/a", "z/a", false, "quarantined: isolated for egress, even where an ipBlock lets it in"},
			{"x/a", "x/a", true, "a pod reaches itself through a Service"},
			{"x/c", "y/a", false, "quarantined: no pod selector's peer, even one selecting every pod"},
			{"x/c", "y/b", false, "quarantined: no peer of a selector on a label's absence"},
			{"x/c", "z/a", true, "an ipBlock peer matches a quarantined pod's address"},
			{"x/b", "y/a", true, "other pods stay peers"},
			{"x/b", "y/b", true, "other pods stay peers of a selector on a label's absence"},
			{"y/b", "x/b", true, "x/no-tier still selects the other pods"},
			{"y/c", "y/b", true, "other pods stay peers"},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			table, problems := Compile(tc.snap, Options{Node: testNode})
			if len(problems) > 0 {
				t.Fatalf("problems: %v", problems)
			}
			for _, f := range []nft.IPFamily{nft.IPv4, nft.IPv6} {
				for _, c := range tc.checks {
					pkt := nft.Packet{Src: addrOf(t, c.from, f), Dst: addrOf(t, c.to, f), Proto: nft.ProtoTCP, Dport: 80, Mark: otherMark, DNAT: c.from == c.to}
					if got := traceAllowed(t, table, pkt); got != c.want {
						t.Errorf("%s %s→%s: allowed=%v, want %v (%s)", f.Keyword(), c.from, c.to, got, c.want, c.why)
					}
				}
			}
		})
	}
}

// The quarantined pod's chains name why they drop, and explain says it.
func TestCompileQuarantinedPodChainAndExplain(t *testing.T) {
	c := NewCompiler(Options{Node: testNode})
	table, _ := c.Compile(quarantineCluster("x/a"), DefaultPriority)
	rendered := nft.Render(table)
	for _, d := range []string{"ingress", "egress"} {
		if !strings.Contains(rendered, "chain "+d+"-pod-") || !strings.Contains(rendered, `drop comment "x/a: quarantined, its labels are not known: nothing allowed"`) {
			t.Errorf("no %s pod chain of x/a that drops as quarantined:\n%s", d, rendered)
		}
	}
	x, err := c.Explain(table, nft.Packet{Src: addrOf(t, "y/b", nft.IPv4), Dst: addrOf(t, "x/a", nft.IPv4), Proto: nft.ProtoTCP, Dport: 80})
	if err != nil {
		t.Fatal(err)
	}
	if x.Verdict != nft.Drop || x.Ingress == nil || !x.Ingress.Quarantined || x.Ingress.Allowed() {
		t.Errorf("explain y/b→x/a: %+v, want dropped by x/a's quarantine", x)
	}
	if s := x.String(); !strings.Contains(s, "ingress: x/a is quarantined") {
		t.Errorf("explain does not say x/a is quarantined:\n%s", s)
	}
}

// A source may hand out the same pod object when only its quarantine
// changes: the Compiler must still follow it, both ways.
func TestIncrementalQuarantineOfTheSamePod(t *testing.T) {
	free := quarantineCluster()
	inc := NewCompiler(Options{Node: testNode})
	for i, snap := range []*k8s.Snapshot{free, withQuarantine(free, "x/a", "x/c"), withQuarantine(free, "x/c"), free} {
		got, _ := inc.Compile(snap, DefaultPriority)
		want, _ := Compile(snap, Options{Node: testNode})
		if d := cmp.Diff(nft.Render(want), nft.Render(got)); d != "" {
			t.Fatalf("step %d (quarantined %v): incremental differs from a full compile (-full +incremental):\n%s", i, snap.Quarantined, d)
		}
	}
}

// withQuarantine returns snap with the same objects and the given pods
// quarantined.
func withQuarantine(snap *k8s.Snapshot, keys ...string) *k8s.Snapshot {
	s := *snap
	s.Quarantined = nil
	for _, q := range keys {
		ns, name, _ := strings.Cut(q, "/")
		s.Quarantined = append(s.Quarantined, ktypes.NamespacedName{Namespace: ns, Name: name})
	}
	return &s
}
