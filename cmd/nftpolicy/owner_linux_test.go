package main

import (
	"fmt"
	"net/http"
	"os/exec"
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
	select {
	case <-second.Done():
		if err := second.Wait(); err == nil || !strings.Contains(second.Logs(), "owner=") {
			t.Errorf("second daemon: exit %v, want a failure naming the owner:\n%s", err, second.Logs())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("second daemon still running after 15s:\n%s", second.Logs())
	}
	if r, err := first.Readyz(); err != nil || !r.Ready {
		t.Errorf("first daemon not ready after the refused second: %q, %v", r.Body, err)
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

// ownerArgs copies the test cluster into a directory of its own and returns
// the flags of a daemon on ns for it.
func ownerArgs(t *testing.T, ns string) []string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"namespaces.yaml", "pods.yaml", "policies.yaml"} {
		copyFile(t, filepath.Join(clusterDir, f), filepath.Join(dir, f))
	}
	return []string{"--manifests", dir, "--node", "node-1", "--netns", ns}
}

// deadRecord names an nftpolicy that is not running.
const deadRecord = "nftpolicy owner=evil/1/00000000deadbeef since=2020-01-01T00:00:00Z"

// replaceTable replaces our table in ns with an empty one whose comment is
// record, as `nft -f` of a crafted file or of an old backup does.
func replaceTable(t *testing.T, ns, record string) {
	t.Helper()
	testns.Nft(t, ns, fmt.Sprintf("delete table inet nftpolicy\ntable inet nftpolicy {\n\tcomment %q\n\tchain filter-forward { type filter hook forward priority 0; policy accept; }\n}\n", record), "-f", "-")
}

// healthz returns /healthz's status code, 0 when it does not answer.
func (d *daemon) healthz() int {
	resp, err := http.Get("http://" + d.Health + "/healthz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A table written over with the record of an nftpolicy that is not running
// is drift: the daemon writes its table back with its record and stays
// ready. Taken over by a running daemon, it stays live and unready naming
// the owner, and takes the table back when that owner dies.
func TestIntegrationOwnerRecordOfDeadOrLiveOwner(t *testing.T) {
	ns := testns.New(t, "nftpt")
	args := ownerArgs(t, ns)
	first := startDaemon(t, args...)
	first.waitGeneration(t, 0)
	firstOwner := ownerRecord(t, testns.ListTable(t, ns, "nftpolicy"))

	replaceTable(t, ns, deadRecord)
	waitListing(t, ns, "the daemon's record back", func(l string) bool {
		return strings.Contains(l, firstOwner) && strings.Contains(l, "chain ingress-pod-")
	})
	first.waitReadyz(t, 200)

	second := startDaemon(t, append(args, "--take-over")...)
	second.waitGeneration(t, 0)
	secondOwner := ownerRecord(t, testns.ListTable(t, ns, "nftpolicy"))
	first.waitReadyz(t, 503, "took over", strings.TrimPrefix(secondOwner, "nftpolicy owner="))
	if code := first.healthz(); code != 200 {
		t.Errorf("/healthz of the taken-over daemon: %d, want 200 (it is a standby, see enforcer Ownership)", code)
	}
	if l := testns.ListTable(t, ns, "nftpolicy"); !strings.Contains(l, secondOwner) {
		t.Errorf("the taken-over daemon wrote over the new owner:\n%s", l)
	}

	second.Kill() // the new owner dies
	waitListing(t, ns, "the first daemon's record back", func(l string) bool { return strings.Contains(l, firstOwner) })
	first.waitReadyz(t, 200)
	if !strings.Contains(first.Logs(), "taking the table back") {
		t.Errorf("the first daemon did not log taking the table back:\n%s", first.Logs())
	}
}

// Two daemons started at the same moment on a table whose owner is gone:
// one runs and is ready, the other exits 1 naming it, whichever finds out
// first (its Claim, or its first write), as when they start one after
// the other.
func TestIntegrationOwnerSimultaneousStart(t *testing.T) {
	ns := testns.New(t, "nftpt")
	args := ownerArgs(t, ns)
	if code, _, stderr := nftpolicy(t, append([]string{"apply"}, args...)...); code != 0 {
		t.Fatalf("apply: %s", stderr)
	}
	replaceTable(t, ns, deadRecord)
	a := startDaemon(t, args...)
	b := startDaemon(t, args...)
	exited := make(chan *daemon, 2)
	for _, d := range []*daemon{a, b} {
		go func() {
			d.Wait()
			exited <- d
		}()
	}
	var loser *daemon
	select {
	case loser = <-exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("both daemons still run after 15s:\n--- a:\n%s\n--- b:\n%s", a.Logs(), b.Logs())
	}
	winner := a
	if loser == a {
		winner = b
	}
	if code := loser.Cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(loser.Logs(), "owner=") {
		t.Errorf("the loser exited %d, want 1 naming the owner:\n%s", code, loser.Logs())
	}
	winner.waitGeneration(t, 0)
	select {
	case d := <-exited:
		t.Errorf("the winner exited too:\n%s", d.Logs())
	case <-time.After(2 * time.Second):
	}
}

// cleanup refuses to delete the table of a running daemon (which would
// write it again at once), naming it; --force deletes it with a warning;
// once the daemon is stopped cleanup works as before.
func TestIntegrationCleanupUnderRunningDaemon(t *testing.T) {
	ns := testns.New(t, "nftpt")
	d := startDaemon(t, ownerArgs(t, ns)...)
	d.waitGeneration(t, 0)
	owner := ownerRecord(t, testns.ListTable(t, ns, "nftpolicy"))
	code, _, stderr := nftpolicy(t, "cleanup", "--netns", ns)
	if code != 1 || !strings.Contains(stderr, strings.TrimPrefix(owner, "nftpolicy owner=")) {
		t.Errorf("cleanup under a running daemon: exit %d, %q; want 1 naming %s", code, stderr, owner)
	}
	if l := testns.ListTable(t, ns, "nftpolicy"); !strings.Contains(l, owner) {
		t.Errorf("the refused cleanup changed the table:\n%s", l)
	}
	code, _, stderr = nftpolicy(t, "cleanup", "--force", "--netns", ns)
	if code != 0 || !strings.Contains(stderr, "write the table again") {
		t.Errorf("cleanup --force: exit %d, %q; want 0 with a warning", code, stderr)
	}
	// The daemon writes it again: what the warning said.
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, _ := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "inet", "nftpolicy").CombinedOutput()
		if strings.Contains(string(out), owner) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not write its table again within 15s after cleanup --force:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}

	d.Stop(15 * time.Second)
	if code, _, stderr := nftpolicy(t, "cleanup", "--netns", ns); code != 0 {
		t.Errorf("cleanup after the daemon stopped: exit %d, %s", code, stderr)
	}
	if out := testns.Nft(t, ns, "", "list", "tables"); strings.Contains(out, "nftpolicy") {
		t.Errorf("table still there after cleanup: %s", out)
	}
}
