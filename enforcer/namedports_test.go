package enforcer

import (
	"slices"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/nftpolicy/nftpolicy/internal/scale"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// TestNamedPortSetScope: an egress named-port set holds the pods serving
// the port that the peers of the active rules on it name, when those are
// pods of the rule's own namespace, and every pod serving it while some
// policy of the cluster, active or not, has a rule on it with other peers
// (none, an ipBlock, a namespace selector). Each step is compiled on from
// the step before, and must also be what a fresh compile of the same
// snapshot gives.
func TestNamedPortSetScope(t *testing.T) {
	const set = "egress-port-serve-80-tcp-tcp-v4"
	named := scale.NamedPort(tcp, "serve-80-tcp")
	toB := policy("x", "to-b", selecting("a"), denyEgress, egressRule(peers(podPeer("b")), named))
	toC := policy("x", "to-c", selecting("a"), denyEgress, egressRule(peers(podPeer("c")), named))
	// Select no pod of this node (x/nobody): not active, but held.
	block := policy("x", "block", selecting("nobody"), denyEgress, egressRule(peers(podPeer("b"), scale.IPBlock("192.0.2.0/24")), named))
	everyDest := policy("x", "every", selecting("nobody"), denyEgress, egressRule(nil, named))
	otherNS := policy("x", "ns-y", selecting("nobody"), denyEgress, egressRule(peers(nsPeer("y")), named))
	relabel := func(ns, name, label string) func(*k8s.Snapshot) {
		return func(s *k8s.Snapshot) {
			for i, p := range s.Pods {
				if p.Namespace == ns && p.Name == name {
					s.Pods[i] = testPod(ns, name, func(p *k8s.Pod) { p.Labels["pod"] = label })
				}
			}
		}
	}
	remove := func(ns, name string) func(*k8s.Snapshot) {
		return func(s *k8s.Snapshot) {
			s.Pods = slices.DeleteFunc(s.Pods, func(p *k8s.Pod) bool { return p.Namespace == ns && p.Name == name })
		}
	}
	policies := func(nps ...*networkingv1.NetworkPolicy) func(*k8s.Snapshot) {
		return func(s *k8s.Snapshot) { s.Policies = nps }
	}
	all := []string{"10.0.1.1", "10.0.1.2", "10.0.1.3", "10.0.2.1", "10.0.2.2", "10.0.2.3", "10.0.3.1", "10.0.3.2", "10.0.3.3"}
	steps := []struct {
		name   string
		change func(*k8s.Snapshot)
		want   []string // addresses in the set, each at port 80
	}{
		{"peers: x/b", policies(toB), []string{"10.0.1.2"}},
		{"and x/c, by another policy", policies(toB, toC), []string{"10.0.1.2", "10.0.1.3"}},
		{"x/c relabelled out", relabel("x", "c", "other"), []string{"10.0.1.2"}},
		{"x/c relabelled back in", relabel("x", "c", "c"), []string{"10.0.1.2", "10.0.1.3"}},
		{"x/b goes", remove("x", "b"), []string{"10.0.1.3"}},
		{"x/a, the only target, goes: neither policy is active", remove("x", "a"), nil},
		{"back to the cluster with x/a and x/b", func(s *k8s.Snapshot) { *s = *cluster(toB, toC) }, []string{"10.0.1.2", "10.0.1.3"}},
		{"an inactive policy with an ipBlock peer", policies(toB, toC, block), all},
		{"and x/a's policies go", policies(block), all},
		{"the ipBlock policy goes too", policies(), nil},
		{"peers: x/b again", policies(toB), []string{"10.0.1.2"}},
		{"an inactive policy to every destination", policies(toB, everyDest), all},
		{"it goes", policies(toB), []string{"10.0.1.2"}},
		{"an inactive policy to namespace y", policies(toB, otherNS), all},
		{"it goes", policies(toB), []string{"10.0.1.2"}},
	}
	inc := NewCompiler(Options{Node: testNode})
	cur := cluster()
	for _, st := range steps {
		next := *cur
		next.Pods = slices.Clone(cur.Pods)
		next.Policies = slices.Clone(cur.Policies)
		st.change(&next)
		next.Sort()
		cur = &next
		got, _ := inc.Compile(cur, DefaultPriority)
		fresh, _ := NewCompiler(Options{Node: testNode}).Compile(cur, DefaultPriority)
		if a, b := nft.Render(got), nft.Render(fresh); a != b {
			t.Fatalf("%s: the compiled table is not a fresh compile's", st.name)
		}
		var addrs []string
		if s := hpSet(got, set); s != nil {
			for _, el := range s.All() {
				if el.Proto != nft.ProtoTCP || el.Port != 80 {
					t.Errorf("%s: element %v", st.name, el)
				}
				addrs = append(addrs, el.Addr.String())
			}
		}
		if !slices.Equal(addrs, st.want) {
			t.Errorf("%s: %s holds %s, want %s", st.name, set, strings.Join(addrs, ", "), strings.Join(st.want, ", "))
		}
	}
}
