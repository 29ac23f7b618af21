package enforcer

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nftpolicy/nftpolicy/internal/reference"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// Hostile review, round 13: peer address sets. A random world of pods
// that share addresses (from a pool of a few), dual-stack, peers of every
// kind with ipBlocks whose excepts hold or border pod addresses and
// blocks at the ends of the address space; after every event the
// incremental table must equal a fresh compile (checkIncremental) and
// decide, packet by packet, as the reference does for every pod address,
// every ipBlock bound and its neighbours, and the ends of the space.

var r13Pool4 = []string{"10.0.0.0", "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.7", "10.0.0.8", "10.0.0.15", "10.0.0.16", "10.0.1.0", "10.255.255.255"}
var r13Pool6 = []string{"fd00::", "fd00::1", "fd00::7", "fd00::8", "fd00::f", "fd00::10", "fd00:0:0:1::", "fd00::ffff:ffff:ffff:ffff"}

var r13Blocks = []networkingv1.IPBlock{
	{CIDR: "10.0.0.0/28", Except: []string{"10.0.0.4/30"}},
	{CIDR: "10.0.0.8/29"},
	{CIDR: "10.0.0.0/31", Except: []string{"10.0.0.1/32"}},
	{CIDR: "0.0.0.0/0", Except: []string{"10.0.0.0/8"}},
	{CIDR: "0.0.0.0/0", Except: []string{"10.0.0.0/29", "10.0.0.16/32"}},
	{CIDR: "255.255.255.255/32"},
	{CIDR: "0.0.0.0/32"},
	{CIDR: "10.0.0.16/28", Except: []string{"10.0.0.16/32"}},
	{CIDR: "10.0.0.0/8", Except: []string{"10.0.0.0/24", "10.255.255.255/32"}},
	{CIDR: "fd00::/124", Except: []string{"fd00::8/125"}},
	{CIDR: "::/0", Except: []string{"fd00::/64"}},
	{CIDR: "fd00::/64", Except: []string{"fd00::/128", "fd00::ffff:ffff:ffff:ffff/128"}},
	{CIDR: "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128"},
	{CIDR: "::/128"},
}

type r13World struct {
	r        *rand.Rand
	nsLabels map[string]map[string]string
	pods     map[string]*k8s.Pod
	pols     map[string]*networkingv1.NetworkPolicy
	// pool4, pool6: the addresses pods take (nil: r13Pool4, r13Pool6);
	// names: how many pod names per namespace (0: 8).
	pool4, pool6 []string
	names        int
}

func (w *r13World) pod(ns, name string) {
	p4, p6 := r13Pool4, r13Pool6
	if w.pool4 != nil {
		p4, p6 = w.pool4, w.pool6
	}
	v4 := p4[w.r.IntN(len(p4))]
	v6 := p6[w.r.IntN(len(p6))]
	p := testPod("x", "a")
	p.Namespace, p.Name = ns, name
	p.Labels = map[string]string{"pod": []string{"a", "b", "c"}[w.r.IntN(3)]}
	switch w.r.IntN(4) {
	case 0:
		p.Status.PodIPs = []corev1.PodIP{{IP: v4}}
	case 1:
		p.Status.PodIPs = []corev1.PodIP{{IP: v6}}
	default:
		p.Status.PodIPs = []corev1.PodIP{{IP: v4}, {IP: v6}}
	}
	p.Spec.NodeName = testNode
	if w.r.IntN(4) == 0 {
		p.Spec.NodeName = "node-2"
	}
	switch w.r.IntN(8) {
	case 0:
		p.Status.Phase = corev1.PodFailed // a terminated pod that kept its address
	case 1:
		now := metav1.Now() // terminating, still running
		p.DeletionTimestamp = &now
	case 2:
		p.Status.Phase = corev1.PodSucceeded
	case 3:
		p.Status.Phase = corev1.PodPending
	}
	w.pods[ns+"/"+name] = p
}

func (w *r13World) peer() networkingv1.NetworkPolicyPeer {
	switch w.r.IntN(5) {
	case 0:
		return podPeer([]string{"a", "b", "c"}[w.r.IntN(3)])
	case 1:
		return nsPeer([]string{"x", "y", "z"}[w.r.IntN(3)])
	case 2:
		return nsPodPeer([]string{"x", "y", "z"}[w.r.IntN(3)], []string{"a", "b", "c"}[w.r.IntN(3)])
	default:
		b := r13Blocks[w.r.IntN(len(r13Blocks))]
		b.Except = slices.Clone(b.Except)
		return networkingv1.NetworkPolicyPeer{IPBlock: &b}
	}
}

func (w *r13World) policy(name string) {
	np := policy([]string{"x", "y"}[w.r.IntN(2)], name, selecting([]string{"a", "b", "c"}[w.r.IntN(3)]),
		types(networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress))
	for range 1 + w.r.IntN(2) {
		var ps []networkingv1.NetworkPolicyPeer
		for range 1 + w.r.IntN(3) {
			ps = append(ps, w.peer())
		}
		np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: ps, Ports: w.ports()})
	}
	for range 1 + w.r.IntN(2) {
		var ps []networkingv1.NetworkPolicyPeer
		for range 1 + w.r.IntN(3) {
			ps = append(ps, w.peer())
		}
		np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: ps, Ports: w.ports()})
	}
	w.pols[name] = np
}

func (w *r13World) event() string {
	switch w.r.IntN(6) {
	case 0, 1:
		name := fmt.Sprintf("p%d", w.r.IntN(max(w.names, 8)))
		ns := []string{"x", "y", "z"}[w.r.IntN(3)]
		w.pod(ns, name)
		return "pod " + ns + "/" + name
	case 2:
		for _, k := range slices.Sorted(maps.Keys(w.pods)) {
			if w.r.IntN(3) == 0 {
				delete(w.pods, k)
				return "delete " + k
			}
		}
	case 3:
		ns := []string{"x", "y", "z"}[w.r.IntN(3)]
		w.nsLabels[ns] = map[string]string{"ns": []string{"x", "y", "z"}[w.r.IntN(3)]}
		return "relabel namespace " + ns
	default:
		name := fmt.Sprintf("np%d", w.r.IntN(3))
		w.policy(name)
		return "policy " + name
	}
	return "nothing"
}

func (w *r13World) snapshot() *k8s.Snapshot {
	s := &k8s.Snapshot{}
	for _, ns := range slices.Sorted(maps.Keys(w.nsLabels)) {
		s.Namespaces = append(s.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: maps.Clone(w.nsLabels[ns])}})
	}
	for _, k := range slices.Sorted(maps.Keys(w.pods)) {
		s.Pods = append(s.Pods, w.pods[k])
	}
	for _, k := range slices.Sorted(maps.Keys(w.pols)) {
		s.Policies = append(s.Policies, w.pols[k])
	}
	s.Nodes = []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: testNode}}, {ObjectMeta: metav1.ObjectMeta{Name: "node-2"}}}
	s.Sort()
	return s
}

// r13Probes: every pod address, every ipBlock bound and its
// neighbours, the ends of the spaces.
func r13Probes(s *k8s.Snapshot) []netip.Addr {
	set := map[netip.Addr]bool{}
	add := func(a netip.Addr) {
		if a.IsValid() {
			set[a] = true
		}
	}
	for _, a := range append(slices.Clone(r13Pool4), r13Pool6...) {
		add(netip.MustParseAddr(a))
	}
	for _, a := range []string{"0.0.0.0", "0.0.0.1", "255.255.255.255", "255.255.255.254", "9.255.255.255", "11.0.0.0", "::", "::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fcff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fd00:0:0:1::1"} {
		add(netip.MustParseAddr(a))
	}
	for _, b := range r13Blocks {
		for _, c := range append([]string{b.CIDR}, b.Except...) {
			p := netip.MustParsePrefix(c)
			first := p.Masked().Addr()
			bs := first.AsSlice()
			for i := p.Bits(); i < len(bs)*8; i++ {
				bs[i/8] |= 1 << (7 - i%8)
			}
			last, _ := netip.AddrFromSlice(bs)
			add(first)
			add(first.Prev())
			add(first.Next())
			add(last)
			add(last.Prev())
			add(last.Next())
		}
	}
	return slices.SortedFunc(maps.Keys(set), netip.Addr.Compare)
}

func r13Check(t *testing.T, table *nft.Table, s *k8s.Snapshot, where string) {
	t.Helper()
	ref := reference.New(s, testNode)
	tr := nft.NewTracer(table)
	probes := r13Probes(s)
	var local []netip.Addr
	for _, p := range s.Pods {
		if p.Spec.NodeName == testNode && reference.TakesPart(p) {
			local = append(local, reference.PodAddrs(p)...)
		}
	}
	// An address two pods that take part share names no one pod: the
	// reference picks one of them, so such pairs are not judged.
	owners := map[netip.Addr]int{}
	for _, p := range s.Pods {
		if reference.TakesPart(p) {
			for _, a := range reference.PodAddrs(p) {
				owners[a]++
			}
		}
	}
	var diffs []string
	for _, l := range local {
		for _, o := range probes {
			if l.Is4() != o.Is4() || l == o || owners[l] > 1 {
				continue
			}
			if owners[o] > 1 {
				diffs = append(diffs, r13Contested(tr, s, l, o)...)
				continue
			}
			for _, pp := range r13PairsPorts(o, l) {
				c := pp
				res, err := tr.Trace("filter-forward", nft.Packet{Src: c.Src, Dst: c.Dst, Proto: c.Proto, Dport: c.Port})
				if err != nil {
					diffs = append(diffs, fmt.Sprintf("trace %v: %v", c, err))
					continue
				}
				if got, want := res.Verdict == nft.Accept, ref.Allowed(c); got != want {
					eg, in := ref.Decide(c)
					diffs = append(diffs, fmt.Sprintf("table %v, reference %v: %s -> %s (egress %s; ingress %s)\n      path: %s", got, want, c.Src, c.Dst, eg, in, strings.Join(res.Path, " | ")))
				}
			}
		}
	}
	if len(diffs) > 0 {
		if len(diffs) > 6 {
			diffs = append(diffs[:6], fmt.Sprintf("... %d more", len(diffs)-6))
		}
		t.Fatalf("%s: the table disagrees with the reference:\n%s\n%s", where, strings.Join(diffs, "\n"), r6Yaml(s))
	}
}

func TestHostileRound13PeersWorld(t *testing.T) {
	n := uint64(30)
	if v, err := strconv.Atoi(os.Getenv("R13_SEEDS")); err == nil {
		n = uint64(v)
	}
	for seed := uint64(1); seed <= n; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			w := &r13World{r: rand.New(rand.NewPCG(seed, 13)), nsLabels: map[string]map[string]string{"x": {"ns": "x"}, "y": {"ns": "y"}, "z": {"ns": "z"}},
				pods: map[string]*k8s.Pod{}, pols: map[string]*networkingv1.NetworkPolicy{}}
			for i := range 8 {
				w.pod([]string{"x", "y", "z"}[i%3], fmt.Sprintf("p%d", i))
			}
			w.policy("np0")
			w.policy("np1")
			opts := Options{Node: testNode}
			inc := NewCompiler(opts)
			var prev *nft.Table
			var hist []string
			for i := range 40 {
				var evs []string
				for range 1 + w.r.IntN(3) {
					evs = append(evs, w.event())
				}
				hist = append(hist, fmt.Sprintf("%d: %q", i, evs))
				if len(hist) > 4 {
					hist = hist[1:]
				}
				where := fmt.Sprintf("seed %d, last:\n\t%s", seed, strings.Join(hist, "\n\t"))
				snap := w.snapshot()
				prev = checkIncremental(t, inc, opts, prev, snap, DefaultPriority, where)
				r13Check(t, prev, snap, where)
			}
		})
	}
}

// r13Contested judges connections between l (one pod's) and o, an
// address several pods that take part hold. The table cannot tell them
// apart: it must allow what the reference allows whichever holder o is,
// and deny what it denies whichever holder o is. Each holder is asked of
// the reference in a snapshot without the other holders.
func r13Contested(tr *nft.Tracer, s *k8s.Snapshot, l, o netip.Addr) []string {
	var holders []*k8s.Pod
	for _, p := range s.Pods {
		if reference.TakesPart(p) && slices.Contains(reference.PodAddrs(p), o) {
			holders = append(holders, p)
		}
	}
	var diffs []string
	for _, c := range r13PairsPorts(o, l) {
		all, anyOf := true, false
		var who []string
		for _, h := range holders {
			v := *s
			v.Pods = slices.DeleteFunc(slices.Clone(s.Pods), func(p *k8s.Pod) bool { return p != h && slices.Contains(holders, p) })
			ok := reference.New(&v, testNode).Allowed(c)
			all = all && ok
			anyOf = anyOf || ok
			who = append(who, fmt.Sprintf("%s/%s:%v", h.Namespace, h.Name, ok))
		}
		res, err := tr.Trace("filter-forward", nft.Packet{Src: c.Src, Dst: c.Dst, Proto: c.Proto, Dport: c.Port})
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("trace %v: %v", c, err))
			continue
		}
		got := res.Verdict == nft.Accept
		if (all && !got) || (!anyOf && got) {
			diffs = append(diffs, fmt.Sprintf("shared address: table %v, reference per holder %v: %s -> %s\n      path: %s", got, who, c.Src, c.Dst, strings.Join(res.Path, " | ")))
		}
	}
	return diffs
}

func newR13Rand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 13)) }

// The world with many pods over a pool of consecutive addresses, so that
// peer sets hold long runs (the interval kind) or scattered addresses
// (per address), and cross between the two as pods come and go.
func TestHostileRound13PeersWorldCrowded(t *testing.T) {
	var p4, p6 []string
	for i := range 96 {
		p4 = append(p4, fmt.Sprintf("10.0.0.%d", i))
		p6 = append(p6, fmt.Sprintf("fd00::%x", i))
	}
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			w := &r13World{r: rand.New(rand.NewPCG(seed, 31)), nsLabels: map[string]map[string]string{"x": {"ns": "x"}, "y": {"ns": "y"}, "z": {"ns": "z"}},
				pods: map[string]*k8s.Pod{}, pols: map[string]*networkingv1.NetworkPolicy{}, pool4: p4, pool6: p6, names: 40}
			for i := range 100 {
				w.pod([]string{"x", "y", "z"}[i%3], fmt.Sprintf("p%d", i%40))
			}
			w.policy("np0")
			w.policy("np1")
			opts := Options{Node: testNode}
			inc := NewCompiler(opts)
			var prev *nft.Table
			for i := range 40 {
				var evs []string
				for range 1 + w.r.IntN(6) {
					evs = append(evs, w.event())
				}
				where := fmt.Sprintf("seed %d step %d: %q", seed, i, evs)
				snap := w.snapshot()
				prev = checkIncremental(t, inc, opts, prev, snap, DefaultPriority, where)
				if i%5 == 4 {
					r13Check(t, prev, snap, where)
				}
			}
		})
	}
}

// ports: none (every port) half of the time, else one or two of TCP 80,
// TCP 81, UDP 80, TCP 80-81, TCP without a port.
func (w *r13World) ports() []networkingv1.NetworkPolicyPort {
	if w.r.IntN(2) == 0 {
		return nil
	}
	mk := func(proto corev1.Protocol, port int, end int32) networkingv1.NetworkPolicyPort {
		p := networkingv1.NetworkPolicyPort{Protocol: &proto}
		if port > 0 {
			v := intstr.FromInt32(int32(port))
			p.Port = &v
		}
		if end > 0 {
			p.EndPort = &end
		}
		return p
	}
	all := []networkingv1.NetworkPolicyPort{mk(corev1.ProtocolTCP, 80, 0), mk(corev1.ProtocolTCP, 81, 0), mk(corev1.ProtocolUDP, 80, 0), mk(corev1.ProtocolTCP, 80, 81), mk(corev1.ProtocolTCP, 0, 0)}
	var out []networkingv1.NetworkPolicyPort
	for range 1 + w.r.IntN(2) {
		out = append(out, all[w.r.IntN(len(all))])
	}
	return out
}

// r13PairsPorts: both directions between o and l, on TCP 80 and 81 and
// UDP 80.
func r13PairsPorts(o, l netip.Addr) []reference.Conn {
	var out []reference.Conn
	for _, pair := range [][2]netip.Addr{{o, l}, {l, o}} {
		for _, pp := range []struct {
			proto nft.Proto
			port  uint16
		}{{nft.ProtoTCP, 80}, {nft.ProtoTCP, 81}, {nft.ProtoUDP, 80}} {
			out = append(out, reference.Conn{Src: pair[0], Dst: pair[1], Proto: pp.proto, Port: pp.port})
		}
	}
	return out
}
