package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nftpolicy/nftpolicy/internal/netns"
)

// The adversarial pass's two ways a broken manifest opened traffic at a
// fresh start (no table to hold): a rejected Namespace whose pods matched
// a NotIn namespace selector, and a Pod defined twice with differing
// addresses that was left out. Both fail closed now: the namespace is
// quarantined (no namespace selector on labels names its pods), the pod is
// quarantined at every address its definitions give.

const (
	// bNotProd lets x/b in on TCP 81 from namespaces whose env is not prod.
	bNotProd = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: x, name: b-notprod}
spec:
  podSelector: {matchLabels: {pod: b}}
  ingress:
    - from: [{namespaceSelector: {matchExpressions: [{key: env, operator: NotIn, values: [prod]}]}}]
      ports: [{protocol: TCP, port: 81}]
`
	// zMarker isolates z/a and allows it everything: only a name to wait
	// for in the listing.
	zMarker = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: z, name: marker}
spec:
  podSelector: {matchLabels: {pod: a}}
  ingress: [{}]
`
	denyB = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: x, name: deny-b}
spec:
  podSelector: {matchLabels: {pod: b}}
  policyTypes: [Ingress]
`
)

// brokenNSCluster is one routed node with the pods given and a manifests
// directory holding the policies given (file name, content, ...); the
// test writes the cluster file, broken as it needs it.
func brokenNSCluster(t *testing.T, pods []string, policies ...string) (c *netns.Cluster, node *netns.Node, dir string) {
	t.Helper()
	c = netns.NewTestCluster(t, netns.Options{Name: "npn", Timeout: probeTimeout})
	node, err := c.AddNode("node-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range pods {
		ns, name, _ := strings.Cut(key, "/")
		if _, err := c.AddPod(node, ns, name); err != nil {
			t.Fatal(err)
		}
	}
	dir = t.TempDir()
	for i := 0; i+1 < len(policies); i += 2 {
		writeFile(t, filepath.Join(dir, policies[i]), policies[i+1])
	}
	return c, node, dir
}

// prodButInvalid are labels env: prod next to an invalid value (a trailing
// space): the manifests source rejects the Namespace.
var prodButInvalid = map[string]string{"env": "prod", "bad": "x "}

func TestIntegrationRejectedNamespaceQuarantined(t *testing.T) {
	c, node, dir := brokenNSCluster(t, []string{"x/b", "y/a", "z/a"}, "b-notprod.yaml", bNotProd)
	c.SetNamespaceLabels("y", prodButInvalid)
	writeFile(t, filepath.Join(dir, "cluster.yaml"), c.Manifests())

	// A fresh start: no last good version of y.
	d := quarantineDaemon(t, node, dir)
	d.waitReadyz(t, http.StatusServiceUnavailable, "Namespace y: metadata.labels", "the namespace stays with only the labels that are valid, quarantined", "synced generation")
	checkProbes(t, c, []packetProbe{
		{"y/a", "x/b", netns.IPv4, netns.TCP, 81, false}, // the bug: open
		{"y/a", "x/b", netns.IPv6, netns.TCP, 81, false},
		{"y/a", "x/b", netns.IPv4, netns.TCP, 80, false}, // x/b isolated
		{"z/a", "x/b", netns.IPv4, netns.TCP, 81, true},  // z has no env
		{"y/a", "z/a", netns.IPv4, netns.TCP, 80, true},  // y/a itself is not isolated
	})

	// Without a restart: a pod in a new namespace w whose manifest is
	// rejected (no last good version of w either).
	if _, err := c.AddPod(node, "w", "a"); err != nil {
		t.Fatal(err)
	}
	c.SetNamespaceLabels("w", prodButInvalid)
	writeFile(t, filepath.Join(dir, "cluster.yaml"), c.Manifests())
	writeFile(t, filepath.Join(dir, "z-marker.yaml"), zMarker)
	waitListing(t, node.NetnsName(), "w/a and z/marker programmed", func(l string) bool { return strings.Contains(l, "z/marker") })
	d.waitReadyz(t, http.StatusServiceUnavailable, "Namespace w: metadata.labels", "Namespace y: metadata.labels")
	checkProbes(t, c, []packetProbe{
		{"w/a", "x/b", netns.IPv4, netns.TCP, 81, false}, // the bug: open
		{"w/a", "x/b", netns.IPv6, netns.TCP, 81, false},
		{"z/a", "x/b", netns.IPv4, netns.TCP, 81, true},
	})

	// Fixed: y and w are env: prod, which NotIn [prod] keeps out anyway;
	// without env, they are let in.
	c.SetNamespaceLabels("y", map[string]string{"env": "prod"})
	c.SetNamespaceLabels("w", map[string]string{"team": "w"})
	writeFile(t, filepath.Join(dir, "cluster.yaml"), c.Manifests())
	d.waitGeneration(t, 0)
	checkProbes(t, c, []packetProbe{
		{"y/a", "x/b", netns.IPv4, netns.TCP, 81, false},
		{"w/a", "x/b", netns.IPv4, netns.TCP, 81, true},
	})
}

func TestIntegrationFreshStartQuarantinesUnsettledPod(t *testing.T) {
	c, node, dir := brokenNSCluster(t, []string{"x/b", "y/a"}, "deny-b.yaml", denyB)
	writeFile(t, filepath.Join(dir, "cluster.yaml"), c.Manifests())
	// A second definition of x/b at another address.
	writeFile(t, filepath.Join(dir, "x-b-copy.yaml"), `apiVersion: v1
kind: Pod
metadata: {namespace: x, name: b, labels: {pod: b}}
spec: {nodeName: node-1}
status: {phase: Running, podIPs: [{ip: "10.250.0.9"}]}
`)
	d := quarantineDaemon(t, node, dir)
	d.waitReadyz(t, http.StatusServiceUnavailable, "Pod x/b: duplicate object", "disagree on where the pod is", "synced generation")
	waitListing(t, node.NetnsName(), "x/b quarantined", func(l string) bool {
		return strings.Contains(l, "x/b: quarantined") && strings.Contains(l, "10.250.0.9")
	})
	checkProbes(t, c, []packetProbe{
		{"y/a", "x/b", netns.IPv4, netns.TCP, 80, false}, // the bug: open
		{"y/a", "x/b", netns.IPv6, netns.TCP, 80, false},
		{"x/b", "y/a", netns.IPv4, netns.TCP, 80, false}, // quarantined: egress too
	})

	// Fixed: x/b back under deny-b alone.
	writeFile(t, filepath.Join(dir, "x-b-copy.yaml"), "")
	d.waitGeneration(t, 0)
	waitListing(t, node.NetnsName(), "x/b released", func(l string) bool { return !strings.Contains(l, "quarantined") })
	checkProbes(t, c, []packetProbe{
		{"y/a", "x/b", netns.IPv4, netns.TCP, 80, false},
		{"x/b", "y/a", netns.IPv4, netns.TCP, 80, true},
	})
}

// What still fails open at a fresh start with no table to hold (see the
// k8s package doc): objects that cannot be read at all, a kind typo or a
// file that does not parse. Nothing can stand in for what nobody can read,
// so x/deny-b is simply not there; /readyz must name both, so that the
// node is not taken for enforcing what the files say.
func TestIntegrationFreshStartNamesUnreadableObjects(t *testing.T) {
	c, node, dir := brokenNSCluster(t, []string{"x/b", "y/a"},
		"deny-b.yaml", strings.Replace(denyB, "kind: NetworkPolicy", "kind: NetworkPolicyy", 1),
		"broken.yaml", "kind: NetworkPolicy\n  metadata: [\n")
	writeFile(t, filepath.Join(dir, "cluster.yaml"), c.Manifests())
	d := quarantineDaemon(t, node, dir)
	d.waitReadyz(t, http.StatusServiceUnavailable, "synced generation",
		"deny-b.yaml doc 0", "unknown kind NetworkPolicyy", "broken.yaml")
}
