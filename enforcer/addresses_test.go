package enforcer

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// withAddressOf gives a pod the addresses of another pod of the IP plan.
func withAddressOf(ns, name string) func(*k8s.Pod) {
	return func(p *k8s.Pod) {
		v4, v6 := podIPs(ns, name)
		p.Status.PodIPs = []corev1.PodIP{{IP: v4.String()}, {IP: v6.String()}}
	}
}

func createdAt(sec int64) func(*k8s.Pod) {
	return func(p *k8s.Pod) { p.CreationTimestamp = metav1.NewTime(time.Unix(sec, 0)) }
}

func onNode(n string) func(*k8s.Pod) {
	return func(p *k8s.Pod) { p.Spec.NodeName = n }
}

func terminating(p *k8s.Pod) { p.DeletionTimestamp = &metav1.Time{Time: time.Unix(2e9, 0)} }

func labelled(k, v string) func(*k8s.Pod) {
	return func(p *k8s.Pod) { p.Labels[k] = v }
}

// withPod returns snap with one more pod, sorted in.
func withPod(snap *k8s.Snapshot, p *k8s.Pod) *k8s.Snapshot {
	out := *snap
	out.Pods = append(slices.Clone(snap.Pods), p)
	out.Sort()
	return &out
}

func withoutPod(snap *k8s.Snapshot, ns, name string) *k8s.Snapshot {
	out := *snap
	out.Pods = slices.DeleteFunc(slices.Clone(snap.Pods), func(p *k8s.Pod) bool { return p.Namespace == ns && p.Name == name })
	return &out
}

// TestDuplicateAddressOnePodWins: two pods of this node claiming one
// address, both isolated, once made every batch fail with EEXIST. One pod
// wins the address by a fixed rule, the other is reported naming both,
// and everything else is enforced.
func TestDuplicateAddressOnePodWins(t *testing.T) {
	// x/a allows ingress from y only; x/new (same address as x/a) allows
	// ingress from z only.
	base := cluster(
		policy("x", "a-from-y", selecting("a"), ingressRule(peers(nsPeer("y")))),
		policy("x", "new-from-z", selecting("new"), ingressRule(peers(nsPeer("z")))),
	)
	for _, tc := range []struct {
		name       string
		old, new   []func(*k8s.Pod)
		wantWinner string // "x/a" or "x/new"
		why        string
		remote     bool // x/new is on another node: not isolated here once it has the address
	}{
		{"the pod that is not terminating wins, though older",
			[]func(*k8s.Pod){createdAt(200), terminating}, []func(*k8s.Pod){createdAt(100)}, "x/new", "not terminating", false},
		{"otherwise the newer pod wins",
			[]func(*k8s.Pod){createdAt(100)}, []func(*k8s.Pod){createdAt(200)}, "x/new", "newer", false},
		{"a newer pod wins over an older one also when both terminate",
			[]func(*k8s.Pod){createdAt(200), terminating}, []func(*k8s.Pod){createdAt(100), terminating}, "x/a", "newer", false},
		{"a pod of this node wins over a newer pod of another node",
			[]func(*k8s.Pod){createdAt(100)}, []func(*k8s.Pod){createdAt(200), onNode("node-2")}, "x/a", "on this node", true},
		{"same age: the first by name, only to be deterministic",
			[]func(*k8s.Pod){createdAt(100)}, []func(*k8s.Pod){createdAt(100)}, "x/a", "first by name", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := *base
			snap.Pods = slices.Clone(base.Pods)
			i := slices.IndexFunc(snap.Pods, func(p *k8s.Pod) bool { return p.Namespace == "x" && p.Name == "a" })
			snap.Pods[i] = testPod("x", "a", tc.old...)
			both := withPod(&snap, testPod("x", "new", append([]func(*k8s.Pod){withAddressOf("x", "a"), labelled("pod", "new")}, tc.new...)...))

			inc := NewCompiler(Options{Node: testNode})
			table, problems := inc.Compile(both, -5)
			requireUniqueElements(t, table)
			loser := map[string]string{"x/a": "x/new", "x/new": "x/a"}[tc.wantWinner]
			want := "Pod " + loser + ": pod IP 10.0.1.1 is also held by Pod " + tc.wantWinner + ", which wins it (" + tc.why + ")"
			if len(problems) != 2 || !strings.HasPrefix(problems[0].Error(), want) {
				t.Errorf("problems %q, want two (v4, v6) starting %q", problemStrings(problems), want)
			}
			// The address is decided by the winner's policy alone.
			fromY, fromZ := tracePods(t, table, "y/b", "x/a"), tracePods(t, table, "z/b", "x/a")
			if got := map[bool]string{true: "x/a", false: "x/new"}[fromY && !fromZ]; got != tc.wantWinner || fromY == fromZ {
				t.Errorf("y→addr allowed=%v, z→addr allowed=%v: want the policy of %s alone", fromY, fromZ, tc.wantWinner)
			}
			// explain names the winner as the address's pod, whichever
			// claimed it first.
			x, err := inc.Explain(table, nft.Packet{Src: netip.MustParseAddr("10.0.3.1"), Dst: netip.MustParseAddr("10.0.1.1"), Proto: nft.ProtoTCP, Dport: 80})
			if err != nil || x.To.Pod != tc.wantWinner {
				t.Errorf("explain to 10.0.1.1: %+v, %v; want the pod %s", x, err, tc.wantWinner)
			}
			// Same answer from a fresh compile, whatever the order pods came in.
			again, _ := Compile(both, Options{Node: testNode})
			if nft.Render(again) != nft.Render(table) {
				t.Error("a fresh compile differs")
			}

			// The winner goes: the loser has its address back, with no problem.
			alone := withoutPod(both, "x", strings.TrimPrefix(tc.wantWinner, "x/"))
			table, problems = inc.Compile(alone, -5)
			if len(problems) != 0 {
				t.Errorf("after the winner went: problems %q", problemStrings(problems))
			}
			fromY, fromZ = tracePods(t, table, "y/b", "x/a"), tracePods(t, table, "z/b", "x/a")
			if tc.remote {
				if !fromY || !fromZ {
					t.Errorf("after the local pod went: y→addr allowed=%v, z→addr allowed=%v: a pod of another node is not isolated here", fromY, fromZ)
				}
				return
			}
			if got := map[bool]string{true: "x/a", false: "x/new"}[fromY && !fromZ]; got != loser || fromY == fromZ {
				t.Errorf("after the winner went: y→addr allowed=%v, z→addr allowed=%v: want the policy of %s alone", fromY, fromZ, loser)
			}
		})
	}
}

// TestDuplicateAddressPeers: an address counts in peer sets as its winner's
// labels say. A terminating x/a labelled pod=a whose address now belongs
// to y/new (pod=new) must not let y/new in where pod=a is allowed.
func TestDuplicateAddressPeers(t *testing.T) {
	snap := cluster(policy("z", "from-a", ingressRule(peers(exprPeer(nil, &metav1.LabelSelectorRequirement{
		Key: "pod", Operator: metav1.LabelSelectorOpIn, Values: []string{"a"},
	})))))
	// from-a selects every pod of z and allows pod=a of z only: move x/a
	// into z's selection by making the peer namespace-wide.
	snap.Policies[0].Spec.Ingress[0].From[0].NamespaceSelector = &metav1.LabelSelector{}
	i := slices.IndexFunc(snap.Pods, func(p *k8s.Pod) bool { return p.Namespace == "x" && p.Name == "a" })
	snap.Pods[i] = testPod("x", "a", terminating)
	table, _ := Compile(snap, Options{Node: testNode})
	if !tracePods(t, table, "x/a", "z/b") {
		t.Fatal("x/a, terminating but holding its address, must still be allowed as pod=a")
	}
	reused := withPod(snap, testPod("y", "new", withAddressOf("x", "a"), labelled("pod", "new")))
	table, _ = Compile(reused, Options{Node: testNode})
	if tracePods(t, table, "x/a", "z/b") {
		t.Error("the address of terminating x/a, now y/new's (pod=new), is still allowed as pod=a")
	}
}

// tracePods traces a TCP/80 connection from one pod of the IP plan to
// another, over IPv4.
func tracePods(t *testing.T, table *nft.Table, from, to string) bool {
	t.Helper()
	return traceAllowed(t, table, nft.Packet{Src: addrOf(t, from, nft.IPv4), Dst: addrOf(t, to, nft.IPv4), Proto: nft.ProtoTCP, Dport: 80})
}
