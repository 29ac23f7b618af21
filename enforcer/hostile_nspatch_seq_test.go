package enforcer

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// Hostile review of the namespace patch of peer sets (peerindex.go,
// peerpatch.go): sequences in which a namespace's labels change in the
// same compile as pods of it, including pods whose view changes twice in
// one compile (an address contested by a pod that comes later in the
// walk).

// npPod is a running pod at ips, on node, with labels.
func npPod(ns, name, node string, created int64, labels map[string]string, ips ...string) *k8s.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels,
			CreationTimestamp: metav1.NewTime(time.Unix(1e9+created, 0))},
		Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return k8s.NewPod(p)
}

func npNS(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func npTeamPeer(team string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": team}}}
}

// npSnap is a sorted snapshot with this node and the given objects.
func npSnap(nss []*corev1.Namespace, pods []*k8s.Pod, pols ...*networkingv1.NetworkPolicy) *k8s.Snapshot {
	s := &k8s.Snapshot{Namespaces: nss, Pods: pods, Policies: pols,
		Nodes: []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: testNode}}}}
	s.Sort()
	return s
}

// npCheckOrder fails unless got lists the chains and sets of want in the
// same order (Render compares content; this names the order outright).
func npCheckOrder(t *testing.T, want, got *nft.Table, where string) {
	t.Helper()
	names := func(tb *nft.Table) (chains, sets []string) {
		for _, c := range tb.Chains {
			chains = append(chains, c.Name)
		}
		for _, s := range tb.Sets {
			sets = append(sets, s.Name)
		}
		return
	}
	wc, ws := names(want)
	gc, gs := names(got)
	if !slices.Equal(wc, gc) {
		t.Fatalf("%s: chain order differs:\nfresh       %q\nincremental %q", where, wc, gc)
	}
	if !slices.Equal(ws, gs) {
		t.Fatalf("%s: set order differs:\nfresh       %q\nincremental %q", where, ws, gs)
	}
}

// npSeq compiles snaps with one Compiler, checking each against a fresh
// compile (checkIncremental: table, problems, claims, delta, exact
// patches) and the order of chains and sets.
func npSeq(t *testing.T, snaps ...*k8s.Snapshot) {
	t.Helper()
	opts := Options{Node: testNode}
	inc := NewCompiler(opts)
	var prev *nft.Table
	for i, snap := range snaps {
		where := fmt.Sprintf("snapshot %d", i)
		got := checkIncremental(t, inc, opts, prev, snap, DefaultPriority, where)
		want, _ := Compile(snap, opts)
		npCheckOrder(t, want, got, where)
		npCheckExactSorted(t, inc, where)
		prev = got
	}
}

// npCheckExactSorted fails unless every exact update of inc's last delta
// lists its removed and added elements sorted, without repeats.
func npCheckExactSorted(t *testing.T, inc *Compiler, where string) {
	t.Helper()
	for _, u := range inc.Delta().UpdateSets {
		if !u.Exact {
			continue
		}
		for what, l := range map[string][]nft.Element{"removed": u.Removed, "added": u.Added} {
			for i := 1; i < len(l); i++ {
				if compareElements(l[i-1], l[i]) >= 0 {
					t.Fatalf("%s: set %s: exact update's %s elements not sorted: %v", where, u.New.Name, what, l)
				}
			}
		}
	}
}

// npPeerSetHolds reports whether the peer set of ip's family whose comment
// names the team selector (alone) holds ip.
func npPeerSetHolds(tb *nft.Table, team string, ip netip.Addr) (held, found bool) {
	for _, s := range tb.Sets {
		if s.Comment == "peers ns:team="+team+"|pod:all;" && s.Key == addrKey(nft.FamilyOf(ip)) {
			return inRangeElements(s.Elements, ip), true
		}
	}
	return false, false
}

// TestHostileNSPatchRelabelWithContestedNewPod: in one compile namespace
// a is relabelled into the selector team=red, a new pod a/p appears at
// 10.9.0.9, and a new pod b/q (b stays team=blue) appears at the same
// address and wins it (it is on this node). a/p is resolved first (no
// contest yet when the walk reaches it), then again when b/q contests
// the address: its view changes twice in the compile. A fresh compile
// gives 10.9.0.9 to b/q alone, which team=red does not select: the
// address must not be in the team=red peer set.
func TestHostileNSPatchRelabelWithContestedNewPod(t *testing.T) {
	pol := policy("pol", "allow-red", ingressRule(peers(npTeamPeer("red"))))
	target := npPod("pol", "t", testNode, 0, map[string]string{"app": "t"}, "10.9.1.1")
	keeper := npPod("a", "keeper", "node-2", 0, map[string]string{"app": "k"}, "10.9.2.2")
	blue := map[string]string{"team": "blue"}
	red := map[string]string{"team": "red"}
	s0 := npSnap([]*corev1.Namespace{npNS("a", blue), npNS("b", blue), npNS("pol", nil)},
		[]*k8s.Pod{target, keeper}, pol)
	s1 := npSnap([]*corev1.Namespace{npNS("a", red), npNS("b", blue), npNS("pol", nil)},
		[]*k8s.Pod{target, keeper,
			npPod("a", "p", "node-2", 5, map[string]string{"app": "p"}, "10.9.0.9"),
			npPod("b", "q", testNode, 1, map[string]string{"app": "q"}, "10.9.0.9")}, pol)

	// The fresh compile's reading, stated outright.
	want, _ := Compile(s1, Options{Node: testNode})
	if held, ok := npPeerSetHolds(want, "red", netip.MustParseAddr("10.9.0.9")); !ok || held {
		t.Fatalf("fresh compile: team=red peer set found=%v holds 10.9.0.9=%v; want found, not held", ok, held)
	}
	npSeq(t, s0, s1)
}

// TestHostileNSPatchUnrelabelWithContestedNewPod is the mirror: namespace
// a leaves team=red in the same compile as new pod a/p appears at an
// address that new pod c/q (c is team=red) wins. c/q is a peer: the
// address must be in the set.
func TestHostileNSPatchUnrelabelWithContestedNewPod(t *testing.T) {
	pol := policy("pol", "allow-red", ingressRule(peers(npTeamPeer("red"))))
	target := npPod("pol", "t", testNode, 0, map[string]string{"app": "t"}, "10.9.1.1")
	keeper := npPod("a", "keeper", "node-2", 0, map[string]string{"app": "k"}, "10.9.2.2")
	blue := map[string]string{"team": "blue"}
	red := map[string]string{"team": "red"}
	s0 := npSnap([]*corev1.Namespace{npNS("a", red), npNS("c", red), npNS("pol", nil)},
		[]*k8s.Pod{target, keeper}, pol)
	s1 := npSnap([]*corev1.Namespace{npNS("a", blue), npNS("c", red), npNS("pol", nil)},
		[]*k8s.Pod{target, keeper,
			npPod("a", "p", "node-2", 5, map[string]string{"app": "p"}, "10.9.0.9"),
			npPod("c", "q", testNode, 1, map[string]string{"app": "q"}, "10.9.0.9")}, pol)
	want, _ := Compile(s1, Options{Node: testNode})
	if held, ok := npPeerSetHolds(want, "red", netip.MustParseAddr("10.9.0.9")); !ok || !held {
		t.Fatalf("fresh compile: team=red peer set found=%v holds 10.9.0.9=%v; want found and held", ok, held)
	}
	npSeq(t, s0, s1)
}
