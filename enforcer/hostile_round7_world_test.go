package enforcer

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// Hostile review, round 7: unions that change kind (longRuns, sets.go).
//
// Peer namespaces a-d hold pods at consecutive addresses (slots), so
// that a namespace whose slots are all filled is one long run, one
// thinned to every other slot is runs of one, and one emptied is
// nothing: with unionRunLength lowered to 1, the unions the targets of
// namespace t ask cross from one kind to the other on most events, and
// back. Namespace c's IPv6 addresses are never consecutive, so that one
// family of a union may cross while the other stays. Targets move on and
// off this node, come and go; namespace t's flow logs are switched on and
// off (its pod chains then walk their policies, and let go of their
// unions); the pods of namespace a are selected by a policy of their own,
// so that unions are shared by many pods' chains. Every compile must be a
// fresh compile's (checkIncremental), and, at each step where a union
// crossed over (and every few steps), decide every connection as the
// reference does.

var r7PeerNS = []string{"a", "b", "c", "d"}

const r7Slots = 8

func r7Addr(ns, slot int) (string, string) {
	v6 := fmt.Sprintf("fd07:%d::%x", ns, 16+slot)
	if ns == 2 {
		v6 = fmt.Sprintf("fd07:%d::%x", ns, 16+2*slot)
	}
	return fmt.Sprintf("10.7.%d.%d", ns, 10+slot), v6
}

type r7World struct {
	r         *rand.Rand
	nsLabels  map[string]map[string]string
	flowLog   bool // namespace t annotated for flow logs
	pods      map[objKey]*k8s.Pod
	pols      map[objKey]*networkingv1.NetworkPolicy
	allowFlow bool
}

func newR7World(seed uint64, allowFlow bool) *r7World {
	w := &r7World{r: rand.New(rand.NewPCG(seed, seed^0x7777)), nsLabels: map[string]map[string]string{},
		pods: map[objKey]*k8s.Pod{}, pols: map[objKey]*networkingv1.NetworkPolicy{}, allowFlow: allowFlow}
	w.nsLabels["t"] = map[string]string{"team": "red"}
	for i, ns := range r7PeerNS {
		w.nsLabels[ns] = w.randomLabels()
		for s := 0; s < r7Slots; s++ {
			if w.r.IntN(4) != 0 {
				w.setPeer(i, s)
			}
		}
	}
	for i := 0; i < 4; i++ {
		if w.r.IntN(4) != 0 {
			w.setTarget(i)
		}
	}
	for _, name := range []string{"p1", "p2", "p3", "p4", "p5", "p6"} {
		if w.r.IntN(3) != 0 {
			w.setPolicy(name)
		}
	}
	w.setPeerPolicy()
	return w
}

func (w *r7World) pick(s []string) string { return s[w.r.IntN(len(s))] }

func (w *r7World) randomLabels() map[string]string {
	l := map[string]string{"team": w.pick([]string{"red", "blue", "green"})}
	if w.r.IntN(2) == 0 {
		l["env"] = "prod"
	}
	return l
}

func (w *r7World) node() string {
	if w.r.IntN(5) == 0 {
		return testNode
	}
	return "node-2"
}

func (w *r7World) setPeer(ns, slot int) {
	v4, v6 := r7Addr(ns, slot)
	name := r7PeerNS[ns]
	w.pods[objKey{name, fmt.Sprintf("s%d", slot)}] = npPod(name, fmt.Sprintf("s%d", slot), w.node(), int64(slot),
		map[string]string{"role": w.pick([]string{"x", "y"})}, v4, v6)
}

func (w *r7World) setTarget(i int) {
	node := testNode
	if w.r.IntN(3) == 0 {
		node = "node-2"
	}
	w.pods[objKey{"t", fmt.Sprintf("tgt%d", i)}] = npPod("t", fmt.Sprintf("tgt%d", i), node, int64(i),
		map[string]string{"role": "target", "grp": fmt.Sprint(w.r.IntN(2))}, fmt.Sprintf("10.9.0.%d", i+1), fmt.Sprintf("fd09::%d", i+1))
}

func (w *r7World) ports() []networkingv1.NetworkPolicyPort {
	switch w.r.IntN(5) {
	case 0, 1:
		return nil
	case 2:
		return []networkingv1.NetworkPolicyPort{port(tcp, 80), port(tcp, 81)}
	case 3:
		return []networkingv1.NetworkPolicyPort{port(tcp, 81)}
	}
	return []networkingv1.NetworkPolicyPort{port(tcp, 80)}
}

func (w *r7World) peer(name string) networkingv1.NetworkPolicyPeer {
	switch name {
	case "p1":
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: uuSel("team", w.pick([]string{"red", "blue", "green"}))}
	case "p2":
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: uuSel("env", "prod")}
	case "p3":
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: uuSel("team", w.pick([]string{"red", "blue"})), PodSelector: uuSel("role", w.pick([]string{"x", "y"}))}
	case "p4":
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{}, PodSelector: uuSel("role", w.pick([]string{"x", "y"}))}
	case "p5":
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "team", Operator: metav1.LabelSelectorOpNotIn, Values: []string{w.pick([]string{"red", "blue", "green"})}}}}}
	}
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: uuSel("team", w.pick([]string{"blue", "green"}))}
}

func (w *r7World) setPolicy(name string) {
	np := policy("t", name)
	np.Spec.PodSelector = *uuSel("role", "target")
	if w.r.IntN(3) == 0 {
		np.Spec.PodSelector = *uuSel("role", "target", "grp", fmt.Sprint(w.r.IntN(2)))
	}
	np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{w.peer(name)}, Ports: w.ports()}}
	if w.r.IntN(2) == 0 {
		np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{w.peer(name)}, Ports: w.ports()})
	}
	if w.r.IntN(3) == 0 {
		np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{w.peer(name)}, Ports: w.ports()}}
	}
	w.pols[objKey{"t", name}] = np
}

// setPeerPolicy: the pods of namespace a (some on this node) allow two
// lists on every port, a union their chains share.
func (w *r7World) setPeerPolicy() {
	np := policy("a", "from-teams")
	np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{
		{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: uuSel("team", w.pick([]string{"red", "blue", "green"}))}}},
		{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: uuSel("env", "prod")}}},
	}
	w.pols[objKey{"a", "from-teams"}] = np
}

func (w *r7World) event() string {
	ns := w.r.IntN(len(r7PeerNS))
	name := r7PeerNS[ns]
	switch w.r.IntN(16) {
	case 0, 1:
		s := w.r.IntN(r7Slots)
		w.setPeer(ns, s)
		return fmt.Sprintf("peer %s/s%d set", name, s)
	case 2:
		s := w.r.IntN(r7Slots)
		delete(w.pods, objKey{name, fmt.Sprintf("s%d", s)})
		return fmt.Sprintf("peer %s/s%d delete", name, s)
	case 3:
		for s := 0; s < r7Slots; s++ {
			w.setPeer(ns, s)
		}
		return "fill " + name
	case 4:
		for s := 1; s < r7Slots; s += 2 {
			delete(w.pods, objKey{name, fmt.Sprintf("s%d", s)})
		}
		return "thin " + name
	case 5:
		for s := 0; s < r7Slots; s++ {
			delete(w.pods, objKey{name, fmt.Sprintf("s%d", s)})
		}
		return "empty " + name
	case 6:
		w.nsLabels[name] = w.randomLabels()
		return fmt.Sprintf("ns %s labels %v", name, w.nsLabels[name])
	case 7, 8:
		p := w.pick([]string{"p1", "p2", "p3", "p4", "p5", "p6"})
		w.setPolicy(p)
		return "policy set " + p
	case 9:
		p := w.pick([]string{"p1", "p2", "p3", "p4", "p5", "p6"})
		delete(w.pols, objKey{"t", p})
		return "policy delete " + p
	case 10, 11:
		i := w.r.IntN(4)
		w.setTarget(i)
		return fmt.Sprintf("target %d set (%s)", i, w.pods[objKey{"t", fmt.Sprintf("tgt%d", i)}].Spec.NodeName)
	case 12:
		i := w.r.IntN(4)
		delete(w.pods, objKey{"t", fmt.Sprintf("tgt%d", i)})
		return fmt.Sprintf("target %d delete", i)
	case 13:
		if w.allowFlow {
			w.flowLog = !w.flowLog
			return fmt.Sprintf("t flow log %v", w.flowLog)
		}
		w.setPeerPolicy()
		return "peer policy set"
	case 14:
		// one slot's pod moves to another node, or relabels: same address
		s := w.r.IntN(r7Slots)
		if _, ok := w.pods[objKey{name, fmt.Sprintf("s%d", s)}]; ok {
			w.setPeer(ns, s)
			return fmt.Sprintf("peer %s/s%d replaced", name, s)
		}
	case 15:
		// a namespace filled and another thinned in one snapshot
		other := (ns + 1 + w.r.IntN(len(r7PeerNS)-1)) % len(r7PeerNS)
		for s := 0; s < r7Slots; s++ {
			w.setPeer(ns, s)
			if s%2 == 1 {
				delete(w.pods, objKey{r7PeerNS[other], fmt.Sprintf("s%d", s)})
			}
		}
		return fmt.Sprintf("fill %s thin %s", name, r7PeerNS[other])
	}
	return "nothing"
}

func (w *r7World) batch(max int) []string {
	var out []string
	for i := 1 + w.r.IntN(max); i > 0; i-- {
		out = append(out, w.event())
	}
	return out
}

func (w *r7World) snapshot() *k8s.Snapshot {
	s := &k8s.Snapshot{}
	for _, ns := range slices.Sorted(maps.Keys(w.nsLabels)) {
		n := npNS(ns, maps.Clone(w.nsLabels[ns]))
		if ns == "t" && w.flowLog {
			n.Annotations = map[string]string{k8s.FlowLogAnnotation: "true"}
		}
		s.Namespaces = append(s.Namespaces, n)
	}
	for _, k := range slices.SortedFunc(maps.Keys(w.pods), compareKeys) {
		s.Pods = append(s.Pods, w.pods[k])
	}
	for _, k := range slices.SortedFunc(maps.Keys(w.pols), compareKeys) {
		s.Policies = append(s.Policies, w.pols[k])
	}
	s.Nodes = []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: testNode}}, {ObjectMeta: metav1.ObjectMeta{Name: "node-2"}}}
	s.Sort()
	return s
}

// r7RefCheck fails t when table decides a connection otherwise than the
// reference.
func r7RefCheck(t *testing.T, table *nft.Table, snap *k8s.Snapshot, where string) {
	t.Helper()
	if diffs := r6Check(table, snap); len(diffs) > 0 {
		if len(diffs) > 6 {
			diffs = append(diffs[:6], fmt.Sprintf("... %d more", len(diffs)-6))
		}
		t.Fatalf("%s: the table disagrees with the reference:\n%s", where, strings.Join(diffs, "\n"))
	}
}

// r7Variant is one set of options the world runs under.
type r7Variant struct {
	name string
	opts Options
	flow bool // the world toggles namespace t's flow logs
}

var r7Variants = []r7Variant{
	{"plain", Options{Node: testNode}, false},
	{"counters", Options{Node: testNode, Counters: true}, false},
	{"flowlog", Options{Node: testNode, Counters: true, FlowLog: FlowLog{Group: 100}}, true},
	{"deferred", Options{Node: testNode, DeferUnions: true}, false},
	{"deferred-flowlog", Options{Node: testNode, DeferUnions: true, FlowLog: FlowLog{Group: 100}}, true},
}

// runR7World drives one compiler through steps compiles of the world;
// it returns how many unions changed kind between consecutive tables.
func runR7World(t *testing.T, v r7Variant, seed uint64, steps int) (flips int) {
	t.Helper()
	w := newR7World(seed, v.flow)
	inc := NewCompiler(v.opts)
	var prev *nft.Table
	var history []string
	for i := 0; i < steps; i++ {
		events := w.batch(3)
		history = append(history, fmt.Sprintf("compile %d: %q", i, events))
		if len(history) > 4 {
			history = history[1:]
		}
		where := fmt.Sprintf("%s seed %d, last compiles:\n\t%s\n", v.name, seed, strings.Join(history, "\n\t"))
		snap := w.snapshot()
		before := prev
		if v.opts.DeferUnions {
			got, problems := inc.Compile(snap, DefaultPriority)
			prev = uuDeferStep(t, inc, v.opts, prev, got, problems, snap, where)
			if len(inc.deferred) > 0 {
				if w.r.IntN(2) == 0 {
					r7RefCheck(t, prev, snap, where+" (interim)")
					prev = hdMerge(t, inc, v.opts, prev, snap, where)
				}
			}
		} else {
			prev = checkIncremental(t, inc, v.opts, prev, snap, DefaultPriority, where)
		}
		n := 0
		if before != nil {
			n = kindChanges(before, prev)
		}
		flips += n
		if n > 0 || i%8 == 0 {
			r7RefCheck(t, prev, snap, where)
		}
	}
	return flips
}

// r7Seeds are the seeds to run, from and how many: the defaults, or
// R7_SEEDS=from:n for a longer hunt.
func r7Seeds(from, n uint64) (uint64, uint64) {
	if v := os.Getenv("R7_SEEDS"); v != "" {
		fmt.Sscanf(v, "%d:%d", &from, &n)
	}
	return from, n
}

func TestHostileRound7UnionKindWorld(t *testing.T) {
	lowerUnionRunLength(t, 1)
	for _, v := range r7Variants {
		t.Run(v.name, func(t *testing.T) {
			if v.opts.DeferUnions {
				deferEveryUnion(t)
			}
			flips := 0
			from, n := r7Seeds(1, 6)
			for seed := from; seed < from+n; seed++ {
				flips += runR7World(t, v, seed, 50)
			}
			t.Logf("%d unions changed kind", flips)
			if flips < 20 {
				t.Fatalf("only %d unions changed kind: the crossover is not exercised", flips)
			}
		})
	}
}

// TestHostileRound7UnionKindWalk: with WalkPolicies no pod chain asks a
// union; the world must still compile as a fresh compile does.
func TestHostileRound7UnionKindWalk(t *testing.T) {
	lowerUnionRunLength(t, 1)
	v := r7Variant{"walk", Options{Node: testNode, WalkPolicies: true, Counters: true}, false}
	for seed := uint64(1); seed <= 3; seed++ {
		runR7World(t, v, seed, 40)
	}
}

// TestHostileRound7UnionKindThreshold runs the world at the thresholds
// where the kinds meet: a union whose ranges average exactly n addresses
// is per address, one more and it is ranges.
func TestHostileRound7UnionKindThreshold(t *testing.T) {
	for _, n := range []int{2, 3, 7} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			lowerUnionRunLength(t, n)
			for seed := uint64(20); seed < 23; seed++ {
				runR7World(t, r7Variants[0], seed, 40)
			}
		})
	}
	lowerUnionRunLength(t, 2)
	mk := func(n int) []nft.Element {
		var out []nft.Element
		for i := 0; i < n; i++ {
			v4, _ := r7Addr(0, i)
			out = append(out, nft.Element{Addr: netip.MustParseAddr(v4)})
		}
		return []nft.Element{rangeOf(out[0].Addr, out[len(out)-1].Addr)}
	}
	if longRuns(mk(2)) {
		t.Errorf("one range of 2 addresses is held as ranges at unionRunLength 2")
	}
	if !longRuns(mk(3)) {
		t.Errorf("one range of 3 addresses is held per address at unionRunLength 2")
	}
}
