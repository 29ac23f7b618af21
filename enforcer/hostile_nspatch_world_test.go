package enforcer

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// A world aimed at the namespace patch of peer sets: several events per
// compile (a namespace relabelled in the same compile as its pods change,
// every namespace relabelled at once, a namespace relabelled and back in
// consecutive compiles, namespaces quarantined, deleted and back), peers
// of every selector shape (matchLabels, In, NotIn, Exists, DoesNotExist,
// the name label, empty selectors, both selectors, ipBlocks with except,
// several per rule so that unions form), and pod addresses at the edges
// of both address spaces and in one dense run, so that ranges touch,
// merge and split.

var (
	npwNamespaces = []string{"a", "b", "c", "d", "e", "f"}
	npwPods       = []string{"p0", "p1", "p2", "p3"}
	npwTeams      = []string{"red", "blue", "green"}
	// Addresses at the edges and a dense run: neighbours merge into ranges.
	npwV4 = []string{"0.0.0.0", "0.0.0.1", "0.0.0.2", "10.0.0.0", "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4",
		"10.0.0.5", "10.0.0.6", "10.0.0.7", "10.0.0.8", "10.0.0.9", "10.0.0.12", "10.0.0.255", "10.0.1.0",
		"255.255.255.253", "255.255.255.254", "255.255.255.255", "127.255.255.255", "128.0.0.0"}
	npwV6 = []string{"::", "::1", "::2", "fd00::", "fd00::1", "fd00::2", "fd00::3", "fd00::ffff", "fd00::1:0",
		"ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffd", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe",
		"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "7fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "8000::"}
)

type npWorld struct {
	r        *rand.Rand
	share    bool // pods may take an address another pod holds
	nsLabels map[string]map[string]string
	qNS      map[string]bool
	pods     map[objKey]*k8s.Pod
	pols     map[objKey]*networkingv1.NetworkPolicy
	cnps     map[string]*cnpv1.ClusterNetworkPolicy
	other    *corev1.Node
	undo     []func() string // events to run in the next compile (a relabel and back)
}

func newNPWorld(seed uint64, share bool) *npWorld {
	w := &npWorld{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), share: share,
		nsLabels: map[string]map[string]string{}, qNS: map[string]bool{}, pods: map[objKey]*k8s.Pod{},
		pols: map[objKey]*networkingv1.NetworkPolicy{}, cnps: map[string]*cnpv1.ClusterNetworkPolicy{}}
	for _, ns := range npwNamespaces[:5] {
		w.nsLabels[ns] = w.randomNSLabels()
		for _, p := range npwPods[:3] {
			w.setPod(ns, p)
		}
	}
	for i := 0; i < 6; i++ {
		w.setPolicy()
	}
	w.cnps["c0"] = w.randomCNP("c0")
	w.other = w.randomOther()
	return w
}

func (w *npWorld) pick(s []string) string { return s[w.r.IntN(len(s))] }

func (w *npWorld) randomNSLabels() map[string]string {
	l := map[string]string{"team": w.pick(npwTeams)}
	if w.r.IntN(2) == 0 {
		l["env"] = w.pick([]string{"prod", "dev"})
	}
	return l
}

func (w *npWorld) used() map[string]bool {
	used := map[string]bool{}
	for _, p := range w.pods {
		for _, ip := range p.Status.PodIPs {
			used[ip.IP] = true
		}
	}
	return used
}

// addrs picks a v4 and/or a v6 address; without share, ones no pod holds.
func (w *npWorld) addrs() []string {
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
		out = []string{pickFree(npwV4)}
	case 1:
		out = []string{pickFree(npwV6)}
	default:
		out = []string{pickFree(npwV4), pickFree(npwV6)}
	}
	return slices.DeleteFunc(out, func(s string) bool { return s == "" })
}

func (w *npWorld) setPod(ns, name string) {
	labels := map[string]string{"app": w.pick([]string{"web", "db"})}
	if w.r.IntN(2) == 0 {
		labels["tier"] = w.pick([]string{"1", "2"})
	}
	node := w.pick([]string{testNode, testNode, "node-2"})
	p := npPod(ns, name, node, int64(w.r.IntN(4)), labels, w.addrs()...)
	if w.r.IntN(8) == 0 {
		p.DeletionTimestamp = &metav1.Time{Time: time.Unix(2e9, 0)}
	}
	w.pods[objKey{ns, name}] = p
}

func (w *npWorld) nsSel() *metav1.LabelSelector {
	switch w.r.IntN(9) {
	case 0:
		return &metav1.LabelSelector{}
	case 1:
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: metav1.LabelSelectorOpNotIn, Values: []string{w.pick(npwTeams)}}}}
	case 2:
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpDoesNotExist}}}
	case 3:
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpExists}}}
	case 4:
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: []string{w.pick(npwNamespaces), w.pick(npwNamespaces)}}}}
	case 5:
		return &metav1.LabelSelector{MatchLabels: map[string]string{"team": w.pick(npwTeams), "env": "prod"}}
	case 6:
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: metav1.LabelSelectorOpIn, Values: []string{w.pick(npwTeams), w.pick(npwTeams)}}}}
	}
	return &metav1.LabelSelector{MatchLabels: map[string]string{"team": w.pick(npwTeams)}}
}

func (w *npWorld) podSel() *metav1.LabelSelector {
	switch w.r.IntN(5) {
	case 0:
		return &metav1.LabelSelector{}
	case 1:
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpDoesNotExist}}}
	case 2:
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"db"}}}}
	}
	return &metav1.LabelSelector{MatchLabels: map[string]string{"app": w.pick([]string{"web", "db"})}}
}

func (w *npWorld) peer() networkingv1.NetworkPolicyPeer {
	switch w.r.IntN(7) {
	case 0:
		return networkingv1.NetworkPolicyPeer{PodSelector: w.podSel()}
	case 1, 2:
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: w.nsSel()}
	case 3, 4:
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: w.nsSel(), PodSelector: w.podSel()}
	}
	blocks := [][]string{
		{"0.0.0.0/0", "10.0.0.0/29", "255.255.255.255/32"},
		{"10.0.0.0/28", "10.0.0.4/30"},
		{"0.0.0.0/8", "0.0.0.0/32"},
		{"255.255.255.252/30", "255.255.255.254/32"},
		{"::/0", "ffff::/16", "::/128"},
		{"fd00::/126", "fd00::2/127"},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffc/126"},
	}
	b := blocks[w.r.IntN(len(blocks))]
	return ipBlock(b[0], b[1:]...)
}

func (w *npWorld) peers() []networkingv1.NetworkPolicyPeer {
	var out []networkingv1.NetworkPolicyPeer
	for i := 1 + w.r.IntN(3); i > 0; i-- {
		out = append(out, w.peer())
	}
	return out
}

func (w *npWorld) setPolicy() {
	ns := w.pick(npwNamespaces)
	name := w.pick([]string{"n0", "n1", "n2", "n3"})
	np := policy(ns, name)
	if w.r.IntN(2) == 0 {
		np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": w.pick([]string{"web", "db"})}}
	}
	np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	for i := 1 + w.r.IntN(2); i > 0; i-- {
		var ports []networkingv1.NetworkPolicyPort
		if w.r.IntN(2) == 0 {
			ports = append(ports, port(tcp, int32(80+w.r.IntN(2))))
		}
		np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: w.peers(), Ports: ports})
	}
	if w.r.IntN(2) == 0 {
		np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: w.peers()})
	}
	w.pols[objKey{ns, name}] = np
}

func (w *npWorld) randomCNP(name string) *cnpv1.ClusterNetworkPolicy {
	p := &cnpv1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.Tier = []cnpv1.Tier{cnpv1.AdminTier, cnpv1.BaselineTier}[w.r.IntN(2)]
	p.Spec.Priority = int32(w.r.IntN(3))
	p.Spec.Subject.Namespaces = w.nsSel()
	actions := []cnpv1.ClusterNetworkPolicyRuleAction{cnpAccept, cnpDeny, cnpPass}
	for i := 1 + w.r.IntN(2); i > 0; i-- {
		peer := cnpv1.ClusterNetworkPolicyIngressPeer{Namespaces: w.nsSel()}
		if w.r.IntN(2) == 0 {
			peer = cnpv1.ClusterNetworkPolicyIngressPeer{Pods: &cnpv1.NamespacedPod{NamespaceSelector: *w.nsSel(), PodSelector: *w.podSel()}}
		}
		p.Spec.Ingress = append(p.Spec.Ingress, cnpv1.ClusterNetworkPolicyIngressRule{Action: actions[w.r.IntN(3)], From: from(peer)})
	}
	if w.r.IntN(2) == 0 {
		p.Spec.Egress = append(p.Spec.Egress, cnpv1.ClusterNetworkPolicyEgressRule{Action: actions[w.r.IntN(3)],
			To: to(cnpv1.ClusterNetworkPolicyEgressPeer{Namespaces: w.nsSel()})})
	}
	return p
}

func (w *npWorld) randomOther() *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2", Labels: map[string]string{"role": w.pick([]string{"db", "web"})}}}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: w.pick([]string{"10.0.0.10", "10.0.0.11", "255.255.255.255"})}}
	return n
}

func (w *npWorld) someKey(ns string) (objKey, bool) {
	var keys []objKey
	for k := range w.pods {
		if ns == "" || k.namespace == ns {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return objKey{}, false
	}
	slices.SortFunc(keys, compareKeys)
	return keys[w.r.IntN(len(keys))], true
}

func (w *npWorld) editPod(k objKey, edit func(*corev1.Pod)) {
	p := w.pods[k].DeepCopy()
	q := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, Labels: maps.Clone(p.Labels),
		CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp},
		Spec: corev1.PodSpec{NodeName: p.Spec.NodeName, Containers: []corev1.Container{{Name: "c"}}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for _, ip := range p.Status.PodIPs {
		q.Status.PodIPs = append(q.Status.PodIPs, corev1.PodIP{IP: ip.IP})
	}
	edit(q)
	w.pods[k] = k8s.NewPod(q)
}

// event changes the world by one event and names it.
func (w *npWorld) event() string {
	switch w.r.IntN(20) {
	case 0, 1, 2: // a namespace relabelled
		ns := w.pick(npwNamespaces)
		w.nsLabels[ns] = w.randomNSLabels()
		return "ns relabel " + ns
	case 3: // a namespace relabelled now and back in the next compile
		ns := w.pick(npwNamespaces)
		old, had := w.nsLabels[ns]
		w.nsLabels[ns] = w.randomNSLabels()
		w.undo = append(w.undo, func() string {
			if had {
				w.nsLabels[ns] = old
			} else {
				delete(w.nsLabels, ns)
			}
			return "ns back " + ns
		})
		return "ns flip " + ns
	case 4: // every namespace relabelled at once
		for _, ns := range slices.Sorted(maps.Keys(w.nsLabels)) {
			w.nsLabels[ns] = w.randomNSLabels()
		}
		return "ns relabel all"
	case 5: // a namespace deleted or back (its pods stay)
		ns := w.pick(npwNamespaces)
		if _, ok := w.nsLabels[ns]; ok {
			delete(w.nsLabels, ns)
			return "ns delete " + ns
		}
		w.nsLabels[ns] = w.randomNSLabels()
		return "ns add " + ns
	case 6: // a namespace quarantined or released
		ns := w.pick(npwNamespaces)
		w.qNS[ns] = !w.qNS[ns]
		return fmt.Sprintf("ns quarantined=%v %s", w.qNS[ns], ns)
	case 7, 8: // a pod added or replaced
		ns, name := w.pick(npwNamespaces), w.pick(npwPods)
		w.setPod(ns, name)
		return "pod set " + ns + "/" + name
	case 9: // a pod deleted
		if k, ok := w.someKey(""); ok {
			delete(w.pods, k)
			return "pod delete " + k.String()
		}
	case 10: // a pod relabelled
		if k, ok := w.someKey(""); ok {
			w.editPod(k, func(p *corev1.Pod) { p.Labels["app"] = w.pick([]string{"web", "db", "cache"}) })
			return "pod relabel " + k.String()
		}
	case 11: // a pod readdressed
		if k, ok := w.someKey(""); ok {
			ips := w.addrs()
			w.editPod(k, func(p *corev1.Pod) {
				p.Status.PodIPs = nil
				for _, ip := range ips {
					p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
				}
			})
			return fmt.Sprintf("pod readdress %s %v", k, ips)
		}
	case 12: // every pod of a namespace relabelled, and the namespace too
		ns := w.pick(npwNamespaces)
		app := w.pick([]string{"web", "db"})
		for k := range w.pods {
			if k.namespace == ns {
				w.editPod(k, func(p *corev1.Pod) { p.Labels["app"] = app })
			}
		}
		w.nsLabels[ns] = w.randomNSLabels()
		return "ns and all its pods relabel " + ns
	case 13: // a pod of a namespace changed with the namespace
		ns := w.pick(npwNamespaces)
		w.nsLabels[ns] = w.randomNSLabels()
		w.setPod(ns, w.pick(npwPods))
		return "ns relabel and pod set " + ns
	case 14, 15: // a policy added or replaced
		w.setPolicy()
		return "policy set"
	case 16: // a policy deleted
		keys := slices.SortedFunc(maps.Keys(w.pols), compareKeys)
		if len(keys) > 0 {
			k := keys[w.r.IntN(len(keys))]
			delete(w.pols, k)
			return "policy delete " + k.String()
		}
	case 17: // a cluster policy set or deleted
		name := w.pick([]string{"c0", "c1", "c2"})
		if _, ok := w.cnps[name]; ok && w.r.IntN(3) == 0 {
			delete(w.cnps, name)
			return "cnp delete " + name
		}
		w.cnps[name] = w.randomCNP(name)
		return "cnp set " + name
	case 18: // the other node
		if w.other != nil && w.r.IntN(3) == 0 {
			w.other = nil
			return "node-2 delete"
		}
		w.other = w.randomOther()
		return "node-2 set"
	case 19: // many pods of a namespace readdressed at once
		ns := w.pick(npwNamespaces)
		for _, k := range slices.SortedFunc(maps.Keys(w.pods), compareKeys) {
			if k.namespace == ns {
				ips := w.addrs()
				w.editPod(k, func(p *corev1.Pod) {
					p.Status.PodIPs = nil
					for _, ip := range ips {
						p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
					}
				})
			}
		}
		return "pods of ns readdressed " + ns
	}
	return "nothing"
}

func (w *npWorld) snapshot() *k8s.Snapshot {
	s := &k8s.Snapshot{}
	for _, ns := range slices.Sorted(maps.Keys(w.nsLabels)) {
		s.Namespaces = append(s.Namespaces, npNS(ns, w.nsLabels[ns]))
	}
	for _, k := range slices.SortedFunc(maps.Keys(w.pods), compareKeys) {
		s.Pods = append(s.Pods, w.pods[k])
	}
	for _, ns := range slices.Sorted(maps.Keys(w.qNS)) {
		if w.qNS[ns] {
			s.QuarantinedNamespaces = append(s.QuarantinedNamespaces, ns)
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(w.pols), compareKeys) {
		s.Policies = append(s.Policies, w.pols[k])
	}
	for _, n := range slices.Sorted(maps.Keys(w.cnps)) {
		s.ClusterPolicies = append(s.ClusterPolicies, w.cnps[n])
	}
	s.Nodes = []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: testNode}}}
	if w.other != nil {
		s.Nodes = append(s.Nodes, w.other)
	}
	return s
}

// batch runs the pending undos and 1..maxEvents new events: one compile's
// worth.
func (w *npWorld) batch(maxEvents int) []string {
	var names []string
	undo := w.undo
	w.undo = nil
	for _, u := range undo {
		names = append(names, u())
	}
	for i := 1 + w.r.IntN(maxEvents); i > 0; i-- {
		names = append(names, w.event())
	}
	return names
}

// runNPWorld drives one Compiler through compiles of several events each
// and checks every compile against a fresh one (checkIncremental), the
// order of chains and sets, and that exact updates are sorted.
func runNPWorld(t *testing.T, seed uint64, share bool, compiles int) {
	t.Helper()
	w := newNPWorld(seed, share)
	opts := Options{Node: testNode}
	inc := NewCompiler(opts)
	var prev *nft.Table
	var history []string
	for i := 0; i < compiles; i++ {
		events := w.batch(6)
		history = append(history, fmt.Sprintf("compile %d: %q", i, events))
		if len(history) > 4 {
			history = history[1:]
		}
		snap := w.snapshot()
		where := fmt.Sprintf("seed %d, last compiles:\n\t%s\n", seed, joinLines(history))
		// checkIncremental compares nft.Render of both tables, which lists
		// sets and chains in table order: the order is compared too.
		got := checkIncremental(t, inc, opts, prev, snap, DefaultPriority, where)
		npCheckExactSorted(t, inc, where)
		prev = got
	}
}

func joinLines(l []string) string {
	out := ""
	for i, s := range l {
		if i > 0 {
			out += "\n\t"
		}
		out += s
	}
	return out
}

// TestHostileNSPatchWorldDistinct: no two pods ever hold one address.
func TestHostileNSPatchWorldDistinct(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runNPWorld(t, seed, false, 64) })
	}
}

// TestHostileNSPatchWorldShared: pods may take addresses others hold.
// Seeds 1 and 7 of these reach the contested-address case of
// TestHostileNSPatchRelabelWithContestedNewPod (compiles 63 and 49).
func TestHostileNSPatchWorldShared(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runNPWorld(t, seed, true, 64) })
	}
}
