package enforcer

import (
	"fmt"
	"maps"
	"math/rand/v2"
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

// Hostile review of peer sets that are unions of several peer lists.
//
// Target pods of namespace t are selected by up to eight policies whose
// rules allow the same ports (tcp/80, tcp/81, and every port) from
// different peers: namespace selectors, pod selectors of t, both, and
// ipBlocks overlapping pod addresses at the edges of both address spaces.
// The fragment chains of the targets thus ask unions of those lists.
// Events move namespaces into and out of the selectors of some parts and
// not others, move pods from one part's peers to another's in one
// compile (a relabel, or one pod gone and another come at its address),
// relabel a namespace together with its pods, relabel and readdress a
// namespace of 300 pods at once, and give pods addresses other pods hold.
// Every compile must equal a fresh one (checkIncremental: Render, the
// delta against nft.Diff, exact set updates against the true difference).

var (
	uuNamespaces = []string{"n1", "n2", "n3", "n4"}
	uuPodNames   = []string{"p0", "p1", "p2", "p3", "p4"}
	uuTeams      = []string{"a", "b", "c"}
	uuRoles      = []string{"x", "y", "z"}
	uuV4         = []string{"0.0.0.0", "0.0.0.1", "0.0.0.2", "10.0.0.0", "10.0.0.1", "10.0.0.2", "10.0.0.3",
		"10.0.0.4", "10.0.0.7", "10.0.0.8", "127.255.255.255", "128.0.0.0", "10.2.0.127", "10.2.0.128",
		"10.2.1.44", "255.255.255.253", "255.255.255.254", "255.255.255.255"}
	uuV6 = []string{"::", "::1", "::2", "fd00::", "fd00::1", "fd00::2", "fd00::3", "fd00::4",
		"7fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "8000::", "fd00:2::7f", "fd00:2::80",
		"ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffd", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe",
		"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}
	// ipBlocks overlapping pod addresses, the edges, and the big namespace.
	uuBlocks = [][]string{
		{"0.0.0.0/0", "10.0.0.0/29", "255.255.255.255/32"},
		{"10.0.0.0/30"},
		{"255.255.255.254/31"},
		{"0.0.0.0/32"},
		{"10.2.0.0/25"},
		{"10.2.0.0/16", "10.2.0.64/26"},
		{"::/0", "fd00::/126", "::/128"},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/127"},
		{"fd00:2::/121"},
		{"::/127"},
	}
)

const uuBigPods = 300

type uuWorld struct {
	r        *rand.Rand
	share    bool
	nsLabels map[string]map[string]string
	pods     map[objKey]*k8s.Pod
	pols     map[string]*networkingv1.NetworkPolicy // in namespace t, by name
	bigGen   int                                    // readdress generation of the big namespace
}

func newUUWorld(seed uint64, share bool) *uuWorld {
	w := &uuWorld{r: rand.New(rand.NewPCG(seed, seed^0xa11ce)), share: share,
		nsLabels: map[string]map[string]string{}, pods: map[objKey]*k8s.Pod{}, pols: map[string]*networkingv1.NetworkPolicy{}}
	w.nsLabels["t"] = map[string]string{"team": "a"}
	w.nsLabels["big"] = map[string]string{"team": "c"}
	for _, ns := range uuNamespaces {
		w.nsLabels[ns] = w.randomNSLabels()
		for _, p := range uuPodNames[:3] {
			w.setPod(ns, p)
		}
	}
	for i, p := range []string{"tgt0", "tgt1", "tgt2"} {
		w.pods[objKey{"t", p}] = npPod("t", p, testNode, 0, map[string]string{"role": "target", "grp": fmt.Sprint(i % 2)},
			fmt.Sprintf("10.9.0.%d", i+1), fmt.Sprintf("fd09::%d", i+1))
	}
	for _, p := range uuPodNames[:3] {
		w.setPod("t", p)
	}
	for i := 0; i < uuBigPods; i++ {
		w.setBigPod(i, "x")
	}
	for _, name := range []string{"pa", "pb", "pc", "pd", "pe", "pf", "pg", "ph"} {
		if w.r.IntN(4) != 0 {
			w.setPolicy(name)
		}
	}
	return w
}

func (w *uuWorld) pick(s []string) string { return s[w.r.IntN(len(s))] }

func (w *uuWorld) randomNSLabels() map[string]string {
	l := map[string]string{"team": w.pick(uuTeams)}
	if w.r.IntN(2) == 0 {
		l["env"] = "prod"
	}
	return l
}

func (w *uuWorld) used() map[string]bool {
	used := map[string]bool{}
	for _, p := range w.pods {
		for _, ip := range p.Status.PodIPs {
			used[ip.IP] = true
		}
	}
	return used
}

func (w *uuWorld) addrs() []string {
	used := w.used()
	pickFree := func(pool []string) string {
		if w.share && w.r.IntN(3) == 0 {
			return w.pick(pool)
		}
		var free []string
		for _, a := range pool {
			if !used[a] {
				free = append(free, a)
			}
		}
		if len(free) == 0 {
			return ""
		}
		return w.pick(free)
	}
	var out []string
	switch w.r.IntN(5) {
	case 0:
		out = []string{pickFree(uuV4)}
	case 1:
		out = []string{pickFree(uuV6)}
	default:
		out = []string{pickFree(uuV4), pickFree(uuV6)}
	}
	return slices.DeleteFunc(out, func(s string) bool { return s == "" })
}

func (w *uuWorld) setPod(ns, name string) {
	w.pods[objKey{ns, name}] = npPod(ns, name, w.pick([]string{testNode, "node-2"}), int64(w.r.IntN(3)),
		map[string]string{"role": w.pick(uuRoles)}, w.addrs()...)
}

// bigAddr is the address of pod i of the big namespace: a dense run, so
// that its pods are a few ranges, split when some leave; gen shifts it.
func bigAddr(i, gen int) (string, string) {
	n := i + gen*7
	return fmt.Sprintf("10.2.%d.%d", n/256, n%256), fmt.Sprintf("fd00:2::%x", n)
}

func (w *uuWorld) setBigPod(i int, role string) {
	v4, v6 := bigAddr(i, w.bigGen)
	name := fmt.Sprintf("b%03d", i)
	w.pods[objKey{"big", name}] = npPod("big", name, "node-2", 0, map[string]string{"role": role}, v4, v6)
}

func uuSel(kv ...string) *metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

func (w *uuWorld) ports() []networkingv1.NetworkPolicyPort {
	switch w.r.IntN(6) {
	case 0:
		return nil // every port: the pod chain's union
	case 1:
		return []networkingv1.NetworkPolicyPort{port(tcp, 80), port(tcp, 81)}
	case 2:
		return []networkingv1.NetworkPolicyPort{port(tcp, 81)}
	}
	return []networkingv1.NetworkPolicyPort{port(tcp, 80)}
}

// setPolicy sets one of the policies of t: each has its own kind of
// peers, so that the targets' unions mix kinds.
func (w *uuWorld) setPolicy(name string) {
	var peer networkingv1.NetworkPolicyPeer
	switch name {
	case "pa": // namespaces of a team
		peer = networkingv1.NetworkPolicyPeer{NamespaceSelector: uuSel("team", w.pick(uuTeams))}
	case "pb": // pods of t
		peer = networkingv1.NetworkPolicyPeer{PodSelector: uuSel("role", w.pick(uuRoles))}
	case "pc", "ph": // an ipBlock
		b := uuBlocks[w.r.IntN(len(uuBlocks))]
		peer = ipBlock(b[0], b[1:]...)
	case "pd": // pods of a team's namespaces
		peer = networkingv1.NetworkPolicyPeer{NamespaceSelector: uuSel("team", w.pick(uuTeams)), PodSelector: uuSel("role", w.pick(uuRoles))}
	case "pe": // namespaces of an env
		peer = networkingv1.NetworkPolicyPeer{NamespaceSelector: uuSel("env", "prod")}
	case "pf": // pods of every namespace
		peer = networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{}, PodSelector: uuSel("role", w.pick(uuRoles))}
	default: // namespaces not of a team
		peer = networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "team", Operator: metav1.LabelSelectorOpNotIn, Values: []string{w.pick(uuTeams)}}}}}
	}
	np := policy("t", name)
	switch w.r.IntN(3) {
	case 0:
		np.Spec.PodSelector = *uuSel("role", "target")
	case 1:
		np.Spec.PodSelector = *uuSel("role", "target", "grp", w.pick([]string{"0", "1"}))
	default:
		np.Spec.PodSelector = *uuSel("role", "target")
	}
	np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{peer}, Ports: w.ports()}}
	if w.r.IntN(3) == 0 {
		np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{peer}, Ports: w.ports()}}
	}
	w.pols[name] = np
}

func (w *uuWorld) someKey(ns string) (objKey, bool) {
	var keys []objKey
	for k := range w.pods {
		if (ns == "" && k.namespace != "big" && !strings.HasPrefix(k.name, "tgt")) || k.namespace == ns {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return objKey{}, false
	}
	slices.SortFunc(keys, compareKeys)
	return keys[w.r.IntN(len(keys))], true
}

func (w *uuWorld) edit(k objKey, f func(*corev1.Pod)) {
	p := w.pods[k].DeepCopy()
	q := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, Labels: maps.Clone(p.Labels),
		CreationTimestamp: p.CreationTimestamp}, Spec: corev1.PodSpec{NodeName: p.Spec.NodeName, Containers: []corev1.Container{{Name: "c"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for _, ip := range p.Status.PodIPs {
		q.Status.PodIPs = append(q.Status.PodIPs, corev1.PodIP{IP: ip.IP})
	}
	f(q)
	w.pods[k] = k8s.NewPod(q)
}

func (w *uuWorld) event() string {
	switch w.r.IntN(22) {
	case 0, 1, 2: // a namespace relabelled: in and out of some parts
		ns := w.pick(append(slices.Clone(uuNamespaces), "t"))
		w.nsLabels[ns] = w.randomNSLabels()
		return fmt.Sprintf("ns relabel %s %v", ns, w.nsLabels[ns])
	case 3: // a namespace relabelled with all its pods
		ns := w.pick(uuNamespaces)
		role := w.pick(uuRoles)
		w.nsLabels[ns] = w.randomNSLabels()
		for k := range w.pods {
			if k.namespace == ns {
				w.edit(k, func(p *corev1.Pod) { p.Labels["role"] = role })
			}
		}
		return fmt.Sprintf("ns and pods relabel %s %v role=%s", ns, w.nsLabels[ns], role)
	case 4, 5: // a pod added or replaced
		ns, name := w.pick(append(slices.Clone(uuNamespaces), "t")), w.pick(uuPodNames)
		w.setPod(ns, name)
		return "pod set " + ns + "/" + name + fmt.Sprint(w.pods[objKey{ns, name}].Status.PodIPs)
	case 6: // a pod deleted
		if k, ok := w.someKey(""); ok {
			delete(w.pods, k)
			return "pod delete " + k.String()
		}
	case 7, 8: // a pod relabelled: from one part's peers to another's
		if k, ok := w.someKey(""); ok {
			role := w.pick(uuRoles)
			w.edit(k, func(p *corev1.Pod) { p.Labels["role"] = role })
			return "pod relabel " + k.String() + " role=" + role
		}
	case 9: // a pod readdressed
		if k, ok := w.someKey(""); ok {
			ips := w.addrs()
			w.edit(k, func(p *corev1.Pod) {
				p.Status.PodIPs = nil
				for _, ip := range ips {
					p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
				}
			})
			return fmt.Sprintf("pod readdress %s %v", k, ips)
		}
	case 10: // a pod gone and another come at its address, in another namespace
		if k, ok := w.someKey(""); ok {
			old := w.pods[k]
			delete(w.pods, k)
			ns, name := w.pick(uuNamespaces), w.pick(uuPodNames)
			var ips []string
			for _, ip := range old.Status.PodIPs {
				ips = append(ips, ip.IP)
			}
			w.pods[objKey{ns, name}] = npPod(ns, name, testNode, 1, map[string]string{"role": w.pick(uuRoles)}, ips...)
			return fmt.Sprintf("pod %s gone, %s/%s at its %v", k, ns, name, ips)
		}
	case 11, 12: // a policy set, or deleted
		name := w.pick([]string{"pa", "pb", "pc", "pd", "pe", "pf", "pg", "ph"})
		if _, ok := w.pols[name]; ok && w.r.IntN(3) == 0 {
			delete(w.pols, name)
			return "policy delete " + name
		}
		w.setPolicy(name)
		return "policy set " + name
	case 13: // the big namespace relabelled
		w.nsLabels["big"] = w.randomNSLabels()
		return fmt.Sprintf("big relabel %v", w.nsLabels["big"])
	case 14: // every pod of the big namespace relabelled
		role := w.pick(uuRoles)
		for i := 0; i < uuBigPods; i++ {
			w.setBigPod(i, role)
		}
		return "big pods relabel role=" + role
	case 15: // the big namespace and its pods relabelled at once
		role := w.pick(uuRoles)
		w.nsLabels["big"] = w.randomNSLabels()
		for i := 0; i < uuBigPods; i++ {
			w.setBigPod(i, role)
		}
		return fmt.Sprintf("big and its pods relabel %v role=%s", w.nsLabels["big"], role)
	case 16: // some pods of the big namespace relabelled, one in three
		for i := 0; i < uuBigPods; i++ {
			if w.r.IntN(3) == 0 {
				w.setBigPod(i, w.pick(uuRoles))
			}
		}
		return "big pods relabel some"
	case 17: // the big namespace readdressed (shifted), with its labels
		w.bigGen = (w.bigGen + 1 + w.r.IntN(3)) % 40
		for i := 0; i < uuBigPods; i++ {
			w.setBigPod(i, w.pods[objKey{"big", fmt.Sprintf("b%03d", i)}].Labels["role"])
		}
		if w.r.IntN(2) == 0 {
			w.nsLabels["big"] = w.randomNSLabels()
		}
		return fmt.Sprintf("big readdress gen=%d %v", w.bigGen, w.nsLabels["big"])
	case 18: // every namespace relabelled at once
		for _, ns := range slices.Sorted(maps.Keys(w.nsLabels)) {
			w.nsLabels[ns] = w.randomNSLabels()
		}
		return "ns relabel all"
	case 19: // a namespace deleted or back
		ns := w.pick(uuNamespaces)
		if _, ok := w.nsLabels[ns]; ok {
			delete(w.nsLabels, ns)
			return "ns delete " + ns
		}
		w.nsLabels[ns] = w.randomNSLabels()
		return "ns add " + ns
	case 20: // a pod takes the address of a pod of the big namespace
		if k, ok := w.someKey(""); ok {
			v4, v6 := bigAddr(w.r.IntN(uuBigPods), w.bigGen)
			w.edit(k, func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: v4}, {IP: v6}} })
			return fmt.Sprintf("pod %s takes big's %s %s", k, v4, v6)
		}
	case 21: // a target relabelled out of and back into the policies
		k := objKey{"t", w.pick([]string{"tgt0", "tgt1", "tgt2"})}
		grp := w.pick([]string{"0", "1"})
		w.edit(k, func(p *corev1.Pod) { p.Labels["grp"] = grp })
		return fmt.Sprintf("target %s grp=%s", k, grp)
	}
	return "nothing"
}

func (w *uuWorld) snapshot() *k8s.Snapshot {
	s := &k8s.Snapshot{}
	for _, ns := range slices.Sorted(maps.Keys(w.nsLabels)) {
		s.Namespaces = append(s.Namespaces, npNS(ns, maps.Clone(w.nsLabels[ns])))
	}
	for _, k := range slices.SortedFunc(maps.Keys(w.pods), compareKeys) {
		s.Pods = append(s.Pods, w.pods[k])
	}
	for _, n := range slices.Sorted(maps.Keys(w.pols)) {
		s.Policies = append(s.Policies, w.pols[n])
	}
	s.Nodes = []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: testNode}}, {ObjectMeta: metav1.ObjectMeta{Name: "node-2"}}}
	return s
}

func (w *uuWorld) batch(maxEvents int) []string {
	var out []string
	for i := 1 + w.r.IntN(maxEvents); i > 0; i-- {
		out = append(out, w.event())
	}
	return out
}

// uuUnions counts the union sets of table (comment "peers union:...").
func uuUnions(table *nft.Table) int {
	n := 0
	for _, s := range table.Sets {
		if strings.HasPrefix(s.Comment, "peers "+unionPrefix) {
			n++
		}
	}
	return n
}

// runUUWorld drives one Compiler (DeferUnions off) through compiles of
// several events each, checking each against a fresh compile.
func runUUWorld(t *testing.T, seed uint64, share bool, compiles int) (unions, exact int) {
	t.Helper()
	w := newUUWorld(seed, share)
	opts := Options{Node: testNode}
	inc := NewCompiler(opts)
	var prev *nft.Table
	var history []string
	for i := 0; i < compiles; i++ {
		events := w.batch(5)
		history = append(history, fmt.Sprintf("compile %d: %q", i, events))
		if len(history) > 4 {
			history = history[1:]
		}
		where := fmt.Sprintf("seed %d share %v, last compiles:\n\t%s\n", seed, share, strings.Join(history, "\n\t"))
		got := checkIncremental(t, inc, opts, prev, w.snapshot(), DefaultPriority, where)
		npCheckExactSorted(t, inc, where)
		unions += uuUnions(got)
		if prev != nil {
			for _, u := range inc.Delta().UpdateSets {
				if u.Exact && strings.HasPrefix(u.New.Comment, "peers "+unionPrefix) {
					exact++
				}
			}
		}
		prev = got
	}
	return unions, exact
}

// uuSeeds are the seeds to run, from and how many: the defaults, or
// UU_SEEDS=from:n for a longer hunt.
func uuSeeds(from, n uint64) (uint64, uint64) {
	if v := os.Getenv("UU_SEEDS"); v != "" {
		fmt.Sscanf(v, "%d:%d", &from, &n)
	}
	return from, n
}

func TestHostileUnionsWorld(t *testing.T) {
	unions, exact := 0, 0
	from, n := uuSeeds(1, 6)
	for seed := from; seed < from+n; seed++ {
		for _, share := range []bool{false, true} {
			u, e := runUUWorld(t, seed, share, 40)
			unions, exact = unions+u, exact+e
		}
	}
	t.Logf("%d union sets over all compiles, %d exact union updates", unions, exact)
	if unions < 200 || exact < 50 {
		t.Fatalf("only %d union sets, %d exact union updates: the world does not exercise unions", unions, exact)
	}
}

// TestHostileUnionsWorldDeferred runs the world with Options.DeferUnions
// and every new union deferred: interim compiles must decide as a fresh
// compile does and hold nothing it lacks (hdStep), and a compile of the
// same snapshot after them must be the fresh compile (hdMerge).
func TestHostileUnionsWorldDeferred(t *testing.T) {
	deferEveryUnion(t)
	interim := 0
	from, n := uuSeeds(11, 3)
	for seed := from; seed < from+n; seed++ {
		w := newUUWorld(seed, seed%2 == 0)
		opts := Options{Node: testNode, DeferUnions: true}
		inc := NewCompiler(opts)
		var prev *nft.Table
		var history []string
		for i := 0; i < 30; i++ {
			events := w.batch(4)
			history = append(history, fmt.Sprintf("compile %d: %q", i, events))
			if len(history) > 4 {
				history = history[1:]
			}
			where := fmt.Sprintf("seed %d deferred, last compiles:\n\t%s\n", seed, strings.Join(history, "\n\t"))
			snap := w.snapshot()
			got, problems := inc.Compile(snap, DefaultPriority)
			if len(inc.deferred) > 0 {
				interim++
			}
			prev = uuDeferStep(t, inc, opts, prev, got, problems, snap, where)
			if len(inc.deferred) > 0 && w.r.IntN(3) == 0 {
				prev = hdMerge(t, inc, opts, prev, snap, where)
			}
		}
		if len(inc.deferred) > 0 {
			hdMerge(t, inc, opts, prev, w.snapshot(), fmt.Sprintf("seed %d end", seed))
		}
	}
	t.Logf("%d interim compiles", interim)
	if interim < 5 {
		t.Fatalf("only %d interim compiles: DeferUnions not exercised", interim)
	}
}

// uuDeferStep is hdStep without its reference and explain checks, which
// are slow at 300 pods: the table (or, while a union waits, every set,
// every chain but the waiting ones, and the verdicts of every probe) and
// the delta against a fresh compile.
func uuDeferStep(t *testing.T, inc *Compiler, opts Options, prev, got *nft.Table, problems []Problem, snap *k8s.Snapshot, where string) *nft.Table {
	t.Helper()
	if len(inc.deferred) == 0 {
		return checkCompiled(t, inc, opts, prev, got, problems, snap, DefaultPriority, where)
	}
	fresh, _ := NewCompiler(opts).Compile(snap, DefaultPriority)
	requireUniqueElements(t, got)
	if err := got.Validate(); err != nil {
		t.Fatalf("%s: interim table invalid: %v", where, err)
	}
	if prev != nil {
		checkDelta(t, inc, prev, got, where)
	}
	hdNoLeak(t, inc, got, fresh, where)
	return got
}
