package enforcer

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// r7FlapSnap is a union at the default unionRunLength's edge: target
// t/tgt on this node allows, on every port, namespaces r1 twice (team=red and
// env=prod: two lists, one union). r1 holds runs runs of 4 consecutive pods, apart,
// the first run of 5 when extra: 4*runs+1 addresses in runs ranges, an
// average just above 4 (ranges); without extra, exactly 4 (per address).
func r7FlapSnap(runs int, extra bool) *k8s.Snapshot {
	var pods []*k8s.Pod
	for r := 0; r < runs; r++ {
		addr := 8 * r // runs apart, whichever pods are there
		n := 4
		if r == 0 && extra {
			n = 5
		}
		for j := 0; j < n; j++ {
			pods = append(pods, npPod("r1", fmt.Sprintf("p%d-%d", r, j), "node-2", 0, map[string]string{"role": "x"},
				fmt.Sprintf("10.50.%d.%d", addr/256, addr%256)))
			addr++
		}
	}
	pods = append(pods, npPod("t", "tgt", testNode, 0, map[string]string{"role": "target"}, "10.9.0.1"))
	np := policy("t", "p")
	np.Spec.PodSelector = *uuSel("role", "target")
	np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{
		{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: uuSel("team", "red")}}},
		{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: uuSel("env", "prod")}}},
	}
	return npSnap(
		[]*corev1.Namespace{npNS("r1", map[string]string{"team": "red", "env": "prod"}), npNS("t", nil)},
		pods, np)
}

// r7KernelElements is what the kernel holds for s: an element an address
// per address, two a range as intervals.
func r7KernelElements(s *nft.Set) int {
	if !s.Interval {
		n := 0
		for _, e := range s.List() {
			for range nft.Addresses(e) {
				n++
			}
		}
		return n
	}
	return 2 * len(s.List())
}

// TestHostileRound7UnionFlapCost: one pod of a namespace of 1,001 comes
// and goes, and the union naming the namespace sits at the run-length
// threshold (longRuns), so each event changes its kind and writes it
// whole under its other name. A known cost (docs/performance.md, "Round
// five"): before, the union was always per address and patched with the
// one address. This holds the cost to what it is: one union written, at
// most an element an address, in a delta (never the whole table), and a
// pod that does not cross the threshold patched exactly.
func TestHostileRound7UnionFlapCost(t *testing.T) {
	const runs = 250
	with, without := r7FlapSnap(runs, true), r7FlapSnap(runs, false)
	inc := NewCompiler(Options{Node: testNode})
	opts := Options{Node: testNode}
	prev := checkIncremental(t, inc, opts, nil, with, DefaultPriority, "with p0-4")
	worst := 0
	for i, snap := range []*k8s.Snapshot{without, with, without, with} {
		where := fmt.Sprintf("flap %d", i)
		got := checkIncremental(t, inc, opts, prev, snap, DefaultPriority, where)
		d := inc.Delta()
		if d.Full {
			t.Fatalf("%s: a whole write (%s)", where, d.Reason)
		}
		added := 0
		for _, s := range d.AddSets {
			added += r7KernelElements(s)
			t.Logf("%s: adds set %s (interval %v, per address %v): %d ranges, %d kernel elements", where, s.Name, s.Interval, s.PerAddress, len(s.List()), r7KernelElements(s))
		}
		for _, u := range d.UpdateSets {
			t.Logf("%s: updates set %s (exact %v): +%d -%d ranges", where, u.New.Name, u.Exact, len(u.Added), len(u.Removed))
		}
		t.Logf("%s: %d sets added (%d kernel elements), %d deleted, %d updated, %d chains rewritten, union flips: %d",
			where, len(d.AddSets), added, len(d.DeleteSets), len(d.UpdateSets), len(d.RewriteChains), kindChanges(prev, got))
		worst = max(worst, added)
		prev = got
	}
	if worst > 4*runs+1 {
		t.Errorf("one pod of r1 (of %d) coming or going writes %d kernel elements in its delta: more than the union, once", 4*runs+1, worst)
	}
	// Away from the threshold (every run of 4 but one of 6, so an
	// average above 4 either way), a pod coming and going is an exact
	// update of its one range.
	far := r7FlapSnap(runs, true)
	far.Pods = append(far.Pods, npPod("r1", "p0-5", "node-2", 0, map[string]string{"role": "x"}, "10.50.0.5"))
	far.Sort()
	prev = checkIncremental(t, inc, opts, prev, far, DefaultPriority, "far from the threshold")
	back := checkIncremental(t, inc, opts, prev, with, DefaultPriority, "p0-5 goes")
	d := inc.Delta()
	if len(d.AddSets) > 0 || kindChanges(prev, back) > 0 {
		t.Errorf("a pod away from the threshold: the delta adds %d sets, %d unions change kind", len(d.AddSets), kindChanges(prev, back))
	}
	for _, u := range d.UpdateSets {
		if !u.Exact || len(u.Added)+len(u.Removed) > 2 {
			t.Errorf("a pod away from the threshold: set %s updated by +%d -%d ranges (exact %v), want its one range", u.New.Name, len(u.Added), len(u.Removed), u.Exact)
		}
	}
}
