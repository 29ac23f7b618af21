package enforcer

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftpolicy/nftpolicy/internal/scale"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// Cost of the namespace patch: on a scale.Cluster (namespaces ns-N with
// team=team-(N mod 10); every policy allows ingress from the namespaces
// of one team, by namespaceSelector, and a tier of their pods), an
// incremental compile after one namespace label change (a namespace of
// podsPerNS pods leaves one team's peer sets and joins another's), and
// after one pod event, against a fresh compile of the same snapshot, in
// bytes allocated (allocatedBy), which the machine's noise does not move;
// the times are logged, medians of the same run. The suite runs 100
// namespaces × 150 pods; HOSTILE_NSPATCH_PODS=1500 runs the brief's 150k
// pods.

func npCostSize() (namespaces, podsPerNS int) {
	podsPerNS = 150
	if s := os.Getenv("HOSTILE_NSPATCH_PODS"); s != "" {
		n, err := strconv.Atoi(s)
		if err == nil && n > 0 {
			podsPerNS = n
		}
	}
	return 100, podsPerNS
}

func npMedian[T time.Duration | uint64](d []T) T {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// npTeam is the team number of namespace name in snap.
func npTeam(snap *k8s.Snapshot, name string) int {
	team := -1
	for _, ns := range snap.Namespaces {
		if ns.Name == name {
			fmt.Sscanf(ns.Labels["team"], "team-%d", &team)
		}
	}
	return team
}

// npRelabelNS returns snap with namespace name's team label set to team.
func npRelabelNS(snap *k8s.Snapshot, name string, team int) *k8s.Snapshot {
	next := *snap
	next.Namespaces = slices.Clone(snap.Namespaces)
	i := slices.IndexFunc(next.Namespaces, func(ns *corev1.Namespace) bool { return ns.Name == name })
	ns := next.Namespaces[i].DeepCopy()
	ns.Labels = map[string]string{"team": fmt.Sprintf("team-%d", team)}
	next.Namespaces[i] = ns
	return &next
}

// npRelabelPod returns snap with pod i moved into, or out of, the tier
// that the peer sets naming its namespace's team select (scale.Cluster:
// policy-k selects team-(k mod 10) and tier-(k mod 3), k < 10, so team-T
// is read with tier-(T mod 3)).
func npRelabelPod(snap *k8s.Snapshot, namespace, name string) *k8s.Snapshot {
	next := *snap
	next.Pods = slices.Clone(snap.Pods)
	i := slices.IndexFunc(next.Pods, func(p *k8s.Pod) bool { return p.Namespace == namespace && p.Name == name })
	p := *next.Pods[i]
	team := npTeam(snap, namespace)
	tier := fmt.Sprintf("tier-%d", team%3)
	if p.Labels["tier"] == tier {
		tier = fmt.Sprintf("tier-%d", (team+1)%3)
	}
	p.Labels = map[string]string{"app": p.Labels["app"], "tier": tier}
	next.Pods[i] = &p
	return &next
}

func TestHostileNSPatchCost(t *testing.T) {
	namespaces, podsPerNS := npCostSize()
	// 100 pods on this node, pod-0 (app-0) of each namespace: the active
	// policies are those selecting every pod (policy-0, 2, 4, 6 and 8), so
	// the peer sets in the table name the even teams.
	snap := scale.Cluster(namespaces, podsPerNS, 10, namespaces, testNode, false)
	snap.Nodes = []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: testNode}}}
	opts := Options{Node: testNode}
	inc := NewCompiler(opts)
	inc.Compile(snap, DefaultPriority)

	const events = 5
	var nsTimes, podTimes, freshTimes []time.Duration
	var nsBytes, podBytes, freshBytes []uint64
	var nsElems, podElems []int
	for e := 0; e < events; e++ {
		// A namespace of an even team moves to another even team: out of
		// one team's peer set, into another's, with every pod of it.
		ns := fmt.Sprintf("ns-%d", (e*38)%namespaces) // team-(38e mod 10): even
		snap = npRelabelNS(snap, ns, (npTeam(snap, ns)+2+2*(e%4))%10)
		nsBytes = append(nsBytes, allocatedBy(func() {
			start := time.Now()
			inc.Compile(snap, DefaultPriority)
			nsTimes = append(nsTimes, time.Since(start))
		}))
		nsElems = append(nsElems, npExactElements(inc.Delta()))

		// One pod of a namespace of an even team, not on this node,
		// enters or leaves the tier its team's peer set reads.
		snap = npRelabelPod(snap, fmt.Sprintf("ns-%d", (e*14+2)%namespaces), fmt.Sprintf("pod-%d", 1+e))
		podBytes = append(podBytes, allocatedBy(func() {
			start := time.Now()
			inc.Compile(snap, DefaultPriority)
			podTimes = append(podTimes, time.Since(start))
		}))
		podElems = append(podElems, npExactElements(inc.Delta()))

		if e < 3 {
			freshBytes = append(freshBytes, allocatedBy(func() {
				start := time.Now()
				NewCompiler(opts).Compile(snap, DefaultPriority)
				freshTimes = append(freshTimes, time.Since(start))
			}))
		}
	}
	// The last incremental table is the fresh one.
	got, _ := inc.Compile(snap, DefaultPriority)
	want, _ := NewCompiler(opts).Compile(snap, DefaultPriority)
	if diff := gocmp.Diff(nft.Render(want), nft.Render(got)); diff != "" {
		t.Fatalf("incremental table differs from a fresh compile (-fresh +incremental):\n%.3000s", diff)
	}
	fresh, nsMed, podMed := npMedian(freshTimes), npMedian(nsTimes), npMedian(podTimes)
	t.Logf("%d namespaces × %d pods, %d policies: fresh compile median %v; namespace relabel median %v (1/%.0f of fresh; exact elements by event %v); pod relabel median %v (1/%.0f of fresh; exact elements by event %v)",
		namespaces, podsPerNS, len(snap.Policies), fresh, nsMed, float64(fresh)/float64(nsMed), nsElems, podMed, float64(fresh)/float64(podMed), podElems)
	t.Logf("namespace relabels %v; pod relabels %v; fresh %v", nsTimes, podTimes, freshTimes)
	freshB, nsB, podB := npMedian(freshBytes), npMedian(nsBytes), npMedian(podBytes)
	t.Logf("allocated: fresh compile %d B, namespace relabel %d B (1/%.0f), pod relabel %d B (1/%.0f)",
		freshB, nsB, float64(freshB)/float64(nsB), podB, float64(freshB)/float64(podB))
	// Patched, a relabel allocates 1/36 (namespace) and 1/63 (pod) of a
	// fresh compile at the suite's size, and the figures hardly move
	// from run to run; computing the touched peer lists again from the
	// pods instead allocates 1/13 and 1/18, and a compile that rebuilt
	// what the event did not touch would come nearer still. 1/20 tells
	// them apart.
	const bound = 20
	if nsB*bound > freshB {
		t.Errorf("a namespace relabel allocates %d B, more than 1/%d of a fresh compile (%d B)", nsB, bound, freshB)
	}
	if podB*bound > freshB {
		t.Errorf("a pod relabel allocates %d B, more than 1/%d of a fresh compile (%d B)", podB, bound, freshB)
	}
}

// npExactElements counts the elements of the exact set updates of d; -1
// if d has an update that is not exact (left to the writer to compare).
func npExactElements(d *nft.Delta) int {
	n := 0
	for _, u := range d.UpdateSets {
		if !u.Exact {
			return -1
		}
		n += len(u.Added) + len(u.Removed)
	}
	return n
}
