package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dump reads ClusterNetworkPolicies of both served versions from
// --manifests; a rejected one is named in the summary and in the exit
// code, and a directory holding only ClusterNetworkPolicies is not empty.
func TestDumpClusterNetworkPolicies(t *testing.T) {
	const cnps = `apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: deny-x-to-y}
spec:
  tier: Admin
  priority: 10
  subject: {namespaces: {matchLabels: {kubernetes.io/metadata.name: x}}}
  egress: [{name: no-y, action: Deny, to: [{namespaces: {matchLabels: {kubernetes.io/metadata.name: "y"}}}]}]
---
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: baseline}
spec: {tier: Baseline, priority: 1, subject: {namespaces: {}}, ingress: [{action: Deny, from: [{namespaces: {}}]}]}
`
	const bad = `apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: broken}
spec: {tier: Admin, priority: 1, subject: {namespaces: {}}, egress: [{action: Deny, to: [{networks: [10.0.0.1/8]}]}]}
`
	write := func(dir, name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dump := func(dir string) (int, string, string) {
		var stdout, stderr strings.Builder
		code := run([]string{"dump", "--manifests", dir, "--node", "node-1", "--priority", "-5", "--log-level", "error"}, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}

	only := t.TempDir()
	write(only, "cnp.yaml", cnps)
	// Not "holds no objects" (exit 1); no object names the node, though.
	if code, _, stderr := dump(only); code != exitPartial || !strings.Contains(stderr, "matches no Node") {
		t.Errorf("only ClusterNetworkPolicies: exit %d, want %d (an unknown node, no pod here)\nstderr:\n%s", code, exitPartial, stderr)
	}

	dir := t.TempDir()
	for _, f := range []string{"namespaces.yaml", "pods.yaml", "policies.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", "cluster", f))
		if err != nil {
			t.Fatal(err)
		}
		write(dir, f, string(data))
	}
	write(dir, "cnp.yaml", cnps)
	write(dir, "z-bad.yaml", bad)
	code, out, stderr := dump(dir)
	if code != exitPartial || !strings.Contains(stderr, `z-bad.yaml doc 0: ClusterNetworkPolicy broken: spec.egress[0].to[0].networks[0]: "10.0.0.1/8" must be a masked CIDR`) {
		t.Errorf("exit %d, want %d naming the rejected ClusterNetworkPolicy; stderr:\n%s", code, exitPartial, stderr)
	}
	if !strings.Contains(out, "deny-x-to-y") || strings.Contains(out, "broken") {
		t.Errorf("the ruleset should hold deny-x-to-y and not broken:\n%s", out)
	}
}
