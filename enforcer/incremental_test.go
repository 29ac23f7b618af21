package enforcer

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"

	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// TestIncrementalMatchesFull drives one Compiler through random event
// sequences (pods, namespaces and policies added, changed and deleted, and
// objects replaced by equal copies) and checks after every event that it
// returns exactly what a fresh compile of the same snapshot returns.
func TestIncrementalMatchesFull(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			w := newWorld(seed)
			// Odd seeds close unknown addresses of the node's pod CIDRs.
			opts := Options{Node: testNode, DenyUnknown: seed%2 == 1}
			inc := NewCompiler(opts)
			var prev *nft.Table
			for step := 0; step < 150; step++ {
				event := w.step()
				snap := w.snapshot()
				priority := DefaultPriority
				if step%50 == 49 {
					priority-- // as when another component's chain moves in
				}
				prev = checkIncremental(t, inc, opts, prev, snap, priority, fmt.Sprintf("step %d (%s)", step, event))
			}
		})
	}
}

// checkIncremental compiles snap with inc and fails t unless the table and
// problems equal a fresh compile's, its set elements are unique, and (after
// prev, the table of inc's last compile) its Delta names what nft.Diff
// does and its exact set patches are the sets' true difference. It
// returns the table, for the next step's prev.
func checkIncremental(t *testing.T, inc *Compiler, opts Options, prev *nft.Table, snap *k8s.Snapshot, priority int32, where string) *nft.Table {
	t.Helper()
	got, gotProblems := inc.Compile(snap, priority)
	return checkCompiled(t, inc, opts, prev, got, gotProblems, snap, priority, where)
}

// checkCompiled is checkIncremental's check of got and gotProblems, inc's
// compile of snap.
func checkCompiled(t *testing.T, inc *Compiler, opts Options, prev, got *nft.Table, gotProblems []Problem, snap *k8s.Snapshot, priority int32, where string) *nft.Table {
	t.Helper()
	fresh := NewCompiler(opts)
	want, wantProblems := fresh.Compile(snap, priority)
	checkClaims(t, fresh, inc, where)
	if diff := gocmp.Diff(nft.Render(want), nft.Render(got)); diff != "" {
		t.Fatalf("%s: incremental table differs from a full compile (-full +incremental):\n%s", where, diff)
	}
	if diff := gocmp.Diff(problemStrings(wantProblems), problemStrings(gotProblems)); diff != "" {
		t.Fatalf("%s: problems differ (-full +incremental):\n%s", where, diff)
	}
	requireUniqueElements(t, got)
	if prev != nil {
		checkDelta(t, inc, prev, got, where)
	}
	return got
}

// checkClaims fails t unless inc holds a claim for the pods fresh does,
// each taking part with an equal view: none left behind by a pod that
// went, which the tables would not show.
func checkClaims(t *testing.T, fresh, inc *Compiler, where string) {
	t.Helper()
	for k, cl := range inc.claimsByPod {
		want := fresh.claimsByPod[k]
		switch {
		case cl.withdrawn:
			t.Fatalf("%s: the claim of %s stays withdrawn after the compile", where, k)
		case want == nil:
			t.Fatalf("%s: a claim of %s, which a fresh compiler does not hold", where, k)
		case (cl.effective == nil) != (want.effective == nil) || cl.effective != nil && !cl.effective.equal(want.effective):
			t.Fatalf("%s: %s takes part as %+v, a fresh compiler's as %+v", where, k, cl.effective, want.effective)
		}
	}
	if len(inc.claimsByPod) != len(fresh.claimsByPod) {
		t.Fatalf("%s: %d claims, a fresh compiler %d", where, len(inc.claimsByPod), len(fresh.claimsByPod))
	}
}

// checkDelta fails t unless inc's Delta, from prev to got (its last
// compile), names what nft.Diff does and its exact set patches are the
// sets' true difference.
func checkDelta(t *testing.T, inc *Compiler, prev, got *nft.Table, where string) {
	t.Helper()
	delta := inc.Delta()
	if diff := gocmp.Diff(deltaNames(nft.Diff(prev, got)), deltaNames(delta)); diff != "" {
		t.Fatalf("%s: Delta differs from nft.Diff (-Diff +Delta):\n%s", where, diff)
	}
	for _, u := range delta.UpdateSets {
		if !u.Exact {
			continue
		}
		removed, added := elementDiff(u.Old.List(), u.New.List())
		if !sameElements(u.Removed, removed) || !sameElements(u.Added, added) {
			t.Fatalf("%s: set %s: exact update +%v -%v, the sets differ by +%v -%v", where, u.New.Name, u.Added, u.Removed, added, removed)
		}
	}
}

// TestIncrementalSharesUnchanged checks that a table from a Compiler reuses
// the chains and sets an event did not touch, which is what makes nft.Diff
// cheap, and that an event that changes nothing yields an empty delta.
func TestIncrementalSharesUnchanged(t *testing.T) {
	snap := cluster(
		policy("x", "allow-y", ingressRule(peers(nsPeer("y")), port(tcp, 80))),
		policy("y", "allow-z", ingressRule(peers(nsPeer("z")), namedPort(tcp, "serve-80-tcp"))),
	)
	inc := NewCompiler(Options{Node: testNode})
	first, _ := inc.Compile(snap, DefaultPriority)

	// A pod of z changes labels: only the peer set naming namespace z may change.
	next := *snap
	next.Pods = slices.Clone(snap.Pods)
	for i, p := range next.Pods {
		if p.Namespace == "z" && p.Name == "a" {
			p = p.DeepCopy()
			p.Labels["tier"] = "new"
			next.Pods[i] = p
		}
	}
	second, _ := inc.Compile(&next, DefaultPriority)
	d := nft.Diff(first, second)
	if !d.Empty() {
		t.Errorf("a label no selector reads changed the table: %+v", d)
	}
	for i := range first.Chains {
		if i > 0 && first.Chains[i] != second.Chains[i] {
			t.Errorf("chain %s was rebuilt", first.Chains[i].Name)
		}
	}
	for i := range first.Sets {
		if i >= 4 && first.Sets[i] != second.Sets[i] {
			t.Errorf("set %s was rebuilt", first.Sets[i].Name)
		}
	}

	// Deleting a pod of z changes exactly the peer sets naming z and the
	// sets of the named port it served.
	third := next
	third.Pods = slices.DeleteFunc(slices.Clone(next.Pods), func(p *k8s.Pod) bool { return p.Namespace == "z" && p.Name == "b" })
	table, _ := inc.Compile(&third, DefaultPriority)
	d = nft.Diff(second, table)
	var updated []string
	for _, u := range d.UpdateSets {
		updated = append(updated, u.New.Comment)
	}
	slices.Sort(updated)
	port := "named port serve-80-tcp/tcp: address . protocol . port of each pod of this node serving it"
	if want := []string{port, port, "peers ns:ns=z|pod:all;", "peers ns:ns=z|pod:all;"}; !slices.Equal(updated, want) ||
		len(d.AddChains)+len(d.RewriteChains)+len(d.DeleteChains)+len(d.AddSets)+len(d.DeleteSets) != 0 {
		t.Errorf("deleting z/b: delta %+v, updated sets %q, want only %q", d, updated, want)
	}
}

// deltaNames summarizes a delta by kind and name, sorted, to compare deltas
// built in different orders.
func deltaNames(d *nft.Delta) []string {
	if d.Full {
		return []string{"full: " + d.Reason}
	}
	var out []string
	for _, c := range d.AddChains {
		out = append(out, "add chain "+c.Name)
	}
	for _, c := range d.RewriteChains {
		out = append(out, "rewrite chain "+c.Name)
	}
	for _, n := range d.DeleteChains {
		out = append(out, "delete chain "+n)
	}
	for _, s := range d.AddSets {
		out = append(out, "add set "+s.Name)
	}
	for _, u := range d.UpdateSets {
		out = append(out, fmt.Sprintf("update set %s %p -> %p", u.New.Name, u.Old, u.New))
	}
	for _, n := range d.DeleteSets {
		out = append(out, "delete set "+n)
	}
	slices.Sort(out)
	return out
}

// elementDiff returns what old has and new has not, and the reverse.
func elementDiff(old, new []nft.Element) (removed, added []nft.Element) {
	for _, e := range old {
		if !slices.Contains(new, e) {
			removed = append(removed, e)
		}
	}
	for _, e := range new {
		if !slices.Contains(old, e) {
			added = append(added, e)
		}
	}
	return removed, added
}

func sameElements(a, b []nft.Element) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(e nft.Element) bool { return !slices.Contains(b, e) })
}

// requireUniqueElements fails when a set holds one key twice, which the
// kernel refuses (EEXIST) for the whole batch.
func requireUniqueElements(t *testing.T, table *nft.Table) {
	t.Helper()
	for _, s := range table.Sets {
		seen := map[nft.Element]bool{}
		for _, e := range s.All() {
			key := nft.Element{Addr: e.Addr, Last: e.Last, Proto: e.Proto, Port: e.Port}
			if seen[key] {
				t.Fatalf("set %s holds %v twice", s.Name, key)
			}
			seen[key] = true
		}
	}
}

func problemStrings(ps []Problem) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Error())
	}
	return out
}

// A world is a small random cluster that changes one object per step.
type world struct {
	r          *rand.Rand
	namespaces map[string]*corev1.Namespace
	pods       map[objKey]*k8s.Pod
	policies   map[objKey]*networkingv1.NetworkPolicy
	node       *corev1.Node // this node, with pod CIDRs that change
	nextIP     int
	// quarantined pods (k8s.Snapshot.Quarantined), toggled without a new
	// pod object, as a source may.
	quarantined map[objKey]bool
	// quarantined namespaces and unsettled pods (k8s.Snapshot), toggled
	// the same way.
	quarantinedNS map[string]bool
	unsettled     map[objKey]*k8s.UnsettledPod
	// ClusterNetworkPolicies by name, and another node whose labels and
	// addresses node peers read.
	cluster map[string]*cnpv1.ClusterNetworkPolicy
	other   *corev1.Node
}

var (
	worldNamespaces = []string{"x", "y", "z", "w"}
	worldPods       = []string{"a", "b", "c", "d", "e"}
	worldPolicies   = []string{"p0", "p1", "p2", "p3", "p4", "p5"}
	worldPortNames  = []string{"http", "dns", "metrics"}

	worldClusterPolicies = []string{"c0", "c1", "c2", "c3"}
)

func (w *world) randomOtherNode() *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2", Labels: map[string]string{"role": w.pick([]string{"db", "web"})}}}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: w.pick([]string{"192.0.2.1", "192.0.2.2"})}, {Type: corev1.NodeInternalIP, Address: "2001:db8::1"}}
	return n
}

// randomClusterPolicy is a ClusterNetworkPolicy of either tier, with
// subjects and peers that pod, namespace and node events move in and out.
func (w *world) randomClusterPolicy(name string) *cnpv1.ClusterNetworkPolicy {
	p := &cnpv1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.Tier = []cnpv1.Tier{cnpv1.AdminTier, cnpv1.BaselineTier}[w.r.IntN(2)]
	p.Spec.Priority = int32(w.r.IntN(3))
	team := &metav1.LabelSelector{MatchLabels: map[string]string{"team": w.pick([]string{"red", "blue"})}}
	app := metav1.LabelSelector{MatchLabels: map[string]string{"app": w.pick([]string{"web", "db"})}}
	if w.r.IntN(2) == 0 {
		p.Spec.Subject.Namespaces = team
	} else {
		p.Spec.Subject.Pods = &cnpv1.NamespacedPod{PodSelector: app}
	}
	actions := []cnpv1.ClusterNetworkPolicyRuleAction{cnpAccept, cnpDeny, cnpPass}
	protocols := func() []cnpv1.ClusterNetworkPolicyProtocol {
		switch w.r.IntN(4) {
		case 0:
			return []cnpv1.ClusterNetworkPolicyProtocol{tcpPort(int32(80 + w.r.IntN(3)))}
		case 1:
			return []cnpv1.ClusterNetworkPolicyProtocol{{DestinationNamedPort: w.pick(worldPortNames)}}
		case 2:
			return []cnpv1.ClusterNetworkPolicyProtocol{udpRange(5000, 5100)}
		}
		return nil
	}
	for i := w.r.IntN(3); i > 0; i-- {
		peer := cnpv1.ClusterNetworkPolicyIngressPeer{Namespaces: team}
		if w.r.IntN(2) == 0 {
			peer = cnpv1.ClusterNetworkPolicyIngressPeer{Pods: &cnpv1.NamespacedPod{PodSelector: app}}
		}
		p.Spec.Ingress = append(p.Spec.Ingress, cnpv1.ClusterNetworkPolicyIngressRule{Action: actions[w.r.IntN(3)], From: from(peer), Protocols: protocols()})
	}
	for i := w.r.IntN(3); i > 0; i-- {
		var peer cnpv1.ClusterNetworkPolicyEgressPeer
		switch w.r.IntN(4) {
		case 0:
			peer.Namespaces = team
		case 1:
			peer.Pods = &cnpv1.NamespacedPod{PodSelector: app}
		case 2:
			peer.Nodes = &metav1.LabelSelector{MatchLabels: map[string]string{"role": "db"}}
		default:
			peer.Networks = []cnpv1.CIDR{"10.1.0.0/24", "fd00:1::/64"}
		}
		p.Spec.Egress = append(p.Spec.Egress, cnpv1.ClusterNetworkPolicyEgressRule{Action: actions[w.r.IntN(3)], To: to(peer), Protocols: protocols()})
	}
	return p
}

func newWorld(seed uint64) *world {
	w := &world{
		r:          rand.New(rand.NewPCG(seed, seed*7919)),
		namespaces: map[string]*corev1.Namespace{},
		pods:       map[objKey]*k8s.Pod{},
		policies:   map[objKey]*networkingv1.NetworkPolicy{},
	}
	w.quarantined = map[objKey]bool{}
	w.quarantinedNS = map[string]bool{}
	w.unsettled = map[objKey]*k8s.UnsettledPod{}
	w.cluster = map[string]*cnpv1.ClusterNetworkPolicy{}
	w.node = w.randomNode()
	w.other = w.randomOtherNode()
	for i := 0; i < 2; i++ {
		name := w.pick(worldClusterPolicies)
		w.cluster[name] = w.randomClusterPolicy(name)
	}
	for _, ns := range worldNamespaces[:3] {
		w.namespaces[ns] = w.randomNamespace(ns)
		for _, p := range worldPods[:3] {
			w.pods[objKey{ns, p}] = w.randomPod(ns, p)
		}
	}
	for i := 0; i < 4; i++ {
		ns := w.pick(worldNamespaces[:3])
		name := w.pick(worldPolicies)
		w.policies[objKey{ns, name}] = w.randomPolicy(ns, name)
	}
	return w
}

func (w *world) pick(s []string) string { return s[w.r.IntN(len(s))] }

func (w *world) randomNode() *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}}
	n.Spec.PodCIDRs = []string{w.pick([]string{"10.1.0.0/24", "10.1.0.0/25", "10.1.1.0/24"}), w.pick([]string{"fd00:1::/120", "fd00:1::/64"})}
	return n
}

func (w *world) randomNamespace(name string) *corev1.Namespace {
	labels := map[string]string{"team": w.pick([]string{"red", "blue"})}
	if w.r.IntN(3) == 0 {
		labels["env"] = "prod"
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func (w *world) ip() (string, string) {
	// Now and then the address of the last pod again: two pods holding one
	// address, as when an IP is reused while the old pod's object lingers.
	if w.nextIP == 0 || w.r.IntN(6) != 0 {
		w.nextIP++
	}
	return fmt.Sprintf("10.1.%d.%d", w.nextIP/200, w.nextIP%200+1), fmt.Sprintf("fd00:1::%x", w.nextIP)
}

func (w *world) randomPod(ns, name string) *k8s.Pod {
	v4, v6 := w.ip()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			"app": w.pick([]string{"web", "db"}), "tier": w.pick([]string{"1", "2"}),
		}},
		Spec:   corev1.PodSpec{NodeName: w.pick([]string{testNode, testNode, "node-2"})},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: v4}, {IP: v6}}},
	}
	p.CreationTimestamp = metav1.NewTime(time.Unix(int64(1e9+w.r.IntN(3)), 0))
	if w.r.IntN(6) == 0 {
		p.DeletionTimestamp = &metav1.Time{Time: time.Unix(2e9, 0)}
	}
	var ports []corev1.ContainerPort
	for i, n := range worldPortNames {
		if w.r.IntN(2) == 0 {
			ports = append(ports, corev1.ContainerPort{Name: n, ContainerPort: int32(8000 + i + w.r.IntN(2)*100), Protocol: []corev1.Protocol{tcp, udp}[w.r.IntN(2)]})
		}
	}
	p.Spec.Containers = []corev1.Container{{Name: "c", Ports: ports}}
	switch w.r.IntN(12) {
	case 0:
		p.Spec.HostNetwork = true
	case 1:
		p.Status.Phase = corev1.PodSucceeded
	case 2:
		p.Status.PodIPs = nil
	case 3:
		p.Status.PodIPs = []corev1.PodIP{{IP: "not-an-ip"}}
	}
	return k8s.NewPod(p)
}

func (w *world) randomPeer(ns string) networkingv1.NetworkPolicyPeer {
	podSel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": w.pick([]string{"web", "db"})}}
	switch w.r.IntN(7) {
	case 0:
		return networkingv1.NetworkPolicyPeer{PodSelector: podSel}
	case 1:
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": w.pick([]string{"red", "blue"})}}}
	case 2:
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{}, PodSelector: podSel}
	case 3:
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "env", Operator: metav1.LabelSelectorOpDoesNotExist},
		}}, PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"2"}},
		}}}
	case 4:
		return ipBlock("10.1.0.0/16", "10.1.0.0/26")
	case 5:
		return ipBlock("fd00:1::/64", "fd00:1::/124")
	}
	// An invalid selector: the rule must be left out, as a problem.
	return networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "app", Operator: "Bogus"},
	}}}
}

func (w *world) randomPorts() []networkingv1.NetworkPolicyPort {
	var out []networkingv1.NetworkPolicyPort
	for i := w.r.IntN(3); i > 0; i-- {
		switch w.r.IntN(3) {
		case 0:
			out = append(out, port(tcp, int32(80+w.r.IntN(3))))
		case 1:
			out = append(out, namedPort([]corev1.Protocol{tcp, udp}[w.r.IntN(2)], w.pick(worldPortNames)))
		default:
			out = append(out, portRange(udp, 5000, 5100))
		}
	}
	return out
}

func (w *world) randomPolicy(ns, name string) *networkingv1.NetworkPolicy {
	np := policy(ns, name)
	switch w.r.IntN(4) {
	case 0:
	case 1:
		np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": w.pick([]string{"web", "db"})}}
	case 2:
		np.Spec.PodSelector = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"1"}}}}
	case 3:
		if w.r.IntN(3) == 0 {
			np.Spec.PodSelector = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "Bogus"}}}
		}
	}
	for i := w.r.IntN(3); i > 0; i-- {
		var ps []networkingv1.NetworkPolicyPeer
		for j := w.r.IntN(3); j > 0; j-- {
			ps = append(ps, w.randomPeer(ns))
		}
		np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: ps, Ports: w.randomPorts()})
	}
	if w.r.IntN(2) == 0 {
		np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress)
		for i := w.r.IntN(3); i > 0; i-- {
			var ps []networkingv1.NetworkPolicyPeer
			for j := w.r.IntN(3); j > 0; j-- {
				ps = append(ps, w.randomPeer(ns))
			}
			np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: ps, Ports: w.randomPorts()})
		}
	}
	return np
}

// step changes the world by one event and names it.
func (w *world) step() string {
	switch w.r.IntN(14) {
	case 12: // a ClusterNetworkPolicy added, replaced or deleted
		name := w.pick(worldClusterPolicies)
		if _, ok := w.cluster[name]; ok && w.r.IntN(3) == 0 {
			delete(w.cluster, name)
			return "cluster policy delete " + name
		}
		w.cluster[name] = w.randomClusterPolicy(name)
		return "cluster policy set " + name
	case 13: // the other node relabelled, readdressed, deleted or back
		if w.other != nil && w.r.IntN(4) == 0 {
			w.other = nil
			return "other node delete"
		}
		w.other = w.randomOtherNode()
		return "other node set"
	case 0, 1: // pod added or replaced
		ns, name := w.pick(worldNamespaces), w.pick(worldPods)
		w.pods[objKey{ns, name}] = w.randomPod(ns, name)
		return "pod set " + ns + "/" + name
	case 2: // pod deleted
		if k, ok := w.anyKey(w.pods); ok {
			delete(w.pods, k)
			return "pod delete " + k.String()
		}
	case 3: // pod labels changed
		if k, ok := w.anyKey(w.pods); ok {
			p := w.pods[k].DeepCopy()
			p.Labels["app"] = w.pick([]string{"web", "db", "cache"})
			w.pods[k] = p
			return "pod labels " + k.String()
		}
	case 4: // pod moved to another address or node
		if k, ok := w.anyKey(w.pods); ok {
			p := w.pods[k].DeepCopy()
			if w.r.IntN(2) == 0 {
				v4, v6 := w.ip()
				p.Status.PodIPs = []corev1.PodIP{{IP: v4}, {IP: v6}}
			} else {
				p.Spec.NodeName = w.pick([]string{testNode, "node-2"})
			}
			w.pods[k] = p
			return "pod moved " + k.String()
		}
	case 5: // namespace labels changed, added or deleted
		ns := w.pick(worldNamespaces)
		if _, ok := w.namespaces[ns]; ok && w.r.IntN(4) == 0 {
			delete(w.namespaces, ns)
			return "namespace delete " + ns
		}
		w.namespaces[ns] = w.randomNamespace(ns)
		return "namespace set " + ns
	case 6, 7: // policy added or replaced
		ns, name := w.pick(worldNamespaces), w.pick(worldPolicies)
		w.policies[objKey{ns, name}] = w.randomPolicy(ns, name)
		return "policy set " + ns + "/" + name
	case 8: // policy deleted
		if k, ok := w.anyKey(w.policies); ok {
			delete(w.policies, k)
			return "policy delete " + k.String()
		}
	case 10: // this node's pod CIDRs changed, or the Node went or came back
		switch w.r.IntN(4) {
		case 0:
			w.node = nil
			return "node delete"
		case 1:
			w.node = w.randomNode()
			w.node.Spec.PodCIDRs = append(w.node.Spec.PodCIDRs, "not-a-cidr")
			return "node set, bad CIDR"
		}
		w.node = w.randomNode()
		return "node set"
	case 11: // a pod or namespace quarantined or released, a pod unsettled or settled, the same object
		switch w.r.IntN(3) {
		case 0:
			ns := w.pick(worldNamespaces)
			w.quarantinedNS[ns] = !w.quarantinedNS[ns]
			return fmt.Sprintf("namespace quarantined=%v %s", w.quarantinedNS[ns], ns)
		case 1:
			if k, ok := w.anyKey(w.pods); ok {
				if w.unsettled[k] != nil {
					delete(w.unsettled, k)
					return "pod settled " + k.String()
				}
				// Its own addresses and another, which may be another
				// pod's, on this node, another or both.
				u := &k8s.UnsettledPod{Namespace: k.namespace, Name: k.name}
				for _, ip := range w.pods[k].Status.PodIPs {
					if _, err := netip.ParseAddr(ip.IP); err == nil {
						u.IPs = append(u.IPs, ip.IP)
					}
				}
				v4, _ := w.ip()
				u.IPs = append(u.IPs, v4)
				slices.SortFunc(u.IPs, func(a, b string) int { return netip.MustParseAddr(a).Compare(netip.MustParseAddr(b)) })
				u.IPs = slices.Compact(u.IPs)
				u.Nodes = [][]string{{testNode}, {"node-2"}, {testNode, "node-2"}}[w.r.IntN(3)]
				w.unsettled[k] = u
				return fmt.Sprintf("pod unsettled %s on %v at %v", k, u.Nodes, u.IPs)
			}
		default:
			if k, ok := w.anyKey(w.pods); ok {
				w.quarantined[k] = !w.quarantined[k]
				return fmt.Sprintf("pod quarantined=%v %s", w.quarantined[k], k)
			}
		}
	case 9: // every object replaced by an equal copy, as a manifests reload does
		for k, p := range w.pods {
			w.pods[k] = p.DeepCopy()
		}
		for k, np := range w.policies {
			w.policies[k] = np.DeepCopy()
		}
		for k, ns := range w.namespaces {
			w.namespaces[k] = ns.DeepCopy()
		}
		for k, p := range w.cluster {
			w.cluster[k] = p.DeepCopy()
		}
		return "copies"
	}
	return "nothing"
}

func (w *world) anyKey(m any) (objKey, bool) {
	var keys []objKey
	switch m := m.(type) {
	case map[objKey]*k8s.Pod:
		keys = slices.Collect(maps.Keys(m))
	case map[objKey]*networkingv1.NetworkPolicy:
		keys = slices.Collect(maps.Keys(m))
	}
	if len(keys) == 0 {
		return objKey{}, false
	}
	slices.SortFunc(keys, compareKeys)
	return keys[w.r.IntN(len(keys))], true
}

// snapshot lists the world sorted, as sources do; unchanged objects are the
// same pointers as in the previous snapshot. One time in ten the pods and
// policies come shuffled, breaking the Snapshot contract, which the
// compiler must survive.
func (w *world) snapshot() *k8s.Snapshot {
	s := &k8s.Snapshot{}
	for _, name := range slices.Sorted(maps.Keys(w.namespaces)) {
		s.Namespaces = append(s.Namespaces, w.namespaces[name])
	}
	for _, k := range slices.SortedFunc(maps.Keys(w.pods), compareKeys) {
		s.Pods = append(s.Pods, w.pods[k])
		if w.quarantined[k] || w.unsettled[k] != nil {
			s.Quarantined = append(s.Quarantined, ktypes.NamespacedName{Namespace: k.namespace, Name: k.name})
		}
		if u := w.unsettled[k]; u != nil {
			s.Unsettled = append(s.Unsettled, *u)
		}
	}
	for _, ns := range slices.Sorted(maps.Keys(w.quarantinedNS)) {
		if w.quarantinedNS[ns] {
			s.QuarantinedNamespaces = append(s.QuarantinedNamespaces, ns)
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(w.policies), compareKeys) {
		s.Policies = append(s.Policies, w.policies[k])
	}
	for _, name := range slices.Sorted(maps.Keys(w.cluster)) {
		s.ClusterPolicies = append(s.ClusterPolicies, w.cluster[name])
	}
	if w.node != nil {
		s.Nodes = []*corev1.Node{w.node}
	}
	if w.other != nil {
		s.Nodes = append(s.Nodes, w.other)
	}
	if w.r.IntN(10) == 0 {
		w.r.Shuffle(len(s.Pods), func(i, j int) { s.Pods[i], s.Pods[j] = s.Pods[j], s.Pods[i] })
		w.r.Shuffle(len(s.Policies), func(i, j int) { s.Policies[i], s.Policies[j] = s.Policies[j], s.Policies[i] })
	}
	return s
}
