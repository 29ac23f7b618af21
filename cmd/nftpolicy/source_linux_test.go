package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nftpolicy/nftpolicy/internal/testbin"
	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// waitReadyz waits until /readyz answers code (200 or 503) with a body
// containing every one of want, and returns the body.
func (d *daemon) waitReadyz(t *testing.T, code int, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var r testbin.Readyz
	var err error
	for time.Now().Before(deadline) {
		if r, err = d.Readyz(); err == nil && r.Ready == (code == http.StatusOK) && containsAll(r.Body, want) {
			return r.Body
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("/readyz: %q (error %v) within 15s, want %d with %q", r.Body, err, code, want)
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

	// The other files still update: the policy goes (not every policy at
	// once: that keeps the last programmed state, as below).
	writeFile(t, filepath.Join(dir, "policies.yaml"), clusterFile(t, "policies.yaml", "  name: allow-from-y\n", "  name: allow-from-z\n"))
	waitListing(t, ns, "policy removed while another file is unreadable", func(l string) bool { return !hasPolicy(l) })
	d.waitReadyz(t, http.StatusServiceUnavailable, dangling)

	// The error is repeated, not logged once.
	deadline := time.Now().Add(15 * time.Second)
	for strings.Count(d.Logs(), "cannot read all of the manifests") < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := strings.Count(d.Logs(), "cannot read all of the manifests"); n < 3 {
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
	if !strings.Contains(d.Logs(), "hold no objects") {
		t.Errorf("the empty directory was not logged:\n%s", d.Logs())
	}
}

// With --allow-empty an empty directory is programmed, as an empty table.
func TestIntegrationRunAllowEmpty(t *testing.T) {
	ns := testns.New(t, "nftpt")
	d := startDaemon(t, "--manifests", t.TempDir(), "--node", "node-1", "--netns", ns, "--poll", "20ms", "--allow-empty")
	d.waitGeneration(t, 0)
	if !strings.Contains(d.Logs(), "enforces nothing") {
		t.Errorf("programming an empty directory was not logged loudly:\n%s", d.Logs())
	}
}

// A node that no Node and no pod names makes the daemon not ready, naming
// the nodes that exist.
func TestIntegrationRunUnknownNode(t *testing.T) {
	ns := testns.New(t, "nftpt")
	d := startDaemon(t, "--manifests", clusterDir, "--node", "node-9", "--netns", ns, "--poll", "20ms")
	d.waitReadyz(t, http.StatusServiceUnavailable, `node "node-9" matches no Node and no pod`, `nodes known: "node-1", "node-2"`, "synced generation 1")
}

// clusterFile returns a file of the test cluster with each replacement
// (old, new, old, new, ...) made once.
func clusterFile(t *testing.T, name string, replace ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(clusterDir, name))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for i := 0; i+1 < len(replace); i += 2 {
		if !strings.Contains(s, replace[i]) {
			t.Fatalf("%s lacks %q", name, replace[i])
		}
		s = strings.Replace(s, replace[i], replace[i+1], 1)
	}
	return s
}

// An edit the API server would reject, a duplicated pod, and a directory
// removed and partly restored never open x/b (isolated for ingress by
// x/default-deny): the last good versions stay in effect, and /readyz
// answers 503 naming the objects until the files are fixed. Each edit also
// makes a valid change elsewhere, and the test waits for that change to be
// programmed before it looks at x/b.
func TestIntegrationRunRejectedEditsFailClosed(t *testing.T) {
	ns := testns.New(t, "nftpt")
	dir := t.TempDir()
	for _, f := range []string{"namespaces.yaml", "pods.yaml", "policies.yaml"} {
		copyFile(t, filepath.Join(clusterDir, f), filepath.Join(dir, f))
	}
	d := startDaemon(t, "--manifests", dir, "--node", "node-1", "--netns", ns, "--poll", "20ms", "--debounce", "10ms", "--max-delay", "50ms")
	gen := d.waitGeneration(t, 0)
	isolated := func(what string) {
		t.Helper()
		if l := testns.ListTable(t, ns, "nftpolicy"); !strings.Contains(l, "10.244.1.2 : jump ingress-pod-") || !strings.Contains(l, "x/default-deny") {
			t.Errorf("%s: x/b is no longer isolated by x/default-deny:\n%s", what, l)
		}
	}
	isolated("start")
	policies := func(defaultDeny, endPort string) string {
		return clusterFile(t, "policies.yaml", "  policyTypes: [Ingress, Egress]\n", "  policyTypes: [Ingress, Egress]\n"+defaultDeny, "endPort: 8080", "endPort: "+endPort)
	}

	for i, tc := range []struct {
		name, file, content string
		programmed          string // in the listing once the valid part of the edit is in effect
		reason              []string
	}{
		{"a port out of range", "policies.yaml", policies("  ingress: [{ports: [{port: 70000}]}]\n", "8081"), "8000-8081",
			[]string{"policies.yaml doc 0: NetworkPolicy x/default-deny: spec.ingress[0].ports[0].port: 70000", "its last good version stays in effect"}},
		{"apiVersion v1beta1", "policies.yaml", strings.Replace(policies("", "8082"), "networking.k8s.io/v1", "networking.k8s.io/v1beta1", 1), "8000-8082",
			[]string{`policies.yaml doc 0: NetworkPolicy x/default-deny: apiVersion "networking.k8s.io/v1beta1" is not supported`}},
		{"an invalid label on the pod", "pods.yaml", clusterFile(t, "pods.yaml", "    pod: b\n", "    pod: b\n    \"bad key!\": v\n", "containerPort: 80\n", "containerPort: 8080\n"), "10.244.1.1 . tcp . 8080",
			[]string{"pods.yaml doc 1: Pod x/b: metadata.labels", "its last good version stays in effect"}},
		{"pods.yaml copied, then the copy edited", "pods-backup.yaml", clusterFile(t, "pods.yaml", "    pod: b\n", "    pod: b2\n"), "",
			[]string{"pods-backup.yaml doc 1: Pod x/b: duplicate object, also defined at pods.yaml doc 1; its last good version stays in effect"}},
	} {
		if tc.file == "pods-backup.yaml" {
			// A copy is one object per pod: nothing changes, and it is ready.
			copyFile(t, filepath.Join(dir, "pods.yaml"), filepath.Join(dir, "pods-backup.yaml"))
			deadline := time.Now().Add(15 * time.Second)
			for !strings.Contains(d.Logs(), "identically") && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if !strings.Contains(d.Logs(), `"at": "pods-backup.yaml doc 1", "object": "Pod x/b", "error": "identical duplicate object, also defined at pods.yaml doc 1; used once"`) {
				t.Errorf("the identical copy is not reported")
			}
			d.waitReadyz(t, http.StatusOK, "synced generation")
			isolated("pods.yaml copied")
		}
		writeFile(t, filepath.Join(dir, tc.file), tc.content)
		body := d.waitReadyz(t, http.StatusServiceUnavailable, append([]string{"manifests source: manifest objects skipped or kept at their last good version ("}, tc.reason...)...)
		if tc.programmed != "" {
			waitListing(t, ns, tc.name+": the valid part programmed", func(l string) bool { return strings.Contains(l, tc.programmed) })
		}
		isolated(tc.name)
		if strings.Count(body, "\n") > 10 {
			t.Errorf("%s: /readyz is not bounded:\n%s", tc.name, body)
		}
		// Fixed: ready again.
		if tc.file == "pods-backup.yaml" {
			os.Remove(filepath.Join(dir, tc.file))
		} else {
			copyFile(t, filepath.Join(clusterDir, tc.file), filepath.Join(dir, tc.file))
		}
		gen = d.waitGeneration(t, gen)
		isolated(fmt.Sprintf("fixed %d", i))
	}

	// Every policy deleted is a legitimate change, programmed, and loud.
	if err := os.Remove(filepath.Join(dir, "policies.yaml")); err != nil {
		t.Fatal(err)
	}
	gen = d.waitGeneration(t, gen)
	waitListing(t, ns, "every policy deleted", func(l string) bool { return !strings.Contains(l, "x/default-deny") })
	if !strings.Contains(d.Logs(), `every NetworkPolicy vanished from the manifests at once: programming no policy, which isolates no pod	{"dir": "`+dir+`", "vanished": 3}`) {
		t.Errorf("deleting every policy was not logged as an error naming how many")
	}
	copyFile(t, filepath.Join(clusterDir, "policies.yaml"), filepath.Join(dir, "policies.yaml"))
	gen = d.waitGeneration(t, gen)
	waitListing(t, ns, "policies back", func(l string) bool {
		return strings.Contains(l, "10.244.1.2 : jump ingress-pod-") && strings.Contains(l, "x/default-deny")
	})

	// The directory removed, then partly restored: the last programmed
	// state stays until a policy comes back.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	d.waitReadyz(t, http.StatusServiceUnavailable, "no such file or directory")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"namespaces.yaml", "pods.yaml"} {
		copyFile(t, filepath.Join(clusterDir, f), filepath.Join(dir, f))
	}
	d.waitReadyz(t, http.StatusServiceUnavailable, dir+" came back without any NetworkPolicy after it was removed or emptied, where 3 were programmed; keeping the last programmed state")
	time.Sleep(200 * time.Millisecond) // a sync that should not happen has --max-delay 50ms
	isolated("partly restored")
	copyFile(t, filepath.Join(clusterDir, "policies.yaml"), filepath.Join(dir, "policies.yaml"))
	d.waitGeneration(t, gen)
	isolated("fully restored")
}
