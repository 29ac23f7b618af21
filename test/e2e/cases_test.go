package e2e

import (
	"fmt"
	"strings"

	"github.com/nftpolicy/nftpolicy/internal/netns"
)

// policy returns a NetworkPolicy document; spec is YAML indented with spaces
// as if at the top level. Namespace names are quoted everywhere: unquoted,
// YAML reads y as a boolean.
func policy(ns, name, spec string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "---\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {namespace: %q, name: %q}\nspec:\n", ns, name)
	for _, line := range strings.Split(strings.Trim(spec, "\n"), "\n") {
		b.WriteString("  " + line + "\n")
	}
	return b.String()
}

// hostBlocks returns ipBlock peers (YAML flow list items) for the /32 and
// /128 of pod key.
func (e *env) hostBlocks(key string) []string {
	p := e.c.Pod(key)
	return []string{
		fmt.Sprintf("{ipBlock: {cidr: %q}}", p.IPv4().String()+"/32"),
		fmt.Sprintf("{ipBlock: {cidr: %q}}", p.IPv6().String()+"/128"),
	}
}

// clusterBlocksExcept returns ipBlock peers for the whole pod range of both
// families (10.244.0.0/16, fd00:10:244::/48), each except pod key's address.
func (e *env) clusterBlocksExcept(key string) []string {
	p := e.c.Pod(key)
	return []string{
		fmt.Sprintf("{ipBlock: {cidr: 10.244.0.0/16, except: [%q]}}", p.IPv4().String()+"/32"),
		fmt.Sprintf("{ipBlock: {cidr: \"fd00:10:244::/48\", except: [%q]}}", p.IPv6().String()+"/128"),
	}
}

func flow(items []string) string { return "[" + strings.Join(items, ", ") + "]" }

// Policies used by several cases.
var (
	denyIngressX = policy("x", "deny-ingress", `
podSelector: {}
policyTypes: [Ingress]
`)
	denyEgressX = policy("x", "deny-egress", `
podSelector: {}
policyTypes: [Egress]
`)
	denyAllX = policy("x", "deny-all", `
podSelector: {}
policyTypes: [Ingress, Egress]
`)
)

// intoXA is the expectation "nothing reaches x/a except from": every other
// cell allowed.
func intoXA(from ...string) *netns.Matrix {
	m := allowAll().Expect("*", "x/a", false)
	for _, f := range from {
		m.Expect(f, "x/a", true)
	}
	return m
}

// fromXA is the expectation "x/a reaches nothing except to".
func fromXA(to ...string) *netns.Matrix {
	m := allowAll().Expect("x/a", "*", false)
	for _, k := range to {
		m.Expect("x/a", k, true)
	}
	return m
}

// cases are the behaviours of the upstream netpol e2e suite
// (test/e2e/network/netpol/network_policy.go), named after its It()
// descriptions where one exists, plus the corners of the design brief.
var cases = []tcase{
	// Default deny.
	{name: "default-deny-ingress", subset: true, run: func(e *env) {
		e.apply(denyIngressX)
		want := allowAll().Expect("*", "x/*", false)
		e.check(tcp(80, want), udp(81, want))
		e.checkNodesReachPods()
	}},
	{name: "default-deny-egress", subset: true, run: func(e *env) {
		e.apply(denyEgressX)
		want := allowAll().Expect("x/*", "*", false)
		e.check(tcp(80, want), udp(81, want))
		e.checkNodesReachPods()
	}},
	{name: "default-deny-all", subset: true, run: func(e *env) {
		e.apply(denyAllX)
		want := allowAll().Expect("x/*", "*", false).Expect("*", "x/*", false)
		e.check(tcp(80, want), udp(80, want))
		e.checkNodesReachPods()
	}},
	{name: "ingress-empty-list-allows-nothing", run: func(e *env) {
		e.apply(policy("x", "empty-ingress", `
podSelector: {}
policyTypes: [Ingress]
ingress: []
`))
		e.check(tcp(80, allowAll().Expect("*", "x/*", false)))
	}},
	{name: "deny-ingress-from-other-namespaces", run: func(e *env) {
		e.apply(policy("x", "same-ns-only", `
podSelector: {}
ingress:
  - from: [{podSelector: {}}]
`))
		e.check(tcp(80, allowAll().Expect("*", "x/*", false).Expect("x/*", "x/*", true)))
	}},
	{name: "allow-all-ingress", run: func(e *env) {
		e.apply(denyIngressX, policy("x", "allow-all", `
podSelector: {}
ingress: [{}]
`))
		e.check(tcp(80, allowAll()))
	}},
	{name: "replies-to-allowed-connections-pass", subset: true, run: func(e *env) {
		// x accepts no connection and y opens none, yet x → y and z → y
		// work: their replies go into isolated x and out of isolated y,
		// and are established traffic, never checked against policy.
		e.apply(denyIngressX, policy("y", "deny-egress", `
podSelector: {}
policyTypes: [Egress]
`))
		want := allowAll().Expect("*", "x/*", false).Expect("y/*", "*", false)
		e.check(tcp(80, want), udp(81, want))
	}},

	// Pod selectors.
	{name: "pod-selector-within-namespace", run: func(e *env) {
		e.apply(policy("x", "allow-from-b", `
podSelector: {matchLabels: {pod: a}}
ingress:
  - from: [{podSelector: {matchLabels: {pod: b}}}]
`))
		e.check(tcp(80, intoXA("x/b")))
	}},
	{name: "allow-ingress-for-a-target", run: func(e *env) {
		e.apply(denyIngressX, policy("x", "allow-to-a", `
podSelector: {matchLabels: {pod: a}}
ingress:
  - from: [{namespaceSelector: {}}]
`))
		e.check(tcp(80, allowAll().Expect("*", "x/b", false).Expect("*", "x/c", false)))
	}},
	{name: "pod-selector-match-expressions", run: func(e *env) {
		e.apply(policy("x", "allow-expr", `
podSelector: {matchExpressions: [{key: pod, operator: In, values: [a]}]}
ingress:
  - from: [{podSelector: {matchExpressions: [{key: pod, operator: In, values: [b]}]}}]
`))
		e.check(tcp(80, intoXA("x/b")))
	}},
	{name: "target-selector-does-not-exist", run: func(e *env) {
		// Every pod of x lacks label team: all are isolated.
		e.apply(policy("x", "no-team", `
podSelector: {matchExpressions: [{key: team, operator: DoesNotExist}]}
policyTypes: [Ingress]
`))
		e.check(tcp(80, allowAll().Expect("*", "x/*", false)))
	}},
	{name: "any-of-several-pod-selectors", run: func(e *env) {
		e.apply(policy("x", "b-or-c", `
podSelector: {matchLabels: {pod: a}}
ingress:
  - from: [{podSelector: {matchLabels: {pod: b}}}, {podSelector: {matchLabels: {pod: c}}}]
`))
		e.check(tcp(80, intoXA("x/b", "x/c")))
	}},

	// Namespace selectors.
	{name: "allow-from-all-namespaces", run: func(e *env) {
		e.apply(policy("x", "all-ns", `
podSelector: {matchLabels: {pod: a}}
ingress:
  - from: [{namespaceSelector: {}}]
`))
		e.check(tcp(80, allowAll()))
	}},
	{name: "namespace-selector-match-labels", subset: true, run: func(e *env) {
		e.apply(policy("x", "from-y", `
podSelector: {matchLabels: {pod: a}}
ingress:
  - from: [{namespaceSelector: {matchLabels: {ns: "y"}}}]
`))
		e.check(tcp(80, intoXA("y/*")))
	}},
	{name: "namespace-selector-match-expressions", run: func(e *env) {
		e.apply(policy("x", "not-x-or-z", `
podSelector: {matchLabels: {pod: a}}
ingress:
  - from: [{namespaceSelector: {matchExpressions: [{key: ns, operator: NotIn, values: [x, z]}]}}]
`))
		e.check(tcp(80, intoXA("y/*")))
	}},
	{name: "namespace-selector-default-name-label", run: func(e *env) {
		e.apply(policy("x", "by-name", `
podSelector: {matchLabels: {pod: a}}
ingress:
  - from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: "y"}}}]
`))
		e.check(tcp(80, intoXA("y/*")))
	}},
	{name: "namespace-selector-default-name-label-expressions", run: func(e *env) {
		e.apply(policy("x", "not-y-by-name", `
podSelector: {matchLabels: {pod: a}}
ingress:
  - from: [{namespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, operator: NotIn, values: ["y"]}]}}]
`))
		e.check(tcp(80, intoXA("x/*", "z/*")))
	}},
	{name: "pod-or-namespace-selector", run: func(e *env) {
		e.apply(policy("x", "or", `
podSelector: {matchLabels: {pod: a}}
ingress:
  - from:
      - namespaceSelector: {matchExpressions: [{key: ns, operator: NotIn, values: [x]}]}
      - podSelector: {matchLabels: {pod: b}}
`))
		e.check(tcp(80, intoXA("y/*", "z/*", "x/b")))
	}},
	{name: "pod-and-namespace-selector", subset: true, run: func(e *env) {
		e.apply(policy("x", "and", `
podSelector: {matchLabels: {pod: a}}
ingress:
  - from:
      - namespaceSelector: {matchExpressions: [{key: ns, operator: NotIn, values: [x]}]}
        podSelector: {matchExpressions: [{key: pod, operator: In, values: [b, c]}]}
`))
		e.check(tcp(80, intoXA("y/b", "y/c", "z/b", "z/c")))
	}},
	{name: "multiple-pod-and-namespace-selectors", run: func(e *env) {
		e.apply(policy("x", "two-ands", `
podSelector: {matchLabels: {pod: a}}
ingress:
  - from:
      - namespaceSelector: {matchLabels: {ns: "y"}}
        podSelector: {matchLabels: {pod: a}}
      - namespaceSelector: {matchExpressions: [{key: ns, operator: Exists}]}
        podSelector: {matchLabels: {pod: c}}
`))
		e.check(tcp(80, intoXA("y/a", "*/c")))
	}},
	{name: "pod-in-other-namespace-by-pod-and-namespace-selector", run: func(e *env) {
		e.apply(policy("x", "y-a", `
podSelector: {matchLabels: {pod: a}}
ingress:
  - from: [{namespaceSelector: {matchLabels: {ns: "y"}}, podSelector: {matchLabels: {pod: a}}}]
`))
		e.check(tcp(80, intoXA("y/a")))
	}},

	// Ports.
	{name: "ports-numbered", run: func(e *env) {
		e.apply(policy("x", "y-on-81", `
podSelector: {matchLabels: {pod: a}}
ingress:
  - from: [{namespaceSelector: {matchLabels: {ns: "y"}}}]
    ports: [{protocol: TCP, port: 81}]
`))
		e.check(tcp(80, intoXA()), tcp(81, intoXA("y/*")))
	}},
	{name: "port-without-protocol-is-tcp", run: func(e *env) {
		e.apply(policy("x", "port-80", `
podSelector: {matchLabels: {pod: a}}
ingress:
  - ports: [{port: 80}]
`))
		e.check(tcp(80, allowAll()), udp(80, intoXA()))
	}},
	{name: "protocol-only-allows-every-port", run: func(e *env) {
		e.apply(policy("x", "any-tcp", `
podSelector: {matchLabels: {pod: a}}
ingress:
  - ports: [{protocol: TCP}]
`))
		e.check(tcp(80, allowAll()), tcp(81, allowAll()), udp(80, intoXA()))
	}},
	{name: "named-port-ingress", run: func(e *env) {
		e.apply(policy("x", "named-81", `
podSelector: {}
ingress:
  - ports: [{protocol: TCP, port: serve-81-tcp}]
`))
		e.check(tcp(80, allowAll().Expect("*", "x/*", false)), tcp(81, allowAll()))
	}},
	{name: "named-port-ingress-from-namespace", subset: true, run: func(e *env) {
		e.apply(policy("x", "y-named-80", `
podSelector: {}
ingress:
  - from: [{namespaceSelector: {matchLabels: {ns: "y"}}}]
    ports: [{protocol: TCP, port: serve-80-tcp}]
`))
		blocked := allowAll().Expect("*", "x/*", false)
		e.check(tcp(80, blocked.Clone().Expect("y/*", "x/*", true)), tcp(81, blocked))
	}},
	{name: "named-port-egress", run: func(e *env) {
		e.apply(policy("x", "egress-named-80", `
podSelector: {}
policyTypes: [Egress]
egress:
  - ports: [{protocol: TCP, port: serve-80-tcp}]
`))
		e.check(tcp(80, allowAll()), tcp(81, allowAll().Expect("x/*", "*", false)))
	}},
	{name: "named-port-with-other-protocol-matches-nothing", run: func(e *env) {
		// serve-81-udp is a UDP port: as a TCP port it names nothing, and
		// must not widen the rule to every port.
		e.apply(policy("x", "wrong-proto", `
podSelector: {matchLabels: {pod: a}}
ingress:
  - ports: [{protocol: TCP, port: serve-81-udp}, {protocol: TCP, port: no-such-port}]
`))
		e.check(tcp(81, intoXA()), tcp(80, intoXA()), udp(81, intoXA()))
	}},
	{name: "end-port-ingress", subset: true, run: func(e *env) {
		e.apply(policy("x", "range-81-82", `
podSelector: {matchLabels: {pod: a}}
ingress:
  - ports: [{protocol: TCP, port: 81, endPort: 82}]
`))
		e.check(tcp(80, intoXA()), tcp(81, allowAll()))
	}},
	{name: "end-port-egress", run: func(e *env) {
		e.apply(policy("x", "egress-79-80", `
podSelector: {matchLabels: {pod: a}}
policyTypes: [Egress]
egress:
  - ports: [{protocol: TCP, port: 79, endPort: 80}]
`))
		e.check(tcp(80, allowAll()), tcp(81, fromXA()))
	}},

	// Protocols.
	{name: "udp-only-never-allows-tcp", subset: true, run: func(e *env) {
		e.apply(policy("x", "udp-81", `
podSelector: {matchLabels: {pod: a}}
ingress:
  - ports: [{protocol: UDP, port: 81}]
`))
		e.check(tcp(81, intoXA()), udp(81, allowAll()), udp(80, intoXA()))
	}},
	{name: "sctp-is-not-tcp", subset: true, run: func(e *env) {
		e.apply(policy("x", "sctp-80", `
podSelector: {matchLabels: {pod: a}}
ingress:
  - ports: [{protocol: SCTP, port: 80}]
`))
		// SCTP probes cost an nft process per look; sctp-egress-isolates
		// shows that an SCTP rule is port-specific.
		e.check(tcp(80, intoXA()), sctp(80, allowAll()))
	}},
	{name: "sctp-egress-isolates", run: func(e *env) {
		e.apply(policy("x", "egress-sctp-81", `
podSelector: {matchLabels: {pod: a}}
policyTypes: [Egress]
egress:
  - ports: [{protocol: SCTP, port: 81}]
`))
		e.check(tcp(81, fromXA()), sctp(81, allowAll()), sctp(80, fromXA()))
	}},

	// Egress.
	{name: "deny-egress-by-pod-selector", run: func(e *env) {
		e.apply(policy("x", "a-sends-nothing", `
podSelector: {matchLabels: {pod: a}}
policyTypes: [Egress]
`))
		e.check(tcp(80, fromXA()))
	}},
	{name: "egress-to-pod-and-namespace-selector", run: func(e *env) {
		e.apply(policy("x", "to-y-b", `
podSelector: {matchLabels: {pod: a}}
policyTypes: [Egress]
egress:
  - to: [{namespaceSelector: {matchLabels: {ns: "y"}}, podSelector: {matchLabels: {pod: b}}}]
`))
		e.check(tcp(80, fromXA("y/b")))
	}},
	{name: "egress-denied-at-client-though-server-allows", subset: true, run: func(e *env) {
		e.apply(policy("x", "a-to-y-a", `
podSelector: {matchLabels: {pod: a}}
policyTypes: [Egress]
egress:
  - to: [{namespaceSelector: {matchLabels: {ns: "y"}}, podSelector: {matchLabels: {pod: a}}}]
`), policy("z", "only-from-x-a", `
podSelector: {}
ingress:
  - from: [{namespaceSelector: {matchLabels: {ns: "x"}}, podSelector: {matchLabels: {pod: a}}}]
`))
		e.check(tcp(80, fromXA("y/a").Expect("*", "z/*", false).Expect("z/*", "z/*", false)))
	}},
	{name: "ingress-and-egress-in-one-policy", run: func(e *env) {
		// x/b may send to x/a (x/a's ingress allows it) but x/a may not
		// send to x/b: ingress rules never satisfy the egress check.
		e.apply(policy("x", "both", `
podSelector: {matchLabels: {pod: a}}
policyTypes: [Ingress, Egress]
ingress:
  - from: [{podSelector: {matchLabels: {pod: b}}}]
egress:
  - to: [{namespaceSelector: {matchLabels: {ns: "y"}}}]
`))
		e.check(tcp(80, intoXA("x/b").Expect("x/a", "*", false).Expect("x/a", "y/*", true)))
	}},
	{name: "ingress-and-egress-controlled-independently", subset: true, run: func(e *env) {
		egress := policy("x", "a-egress-to-b", `
podSelector: {matchLabels: {pod: a}}
policyTypes: [Egress]
egress:
  - to: [{podSelector: {matchLabels: {pod: b}}}]
`)
		ingress := policy("x", "a-ingress-from-y", `
podSelector: {matchLabels: {pod: a}}
policyTypes: [Ingress]
ingress:
  - from: [{namespaceSelector: {matchLabels: {ns: "y"}}}]
`)
		e.apply(egress, ingress)
		e.check(tcp(80, intoXA("y/*").Expect("x/a", "*", false).Expect("x/a", "x/b", true)))
		e.update("delete the egress policy", func() { e.apply(ingress) })
		e.check(tcp(80, intoXA("y/*")))
	}},

	// ipBlock.
	{name: "ipblock-egress-cidr", run: func(e *env) {
		e.apply(policy("x", "to-y-b-ip", `
podSelector: {matchLabels: {pod: a}}
policyTypes: [Egress]
egress:
  - to: `+flow(e.hostBlocks("y/b"))+`
`))
		e.check(tcp(80, fromXA("y/b")))
	}},
	{name: "ipblock-egress-except", subset: true, run: func(e *env) {
		e.apply(policy("x", "all-but-y-b", `
podSelector: {matchLabels: {pod: a}}
policyTypes: [Egress]
egress:
  - to: `+flow(e.clusterBlocksExcept("y/b"))+`
`))
		e.check(tcp(80, allowAll().Expect("x/a", "y/b", false)))
	}},
	{name: "ipblock-overlapping-except-across-policies", run: func(e *env) {
		e.apply(policy("x", "all-but-y-b", `
podSelector: {matchLabels: {pod: a}}
policyTypes: [Egress]
egress:
  - to: `+flow(e.clusterBlocksExcept("y/b"))+`
`), policy("x", "y-b-only", `
podSelector: {matchLabels: {pod: a}}
policyTypes: [Egress]
egress:
  - to: `+flow(e.hostBlocks("y/b"))+`
`))
		e.check(tcp(80, allowAll()))
	}},
	{name: "ipblock-except-never-removes-another-peer", run: func(e *env) {
		// One rule, two peers per family: one's except must not remove what
		// the other allows. Egress to x/a's port 81 only, to make the
		// isolation visible.
		e.apply(policy("x", "union", `
podSelector: {matchLabels: {pod: a}}
policyTypes: [Egress]
egress:
  - to: `+flow(append(e.clusterBlocksExcept("y/b"), e.hostBlocks("y/b")...))+`
    ports: [{protocol: TCP, port: 80}]
`))
		e.check(tcp(80, allowAll()), tcp(81, fromXA()))
	}},
	{name: "ipblock-ingress-node-pod-cidr", run: func(e *env) {
		n1 := e.c.Nodes()[0]
		e.apply(policy("x", "from-node1-pods", fmt.Sprintf(`
podSelector: {matchLabels: {pod: a}}
ingress:
  - from: [{ipBlock: {cidr: %q}}, {ipBlock: {cidr: %q}}]
`, n1.PodCIDRv4(), n1.PodCIDRv6())))
		want := intoXA()
		for _, p := range e.pods {
			if p.Node() == n1 {
				want.Set(p.Key(), "x/a", true)
			}
		}
		e.check(tcp(80, want))
	}},

	// Stacked policies and precedence.
	{name: "stacked-policies-overlapping-selectors", run: func(e *env) {
		on81 := policy("x", "y-on-81", `
podSelector: {matchLabels: {pod: a}}
ingress:
  - from: [{namespaceSelector: {matchLabels: {ns: "y"}}}]
    ports: [{protocol: TCP, port: 81}]
`)
		e.apply(on81)
		e.check(tcp(80, intoXA()), tcp(81, intoXA("y/*")))
		e.update("add a second policy for port 80", func() {
			e.apply(on81, policy("x", "y-on-80", `
podSelector: {matchExpressions: [{key: pod, operator: In, values: [a, b]}]}
ingress:
  - from: [{namespaceSelector: {matchLabels: {ns: "y"}}}]
    ports: [{protocol: TCP, port: 80}]
`))
		})
		// The second policy also selects x/b, which becomes isolated:
		// reachable from y on 80 only.
		e.check(tcp(80, intoXA("y/*").Expect("*", "x/b", false).Expect("y/*", "x/b", true)),
			tcp(81, intoXA("y/*").Expect("*", "x/b", false)))
	}},
	{name: "ingress-allow-all-takes-precedence", run: func(e *env) {
		port80 := policy("x", "b-on-80", `
podSelector: {matchLabels: {pod: a}}
ingress:
  - from: [{podSelector: {matchLabels: {pod: b}}}]
    ports: [{protocol: TCP, port: 80}]
`)
		e.apply(port80)
		e.check(tcp(80, intoXA("x/b")), tcp(81, intoXA()))
		e.update("add an allow-all ingress policy", func() {
			e.apply(port80, policy("x", "allow-all", `
podSelector: {matchLabels: {pod: a}}
ingress: [{}]
`))
		})
		e.check(tcp(80, allowAll()), tcp(81, allowAll()))
	}},
	{name: "egress-allow-all-takes-precedence", run: func(e *env) {
		port80 := policy("x", "to-b-on-80", `
podSelector: {matchLabels: {pod: a}}
policyTypes: [Egress]
egress:
  - to: [{podSelector: {matchLabels: {pod: b}}}]
    ports: [{protocol: TCP, port: 80}]
`)
		e.apply(port80)
		e.check(tcp(80, fromXA("x/b")), tcp(81, fromXA()))
		e.update("add an allow-all egress policy", func() {
			e.apply(port80, policy("x", "allow-all", `
podSelector: {matchLabels: {pod: a}}
policyTypes: [Egress]
egress: [{}]
`))
		})
		e.check(tcp(80, allowAll()), tcp(81, allowAll()))
	}},

	// Updates.
	{name: "update-edit-policy", run: func(e *env) {
		e.apply(policy("x", "edited", `
podSelector: {matchLabels: {pod: a}}
ingress:
  - from: [{podSelector: {matchLabels: {pod: b}}}]
`))
		e.check(tcp(80, intoXA("x/b")))
		e.update("edit the policy to allow pod c instead", func() {
			e.apply(policy("x", "edited", `
podSelector: {matchLabels: {pod: a}}
ingress:
  - from: [{podSelector: {matchLabels: {pod: c}}}]
`))
		})
		e.check(tcp(80, intoXA("x/c")))
	}},
	{name: "update-namespace-labels", subset: true, run: func(e *env) {
		e.apply(policy("x", "from-updated-ns", `
podSelector: {matchLabels: {pod: a}}
ingress:
  - from: [{namespaceSelector: {matchLabels: {ns2: updated}}}]
`))
		e.check(tcp(80, intoXA()))
		e.update(`label namespace y ns2=updated`, func() {
			e.c.SetNamespaceLabels("y", map[string]string{"ns": "y", "ns2": "updated"})
			e.relabel()
		})
		e.check(tcp(80, intoXA("y/*")))
		e.update(`remove the label again`, func() {
			e.c.SetNamespaceLabels("y", nil)
			e.relabel()
		})
		e.check(tcp(80, intoXA()))
	}},
	{name: "update-pod-labels-allow", run: func(e *env) {
		e.apply(policy("x", "from-updated-pod", `
podSelector: {matchLabels: {pod: a}}
ingress:
  - from: [{namespaceSelector: {}, podSelector: {matchLabels: {pod2: updated}}}]
`))
		e.check(tcp(80, intoXA()))
		e.update(`label pod z/b pod2=updated`, func() {
			e.c.SetPodLabels("z/b", map[string]string{"pod": "b", "pod2": "updated"})
			e.relabel()
		})
		e.check(tcp(80, intoXA("z/b")))
	}},
	{name: "update-pod-labels-isolate", subset: true, run: func(e *env) {
		e.apply(policy("x", "isolate-labelled", `
podSelector: {matchLabels: {target: isolated}}
policyTypes: [Ingress]
`))
		e.check(tcp(80, allowAll()))
		e.update(`label pod x/a target=isolated`, func() {
			e.c.SetPodLabels("x/a", map[string]string{"pod": "a", "target": "isolated"})
			e.relabel()
		})
		e.check(tcp(80, intoXA()))
	}},
	{name: "update-delete-policy", subset: true, run: func(e *env) {
		e.apply(denyAllX)
		e.check(tcp(80, allowAll().Expect("x/*", "*", false).Expect("*", "x/*", false)))
		e.update("delete the policy", func() { e.apply() })
		e.check(tcp(80, allowAll()))
	}},
}
