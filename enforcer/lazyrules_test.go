package enforcer

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// A policy that selects no pod of this node holds its chains' names but
// no rules: they are built when it becomes active, as a fresh compile
// builds them, and let go when it stops being active. Flow logs and
// counters change the rules, so each option set is walked.
func TestInactivePoliciesHoldNoRules(t *testing.T) {
	for _, opts := range []Options{
		{Node: testNode},
		{Node: testNode, Counters: true, FlowLog: FlowLog{Group: 100, All: true}},
	} {
		np := policy("x", "p", selecting("new"), types(networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress),
			ingressRule(peers(nsPeer("y"), podPeer("b")), port(corev1.ProtocolTCP, 80), namedPort(corev1.ProtocolTCP, "serve-81-tcp")),
			egressRule(peers(nsPodPeer("z", "c")), namedPort(corev1.ProtocolUDP, "serve-80-udp")))
		other := policy("x", "q", selecting("a"), ingressRule(peers(podPeer("b"))))
		withPod := func(s *k8s.Snapshot) {
			s.Pods = append(s.Pods, testPod("x", "new"))
		}
		steps := []struct {
			name   string
			change func(*k8s.Snapshot)
			active bool
		}{
			{"no pod of its", func(*k8s.Snapshot) {}, false},
			{"a pod of its comes", withPod, true},
			{"the pod goes", func(s *k8s.Snapshot) { *s = *cluster(np, other) }, false},
			{"and comes back", withPod, true},
		}
		inc := NewCompiler(opts)
		cur := cluster(np, other)
		var prev *nft.Table
		for _, st := range steps {
			next := *cur
			next.Pods = slices.Clone(cur.Pods)
			st.change(&next)
			next.Sort()
			cur = &next
			got, problems := inc.Compile(cur, DefaultPriority)
			prev = checkCompiled(t, inc, opts, prev, got, problems, cur, DefaultPriority, st.name)
			p := inc.policies[objKey{"x", "p"}]
			if p.active != st.active {
				t.Fatalf("%s: active %v, want %v", st.name, p.active, st.active)
			}
			for _, d := range directions {
				ch := p.chains[d.i]
				if ch == nil || ch.Name == "" {
					t.Fatalf("%s: %s has no chain name", st.name, d.name)
				}
				if held := len(ch.Rules) > 0; held != st.active {
					t.Errorf("%s: %s chain %s holds %d rules while active is %v", st.name, d.name, ch.Name, len(ch.Rules), st.active)
				}
				if st.active && !slices.ContainsFunc(got.Chains, func(c *nft.Chain) bool { return c == ch }) {
					t.Errorf("%s: the table does not hold %s chain %s as the policy has it", st.name, d.name, ch.Name)
				}
			}
		}
	}
}
