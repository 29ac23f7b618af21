package enforcer

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// hostileSeq drives one Compiler (and one with counters, and one whose
// names all collide) through snaps and checks after each: incremental
// equals fresh, the table validates, every probe agrees with the
// reference, Explain agrees, counters count the deciding rules.
func hostileSeq(t *testing.T, snaps ...*k8s.Snapshot) {
	t.Helper()
	opts := Options{Node: testNode}
	inc := NewCompiler(opts)
	cinc := NewCompiler(Options{Node: testNode, Counters: true})
	coll := collidingCompiler(func(string) [sha256.Size]byte { return [sha256.Size]byte{0xde, 0xad, 0xbe, 0xef} })
	var prev, prevColl *nft.Table
	for i, snap := range snaps {
		where := fmt.Sprintf("snapshot %d", i)
		got := checkIncremental(t, inc, opts, prev, snap, DefaultPriority, where)
		prev = got
		if err := got.Validate(); err != nil {
			t.Fatalf("%s: invalid table: %v", where, err)
		}
		hwReport(t, where+": table vs reference", hwCheckReference(t, got, snap), snap, got)
		hwReport(t, where+": explain", hwCheckExplain(t, inc, got, snap), snap, got)
		ct, _ := cinc.Compile(snap, DefaultPriority)
		hwReport(t, where+": counters", hwCheckCounters(t, cinc, ct, snap), snap, ct)
		cl, _ := coll.Compile(snap, DefaultPriority)
		hwCheckTable(t, where+": colliding names", coll, prevColl, cl)
		prevColl = cl
		hwReport(t, where+": colliding names vs reference", hwCheckReference(t, cl, snap), snap, cl)
	}
}

func nets(cidrs ...string) cnpv1.ClusterNetworkPolicyEgressPeer {
	var out []cnpv1.CIDR
	for _, c := range cidrs {
		out = append(out, cnpv1.CIDR(c))
	}
	return cnpv1.ClusterNetworkPolicyEgressPeer{Networks: out}
}

func withQuarantinedNS(s *k8s.Snapshot, ns ...string) *k8s.Snapshot {
	s.QuarantinedNamespaces = ns
	return s
}

// setPodIPs gives pod ns/name these addresses ("" leaves it without).
func setPodIPs(s *k8s.Snapshot, ns, name string, ips ...string) *k8s.Snapshot {
	for i, p := range s.Pods {
		if p.Namespace == ns && p.Name == name {
			q := *p
			q.Status.PodIPs = nil
			for _, ip := range ips {
				q.Status.PodIPs = append(q.Status.PodIPs, corev1.PodIP{IP: ip})
			}
			s.Pods[i] = &q
		}
	}
	return s
}

// movePod deletes ns/name and creates it in ns2 with the same addresses.
func movePod(s *k8s.Snapshot, ns, name, ns2 string) *k8s.Snapshot {
	for i, p := range s.Pods {
		if p.Namespace == ns && p.Name == name {
			q := *p
			q.Namespace = ns2
			q.Name = name + "-moved"
			s.Pods[i] = &q
		}
	}
	s.Sort()
	return s
}

func TestHostileCNPSeqTierOnlyToIsolatedAndBack(t *testing.T) {
	cnps := func() []*cnpv1.ClusterNetworkPolicy {
		return []*cnpv1.ClusterNetworkPolicy{
			admin("pass-y", 1, subjectNS("x"), cnpIn(cnpPass, from(fromNS("y"))), cnpOut(cnpPass, to(toNS("y")))),
			admin("deny-z", 2, subjectNS("x"), cnpIn(cnpDeny, from(fromNS("y", "z"))), cnpOut(cnpAccept, to(toNS("z")))),
			baseline("base-deny-y", 1, subjectNS(), cnpIn(cnpDeny, from(fromNS("y"))), cnpOut(cnpDeny, to(toNS("y")))),
		}
	}
	hostileSeq(t,
		withCluster(cluster(), cnps()...),
		withCluster(cluster(allowAllIngress("x")), cnps()...),
		withCluster(cluster(policy("x", "deny-eg", denyEgress)), cnps()...),
		withCluster(cluster(policy("x", "deny-eg", selecting("a"), denyEgress)), cnps()...),
		withCluster(cluster(), cnps()...),
		withCluster(cluster(), cnps()[2:]...),
		withCluster(cluster(allowAllIngress("x")), cnps()[:1]...),
		withCluster(cluster(), cnps()...),
	)
}

func TestHostileCNPSeqInPlaceEdits(t *testing.T) {
	a := func(p int32, tier cnpv1.Tier) *cnpv1.ClusterNetworkPolicy {
		return cnp("a", tier, p, subjectNS("x"), cnpIn(cnpDeny, from(fromNS("y")), tcpPort(80)), cnpOut(cnpPass, to(nets("10.0.0.0/8"))))
	}
	b := func(p int32) *cnpv1.ClusterNetworkPolicy {
		return admin("b", p, subjectNS("x", "y"), cnpIn(cnpAccept, from(fromNS("y"))), cnpOut(cnpDeny, to(nets("10.0.2.0/24", "fd00::2:0/112"))))
	}
	base := baseline("base", 5, subjectNS(), cnpOut(cnpDeny, to(nets("0.0.0.0/0"))), cnpIn(cnpDeny, from(fromNS("z"))))
	hostileSeq(t,
		withCluster(cluster(), a(1, cnpv1.AdminTier), b(2), base),
		withCluster(cluster(), a(2, cnpv1.AdminTier), b(1), base),
		withCluster(cluster(), a(2, cnpv1.BaselineTier), b(1), base),
		withCluster(cluster(), a(5, cnpv1.BaselineTier), b(1), base),
		withCluster(cluster(), a(5, cnpv1.AdminTier), b(5), base),
		withCluster(cluster(allowAllIngress("y")), a(0, cnpv1.AdminTier), b(5), base),
	)
}

func TestHostileCNPSeqAdjacentCIDRs(t *testing.T) {
	p := func() []*cnpv1.ClusterNetworkPolicy {
		return []*cnpv1.ClusterNetworkPolicy{
			admin("cut", 1, subjectNS("x", "y"),
				cnpOut(cnpAccept, to(nets("10.0.1.0/31"))),
				cnpOut(cnpDeny, to(nets("10.0.1.2/31", "fd00::1:2/127"))),
				cnpOut(cnpPass, to(nets("10.0.1.0/24", "10.0.2.0/24"))),
				cnpOut(cnpDeny, to(nets("10.0.0.0/22")), tcpPort(80)),
				cnpOut(cnpAccept, to(nets("::/0", "0.0.0.0/0")), udpRange(81, 81)),
				cnpOut(cnpDeny, to(toNS("z")))),
			baseline("b", 1, subjectNS(),
				cnpOut(cnpDeny, to(nets("10.0.1.1/32", "10.0.2.0/25"))),
				cnpOut(cnpAccept, to(nets("10.0.2.0/23"))),
				cnpOut(cnpDeny, to(nets("0.0.0.0/1", "::/1")), tcpPort(81))),
		}
	}
	hostileSeq(t,
		withCluster(cluster(), p()...),
		withCluster(setPodIPs(cluster(), "z", "a", "10.0.1.200"), p()...),
		withCluster(setPodIPs(cluster(), "x", "a", "fd00::1:1"), p()...),
		withCluster(setPodIPs(setPodIPs(cluster(), "x", "a", "10.0.1.1"), "y", "b", "fd00::2:2"), p()...),
		withCluster(cluster(policy("y", "d", denyEgress)), p()...),
		withCluster(cluster(), p()...),
	)
}

func TestHostileCNPSeqPodsMove(t *testing.T) {
	p := func() []*cnpv1.ClusterNetworkPolicy {
		return []*cnpv1.ClusterNetworkPolicy{
			admin("pass-z", 0, subjectNS(), cnpIn(cnpPass, from(fromNS("z"))), cnpOut(cnpPass, to(toNS("z")))),
			admin("deny-y", 1, subjectNS("x"), cnpIn(cnpDeny, from(fromNS("y"))), cnpOut(cnpDeny, to(toNS("y")))),
			baseline("deny-z", 1, subjectNS("x", "y"), cnpIn(cnpDeny, from(fromNS("z"))), cnpOut(cnpDeny, to(toNS("z")))),
		}
	}
	relabel := func(s *k8s.Snapshot, ns string, labels map[string]string) *k8s.Snapshot {
		for i, n := range s.Namespaces {
			if n.Name == ns {
				c := n.DeepCopy()
				c.Labels = labels
				s.Namespaces[i] = c
			}
		}
		return s
	}
	hostileSeq(t,
		withCluster(cluster(), p()...),
		withCluster(movePod(cluster(), "y", "a", "z"), p()...),
		withCluster(movePod(cluster(), "y", "a", "x"), p()...),
		withCluster(relabel(cluster(), "z", map[string]string{"ns": "y"}), p()...),
		withCluster(relabel(cluster(), "x", map[string]string{"ns": "z"}), p()...),
		withCluster(withQuarantinedNS(cluster(), "y"), p()...),
		withCluster(withQuarantinedNS(cluster(), "x", "z"), p()...),
		withCluster(cluster(), p()...),
	)
}

func TestHostileCNPSeqFamilies(t *testing.T) {
	p := func() []*cnpv1.ClusterNetworkPolicy {
		return []*cnpv1.ClusterNetworkPolicy{
			admin("v4-deny", 1, subjectNS("x"), cnpOut(cnpDeny, to(nets("0.0.0.0/0")), tcpPort(80)), cnpIn(cnpDeny, from(fromNS("y")), tcpPort(80))),
			admin("v6-accept", 2, subjectNS("x"), cnpOut(cnpAccept, to(nets("::/0"))), cnpIn(cnpAccept, from(fromNS("y")))),
			baseline("named", 1, subjectNS(), cnpIn(cnpDeny, from(fromNS()), cnpv1.ClusterNetworkPolicyProtocol{DestinationNamedPort: "serve-81-udp"}),
				cnpOut(cnpDeny, to(toNS("x")), cnpv1.ClusterNetworkPolicyProtocol{DestinationNamedPort: "serve-80-sctp"})),
		}
	}
	hostileSeq(t,
		withCluster(cluster(), p()...),
		withCluster(setPodIPs(cluster(), "x", "a", "10.0.1.1"), p()...),
		withCluster(setPodIPs(cluster(), "x", "a", "fd00::1:1"), p()...),
		withCluster(setPodIPs(setPodIPs(cluster(), "x", "a", "fd00::1:1"), "y", "a", "10.0.2.1"), p()...),
		withCluster(setPodIPs(cluster(), "y", "a"), p()...),
		withCluster(cluster(allowAllIngress("x")), p()...),
		withCluster(cluster(), p()...),
	)
}

// A quarantined pod and namespace with Denies, Passes and Accepts naming
// them, and nodes.
func TestHostileCNPSeqQuarantine(t *testing.T) {
	node := func(s *k8s.Snapshot, role, addr string) *k8s.Snapshot {
		s.Nodes[0] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, Labels: map[string]string{"role": role}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: addr}}}}
		return s
	}
	nodes := cnpv1.ClusterNetworkPolicyEgressPeer{Nodes: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "db"}}}
	p := func() []*cnpv1.ClusterNetworkPolicy {
		return []*cnpv1.ClusterNetworkPolicy{
			admin("a", 1, subjectNS("x", "y"), cnpOut(cnpPass, to(nodes)), cnpOut(cnpDeny, to(nets("192.0.2.0/24")))),
			baseline("b", 1, subjectNS("x"), cnpOut(cnpDeny, to(nodes)), cnpIn(cnpDeny, from(fromNS("y")))),
		}
	}
	q := func(s *k8s.Snapshot, pods ...string) *k8s.Snapshot {
		for _, k := range pods {
			ns, name, _ := cutKey(k)
			s.Quarantined = append(s.Quarantined, ktypes.NamespacedName{Namespace: ns, Name: name})
		}
		return s
	}
	hostileSeq(t,
		withCluster(node(cluster(), "db", "192.0.2.50"), p()...),
		withCluster(q(node(cluster(), "db", "192.0.2.50"), "x/a"), p()...),
		withCluster(withQuarantinedNS(node(cluster(), "db", "192.0.2.50"), "y"), p()...),
		withCluster(withQuarantinedNS(node(cluster(policy("x", "d", denyEgress)), "db", "198.51.100.1"), "x"), p()...),
		withCluster(node(cluster(policy("x", "d", denyEgress)), "web", "192.0.2.50"), p()...),
		withCluster(node(cluster(), "db", "192.0.2.50"), p()...),
	)
}

func cutKey(k string) (string, string, bool) {
	i := slices.Index([]byte(k), '/')
	if i < 0 {
		return k, "", false
	}
	return k[:i], k[i+1:], true
}
