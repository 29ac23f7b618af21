package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// A daemon restarted (kill -9, an upgrade) while the manifests hold errors
// has no last good version of them: a kind typo, a file that does not
// parse or an invalid edit would drop objects and open pods. It keeps the
// table the daemon before it programmed, says why on /readyz, and
// programs the files once they load cleanly.
func TestIntegrationRestartWithBrokenManifestsKeepsTable(t *testing.T) {
	ns := testns.New(t, "nftpt")
	args := ownerArgs(t, ns)
	dir := args[1]
	first := startDaemon(t, args...)
	first.waitGeneration(t, 0)
	before := testns.ListTable(t, ns, "nftpolicy")
	if !strings.Contains(before, "x/default-deny") {
		t.Fatalf("x/default-deny is not programmed:\n%s", before)
	}
	first.cmd.Process.Kill()
	first.wait()

	for _, broken := range []struct{ name, policies string }{
		{"a kind typo", clusterFile(t, "policies.yaml", "kind: NetworkPolicy\nmetadata:\n  namespace: x\n  name: default-deny", "kind: NetworkPolicyy\nmetadata:\n  namespace: x\n  name: default-deny")},
		{"a file that does not parse", "kind: NetworkPolicy\n  metadata: [\n"},
	} {
		writeFile(t, filepath.Join(dir, "policies.yaml"), broken.policies)
		d := startDaemon(t, args...)
		d.waitReadyz(t, 503, "keeping the table programmed before this start")
		ownerRecord(t, testns.ListTable(t, ns, "nftpolicy")) // the table is there
		if after := testns.ListTable(t, ns, "nftpolicy"); !strings.Contains(after, "x/default-deny") {
			t.Errorf("%s: the restarted daemon dropped x/default-deny:\n%s", broken.name, after)
		}
		d.cmd.Process.Kill()
		d.wait()
	}

	// Fixed: programmed, without x/egress-to-y, and ready.
	writeFile(t, filepath.Join(dir, "policies.yaml"), clusterFile(t, "policies.yaml", "name: egress-to-y", "name: egress-to-z"))
	d := startDaemon(t, args...)
	d.waitGeneration(t, 0)
	waitListing(t, ns, "the fixed manifests programmed", func(l string) bool {
		return strings.Contains(l, "x/egress-to-z") && !strings.Contains(l, "x/egress-to-y")
	})
}
