package main

import (
	"bytes"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nftpolicy/nftpolicy/internal/netns"
	"github.com/nftpolicy/nftpolicy/internal/testbin"
)

// guardX is an Admin tier ClusterNetworkPolicy for namespace x: web from
// y is passed on to NetworkPolicy, everything else from y is denied.
const guardX = `apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: guard-x}
spec:
  tier: Admin
  priority: 10
  subject:
    namespaces: {matchLabels: {ns: x}}
  ingress:
    - name: web-to-networkpolicy
      action: Pass
      from: [{namespaces: {matchLabels: {ns: "y"}}}]
      protocols: [{tcp: {destinationPort: {number: 80}}}]
    - name: nothing-else-from-y
      action: Deny
      from: [{namespaces: {matchLabels: {ns: "y"}}}]
`

// A ClusterNetworkPolicy read from manifests is enforced with real
// packets, counted by rule in the metrics, and explained by name.
func TestIntegrationClusterPolicyMetricsAndExplain(t *testing.T) {
	c, node, dir := packetCluster(t)
	writeFile(t, filepath.Join(dir, "guard.yaml"), guardX)
	addr, err := testbin.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, "--manifests", dir, "--node", "node-1", "--netns", node.NetnsName(), "--metrics-addr", addr)
	d.waitGeneration(t, 0)
	const (
		passed = `nftpolicy_cluster_policy_connections_total{action="Pass",direction="ingress",policy="guard-x",rule="0",tier="admin"}`
		denied = `nftpolicy_cluster_policy_connections_total{action="Deny",direction="ingress",policy="guard-x",rule="1",tier="admin"}`
	)
	before := scrape(t, addr)
	for _, s := range []string{passed, denied} {
		if v, ok := before[s]; !ok || v != 0 {
			t.Errorf("before any packet: %s = %v (present %v), want 0", s, v, ok)
		}
	}
	// Not isolated by NetworkPolicy, x/a takes what the admin tier passes.
	checkProbes(t, c, []packetProbe{
		{"y/a", "x/a", netns.IPv4, netns.TCP, 80, true},
		{"y/a", "x/a", netns.IPv6, netns.TCP, 81, false},
		{"x/b", "x/a", netns.IPv4, netns.TCP, 81, true},
	})
	after := scrape(t, addr)
	for s, want := range map[string]float64{passed: 1, denied: 1} {
		if got := after[s] - before[s]; got != want {
			t.Errorf("%s grew by %v, want %v", s, got, want)
		}
	}

	// NetworkPolicy now isolates x and allows nothing: what the admin
	// tier passes is dropped, by NetworkPolicy.
	writeFile(t, filepath.Join(dir, "deny.yaml"), denyIngressX)
	d.waitGeneration(t, 1)
	checkProbes(t, c, []packetProbe{{"y/a", "x/a", netns.IPv4, netns.TCP, 80, false}})

	var stdout, stderr bytes.Buffer
	if code := run([]string{"explain", "--manifests", dir, "--node", "node-1", "--from", "y/a", "--to", "x/a", "--proto", "tcp", "--port", "81"}, &stdout, &stderr); code != 0 {
		t.Fatalf("explain: exit %d\n%s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"verdict: drop", "ClusterNetworkPolicy guard-x (admin) ingress[1] nothing-else-from-y: Deny", "dropped by the admin tier"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain lacks %q:\n%s", want, out)
		}
	}
}

// A pod's connections to its own node end there, through the input hook:
// an admin egress Deny to nodes stops them all the same, and a pod the
// policy does not select still reaches the node.
func TestIntegrationClusterPolicyOwnNode(t *testing.T) {
	c, node, dir := packetCluster(t)
	if err := c.ServeOnNode(node); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "no-nodes.yaml"), `apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: no-nodes}
spec:
  tier: Admin
  priority: 10
  subject: {namespaces: {matchLabels: {ns: x}}}
  egress: [{name: deny-nodes, action: Deny, to: [{nodes: {}}]}]
`)
	d := startDaemon(t, "--manifests", dir, "--node", "node-1", "--netns", node.NetnsName())
	d.waitGeneration(t, 0)
	for _, addr := range []netip.Addr{node.IPv4(), node.IPv6()} {
		for _, p := range []struct {
			pod  string
			want bool
		}{{"x/a", false}, {"y/a", true}} {
			got := c.Probe(c.Pod(p.pod), addr, netns.TCP, 80, probeTimeout)
			if !got && p.want {
				got = c.Probe(c.Pod(p.pod), addr, netns.TCP, 80, probeTimeout) // a lost packet, not policy
			}
			if got != p.want {
				t.Errorf("%s → its node %s tcp/80: allowed=%v, want %v", p.pod, addr, got, p.want)
			}
		}
	}
}
