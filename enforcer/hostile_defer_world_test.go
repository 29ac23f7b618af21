package enforcer

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftpolicy/nftpolicy/k8s"
)

// hdWorld is a random cluster made for unions of peer lists: several
// policies select the same pods with different peer lists on the same
// ports, in both directions, so that nearly every policy edit, relabel or
// readdress makes or unmakes a union. (newWorld, the world of
// TestIncrementalMatchesFull, made one union in 1,500 compiles.)
type hdWorld struct {
	r        *rand.Rand
	ns       map[string]map[string]string // labels
	pods     map[objKey]*k8s.Pod
	policies map[objKey]*networkingv1.NetworkPolicy
	nextIP   int
	logged   map[string]bool // namespaces annotated for flow logs
}

var (
	hdNamespaces  = []string{"x", "y", "z", "w"}
	hdPodNames    = []string{"a", "b", "c", "d"}
	hdPolicyNames = []string{"p0", "p1", "p2", "p3", "p4", "p5"}
)

func newHDWorld(seed uint64) *hdWorld {
	w := &hdWorld{r: rand.New(rand.NewPCG(seed, seed^0x5eed)), ns: map[string]map[string]string{},
		pods: map[objKey]*k8s.Pod{}, policies: map[objKey]*networkingv1.NetworkPolicy{}, logged: map[string]bool{}}
	for _, ns := range hdNamespaces {
		w.ns[ns] = w.nsLabels(ns)
		for _, p := range hdPodNames[:3] {
			w.pods[objKey{ns, p}] = w.pod(ns, p)
		}
	}
	for range 8 {
		ns, name := w.pick(hdNamespaces[:2]), w.pick(hdPolicyNames)
		w.policies[objKey{ns, name}] = w.policy(ns, name)
	}
	return w
}

func (w *hdWorld) pick(s []string) string { return s[w.r.IntN(len(s))] }

func (w *hdWorld) nsLabels(ns string) map[string]string {
	return map[string]string{"ns": ns, "team": w.pick([]string{"red", "blue"})}
}

func (w *hdWorld) ips() (string, string) {
	w.nextIP++
	return fmt.Sprintf("10.1.%d.%d", w.nextIP/100, w.nextIP%100+1), fmt.Sprintf("fd00:1::%d:%d", w.nextIP/100, w.nextIP%100+1)
}

func (w *hdWorld) pod(ns, name string) *k8s.Pod {
	v4, v6 := w.ips()
	ips := []corev1.PodIP{{IP: v4}, {IP: v6}}
	switch w.r.IntN(8) {
	case 0:
		ips = ips[:1]
	case 1:
		ips = ips[1:]
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"pod": name, "app": w.pick([]string{"web", "db"})}},
		Spec: corev1.PodSpec{NodeName: w.pick([]string{testNode, testNode, "node-2"}), Containers: []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{
			{Name: "http", ContainerPort: int32(8000 + 100*w.r.IntN(2)), Protocol: corev1.ProtocolTCP},
			{Name: "dns", ContainerPort: 8001, Protocol: corev1.ProtocolUDP},
		}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: ips},
	}
	return k8s.NewPod(p)
}

// hdPeerPalette is small so that lists recur across policies and pods.
func (w *hdWorld) peer() networkingv1.NetworkPolicyPeer {
	app := &metav1.LabelSelector{MatchLabels: map[string]string{"app": w.pick([]string{"web", "db"})}}
	switch w.r.IntN(9) {
	case 0:
		return nsPeer(w.pick(hdNamespaces))
	case 1:
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": w.pick([]string{"red", "blue"})}}}
	case 2:
		return networkingv1.NetworkPolicyPeer{PodSelector: app}
	case 3:
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{}, PodSelector: app}
	case 4:
		return ipBlock("10.1.0.0/16", "10.1.0.0/27")
	case 5:
		return ipBlock("fd00:1::/64", "fd00:1::0:0/124")
	case 6:
		return ipBlock("192.0.2.0/24")
	case 7:
		return nsPodPeer(w.pick(hdNamespaces), w.pick(hdPodNames))
	}
	return ipBlock("0.0.0.0/0", "10.0.0.0/8")
}

func (w *hdWorld) ports() []networkingv1.NetworkPolicyPort {
	switch w.r.IntN(10) {
	case 0:
		return nil
	case 1:
		return []networkingv1.NetworkPolicyPort{portRange(tcp, 80, 82)}
	case 2:
		return []networkingv1.NetworkPolicyPort{namedPort(tcp, "http")}
	case 3:
		return []networkingv1.NetworkPolicyPort{namedPort(udp, "dns")}
	case 4:
		return []networkingv1.NetworkPolicyPort{portRange(udp, 5000, 5100)}
	case 5:
		return []networkingv1.NetworkPolicyPort{port(udp, 80), port(tcp, 81)}
	case 6:
		return []networkingv1.NetworkPolicyPort{port(tcp, 81)}
	}
	return []networkingv1.NetworkPolicyPort{port(tcp, 80)}
}

func (w *hdWorld) peers() []networkingv1.NetworkPolicyPeer {
	var ps []networkingv1.NetworkPolicyPeer
	for n := 1 + w.r.IntN(2); n > 0; n-- {
		ps = append(ps, w.peer())
	}
	return ps
}

func (w *hdWorld) policy(ns, name string) *networkingv1.NetworkPolicy {
	np := policy(ns, name)
	switch w.r.IntN(3) {
	case 0:
		np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": w.pick([]string{"web", "db"})}}
	case 1:
		np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"pod": w.pick(hdPodNames)}}
	}
	for n := 1 + w.r.IntN(3); n > 0; n-- {
		np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: w.peers(), Ports: w.ports()})
	}
	if w.r.IntN(2) == 0 {
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
		for n := 1 + w.r.IntN(3); n > 0; n-- {
			np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: w.peers(), Ports: w.ports()})
		}
	}
	return np
}

func (w *hdWorld) anyPolicy() (objKey, bool) {
	keys := slices.SortedFunc(maps.Keys(w.policies), compareKeys)
	if len(keys) == 0 {
		return objKey{}, false
	}
	return keys[w.r.IntN(len(keys))], true
}

func (w *hdWorld) anyPod() (objKey, bool) {
	keys := slices.SortedFunc(maps.Keys(w.pods), compareKeys)
	if len(keys) == 0 {
		return objKey{}, false
	}
	return keys[w.r.IntN(len(keys))], true
}

// step changes the world by one event and names it.
func (w *hdWorld) step() string {
	switch w.r.IntN(14) {
	case 0, 1, 2: // a policy set
		ns, name := w.pick(hdNamespaces), w.pick(hdPolicyNames)
		w.policies[objKey{ns, name}] = w.policy(ns, name)
		return "policy set " + ns + "/" + name
	case 3: // one rule of a policy edited: a list taken off or added
		if k, ok := w.anyPolicy(); ok {
			np := w.policies[k].DeepCopy()
			if len(np.Spec.Ingress) > 1 && w.r.IntN(2) == 0 {
				i := w.r.IntN(len(np.Spec.Ingress))
				np.Spec.Ingress = slices.Delete(np.Spec.Ingress, i, i+1)
			} else {
				np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: w.peers(), Ports: w.ports()})
			}
			w.policies[k] = np
			return "policy rule edit " + k.String()
		}
	case 4: // a policy deleted
		if k, ok := w.anyPolicy(); ok {
			delete(w.policies, k)
			return "policy delete " + k.String()
		}
	case 5: // pod relabelled
		if k, ok := w.anyPod(); ok {
			p := w.pods[k].DeepCopy()
			p.Labels["app"] = w.pick([]string{"web", "db", "cache"})
			w.pods[k] = p
			return "pod relabel " + k.String()
		}
	case 6: // pod readdressed or moved to another node
		if k, ok := w.anyPod(); ok {
			p := w.pods[k].DeepCopy()
			if w.r.IntN(2) == 0 {
				v4, v6 := w.ips()
				p.Status.PodIPs = []corev1.PodIP{{IP: v4}, {IP: v6}}
			} else {
				p.Spec.NodeName = w.pick([]string{testNode, "node-2"})
			}
			w.pods[k] = p
			return "pod moved " + k.String()
		}
	case 13: // flow logs of a namespace turned on or off (only read with Options.FlowLog)
		ns := w.pick(hdNamespaces)
		w.logged[ns] = !w.logged[ns]
		return fmt.Sprintf("namespace %s flow log %v", ns, w.logged[ns])
	case 7, 11, 12: // pod added or replaced
		ns, name := w.pick(hdNamespaces), w.pick(hdPodNames)
		w.pods[objKey{ns, name}] = w.pod(ns, name)
		return "pod set " + ns + "/" + name
	case 8: // pod deleted
		if k, ok := w.anyPod(); ok {
			delete(w.pods, k)
			return "pod delete " + k.String()
		}
	case 9: // namespace relabelled
		ns := w.pick(hdNamespaces)
		if _, ok := w.ns[ns]; ok {
			w.ns[ns] = w.nsLabels(ns)
			if w.r.IntN(3) == 0 {
				w.ns[ns]["ns"] = "moved"
			}
			return "namespace relabel " + ns
		}
	case 10: // namespace deleted with its pods and policies, or back
		ns := w.pick(hdNamespaces)
		if _, ok := w.ns[ns]; ok {
			if w.r.IntN(2) == 0 {
				return "nothing"
			}
			delete(w.ns, ns)
			for k := range w.pods {
				if k.namespace == ns {
					delete(w.pods, k)
				}
			}
			for k := range w.policies {
				if k.namespace == ns {
					delete(w.policies, k)
				}
			}
			return "namespace delete " + ns
		}
		w.ns[ns] = w.nsLabels(ns)
		for _, p := range hdPodNames[:2] {
			w.pods[objKey{ns, p}] = w.pod(ns, p)
		}
		return "namespace add " + ns
	}
	return "nothing"
}

// burst takes one to three steps, as a burst of changes coalesced into
// one sync, records them in history, and returns the snapshot after them.
func (w *hdWorld) burst(history *[]string) *k8s.Snapshot {
	var events []string
	for n := 1 + w.r.IntN(3); n > 0; n-- {
		events = append(events, w.step())
	}
	*history = append(*history, strings.Join(events, " + "))
	return w.snapshot()
}

func (w *hdWorld) snapshot() *k8s.Snapshot {
	s := &k8s.Snapshot{}
	for _, ns := range slices.Sorted(maps.Keys(w.ns)) {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: maps.Clone(w.ns[ns])}}
		if w.logged[ns] {
			n.Annotations = map[string]string{k8s.FlowLogAnnotation: "true"}
		}
		s.Namespaces = append(s.Namespaces, n)
	}
	for _, k := range slices.SortedFunc(maps.Keys(w.pods), compareKeys) {
		if _, ok := w.ns[k.namespace]; ok {
			s.Pods = append(s.Pods, w.pods[k])
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(w.policies), compareKeys) {
		s.Policies = append(s.Policies, w.policies[k])
	}
	s.Nodes = []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: testNode}}, {ObjectMeta: metav1.ObjectMeta{Name: "node-2"}}}
	return s
}
