package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// Two `run` processes on one netns used to take turns rewriting the table,
// both Ready. The second is refused, naming the owner; with --take-over it
// takes the table and the first goes unready, saying who took over, and
// writes no more; apply will not write over a running daemon's table
// either.
func TestIntegrationSecondDaemonOnOneNetns(t *testing.T) {
	ns := testns.New(t, "nftpt")
	dir := t.TempDir()
	for _, f := range []string{"namespaces.yaml", "pods.yaml", "policies.yaml"} {
		copyFile(t, filepath.Join(clusterDir, f), filepath.Join(dir, f))
	}
	args := []string{"--manifests", dir, "--node", "node-1", "--netns", ns}
	first := startDaemon(t, args...)
	first.waitGeneration(t, 0)
	firstOwner := ownerRecord(t, testns.ListTable(t, ns, "nftpolicy"))

	second := startDaemon(t, args...)
	done := make(chan error, 1)
	go func() { done <- second.cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(second.logText(), "owner=") {
			t.Errorf("second daemon: exit %v, want a failure naming the owner:\n%s", err, second.logText())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("second daemon still running after 15s:\n%s", second.logText())
	}
	if code, _ := first.readyz(); code != 200 {
		t.Errorf("first daemon not ready after the refused second: %d", code)
	}
	if code, _, stderr := nftpolicy(t, append([]string{"apply"}, args...)...); code == 0 || !strings.Contains(stderr, "owner=") {
		t.Errorf("apply over a running daemon's table: exit %d, %s; want refused naming the owner", code, stderr)
	}

	third := startDaemon(t, append(args, "--take-over")...)
	third.waitGeneration(t, 0)
	body := first.waitReadyz(t, 503, "owner=")
	t.Logf("first daemon after the take-over: %s", strings.TrimSpace(body))
	// A change is programmed by the new owner, and the table keeps an
	// owner record.
	before := testns.ListTable(t, ns, "nftpolicy")
	// Not every policy at once: that keeps the last programmed state.
	writeFile(t, filepath.Join(dir, "policies.yaml"), clusterFile(t, "policies.yaml", "  name: allow-from-y\n", "  name: allow-from-z\n"))
	third.waitGeneration(t, 1)
	after := testns.ListTable(t, ns, "nftpolicy")
	if after == before || strings.Contains(after, "x/allow-from-y") {
		t.Errorf("the change was not programmed by the new owner:\n%s", after)
	}
	if owner := ownerRecord(t, after); owner == firstOwner {
		t.Errorf("the table still names the first daemon after the take-over: %s", owner)
	}
}

var ownerRE = regexp.MustCompile(`comment "(nftpolicy owner=[^"]*)"`)

// ownerRecord is the owner record in a listing of our table.
func ownerRecord(t *testing.T, listing string) string {
	t.Helper()
	m := ownerRE.FindStringSubmatch(listing)
	if m == nil {
		t.Fatalf("no owner record in the table:\n%s", listing)
	}
	return m[1]
}
