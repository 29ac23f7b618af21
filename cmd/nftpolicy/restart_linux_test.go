package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	first.Kill()

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
		d.Kill()
	}

	// Held, and the kept table deleted by someone else: there is nothing
	// left to keep, and a table nobody repairs is worse than what loads,
	// so what loads is programmed (and the daemon stays unready).
	writeFile(t, filepath.Join(dir, "policies.yaml"), clusterFile(t, "policies.yaml", "kind: NetworkPolicy\nmetadata:\n  namespace: x\n  name: default-deny", "kind: NetworkPolicyy\nmetadata:\n  namespace: x\n  name: default-deny"))
	held := startDaemon(t, args...)
	held.waitReadyz(t, 503, "keeping the table programmed before this start")
	testns.Nft(t, ns, "", "delete", "table", "inet", "nftpolicy")
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, _ := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "inet", "nftpolicy").CombinedOutput()
		if strings.Contains(string(out), "chain filter-forward") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no table programmed again within 15s after the kept one was deleted:\n%s", held.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	held.Kill()

	// Fixed: programmed, without x/egress-to-y, and ready.
	writeFile(t, filepath.Join(dir, "policies.yaml"), clusterFile(t, "policies.yaml", "name: egress-to-y", "name: egress-to-z"))
	d := startDaemon(t, args...)
	d.waitGeneration(t, 0)
	waitListing(t, ns, "the fixed manifests programmed", func(l string) bool {
		return strings.Contains(l, "x/egress-to-z") && !strings.Contains(l, "x/egress-to-y")
	})
}
