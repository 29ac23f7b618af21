package enforcer

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftpolicy/nftpolicy/internal/reference"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// sharedWorld is a small cluster built to stress what the patched
// named-port and peer sets count: few addresses shared by many pods
// (reused IPs, a terminating pod and its replacement, three at once),
// pods serving one named port twice (two containers, or a container and a
// sidecar), sidecars and plain init containers with named ports, pods
// given podIP alone, ipBlocks over some of the shared addresses. Pods are
// made the way the informer makes them: a corev1.Pod admitted, then
// recorded with k8s.NewPod (interned labels and ports).
type sharedWorld struct {
	r        *rand.Rand
	pods     map[objKey]*k8s.Pod
	policies map[objKey]*networkingv1.NetworkPolicy
}

var (
	sharedNS   = []string{"x", "y"}
	sharedPods = []string{"a", "b", "c", "d", "e", "f"}
	sharedV4   = []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}
	sharedV6   = []string{"fd00::1", "fd00::2"}
)

func (w *sharedWorld) pick(s []string) string { return s[w.r.IntN(len(s))] }

func (w *sharedWorld) corePod(ns, name string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			"pod": name, "app": w.pick([]string{"web", "db"}),
		}, CreationTimestamp: metav1.NewTime(time.Unix(int64(1e9+w.r.IntN(3)), 0))},
		Spec:   corev1.PodSpec{NodeName: w.pick([]string{testNode, testNode, "node-2"})},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if w.r.IntN(4) == 0 {
		p.DeletionTimestamp = &metav1.Time{Time: time.Unix(2e9, 0)}
	}
	v4 := w.pick(sharedV4)
	switch w.r.IntN(4) {
	case 0: // podIP alone, as an older writer or a hand-made manifest gives it
		p.Status.PodIP = v4
	case 1: // podIPs alone
		p.Status.PodIPs = []corev1.PodIP{{IP: v4}}
	case 2:
		p.Status.PodIP = v4
		p.Status.PodIPs = []corev1.PodIP{{IP: v4}, {IP: w.pick(sharedV6)}}
	default: // dual stack, podIPs alone
		p.Status.PodIPs = []corev1.PodIP{{IP: w.pick(sharedV6)}, {IP: v4}}
	}
	http := corev1.ContainerPort{Name: "http", ContainerPort: int32([]int{80, 8080}[w.r.IntN(2)]), Protocol: corev1.ProtocolTCP}
	var c0 []corev1.ContainerPort
	if w.r.IntN(3) != 0 {
		c0 = append(c0, http)
	}
	if w.r.IntN(2) == 0 {
		c0 = append(c0, corev1.ContainerPort{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP})
	}
	p.Spec.Containers = []corev1.Container{{Name: "main", Ports: c0}}
	if w.r.IntN(3) == 0 { // a second container serving the same name and port
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "second", Ports: []corev1.ContainerPort{http}})
	}
	always := corev1.ContainerRestartPolicyAlways
	switch w.r.IntN(4) {
	case 0: // a sidecar serving http too (the same or not)
		p.Spec.InitContainers = []corev1.Container{{Name: "proxy", RestartPolicy: &always, Ports: []corev1.ContainerPort{
			{Name: "http", ContainerPort: int32([]int{80, 8080}[w.r.IntN(2)]), Protocol: corev1.ProtocolTCP},
			{Name: "admin", ContainerPort: 9000, Protocol: corev1.ProtocolTCP},
		}}}
	case 1: // a plain init container: its ports serve nothing once it ended
		p.Spec.InitContainers = []corev1.Container{{Name: "init", Ports: []corev1.ContainerPort{
			{Name: "admin", ContainerPort: 9001, Protocol: corev1.ProtocolTCP},
		}}}
	}
	return p
}

func (w *sharedWorld) record(p *corev1.Pod) *k8s.Pod {
	if errs := k8s.Admit(p); len(errs) > 0 {
		panic(fmt.Sprintf("hostile world made an invalid pod: %v", errs))
	}
	return k8s.NewPod(p)
}

func (w *sharedWorld) policySet() {
	w.policies = map[objKey]*networkingv1.NetworkPolicy{}
	all := []*networkingv1.NetworkPolicy{
		policy("x", "web", func(np *networkingv1.NetworkPolicy) {
			np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
		}, ingressRule(peers(networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}),
			namedPort(tcp, "http")),
			egressRule(peers(nsPeer("y")), namedPort(tcp, "http"), namedPort(udp, "dns")),
			types(networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress)),
		policy("y", "all", func(np *networkingv1.NetworkPolicy) {},
			ingressRule(peers(ipBlock("10.0.0.0/30", "10.0.0.2/32"), podPeer("a")), namedPort(tcp, "http"), namedPort(tcp, "admin")),
			egressRule(peers(networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				NamespaceSelector: &metav1.LabelSelector{}}), namedPort(tcp, "admin"), namedPort(tcp, "http")),
			types(networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress)),
		policy("x", "db-out", func(np *networkingv1.NetworkPolicy) {
			np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}
		}, egressRule(peers(ipBlock("10.0.0.2/32"), networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}})),
			types(networkingv1.PolicyTypeEgress)),
	}
	for _, np := range all {
		if w.r.IntN(4) != 0 {
			w.policies[objKey{np.Namespace, np.Name}] = np
		}
	}
}

func newSharedWorld(seed uint64) *sharedWorld {
	w := &sharedWorld{r: rand.New(rand.NewPCG(seed, seed*31337)), pods: map[objKey]*k8s.Pod{}}
	for _, ns := range sharedNS {
		for _, name := range sharedPods[:3] {
			w.pods[objKey{ns, name}] = w.record(w.corePod(ns, name))
		}
	}
	w.policySet()
	return w
}

func (w *sharedWorld) anyPod() (objKey, bool) {
	keys := slices.SortedFunc(func(yield func(objKey) bool) {
		for k := range w.pods {
			if !yield(k) {
				return
			}
		}
	}, compareKeys)
	if len(keys) == 0 {
		return objKey{}, false
	}
	return keys[w.r.IntN(len(keys))], true
}

func (w *sharedWorld) step() string {
	switch w.r.IntN(8) {
	case 0, 1:
		ns, name := w.pick(sharedNS), w.pick(sharedPods)
		w.pods[objKey{ns, name}] = w.record(w.corePod(ns, name))
		return "pod set " + ns + "/" + name
	case 2:
		if k, ok := w.anyPod(); ok {
			delete(w.pods, k)
			return "pod delete " + k.String()
		}
	case 3: // labels changed, as the API server sends it: a new object
		if k, ok := w.anyPod(); ok {
			core := w.pods[k].Core()
			core.Labels["app"] = w.pick([]string{"web", "db", "cache"})
			w.pods[k] = w.record(core)
			return "pod labels " + k.String()
		}
	case 4: // address reused by another pod, or moved
		if k, ok := w.anyPod(); ok {
			core := w.pods[k].Core()
			v4 := w.pick(sharedV4)
			core.Status.PodIP = v4
			core.Status.PodIPs = []corev1.PodIP{{IP: v4}}
			w.pods[k] = w.record(core)
			return "pod moved " + k.String() + " to " + v4
		}
	case 5: // terminating
		if k, ok := w.anyPod(); ok {
			core := w.pods[k].Core()
			core.DeletionTimestamp = &metav1.Time{Time: time.Unix(2e9, 0)}
			w.pods[k] = w.record(core)
			return "pod terminating " + k.String()
		}
	case 6:
		w.policySet()
		return "policies"
	case 7:
		for k, p := range w.pods {
			w.pods[k] = p.DeepCopy()
		}
		return "copies"
	}
	return "nothing"
}

func (w *sharedWorld) snapshot() *k8s.Snapshot {
	s := &k8s.Snapshot{}
	for _, ns := range sharedNS {
		s.Namespaces = append(s.Namespaces, namespace(ns))
	}
	for _, k := range slices.SortedFunc(maps.Keys(w.pods), compareKeys) {
		s.Pods = append(s.Pods, w.pods[k])
	}
	for _, k := range slices.SortedFunc(maps.Keys(w.policies), compareKeys) {
		s.Policies = append(s.Policies, w.policies[k])
	}
	s.Nodes = []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: testNode}, Spec: corev1.NodeSpec{PodCIDRs: []string{"10.0.0.0/24", "fd00::/64"}}}}
	return s
}

// TestIncrementalSharedAddresses: the incremental compile, whose
// named-port and peer sets are patched with a count of duplicates only,
// must equal a full compile after every event, in a world where
// addresses are shared all the time and pods give one element twice.
func TestIncrementalSharedAddresses(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			w := newSharedWorld(seed)
			opts := Options{Node: testNode, DenyUnknown: seed%2 == 1}
			inc := NewCompiler(opts)
			var prev *nft.Table
			var events []string
			var portDups, peerDups, exact int
			defer func() {
				t.Logf("steps with duplicates counted: named-port sets %d, peer sets %d; exact set patches %d", portDups, peerDups, exact)
			}()
			for step := 0; step < 200; step++ {
				event := w.step()
				events = append(events, event)
				where := fmt.Sprintf("step %d (%s), last events %q", step, event, events[max(0, len(events)-8):])
				hadPrev := prev != nil
				prev = checkIncremental(t, inc, opts, prev, w.snapshot(), DefaultPriority, where)
				for e := range inc.portSets.values() {
					if len(e.dups) > 0 {
						portDups++
					}
				}
				for e := range inc.peers.values() {
					if len(e.dups) > 0 {
						peerDups++
					}
				}
				if hadPrev {
					for _, u := range inc.Delta().UpdateSets {
						if u.Exact {
							exact++
						}
					}
				}
			}
		})
	}
}

// TestSidecarAndPodIPOnlyAgainstReference: without shared
// addresses (where the reference is the oracle), pods with sidecars,
// plain init containers, a named port served twice, and podIP alone are
// traced through the compiled table and compared with the reference.
func TestSidecarAndPodIPOnlyAgainstReference(t *testing.T) {
	for seed := uint64(1); seed <= 10; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			w := newSharedWorld(seed)
			// Every pod at an address of its own.
			w.pods = map[objKey]*k8s.Pod{}
			i := 0
			for _, ns := range sharedNS {
				for _, name := range sharedPods {
					i++
					core := w.corePod(ns, name)
					core.DeletionTimestamp = nil
					v4 := fmt.Sprintf("10.0.1.%d", i)
					if w.r.IntN(2) == 0 {
						core.Status.PodIP, core.Status.PodIPs = v4, nil // podIP alone
					} else {
						core.Status.PodIP, core.Status.PodIPs = "", []corev1.PodIP{{IP: v4}, {IP: fmt.Sprintf("fd00::1:%d", i)}}
					}
					w.pods[objKey{ns, name}] = w.record(core)
				}
			}
			snap := w.snapshot()
			table, _ := NewCompiler(Options{Node: testNode}).Compile(snap, DefaultPriority)
			gc := &genned{snap: snap, names: map[netip.Addr]string{}}
			for _, p := range snap.Pods {
				for _, ip := range p.Status.PodIPs {
					a := netip.MustParseAddr(ip.IP)
					gc.addrs = append(gc.addrs, a)
					gc.names[a] = p.Namespace + "/" + p.Name
				}
			}
			if len(snap.Pods) > 0 && len(snap.Pods[0].Status.PodIPs) == 0 {
				t.Fatalf("a pod given podIP alone has no address in its record")
			}
			slices.SortFunc(gc.addrs, netip.Addr.Compare)
			ref := reference.New(snap, testNode)
			var diffs []string
			for _, src := range gc.addrs {
				for _, dst := range gc.addrs {
					if src.Is4() != dst.Is4() || src == dst {
						continue
					}
					for _, proto := range []nft.Proto{nft.ProtoTCP, nft.ProtoUDP} {
						for _, port := range []uint16{53, 80, 81, 8080, 9000, 9001} {
							c := reference.Conn{Src: src, Dst: dst, Proto: proto, Port: port}
							res, err := nft.Trace(table, "filter-forward", nft.Packet{Src: src, Dst: dst, Proto: proto, Dport: port})
							if err != nil {
								t.Fatal(err)
							}
							if got, want := res.Verdict == nft.Accept, ref.Allowed(c); got != want {
								diffs = append(diffs, fmt.Sprintf("%s", gc.name(c)))
							}
						}
					}
				}
			}
			if len(diffs) > 0 {
				t.Errorf("compiled and reference disagree on %d connections: %q", len(diffs), diffs[:min(10, len(diffs))])
			}
		})
	}
}
