package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nftpolicy/nftpolicy/internal/netns"
)

// Pods whose labels a broken manifest hides are quarantined, and a
// restart with such an error programs the current manifests at once: the
// start-up hold is for errors that lose objects with nothing failing
// closed in their place (TestIntegrationRestartWithBrokenManifestsKeepsTable).

const (
	denyA = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: x, name: deny-a}
spec:
  podSelector: {matchLabels: {pod: a}}
  policyTypes: [Ingress]
`
	denyC = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: "y", name: deny-c}
spec:
  podSelector: {matchLabels: {pod: c}}
  policyTypes: [Ingress]
`
	// allowUnlabelled grants every ingress to the pods of x without a pod
	// label: a stand-in that lost an invalid pod label would be one.
	allowUnlabelled = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: x, name: allow-unlabelled}
spec:
  podSelector: {matchExpressions: [{key: pod, operator: DoesNotExist}]}
  ingress: [{}]
`
	denyAllX = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: x, name: deny-all}
spec:
  podSelector: {}
  policyTypes: [Ingress]
`
)

// quarantineCluster is one routed node with pods x/a, x/b and y/c, and a
// manifests directory holding them and the policies given (file name,
// content, ...).
func quarantineCluster(t *testing.T, policies ...string) (c *netns.Cluster, node *netns.Node, dir string) {
	t.Helper()
	c, node, dir = brokenNSCluster(t, []string{"x/a", "x/b", "y/c"}, policies...)
	writeFile(t, filepath.Join(dir, "cluster.yaml"), c.Manifests())
	return c, node, dir
}

func quarantineDaemon(t *testing.T, node *netns.Node, dir string) *daemon {
	t.Helper()
	return startDaemon(t, "--manifests", dir, "--node", "node-1", "--netns", node.NetnsName(),
		"--poll", "20ms", "--debounce", "10ms", "--max-delay", "50ms")
}

// hideLabel gives x/a the invalid label value "a " (a trailing space): the
// manifests source rejects the Pod, and nothing can tell its true labels.
func hideLabel(t *testing.T, c *netns.Cluster, dir string) {
	t.Helper()
	c.SetPodLabels("x/a", map[string]string{"pod": "a "})
	writeFile(t, filepath.Join(dir, "cluster.yaml"), c.Manifests())
}

// The adversarial pass's reproduction: x/a's label broken while the daemon
// runs (it keeps x/a's last good version), the daemon killed and started
// again, and a new deny added for y/c. The new deny must be enforced at
// once, not after someone fixes the unrelated pod, and x/a stays closed.
func TestIntegrationRestartWithQuarantinedPodProgramsNewPolicies(t *testing.T) {
	c, node, dir := quarantineCluster(t, "deny-a.yaml", denyA)
	first := quarantineDaemon(t, node, dir)
	first.waitGeneration(t, 0)
	checkProbes(t, c, []packetProbe{
		{"x/b", "x/a", netns.IPv4, netns.TCP, 80, false},
		{"x/a", "y/c", netns.IPv4, netns.TCP, 80, true},
	})

	hideLabel(t, c, dir)
	first.waitReadyz(t, http.StatusServiceUnavailable, "Pod x/a: metadata.labels", "its last good version stays in effect")
	checkProbes(t, c, []packetProbe{{"x/b", "x/a", netns.IPv4, netns.TCP, 80, false}})
	first.Kill()

	d := quarantineDaemon(t, node, dir)
	// Programmed at once, not held: the pod's error has a stand-in.
	waitListing(t, node.NetnsName(), "x/a quarantined after the restart", func(l string) bool {
		return strings.Contains(l, "x/a: quarantined")
	})
	body := d.waitReadyz(t, http.StatusServiceUnavailable, "Pod x/a: metadata.labels", "quarantined", "synced generation")
	if strings.Contains(body, "keeping the table programmed before this start") {
		t.Errorf("the restarted daemon holds the old table for an error with a stand-in:\n%s", body)
	}

	writeFile(t, filepath.Join(dir, "deny-c.yaml"), denyC)
	waitListing(t, node.NetnsName(), "the new policy y/deny-c programmed", func(l string) bool {
		return strings.Contains(l, "y/deny-c")
	})
	checkProbes(t, c, []packetProbe{
		{"x/a", "y/c", netns.IPv4, netns.TCP, 80, false}, // the new deny, and x/a's quarantine
		{"x/b", "y/c", netns.IPv4, netns.TCP, 80, false}, // the new deny
		{"x/b", "x/a", netns.IPv6, netns.TCP, 80, false}, // x/a quarantined
		{"x/a", "x/b", netns.IPv4, netns.TCP, 80, false}, // x/a quarantined, egress too
		{"y/c", "x/b", netns.IPv4, netns.TCP, 80, true},  // x/b is not isolated
	})
	d.waitReadyz(t, http.StatusServiceUnavailable, "Pod x/a: metadata.labels")

	// Fixed: ready, x/a back under deny-a alone.
	c.SetPodLabels("x/a", nil)
	writeFile(t, filepath.Join(dir, "cluster.yaml"), c.Manifests())
	d.waitGeneration(t, 0)
	waitListing(t, node.NetnsName(), "x/a released", func(l string) bool { return !strings.Contains(l, "quarantined") })
	checkProbes(t, c, []packetProbe{
		{"x/a", "x/b", netns.IPv4, netns.TCP, 80, true},
		{"x/b", "x/a", netns.IPv4, netns.TCP, 80, false},
	})
}

// With no table before (a fresh node, or after cleanup), a pod whose label
// is broken from the start stays isolated by the policy that selects it by
// that label: quarantined, rather than a stand-in without the label that
// deny-a no longer selects.
func TestIntegrationFreshStartQuarantinesBrokenPod(t *testing.T) {
	c, node, dir := quarantineCluster(t, "deny-a.yaml", denyA)
	hideLabel(t, c, dir)
	d := quarantineDaemon(t, node, dir)
	d.waitReadyz(t, http.StatusServiceUnavailable, "Pod x/a: metadata.labels", "quarantined", "synced generation")
	checkProbes(t, c, []packetProbe{
		{"x/b", "x/a", netns.IPv4, netns.TCP, 80, false},
		{"x/b", "x/a", netns.IPv6, netns.UDP, 81, false},
		{"y/c", "x/a", netns.IPv4, netns.TCP, 80, false},
		{"x/a", "y/c", netns.IPv4, netns.TCP, 80, false},
		{"x/b", "y/c", netns.IPv4, netns.TCP, 80, true},
	})
}

// A selector on the absence of a label selects the stand-in of a pod that
// lost that label, not the pod: allow-unlabelled must not open x/a, whose
// true pod label is only unreadable.
func TestIntegrationQuarantinedPodNotSelectedByAbsence(t *testing.T) {
	c, node, dir := quarantineCluster(t, "deny-all.yaml", denyAllX, "allow-unlabelled.yaml", allowUnlabelled)
	hideLabel(t, c, dir)
	d := quarantineDaemon(t, node, dir)
	d.waitReadyz(t, http.StatusServiceUnavailable, "Pod x/a: metadata.labels", "synced generation")
	checkProbes(t, c, []packetProbe{
		{"x/b", "x/a", netns.IPv4, netns.TCP, 80, false},
		{"y/c", "x/a", netns.IPv6, netns.TCP, 80, false},
		{"y/c", "x/b", netns.IPv4, netns.TCP, 80, false}, // deny-all, x/b has its pod label
	})
}
