package enforcer

import (
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
	"k8s.io/apimachinery/pkg/labels"
	ktypes "k8s.io/apimachinery/pkg/types"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// The hostile claims world: a handful of pods over a dozen addresses at
// the very edges of both address spaces and next to each other (so that
// peer-set ranges merge and split at 0.0.0.0, 255.255.255.255, :: and
// ffff:…:ffff), almost always two or three pods on one address (this
// node and another, terminating and not, older and newer, quarantined
// and unsettled), pods gaining, losing and swapping addresses, moving
// between namespaces, appearing and going in one snapshot; namespaces
// relabelled and quarantined; NetworkPolicies whose ipBlocks touch the
// pods' addresses, egress named ports used by policies that select
// nothing here, and a ClusterNetworkPolicy on a named port. Every step is
// checked against a fresh compile (table, problems, claims), its Delta
// against nft.Diff and the exact patches against the true difference,
// the Delta applied to an nft.Fake (accepted, no drift), and Explain
// against an independent ranking of the pods claiming each address.

var (
	hcNamespaces = []string{"x", "y", "z"}
	hcPodNames   = []string{"a", "b", "c", "d", "e", "f"}
	hcV4         = []string{"0.0.0.0", "0.0.0.1", "0.0.0.2", "10.0.0.254", "10.0.0.255", "10.0.1.0", "255.255.255.254", "255.255.255.255"}
	hcV6         = []string{"::", "::1", "::2", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}
	hcNode2      = "node-2"
)

type hcPod struct {
	ns, name    string
	node        string
	ips         []string
	app         string
	created     int
	terminating bool
	http        int32 // 0: serves no http
	dns         bool
	admin       bool
	quarantined bool
	unsettled   *k8s.UnsettledPod
	phase       corev1.PodPhase // "": Running
	hostNet     bool
}

type hcWorld struct {
	r        *rand.Rand
	pods     map[objKey]*hcPod
	nsLabels map[string]string // team label of each namespace
	nsQuar   map[string]bool
	nsFlow   map[string]bool // annotated for flow logs
	policies map[string]bool // names of the policy templates in force
	edits    map[string]int  // variant of each template
	cnp      bool
	nodeIPs  bool // the nodes' status addresses are pool addresses
	cidrs    int  // which podCIDRs this node has (hcCIDRs)
	// The objects of the last snapshot, handed out again while what they
	// say is unchanged, as the informer source does: the compiler's
	// pointer shortcuts are taken (quarantine and unsettled entries change
	// beside an unchanged Pod object).
	podRecs map[objKey]hcRec
	nsRecs  map[string]*corev1.Namespace
	npRecs  map[string]*networkingv1.NetworkPolicy
	cnpRec  *cnpv1.ClusterNetworkPolicy
	nodeRec []*corev1.Node
}

type hcRec struct {
	content string
	pod     *k8s.Pod
}

func newHCWorld(seed uint64) *hcWorld {
	w := &hcWorld{r: rand.New(rand.NewPCG(seed, seed^0x5eed)), pods: map[objKey]*hcPod{},
		nsLabels: map[string]string{}, nsQuar: map[string]bool{}, nsFlow: map[string]bool{}, policies: map[string]bool{}, edits: map[string]int{},
		podRecs: map[objKey]hcRec{}, nsRecs: map[string]*corev1.Namespace{}, npRecs: map[string]*networkingv1.NetworkPolicy{}}
	for _, ns := range hcNamespaces {
		w.nsLabels[ns] = w.pick("a", "b")
	}
	for i := 0; i < 5; i++ {
		p := w.randomPod(w.pick(hcNamespaces...), w.pick(hcPodNames...))
		w.pods[objKey{p.ns, p.name}] = p
	}
	for _, n := range hcPolicyNames {
		w.policies[n] = w.r.IntN(2) == 0
	}
	w.cnp = w.r.IntN(2) == 0
	return w
}

func (w *hcWorld) pick(s ...string) string { return s[w.r.IntN(len(s))] }

func (w *hcWorld) randomIPs() []string {
	var ips []string
	switch w.r.IntN(5) {
	case 0:
		ips = []string{w.pick(hcV4...)}
	case 1:
		ips = []string{w.pick(hcV6...)}
		if w.r.IntN(4) == 0 { // an IPv4 address of the pool spelled as IPv4-mapped IPv6
			ips = []string{"::ffff:" + w.pick(hcV4...)}
		}
	case 2:
		ips = []string{w.pick(hcV4...), w.pick(hcV4...)} // two v4, maybe one
	default:
		ips = []string{w.pick(hcV4...), w.pick(hcV6...)}
	}
	return ips
}

func (w *hcWorld) randomPod(ns, name string) *hcPod {
	p := &hcPod{ns: ns, name: name, node: w.pick(testNode, testNode, hcNode2), ips: w.randomIPs(),
		app: w.pick("web", "db"), created: w.r.IntN(3), terminating: w.r.IntN(4) == 0,
		dns: w.r.IntN(2) == 0, admin: w.r.IntN(3) == 0}
	if w.r.IntN(3) != 0 {
		p.http = []int32{80, 8080}[w.r.IntN(2)]
	}
	if w.r.IntN(6) == 0 {
		w.quarantine(p)
	}
	return p
}

func (w *hcWorld) quarantine(p *hcPod) {
	p.quarantined = true
	p.unsettled = nil
	if w.r.IntN(2) == 0 {
		ips := slices.Concat(p.ips, w.randomIPs())
		slices.SortFunc(ips, func(a, b string) int { return netip.MustParseAddr(a).Compare(netip.MustParseAddr(b)) })
		ips = slices.Compact(ips)
		nodes := []string{p.node}
		if w.r.IntN(2) == 0 {
			nodes = append(nodes, w.pick(testNode, hcNode2))
		}
		slices.Sort(nodes)
		switch w.r.IntN(6) {
		case 0: // every definition is a hostNetwork pod's: no address
			ips = nil
		case 1: // no definition gives a node
			nodes = nil
		}
		p.unsettled = &k8s.UnsettledPod{Namespace: p.ns, Name: p.name, Nodes: slices.Compact(nodes), IPs: ips}
	}
}

func (w *hcWorld) keys() []objKey { return slices.SortedFunc(maps.Keys(w.pods), compareKeys) }

func (w *hcWorld) anyPod() (*hcPod, bool) {
	ks := w.keys()
	if len(ks) == 0 {
		return nil, false
	}
	return w.pods[ks[w.r.IntN(len(ks))]], true
}

func (w *hcWorld) clone(p *hcPod) *hcPod {
	q := *p
	q.ips = slices.Clone(p.ips)
	if p.unsettled != nil {
		u := *p.unsettled
		q.unsettled = &u
	}
	return &q
}

func (w *hcWorld) put(p *hcPod) {
	if p.unsettled != nil {
		p.unsettled.Namespace, p.unsettled.Name = p.ns, p.name
	}
	w.pods[objKey{p.ns, p.name}] = p
}

func (w *hcWorld) step() string {
	switch w.r.IntN(16) {
	case 0, 1:
		p := w.randomPod(w.pick(hcNamespaces...), w.pick(hcPodNames...))
		w.put(p)
		return "pod set " + p.ns + "/" + p.name
	case 2:
		if p, ok := w.anyPod(); ok {
			delete(w.pods, objKey{p.ns, p.name})
			return "pod delete " + p.ns + "/" + p.name
		}
	case 3: // gains or loses an address
		if p, ok := w.anyPod(); ok {
			q := w.clone(p)
			if len(q.ips) > 1 && w.r.IntN(2) == 0 {
				q.ips = q.ips[:1]
			} else {
				q.ips = append(q.ips, w.pick(slices.Concat(hcV4, hcV6)...))
			}
			w.put(q)
			return fmt.Sprintf("pod %s/%s now at %v", q.ns, q.name, q.ips)
		}
	case 4: // two pods swap addresses in one snapshot
		a, ok1 := w.anyPod()
		b, ok2 := w.anyPod()
		if ok1 && ok2 && a != b {
			qa, qb := w.clone(a), w.clone(b)
			qa.ips, qb.ips = qb.ips, qa.ips
			w.put(qa)
			w.put(qb)
			return fmt.Sprintf("swap %s/%s and %s/%s", a.ns, a.name, b.ns, b.name)
		}
	case 5: // moves namespace, keeping its addresses
		if p, ok := w.anyPod(); ok {
			q := w.clone(p)
			q.ns = w.pick(hcNamespaces...)
			delete(w.pods, objKey{p.ns, p.name})
			w.put(q)
			return fmt.Sprintf("pod %s/%s moved to %s", p.ns, p.name, q.ns)
		}
	case 6: // one goes, another comes on its address, in one snapshot
		if p, ok := w.anyPod(); ok {
			delete(w.pods, objKey{p.ns, p.name})
			q := w.randomPod(w.pick(hcNamespaces...), w.pick(hcPodNames...))
			q.ips = slices.Clone(p.ips)
			w.put(q)
			return fmt.Sprintf("pod %s/%s replaced by %s/%s", p.ns, p.name, q.ns, q.name)
		}
	case 7: // terminating, node, creation or labels
		if p, ok := w.anyPod(); ok {
			q := w.clone(p)
			switch w.r.IntN(6) {
			case 4:
				q.phase = []corev1.PodPhase{"", corev1.PodSucceeded, corev1.PodFailed, corev1.PodPending}[w.r.IntN(4)]
			case 5:
				q.hostNet = !q.hostNet
			case 0:
				q.terminating = !q.terminating
			case 1:
				q.node = w.pick(testNode, hcNode2)
			case 2:
				q.created = w.r.IntN(3)
			default:
				q.app = w.pick("web", "db", "cache")
			}
			w.put(q)
			return fmt.Sprintf("pod %s/%s edited", q.ns, q.name)
		}
	case 8: // quarantined, unsettled, or back
		if p, ok := w.anyPod(); ok {
			q := w.clone(p)
			if q.quarantined && w.r.IntN(2) == 0 {
				q.quarantined, q.unsettled = false, nil
			} else {
				w.quarantine(q)
			}
			w.put(q)
			return fmt.Sprintf("pod %s/%s quarantined=%v unsettled=%v", q.ns, q.name, q.quarantined, q.unsettled != nil)
		}
	case 9:
		ns := w.pick(hcNamespaces...)
		w.nsLabels[ns] = w.pick("a", "b", "c", "gone")
		return fmt.Sprintf("namespace %s team=%s", ns, w.nsLabels[ns])
	case 10:
		ns := w.pick(hcNamespaces...)
		if w.r.IntN(2) == 0 {
			w.nsFlow[ns] = !w.nsFlow[ns]
			return fmt.Sprintf("namespace %s flow logged=%v", ns, w.nsFlow[ns])
		}
		w.nsQuar[ns] = !w.nsQuar[ns]
		return fmt.Sprintf("namespace %s quarantined=%v", ns, w.nsQuar[ns])
	case 11, 12:
		n := hcPolicyNames[w.r.IntN(len(hcPolicyNames))]
		if w.policies[n] && w.r.IntN(2) == 0 {
			w.edits[n] = w.r.IntN(3)
			return "policy edited " + n
		}
		w.policies[n] = !w.policies[n]
		return fmt.Sprintf("policy %s in force=%v", n, w.policies[n])
	case 13:
		w.cnp = !w.cnp
		return fmt.Sprintf("cnp=%v", w.cnp)
	case 14: // several events in one snapshot
		var evs []string
		for range 2 + w.r.IntN(3) {
			evs = append(evs, w.step())
		}
		return strings.Join(evs, "; ")
	case 15:
		if w.r.IntN(3) == 0 {
			w.cidrs = w.r.IntN(len(hcCIDRs))
			w.nodeRec = nil
			return fmt.Sprintf("pod CIDRs %v", hcCIDRs[w.cidrs])
		}
		if w.r.IntN(2) == 0 {
			w.nodeIPs = !w.nodeIPs
			w.nodeRec = nil
			return fmt.Sprintf("node addresses in the pool=%v", w.nodeIPs)
		}
		w.podRecs = map[objKey]hcRec{}
		w.nsRecs = map[string]*corev1.Namespace{}
		w.npRecs = map[string]*networkingv1.NetworkPolicy{}
		w.cnpRec = nil
		return "copies"
	}
	return "nothing"
}

// hcCIDRs are the pod CIDRs this node may have: some at the edges of the
// address spaces, where the pods' addresses are (DenyUnknown closes what
// no pod of this node holds).
var hcCIDRs = [][]string{
	{"10.0.0.0/24", "fd00::/64"},
	{"0.0.0.0/30", "::/126"},
	{"255.255.255.252/30", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffc/126"},
	{"10.0.0.254/31", "0.0.0.0/31"},
	nil,
}

var hcPolicyNames = []string{"x/web-in", "y/all-eg", "z/remote-eg", "x/blocks", "y/edge", "z/ingress-only-with-egress", "x/deny"}

func (w *hcWorld) policy(name string) *networkingv1.NetworkPolicy {
	v := w.edits[name]
	sel := func(app string) func(*networkingv1.NetworkPolicy) {
		return func(np *networkingv1.NetworkPolicy) {
			np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
		}
	}
	appPeer := func(app string, nsSel *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
		return networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}, NamespaceSelector: nsSel}
	}
	team := func(t string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"team": t}}
	}
	both := types(networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress)
	switch name {
	case "x/web-in":
		return policy("x", "web-in", sel([]string{"web", "db", "cache"}[v]),
			ingressRule(peers(appPeer("db", nil), ipBlock("10.0.0.254/31")), namedPort(tcp, "http")),
			ingressRule(peers(appPeer("web", team("a"))), port(tcp, 80)))
	case "y/all-eg":
		return policy("y", "all-eg",
			egressRule(peers(networkingv1.NetworkPolicyPeer{NamespaceSelector: team([]string{"a", "b", "c"}[v])}), namedPort(tcp, "http"), namedPort(udp, "dns")),
			types(networkingv1.PolicyTypeEgress))
	case "z/remote-eg": // selects nothing anywhere: its egress named port still has its sets
		return policy("z", "remote-eg", sel("nobody"),
			egressRule(nil, namedPort(tcp, []string{"admin", "http", "admin"}[v])), types(networkingv1.PolicyTypeEgress))
	case "x/blocks":
		return policy("x", "blocks",
			ingressRule(peers(ipBlock("0.0.0.0/31", "0.0.0.1/32"), ipBlock("255.255.255.254/31"), ipBlock("::/127"),
				ipBlock("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/128"), appPeer([]string{"web", "db", "web"}[v], &metav1.LabelSelector{})), port(tcp, 80)),
			egressRule(peers(ipBlock([]string{"0.0.0.0/32", "0.0.0.0/30", "10.0.0.255/32"}[v]), appPeer("db", nil))),
			both)
	case "y/edge":
		return policy("y", "edge", sel("web"),
			egressRule(peers(ipBlock("0.0.0.0/0", "10.0.0.0/8"), ipBlock("::/0", "ffff::/16"), appPeer("web", &metav1.LabelSelector{})), port(tcp, 80)),
			egressRule(peers(appPeer("db", team("b"))), namedPort(tcp, "http")),
			types(networkingv1.PolicyTypeEgress))
	case "z/ingress-only-with-egress": // egress rules a policy of types [Ingress] ignores
		return policy("z", "ingress-only-with-egress",
			ingressRule(peers(appPeer("web", nil)), namedPort(tcp, "admin")),
			egressRule(nil, namedPort(tcp, "metrics")),
			types(networkingv1.PolicyTypeIngress))
	case "x/deny":
		return policy("x", "deny", denyIngress)
	}
	panic(name)
}

func (w *hcWorld) clusterPolicy() *cnpv1.ClusterNetworkPolicy {
	p := &cnpv1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "named"}}
	p.Spec.Tier = cnpv1.AdminTier
	p.Spec.Priority = 1
	p.Spec.Subject.Namespaces = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "c"}}
	p.Spec.Egress = []cnpv1.ClusterNetworkPolicyEgressRule{{
		Action: cnpAccept,
		To: []cnpv1.ClusterNetworkPolicyEgressPeer{{Pods: &cnpv1.NamespacedPod{
			NamespaceSelector: metav1.LabelSelector{}, PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}},
		Protocols: []cnpv1.ClusterNetworkPolicyProtocol{{DestinationNamedPort: "dns-tcp"}},
	}, {
		Action: cnpDeny,
		To: []cnpv1.ClusterNetworkPolicyEgressPeer{{Nodes: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "other"}}},
			{Networks: []cnpv1.CIDR{"0.0.0.0/31", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/127"}}},
	}}
	return p
}

func (w *hcWorld) record(p *hcPod) *k8s.Pod {
	c := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: p.name, Labels: map[string]string{"app": p.app}, // no label of its own: the intern tables (k8s) stay small
			CreationTimestamp: metav1.NewTime(time.Unix(int64(1e9+p.created), 0))},
		Spec:   corev1.PodSpec{NodeName: p.node, HostNetwork: p.hostNet},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if p.phase != "" {
		c.Status.Phase = p.phase
	}
	if p.terminating {
		c.DeletionTimestamp = &metav1.Time{Time: time.Unix(2e9, 0)}
	}
	seen := map[string]bool{}
	for _, ip := range p.ips {
		if !seen[ip] {
			seen[ip] = true
			c.Status.PodIPs = append(c.Status.PodIPs, corev1.PodIP{IP: ip})
		}
	}
	c.Status.PodIP = c.Status.PodIPs[0].IP
	var ports []corev1.ContainerPort
	if p.http != 0 {
		ports = append(ports, corev1.ContainerPort{Name: "http", ContainerPort: p.http, Protocol: corev1.ProtocolTCP})
	}
	if p.dns {
		ports = append(ports, corev1.ContainerPort{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
			corev1.ContainerPort{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP})
	}
	if p.admin {
		ports = append(ports, corev1.ContainerPort{Name: "admin", ContainerPort: 9000, Protocol: corev1.ProtocolTCP},
			corev1.ContainerPort{Name: "metrics", ContainerPort: 9100, Protocol: corev1.ProtocolTCP})
	}
	c.Spec.Containers = []corev1.Container{{Name: "main", Ports: ports}}
	return k8s.NewPod(c)
}

func (w *hcWorld) snapshot() *k8s.Snapshot {
	s := &k8s.Snapshot{}
	for _, ns := range hcNamespaces {
		if w.nsLabels[ns] == "gone" { // the Namespace object went before its pods and policies
			continue
		}
		rec := w.nsRecs[ns]
		if rec == nil || rec.Labels["team"] != w.nsLabels[ns] || k8s.FlowLogged(rec) != w.nsFlow[ns] {
			rec = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
				Labels: map[string]string{"kubernetes.io/metadata.name": ns, "team": w.nsLabels[ns]}}}
			if w.nsFlow[ns] {
				rec.Annotations = map[string]string{k8s.FlowLogAnnotation: "true"}
			}
			w.nsRecs[ns] = rec
		}
		s.Namespaces = append(s.Namespaces, rec)
		if w.nsQuar[ns] && w.nsLabels[ns] != "gone" {
			s.QuarantinedNamespaces = append(s.QuarantinedNamespaces, ns)
		}
	}
	recs := map[objKey]hcRec{}
	defer func() { w.podRecs = recs }() // the pods that went are forgotten
	for _, k := range w.keys() {
		p := w.pods[k]
		content := fmt.Sprint(p.ns, p.name, p.node, p.ips, p.app, p.created, p.terminating, p.http, p.dns, p.admin, p.phase, p.hostNet)
		rec, ok := w.podRecs[k]
		if !ok || rec.content != content {
			rec = hcRec{content, w.record(p)}
		}
		recs[k] = rec
		s.Pods = append(s.Pods, rec.pod)
		if p.quarantined {
			s.Quarantined = append(s.Quarantined, ktypes.NamespacedName{Namespace: p.ns, Name: p.name})
		}
		if p.unsettled != nil {
			s.Unsettled = append(s.Unsettled, *p.unsettled)
		}
	}
	for _, n := range hcPolicyNames {
		if w.policies[n] {
			key := fmt.Sprint(n, w.edits[n])
			if w.npRecs[key] == nil {
				w.npRecs[key] = w.policy(n)
			}
			s.Policies = append(s.Policies, w.npRecs[key])
		}
	}
	if w.cnp {
		if w.cnpRec == nil {
			w.cnpRec = w.clusterPolicy()
		}
		s.ClusterPolicies = append(s.ClusterPolicies, w.cnpRec)
	}
	if w.nodeRec == nil {
		w.nodeRec = []*corev1.Node{
			{ObjectMeta: metav1.ObjectMeta{Name: hcNode2, Labels: map[string]string{"role": "other"}}},
			{ObjectMeta: metav1.ObjectMeta{Name: testNode, Labels: map[string]string{"role": "this"}}, Spec: corev1.NodeSpec{PodCIDRs: hcCIDRs[w.cidrs]}},
		}
		if w.nodeIPs {
			w.nodeRec[0].Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "0.0.0.2"}}
			w.nodeRec[1].Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.1.0"},
				{Type: corev1.NodeInternalIP, Address: "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}}
		}
	}
	s.Nodes = slices.Clone(w.nodeRec)
	s.Sort()
	return s
}

// expectedOwner ranks the pods of the world claiming ip as addresses.go
// documents it, independently of the compiler: this node's first, then
// one whose place is known, then one not terminating, then the newer,
// then the first by name. "" when no pod claims ip.
func (w *hcWorld) expectedOwner(ip netip.Addr) string {
	type cand struct {
		key                           objKey
		local, unsettled, terminating bool
		created                       int
	}
	var cs []cand
	for _, k := range w.keys() {
		p := w.pods[k]
		ips, local := p.ips, p.node == testNode
		if p.hostNet || p.phase == corev1.PodSucceeded || p.phase == corev1.PodFailed {
			ips = nil // takes no part
		}
		if p.unsettled != nil {
			ips, local = p.unsettled.IPs, slices.Contains(p.unsettled.Nodes, testNode)
		}
		if slices.ContainsFunc(ips, func(s string) bool { return netip.MustParseAddr(s).Unmap() == ip }) {
			cs = append(cs, cand{k, local, p.unsettled != nil, p.terminating, p.created})
		}
	}
	if len(cs) == 0 {
		return ""
	}
	best := cs[0]
	for _, c := range cs[1:] {
		better := false
		switch {
		case c.local != best.local:
			better = c.local
		case c.unsettled != best.unsettled:
			better = best.unsettled
		case c.terminating != best.terminating:
			better = best.terminating
		case c.created != best.created:
			better = c.created > best.created
		default:
			better = compareKeys(c.key, best.key) < 0
		}
		if better {
			best = c
		}
	}
	return best.key.String()
}

var hcAddrCmp = gocmp.Comparer(func(a, b netip.Addr) bool { return a == b })

// hcCheckExplain fails t unless Explain names, for every address of the
// pool, the pod the ranking gives it, as the fresh compiler's Explain
// does, and the pod whose chain the dispatch maps send the address to.
func hcCheckExplain(t *testing.T, w *hcWorld, inc, fresh *Compiler, got, want *nft.Table, where string) {
	t.Helper()
	dispatch := map[netip.Addr]string{}
	for _, s := range got.Sets {
		if s.Name != podsMapName(ingress, nft.IPv4) && s.Name != podsMapName(ingress, nft.IPv6) {
			continue
		}
		for _, e := range s.All() {
			dispatch[e.Addr] = e.Verdict.Chain
		}
	}
	other := map[nft.IPFamily]netip.Addr{nft.IPv4: netip.MustParseAddr("192.0.2.1"), nft.IPv6: netip.MustParseAddr("2001:db8::1")}
	for _, s := range slices.Concat(hcV4, hcV6) {
		ip := netip.MustParseAddr(s)
		pkt := nft.Packet{Src: ip, Dst: other[nft.FamilyOf(ip)], Proto: nft.ProtoTCP, Dport: 80}
		x, err := inc.Explain(got, pkt)
		if err != nil {
			t.Fatalf("%s: explain %s: %v", where, ip, err)
		}
		fx, err := fresh.Explain(want, pkt)
		if err != nil {
			t.Fatalf("%s: explain %s (fresh): %v", where, ip, err)
		}
		if diff := gocmp.Diff(fx, x, hcAddrCmp); diff != "" {
			t.Fatalf("%s: explain %v differs from a fresh compiler's (-fresh +incremental):\n%s", where, pkt, diff)
		}
		if x.From.Pod != fx.From.Pod || x.From.Local != fx.From.Local {
			t.Fatalf("%s: explain names %s as %q (local %v), a fresh compiler's as %q (local %v)", where, ip, x.From.Pod, x.From.Local, fx.From.Pod, fx.From.Local)
		}
		if exp := w.expectedOwner(ip); x.From.Pod != exp {
			t.Fatalf("%s: explain names %s as %q, the documented ranking gives %q", where, ip, x.From.Pod, exp)
		}
		if ch, ok := dispatch[ip]; ok && !strings.HasSuffix(ch, "-"+x.From.Pod) {
			t.Fatalf("%s: explain names %s as %q, the ingress dispatch map sends it to %s", where, ip, x.From.Pod, ch)
		}
		back := nft.Packet{Src: other[nft.FamilyOf(ip)], Dst: ip, Proto: nft.ProtoTCP, Dport: 80}
		bx, err := inc.Explain(got, back)
		if err != nil || bx.To.Pod != fx.From.Pod {
			t.Fatalf("%s: explain names %s as destination %v (%v), as source %q", where, ip, bx, err, fx.From.Pod)
		}
		own := w.nodeIPs && w.expectedOwner(ip) == "" && (s == "10.0.1.0" || s == "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")
		if bx.To.OwnNode != own {
			t.Fatalf("%s: explain says %s is this node's own address: %v, want %v (a pod holding it is taken for the destination)", where, ip, bx.To.OwnNode, own)
		}
		if fbx, err := fresh.Explain(want, back); err != nil {
			t.Fatal(err)
		} else if diff := gocmp.Diff(fbx, bx, hcAddrCmp); diff != "" {
			t.Fatalf("%s: explain %v differs from a fresh compiler's (-fresh +incremental):\n%s", where, back, diff)
		}
	}
}

// runHCWorld drives the world for steps events and checks each.
// With deferUnions, each step's compile may defer unions (every union is
// deferred: deferUnionElements 0); its delta must still move the Fake to
// its table, and a second compile of the same snapshot (the settling sync)
// must be a fresh compile's table, its delta checked as any other.
func runHCWorld(t *testing.T, seed uint64, steps int, opts Options) {
	w := newHCWorld(seed)
	deferUnions := opts.DeferUnions
	inc := NewCompiler(opts)
	fake := nft.NewFake()
	var prev *nft.Table
	var events []string
	var contested, exactPeer, exactPort, deferred int
	defer func() {
		t.Logf("steps with a contested address %d, exact peer-set patches %d, exact named-port patches %d, deferring %d", contested, exactPeer, exactPort, deferred)
	}()
	for step := range steps {
		event := "initial"
		if step > 0 {
			event = w.step()
		}
		events = append(events, event)
		where := fmt.Sprintf("seed %d step %d (%s), last events %q", seed, step, event, events[max(0, len(events)-6):])
		snap := w.snapshot()
		got, gotProblems := inc.Compile(snap, DefaultPriority)
		if deferUnions && prev != nil {
			checkDelta(t, inc, prev, got, where+" (deferring)")
			d := inc.Delta()
			if _, err := fake.WriteDeltaAt(d, got, 0); err != nil {
				t.Fatalf("%s: deferring: the Fake refuses the delta: %v\n%s", where, err, nft.RenderDelta(d, got))
			}
			if drift, err := fake.Drift(got); err != nil || drift != "" {
				t.Fatalf("%s: deferring: after the delta the Fake drifts from the table: %q, %v", where, drift, err)
			}
			if len(inc.deferred) > 0 {
				deferred++
				// The deferred table allows what the union would: the
				// same verdicts and pods as a fresh compile's.
				fresh := NewCompiler(opts)
				want, _ := fresh.Compile(snap, DefaultPriority)
				pool := slices.Concat(hcV4, hcV6)
				for i, a := range pool {
					src, dst := netip.MustParseAddr(a), netip.MustParseAddr(pool[(i+3)%len(pool)])
					if nft.FamilyOf(src) != nft.FamilyOf(dst) {
						continue
					}
					pkt := nft.Packet{Src: src, Dst: dst, Proto: nft.ProtoTCP, Dport: 80}
					x, err1 := inc.Explain(got, pkt)
					fx, err2 := fresh.Explain(want, pkt)
					if err1 != nil || err2 != nil {
						t.Fatalf("%s: explain %v: %v, %v", where, pkt, err1, err2)
					}
					if x.Verdict != fx.Verdict || x.From != fx.From || x.To != fx.To {
						t.Fatalf("%s: deferring: %v is %v from %v to %v, a fresh compile says %v from %v to %v", where, pkt, x.Verdict, x.From, x.To, fx.Verdict, fx.From, fx.To)
					}
				}
			}
			prev = got
			got, gotProblems = inc.Compile(snap, DefaultPriority)
			where += " (settled)"
		}
		checkCompiled(t, inc, opts, prev, got, gotProblems, snap, DefaultPriority, where)
		fresh := NewCompiler(opts)
		want, _ := fresh.Compile(snap, DefaultPriority)
		if err := got.Validate(); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if prev == nil {
			if _, err := fake.ApplyAt(got, 0); err != nil {
				t.Fatalf("%s: apply: %v", where, err)
			}
		} else {
			d := inc.Delta()
			for _, u := range d.UpdateSets {
				if u.Exact && strings.HasPrefix(u.New.Name, "peers-") {
					exactPeer++
				} else if u.Exact {
					exactPort++
				}
			}
			if _, err := fake.WriteDeltaAt(d, got, 0); err != nil {
				t.Fatalf("%s: the Fake refuses the delta: %v\n%s", where, err, nft.RenderDelta(d, got))
			}
			if drift, err := fake.Drift(got); err != nil || drift != "" {
				t.Fatalf("%s: after the delta the Fake drifts from the table: %q, %v", where, drift, err)
			}
		}
		hcCheckExplain(t, w, inc, fresh, got, want, where)
		if step%10 == 9 {
			requireSameShape(t, inc, fresh, where)
		}
		if len(inc.claims.more) > 0 {
			contested++
		}
		hcCheckPortSets(t, w, snap, got, where)
		prev = got
	}
}

// hcCheckPortSets: an egress named-port set is in the table exactly while
// a policy of the snapshot in force uses the name in an egress rule it
// enforces (a NetworkPolicy of types [Ingress] enforces none).
func hcCheckPortSets(t *testing.T, w *hcWorld, snap *k8s.Snapshot, got *nft.Table, where string) {
	t.Helper()
	want := map[string]bool{}
	for _, np := range snap.Policies {
		if !slices.Contains(k8s.PolicyTypes(&np.Spec), networkingv1.PolicyTypeEgress) {
			continue
		}
		for _, r := range np.Spec.Egress {
			for _, p := range r.Ports {
				if p.Port != nil && p.Port.StrVal != "" {
					want[fmt.Sprintf("egress-port-%s-%s", p.Port.StrVal, strings.ToLower(string(*p.Protocol)))] = true
				}
			}
		}
	}
	for _, cnp := range snap.ClusterPolicies {
		for _, r := range cnp.Spec.Egress {
			for _, p := range r.Protocols {
				if p.DestinationNamedPort != "" {
					want["egress-port-"+p.DestinationNamedPort+"-tcp"] = true
					want["egress-port-"+p.DestinationNamedPort+"-udp"] = true
					want["egress-port-"+p.DestinationNamedPort+"-sctp"] = true
				}
			}
		}
	}
	// Ingress: while a policy isolating for ingress with the name in an
	// ingress rule selects a pod of this node taking part (one it does
	// not quarantine, winning an address).
	for _, np := range snap.Policies {
		if !slices.Contains(k8s.PolicyTypes(&np.Spec), networkingv1.PolicyTypeIngress) {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			t.Fatal(err)
		}
		selects := false
		for _, k := range w.keys() {
			p := w.pods[k]
			local := p.node == testNode
			if p.unsettled != nil {
				local = slices.Contains(p.unsettled.Nodes, testNode)
			}
			if p.ns != np.Namespace || !local || p.quarantined || !sel.Matches(labels.Set{"app": p.app}) {
				continue
			}
			ips := p.ips
			if p.unsettled != nil {
				ips = p.unsettled.IPs
			}
			if slices.ContainsFunc(ips, func(s string) bool { return w.expectedOwner(netip.MustParseAddr(s).Unmap()) == k.String() }) {
				selects = true
			}
		}
		if !selects {
			continue
		}
		for _, r := range np.Spec.Ingress {
			for _, p := range r.Ports {
				if p.Port != nil && p.Port.StrVal != "" {
					want[fmt.Sprintf("ingress-port-%s-%s", p.Port.StrVal, strings.ToLower(string(*p.Protocol)))] = true
				}
			}
		}
	}
	have := map[string]bool{}
	for _, s := range got.Sets {
		if n, ok := strings.CutSuffix(s.Name, "-v4"); ok && (strings.HasPrefix(n, "egress-port-") || strings.HasPrefix(n, "ingress-port-")) {
			have[n] = true
		}
	}
	for n := range have {
		if !want[n] {
			t.Fatalf("%s: the table has %s-v4, which no rule in force uses (ingress: on a pod of this node)", where, n)
		}
	}
	for n := range want {
		if strings.Contains(n, "dns-tcp") {
			continue // a cluster policy's name: which protocols get a set is the compiler's choice
		}
		if !have[n] {
			t.Fatalf("%s: no %s-v4, though a rule in force uses it; sets: %v", where, n, slices.Sorted(maps.Keys(have)))
		}
	}
}

func TestHostileClaimsWorld(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			opts := Options{Node: testNode, DenyUnknown: seed%2 == 0}
			if seed%3 == 0 { // flow logs (namespaces annotated at random), counters, policy chains walked
				opts.FlowLog = FlowLog{Group: 100}
				opts.Counters, opts.WalkPolicies = true, seed%2 == 1
			}
			runHCWorld(t, seed, 120, opts)
		})
	}
}

func TestHostileClaimsWorldDeferred(t *testing.T) {
	defer func(n int) { deferUnionElements = n }(deferUnionElements)
	deferUnionElements = 0
	for seed := uint64(201); seed <= 204; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			runHCWorld(t, seed, 120, Options{Node: testNode, DenyUnknown: seed%2 == 0, DeferUnions: true})
		})
	}
}
