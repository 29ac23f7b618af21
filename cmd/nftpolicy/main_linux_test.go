package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nftpolicy/nftpolicy/internal/testbin"
	"github.com/nftpolicy/nftpolicy/internal/testns"
	"github.com/nftpolicy/nftpolicy/k8s"
)

const clusterDir = "testdata/cluster"

// nftpolicy runs the command in-process and returns its exit code, stdout
// and stderr.
func nftpolicy(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestIntegrationApplyMatchesDump(t *testing.T) {
	code, dumped, stderr := nftpolicy(t, "dump", "--manifests", clusterDir, "--node", "node-1")
	if code != 0 {
		t.Fatalf("dump exited %d: %s", code, stderr)
	}
	// apply writes its owner record as the table's comment, which dump,
	// owning nothing, has not: the oracle is the dump with that record.
	applied := testns.New(t, "nftpt")
	if code, _, stderr := nftpolicy(t, "apply", "--manifests", clusterDir, "--node", "node-1", "--netns", applied); code != 0 {
		t.Fatalf("apply exited %d: %s", code, stderr)
	}
	owner := ownerRecord(t, testns.ListTable(t, applied, "nftpolicy"))
	withOwner := strings.Replace(dumped, "table inet nftpolicy {\n", "table inet nftpolicy {\n\tcomment \""+owner+"\"\n", 1)
	oracle := testns.New(t, "nftpt")
	testns.Nft(t, oracle, withOwner, "-f", "-")
	listing := testns.ListTable(t, applied, "nftpolicy")
	if want := testns.ListTable(t, oracle, "nftpolicy"); listing != want {
		t.Errorf("apply's table differs from nft -f of dump's text\n--- nft -f:\n%s\n--- apply:\n%s", want, listing)
	}
	for _, want := range []string{
		"chain ingress-pod-", "x/a", "chain egress-", "x/egress-to-y", "192.0.2.0/25", "2001:db8::/32",
		"tcp dport 8000-8080", "10.244.1.1 . tcp . 80", "priority filter - 5",
	} {
		if !strings.Contains(listing, want) {
			t.Errorf("nft list lacks %q:\n%s", want, listing)
		}
	}
	if strings.Contains(listing, "10.244.2.2 :") {
		t.Errorf("y/b runs on node-2 and must not be dispatched on node-1:\n%s", listing)
	}
}

func TestIntegrationBrokenObjectsAreSkipped(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"namespaces.yaml", "pods.yaml", "policies.yaml"} {
		copyFile(t, filepath.Join(clusterDir, f), filepath.Join(dir, f))
	}
	writeFile(t, filepath.Join(dir, "broken.yaml"), `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: "y", name: bad-cidr}
spec:
  podSelector: {}
  ingress:
    - from:
        - ipBlock: {cidr: 10.0.0.0/33}
`)
	ns := testns.New(t, "nftpt")
	code, _, stderr := nftpolicy(t, "apply", "--manifests", dir, "--node", "node-1", "--netns", ns)
	if code != exitPartial {
		t.Fatalf("apply exited %d with a broken object next to good ones, want %d: %s", code, exitPartial, stderr)
	}
	// The summary, last, names each skipped object.
	if !strings.Contains(stderr, "nftpolicy apply: 1 skipped (the rest is in effect):\n  broken.yaml doc 0: NetworkPolicy y/bad-cidr: ") || !strings.Contains(stderr, "10.0.0.0/33") {
		t.Errorf("stderr does not sum up the broken object, its place and its fault:\n%s", stderr)
	}
	// The bad one has no earlier version to keep: it stands in as a
	// policy that isolates the pods it selects and allows nothing, so that
	// a restart with a broken edit on disk does not open them.
	// Its chain is in the table, and y's pods, which it selects, have
	// ingress chains: they are isolated.
	listing := testns.ListTable(t, ns, "nftpolicy")
	if !strings.Contains(listing, "x/allow-from-y") || !strings.Contains(listing, "chain ingress-1300c8f0-y/bad-cidr {") ||
		!strings.Contains(listing, "chain ingress-pod-2e1a8a2b-y/a {") || strings.Contains(listing, "10.0.0.0") {
		t.Errorf("good policies must be programmed and the bad one stand in, allowing nothing:\n%s", listing)
	}
}

func TestIntegrationNothingProgrammed(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"apply", "--manifests", "does-not-exist", "--node", "n"}, 1, "nothing programmed"},
		{[]string{"apply", "--manifests", clusterDir, "--node", "n", "--netns", "nftpolicy-no-such-netns"}, 1, "nothing programmed"},
		{[]string{"apply", "--manifests", clusterDir, "--mark-mask", "0x4000"}, 2, "kube-proxy"},
		{[]string{"apply", "--manifests", clusterDir, "--mark-mask", "0x00030000"}, 2, "kube-router"},
		{[]string{"apply", "--manifests", clusterDir, "--priority", "early"}, 2, "want auto or a number"},
		{[]string{"apply"}, 2, "--manifests is required"},
		{[]string{"frobnicate"}, 2, "unknown command"},
	} {
		code, _, stderr := nftpolicy(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("nftpolicy %q: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}

func TestIntegrationMarkOverlapAllowed(t *testing.T) {
	ns := testns.New(t, "nftpt")
	code, _, stderr := nftpolicy(t, "apply", "--manifests", clusterDir, "--node", "node-1", "--netns", ns,
		"--mark-mask", "0x00100000", "--allow-mark-overlap")
	if code != 0 {
		t.Fatalf("apply exited %d: %s", code, stderr)
	}
	if listing := testns.ListTable(t, ns, "nftpolicy"); !strings.Contains(listing, "meta mark & 0x00100000 == 0x00100000") {
		t.Errorf("the configured mask is not used:\n%s", listing)
	}
}

func TestIntegrationPriorityAuto(t *testing.T) {
	for _, tc := range []struct {
		name, others, wantPrio string
	}{
		{"no other tables", "", "priority filter - 5"},
		{"old kube-proxy at -110", forwardChain("ip", "kube-proxy", "filter-forward", -110) + forwardChain("ip6", "kube-proxy", "filter-forward", -110), "priority -111"},
		{"kube-proxy -101 and iptables-nft", forwardChain("ip", "kube-proxy", "filter-forward", -101) + forwardChain("ip", "filter", "FORWARD", 0), "priority -102"},
		// Conntrack is not on the forward hook: a chain at -300 there is
		// one more chain to run ahead of, not a reason to refuse.
		{"a forward chain at -300", forwardChain("inet", "early", "forward", -300) + forwardChain("ip", "kube-proxy", "filter-forward", -110), "priority raw - 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := testns.New(t, "nftpt")
			if tc.others != "" {
				testns.Nft(t, ns, tc.others, "-f", "-")
			}
			if code, _, stderr := nftpolicy(t, "apply", "--manifests", clusterDir, "--node", "node-1", "--netns", ns); code != 0 {
				t.Fatalf("apply exited %d: %s", code, stderr)
			}
			if listing := testns.ListTable(t, ns, "nftpolicy"); !strings.Contains(listing, tc.wantPrio) {
				t.Errorf("want %q:\n%s", tc.wantPrio, listing)
			}
		})
	}
}

func TestIntegrationExplicitPriorityWarns(t *testing.T) {
	ns := testns.New(t, "nftpt")
	testns.Nft(t, ns, forwardChain("ip", "kube-proxy", "filter-forward", -110), "-f", "-")
	code, _, stderr := nftpolicy(t, "apply", "--manifests", clusterDir, "--node", "node-1", "--netns", ns, "--priority", "-110")
	if code != 0 {
		t.Fatalf("apply exited %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "equals that of ip kube-proxy chain filter-forward") {
		t.Errorf("no warning for a priority equal to kube-proxy's:\n%s", stderr)
	}
}

func TestIntegrationCleanup(t *testing.T) {
	ns := testns.New(t, "nftpt")
	if code, _, stderr := nftpolicy(t, "apply", "--manifests", clusterDir, "--node", "node-1", "--netns", ns); code != 0 {
		t.Fatalf("apply: %s", stderr)
	}
	for i := 0; i < 2; i++ { // twice: cleanup of nothing is fine
		if code, _, stderr := nftpolicy(t, "cleanup", "--netns", ns); code != 0 {
			t.Fatalf("cleanup #%d exited %d: %s", i+1, code, stderr)
		}
	}
	if out := testns.Nft(t, ns, "", "list", "tables"); strings.Contains(out, "nftpolicy") {
		t.Errorf("table still there after cleanup: %s", out)
	}
}

// A daemon is an `nftpolicy run` process, killed when the test ends.
type daemon struct{ *testbin.Daemon }

func startDaemon(t *testing.T, args ...string) *daemon {
	t.Helper()
	d, err := testbin.StartDaemon(testbin.Nftpolicy(t), args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Kill() // harmless when it has exited
		if t.Failed() {
			t.Logf("daemon log:\n%s", d.Logs())
		}
	})
	return &daemon{d}
}

// waitGeneration waits until /readyz is ready with a synced generation
// above after, and returns it.
func (d *daemon) waitGeneration(t *testing.T, after uint64) uint64 {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var r testbin.Readyz
	var err error
	for time.Now().Before(deadline) {
		if r, err = d.Readyz(); err == nil && r.Ready && r.Generation > after {
			return r.Generation
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no synced generation above %d within 15s; last /readyz %q, error %v", after, r.Body, err)
	return 0
}

func TestIntegrationRunFollowsChanges(t *testing.T) {
	ns := testns.New(t, "nftpt")
	dir := t.TempDir()
	for _, f := range []string{"namespaces.yaml", "pods.yaml"} {
		copyFile(t, filepath.Join(clusterDir, f), filepath.Join(dir, f))
	}
	d := startDaemon(t, "--manifests", dir, "--node", "node-1", "--netns", ns)
	gen := d.waitGeneration(t, 0)
	if listing := testns.ListTable(t, ns, "nftpolicy"); strings.Contains(listing, "chain ingress-pod-") {
		t.Fatalf("no policy yet, but a pod chain exists:\n%s", listing)
	}

	copyFile(t, filepath.Join(clusterDir, "policies.yaml"), filepath.Join(dir, "policies.yaml"))
	gen = d.waitGeneration(t, gen)
	if listing := testns.ListTable(t, ns, "nftpolicy"); !strings.Contains(listing, "x/allow-from-y") {
		t.Fatalf("policy added to the directory is not programmed:\n%s", listing)
	}

	// A file rewritten to hold only a new invalid policy: that document
	// might be any of the policies the file held (renamed, say), so they
	// stay in effect and the daemon is not ready until the file is fixed.
	writeFile(t, filepath.Join(dir, "policies.yaml"), "kind: NetworkPolicy\napiVersion: networking.k8s.io/v1\nmetadata: {name: bad, namespace: x}\nspec: {podSelector: {matchLabels: {pod: a}}, policyTypes: [Sideways]}\n")
	d.waitReadyz(t, http.StatusServiceUnavailable, "policies.yaml doc 0: NetworkPolicy x/bad: spec.policyTypes[0]", "stay in effect: NetworkPolicy x/default-deny, NetworkPolicy x/allow-from-y, NetworkPolicy x/egress-to-y")
	if listing := testns.ListTable(t, ns, "nftpolicy"); !strings.Contains(listing, "x/allow-from-y") {
		t.Errorf("a policy the broken file held is no longer programmed:\n%s", listing)
	}
	if !strings.Contains(d.Logs(), "NetworkPolicy x/bad") {
		t.Errorf("the broken policy is not reported:\n%s", d.Logs())
	}
	// Fixed, and allow-from-y replaced: ready, and it goes.
	writeFile(t, filepath.Join(dir, "policies.yaml"), clusterFile(t, "policies.yaml", "  name: allow-from-y\n", "  name: allow-from-z\n", "ns: \"y\"", "ns: z"))
	gen = d.waitGeneration(t, gen)
	waitListing(t, ns, "allow-from-y removed", func(l string) bool {
		return !strings.Contains(l, "x/allow-from-y") && strings.Contains(l, "x/allow-from-z")
	})

	// SIGTERM leaves the rules in place.
	before := testns.ListTable(t, ns, "nftpolicy")
	if err := d.Stop(15 * time.Second); err != nil {
		t.Fatalf("daemon exit after SIGTERM: %v", err)
	}
	if after := testns.ListTable(t, ns, "nftpolicy"); after != before {
		t.Errorf("SIGTERM changed the table")
	}
}

// version prints exactly the version the build stamped with -ldflags
// "-X main.version=..." (hack/build.sh), under each of its spellings.
func TestIntegrationVersion(t *testing.T) {
	const stamped = "v1.2.3-test+0123abc"
	bin, err := testbin.Build(t.TempDir(), "-X main.version="+stamped)
	if err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{"version", "--version", "-version"} {
		out, err := exec.Command(bin, arg).Output()
		if want := "nftpolicy " + stamped + "\n"; err != nil || string(out) != want {
			t.Errorf("nftpolicy %s: %q, %v; want %q", arg, out, err, want)
		}
		if code, out, stderr := nftpolicy(t, arg); code != 0 || out != "nftpolicy "+version+"\n" || stderr != "" {
			t.Errorf("in-process nftpolicy %s: exit %d, %q, stderr %q; want exit 0 and %q", arg, code, out, stderr, "nftpolicy "+version+"\n")
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, to, string(b))
}

// writeFile replaces a file atomically, as a config management tool would,
// so the daemon never reads half of it.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp~"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// forwardChain is nft text for another component's accept-all forward chain.
func forwardChain(family, table, chain string, prio int) string {
	return fmt.Sprintf("table %s %s {\n\tchain %s {\n\t\ttype filter hook forward priority %d; policy accept;\n\t}\n}\n", family, table, chain, prio)
}

// TestIntegrationBrokenCorpus applies every file of the manifests source's
// broken corpus next to a good cluster: each must be reported by file and
// document, and every good policy of the file must still be programmed.
func TestIntegrationBrokenCorpus(t *testing.T) {
	files, err := filepath.Glob("../../k8s/testdata/broken/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no broken corpus: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			alone := t.TempDir()
			copyFile(t, file, filepath.Join(alone, filepath.Base(file)))
			good, objErrs, err := k8s.LoadDir(alone)
			if err != nil || len(objErrs) == 0 {
				t.Fatalf("corpus file loads with errors %v, %v; want object errors", objErrs, err)
			}

			dir := t.TempDir()
			for _, f := range []string{"namespaces.yaml", "pods.yaml"} {
				copyFile(t, filepath.Join(clusterDir, f), filepath.Join(dir, f))
			}
			copyFile(t, file, filepath.Join(dir, "zz-"+filepath.Base(file)))
			ns := testns.New(t, "nftpt")
			code, _, stderr := nftpolicy(t, "apply", "--manifests", dir, "--node", "node-1", "--netns", ns)
			want := exitPartial
			if filepath.Base(file) == "unsupported-kind.yaml" {
				want = 0 // other kinds are not nftpolicy's to skip
			}
			if code != want {
				t.Fatalf("apply exited %d, want %d: %s", code, want, stderr)
			}
			if !strings.Contains(stderr, "zz-"+filepath.Base(file)+" doc ") {
				t.Errorf("the broken object is not reported by file and document:\n%s", stderr)
			}
			listing := testns.ListTable(t, ns, "nftpolicy")
			for _, np := range good.Policies {
				if np.Namespace != "x" { // only x has pods on node-1
					continue
				}
				if !strings.Contains(listing, "-x/"+np.Name+" {") {
					t.Errorf("good policy x/%s is not programmed:\n%s", np.Name, listing)
				}
			}
		})
	}
}
