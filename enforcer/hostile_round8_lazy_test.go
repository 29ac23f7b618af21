package enforcer

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// Hostile review, round 8: a policy's rules are built when it becomes
// active (policy.go: planPolicy, activate, deactivate), and a union's
// parts are merged in one k-way merge (mergeRanges).
//
// The world: policy namespaces t and u whose target pods come and go,
// move between this node and another, and change labels, so that their
// policies go in and out of activity; peer namespaces a, b and c, whose
// pods sit at consecutive addresses (a's and b's ranges adjacent, c's
// every other address) so that unions of their lists overlap and touch.
// Policies are edited (spec) and replaced by copies that differ in
// metadata only (some with nil and empty lists swapped, which the spec
// comparison takes for equal), while active and while not; namespaces
// gain and lose the flow-log annotation, and even vanish, while their
// policies are inactive. Rules use named ports (served with another
// protocol, or by nobody), ipBlocks, namespace selectors, ports and
// protocols that cannot be compiled, and some podSelectors do not parse.
// Every compile must equal a fresh compile of the same snapshot, problems
// included, its Delta the difference from the previous table; Explain
// and the counted chains must be a fresh compiler's.

var (
	r8PolicyNS = []string{"t", "u"}
	r8PeerNS   = []string{"a", "b", "c"}
)

const (
	r8Targets = 4
	r8Slots   = 8
)

func r8TargetAddr(ns string, i int) (string, string) {
	n := slices.Index(r8PolicyNS, ns) + 1
	return fmt.Sprintf("10.8.%d.%d", n, 10+i), fmt.Sprintf("fd08:%d::%x", n, 16+i)
}

// r8PeerAddr: a holds .10-.17 and b .18-.25 of one /24 (adjacent runs), c
// every other address of another.
func r8PeerAddr(ns string, slot int) (string, string) {
	switch ns {
	case "a":
		return fmt.Sprintf("10.8.3.%d", 10+slot), fmt.Sprintf("fd08:3::%x", 16+slot)
	case "b":
		return fmt.Sprintf("10.8.3.%d", 18+slot), fmt.Sprintf("fd08:3::%x", 24+slot)
	}
	return fmt.Sprintf("10.8.4.%d", 10+2*slot), fmt.Sprintf("fd08:4::%x", 16+2*slot)
}

type r8World struct {
	r        *rand.Rand
	nsLabels map[string]map[string]string
	nsGone   map[string]bool // no Namespace object
	flow     map[string]bool // annotated for flow logs
	pods     map[objKey]*k8s.Pod
	pols     map[objKey]*networkingv1.NetworkPolicy
	rv       int
}

func newR8World(seed uint64) *r8World {
	w := &r8World{r: rand.New(rand.NewPCG(seed, seed^0x8888)), nsLabels: map[string]map[string]string{},
		nsGone: map[string]bool{}, flow: map[string]bool{},
		pods: map[objKey]*k8s.Pod{}, pols: map[objKey]*networkingv1.NetworkPolicy{}}
	for _, ns := range append(slices.Clone(r8PolicyNS), r8PeerNS...) {
		w.nsLabels[ns] = w.nsLabelSet()
	}
	for _, ns := range r8PolicyNS {
		for i := range r8Targets {
			if w.r.IntN(2) == 0 {
				w.setTarget(ns, i)
			}
		}
		for i := range 4 {
			if w.r.IntN(3) != 0 {
				w.setPolicy(ns, fmt.Sprintf("p%d", i))
			}
		}
	}
	for _, ns := range r8PeerNS {
		for s := range r8Slots {
			if w.r.IntN(3) != 0 {
				w.setPeer(ns, s)
			}
		}
	}
	return w
}

func (w *r8World) pick(s ...string) string { return s[w.r.IntN(len(s))] }

func (w *r8World) nsLabelSet() map[string]string {
	l := map[string]string{"team": w.pick("red", "blue", "green")}
	if w.r.IntN(2) == 0 {
		l["env"] = "prod"
	}
	return l
}

func (w *r8World) containerPorts() []corev1.ContainerPort {
	var out []corev1.ContainerPort
	if w.r.IntN(3) != 0 {
		out = append(out, corev1.ContainerPort{Name: "http", ContainerPort: int32(80 + w.r.IntN(2)), Protocol: corev1.ProtocolTCP})
	}
	if w.r.IntN(2) == 0 {
		out = append(out, corev1.ContainerPort{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP})
	}
	if w.r.IntN(3) == 0 {
		out = append(out, corev1.ContainerPort{Name: "web", ContainerPort: 8080, Protocol: corev1.ProtocolTCP})
	}
	return out
}

func (w *r8World) pod(ns, name, node string, labels map[string]string, v4, v6 string) *k8s.Pod {
	w.rv++
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, ResourceVersion: fmt.Sprint(w.rv)},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Ports: w.containerPorts()}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: v4}, {IP: v6}}},
	}
	return k8s.NewPod(p)
}

func (w *r8World) targetLabels() map[string]string {
	l := map[string]string{"role": w.pick("target", "target", "other"), "grp": w.pick("0", "1")}
	return l
}

func (w *r8World) setTarget(ns string, i int) {
	node := testNode
	if w.r.IntN(3) == 0 {
		node = "node-2"
	}
	v4, v6 := r8TargetAddr(ns, i)
	name := fmt.Sprintf("tgt%d", i)
	w.pods[objKey{ns, name}] = w.pod(ns, name, node, w.targetLabels(), v4, v6)
}

func (w *r8World) setPeer(ns string, slot int) {
	node := "node-2"
	if w.r.IntN(5) == 0 {
		node = testNode
	}
	v4, v6 := r8PeerAddr(ns, slot)
	name := fmt.Sprintf("s%d", slot)
	w.pods[objKey{ns, name}] = w.pod(ns, name, node, map[string]string{"role": w.pick("x", "y")}, v4, v6)
}

func (w *r8World) peer() networkingv1.NetworkPolicyPeer {
	sel := func(kv ...string) *metav1.LabelSelector { return uuSel(kv...) }
	switch w.r.IntN(13) {
	case 0:
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: sel("team", w.pick("red", "blue", "green"))}
	case 1:
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: sel("env", "prod")}
	case 2:
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: sel("team", w.pick("red", "blue")), PodSelector: sel("role", w.pick("x", "y"))}
	case 3:
		return networkingv1.NetworkPolicyPeer{PodSelector: sel("role", w.pick("target", "other", "x"))}
	case 4:
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{}, PodSelector: sel("role", w.pick("x", "y"))}
	case 5:
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: sel(corev1.LabelMetadataName, w.pick("a", "b", "c", "t"))}
	case 6:
		return ipBlock("10.8.3.0/24", "10.8.3.16/29")
	case 7:
		return ipBlock("fd08:3::/64", "fd08:3::14/126")
	case 8:
		return ipBlock(w.pick("10.8.3.12/30", "10.8.3.24/29", "10.8.4.0/28"))
	case 9:
		if w.r.IntN(3) == 0 { // does not parse: the rule is a problem
			if w.r.IntN(2) == 0 {
				return ipBlock("10.8.3.0/33")
			}
			return networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "role", Operator: metav1.LabelSelectorOpIn}}}}
		}
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{}}
	case 10:
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "team", Operator: metav1.LabelSelectorOpNotIn, Values: []string{w.pick("red", "blue", "green")}}}}}
	}
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: sel("team", w.pick("red", "blue", "green")), PodSelector: &metav1.LabelSelector{}}
}

func (w *r8World) peers() []networkingv1.NetworkPolicyPeer {
	switch n := w.r.IntN(4); n {
	case 0:
		if w.r.IntN(2) == 0 {
			return nil
		}
		return []networkingv1.NetworkPolicyPeer{}
	default:
		var out []networkingv1.NetworkPolicyPeer
		for range n {
			out = append(out, w.peer())
		}
		return out
	}
}

func (w *r8World) ports() []networkingv1.NetworkPolicyPort {
	n := w.r.IntN(3)
	if n == 0 {
		return nil
	}
	var out []networkingv1.NetworkPolicyPort
	for range n {
		switch w.r.IntN(13) {
		case 0:
			out = append(out, port(tcp, 80))
		case 1:
			out = append(out, port(corev1.ProtocolUDP, 53))
		case 2:
			out = append(out, namedPort(tcp, "http"))
		case 3:
			out = append(out, namedPort(corev1.ProtocolUDP, "dns"))
		case 4:
			out = append(out, namedPort(tcp, "web"))
		case 5:
			out = append(out, portRange(tcp, 80, 90))
		case 6:
			out = append(out, protoOnly(corev1.ProtocolUDP))
		case 7:
			out = append(out, port(corev1.ProtocolSCTP, 80))
		case 8:
			out = append(out, port("ICMP", 80)) // unsupported protocol: a problem
		case 9:
			out = append(out, namedPort(tcp, "Bad_Name")) // invalid name: a problem
		case 10:
			out = append(out, namedPort(corev1.ProtocolUDP, "http")) // served by nobody with UDP
		case 11:
			np := namedPort(tcp, "dns")
			np.Protocol = nil // no protocol: TCP, which dns is not
			out = append(out, np)
		default:
			out = append(out, port(tcp, 8080))
		}
	}
	return out
}

func (w *r8World) setPolicy(ns, name string) {
	np := policy(ns, name)
	w.rv++
	np.ResourceVersion = fmt.Sprint(w.rv)
	switch w.r.IntN(9) {
	case 0:
		np.Spec.PodSelector = metav1.LabelSelector{}
	case 1:
		np.Spec.PodSelector = *uuSel("grp", w.pick("0", "1"))
	case 2:
		np.Spec.PodSelector = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "role", Operator: metav1.LabelSelectorOpIn, Values: []string{"target"}}}}
	case 3:
		np.Spec.PodSelector = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "grp", Operator: metav1.LabelSelectorOpNotIn, Values: []string{w.pick("0", "1")}}}}
	case 4:
		if w.r.IntN(2) == 0 { // does not parse: never active, a problem
			np.Spec.PodSelector = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "role", Operator: "Bogus", Values: []string{"target"}}}}
			break
		}
		fallthrough
	default:
		np.Spec.PodSelector = *uuSel("role", "target")
		if w.r.IntN(2) == 0 {
			np.Spec.PodSelector = *uuSel("role", "target", "grp", w.pick("0", "1"))
		}
	}
	switch w.r.IntN(4) {
	case 0:
	case 1:
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	case 2:
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	default:
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	}
	for range w.r.IntN(3) {
		np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: w.peers(), Ports: w.ports()})
	}
	if np.Spec.Ingress == nil && w.r.IntN(2) == 0 {
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{}
	}
	for range w.r.IntN(3) {
		np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: w.peers(), Ports: w.ports()})
	}
	w.pols[objKey{ns, name}] = np
}

// metadataOnly replaces a policy by a copy that differs in metadata, its
// spec deep-copied with nil and empty lists swapped where that means the
// same (the compiler compares specs semantically).
func (w *r8World) metadataOnly(k objKey) bool {
	old, ok := w.pols[k]
	if !ok {
		return false
	}
	np := old.DeepCopy()
	w.rv++
	np.ResourceVersion = fmt.Sprint(w.rv)
	np.Generation++
	np.Labels = map[string]string{"edited": fmt.Sprint(w.rv)}
	np.Annotations = map[string]string{"note": w.pick("a", "b")}
	swapFrom := func(p []networkingv1.NetworkPolicyPeer) []networkingv1.NetworkPolicyPeer {
		if len(p) == 0 {
			if p == nil {
				return []networkingv1.NetworkPolicyPeer{}
			}
			return nil
		}
		return p
	}
	swapPorts := func(p []networkingv1.NetworkPolicyPort) []networkingv1.NetworkPolicyPort {
		if len(p) == 0 {
			if p == nil {
				return []networkingv1.NetworkPolicyPort{}
			}
			return nil
		}
		return p
	}
	if w.r.IntN(2) == 0 {
		for i := range np.Spec.Ingress {
			np.Spec.Ingress[i].From = swapFrom(np.Spec.Ingress[i].From)
			np.Spec.Ingress[i].Ports = swapPorts(np.Spec.Ingress[i].Ports)
		}
		for i := range np.Spec.Egress {
			np.Spec.Egress[i].To = swapFrom(np.Spec.Egress[i].To)
			np.Spec.Egress[i].Ports = swapPorts(np.Spec.Egress[i].Ports)
		}
	}
	w.pols[k] = np
	return true
}

func (w *r8World) anyPolicy() objKey {
	return objKey{w.pick(r8PolicyNS...), fmt.Sprintf("p%d", w.r.IntN(4))}
}

func (w *r8World) event() string {
	ns := w.pick(r8PolicyNS...)
	i := w.r.IntN(r8Targets)
	tk := objKey{ns, fmt.Sprintf("tgt%d", i)}
	switch w.r.IntN(20) {
	case 0, 1, 2:
		w.setTarget(ns, i)
		return fmt.Sprintf("target %s set on %s labels %v", tk, w.pods[tk].Spec.NodeName, w.pods[tk].Labels)
	case 3:
		delete(w.pods, tk)
		return fmt.Sprintf("target %s delete", tk)
	case 4, 5:
		if p, ok := w.pods[tk]; ok { // labels only
			c := *p
			c.Labels = w.targetLabels()
			w.rv++
			c.ResourceVersion = fmt.Sprint(w.rv)
			w.pods[tk] = &c
			return fmt.Sprintf("target %s relabel %v", tk, c.Labels)
		}
	case 6:
		if p, ok := w.pods[tk]; ok { // to the other node
			c := *p
			c.Spec.NodeName = map[string]string{testNode: "node-2", "node-2": testNode}[p.Spec.NodeName]
			w.pods[tk] = &c
			return fmt.Sprintf("target %s moves to %s", tk, c.Spec.NodeName)
		}
	case 7, 8, 9:
		k := w.anyPolicy()
		w.setPolicy(k.namespace, k.name)
		return fmt.Sprintf("policy %s spec set", k)
	case 10:
		k := w.anyPolicy()
		delete(w.pols, k)
		return fmt.Sprintf("policy %s delete", k)
	case 11, 12:
		k := w.anyPolicy()
		if w.metadataOnly(k) {
			return fmt.Sprintf("policy %s metadata only", k)
		}
	case 13, 14:
		ns := w.pick(append(slices.Clone(r8PolicyNS), "a")...)
		w.flow[ns] = !w.flow[ns]
		return fmt.Sprintf("namespace %s flow log %v", ns, w.flow[ns])
	case 15:
		ns := w.pick(append(slices.Clone(r8PolicyNS), r8PeerNS...)...)
		w.nsLabels[ns] = w.nsLabelSet()
		return fmt.Sprintf("namespace %s labels %v", ns, w.nsLabels[ns])
	case 16:
		ns := w.pick(r8PolicyNS...)
		w.nsGone[ns] = !w.nsGone[ns]
		return fmt.Sprintf("namespace %s gone %v", ns, w.nsGone[ns])
	case 17:
		pns := w.pick(r8PeerNS...)
		s := w.r.IntN(r8Slots)
		w.setPeer(pns, s)
		return fmt.Sprintf("peer %s/s%d set", pns, s)
	case 18:
		pns := w.pick(r8PeerNS...)
		s := w.r.IntN(r8Slots)
		delete(w.pods, objKey{pns, fmt.Sprintf("s%d", s)})
		return fmt.Sprintf("peer %s/s%d delete", pns, s)
	case 19:
		pns := w.pick(r8PeerNS...)
		if w.r.IntN(2) == 0 {
			for s := range r8Slots {
				w.setPeer(pns, s)
			}
			return "fill " + pns
		}
		for s := 1; s < r8Slots; s += 2 {
			delete(w.pods, objKey{pns, fmt.Sprintf("s%d", s)})
		}
		return "thin " + pns
	}
	return "nothing"
}

func (w *r8World) snapshot() *k8s.Snapshot {
	s := &k8s.Snapshot{}
	for _, ns := range slices.Sorted(maps.Keys(w.nsLabels)) {
		if w.nsGone[ns] {
			continue
		}
		n := npNS(ns, maps.Clone(w.nsLabels[ns]))
		if w.flow[ns] {
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

// r8ExplainString spells an explanation out, sides included.
func r8ExplainString(x *Explanation) string {
	if x == nil {
		return "<nil>"
	}
	side := func(s *Side) string {
		if s == nil {
			return "-"
		}
		return fmt.Sprintf("%+v", *s)
	}
	return fmt.Sprintf("verdict %s from %+v to %+v egress %s ingress %s path %q", x.Verdict, x.From, x.To, side(x.Egress), side(x.Ingress), x.Path)
}

// r8CompareFresh holds inc (whose last compile returned got) to fresh
// (whose last compile returned want, the same table): Explain of
// connections to and from the pods of this node, and what the counted
// chains and rules count.
func r8CompareFresh(t *testing.T, inc *Compiler, got *nft.Table, fresh *Compiler, want *nft.Table, snap *k8s.Snapshot, where string) {
	r8CompareFreshSample(t, inc, got, fresh, want, snap, where, 0)
}

// r8CompareFreshSample is r8CompareFresh over sample addresses each
// local pod talks with (0: all of them).
func r8CompareFreshSample(t *testing.T, inc *Compiler, got *nft.Table, fresh *Compiler, want *nft.Table, snap *k8s.Snapshot, where string, sample int) {
	t.Helper()
	var all, local []netip.Addr
	for _, p := range snap.Pods {
		for _, ip := range p.Status.PodIPs {
			a := netip.MustParseAddr(ip.IP)
			if !a.Is4() {
				continue
			}
			all = append(all, a)
			if p.Spec.NodeName == testNode {
				local = append(local, a)
			}
		}
	}
	all = append(all, netip.MustParseAddr("10.8.3.200"))
	probes := []struct {
		proto nft.Proto
		port  uint16
	}{{nft.ProtoTCP, 80}, {nft.ProtoUDP, 53}, {nft.ProtoTCP, 8080}, {nft.ProtoTCP, 81}, {nft.ProtoSCTP, 80}}
	rng := rand.New(rand.NewPCG(uint64(len(where)), 8))
	for _, l := range local {
		others := all
		if sample > 0 && sample < len(all) {
			others = nil
			for _, i := range rng.Perm(len(all))[:sample] {
				others = append(others, all[i])
			}
		}
		for _, o := range others {
			for _, pair := range [][2]netip.Addr{{l, o}, {o, l}} {
				if pair[0] == pair[1] {
					continue
				}
				for _, pr := range probes {
					pkt := nft.Packet{Src: pair[0], Dst: pair[1], Proto: pr.proto, Dport: pr.port}
					a, errA := inc.Explain(got, pkt)
					b, errB := fresh.Explain(want, pkt)
					if (errA == nil) != (errB == nil) || !reflect.DeepEqual(a, b) {
						t.Fatalf("%s: Explain %v -> %v %s/%d differs:\n\tincremental: %s (%v)\n\tfresh:       %s (%v)", where, pkt.Src, pkt.Dst, pr.proto, pr.port,
							r8ExplainString(a), errA, r8ExplainString(b), errB)
					}
				}
			}
		}
	}
	if a, b := inc.countedChains(), fresh.countedChains(); !reflect.DeepEqual(a, b) {
		t.Fatalf("%s: counted chains differ:\n\tincremental: %v\n\tfresh:       %v", where, a, b)
	}
	if a, b := inc.countedRules(), fresh.countedRules(); !reflect.DeepEqual(a, b) {
		t.Fatalf("%s: counted rules differ:\n\tincremental: %v\n\tfresh:       %v", where, a, b)
	}
}

type r8Variant struct {
	name string
	opts Options
}

var r8Variants = []r8Variant{
	{"plain", Options{Node: testNode}},
	{"counters", Options{Node: testNode, Counters: true}},
	{"flowlog-ns", Options{Node: testNode, FlowLog: FlowLog{Group: 100}}},
	{"flowlog-ns-counters", Options{Node: testNode, Counters: true, FlowLog: FlowLog{Group: 100}}},
	{"flowlog-all", Options{Node: testNode, Counters: true, FlowLog: FlowLog{Group: 100, All: true}}},
	{"walk", Options{Node: testNode, WalkPolicies: true, Counters: true}},
	{"walk-flowlog", Options{Node: testNode, WalkPolicies: true, FlowLog: FlowLog{Group: 100, Rate: 7}}},
	{"deferred", Options{Node: testNode, DeferUnions: true, Counters: true, FlowLog: FlowLog{Group: 100}}},
}

// r8Coverage counts what a run exercised.
type r8Coverage struct {
	activations, deactivations int
	// flowFlipped: activations of a policy whose namespace's flow logging
	// changed since it was last active.
	flowFlipped int
	// replanned: activations of a policy whose spec changed since it was
	// last active.
	replanned int
	problems  int
	refChecks int
}

func runR8World(t *testing.T, v r8Variant, seed uint64, steps int, cov *r8Coverage) {
	t.Helper()
	w := newR8World(seed)
	inc := NewCompiler(v.opts)
	var prev *nft.Table
	var history []string
	type seen struct {
		active bool
		flow   bool
		np     *networkingv1.NetworkPolicy
		p      *policyState
	}
	last := map[objKey]seen{}
	for step := range steps {
		var events []string
		for range 1 + w.r.IntN(3) {
			events = append(events, w.event())
		}
		history = append(history, fmt.Sprintf("compile %d: %q", step, events))
		if len(history) > 5 {
			history = history[1:]
		}
		where := fmt.Sprintf("%s seed %d step %d, last compiles:\n\t%s\n", v.name, seed, step, strings.Join(history, "\n\t"))
		snap := w.snapshot()
		got, problems := inc.Compile(snap, DefaultPriority)
		cov.problems += len(problems)
		if v.opts.DeferUnions {
			prev = uuDeferStep(t, inc, v.opts, prev, got, problems, snap, where)
			if len(inc.deferred) > 0 && w.r.IntN(2) == 0 {
				prev = hdMerge(t, inc, v.opts, prev, snap, where)
			}
		} else {
			prev = checkCompiled(t, inc, v.opts, prev, got, problems, snap, DefaultPriority, where)
		}
		if len(inc.deferred) == 0 && (step%6 == 0 || strings.Contains(strings.Join(events, ""), "flow") && step%2 == 0) {
			fresh := NewCompiler(v.opts)
			want, _ := fresh.Compile(snap, DefaultPriority)
			r8CompareFreshSample(t, inc, prev, fresh, want, snap, where, 8)
		}
		// The reference knows valid specs only: a rule the compiler
		// drops for an invalid peer (failing closed) it would allow.
		if step%5 == 4 && len(inc.deferred) == 0 && len(problems) == 0 {
			r7RefCheck(t, prev, snap, where)
			cov.refChecks++
		}
		for k, p := range inc.policies {
			before, ok := last[k]
			if p.active && (!ok || !before.active) {
				cov.activations++
				if ok && before.flow != p.flowLogged {
					cov.flowFlipped++
				}
				if ok && before.p != p {
					cov.replanned++
				}
			}
			if !p.active && ok && before.active {
				cov.deactivations++
			}
			if p.active || !ok {
				last[k] = seen{p.active, p.flowLogged, p.np, p}
			} else {
				s := last[k]
				s.active = false
				last[k] = s
			}
			// An inactive policy holds no rules; an active one holds the
			// chains the table lists.
			for _, d := range directions {
				if ch := p.chains[d.i]; ch != nil && !p.active && len(ch.Rules) > 0 {
					t.Fatalf("%s: inactive policy %s holds %d %s rules", where, k, len(ch.Rules), d.name)
				}
			}
		}
	}
}

func TestHostileRound8LazyRulesWorld(t *testing.T) {
	lowerUnionRunLength(t, 2)
	for _, v := range r8Variants {
		t.Run(v.name, func(t *testing.T) {
			if v.opts.DeferUnions {
				deferEveryUnion(t)
			}
			var cov r8Coverage
			from, n := uint64(1), uint64(4)
			if e := os.Getenv("R8_SEEDS"); e != "" { // a longer hunt: R8_SEEDS=from:n
				fmt.Sscanf(e, "%d:%d", &from, &n)
			}
			for seed := from; seed < from+n; seed++ {
				runR8World(t, v, seed, 50, &cov)
			}
			t.Logf("%+v", cov)
			if cov.activations < 30 || cov.deactivations < 20 || cov.replanned < 8 || cov.problems == 0 || cov.refChecks < 5 {
				t.Fatalf("the world does not move policies in and out of activity enough: %+v", cov)
			}
			if v.opts.FlowLog.Group != 0 && !v.opts.FlowLog.All && cov.flowFlipped < 3 {
				t.Fatalf("too few activations after a flow-log change while inactive: %+v", cov)
			}
		})
	}
}

// A scripted walk through the cases the brief names, under every option
// set: a policy (named ports both ways, ipBlocks, namespace selectors, a
// port and a protocol that cannot be compiled) edited, re-labelled and
// flow-logged while inactive, then activated; edited while active; a
// policy whose podSelector does not parse all along.
func TestHostileRound8LazyRulesScripted(t *testing.T) {
	main := func(extra ...func(*networkingv1.NetworkPolicy)) *networkingv1.NetworkPolicy {
		tweaks := []func(*networkingv1.NetworkPolicy){selecting("new"), types(networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress),
			ingressRule(peers(nsPeer("y"), podPeer("b"), ipBlock("10.0.3.0/24", "10.0.3.2/32")), port(tcp, 80), namedPort(tcp, "serve-81-tcp"), port("ICMP", 7)),
			ingressRule(peers(ipBlock("fd00::3:0/112")), namedPort(corev1.ProtocolUDP, "serve-80-udp"), namedPort(tcp, "Not_Valid")),
			egressRule(peers(nsPodPeer("z", "c"), nsPeer("y")), namedPort(corev1.ProtocolUDP, "serve-80-udp"), portRange(tcp, 80, 81)),
			egressRule(nil, namedPort(corev1.ProtocolSCTP, "serve-81-sctp")),
		}
		return policy("x", "p", append(tweaks, extra...)...)
	}
	broken := policy("x", "broken", func(np *networkingv1.NetworkPolicy) {
		np.Spec.PodSelector = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pod", Operator: metav1.LabelSelectorOpIn}}}
		ingressRule(peers(podPeer("a")), port("ICMP", 1))(np)
	})
	other := policy("x", "q", selecting("a"), ingressRule(peers(nsPeer("y")), namedPort(tcp, "serve-80-tcp")))
	flowNS := func(s *k8s.Snapshot, on bool) {
		for i, n := range s.Namespaces {
			if n.Name == "x" {
				n = n.DeepCopy()
				n.Annotations = nil
				if on {
					n.Annotations = map[string]string{k8s.FlowLogAnnotation: "true"}
				}
				s.Namespaces[i] = n
			}
		}
	}
	withPod := func(s *k8s.Snapshot) { s.Pods = append(s.Pods, testPod("x", "new")) }
	setPolicy := func(np *networkingv1.NetworkPolicy) func(*k8s.Snapshot) {
		return func(s *k8s.Snapshot) {
			s.Policies = slices.DeleteFunc(slices.Clone(s.Policies), func(p *networkingv1.NetworkPolicy) bool { return p.Name == np.Name })
			s.Policies = append(s.Policies, np)
		}
	}
	metaOnly := func(s *k8s.Snapshot) {
		for i, p := range s.Policies {
			if p.Name == "p" {
				p = p.DeepCopy()
				p.ResourceVersion += "1"
				p.Labels = map[string]string{"v": p.ResourceVersion}
				if len(p.Spec.Egress) > 1 {
					p.Spec.Egress[1].To = []networkingv1.NetworkPolicyPeer{} // nil and empty: the same
				}
				s.Policies[i] = p
			}
		}
	}
	relabel := func(to string) func(*k8s.Snapshot) {
		return func(s *k8s.Snapshot) {
			for i, p := range s.Pods {
				if p.Namespace == "x" && (p.Name == "new" || p.Labels["pod"] == "new") {
					c := *p
					c.Labels = map[string]string{"pod": to}
					s.Pods[i] = &c
				}
			}
		}
	}
	dropPod := func(s *k8s.Snapshot) {
		s.Pods = slices.DeleteFunc(slices.Clone(s.Pods), func(p *k8s.Pod) bool { return p.Namespace == "x" && p.Name == "new" })
	}
	steps := []struct {
		name   string
		change func(*k8s.Snapshot)
	}{
		{"inactive", func(*k8s.Snapshot) {}},
		{"spec edit while inactive", setPolicy(main(egressRule(peers(nsPeer("x")), port(corev1.ProtocolUDP, 53))))},
		{"metadata only while inactive", metaOnly},
		{"flow log on while inactive", func(s *k8s.Snapshot) { flowNS(s, true) }},
		{"activate", withPod},
		{"metadata only while active", metaOnly},
		{"spec edit while active", setPolicy(main())},
		{"flow log off while active", func(s *k8s.Snapshot) { flowNS(s, false) }},
		{"relabel: inactive", relabel("old")},
		{"flow log on while inactive again", func(s *k8s.Snapshot) { flowNS(s, true) }},
		{"spec edit and relabel back: active", func(s *k8s.Snapshot) {
			setPolicy(main(ingressRule(peers(nsPeer("z")), port(tcp, 81))))(s)
			relabel("new")(s)
		}},
		{"flow log off and pod gone in one snapshot", func(s *k8s.Snapshot) { flowNS(s, false); dropPod(s) }},
		{"flow log on and pod back in one snapshot", func(s *k8s.Snapshot) { flowNS(s, true); withPod(s) }},
		{"metadata only and flow off in one snapshot", func(s *k8s.Snapshot) { metaOnly(s); flowNS(s, false) }},
		{"namespace gone, pod gone", func(s *k8s.Snapshot) {
			dropPod(s)
			s.Namespaces = slices.DeleteFunc(slices.Clone(s.Namespaces), func(n *corev1.Namespace) bool { return n.Name == "x" })
		}},
		{"namespace back annotated, pod back", func(s *k8s.Snapshot) {
			n := namespace("x")
			n.Annotations = map[string]string{k8s.FlowLogAnnotation: "true"}
			s.Namespaces = append(s.Namespaces, n)
			withPod(s)
		}},
		{"policy deleted while active", func(s *k8s.Snapshot) {
			s.Policies = slices.DeleteFunc(slices.Clone(s.Policies), func(p *networkingv1.NetworkPolicy) bool { return p.Name == "p" })
		}},
		{"policy back while active", setPolicy(main())},
	}
	for _, v := range r8Variants {
		t.Run(v.name, func(t *testing.T) {
			if v.opts.DeferUnions {
				deferEveryUnion(t)
			}
			inc := NewCompiler(v.opts)
			cur := cluster(main(), broken, other)
			var prev *nft.Table
			for _, st := range steps {
				next := *cur
				next.Pods = slices.Clone(cur.Pods)
				next.Namespaces = slices.Clone(cur.Namespaces)
				next.Policies = slices.Clone(cur.Policies)
				st.change(&next)
				next.Sort()
				cur = &next
				got, problems := inc.Compile(cur, DefaultPriority)
				if v.opts.DeferUnions {
					prev = uuDeferStep(t, inc, v.opts, prev, got, problems, cur, st.name)
					if len(inc.deferred) > 0 {
						prev = hdMerge(t, inc, v.opts, prev, cur, st.name)
					}
				} else {
					prev = checkCompiled(t, inc, v.opts, prev, got, problems, cur, DefaultPriority, st.name)
				}
				fresh := NewCompiler(v.opts)
				want, _ := fresh.Compile(cur, DefaultPriority)
				r8CompareFresh(t, inc, prev, fresh, want, cur, st.name)
			}
		})
	}
}

// mergeRanges at its edges: identical lists, lists that only touch,
// interleaved single addresses that make one run, ranges reaching the
// last address of the family, one list inside another, and many lists
// at once; compared with netipx's union.
func TestHostileRound8MergeRangesEdges(t *testing.T) {
	a := netip.MustParseAddr
	r := func(from, to string) nft.Element { return rangeOf(a(from), a(to)) }
	one := func(s string) nft.Element { return nft.Element{Addr: a(s)} }
	cases := []struct {
		name  string
		lists [][]nft.Element
		want  []nft.Element
	}{
		{"interleaved singles", [][]nft.Element{{one("10.0.0.1"), one("10.0.0.3"), one("10.0.0.5")}, {one("10.0.0.2"), one("10.0.0.4"), one("10.0.0.6")}},
			[]nft.Element{r("10.0.0.1", "10.0.0.6")}},
		{"touching", [][]nft.Element{{r("10.0.0.0", "10.0.0.9")}, {r("10.0.0.10", "10.0.0.19")}, {r("10.0.0.20", "10.0.0.29")}},
			[]nft.Element{r("10.0.0.0", "10.0.0.29")}},
		{"identical", [][]nft.Element{{r("10.0.0.0", "10.0.0.9"), one("10.0.1.1")}, {r("10.0.0.0", "10.0.0.9"), one("10.0.1.1")}, {r("10.0.0.0", "10.0.0.9"), one("10.0.1.1")}},
			[]nft.Element{r("10.0.0.0", "10.0.0.9"), one("10.0.1.1")}},
		{"inside", [][]nft.Element{{r("10.0.0.0", "10.0.0.255")}, {one("10.0.0.7"), r("10.0.0.9", "10.0.0.20")}, {one("10.0.1.0")}},
			[]nft.Element{r("10.0.0.0", "10.0.1.0")}},
		{"to the end", [][]nft.Element{{r("255.255.255.0", "255.255.255.255")}, {one("255.255.255.255")}, {r("255.255.254.0", "255.255.254.255")}},
			[]nft.Element{r("255.255.254.0", "255.255.255.255")}},
		{"v6 to the end", [][]nft.Element{{one("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")}, {r("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fff0", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe")}},
			[]nft.Element{r("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fff0", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")}},
		{"from zero", [][]nft.Element{{one("0.0.0.0")}, {r("0.0.0.1", "0.0.0.3")}, {}},
			[]nft.Element{r("0.0.0.0", "0.0.0.3")}},
		{"empty lists", [][]nft.Element{{}, nil, {}}, []nft.Element{}},
	}
	for _, c := range cases {
		got := mergeRanges(c.lists...)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: mergeRanges(%v) = %v, want %v", c.name, c.lists, got, c.want)
		}
		if got == nil {
			t.Errorf("%s: nil, not an empty list", c.name)
		}
	}
	// Many lists of addresses dealt round-robin, so that every list
	// holds every k-th address and only their union is one run; with
	// holes where no list has an address.
	rng := rand.New(rand.NewPCG(8, 8))
	for round := range 300 {
		k := 2 + rng.IntN(40)
		lists := make([][]nft.Element, k)
		var want []nft.Element
		base := a("10.1.0.0")
		addr := base
		var run []netip.Addr
		flush := func() {
			if len(run) > 0 {
				want = append(want, rangeOf(run[0], run[len(run)-1]))
				run = nil
			}
		}
		for i := range 200 + rng.IntN(300) {
			if rng.IntN(10) == 0 {
				flush() // a hole
			} else {
				l := i % k
				if rng.IntN(3) == 0 {
					l = rng.IntN(k) // and some addresses in two lists
					lists[(l+1)%k] = appendAddr(lists[(l+1)%k], addr)
				}
				lists[l] = appendAddr(lists[l], addr)
				run = append(run, addr)
			}
			addr = addr.Next()
		}
		flush()
		got := mergeRanges(lists...)
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: %d lists: mergeRanges = %v, want %v", round, k, got, want)
		}
	}
}

// appendAddr appends a to a sorted, merged list of ranges, merging it with
// the last range when it follows it.
func appendAddr(l []nft.Element, a netip.Addr) []nft.Element {
	if n := len(l); n > 0 {
		last := lastOf(l[n-1])
		if last == a {
			return l
		}
		if last.Next() == a {
			l[n-1] = rangeOf(l[n-1].Addr, a)
			return l
		}
	}
	return append(l, nft.Element{Addr: a})
}

// Many policies select one pod, each allowing another namespace selector
// (by name, by label, all of them), and two ipBlocks that cut into the
// pods' runs: the pod's union merges them all, and follows peers that
// fill, thin and relabel their namespaces. Its table must be a fresh
// compile's and decide every connection as the reference does.
func TestHostileRound8ManyListsOneUnion(t *testing.T) {
	for _, runLen := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(runLen), func(t *testing.T) {
			lowerUnionRunLength(t, runLen)
			for seed := uint64(1); seed <= 3; seed++ {
				w := newR8World(seed)
				// The union world: every policy of t selects tgt0, each from
				// other peers; u's policies gone.
				for k := range w.pols {
					delete(w.pols, k)
				}
				w.pods[objKey{"t", "tgt0"}] = w.pod("t", "tgt0", testNode, map[string]string{"role": "target", "grp": "0"}, "10.8.1.10", "fd08:1::10")
				froms := []networkingv1.NetworkPolicyPeer{
					{NamespaceSelector: uuSel(corev1.LabelMetadataName, "a")},
					{NamespaceSelector: uuSel(corev1.LabelMetadataName, "b")},
					{NamespaceSelector: uuSel(corev1.LabelMetadataName, "c")},
					{NamespaceSelector: uuSel("team", "red")},
					{NamespaceSelector: uuSel("team", "blue")},
					{NamespaceSelector: uuSel("env", "prod")},
					{NamespaceSelector: &metav1.LabelSelector{}, PodSelector: uuSel("role", "x")},
					ipBlock("10.8.3.14/31"),
					ipBlock("10.8.3.16/29", "10.8.3.20/32"),
					{NamespaceSelector: uuSel("team", "green"), PodSelector: uuSel("role", "y")},
				}
				for i, from := range froms {
					np := policy("t", fmt.Sprintf("u%02d", i))
					np.Spec.PodSelector = *uuSel("role", "target")
					np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
					np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{from}, Ports: []networkingv1.NetworkPolicyPort{port(tcp, 80)}}}
					if i%3 == 0 {
						np.Spec.Ingress[0].Ports = nil
					}
					w.pols[objKey{"t", np.Name}] = np
				}
				for _, opts := range []Options{{Node: testNode}, {Node: testNode, Counters: true, FlowLog: FlowLog{Group: 100}}} {
					inc := NewCompiler(opts)
					var prev *nft.Table
					for step := range 40 {
						var ev []string
						for range 1 + w.r.IntN(3) {
							switch w.r.IntN(6) {
							case 0:
								pns := w.pick(r8PeerNS...)
								w.nsLabels[pns] = w.nsLabelSet()
								ev = append(ev, "relabel "+pns)
							case 1:
								pns := w.pick(r8PeerNS...)
								for s := range r8Slots {
									w.setPeer(pns, s)
								}
								ev = append(ev, "fill "+pns)
							case 2:
								pns := w.pick(r8PeerNS...)
								for s := w.r.IntN(2); s < r8Slots; s += 2 {
									delete(w.pods, objKey{pns, fmt.Sprintf("s%d", s)})
								}
								ev = append(ev, "thin "+pns)
							case 3:
								w.flow["t"] = !w.flow["t"]
								ev = append(ev, "flow t")
							default:
								pns := w.pick(r8PeerNS...)
								s := w.r.IntN(r8Slots)
								w.setPeer(pns, s)
								ev = append(ev, fmt.Sprintf("peer %s/s%d", pns, s))
							}
						}
						where := fmt.Sprintf("run length %d seed %d opts %+v step %d %q", runLen, seed, opts, step, ev)
						snap := w.snapshot()
						prev = checkIncremental(t, inc, opts, prev, snap, DefaultPriority, where)
						if step%5 == 4 {
							r7RefCheck(t, prev, snap, where)
						}
					}
				}
			}
		})
	}
}
