package enforcer

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// The test cluster's pods are 10.0.n.p and fd00::n:p. This node's pod CIDRs
// are 10.0.1.0/24 and fd00::1:0/112 (namespace x's addresses); 10.0.1.9 and
// fd00::1:9 are in them but belong to no pod, until x/new appears there.
func withPodCIDRs(snap *k8s.Snapshot, cidrs ...string) *k8s.Snapshot {
	out := *snap
	out.Nodes = []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: testNode}, Spec: corev1.NodeSpec{PodCIDRs: cidrs}}}
	return &out
}

func newPodAt(v4, v6 string) *k8s.Pod {
	return testPod("x", "new", labelled("pod", "new"), func(p *k8s.Pod) {
		p.Status.PodIPs = []corev1.PodIP{{IP: v4}, {IP: v6}}
	})
}

func TestDenyUnknownClosesUntilKnown(t *testing.T) {
	opts := Options{Node: testNode, DenyUnknown: true}
	snap := withPodCIDRs(cluster(policy("y", "deny", denyIngress)), "10.0.1.0/24", "fd00::1:0/112")
	inc := NewCompiler(opts)
	table, problems := inc.Compile(snap, -5)
	if len(problems) != 0 {
		t.Fatalf("problems: %q", problemStrings(problems))
	}
	a := netip.MustParseAddr
	tr := func(table *nft.Table, src, dst string) bool {
		return traceAllowed(t, table, nft.Packet{Src: a(src), Dst: a(dst), Proto: nft.ProtoTCP, Dport: 80})
	}
	for _, c := range []struct {
		src, dst string
		want     bool
		why      string
	}{
		{"10.0.2.1", "10.0.1.9", false, "to an unknown address of the pod CIDR"},
		{"10.0.1.9", "10.0.3.1", false, "from an unknown address of the pod CIDR"},
		{"fd00::2:1", "fd00::1:9", false, "to an unknown IPv6 address"},
		{"fd00::1:9", "fd00::3:1", false, "from an unknown IPv6 address"},
		{"10.0.2.1", "10.0.1.1", true, "to a known pod without policy"},
		{"10.0.1.1", "10.0.3.1", true, "from a known pod without policy"},
		{"10.0.3.1", "10.0.2.1", false, "a known pod's own policy still decides (y denies ingress)"},
		{"10.0.3.1", "10.9.0.1", true, "outside the pod CIDRs: never affected"},
		{"10.9.0.1", "10.0.3.2", true, "from outside the pod CIDRs: never affected"},
	} {
		if got := tr(table, c.src, c.dst); got != c.want {
			t.Errorf("%s → %s: allowed=%v, want %v (%s)", c.src, c.dst, got, c.want, c.why)
		}
	}
	// Once the pod is known, its address is open in the next compile (it
	// has no policy), and only its address.
	known := withPod(snap, newPodAt("10.0.1.9", "fd00::1:9"))
	table, _ = inc.Compile(known, -5)
	if !tr(table, "10.0.2.1", "10.0.1.9") || !tr(table, "fd00::1:9", "fd00::3:1") {
		t.Error("x/new, now known and selected by no policy, is still closed")
	}
	if tr(table, "10.0.2.1", "10.0.1.10") {
		t.Error("10.0.1.10, still no pod, was opened")
	}
	// Without DenyUnknown nothing is closed.
	plain, _ := Compile(snap, Options{Node: testNode})
	if !tr(plain, "10.0.2.1", "10.0.1.9") {
		t.Error("without DenyUnknown an unknown address is closed")
	}
}

func TestDenyUnknownCIDRs(t *testing.T) {
	base := cluster()
	noNodes := *base
	noNodes.Nodes = nil
	for _, c := range []struct {
		name    string
		snap    *k8s.Snapshot
		flag    []netip.Prefix
		closed  bool   // 10.0.1.9 closed
		problem string // prefix of the one problem expected
	}{
		{"from the Node object", withPodCIDRs(base, "10.0.1.0/24"), nil, true, ""},
		{"the flag wins over the Node object", withPodCIDRs(base, "10.0.2.0/24"), []netip.Prefix{netip.MustParsePrefix("10.0.1.0/24")}, true, ""},
		{"no Node object: loud, nothing closed", &noNodes, nil, false, "Node node-1: no Node object"},
		{"empty podCIDRs: loud, nothing closed", base, nil, false, "Node node-1: spec.podCIDRs is empty"},
		{"a bad CIDR is named", withPodCIDRs(base, "10.0.1.0/24", "bogus"), nil, true, `Node node-1: spec.podCIDRs "bogus"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			table, problems := Compile(c.snap, Options{Node: testNode, DenyUnknown: true, PodCIDRs: c.flag})
			got := traceAllowed(t, table, nft.Packet{Src: netip.MustParseAddr("10.0.2.1"), Dst: netip.MustParseAddr("10.0.1.9"), Proto: nft.ProtoTCP, Dport: 80})
			if got == c.closed {
				t.Errorf("10.0.1.9 allowed=%v, want closed=%v", got, c.closed)
			}
			switch {
			case c.problem == "" && len(problems) != 0:
				t.Errorf("problems %q, want none", problemStrings(problems))
			case c.problem != "" && (len(problems) != 1 || !strings.HasPrefix(problems[0].Error(), c.problem)):
				t.Errorf("problems %q, want one starting %q", problemStrings(problems), c.problem)
			}
		})
	}
}
