package enforcer

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"

	"github.com/nftpolicy/nftpolicy/internal/scale"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// The hostile named-port world: a cluster of a few thousand pods, large
// enough that every named-port set spans several chunks (chunkSize), driven
// through random pod events and bursts aimed at the incremental patching of
// the named-port sets (refreshPortSets, patchChunks):
//
//   - pods added, deleted, relabelled, readdressed, moved between nodes,
//     terminating, finished, hostNetwork, quarantined;
//   - container ports renamed, renumbered, duplicated (one name twice, the
//     same element twice, sidecar-style), one name on two protocols;
//   - addresses shared by two pods (also through ::ffff:a.b.c.d, which the
//     compiler unmaps), and addresses at the very ends of both address
//     spaces (0.0.0.0, 255.255.255.255, ::, ffff:…:ffff);
//   - bursts of hundreds of pods added or deleted in one compile, packed in
//     one region so that one chunk takes them all, every pod serving a name
//     deleted and restored, namespaces emptied;
//   - policies that start and stop using each named port, both directions.
//
// After every compile: the table renders as a fresh compile of the same
// snapshot and its named-port sets hold the same elements in the same
// order, in chunks that are sorted, non-empty, under two chunk sizes and
// without a repeat across chunk edges; the Delta (applied to an nft.Fake
// that holds the previous table) is accepted and leaves the Fake with no
// drift from the new table; and every table returned earlier still
// renders as it did when returned.

type hpWorld struct {
	r         *rand.Rand
	ns        map[string]*corev1.Namespace
	pods      map[objKey]*k8s.Pod
	policies  map[objKey]*networkingv1.NetworkPolicy
	quar      map[objKey]bool
	unsettled map[objKey]*k8s.UnsettledPod
	next      int // serial for names and addresses
	created   time.Time
}

var hpNames = []string{"http", "dns", "metrics", "web"}

// hpEdges are addresses at the ends of the address spaces, and one
// IPv4-mapped spelling of an IPv4 address other pods may hold.
var hpEdges = []string{
	"0.0.0.0", "0.0.0.1", "0.0.0.2", "255.255.255.255", "255.255.255.254",
	"::", "::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe",
	"::ffff:10.1.0.5", "10.1.0.5",
}

func newHPWorld(seed uint64, pods int) *hpWorld {
	w := &hpWorld{
		r:         rand.New(rand.NewPCG(seed, 0x6e616d6564)),
		ns:        map[string]*corev1.Namespace{},
		pods:      map[objKey]*k8s.Pod{},
		policies:  map[objKey]*networkingv1.NetworkPolicy{},
		quar:      map[objKey]bool{},
		unsettled: map[objKey]*k8s.UnsettledPod{},
		created:   time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	for i := range 4 {
		name := fmt.Sprintf("ns-%d", i)
		w.ns[name] = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"team": fmt.Sprintf("t%d", i%2)}}}
	}
	for range pods {
		w.addPod(w.pickNS(), w.randomAddrs())
	}
	w.policies[objKey{"ns-0", "egress-http"}] = hpEgressPolicy("ns-0", "egress-http", scale.NamedPort(tcp, "http"), scale.NamedPort(udp, "dns"))
	w.policies[objKey{"ns-1", "ingress-http"}] = hpIngressPolicy("ns-1", "ingress-http", scale.NamedPort(tcp, "http"))
	return w
}

func (w *hpWorld) pickNS() string {
	return fmt.Sprintf("ns-%d", w.r.IntN(4))
}

// randomAddrs gives a pod one IPv4 and (mostly) one IPv6 address: fresh
// ones from a dense range, an edge address, or one another pod holds.
func (w *hpWorld) randomAddrs() []string {
	w.next++
	i := w.next
	v4 := netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}).String()
	v6 := netip.AddrFrom16([16]byte{0xfd, 0, 12: 0, 13: byte(i >> 16), 14: byte(i >> 8), 15: byte(i)}).String()
	switch n := w.r.IntN(40); {
	case n == 0:
		v4 = hpEdges[w.r.IntN(len(hpEdges))]
	case n == 1:
		v6 = hpEdges[w.r.IntN(len(hpEdges))]
	case n == 2 && len(w.pods) > 0: // an address another pod holds
		other := w.pods[w.anyPod()]
		v4 = other.Status.PodIPs[0].IP
	case n == 3:
		return []string{v4} // IPv4 only
	case n == 4:
		return []string{v6} // IPv6 only
	}
	if v4 == v6 {
		return []string{v4}
	}
	return []string{v4, v6}
}

// randomPorts: mostly http/TCP and dns/UDP as scale.Cluster's pods, with
// the odd pod renaming, renumbering, doubling a name or an element, or
// serving a name on two protocols.
func (w *hpWorld) randomPorts() []corev1.ContainerPort {
	ports := []corev1.ContainerPort{
		{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
		{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
	}
	switch w.r.IntN(12) {
	case 0:
		ports[0].ContainerPort = int32(1 + w.r.IntN(65535))
	case 1:
		ports[0].Name = hpNames[w.r.IntN(len(hpNames))]
	case 2: // one name, two numbers
		ports = append(ports, corev1.ContainerPort{Name: "http", ContainerPort: 8443, Protocol: corev1.ProtocolTCP})
	case 3: // the same element twice (a container and a sidecar)
		ports = append(ports, ports[0])
	case 4: // one name on two protocols
		ports = append(ports, corev1.ContainerPort{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolTCP})
	case 5:
		ports = nil
	case 6: // no name, the same number
		ports[0].Name = ""
	case 7:
		ports = append(ports, corev1.ContainerPort{Name: "metrics", ContainerPort: int32(9000 + w.r.IntN(3)), Protocol: corev1.ProtocolTCP})
	case 8: // same as another but a host port: a change of ports with no element changed
		ports[0].HostPort = 18080
	}
	return ports
}

func (w *hpWorld) addPod(ns string, addrs []string) objKey {
	w.next++
	name := fmt.Sprintf("pod-%d", w.next)
	node := "node-other"
	if w.r.IntN(8) == 0 {
		node = testNode
	}
	var ips []corev1.PodIP
	for _, a := range addrs {
		ips = append(ips, corev1.PodIP{IP: a})
	}
	w.created = w.created.Add(time.Second)
	p := k8s.NewPod(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(w.created),
			Labels: map[string]string{"app": fmt.Sprintf("app-%d", w.r.IntN(5))}},
		Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Ports: w.randomPorts()}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: ips},
	})
	k := objKey{ns, name}
	w.pods[k] = p
	return k
}

// anyPod picks a pod, deterministically.
func (w *hpWorld) anyPod() objKey {
	keys := slices.SortedFunc(maps.Keys(w.pods), compareKeys)
	return keys[w.r.IntN(len(keys))]
}

// edit replaces pod k by an edited copy (records are never edited in place:
// the compiler keeps the old one).
func (w *hpWorld) edit(k objKey, change func(p *k8s.Pod)) {
	p := *w.pods[k]
	p.Labels = maps.Clone(p.Labels)
	p.Spec.Ports = slices.Clone(p.Spec.Ports)
	p.Status.PodIPs = slices.Clone(p.Status.PodIPs)
	change(&p)
	w.pods[k] = &p
}

func hpEgressPolicy(ns, name string, ports ...networkingv1.NetworkPolicyPort) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{
		To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}},
		Ports: ports,
	}}
	return np
}

func hpIngressPolicy(ns, name string, ports ...networkingv1.NetworkPolicyPort) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{
		From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "t0"}}}},
		Ports: ports,
	}}
	return np
}

// burstAddrs are n consecutive addresses in one region: where the chunks
// start, where they end, or in the middle of the dense range.
func (w *hpWorld) burstAddrs(n int) [][]string {
	var out [][]string
	base := w.r.IntN(3)
	for i := range n {
		var v4, v6 netip.Addr
		switch base {
		case 0: // before every other address
			v4 = netip.AddrFrom4([4]byte{0, 0, byte(i >> 8), byte(i + 3)})
			v6 = netip.AddrFrom16([16]byte{14: byte(i >> 8), 15: byte(i + 3)})
		case 1: // after every other address
			v4 = netip.AddrFrom4([4]byte{254, 255, byte(i >> 8), byte(i)})
			v6 = netip.AddrFrom16([16]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, byte(i >> 8), byte(i)})
		default: // between two addresses of the dense range
			w.next++
			v4 = netip.AddrFrom4([4]byte{10, 1, byte(w.next >> 8), byte(w.next)})
			v6 = netip.AddrFrom16([16]byte{0xfd, 0, 13: byte(w.next >> 16), 14: byte(w.next >> 8), 15: byte(w.next)})
		}
		out = append(out, []string{v4.String(), v6.String()})
	}
	return out
}

func (w *hpWorld) step() string {
	switch n := w.r.IntN(100); {
	case n < 12:
		k := w.addPod(w.pickNS(), w.randomAddrs())
		return "add " + k.String()
	case n < 22:
		if len(w.pods) < 2 {
			return "nothing"
		}
		k := w.anyPod()
		delete(w.pods, k)
		delete(w.unsettled, k)
		return "delete " + k.String()
	case n < 28:
		k := w.anyPod()
		w.edit(k, func(p *k8s.Pod) { p.Labels["app"] = fmt.Sprintf("app-%d", w.r.IntN(5)) })
		return "relabel " + k.String()
	case n < 36:
		k := w.anyPod()
		addrs := w.randomAddrs()
		w.edit(k, func(p *k8s.Pod) {
			p.Status.PodIPs = nil
			for _, a := range addrs {
				p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: a})
			}
		})
		return "readdress " + k.String()
	case n < 44:
		k := w.anyPod()
		ports := w.randomPorts()
		w.edit(k, func(p *k8s.Pod) { p.Spec.Ports = ports })
		return "ports " + k.String()
	case n < 47:
		k := w.anyPod()
		w.edit(k, func(p *k8s.Pod) {
			if p.Spec.NodeName == testNode {
				p.Spec.NodeName = "node-other"
			} else {
				p.Spec.NodeName = testNode
			}
		})
		return "move node " + k.String()
	case n < 50: // a pod recreated in another namespace at its addresses, in one event
		k := w.anyPod()
		p := *w.pods[k]
		delete(w.pods, k)
		p.Namespace = w.pickNS()
		w.pods[objKey{p.Namespace, p.Name}] = &p
		return "recreate " + k.String() + " in " + p.Namespace
	case n < 52: // a new pod takes the address of a terminating one
		k := w.anyPod()
		old := w.pods[k]
		w.edit(k, func(p *k8s.Pod) {
			ts := metav1.NewTime(w.created)
			p.DeletionTimestamp = &ts
		})
		var addrs []string
		for _, ip := range old.Status.PodIPs {
			addrs = append(addrs, ip.IP)
		}
		nk := w.addPod(k.namespace, addrs)
		return "terminating " + k.String() + ", its addresses to " + nk.String()
	case n < 54:
		k := w.anyPod()
		w.edit(k, func(p *k8s.Pod) {
			if p.Status.Phase == corev1.PodRunning {
				p.Status.Phase = corev1.PodSucceeded
			} else {
				p.Status.Phase = corev1.PodRunning
			}
		})
		return "phase " + k.String()
	case n < 56:
		k := w.anyPod()
		w.edit(k, func(p *k8s.Pod) { p.Spec.HostNetwork = !p.Spec.HostNetwork })
		return "hostNetwork " + k.String()
	case n < 58:
		k := w.anyPod()
		w.quar[k] = !w.quar[k]
		return "quarantine " + k.String()
	case n < 60: // unsettled: at its addresses and another pod's, maybe here
		k := w.anyPod()
		if w.unsettled[k] != nil {
			delete(w.unsettled, k)
			delete(w.quar, k)
			return "settled " + k.String()
		}
		var ips []string
		for _, ip := range w.pods[k].Status.PodIPs {
			ips = append(ips, netip.MustParseAddr(ip.IP).Unmap().String())
		}
		ips = append(ips, netip.MustParseAddr(w.pods[w.anyPod()].Status.PodIPs[0].IP).Unmap().String())
		slices.SortFunc(ips, func(a, b string) int { return netip.MustParseAddr(a).Compare(netip.MustParseAddr(b)) })
		ips = slices.Compact(ips)
		nodes := []string{"node-other"}
		if w.r.IntN(2) == 0 {
			nodes = []string{testNode, "node-other"}
		}
		slices.Sort(nodes)
		w.unsettled[k] = &k8s.UnsettledPod{Namespace: k.namespace, Name: k.name, Nodes: nodes, IPs: ips}
		w.quar[k] = true
		return "unsettled " + k.String()
	case n < 64: // a burst of pods in one region
		count := 100 + w.r.IntN(700)
		ns := w.pickNS()
		for _, addrs := range w.burstAddrs(count) {
			w.addPod(ns, addrs)
		}
		return fmt.Sprintf("burst of %d pods in %s", count, ns)
	case n < 70: // a burst of deletes
		count := min(len(w.pods)-1, 100+w.r.IntN(700))
		keys := slices.SortedFunc(maps.Keys(w.pods), compareKeys)
		w.r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		for _, k := range keys[:count] {
			delete(w.pods, k)
		}
		return fmt.Sprintf("delete %d pods", count)
	case n < 73: // every pod of the ends goes, or every pod serving http
		var gone int
		byEnds := w.r.IntN(2) == 0
		for k, p := range w.pods {
			serves := slices.ContainsFunc(p.Spec.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == "http" })
			ends := !strings.HasPrefix(p.Status.PodIPs[0].IP, "10.") && !strings.HasPrefix(p.Status.PodIPs[0].IP, "fd00:")
			if byEnds && ends || !byEnds && serves {
				delete(w.pods, k)
				gone++
			}
		}
		if len(w.pods) == 0 {
			w.addPod("ns-0", w.randomAddrs())
		}
		return fmt.Sprintf("delete %d pods (ends %v)", gone, byEnds)
	case n < 76: // every pod stops serving http, or all rename it
		name := hpNames[w.r.IntN(len(hpNames))]
		for _, k := range slices.SortedFunc(maps.Keys(w.pods), compareKeys) {
			if w.r.IntN(3) > 0 {
				w.edit(k, func(p *k8s.Pod) {
					for i := range p.Spec.Ports {
						if p.Spec.Ports[i].Name == "http" {
							p.Spec.Ports[i].Name = name
						} else if p.Spec.Ports[i].Name == name {
							p.Spec.Ports[i].Name = "http"
						}
					}
				})
			}
		}
		return "swap port name http with " + name
	case n < 78: // a namespace emptied
		ns := w.pickNS()
		for k := range w.pods {
			if k.namespace == ns {
				delete(w.pods, k)
			}
		}
		if len(w.pods) == 0 {
			w.addPod("ns-0", w.randomAddrs())
		}
		return "empty " + ns
	case n < 81: // a namespace's labels
		ns := w.pickNS()
		if w.ns[ns] == nil {
			return "nothing"
		}
		c := w.ns[ns].DeepCopy()
		c.Labels["team"] = fmt.Sprintf("t%d", w.r.IntN(2))
		w.ns[ns] = c
		return "relabel namespace " + ns
	case n < 83: // a namespace deleted (its pods stay in the snapshot)
		ns := w.pickNS()
		if _, ok := w.ns[ns]; ok {
			delete(w.ns, ns)
		} else {
			w.ns[ns] = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"team": "t0"}}}
		}
		return "toggle namespace " + ns
	default: // policies starting and stopping the use of a named port
		ns := w.pickNS()
		name := hpNames[w.r.IntN(len(hpNames))]
		protos := []corev1.Protocol{tcp, udp, sctp}
		proto := protos[w.r.IntN(3)]
		egress := w.r.IntN(2) == 0
		pname := fmt.Sprintf("np-%s-%s-%v", name, strings.ToLower(string(proto)), egress)
		k := objKey{ns, pname}
		if np, ok := w.policies[k]; ok {
			delete(w.policies, k)
			if w.r.IntN(2) == 0 {
				return "delete policy " + k.String()
			}
			// Renamed: the same named port released and acquired in one
			// compile.
			c := np.DeepCopy()
			w.next++
			c.Name = fmt.Sprintf("%s-%d", pname, w.next)
			w.policies[objKey{ns, c.Name}] = c
			return "rename policy " + k.String() + " to " + c.Name
		}
		if egress {
			w.policies[k] = hpEgressPolicy(ns, pname, scale.NamedPort(proto, name))
		} else {
			w.policies[k] = hpIngressPolicy(ns, pname, scale.NamedPort(proto, name))
		}
		return "add policy " + k.String()
	}
}

func (w *hpWorld) snapshot() *k8s.Snapshot {
	s := &k8s.Snapshot{Nodes: []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: testNode}},
		{ObjectMeta: metav1.ObjectMeta{Name: "node-other"}},
	}}
	for _, ns := range slices.Sorted(maps.Keys(w.ns)) {
		s.Namespaces = append(s.Namespaces, w.ns[ns])
	}
	for _, k := range slices.SortedFunc(maps.Keys(w.pods), compareKeys) {
		s.Pods = append(s.Pods, w.pods[k])
		if w.quar[k] || w.unsettled[k] != nil {
			s.Quarantined = append(s.Quarantined, ktypes.NamespacedName{Namespace: k.namespace, Name: k.name})
		}
		if u := w.unsettled[k]; u != nil {
			s.Unsettled = append(s.Unsettled, *u)
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(w.policies), compareKeys) {
		s.Policies = append(s.Policies, w.policies[k])
	}
	s.Sort()
	return s
}

// isPortSet reports whether s is a named-port set.
func isPortSet(s *nft.Set) bool {
	return strings.HasPrefix(s.Name, "egress-port-") || strings.HasPrefix(s.Name, "ingress-port-")
}

// requirePortSetsAsFresh fails unless got's named-port sets hold exactly
// the elements of want's, in order, and their chunks are well formed.
func requirePortSetsAsFresh(t *testing.T, got, want *nft.Table, where string) {
	t.Helper()
	sets := func(tb *nft.Table) map[string]*nft.Set {
		out := map[string]*nft.Set{}
		for _, s := range tb.Sets {
			if isPortSet(s) {
				out[s.Name] = s
			}
		}
		return out
	}
	g, w := sets(got), sets(want)
	if diff := gocmp.Diff(slices.Sorted(maps.Keys(w)), slices.Sorted(maps.Keys(g))); diff != "" {
		t.Fatalf("%s: named-port sets differ (-fresh +incremental):\n%s", where, diff)
	}
	for name, gs := range g {
		ws := w[name]
		gl, wl := gs.List(), ws.List()
		if !slices.Equal(gl, wl) {
			removed, added := elementDiff(wl, gl)
			t.Fatalf("%s: set %s holds %d elements, a fresh compile %d: extra %v, missing %v", where, name, len(gl), len(wl), added, removed)
		}
		if len(gs.Elements) > 0 {
			t.Fatalf("%s: set %s holds elements outside its chunks", where, name)
		}
		for i, c := range gs.Chunks {
			if len(c) == 0 || len(c) >= 2*chunkSize {
				t.Fatalf("%s: set %s chunk %d holds %d elements", where, name, i, len(c))
			}
		}
		for i := 1; i < len(gl); i++ {
			if compareElements(gl[i-1], gl[i]) >= 0 {
				t.Fatalf("%s: set %s element %d (%v) does not sort after %v", where, name, i, gl[i], gl[i-1])
			}
		}
		if err := gs.Validate(); err != nil {
			t.Fatalf("%s: set %s: %v", where, name, err)
		}
	}
}

// hpRequireExact fails unless an exact update's lists are the sets' true
// difference (checkDelta's check, by maps: the sets are large).
func hpRequireExact(t *testing.T, u nft.SetUpdate, where string) {
	t.Helper()
	had, has := map[nft.Element]bool{}, map[nft.Element]bool{}
	for _, e := range u.Old.All() {
		had[e] = true
	}
	for _, e := range u.New.All() {
		has[e] = true
	}
	var removed, added []nft.Element
	for e := range had {
		if !has[e] {
			removed = append(removed, e)
		}
	}
	for e := range has {
		if !had[e] {
			added = append(added, e)
		}
	}
	sortElems := func(s []nft.Element) []nft.Element {
		s = slices.Clone(s)
		slices.SortFunc(s, compareElements)
		return s
	}
	if !slices.Equal(sortElems(u.Removed), sortElems(removed)) || !slices.Equal(sortElems(u.Added), sortElems(added)) {
		t.Fatalf("%s: set %s: exact update -%d +%d elements, the sets differ by -%d +%d", where, u.New.Name, len(u.Removed), len(u.Added), len(removed), len(added))
	}
}

func renderHash(t *nft.Table) [32]byte { return sha256.Sum256([]byte(nft.Render(t))) }

type hpOld struct {
	table *nft.Table
	hash  [32]byte
	step  int
}

// runHPWorld drives a Compiler through the world and checks every step;
// it returns the largest named-port set seen.
func runHPWorld(t *testing.T, seed uint64, pods, steps int) int {
	w := newHPWorld(seed, pods)
	opts := Options{Node: testNode}
	inc := NewCompiler(opts)
	fake := nft.NewFake()
	var prev *nft.Table
	var olds []hpOld
	largest := 0
	for step := range steps {
		event := "initial"
		if step > 0 {
			event = w.step()
		}
		where := fmt.Sprintf("seed %d step %d (%s)", seed, step, event)
		snap := w.snapshot()
		got, gotProblems := inc.Compile(snap, DefaultPriority)
		want, wantProblems := NewCompiler(opts).Compile(snap, DefaultPriority)
		if diff := gocmp.Diff(nft.Render(want), nft.Render(got)); diff != "" {
			t.Fatalf("%s: incremental table differs from a full compile (-full +incremental):\n%s", where, diff)
		}
		if diff := gocmp.Diff(problemStrings(wantProblems), problemStrings(gotProblems)); diff != "" {
			t.Fatalf("%s: problems differ (-full +incremental):\n%s", where, diff)
		}
		requirePortSetsAsFresh(t, got, want, where)
		requireUniqueElements(t, got)
		if err := got.Validate(); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		for _, s := range got.Sets {
			if isPortSet(s) {
				largest = max(largest, s.Len())
			}
		}
		// The delta moves the Fake from the last table to this one.
		if prev == nil {
			if _, err := fake.ApplyAt(got, 0); err != nil {
				t.Fatalf("%s: apply: %v", where, err)
			}
		} else {
			d := inc.Delta()
			if diff := gocmp.Diff(deltaNames(nft.Diff(prev, got)), deltaNames(d)); diff != "" {
				t.Fatalf("%s: Delta differs from nft.Diff (-Diff +Delta):\n%s", where, diff)
			}
			for _, u := range d.UpdateSets {
				if u.Exact {
					hpRequireExact(t, u, where)
				}
				if isPortSet(u.New) && u.Exact {
					// An exact patch names no element twice, removes only
					// what the old set has and adds only what it has not.
					seen := map[nft.Element]bool{}
					for _, e := range slices.Concat(u.Removed, u.Added) {
						if seen[e] {
							t.Fatalf("%s: set %s: exact update names %v twice", where, u.New.Name, e)
						}
						seen[e] = true
					}
					for _, e := range u.Removed {
						if !searchChunks(u.Old.Chunks, e) {
							t.Fatalf("%s: set %s: exact update removes %v, which the old set has not", where, u.New.Name, e)
						}
					}
					for _, e := range u.Added {
						if searchChunks(u.Old.Chunks, e) {
							t.Fatalf("%s: set %s: exact update adds %v, which the old set has", where, u.New.Name, e)
						}
					}
				}
			}
			if _, err := fake.WriteDeltaAt(d, got, 0); err != nil {
				t.Fatalf("%s: the Fake refuses the delta: %v\n%s", where, err, nft.RenderDelta(d, got))
			}
			if drift, err := fake.Drift(got); err != nil || drift != "" {
				t.Fatalf("%s: after the delta the Fake drifts from the table: %q, %v", where, drift, err)
			}
		}
		olds = append(olds, hpOld{got, renderHash(got), step})
		prev = got
		// Tables handed out earlier are immutable: check a few at random
		// now, all of them at the end.
		if len(olds) > 1 && step%4 == 0 {
			o := olds[w.r.IntN(len(olds)-1)]
			if renderHash(o.table) != o.hash {
				t.Fatalf("%s: the table of step %d renders otherwise than when it was returned", where, o.step)
			}
		}
	}
	for _, o := range olds {
		if renderHash(o.table) != o.hash {
			t.Fatalf("seed %d: the table of step %d renders otherwise than when it was returned", seed, o.step)
		}
	}
	return largest
}

func TestHostilePortSetsWorld(t *testing.T) {
	for seed := uint64(1); seed <= 2; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			largest := runHPWorld(t, seed, 2000, 50)
			if largest < 3*chunkSize {
				t.Fatalf("the largest named-port set held %d elements: too few to span chunks", largest)
			}
		})
	}
}

// hpPod is a running pod with ports, at ips.
func hpPod(ns, name, node string, ports []corev1.ContainerPort, ips ...string) *k8s.Pod {
	var pips []corev1.PodIP
	for _, ip := range ips {
		pips = append(pips, corev1.PodIP{IP: ip})
	}
	return k8s.NewPod(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "app-1", "tier": "tier-1"}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Ports: ports}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: pips},
	})
}
