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

	gocmp "github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/nftpolicy/nftpolicy/internal/reference"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// A hostile world: a small cluster driven by random events, heavy on
// ClusterNetworkPolicies with overlapping peers, CIDRs covering pods,
// single-stack pods, pods moving between namespaces, in-place policy edits.

type hwPod struct {
	ns, name string
	labels   map[string]string
	v4, v6   string // "" for none
	node     string
	ports    []corev1.ContainerPort
}

type hworld struct {
	r           *rand.Rand
	nsLabels    map[string]map[string]string
	pods        map[objKey]*hwPod
	podObjs     map[objKey]*k8s.Pod
	nps         map[objKey]*networkingv1.NetworkPolicy
	cnps        map[string]*cnpv1.ClusterNetworkPolicy
	node2       *corev1.Node
	node1Labels map[string]string
	node1Addrs  []string
	qNS         map[string]bool
	qPod        map[objKey]bool
	slots       int
	noQuar      bool
}

var (
	hwNamespaces = []string{"x", "y", "z", "w"}
	hwPodNames   = []string{"a", "b", "c"}
	hwCNPNames   = []string{"c0", "c1", "c2", "c3", "c4", "c5"}
	hwNetworks   = []string{"0.0.0.0/0", "::/0", "10.0.0.0/8", "10.0.1.0/24", "10.0.1.0/25", "10.0.1.128/25",
		"10.0.2.0/24", "10.0.1.1/32", "10.0.1.2/31", "fd00::/16", "fd00::1:0/112", "fd00::2:1/128", "192.0.2.0/24", "2001:db8::/32", "10.0.0.0/23"}
	hwOutside = []string{"10.0.1.200", "10.0.3.7", "192.0.2.10", "192.0.2.99", "203.0.113.1",
		"fd00::1:c8", "fd00::9:1", "2001:db8::10", "2001:db8::99", "2001:db9::1"}
)

func newHWorld(seed uint64) *hworld {
	w := &hworld{r: rand.New(rand.NewPCG(seed, seed*31337+7)), nsLabels: map[string]map[string]string{},
		pods: map[objKey]*hwPod{}, podObjs: map[objKey]*k8s.Pod{}, nps: map[objKey]*networkingv1.NetworkPolicy{},
		cnps: map[string]*cnpv1.ClusterNetworkPolicy{}, qNS: map[string]bool{}, qPod: map[objKey]bool{}}
	for _, ns := range hwNamespaces[:3] {
		w.nsLabels[ns] = w.randomNSLabels(ns)
		for _, p := range hwPodNames {
			w.setPod(w.randomPod(ns, p))
		}
	}
	w.node1Labels = map[string]string{"role": w.pickS("db", "web")}
	w.node2 = w.randomNode2()
	k := 3
	if os.Getenv("HOSTILE_DENSE") != "" {
		k = 8
	}
	for i := 0; i < k; i++ {
		name := w.pickS(hwCNPNames...)
		w.cnps[name] = w.randomCNP(name)
	}
	return w
}

func (w *hworld) pickS(s ...string) string { return s[w.r.IntN(len(s))] }

// someCNP is the name of a cluster policy of the world, picked at random
// in name order; false when it has none.
func (w *hworld) someCNP() (string, bool) {
	names := slices.Sorted(maps.Keys(w.cnps))
	if len(names) == 0 {
		return "", false
	}
	return names[w.r.IntN(len(names))], true
}

func (w *hworld) randomNSLabels(ns string) map[string]string {
	l := map[string]string{"ns": ns, "team": w.pickS("red", "blue")}
	if w.r.IntN(4) == 0 {
		l["ns"] = w.pickS(hwNamespaces...) // a namespace labelled as another
	}
	return l
}

// addresses come from a small pool that the networks cover and cut.
func (w *hworld) addr() (string, string) {
	w.slots++
	n := w.r.IntN(3) + 1
	h := w.r.IntN(4) + 1
	if w.r.IntN(5) == 0 {
		h = 128 + w.r.IntN(3)
	}
	return fmt.Sprintf("10.0.%d.%d", n, h), fmt.Sprintf("fd00::%d:%x", n, h)
}

func (w *hworld) randomPod(ns, name string) *hwPod {
	p := &hwPod{ns: ns, name: name, labels: map[string]string{"pod": name, "app": w.pickS("web", "db")}, node: testNode}
	if w.r.IntN(4) == 0 && os.Getenv("HOSTILE_DENSE") == "" {
		p.node = "node-2"
	}
	// unique addresses: retry until free
	for try := 0; try < 20; try++ {
		v4, v6 := w.addr()
		if w.addrTaken(v4, v6, objKey{ns, name}) {
			continue
		}
		switch w.r.IntN(5) {
		case 0:
			p.v4 = v4
		case 1:
			p.v6 = v6
		default:
			p.v4, p.v6 = v4, v6
		}
		break
	}
	for _, pp := range []corev1.ContainerPort{{Name: "web", ContainerPort: 80, Protocol: tcp}, {Name: "dns", ContainerPort: 81, Protocol: udp},
		{Name: "web", ContainerPort: 81, Protocol: tcp}, {Name: "dns", ContainerPort: 80, Protocol: sctp}} {
		if w.r.IntN(2) == 0 && !slices.ContainsFunc(p.ports, func(o corev1.ContainerPort) bool { return o.Name == pp.Name }) {
			p.ports = append(p.ports, pp)
		}
	}
	return p
}

func (w *hworld) addrTaken(v4, v6 string, except objKey) bool {
	for k, p := range w.pods {
		if k == except {
			continue
		}
		if (p.v4 != "" && p.v4 == v4) || (p.v6 != "" && p.v6 == v6) {
			return true
		}
	}
	return false
}

func (w *hworld) setPod(p *hwPod) {
	k := objKey{p.ns, p.name}
	w.pods[k] = p
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: p.name, Labels: maps.Clone(p.labels)},
		Spec:       corev1.PodSpec{NodeName: p.node, Containers: []corev1.Container{{Name: "c", Ports: slices.Clone(p.ports)}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, a := range []string{p.v4, p.v6} {
		if a != "" {
			pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: a})
		}
	}
	if len(pod.Status.PodIPs) > 0 {
		pod.Status.PodIP = pod.Status.PodIPs[0].IP
	}
	w.podObjs[k] = k8s.NewPod(pod)
}

func (w *hworld) delPod(k objKey) {
	delete(w.pods, k)
	delete(w.podObjs, k)
	delete(w.qPod, k)
}

func (w *hworld) randomNode2() *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2", Labels: map[string]string{"role": w.pickS("db", "web")}}}
	switch w.r.IntN(3) {
	case 0:
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.10"}, {Type: corev1.NodeInternalIP, Address: "2001:db8::10"}}
	case 1:
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.99"}}
	default:
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "2001:db8::99"}, {Type: corev1.NodeExternalIP, Address: "203.0.113.1"}}
	}
	return n
}

func (w *hworld) randomNSSel() *metav1.LabelSelector {
	switch w.r.IntN(5) {
	case 0:
		return &metav1.LabelSelector{}
	case 1:
		return &metav1.LabelSelector{MatchLabels: map[string]string{"team": w.pickS("red", "blue")}}
	case 2:
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "ns", Operator: metav1.LabelSelectorOpNotIn, Values: []string{w.pickS(hwNamespaces...)}}}}
	}
	return nsLabels(w.pickS(hwNamespaces...), w.pickS(hwNamespaces...))
}

func (w *hworld) randomPodSel() metav1.LabelSelector {
	switch w.r.IntN(3) {
	case 0:
		return metav1.LabelSelector{}
	case 1:
		return metav1.LabelSelector{MatchLabels: map[string]string{"app": w.pickS("web", "db")}}
	}
	return metav1.LabelSelector{MatchLabels: map[string]string{"pod": w.pickS(hwPodNames...)}}
}

func (w *hworld) randomProtocols() []cnpv1.ClusterNetworkPolicyProtocol {
	var out []cnpv1.ClusterNetworkPolicyProtocol
	n := w.r.IntN(3)
	if w.r.IntN(2) == 0 {
		n = 0
	}
	for i := 0; i < n; i++ {
		switch w.r.IntN(6) {
		case 0:
			out = append(out, tcpPort(int32(80+w.r.IntN(2))))
		case 1:
			out = append(out, udpRange(81, 82))
		case 2:
			out = append(out, cnpv1.ClusterNetworkPolicyProtocol{SCTP: &cnpv1.ClusterNetworkPolicyProtocolSCTP{}})
		case 3:
			out = append(out, cnpv1.ClusterNetworkPolicyProtocol{DestinationNamedPort: w.pickS("web", "dns")})
		case 4:
			out = append(out, cnpv1.ClusterNetworkPolicyProtocol{TCP: &cnpv1.ClusterNetworkPolicyProtocolTCP{DestinationPort: &cnpv1.Port{Range: &cnpv1.PortRange{Start: 79, End: 80}}}})
		default:
			out = append(out, cnpv1.ClusterNetworkPolicyProtocol{UDP: &cnpv1.ClusterNetworkPolicyProtocolUDP{}})
		}
	}
	return out
}

func (w *hworld) randomEgressPeer() cnpv1.ClusterNetworkPolicyEgressPeer {
	switch w.r.IntN(5) {
	case 0:
		return cnpv1.ClusterNetworkPolicyEgressPeer{Namespaces: w.randomNSSel()}
	case 1:
		return cnpv1.ClusterNetworkPolicyEgressPeer{Pods: &cnpv1.NamespacedPod{NamespaceSelector: *w.randomNSSel(), PodSelector: w.randomPodSel()}}
	case 2:
		return cnpv1.ClusterNetworkPolicyEgressPeer{Nodes: &metav1.LabelSelector{MatchLabels: map[string]string{"role": w.pickS("db", "web")}}}
	}
	var nets []cnpv1.CIDR
	for i := w.r.IntN(3) + 1; i > 0; i-- {
		nets = append(nets, cnpv1.CIDR(w.pickS(hwNetworks...)))
	}
	return cnpv1.ClusterNetworkPolicyEgressPeer{Networks: nets}
}

func (w *hworld) randomCNP(name string) *cnpv1.ClusterNetworkPolicy {
	p := &cnpv1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.Tier = []cnpv1.Tier{cnpv1.AdminTier, cnpv1.BaselineTier}[w.r.IntN(2)]
	p.Spec.Priority = int32(w.r.IntN(3))
	if w.r.IntN(2) == 0 {
		p.Spec.Subject.Namespaces = w.randomNSSel()
	} else {
		p.Spec.Subject.Pods = &cnpv1.NamespacedPod{NamespaceSelector: *w.randomNSSel(), PodSelector: w.randomPodSel()}
	}
	actions := []cnpv1.ClusterNetworkPolicyRuleAction{cnpAccept, cnpDeny, cnpPass}
	for i := w.r.IntN(4); i > 0; i-- {
		var peers []cnpv1.ClusterNetworkPolicyIngressPeer
		for j := w.r.IntN(2) + 1; j > 0; j-- {
			e := w.randomEgressPeer()
			for e.Nodes != nil || e.Networks != nil {
				e = w.randomEgressPeer()
			}
			peers = append(peers, cnpv1.ClusterNetworkPolicyIngressPeer{Namespaces: e.Namespaces, Pods: e.Pods})
		}
		p.Spec.Ingress = append(p.Spec.Ingress, cnpv1.ClusterNetworkPolicyIngressRule{Action: actions[w.r.IntN(3)], From: peers, Protocols: w.randomProtocols()})
	}
	for i := w.r.IntN(4); i > 0; i-- {
		var peers []cnpv1.ClusterNetworkPolicyEgressPeer
		for j := w.r.IntN(2) + 1; j > 0; j-- {
			peers = append(peers, w.randomEgressPeer())
		}
		p.Spec.Egress = append(p.Spec.Egress, cnpv1.ClusterNetworkPolicyEgressRule{Action: actions[w.r.IntN(3)], To: peers, Protocols: w.randomProtocols()})
	}
	return p
}

func (w *hworld) randomNP(ns, name string) *networkingv1.NetworkPolicy {
	switch w.r.IntN(5) {
	case 0:
		return policy(ns, name, denyIngress)
	case 1:
		return policy(ns, name, denyEgress)
	case 2:
		return policy(ns, name, selecting(w.pickS(hwPodNames...)), ingressRule(peers(nsPeer(w.pickS(hwNamespaces...))), port(tcp, 80)))
	case 3:
		return policy(ns, name, egressRule(peers(ipBlock("10.0.0.0/8")), port(udp, 81)), types(networkingv1.PolicyTypeEgress))
	}
	return policy(ns, name, selecting(w.pickS(hwPodNames...)), ingressRule(nil))
}

func (w *hworld) keys() []objKey { return slices.SortedFunc(maps.Keys(w.pods), compareKeys) }

func (w *hworld) step() string {
	switch w.r.IntN(16) {
	case 0, 1: // a cluster policy set or deleted
		name := w.pickS(hwCNPNames...)
		if _, ok := w.cnps[name]; ok && w.r.IntN(3) == 0 {
			delete(w.cnps, name)
			return "cnp delete " + name
		}
		w.cnps[name] = w.randomCNP(name)
		return "cnp set " + name
	case 2: // edited in place: priority or subject or one rule's action
		name, ok := w.someCNP()
		if !ok {
			return "nothing"
		}
		p := w.cnps[name].DeepCopy()
		switch w.r.IntN(4) {
		case 0:
			p.Spec.Priority = int32(w.r.IntN(3))
		case 1:
			if w.r.IntN(2) == 0 {
				p.Spec.Subject = cnpv1.ClusterNetworkPolicySubject{Namespaces: w.randomNSSel()}
			} else {
				p.Spec.Subject = cnpv1.ClusterNetworkPolicySubject{Pods: &cnpv1.NamespacedPod{NamespaceSelector: *w.randomNSSel(), PodSelector: w.randomPodSel()}}
			}
		case 2:
			if len(p.Spec.Egress) > 0 {
				i := w.r.IntN(len(p.Spec.Egress))
				p.Spec.Egress[i].Action = []cnpv1.ClusterNetworkPolicyRuleAction{cnpAccept, cnpDeny, cnpPass}[w.r.IntN(3)]
			}
		default:
			if p.Spec.Tier == cnpv1.AdminTier {
				p.Spec.Tier = cnpv1.BaselineTier
			} else {
				p.Spec.Tier = cnpv1.AdminTier
			}
		}
		w.cnps[name] = p
		return "cnp edit " + name
	case 3, 4: // a pod set anew
		ns, name := w.pickS(hwNamespaces...), w.pickS(hwPodNames...)
		w.setPod(w.randomPod(ns, name))
		return "pod set " + ns + "/" + name
	case 5: // pod deleted
		ks := w.keys()
		if len(ks) == 0 {
			return "nothing"
		}
		k := ks[w.r.IntN(len(ks))]
		w.delPod(k)
		return "pod delete " + k.String()
	case 6: // pod moves to another namespace, keeping its addresses
		ks := w.keys()
		if len(ks) == 0 {
			return "nothing"
		}
		k := ks[w.r.IntN(len(ks))]
		p := *w.pods[k]
		p.ns = w.pickS(hwNamespaces...)
		p.labels = maps.Clone(p.labels)
		w.delPod(k)
		w.delPod(objKey{p.ns, p.name})
		w.setPod(&p)
		return "pod move " + k.String() + " to " + p.ns
	case 7: // pod labels
		ks := w.keys()
		if len(ks) == 0 {
			return "nothing"
		}
		k := ks[w.r.IntN(len(ks))]
		p := *w.pods[k]
		p.labels = maps.Clone(p.labels)
		p.labels["app"] = w.pickS("web", "db", "cache")
		w.setPod(&p)
		return "pod labels " + k.String()
	case 8: // pod addresses: gains or loses a family, or readdressed
		ks := w.keys()
		if len(ks) == 0 {
			return "nothing"
		}
		k := ks[w.r.IntN(len(ks))]
		p := *w.pods[k]
		switch w.r.IntN(4) {
		case 0:
			p.v4 = ""
		case 1:
			p.v6 = ""
		default:
			for try := 0; try < 20; try++ {
				v4, v6 := w.addr()
				if !w.addrTaken(v4, v6, k) {
					p.v4, p.v6 = v4, v6
					break
				}
			}
		}
		w.setPod(&p)
		return "pod addresses " + k.String()
	case 9, 10: // namespace relabelled, added or deleted
		ns := w.pickS(hwNamespaces...)
		if _, ok := w.nsLabels[ns]; ok && w.r.IntN(5) == 0 {
			delete(w.nsLabels, ns)
			return "ns delete " + ns
		}
		w.nsLabels[ns] = w.randomNSLabels(ns)
		return "ns set " + ns
	case 11: // NetworkPolicy
		ns, name := w.pickS(hwNamespaces...), w.pickS("n0", "n1")
		k := objKey{ns, name}
		if _, ok := w.nps[k]; ok && w.r.IntN(2) == 0 {
			delete(w.nps, k)
			return "np delete " + k.String()
		}
		w.nps[k] = w.randomNP(ns, name)
		return "np set " + k.String()
	case 12:
		if w.r.IntN(2) == 0 {
			w.node2 = w.randomNode2()
			return "node-2 set"
		}
		w.node1Labels = map[string]string{"role": w.pickS("db", "web")}
		switch w.r.IntN(3) {
		case 0:
			w.node1Addrs = nil
		case 1:
			w.node1Addrs = []string{"192.0.2.50", "2001:db8::50"}
		default:
			w.node1Addrs = []string{"192.0.2.99"}
		}
		return fmt.Sprintf("node-1 labels %v addrs %v", w.node1Labels, w.node1Addrs)
	case 13:
		if w.noQuar {
			return "nothing"
		}
		if w.r.IntN(2) == 0 {
			ns := w.pickS(hwNamespaces...)
			w.qNS[ns] = !w.qNS[ns]
			return fmt.Sprintf("ns quarantined=%v %s", w.qNS[ns], ns)
		}
		ks := w.keys()
		if len(ks) == 0 {
			return "nothing"
		}
		k := ks[w.r.IntN(len(ks))]
		w.qPod[k] = !w.qPod[k]
		return fmt.Sprintf("pod quarantined=%v %s", w.qPod[k], k)
	case 14: // copies of everything (no change)
		for k, p := range w.cnps {
			w.cnps[k] = p.DeepCopy()
		}
		return "copies"
	default: // pod moves node
		ks := w.keys()
		if len(ks) == 0 {
			return "nothing"
		}
		k := ks[w.r.IntN(len(ks))]
		p := *w.pods[k]
		if p.node == testNode {
			p.node = "node-2"
		} else {
			p.node = testNode
		}
		w.setPod(&p)
		return "pod node " + k.String()
	}
}

func (w *hworld) snapshot() *k8s.Snapshot {
	s := &k8s.Snapshot{}
	for _, ns := range slices.Sorted(maps.Keys(w.nsLabels)) {
		s.Namespaces = append(s.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: maps.Clone(w.nsLabels[ns])}})
		if w.qNS[ns] {
			s.QuarantinedNamespaces = append(s.QuarantinedNamespaces, ns)
		}
	}
	for _, k := range w.keys() {
		s.Pods = append(s.Pods, w.podObjs[k])
		if w.qPod[k] {
			s.Quarantined = append(s.Quarantined, ktypes.NamespacedName{Namespace: k.namespace, Name: k.name})
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(w.nps), compareKeys) {
		s.Policies = append(s.Policies, w.nps[k])
	}
	for _, n := range slices.Sorted(maps.Keys(w.cnps)) {
		s.ClusterPolicies = append(s.ClusterPolicies, w.cnps[n])
	}
	n1 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, Labels: maps.Clone(w.node1Labels)}}
	for _, a := range w.node1Addrs {
		n1.Status.Addresses = append(n1.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
	}
	s.Nodes = []*corev1.Node{n1}
	if w.node2 != nil {
		s.Nodes = append(s.Nodes, w.node2)
	}
	return s
}

// hwAddrs are the addresses probed: every pod's, and outside ones.
func hwAddrs(snap *k8s.Snapshot) []netip.Addr {
	var out []netip.Addr
	for _, p := range snap.Pods {
		if reference.TakesPart(p) {
			out = append(out, reference.PodAddrs(p)...)
		}
	}
	for _, a := range hwOutside {
		out = append(out, netip.MustParseAddr(a))
	}
	for _, n := range snap.Nodes {
		for _, a := range n.Status.Addresses {
			out = append(out, netip.MustParseAddr(a.Address))
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

type hwConn struct {
	proto nft.Proto
	port  uint16
}

var hwConns = []hwConn{{nft.ProtoTCP, 80}, {nft.ProtoTCP, 81}, {nft.ProtoUDP, 81}, {nft.ProtoUDP, 80}, {nft.ProtoSCTP, 80}, {nft.ProtoICMP, 0}}

func hwPacket(src, dst netip.Addr, c hwConn, dnat bool) (nft.Packet, reference.Conn) {
	proto := c.proto
	var icmp uint8
	if proto == nft.ProtoICMP {
		icmp = 8
		if src.Is6() {
			proto, icmp = nft.ProtoICMPv6, 128
		}
	}
	return nft.Packet{Src: src, Dst: dst, Proto: proto, Dport: c.port, ICMPType: icmp, Mark: otherMark, DNAT: dnat},
		reference.Conn{Src: src, Dst: dst, Proto: proto, Port: c.port, DNAT: dnat}
}

// hwCheckReference holds every probe of snap through table to the reference.
func hwCheckReference(t *testing.T, table *nft.Table, snap *k8s.Snapshot) []string {
	t.Helper()
	ref := reference.New(snap, testNode)
	tracer := nft.NewTracer(table)
	var diffs []string
	addrs := hwAddrs(snap)
	own := hwOwnNode(snap)
	hasInput := slices.ContainsFunc(table.Chains, func(ch *nft.Chain) bool { return ch.Name == inputChainName() })
	for _, src := range addrs {
		for _, dst := range addrs {
			if src.Is4() != dst.Is4() {
				continue
			}
			if own[dst] && src != dst {
				// The input hook: the source's egress alone; NetworkPolicy
				// always allows a pod its own node.
				for _, c := range hwConns {
					pkt, conn := hwPacket(src, dst, c, false)
					e, _ := ref.Decide(conn)
					if e != nil && e.Tier == reference.TierQuarantine {
						continue
					}
					want := e.Allowed() || e.Tier == reference.TierNetworkPolicy
					got := true
					var path []string
					if hasInput {
						res, err := tracer.Trace(inputChainName(), pkt)
						if err != nil {
							t.Fatalf("trace input: %v", err)
						}
						got, path = res.Verdict == nft.Accept, res.Path
					}
					if got != want {
						diffs = append(diffs, fmt.Sprintf("%v→own node %v %s/%d: input allowed=%v, want %v (reference egress %s)\n    %s",
							src, dst, pkt.Proto, pkt.Dport, got, want, e, strings.Join(path, "\n    ")))
					}
				}
			}
			for _, c := range hwConns {
				for _, dnat := range []bool{false, true} {
					if dnat && src != dst {
						continue
					}
					pkt, conn := hwPacket(src, dst, c, dnat)
					res, err := tracer.Trace(forwardChainName(), pkt)
					if err != nil {
						t.Fatalf("trace: %v", err)
					}
					got := res.Verdict == nft.Accept
					if got && res.Mark != otherMark {
						diffs = append(diffs, fmt.Sprintf("%v→%v %s/%d leaves with mark %#x", src, dst, pkt.Proto, pkt.Dport, res.Mark))
					}
					if want := ref.Allowed(conn); got != want {
						e, i := ref.Decide(conn)
						diffs = append(diffs, fmt.Sprintf("%v→%v %s/%d dnat=%v: table allowed=%v, reference %v (%s; %s)\n    %s",
							src, dst, pkt.Proto, pkt.Dport, dnat, got, want, e, i, strings.Join(res.Path, "\n    ")))
					}
				}
			}
		}
	}
	return diffs
}

// hwOwnNode: this node's addresses that no pod holds.
func hwOwnNode(snap *k8s.Snapshot) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, n := range snap.Nodes {
		if n.Name != testNode {
			continue
		}
		for _, a := range n.Status.Addresses {
			out[netip.MustParseAddr(a.Address)] = true
		}
	}
	for _, p := range snap.Pods {
		if reference.TakesPart(p) {
			for _, a := range reference.PodAddrs(p) {
				delete(out, a)
			}
		}
	}
	return out
}

// hwCheckExplain holds Explain to the table and the reference.
func hwCheckExplain(t *testing.T, c *Compiler, table *nft.Table, snap *k8s.Snapshot) []string {
	t.Helper()
	ref := reference.New(snap, testNode)
	tracer := nft.NewTracer(table)
	var diffs []string
	hwEachProbe(snap, func(src, dst netip.Addr, pkt nft.Packet, conn reference.Conn) {
		x, err := c.Explain(table, pkt)
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("%v→%v: explain error %v", src, dst, err))
			return
		}
		res, _ := tracer.Trace(forwardChainName(), pkt)
		if x.To.OwnNode {
			res = nft.TraceResult{Verdict: nft.Accept}
			if slices.ContainsFunc(table.Chains, func(ch *nft.Chain) bool { return ch.Name == inputChainName() }) {
				res, _ = tracer.Trace(inputChainName(), pkt)
			}
			if x.Verdict != res.Verdict || (x.Egress != nil && x.Egress.Allowed() != (res.Verdict == nft.Accept)) {
				diffs = append(diffs, fmt.Sprintf("%v→own node %v %s/%d: explained %s, input trace %s\n%s", src, dst, pkt.Proto, pkt.Dport, x.Verdict, res.Verdict, indent(x.String())))
			}
			return
		}
		var why []string
		if x.Verdict != res.Verdict {
			why = append(why, fmt.Sprintf("verdict %s, trace %s", x.Verdict, res.Verdict))
		}
		if both := (x.Egress == nil || x.Egress.Allowed()) && (x.Ingress == nil || x.Ingress.Allowed()); both != (x.Verdict == nft.Accept) {
			why = append(why, fmt.Sprintf("sides allow=%v, verdict %s", both, x.Verdict))
		}
		e, i := ref.Decide(conn)
		why = append(why, hwCompareSide("egress", x.Egress, e)...)
		why = append(why, hwCompareSide("ingress", x.Ingress, i)...)
		if len(why) > 0 {
			diffs = append(diffs, fmt.Sprintf("%v→%v %s/%d: %s\n%s", src, dst, pkt.Proto, pkt.Dport, strings.Join(why, "; "), indent(x.String())))
		}
	})
	return diffs
}

func hwCompareSide(dir string, s *Side, d *reference.Decision) []string {
	if (s == nil) != (d == nil) {
		return []string{fmt.Sprintf("%s: explained %v, reference %v", dir, s != nil, d)}
	}
	if s == nil {
		return nil
	}
	var why []string
	if s.Allowed() != d.Allowed() {
		why = append(why, fmt.Sprintf("%s: explained allowed=%v (%s), reference %s", dir, s.Allowed(), s.DecidedBy(), d))
	}
	want := map[reference.Tier]string{reference.TierAdmin: tierAdmin, reference.TierBaseline: tierBaseline,
		reference.TierNetworkPolicy: "networkpolicy", reference.TierQuarantine: "networkpolicy", reference.TierDefault: "default", reference.TierSelf: "self"}[d.Tier]
	policyName, ruleIdx := d.Policy, d.Rule
	if n := len(d.Passed); d.Tier == reference.TierDefault && n > 0 && d.Passed[n-1].Tier == reference.TierBaseline {
		// Explain calls a Baseline Pass the baseline's decision (allowed).
		want, policyName, ruleIdx = tierBaseline, d.Passed[n-1].Policy, d.Passed[n-1].Rule
	}
	if d.Tier == reference.TierQuarantine {
		return why // dropped either way; an Admin Deny may claim it first
	}
	if got := s.DecidedBy(); got != want {
		why = append(why, fmt.Sprintf("%s: decided by %s, reference %s", dir, got, d))
		return why
	}
	var rule *ClusterRuleRef
	switch want {
	case tierAdmin:
		rule = s.AdminRule
	case tierBaseline:
		rule = s.BaselineRule
	default:
		return why
	}
	if rule.Policy != policyName || rule.Rule != ruleIdx || rule.Direction != dir {
		why = append(why, fmt.Sprintf("%s: explained rule %s, reference %s", dir, rule, d))
	}
	return why
}

// hwCheckCounters traces every probe through a table compiled with
// counters and checks the counted tier rules are the ones the reference
// says decided (or passed).
func hwCheckCounters(t *testing.T, c *Compiler, table *nft.Table, snap *k8s.Snapshot) []string {
	t.Helper()
	ref := reference.New(snap, testNode)
	rules := c.countedRules()
	tracer := nft.NewTracer(table)
	byName := map[string]*nft.Chain{}
	for _, ch := range table.Chains {
		byName[ch.Name] = ch
	}
	var diffs []string
	hwEachProbe(snap, func(src, dst netip.Addr, pkt nft.Packet, conn reference.Conn) {
		res, err := tracer.Trace(forwardChainName(), pkt)
		if err != nil {
			t.Fatal(err)
		}
		counted := map[string][]CountKey{}
		for _, step := range res.Path {
			name, rest, _ := strings.Cut(step, ": ")
			keys, ok := rules[name]
			if !ok {
				continue
			}
			ch := byName[name]
			k := -1
			n := 0
			for _, r := range ch.Rules {
				has := slices.Contains(r.Exprs, nft.Expr(nft.Counter{}))
				if strings.HasPrefix(rest, nft.RenderRule(r)) && (rest == nft.RenderRule(r) || strings.HasPrefix(rest, nft.RenderRule(r)+" -> ")) {
					if has {
						k = n
					}
					break
				}
				if has {
					n++
				}
			}
			if k < 0 {
				continue
			}
			if k >= len(keys) {
				diffs = append(diffs, fmt.Sprintf("%v→%v: chain %s counted rule %d of %d keys", src, dst, name, k, len(keys)))
				continue
			}
			if keys[k].adds.Tier == "" {
				continue
			}
			counted[keys[k].adds.Direction] = append(counted[keys[k].adds.Direction], keys[k].adds)
		}
		e, i := ref.Decide(conn)
		for _, side := range []struct {
			dir string
			d   *reference.Decision
		}{{"egress", e}, {"ingress", i}} {
			var want []CountKey
			if side.d != nil {
				for _, p := range side.d.Passed {
					want = append(want, CountKey{Policy: p.Policy, Direction: side.dir, Tier: strings.ToLower(string(p.Tier)), Rule: p.Rule, Action: "Pass"})
				}
				if side.d.Tier == reference.TierAdmin || side.d.Tier == reference.TierBaseline {
					want = append(want, CountKey{Policy: side.d.Policy, Direction: side.dir, Tier: strings.ToLower(string(side.d.Tier)), Rule: side.d.Rule, Action: string(side.d.Action)})
				}
			}
			got := counted[side.dir]
			if side.d != nil && side.d.Tier == reference.TierQuarantine {
				continue
			}
			if len(got) == 0 && res.Verdict == nft.Drop {
				continue // the other side dropped first
			}
			if !slices.Equal(got, want) {
				diffs = append(diffs, fmt.Sprintf("%v→%v %s/%d %s: counted %+v, reference decided %+v\n    %s", src, dst, pkt.Proto, pkt.Dport, side.dir, got, want, strings.Join(res.Path, "\n    ")))
			}
		}
	})
	return diffs
}

func hwReport(t *testing.T, where string, diffs []string, snap *k8s.Snapshot, table *nft.Table) {
	t.Helper()
	if len(diffs) == 0 {
		return
	}
	if len(diffs) > 6 {
		diffs = append(diffs[:6], fmt.Sprintf("... and %d more", len(diffs)-6))
	}
	t.Fatalf("%s:\n%s", where, strings.Join(diffs, "\n"))
}

var (
	hwSeedFrom = uint64(1)
	hwSeeds    = uint64(3)
	hwSteps    = 40
)

// HOSTILE_SEEDS=from:count runs more seeds.
func TestHostileCNPWorld(t *testing.T) {
	if v := os.Getenv("HOSTILE_SEEDS"); v != "" {
		fmt.Sscanf(v, "%d:%d", &hwSeedFrom, &hwSeeds)
	}
	for seed := hwSeedFrom; seed < hwSeedFrom+hwSeeds; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			w := newHWorld(seed)
			opts := Options{Node: testNode, WalkPolicies: os.Getenv("HOSTILE_WALK") != ""}
			inc := NewCompiler(opts)
			copts := Options{Node: testNode, Counters: true, WalkPolicies: opts.WalkPolicies}
			cinc := NewCompiler(copts)
			var history []string
			var prev *nft.Table
			for step := 0; step < hwSteps; step++ {
				event := w.step()
				history = append(history, event)
				snap := w.snapshot()
				where := fmt.Sprintf("step %d (%s); history %q", step, event, history)
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Fatalf("%s: panic %v", where, r)
						}
					}()
					got := checkIncremental(t, inc, opts, prev, snap, DefaultPriority, where)
					prev = got
					if err := got.Validate(); err != nil {
						t.Fatalf("%s: incremental table invalid: %v", where, err)
					}
					hwReport(t, where+": table vs reference", hwCheckReference(t, got, snap), snap, got)
					hwReport(t, where+": explain (incremental compiler)", hwCheckExplain(t, inc, got, snap), snap, got)
					ct, _ := cinc.Compile(snap, DefaultPriority)
					if err := ct.Validate(); err != nil {
						t.Fatalf("%s: counted table invalid: %v", where, err)
					}
					hwReport(t, where+": counters", hwCheckCounters(t, cinc, ct, snap), snap, ct)
				}()
			}
		})
	}
}

// The world again through Compilers whose names collide (every short
// hash, or every hash): the table must still decide as the reference,
// validate, and Explain must agree with it.
func TestHostileCNPWorldColliding(t *testing.T) {
	from, n := uint64(1), uint64(2)
	if v := os.Getenv("HOSTILE_SEEDS"); v != "" {
		fmt.Sscanf(v, "%d:%d", &from, &n)
	}
	for _, hashName := range []string{"constant", "short"} {
		for seed := from; seed < from+n; seed++ {
			t.Run(fmt.Sprintf("%s/seed=%d", hashName, seed), func(t *testing.T) {
				w := newHWorld(seed)
				inc := collidingCompiler(collidingHashes[hashName])
				var prev *nft.Table
				var history []string
				for step := 0; step < hwSteps; step++ {
					event := w.step()
					history = append(history, event)
					snap := w.snapshot()
					where := fmt.Sprintf("step %d (%s); history %q", step, event, history)
					got, _ := inc.Compile(snap, DefaultPriority)
					hwCheckTable(t, where, inc, prev, got)
					prev = got
					hwReport(t, where+": table vs reference", hwCheckReference(t, got, snap), snap, got)
					hwReport(t, where+": explain", hwCheckExplain(t, inc, got, snap), snap, got)
				}
			})
		}
	}
}

// hwCheckTable holds a compile c just made (got, after prev) to what
// every step must be: its Delta is nft.Diff's, its names are unique and
// the table is valid.
func hwCheckTable(t *testing.T, where string, c *Compiler, prev, got *nft.Table) {
	t.Helper()
	if prev != nil {
		if d := gocmp.Diff(deltaNames(nft.Diff(prev, got)), deltaNames(c.Delta())); d != "" {
			t.Fatalf("%s: Delta differs from nft.Diff (-Diff +Delta):\n%s", where, d)
		}
	}
	requireUniqueNames(t, got)
	if err := got.Validate(); err != nil {
		t.Fatalf("%s: table invalid: %v", where, err)
	}
}

// hwEachProbe calls probe for every connection between two addresses of
// snap of one family, forward (no DNAT), on every protocol and port of
// hwConns.
func hwEachProbe(snap *k8s.Snapshot, probe func(src, dst netip.Addr, pkt nft.Packet, conn reference.Conn)) {
	addrs := hwAddrs(snap)
	for _, src := range addrs {
		for _, dst := range addrs {
			if src.Is4() != dst.Is4() || src == dst {
				continue
			}
			for _, cc := range hwConns {
				pkt, conn := hwPacket(src, dst, cc, false)
				probe(src, dst, pkt, conn)
			}
		}
	}
}
