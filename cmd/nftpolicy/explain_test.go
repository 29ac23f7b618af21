package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// explain on the checked-in cluster: the verdict and the rule that allows;
// a zoned address and a source holding errors are said to be what they
// are, not explained as if nothing were wrong.
func TestExplainCommand(t *testing.T) {
	explain := func(dir string, args ...string) (string, string, int) {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"explain", "--manifests", dir, "--node", "node-1"}, args...), &stdout, &stderr)
		return stdout.String(), stderr.String(), code
	}
	out, errs, code := explain("testdata/cluster", "--from", "x/a", "--to", "y/b", "--proto", "tcp", "--port", "8000")
	if code != 0 || !strings.Contains(out, "verdict: accept") || !strings.Contains(out, "allowed by x/egress-to-y egress[0]") {
		t.Errorf("allowed flow: exit %d\n%s%s", code, out, errs)
	}
	out, errs, code = explain("testdata/cluster", "--from", "x/a", "--to", "y/b", "--proto", "udp", "--port", "53")
	if code != 0 || !strings.Contains(out, "verdict: drop") || !strings.Contains(out, "no rule of these policies allows it") {
		t.Errorf("dropped flow: exit %d\n%s%s", code, out, errs)
	}

	// A zone scopes an address to an interface of this host; policy never
	// sees one, and the same address with and without it must not get two
	// verdicts.
	_, errs, code = explain("testdata/cluster", "--from", "fd00::1%eth0", "--to", "x/a", "--port", "80")
	if code == 0 || !strings.Contains(errs, "zone") {
		t.Errorf("a zoned address: exit %d, %q; want an error naming the zone", code, errs)
	}

	// A rejected edit: the daemon enforces the last good version, explain
	// reads the files. It says so, and exits 3 as dump does.
	dir := t.TempDir()
	for _, f := range []string{"namespaces.yaml", "pods.yaml", "policies.yaml"} {
		b, err := os.ReadFile(filepath.Join("testdata/cluster", f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "policies.yaml" {
			b = append(b, []byte("---\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {namespace: \"y\", name: broken}\nspec:\n  podSelector: {}\n  ingress: [{ports: [{port: 70000}]}]\n")...)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, errs, code = explain(dir, "--from", "x/a", "--to", "y/b", "--proto", "tcp", "--port", "8000")
	if code != exitPartial || !strings.Contains(out, "note:    the sources hold errors") || !strings.Contains(errs, "y/broken") {
		t.Errorf("a source with errors: exit %d, want %d\n%s%s", code, exitPartial, out, errs)
	}
}
