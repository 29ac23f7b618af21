package enforcer

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"go4.org/netipx"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// manyPolicies is the test cluster with k policies of namespace x
// selecting pod x/a for ingress, as a multi-tenant namespace with a
// policy per client team has them: policy i allows one pod of the
// cluster on TCP port 1000+i, every seventh also TCP 80 from a namespace,
// every eleventh UDP 5000-5100 from another pod, and every thirteenth
// every port from z/c (so the first policy has a rule of every kind).
func manyPolicies(k int) *k8s.Snapshot {
	var nps []*networkingv1.NetworkPolicy
	for i := range k {
		peer := nsPodPeer(testNamespaces[i%3], testPods[(i/3)%3])
		rules := []func(*networkingv1.NetworkPolicy){selecting("a"), ingressRule(peers(peer), port(tcp, int32(1000+i)))}
		if i%7 == 0 {
			rules = append(rules, ingressRule(peers(nsPeer(testNamespaces[(i/7)%3])), port(tcp, 80)))
		}
		if i%11 == 0 {
			rules = append(rules, ingressRule(peers(nsPodPeer(testNamespaces[(i+1)%3], "b")), portRange(udp, 5000, 5100)))
		}
		if i%13 == 0 {
			rules = append(rules, ingressRule(peers(nsPodPeer("z", "c"))))
		}
		nps = append(nps, policy("x", fmt.Sprintf("team-%03d", i), rules...))
	}
	return cluster(nps...)
}

// The flat stage asks a bounded number of questions whatever the number
// of policies selecting the pod: x/a's ingress chain and the fragment
// chains it reaches have as many rules with 100 policies as with 1, and
// the chain jumps to no policy's chain.
func TestFlatStageIsBoundedInPolicies(t *testing.T) {
	type shape struct{ podRules, portsRules, allowRules int }
	shapes := map[int]shape{}
	for _, k := range []int{1, 10, 100} {
		table, problems := Compile(manyPolicies(k), Options{Node: testNode})
		if len(problems) > 0 {
			t.Fatal(problems)
		}
		chains := map[string]*nft.Chain{}
		for _, ch := range table.Chains {
			chains[ch.Name] = ch
		}
		var pod *nft.Chain
		for _, ch := range table.Chains {
			if strings.HasPrefix(ch.Name, "ingress-pod-") && strings.HasSuffix(ch.Name, "-x/a") {
				pod = ch
			}
		}
		if pod == nil {
			t.Fatalf("k=%d: no ingress chain for x/a", k)
		}
		var s shape
		s.podRules = len(pod.Rules)
		for _, r := range pod.Rules {
			if v, ok := jumpTarget(r); ok && !strings.Contains(v, "-allow-") && v != portsChainName(ingress) {
				t.Errorf("k=%d: x/a's chain jumps to %s, neither a fragment chain nor the ports chain", k, v)
			}
		}
		s.portsRules = len(chains[portsChainName(ingress)].Rules)
		for _, ch := range table.Chains {
			if strings.Contains(ch.Name, "-allow-") {
				s.allowRules = max(s.allowRules, len(ch.Rules))
			}
		}
		shapes[k] = s
	}
	if shapes[1] != shapes[100] || shapes[10] != shapes[100] {
		t.Errorf("rules per packet path by number of policies: %+v; want the same for every number", shapes)
	}
}

// Each ports map is looked up by one rule in the whole table, whatever
// the number of flat pod chains: the kernel walks every element of a
// verdict map once per rule that looks it up, at nearly every commit (see
// portsChains), so a lookup per pod chain made every event's commit pay
// pods × elements.
func TestPortsMapsAreLookedUpOnce(t *testing.T) {
	snap := cluster(
		policy("x", "allow-a", selecting("a"), ingressRule(peers(nsPeer("y")), port(tcp, 80)), egressRule(peers(nsPeer("y")), port(udp, 53))),
		policy("y", "allow-all", ingressRule(peers(nsPeer("x")), port(tcp, 8080)), egressRule(peers(nsPeer("z")), port(tcp, 443))),
	)
	table, problems := Compile(snap, Options{Node: testNode})
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	lookups := map[string]int{}
	jumps := 0
	for _, ch := range table.Chains {
		for _, r := range ch.Rules {
			for _, e := range r.Exprs {
				if m, ok := e.(nft.AddrProtoPortVmap); ok {
					lookups[m.Map]++
				}
			}
			if v, ok := jumpTarget(r); ok && (v == portsChainName(ingress) || v == portsChainName(egress)) {
				jumps++
			}
		}
	}
	if jumps < 4 {
		t.Fatalf("%d pod chains jump to a ports chain; the cluster has at least 4 flat pod chains with ports", jumps)
	}
	for _, d := range []direction{ingress, egress} {
		for _, f := range families {
			if n := lookups[portsMapName(d, f)]; n != 1 {
				t.Errorf("%s is looked up by %d rules, want 1", portsMapName(d, f), n)
			}
		}
	}
}

// The flat stage decides every connection as walking each selecting
// policy's chain does (Options.WalkPolicies), which the conformance
// suites hold to the API: from every pod to x/a, on the ports the
// policies name, their neighbours and others, by TCP, UDP and SCTP.
func TestFlatStageDecidesAsWalking(t *testing.T) {
	for _, k := range []int{1, 10, 30} {
		snap := manyPolicies(k)
		flat, _ := Compile(snap, Options{Node: testNode})
		walked, _ := Compile(snap, Options{Node: testNode, WalkPolicies: true})
		ports := []uint16{0, 1, 79, 80, 81, 999, 4999, 5000, 5050, 5100, 5101, 65535}
		for i := range k + 1 {
			ports = append(ports, uint16(1000+i))
		}
		allowed := 0
		for _, from := range allTestPods() {
			for _, f := range families {
				for _, proto := range []nft.Proto{nft.ProtoTCP, nft.ProtoUDP, nft.ProtoSCTP} {
					for _, port := range ports {
						p := nft.Packet{Src: addrOf(t, from, f), Dst: addrOf(t, "x/a", f), Proto: proto, Dport: port}
						got, want := traceAllowed(t, flat, p), traceAllowed(t, walked, p)
						if got != want {
							t.Errorf("k=%d: %s→x/a %s/%d: flat allowed=%v, walking allowed=%v", k, from, proto, port, got, want)
						}
						if got {
							allowed++
						}
					}
				}
			}
		}
		if allowed == 0 {
			t.Errorf("k=%d: nothing allowed: the probes test nothing", k)
		}
	}
}

func allTestPods() []string {
	var out []string
	for _, ns := range testNamespaces {
		for _, p := range testPods {
			out = append(out, ns+"/"+p)
		}
	}
	return out
}

// planFlat folds rules into disjoint fragments: overlapping ranges split
// where they meet, adjacent pieces allowing the same peers merge, and a
// piece no rule covers is no fragment.
func TestPlanFlatFragments(t *testing.T) {
	mk := func(key string, first, last uint16) flatRule {
		return flatRule{key: key, proto: nft.ProtoTCP, first: first, last: last}
	}
	p := &policyState{}
	p.flat[ingress.i] = []flatRule{
		mk("a;", 10, 20), mk("b;", 15, 30), mk("a;", 21, 25), mk("c;", 40, 40), {key: "", proto: nft.ProtoUDP, first: 53, last: 53},
	}
	pd := &pod{key: objKey{namespace: "x"}}
	plan := planFlat(pd, ingress, []*policyState{p})
	type frag struct {
		first, last uint16
		keys        string
	}
	var got []frag
	for _, f := range plan.fragments {
		keys := strings.Join(f.keys, "")
		if f.all {
			keys = "all"
		}
		got = append(got, frag{f.first, f.last, fmt.Sprintf("%s:%s", f.proto, keys)})
	}
	want := []frag{{10, 14, "tcp:a;"}, {15, 25, "tcp:a;b;"}, {26, 30, "tcp:b;"}, {40, 40, "tcp:c;"}, {53, 53, "udp:all"}}
	if !slices.Equal(got, want) {
		t.Errorf("fragments %v, want %v", got, want)
	}
}

// Ingress named ports resolve on the pod's own container ports; a name
// it does not serve allows nothing.
func TestPlanFlatNamedPorts(t *testing.T) {
	p := &policyState{}
	p.flat[ingress.i] = []flatRule{
		{key: "a;", proto: nft.ProtoTCP, named: "web"},
		{key: "b;", proto: nft.ProtoTCP, named: "nope"},
	}
	pd := &pod{key: objKey{namespace: "x"}, ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}, {Name: "web", ContainerPort: 9090, Protocol: corev1.ProtocolUDP}}}
	plan := planFlat(pd, ingress, []*policyState{p})
	if len(plan.fragments) != 1 || plan.fragments[0].first != 8080 || plan.fragments[0].last != 8080 || plan.fragments[0].proto != nft.ProtoTCP {
		t.Errorf("fragments %+v, want tcp 8080 alone", plan.fragments)
	}
}

// mergeRanges is the union of range lists, as netipx builds it.
func TestMergeRanges(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	randomSet := func() *netipx.IPSet {
		var b netipx.IPSetBuilder
		for range r.IntN(12) {
			first := netip.AddrFrom4([4]byte{10, 0, 0, byte(r.IntN(64))})
			last := first
			for range r.IntN(4) {
				last = last.Next()
			}
			b.AddRange(netipx.IPRangeFrom(first, last))
		}
		s, _ := b.IPSet()
		return s
	}
	for range 2000 {
		var u netipx.IPSetBuilder
		var lists [][]nft.Element
		for range 1 + r.IntN(6) {
			s := randomSet()
			u.AddSet(s)
			lists = append(lists, rangesOf(s, nft.IPv4))
		}
		union, _ := u.IPSet()
		got := mergeRanges(lists...)
		if want := rangesOf(union, nft.IPv4); !slices.Equal(got, want) {
			t.Fatalf("mergeRanges(%v) = %v, want %v", lists, got, want)
		}
	}
}

// Two unions whose parts differ but whose peers read alike ("A;B;" with
// "C;" and "A;" with "B;C;") are two unions: each holds its own parts, so
// the table after any of them goes is the one compiled afresh (the
// hostile review had them share one, which released the other's parts
// and left rules matching against sets the table no longer held).
func TestUnionsOfDifferentPartsAreDistinct(t *testing.T) {
	x, y, z := ipBlock("10.1.0.0/16"), ipBlock("10.2.0.0/16"), ipBlock("10.3.0.0/16")
	p1 := policy("x", "p1", selecting("a"), ingressRule(peers(x)))
	p2 := policy("x", "p2", selecting("a"), ingressRule(peers(y, z)))
	p3 := policy("x", "p3", selecting("b"), ingressRule(peers(x, y)))
	p4 := policy("x", "p4", selecting("b"), ingressRule(peers(z)))
	opts := Options{Node: testNode}
	inc := NewCompiler(opts)
	var prev *nft.Table
	for i, snap := range []*k8s.Snapshot{cluster(p1, p2, p3, p4), cluster(p1, p2, p4), cluster(p1, p4), cluster(p1)} {
		prev = checkIncremental(t, inc, opts, prev, snap, DefaultPriority, fmt.Sprintf("step %d", i))
	}
}
