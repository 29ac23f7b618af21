package enforcer

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	policyv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/nftpolicy/nftpolicy/internal/reference"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// FuzzCompile compiles random valid clusters and policies, generated from
// the fuzz input by genCluster, and checks two properties:
//
//   - every connection the packet tracer (nft.Trace over the compiled
//     table) decides as the reference evaluator (internal/reference, written
//     from the NetworkPolicy and ClusterNetworkPolicy API documentation,
//     independent of the compiler) decides it: from every address to every address of its
//     family (pod IPs, node IPs, outside addresses), TCP/UDP/SCTP to a few
//     ports, and ICMP; a pod's connections to itself both hairpinned
//     through a Service (allowed) and forged (judged as any other); an
//     accepted packet leaves with another component's mark bits unchanged
//     and ours clear; an established packet always passes;
//   - as root, the table loads into a kernel (one network namespace per
//     fuzzing process, see fuzzKernel) without error.
//
// The compiler may report problems only for the ClusterNetworkPolicies
// made with a shape the schema rejects, or with domainNames (see genned).
//
// The seed corpus is testdata/fuzz/FuzzCompile, each file an input whose
// cluster has the semantic corner its name says, plus the inputs below;
// `go test` runs them as ordinary tests. Run longer with `make fuzz`. A
// failure prints the cluster as YAML and the compiled table.
func FuzzCompile(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 5, 2, 2, 2, 3, 3, 3, 0xff}) // admitted, a few pods
	f.Add([]byte(strings.Repeat("\x07\x03\x01", 60)))
	kernel := newFuzzKernel(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		gc := genCluster(t, data)
		table, problems := Compile(gc.snap, Options{Node: testNode})
		if problems = gc.unexpected(problems); len(problems) > 0 {
			t.Fatalf("problems compiling a valid cluster: %v\n%s", problems, gc.yaml())
		}
		checkAgainstReference(t, gc, table)
		checkExplain(t, gc)
		kernel.apply(t, table, gc)
	})
}

// checkAgainstReference traces every probe through table and compares the
// verdict with the reference's.
func checkAgainstReference(t *testing.T, gc *genned, table *nft.Table) {
	t.Helper()
	ref := reference.New(gc.snap, testNode)
	var diffs []string
	protos := []nft.Proto{nft.ProtoTCP, nft.ProtoUDP, nft.ProtoSCTP}
	for _, src := range gc.addrs {
		for _, dst := range gc.addrs {
			if src.Is4() != dst.Is4() {
				continue
			}
			var conns []reference.Conn
			for _, proto := range protos {
				for _, port := range fuzzProbePorts {
					conns = append(conns, reference.Conn{Src: src, Dst: dst, Proto: proto, Port: port})
				}
			}
			icmp := reference.Conn{Src: src, Dst: dst, Proto: nft.ProtoICMP}
			if src.Is6() {
				icmp.Proto = nft.ProtoICMPv6
			}
			conns = append(conns, icmp)
			if src == dst {
				// Hairpinned through a Service, as well as forged.
				for _, c := range conns {
					c.DNAT = true
					conns = append(conns, c)
				}
			}
			for _, c := range conns {
				pkt := nft.Packet{Src: c.Src, Dst: c.Dst, Proto: c.Proto, Dport: c.Port, Mark: gc.mark, DNAT: c.DNAT}
				if c.Proto == nft.ProtoICMP {
					pkt.ICMPType = 8 // echo request
				} else if c.Proto == nft.ProtoICMPv6 {
					pkt.ICMPType = 128
				}
				res, err := nft.Trace(table, "filter-forward", pkt)
				if err != nil {
					t.Fatalf("trace %v: %v\n%s", c, err, gc.yaml())
				}
				got := res.Verdict == nft.Accept
				if got && res.Mark != gc.mark {
					t.Errorf("%s leaves with mark 0x%08x, want 0x%08x\n%s", gc.name(c), res.Mark, gc.mark, strings.Join(res.Path, "\n"))
				}
				if want := ref.Allowed(c); got != want {
					egress, ingress := ref.Decide(c)
					diffs = append(diffs, fmt.Sprintf("  %s: compiled allowed=%v, reference %v (%s; %s)\n    %s",
						gc.name(c), got, want, egress, ingress, strings.Join(res.Path, "\n    ")))
				}
			}
		}
	}
	if len(diffs) > 0 {
		if len(diffs) > 10 {
			diffs = append(diffs[:10], fmt.Sprintf("  ... and %d more", len(diffs)-10))
		}
		t.Errorf("compiled table and reference disagree on %d connections:\n%s\ncluster:\n%s\ntable:\n%s",
			len(diffs), strings.Join(diffs, "\n"), gc.yaml(), nft.Render(table))
	}
	// Replies pass whatever policy says: policy is for NEW packets only.
	a := gc.addrs[0]
	res, err := nft.Trace(table, "filter-forward", nft.Packet{Src: a, Dst: a, Proto: nft.ProtoTCP, Dport: 80, Mark: gc.mark, Established: true})
	if err != nil || res.Verdict != nft.Accept || res.Mark != gc.mark {
		t.Errorf("established packet: %+v, %v", res, err)
	}
}

// The generated cluster. Namespaces x, y and z (labels team and env, values
// a or b, sometimes absent); up to six pods p0…p5 (labels app and tier,
// values a or b) with container ports named web, dns and metrics on ports
// 53, 80, 81 and 8080; up to four policies np0…np3; then (choices that
// add nothing when 0, see genCluster) labels and addresses of the nodes
// node-1 and node-2 (genNodes), up to four ClusterNetworkPolicies alpha,
// bravo, charlie, delta (genClusterPolicy), and now and then a quarantined
// pod and a quarantined namespace (genQuarantine).
//
// Address plan: pod pI has 10.0.<I%2>.<I+1> and fd00::<I%2>:<I+1> (either,
// both, or none), unless it has finished and took over p0's addresses, or
// runs on the host network and has its node's: node-1 192.168.0.1 and
// 2001:db8:ffff::1, node-2 …2. Every address is held by at most one pod that
// takes part (see enforcer/addresses.go for what the compiler does
// otherwise). Outside addresses probed besides: fuzzOutside.
var (
	fuzzNamespaces = []string{"x", "y", "z"}
	fuzzPortNames  = []string{"web", "dns", "metrics"}
	fuzzPortNums   = []int32{53, 80, 81, 8080}
	fuzzProbePorts = []uint16{53, 80, 81, 180, 8080}
	fuzzProtocols  = []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}
	fuzzOutside    = []netip.Addr{
		netip.MustParseAddr("10.0.0.200"), netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("192.0.2.1"),
		netip.MustParseAddr("fd00::c8"), netip.MustParseAddr("fd01::1"), netip.MustParseAddr("2001:db8::1"),
	}
	fuzzNodeIPs = map[string][2]string{
		testNode: {"192.168.0.1", "2001:db8:ffff::1"},
		"node-2": {"192.168.0.2", "2001:db8:ffff::2"},
	}
)

// A genned cluster is a snapshot with what the probes need.
type genned struct {
	snap  *k8s.Snapshot
	addrs []netip.Addr // every address probed, sorted
	names map[netip.Addr]string
	mark  uint32 // the mark packets arrive with: none of our bits
	admit bool   // the objects went through k8s.Admit
	// failClosed are the ClusterPolicies with a shape the CRD's schema
	// rejects on purpose (a peer or protocols entry with no field, as a
	// field of a newer CRD decodes, an empty subject or from/to list): they
	// skip k8s.Admit and reach the compiler as written.
	failClosed []*policyv1beta1.ClusterNetworkPolicy
	// domainNames are the ClusterPolicies with a domainNames peer, valid
	// but not enforced: the compiler may report them.
	domainNames []*policyv1beta1.ClusterNetworkPolicy
}

func (gc *genned) name(c reference.Conn) string {
	dnat := ""
	if c.DNAT {
		dnat = " (dnat)"
	}
	return fmt.Sprintf("%s→%s %s/%d%s", gc.names[c.Src], gc.names[c.Dst], c.Proto, c.Port, dnat)
}

// yaml renders the cluster for a failure message: a reproducer.
func (gc *genned) yaml() string {
	out, err := yaml.Marshal(gc.snap)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("# admitted: %v, mark 0x%08x\n%s", gc.admit, gc.mark, out)
}

// fuzzChoices reads the generator's choices from the fuzz input, one byte
// each. Past its end the choices go on from a generator seeded with the
// whole input, so that a short input still makes a full cluster (all
// zeros would mean no policy at all) and the same input always the same.
type fuzzChoices struct {
	data []byte
	rng  uint64
}

func newFuzzChoices(data []byte) *fuzzChoices {
	h := fnv.New64a()
	h.Write(data)
	return &fuzzChoices{data: data, rng: h.Sum64()}
}

// n returns a choice in [0, k).
func (c *fuzzChoices) n(k int) int {
	if k <= 1 {
		return 0
	}
	if len(c.data) > 0 {
		b := c.data[0]
		c.data = c.data[1:]
		return int(b) % k
	}
	// splitmix64
	c.rng += 0x9e3779b97f4a7c15
	z := c.rng
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return int((z ^ z>>31) % uint64(k))
}

func pick[T any](c *fuzzChoices, xs ...T) T { return xs[c.n(len(xs))] }

// genCluster builds a valid cluster from data. Each object is checked
// with k8s.Admit (but the ClusterNetworkPolicies of a shape the schema
// rejects on purpose, genned.failClosed); half the inputs (by the first
// choice) compile the admitted objects, the others the objects as
// written, which the compiler must read with the same defaults.
//
// The choices for what came with ClusterNetworkPolicy (node labels and
// addresses, ClusterNetworkPolicies, quarantine) come last, and a choice
// of 0 adds nothing there: the corpus files made before it hold their
// choices written out (one byte each, from the generator's own stream)
// followed by zeros, so they keep the clusters their names say.
func genCluster(t *testing.T, data []byte) *genned {
	c := newFuzzChoices(data)
	gc := &genned{snap: &k8s.Snapshot{}, names: map[netip.Addr]string{}}
	gc.admit = c.n(2) == 1
	gc.mark = uint32(c.n(256))<<24 | uint32(c.n(256))<<8 | uint32(c.n(256))
	gc.mark &^= DefaultMarkMask

	for _, name := range fuzzNamespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		for _, key := range []string{"team", "env"} {
			if v := pick(c, "", "a", "b"); v != "" {
				setLabel(&ns.ObjectMeta, key, v)
			}
		}
		if c.n(8) == 0 {
			// The API server overwrites it; a manifest may still say so.
			setLabel(&ns.ObjectMeta, corev1.LabelMetadataName, pick(c, fuzzNamespaces...))
		}
		gc.snap.Namespaces = append(gc.snap.Namespaces, ns)
	}
	gc.snap.Nodes = []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: testNode}}, {ObjectMeta: metav1.ObjectMeta{Name: "node-2"}}}

	nPods := 1 + c.n(6)
	for i := range nPods {
		gc.snap.Pods = append(gc.snap.Pods, genPod(c, i, gc.snap.Pods))
	}
	for i := range c.n(5) {
		gc.snap.Policies = append(gc.snap.Policies, genPolicy(c, i))
	}

	// Everything below came with ClusterNetworkPolicy. A choice of 0 adds
	// nothing anywhere in it, so that the corpus made before it (its
	// choices written out, then zeros) keeps the clusters its names say.
	genNodes(c, gc.snap.Nodes, gc.snap.Pods)
	names := slices.Clone(fuzzCNPNames)
	for range c.n(5) {
		name := names[c.n(len(names))]
		names = slices.DeleteFunc(names, func(n string) bool { return n == name })
		cnp, failClosed := genClusterPolicy(c, name, gc.snap.Pods)
		gc.snap.ClusterPolicies = append(gc.snap.ClusterPolicies, cnp)
		if failClosed {
			gc.failClosed = append(gc.failClosed, cnp)
		}
		if slices.ContainsFunc(cnp.Spec.Egress, func(r policyv1beta1.ClusterNetworkPolicyEgressRule) bool {
			return slices.ContainsFunc(r.To, func(p policyv1beta1.ClusterNetworkPolicyEgressPeer) bool { return p.DomainNames != nil })
		}) {
			gc.domainNames = append(gc.domainNames, cnp)
		}
	}
	// Sorted by name, as the Snapshot promises (made in another order).
	slices.SortFunc(gc.snap.ClusterPolicies, func(a, b *policyv1beta1.ClusterNetworkPolicy) int { return strings.Compare(a.Name, b.Name) })
	genQuarantine(c, gc.snap)

	for _, obj := range gc.objects() {
		target := obj
		if !gc.admit {
			target = obj.DeepCopyObject()
		}
		if errs := k8s.Admit(target); len(errs) > 0 {
			t.Fatalf("the generator made an invalid object: %v\n%s", k8s.FieldErrors(errs), gc.yaml())
		}
	}

	addrs := map[netip.Addr]string{}
	for _, p := range gc.snap.Pods {
		for _, a := range reference.PodAddrs(p) {
			if addrs[a] == "" || reference.TakesPart(p) {
				addrs[a] = p.Namespace + "/" + p.Name
			}
		}
	}
	for node, ips := range fuzzNodeIPs {
		for _, s := range ips {
			a := netip.MustParseAddr(s)
			if addrs[a] == "" {
				addrs[a] = node
			}
		}
	}
	for _, a := range fuzzOutside {
		addrs[a] = a.String()
	}
	for a, name := range addrs {
		gc.addrs = append(gc.addrs, a)
		gc.names[a] = name + "(" + a.String() + ")"
	}
	slices.SortFunc(gc.addrs, netip.Addr.Compare)
	return gc
}

// unexpected are the problems that name no ClusterNetworkPolicy made
// with a shape the schema rejects (failClosed) or with domainNames, which
// the compiler may well report.
func (gc *genned) unexpected(problems []Problem) []Problem {
	reported := slices.Concat(gc.failClosed, gc.domainNames)
	return slices.DeleteFunc(problems, func(p Problem) bool {
		return slices.ContainsFunc(reported, func(cnp *policyv1beta1.ClusterNetworkPolicy) bool {
			return p.Object == "ClusterNetworkPolicy "+cnp.Name
		})
	})
}

func (gc *genned) objects() []runtime.Object {
	var out []runtime.Object
	for _, o := range gc.snap.Namespaces {
		out = append(out, o)
	}
	for _, o := range gc.snap.Nodes {
		out = append(out, o)
	}
	for _, o := range gc.snap.Pods {
		out = append(out, o)
	}
	for _, o := range gc.snap.Policies {
		out = append(out, o)
	}
	for _, o := range gc.snap.ClusterPolicies {
		if !slices.Contains(gc.failClosed, o) {
			out = append(out, o)
		}
	}
	return out
}

func setLabel(m *metav1.ObjectMeta, k, v string) {
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	m.Labels[k] = v
}

func fuzzPodAddrs(i int) (netip.Addr, netip.Addr) {
	return netip.MustParseAddr(fmt.Sprintf("10.0.%d.%d", i%2, i+1)), netip.MustParseAddr(fmt.Sprintf("fd00::%x:%x", i%2, i+1))
}

func genPod(c *fuzzChoices, i int, before []*k8s.Pod) *k8s.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: pick(c, fuzzNamespaces...), Name: fmt.Sprintf("p%d", i)},
		Spec:       corev1.PodSpec{NodeName: testNode},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, key := range []string{"app", "tier"} {
		if v := pick(c, "", "a", "b"); v != "" {
			setLabel(&p.ObjectMeta, key, v)
		}
	}
	if c.n(4) == 0 {
		p.Spec.NodeName = "node-2"
	}
	switch c.n(10) {
	case 0:
		p.Status.Phase = corev1.PodSucceeded
	case 1:
		p.Status.Phase = corev1.PodFailed
	case 2:
		p.Status.Phase = corev1.PodPending
	case 3:
		p.Spec.HostNetwork = true
	}
	for ci := range 1 + c.n(2) {
		ctr := corev1.Container{Name: fmt.Sprintf("c%d", ci)}
		for range c.n(4) {
			cp := corev1.ContainerPort{
				Name:          pick(c, append([]string{""}, fuzzPortNames...)...),
				ContainerPort: pick(c, fuzzPortNums...),
				Protocol:      pick(c, append([]corev1.Protocol{""}, fuzzProtocols...)...),
			}
			if slices.ContainsFunc(ctr.Ports, func(o corev1.ContainerPort) bool { return cp.Name != "" && o.Name == cp.Name }) {
				cp.Name = "" // a name is unique within a container
			}
			ctr.Ports = append(ctr.Ports, cp)
		}
		p.Spec.Containers = append(p.Spec.Containers, ctr)
	}

	v4, v6 := fuzzPodAddrs(i)
	finished := p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	switch {
	case p.Spec.HostNetwork:
		ips := fuzzNodeIPs[p.Spec.NodeName]
		v4, v6 = netip.MustParseAddr(ips[0]), netip.MustParseAddr(ips[1])
	case finished && len(before) > 0 && c.n(2) == 0:
		// A finished pod keeps reporting the IP the next pod was given.
		v4, v6 = fuzzPodAddrs(0)
	}
	var ips []string
	switch c.n(6) {
	case 0:
		ips = []string{v4.String()}
	case 1:
		ips = []string{v6.String()}
	case 2:
		ips = []string{v6.String(), v4.String()}
	case 3:
		// no IP yet
	default:
		ips = []string{v4.String(), v6.String()}
	}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0]
		if len(ips) == 1 && c.n(2) == 0 {
			p.Status.PodIPs = nil // only podIP, as older manifests have it
		}
	}
	return k8s.NewPod(p)
}

func genPolicy(c *fuzzChoices, i int) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: pick(c, fuzzNamespaces...), Name: fmt.Sprintf("np%d", i)}}
	np.Spec.PodSelector = *genSelector(c, podLabelKeys, podLabelValues)
	switch c.n(6) {
	case 2:
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	case 3:
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	case 4:
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	case 5:
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress, networkingv1.PolicyTypeIngress}
	}
	if n, ok := genListLen(c); ok {
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{}
		for range n {
			from, ports := genRule(c)
			np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: from, Ports: ports})
		}
	}
	if n, ok := genListLen(c); ok {
		np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{}
		for range n {
			to, ports := genRule(c)
			np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: to, Ports: ports})
		}
	}
	return np
}

// genListLen decides a list: absent (ok false), empty, or one to three
// items.
func genListLen(c *fuzzChoices) (n int, ok bool) {
	switch c.n(4) {
	case 0:
		return 0, false
	case 1:
		return 0, true
	}
	return 1 + c.n(3), true
}

func genRule(c *fuzzChoices) ([]networkingv1.NetworkPolicyPeer, []networkingv1.NetworkPolicyPort) {
	var peers []networkingv1.NetworkPolicyPeer
	if n, ok := genListLen(c); ok {
		peers = []networkingv1.NetworkPolicyPeer{}
		for range n {
			peers = append(peers, genPeer(c))
		}
	}
	var ports []networkingv1.NetworkPolicyPort
	if n, ok := genListLen(c); ok {
		ports = []networkingv1.NetworkPolicyPort{}
		for range n {
			ports = append(ports, genPort(c))
		}
	}
	return peers, ports
}

var (
	podLabelKeys = []string{"app", "tier", "none"}
	nsLabelKeys  = []string{"team", "env", corev1.LabelMetadataName}
)

func podLabelValues(string) []string { return []string{"a", "b"} }

func nsLabelValues(key string) []string {
	if key == corev1.LabelMetadataName {
		return fuzzNamespaces
	}
	return []string{"a", "b"}
}

func genSelector(c *fuzzChoices, keys []string, values func(string) []string) *metav1.LabelSelector {
	sel := &metav1.LabelSelector{}
	for range c.n(3) {
		k := pick(c, keys...)
		if sel.MatchLabels == nil {
			sel.MatchLabels = map[string]string{}
		}
		sel.MatchLabels[k] = pick(c, values(k)...)
	}
	for range c.n(3) {
		k := pick(c, keys...)
		req := metav1.LabelSelectorRequirement{Key: k, Operator: pick(c,
			metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn, metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist)}
		if req.Operator == metav1.LabelSelectorOpIn || req.Operator == metav1.LabelSelectorOpNotIn {
			for range 1 + c.n(2) {
				req.Values = append(req.Values, pick(c, values(k)...))
			}
		}
		sel.MatchExpressions = append(sel.MatchExpressions, req)
	}
	return sel
}

func genPeer(c *fuzzChoices) networkingv1.NetworkPolicyPeer {
	var peer networkingv1.NetworkPolicyPeer
	switch c.n(4) {
	case 0:
		peer.PodSelector = genSelector(c, podLabelKeys, podLabelValues)
	case 1:
		peer.NamespaceSelector = genSelector(c, nsLabelKeys, nsLabelValues)
	case 2:
		peer.NamespaceSelector = genSelector(c, nsLabelKeys, nsLabelValues)
		peer.PodSelector = genSelector(c, podLabelKeys, podLabelValues)
	default:
		peer.IPBlock = genIPBlock(c, c.n(2) == 0)
	}
	return peer
}

// genIPBlock makes a cidr around an address of the plan, masked or not,
// and up to two excepts strictly inside it around other addresses.
func genIPBlock(c *fuzzChoices, v4 bool) *networkingv1.IPBlock {
	var pool []netip.Addr
	for i := range 6 {
		a4, a6 := fuzzPodAddrs(i)
		pool = append(pool, a4, a6)
	}
	pool = append(pool, fuzzOutside...)
	pool = slices.DeleteFunc(pool, func(a netip.Addr) bool { return a.Is4() != v4 })
	bits := []int{0, 8, 16, 23, 24, 31, 32}
	if !v4 {
		bits = []int{0, 8, 16, 96, 111, 112, 120, 127, 128}
	}
	cidr := netip.PrefixFrom(pick(c, pool...), pick(c, bits...))
	b := &networkingv1.IPBlock{CIDR: cidr.String()}
	if c.n(2) == 0 {
		b.CIDR = cidr.Masked().String()
	}
	full := cidr.Addr().BitLen()
	for range c.n(3) {
		a := pick(c, pool...)
		if !cidr.Contains(a) || cidr.Bits() == full {
			continue
		}
		b.Except = append(b.Except, netip.PrefixFrom(a, cidr.Bits()+1+c.n(full-cidr.Bits())).Masked().String())
	}
	return b
}

func genPort(c *fuzzChoices) networkingv1.NetworkPolicyPort {
	var p networkingv1.NetworkPolicyPort
	if proto := pick(c, append([]corev1.Protocol{""}, fuzzProtocols...)...); proto != "" {
		p.Protocol = &proto
	}
	switch c.n(4) {
	case 0: // protocol only
	case 1:
		port := intstr.FromInt32(pick(c, fuzzPortNums...))
		p.Port = &port
	case 2:
		port := intstr.FromInt32(pick(c, fuzzPortNums...))
		end := port.IntVal + pick(c, int32(0), 1, 100)
		p.Port, p.EndPort = &port, &end
	default:
		port := intstr.FromString(pick(c, append([]string{"absent"}, fuzzPortNames...)...))
		p.Port = &port
	}
	return p
}

// ClusterNetworkPolicies of the generated cluster: up to four, named from
// fuzzCNPNames in a random order (so that name order and generation order
// differ), in both tiers, at priorities that tie on purpose. Nodes get
// labels (role worker or infra, zone a or b) that the nodes peers select.
var (
	fuzzCNPNames      = []string{"alpha", "bravo", "charlie", "delta"}
	fuzzCNPPriorities = []int32{0, 10, 10, 20, 1000}
	nodeLabelKeys     = []string{"role", "zone"}
)

func nodeLabelValues(key string) []string {
	if key == "role" {
		return []string{"worker", "infra"}
	}
	return []string{"a", "b"}
}

// genNodes labels the nodes and gives them status.addresses: each of the
// plan's node IPs (fuzzNodeIPs), or not, as InternalIP or ExternalIP, and
// up to two more: a name (Hostname, InternalDNS), an address of the pod
// network that no pod holds (10.0.0.200, fd00::c8), a pod's address, an
// outside one, or an IP typed as Hostname, which the nodes peer matches
// all the same (it matches every address that parses as an IP).
func genNodes(c *fuzzChoices, nodes []*corev1.Node, pods []*k8s.Pod) {
	for _, n := range nodes {
		for _, key := range nodeLabelKeys {
			if v := pick(c, append([]string{""}, nodeLabelValues(key)...)...); v != "" {
				setLabel(&n.ObjectMeta, key, v)
			}
		}
		add := func(t corev1.NodeAddressType, a string) {
			if !slices.ContainsFunc(n.Status.Addresses, func(o corev1.NodeAddress) bool { return o.Type == t && o.Address == a }) {
				n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: t, Address: a})
			}
		}
		ips := fuzzNodeIPs[n.Name]
		switch c.n(4) {
		case 0: // none
		case 1:
			add(corev1.NodeInternalIP, ips[0])
		case 2:
			v6 := ips[1]
			if c.n(2) == 0 {
				// Written long; k8s.Admit makes it canonical.
				v6 = strings.Replace(v6, "::", ":0:0:0:0:", 1)
			}
			add(corev1.NodeInternalIP, ips[0])
			add(corev1.NodeInternalIP, v6)
		case 3:
			add(pick(c, corev1.NodeInternalIP, corev1.NodeExternalIP), ips[1])
			add(pick(c, corev1.NodeInternalIP, corev1.NodeExternalIP), ips[0])
		}
		for range c.n(3) {
			switch c.n(6) {
			case 0:
				add(corev1.NodeHostName, n.Name)
			case 1:
				add(corev1.NodeInternalDNS, n.Name+".example")
			case 2:
				add(corev1.NodeInternalIP, pick(c, "10.0.0.200", "fd00::c8"))
			case 3:
				if as := reference.PodAddrs(pods[c.n(len(pods))]); len(as) > 0 {
					add(corev1.NodeInternalIP, pick(c, as...).String())
				}
			case 4:
				add(corev1.NodeExternalIP, pick(c, "192.0.2.1", "2001:db8::1"))
			default:
				add(corev1.NodeHostName, pick(c, "10.1.0.1", "fd01::1"))
			}
		}
	}
}

// genClusterPolicy makes one ClusterNetworkPolicy: a subject of either
// kind, zero to three ingress and egress rules, each Accept, Deny or Pass,
// with one to three peers of every kind and protocols (none, or one to
// three entries: a number, a range, a named port). Three in four are what
// the CRD's schema admits; the others (shaky) may have shapes it rejects
// on purpose, which the compiler must still read (failClosed): a peer or
// protocols entry with no field set (a field of a newer CRD), tcp/udp/sctp
// without destinationPort, an empty from/to list, a subject with no field.
func genClusterPolicy(c *fuzzChoices, name string, pods []*k8s.Pod) (cnp *policyv1beta1.ClusterNetworkPolicy, failClosed bool) {
	cnp = &policyv1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	cnp.Spec.Tier = pick(c, policyv1beta1.AdminTier, policyv1beta1.BaselineTier)
	cnp.Spec.Priority = pick(c, fuzzCNPPriorities...)
	// One policy in four may carry the shapes the schema rejects (shaky);
	// the others are what the API server admits.
	shaky := c.n(4) == 0
	switch n := c.n(16); {
	case n == 0 && shaky:
		failClosed = true // no subject at all
	case n < 7:
		cnp.Spec.Subject.Namespaces = genSelector(c, nsLabelKeys, nsLabelValues)
	default:
		cnp.Spec.Subject.Pods = genNamespacedPod(c)
	}
	for i := range c.n(4) {
		action, peers, protocols, fc := genCNPRule(c, false, shaky)
		failClosed = failClosed || fc
		rule := policyv1beta1.ClusterNetworkPolicyIngressRule{Action: action, Protocols: protocols}
		if c.n(2) == 0 {
			rule.Name = fmt.Sprintf("in-%d", i)
		}
		rule.From = []policyv1beta1.ClusterNetworkPolicyIngressPeer{}
		for _, p := range peers {
			rule.From = append(rule.From, policyv1beta1.ClusterNetworkPolicyIngressPeer{Namespaces: p.Namespaces, Pods: p.Pods})
		}
		cnp.Spec.Ingress = append(cnp.Spec.Ingress, rule)
	}
	for i := range c.n(4) {
		action, peers, protocols, fc := genCNPRule(c, true, shaky)
		failClosed = failClosed || fc
		rule := policyv1beta1.ClusterNetworkPolicyEgressRule{Action: action, To: peers, Protocols: protocols}
		if c.n(2) == 0 {
			rule.Name = fmt.Sprintf("out-%d", i)
		}
		cnp.Spec.Egress = append(cnp.Spec.Egress, rule)
	}
	return cnp, failClosed
}

func genNamespacedPod(c *fuzzChoices) *policyv1beta1.NamespacedPod {
	return &policyv1beta1.NamespacedPod{
		NamespaceSelector: *genSelector(c, nsLabelKeys, nsLabelValues),
		PodSelector:       *genSelector(c, podLabelKeys, podLabelValues),
	}
}

// genCNPRule makes a rule's action, peers (an ingress rule's are only
// namespaces and pods) and protocols.
func genCNPRule(c *fuzzChoices, egress, shaky bool) (action policyv1beta1.ClusterNetworkPolicyRuleAction,
	peers []policyv1beta1.ClusterNetworkPolicyEgressPeer, protocols []policyv1beta1.ClusterNetworkPolicyProtocol, failClosed bool) {
	action = pick(c, policyv1beta1.ClusterNetworkPolicyRuleActionAccept, policyv1beta1.ClusterNetworkPolicyRuleActionDeny,
		policyv1beta1.ClusterNetworkPolicyRuleActionPass)
	peers = []policyv1beta1.ClusterNetworkPolicyEgressPeer{}
	n := 1 + c.n(3)
	if c.n(8) == 0 && shaky {
		n, failClosed = 0, true // an empty from/to list
	}
	addressPeers := false // the CRD forbids named ports beside networks, nodes, domainNames
	for range n {
		var p policyv1beta1.ClusterNetworkPolicyEgressPeer
		kind := c.n(32)
		if !egress && kind >= 17 {
			kind -= 16 // namespaces or pods
		}
		if kind < 4 && !shaky {
			kind += 4
		}
		switch {
		case kind < 4:
			failClosed = true // no field set
		case kind < 9:
			p.Namespaces = genSelector(c, nsLabelKeys, nsLabelValues)
		case kind < 17:
			p.Pods = genNamespacedPod(c)
		case kind < 23:
			for range 1 + c.n(2) {
				cidr := policyv1beta1.CIDR(genNetwork(c))
				if !slices.Contains(p.Networks, cidr) {
					p.Networks = append(p.Networks, cidr)
				}
			}
		case kind < 29:
			p.Nodes = genSelector(c, nodeLabelKeys, nodeLabelValues)
		default:
			p.DomainNames = []policyv1beta1.DomainName{pick[policyv1beta1.DomainName](c, "example.com", "*.example.com", "fuzz.test.")}
		}
		addressPeers = addressPeers || p.Networks != nil || p.Nodes != nil || p.DomainNames != nil
		peers = append(peers, p)
	}
	if c.n(3) == 0 {
		return action, peers, nil, failClosed
	}
	for range 1 + c.n(3) {
		p, fc := genCNPProtocol(c, !addressPeers, shaky)
		failClosed = failClosed || fc
		protocols = append(protocols, p)
	}
	return action, peers, protocols, failClosed
}

// genNetwork is a masked CIDR around an address of the plan (a pod's, an
// outside one, a node's): host routes, the pod subnets, whole families.
func genNetwork(c *fuzzChoices) string {
	var pool []netip.Addr
	for i := range 6 {
		a4, a6 := fuzzPodAddrs(i)
		pool = append(pool, a4, a6)
	}
	pool = append(pool, fuzzOutside...)
	pool = append(pool, netip.MustParseAddr(fuzzNodeIPs[testNode][0]), netip.MustParseAddr(fuzzNodeIPs["node-2"][1]))
	a := pick(c, pool...)
	bits := pick(c, 0, 8, 16, 24, 31, 32)
	if a.Is6() {
		bits = pick(c, 0, 8, 16, 112, 120, 127, 128)
	}
	return netip.PrefixFrom(a, bits).Masked().String()
}

// genCNPProtocol makes one protocols entry. A named port only where the
// rule's peers allow one (namedOK), else it is a port number.
func genCNPProtocol(c *fuzzChoices, namedOK, shaky bool) (p policyv1beta1.ClusterNetworkPolicyProtocol, failClosed bool) {
	var port *policyv1beta1.Port
	kind := c.n(24)
	if (kind < 3 || kind == 15) && !shaky {
		kind = 3 + kind%6
	}
	switch {
	case kind < 3:
		return p, true // no field set
	case kind < 9:
		port = &policyv1beta1.Port{Number: pick(c, append(slices.Clone(fuzzPortNums), 180)...)}
	case kind < 15:
		start := pick(c, int32(53), 80, 81)
		port = &policyv1beta1.Port{Range: &policyv1beta1.PortRange{Start: start, End: start + pick(c, int32(1), 100)}}
	case kind == 15:
		failClosed = true // the protocol alone: its schema wants a destinationPort
	default:
		name := pick(c, append([]string{"absent"}, fuzzPortNames...)...)
		if namedOK {
			p.DestinationNamedPort = name
			return p, false
		}
		port = &policyv1beta1.Port{Number: 80}
	}
	switch pick(c, corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP) {
	case corev1.ProtocolTCP:
		p.TCP = &policyv1beta1.ClusterNetworkPolicyProtocolTCP{DestinationPort: port}
	case corev1.ProtocolUDP:
		p.UDP = &policyv1beta1.ClusterNetworkPolicyProtocolUDP{DestinationPort: port}
	default:
		p.SCTP = &policyv1beta1.ClusterNetworkPolicyProtocolSCTP{DestinationPort: port}
	}
	return p, failClosed
}

// genQuarantine now and then quarantines a pod that takes part, as the
// manifests source hands one out (its container ports gone: a named port
// matches nothing on it), and a namespace (k8s.Snapshot.Quarantined,
// QuarantinedNamespaces).
func genQuarantine(c *fuzzChoices, snap *k8s.Snapshot) {
	if c.n(8) == 1 {
		if p := snap.Pods[c.n(len(snap.Pods))]; reference.TakesPart(p) {
			p.Spec.Ports = nil
			snap.Quarantined = append(snap.Quarantined, ktypes.NamespacedName{Namespace: p.Namespace, Name: p.Name})
		}
	}
	if c.n(8) == 1 {
		snap.QuarantinedNamespaces = append(snap.QuarantinedNamespaces, pick(c, fuzzNamespaces...))
	}
}
