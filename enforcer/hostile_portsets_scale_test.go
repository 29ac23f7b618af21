package enforcer

import (
	"crypto/sha256"
	"fmt"
	"runtime"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftpolicy/nftpolicy/internal/scale"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// TestHostilePortSetsScale: at 150k pods (scale.Cluster: every pod serves
// http and dns, and the egress dns and http named-port sets hold 150k
// elements a family, one as the set of every pod, the other as the set
// of its rules' peers), single-pod events that land on the very first and
// very last element, in the middle, on a chunk just split by a burst, on
// an address another pod holds, and port renames, each cost (Compile and
// Delta) a small fraction of a fresh compile's allocations; their deltas
// are exact patches of the one or two elements the pod gives; bursts of
// hundreds of pods cost in proportion. After the events the named-port
// sets are element for element those of a fresh compile, and the tables
// returned along the way still hold what they held.
func TestHostilePortSetsScale(t *testing.T) {
	if testing.Short() {
		t.Skip("150k pods")
	}
	snap := scale.Cluster(100, 1500, 3, 30, testNode, false)
	// http to every namespace's pods: a set of the pods of its peers,
	// which are all of them; dns to every destination: a set of every
	// pod serving it (namedports.go). Both hold 150k elements a family.
	dns := hpEgressPolicy("ns-0", "egress-dns", scale.NamedPort(udp, "dns"))
	dns.Spec.Egress[0].To = nil
	snap.Policies = append(snap.Policies, hpEgressPolicy("ns-0", "egress-http", scale.NamedPort(tcp, "http")), dns)
	snap.Sort()
	opts := Options{Node: testNode, DeferUnions: true}
	inc := NewCompiler(opts)
	var first *nft.Table
	fresh := allocatedBy(func() { first, _ = inc.Compile(snap, DefaultPriority) })
	for _, name := range []string{"egress-port-dns-udp-v4", "egress-port-http-tcp-v6"} {
		if s := hpSet(first, name); s == nil || s.Len() != 150000 {
			t.Fatalf("set %s: want 150000 elements", name)
		}
	}
	std := []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: tcp}, {Name: "dns", ContainerPort: 53, Protocol: udp}}

	type old struct {
		table *nft.Table
		sum   [32]byte
		where string
	}
	olds := []old{{first, hpPortSetsSum(first), "first"}}
	cur := snap
	// event compiles next and returns what it allocated; single events
	// must patch the named-port sets exactly, by at most perSet elements.
	event := func(name string, perSet int, change func(s *k8s.Snapshot)) uint64 {
		t.Helper()
		next, got, d, cost := compileEvent(inc, cur, change)
		if d.Full {
			t.Fatalf("%s: a full delta (%s)", name, d.Reason)
		}
		for _, u := range d.UpdateSets {
			if !isPortSet(u.New) {
				continue
			}
			if !u.Exact {
				t.Fatalf("%s: set %s updated by comparing it whole, not patched", name, u.New.Name)
			}
			if perSet > 0 && len(u.Added)+len(u.Removed) > perSet {
				t.Fatalf("%s: set %s patched by -%d +%d elements, want %d at most", name, u.New.Name, len(u.Removed), len(u.Added), perSet)
			}
		}
		olds = append(olds, old{got, hpPortSetsSum(got), name})
		cur = next
		return cost
	}
	drop := func(names ...string) func(s *k8s.Snapshot) {
		return func(s *k8s.Snapshot) {
			s.Pods = slices.DeleteFunc(s.Pods, func(p *k8s.Pod) bool { return slices.Contains(names, p.Name) })
		}
	}
	edit := func(ns, name string, f func(p *k8s.Pod)) func(s *k8s.Snapshot) {
		return func(s *k8s.Snapshot) {
			for i, p := range s.Pods {
				if p.Namespace == ns && p.Name == name {
					q := *p
					f(&q)
					s.Pods[i] = &q
				}
			}
		}
	}
	single := []struct {
		name   string
		change func(s *k8s.Snapshot)
	}{
		{"add the lowest address", func(s *k8s.Snapshot) {
			s.Pods = append(s.Pods, hpPod("ns-3", "lowest", "node-other", std, "0.0.0.0", "::"))
		}},
		{"add the highest address", func(s *k8s.Snapshot) {
			s.Pods = append(s.Pods, hpPod("ns-3", "highest", "node-other", std, "255.255.255.255", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"))
		}},
		{"delete the lowest", drop("lowest")},
		{"delete the highest", drop("highest")},
		{"add one in the middle", func(s *k8s.Snapshot) {
			s.Pods = append(s.Pods, hpPod("ns-7", "middle", "node-other", std, "10.1.0.0", "fd00::1:0:0"))
		}},
		{"rename a port", edit("ns-50", "pod-700", func(p *k8s.Pod) {
			p.Spec.Ports = []corev1.ContainerPort{{Name: "web", ContainerPort: 8080, Protocol: tcp}, {Name: "dns", ContainerPort: 53, Protocol: udp}}
		})},
		{"renumber a port", edit("ns-50", "pod-700", func(p *k8s.Pod) {
			p.Spec.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8081, Protocol: tcp}, {Name: "dns", ContainerPort: 53, Protocol: udp}}
		})},
		{"move an address to the end", edit("ns-50", "pod-701", func(p *k8s.Pod) {
			p.Status.PodIPs = []corev1.PodIP{{IP: "255.255.255.254"}, {IP: "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe"}}
		})},
		{"a terminating pod and its successor", func(s *k8s.Snapshot) {
			edit("ns-60", "pod-3", func(p *k8s.Pod) {
				ts := metav1.Now()
				p.DeletionTimestamp = &ts
			})(s)
			v4 := netip4(60*1500 + 3)
			s.Pods = append(s.Pods, hpPod("ns-60", "successor", "node-other",
				[]corev1.ContainerPort{{Name: "http", ContainerPort: 9090, Protocol: tcp}}, v4))
		}},
		{"an event that changes nothing", drop("no-such-pod")},
		{"delete the middle", drop("middle")},
	}
	var worst uint64
	var worstName string
	for _, ev := range single {
		if a := event(ev.name, 2, ev.change); a > worst {
			worst, worstName = a, ev.name
		}
	}
	// A burst of 1500 pods into one place (one chunk takes them all and
	// splits), then single events into the chunks it made.
	var burst []string
	burstCost := event("burst of 1500 pods", 0, func(s *k8s.Snapshot) {
		for i := range 1500 {
			name := fmt.Sprintf("burst-%d", i)
			burst = append(burst, name)
			s.Pods = append(s.Pods, hpPod("ns-9", name, "node-other", std,
				fmt.Sprintf("10.200.%d.%d", i>>8, i&255), fmt.Sprintf("fd00::c8:%x", i)))
		}
	})
	for i := range 4 {
		name := fmt.Sprintf("into the burst %d", i)
		if a := event(name, 2, drop(burst[i*300])); a > worst {
			worst, worstName = a, name
		}
	}
	burstGone := event("the burst goes", 0, drop(burst...))
	t.Logf("fresh compile %.1f MB; worst single event (%s) %.2f MB; burst of 1500 %.1f MB, its deletion %.1f MB",
		mb(fresh), worstName, mb(worst), mb(burstCost), mb(burstGone))
	if worst*100 > fresh {
		t.Errorf("a single pod event (%s) allocated %.2f MB, more than 1%% of a fresh compile's %.1f MB", worstName, mb(worst), mb(fresh))
	}
	if burstCost*5 > fresh || burstGone*5 > fresh {
		t.Errorf("a burst of 1500 pods allocated %.1f MB and its deletion %.1f MB, a fresh compile %.1f MB: want a fifth at most", mb(burstCost), mb(burstGone), mb(fresh))
	}

	want, _ := NewCompiler(opts).Compile(cur, DefaultPriority)
	requirePortSetsAsFresh(t, olds[len(olds)-1].table, want, "after the events")
	for _, o := range olds {
		if hpPortSetsSum(o.table) != o.sum {
			t.Fatalf("the named-port sets of the table of %q changed after it was returned", o.where)
		}
	}
}

func mb(n uint64) float64 { return float64(n) / (1 << 20) }

func netip4(i int) string { return fmt.Sprintf("10.%d.%d.%d", byte(i>>16), byte(i>>8), byte(i)) }

func hpSet(t *nft.Table, name string) *nft.Set {
	for _, s := range t.Sets {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// hpPortSetsSum hashes the names and elements of t's named-port sets.
func hpPortSetsSum(t *nft.Table) [32]byte {
	h := sha256.New()
	for _, s := range t.Sets {
		if !isPortSet(s) {
			continue
		}
		fmt.Fprintf(h, "%s %d\n", s.Name, s.Len())
		for _, e := range s.All() {
			b, _ := e.Addr.MarshalBinary()
			h.Write(b)
			h.Write([]byte{byte(e.Proto), byte(e.Port >> 8), byte(e.Port)})
		}
	}
	return [32]byte(h.Sum(nil))
}

// TestHostilePortSetsScaleReactivation: at 150k pods, one policy uses the
// egress named port http, and one pod of this node is what keeps it
// active. That pod going and coming back are two single-pod events; each
// must cost what other single-pod events cost (a small fraction of a
// fresh compile) and must not build the named-port sets again from every
// pod of the cluster (a delta of 300k elements for the kernel).
//
// With a peer that is not pods alone (an ipBlock besides the pods), the
// set holds every pod serving http, 150k a family, and keeps them while
// the policy is inactive. It fails at deebcb9 and 3425e87: the named-port
// sets are held by active policies only (a policy is active while it
// selects a pod of this node), so the pod going drops both sets and its
// return builds them again from every pod: about 61 MB allocated (a fresh
// compile of the cluster: 220-270 MB) and 150+ ms for one pod event, and
// a delta adding 300k elements. With pods alone, the set holds the 150
// pods of the rule's peers while the policy is active, none while not.
func TestHostilePortSetsScaleReactivation(t *testing.T) {
	if testing.Short() {
		t.Skip("150k pods")
	}
	for _, tc := range []struct {
		name         string
		to           []networkingv1.NetworkPolicyPeer
		active, idle int // elements of egress-port-http-tcp-v4 while the policy is active, and not
	}{
		{"pods and an ipBlock", []networkingv1.NetworkPolicyPeer{
			{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "app-1"}}},
			scale.IPBlock("192.0.2.0/24"),
		}, 150000, 149999}, // the pod that goes serves http too
		{"pods alone", []networkingv1.NetworkPolicyPeer{
			{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "app-1"}}},
		}, 150, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := scale.Cluster(100, 1500, 3, 30, testNode, false)
			// The only user of the egress named port http, in ns-0, whose one pod
			// of this node is pod-0 (scale.Cluster puts every 5000th pod here).
			np := hpEgressPolicy("ns-0", "egress-http", scale.NamedPort(tcp, "http"))
			np.Spec.Egress[0].To = tc.to
			snap.Policies = append(snap.Policies, np)
			snap.Sort()
			var local *k8s.Pod
			for _, p := range snap.Pods {
				if p.Namespace == "ns-0" && p.Spec.NodeName == testNode {
					if local != nil {
						t.Fatal("ns-0 has more than one pod on this node")
					}
					local = p
				}
			}
			inc := NewCompiler(Options{Node: testNode, DeferUnions: true})
			var first *nft.Table
			fresh := allocatedBy(func() { first, _ = inc.Compile(snap, DefaultPriority) })
			if s := hpSet(first, "egress-port-http-tcp-v4"); s == nil || s.Len() != tc.active {
				t.Fatalf("egress-port-http-tcp-v4: want %d elements", tc.active)
			}
			cur := snap
			event := func(name string, want int, change func(s *k8s.Snapshot)) {
				t.Helper()
				next, got, d, cost := compileEvent(inc, cur, change)
				cur = next
				var big []string
				for _, s := range d.AddSets {
					if isPortSet(s) && s.Len() > 1000 {
						big = append(big, fmt.Sprintf("add %s (%d elements)", s.Name, s.Len()))
					}
				}
				t.Logf("%s: allocated %.1f MB (a fresh compile %.1f MB); named-port sets: %v", name, mb(cost), mb(fresh), big)
				if cost*20 > fresh {
					t.Errorf("%s: one pod event allocated %.1f MB, more than 5%% of a fresh compile's %.1f MB", name, mb(cost), mb(fresh))
				}
				if len(big) > 0 {
					t.Errorf("%s: one pod event's delta writes whole named-port sets: %v", name, big)
				}
				if s := hpSet(got, "egress-port-http-tcp-v4"); s == nil || s.Len() != want {
					t.Errorf("%s: egress-port-http-tcp-v4 holds %d elements, want %d", name, hpLen(s), want)
				}
			}
			event("this node's pod of ns-0 goes", tc.idle, func(s *k8s.Snapshot) {
				s.Pods = slices.DeleteFunc(s.Pods, func(p *k8s.Pod) bool { return p == local })
			})
			event("it comes back", tc.active, func(s *k8s.Snapshot) { s.Pods = append(s.Pods, local) })
		})
	}
}

// hpLen is s.Len(), -1 for no set.
func hpLen(s *nft.Set) int {
	if s == nil {
		return -1
	}
	return s.Len()
}

// compileEvent compiles cur as change leaves it, and returns that
// snapshot, the table, its delta and the bytes the compile allocated.
func compileEvent(inc *Compiler, cur *k8s.Snapshot, change func(s *k8s.Snapshot)) (*k8s.Snapshot, *nft.Table, *nft.Delta, uint64) {
	next := *cur
	next.Pods = slices.Clone(cur.Pods)
	change(&next)
	next.Sort()
	var got *nft.Table
	var d *nft.Delta
	cost := allocatedBy(func() {
		got, _ = inc.Compile(&next, DefaultPriority)
		d = inc.Delta()
	})
	return &next, got, d, cost
}

// allocatedBy runs f and returns the bytes it allocated: a measure of
// work that, unlike time, this machine's noise does not move (no test of
// the package runs in parallel).
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
