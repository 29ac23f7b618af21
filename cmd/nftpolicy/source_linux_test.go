package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// readyz returns /readyz's status code and body, 0 when it does not answer.
func (d *daemon) readyz() (int, string) {
	resp, err := http.Get("http://" + d.health + "/readyz")
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// waitReadyz waits until /readyz answers code with a body containing every
// one of want, and returns the body.
func (d *daemon) waitReadyz(t *testing.T, code int, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var gotCode int
	var body string
	for time.Now().Before(deadline) {
		if gotCode, body = d.readyz(); gotCode == code && containsAll(body, want) {
			return body
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("/readyz: %d %q within 15s, want %d with %q", gotCode, body, code, want)
	return ""
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// waitListing waits until the table's listing satisfies ok.
func waitListing(t *testing.T, ns, what string, ok func(string) bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var listing string
	for time.Now().Before(deadline) {
		if listing = testns.ListTable(t, ns, "nftpolicy"); ok(listing) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: not within 15s:\n%s", what, listing)
}

// A source that cannot be read makes the daemon not ready, says why and
// where, and keeps saying it; the files that can be read keep updating;
// and a directory that empties or vanishes keeps the last programmed
// state instead of opening every pod.
func TestIntegrationRunSourceProblems(t *testing.T) {
	ns := testns.New(t, "nftpt")
	dir := t.TempDir()
	for _, f := range []string{"namespaces.yaml", "pods.yaml", "policies.yaml"} {
		copyFile(t, filepath.Join(clusterDir, f), filepath.Join(dir, f))
	}
	d := startDaemon(t, "--manifests", dir, "--node", "node-1", "--netns", ns, "--poll", "20ms")
	gen := d.waitGeneration(t, 0)
	hasPolicy := func(l string) bool { return strings.Contains(l, "x/allow-from-y") }
	waitListing(t, ns, "policy programmed", hasPolicy)

	dangling := filepath.Join(dir, "dangling.yaml")
	if err := os.Symlink("missing.yaml", dangling); err != nil {
		t.Fatal(err)
	}
	d.waitReadyz(t, http.StatusServiceUnavailable, "manifests source: ", dangling+": no such file or directory", "synced generation")

	// The other files still update: the policy goes.
	writeFile(t, filepath.Join(dir, "policies.yaml"), "")
	waitListing(t, ns, "policy removed while another file is unreadable", func(l string) bool { return !hasPolicy(l) })
	d.waitReadyz(t, http.StatusServiceUnavailable, dangling)

	// The error is repeated, not logged once.
	deadline := time.Now().Add(15 * time.Second)
	for strings.Count(d.logText(), "cannot read all of the manifests") < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := strings.Count(d.logText(), "cannot read all of the manifests"); n < 3 {
		t.Errorf("the source error was logged %d times, want it repeated", n)
	}

	if err := os.Remove(dangling); err != nil {
		t.Fatal(err)
	}
	copyFile(t, filepath.Join(clusterDir, "policies.yaml"), filepath.Join(dir, "policies.yaml"))
	gen = d.waitGeneration(t, gen)
	waitListing(t, ns, "policy back", hasPolicy)

	// Every file removed: the last state stays, not ready.
	for _, f := range []string{"namespaces.yaml", "pods.yaml", "policies.yaml"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	d.waitReadyz(t, http.StatusServiceUnavailable, "manifests source: "+dir+" holds no objects; keeping the last programmed state")
	if !hasPolicy(testns.ListTable(t, ns, "nftpolicy")) {
		t.Errorf("an emptied directory opened the pods")
	}

	// The directory removed: the same.
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	d.waitReadyz(t, http.StatusServiceUnavailable, "manifests source: open "+dir+": no such file or directory")
	if !hasPolicy(testns.ListTable(t, ns, "nftpolicy")) {
		t.Errorf("a removed directory opened the pods")
	}
	if !strings.Contains(d.logText(), "hold no objects") {
		t.Errorf("the empty directory was not logged:\n%s", d.logText())
	}
}

// With --allow-empty an empty directory is programmed, as an empty table.
func TestIntegrationRunAllowEmpty(t *testing.T) {
	ns := testns.New(t, "nftpt")
	d := startDaemon(t, "--manifests", t.TempDir(), "--node", "node-1", "--netns", ns, "--poll", "20ms", "--allow-empty")
	d.waitGeneration(t, 0)
	if !strings.Contains(d.logText(), "enforces nothing") {
		t.Errorf("programming an empty directory was not logged loudly:\n%s", d.logText())
	}
}

// A node that no Node and no pod names makes the daemon not ready, naming
// the nodes that exist.
func TestIntegrationRunUnknownNode(t *testing.T) {
	ns := testns.New(t, "nftpt")
	d := startDaemon(t, "--manifests", clusterDir, "--node", "node-9", "--netns", ns, "--poll", "20ms")
	d.waitReadyz(t, http.StatusServiceUnavailable, `node "node-9" matches no Node and no pod`, `nodes known: "node-1", "node-2"`, "synced generation 1")
}
