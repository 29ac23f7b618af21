package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nftpolicy/nftpolicy/enforcer"
	"github.com/nftpolicy/nftpolicy/internal/ruleprobe"
	"github.com/nftpolicy/nftpolicy/internal/scale"
	"github.com/nftpolicy/nftpolicy/internal/testns"
	"github.com/nftpolicy/nftpolicy/nft"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"
)

// A file replaced in the manifests directory (written to a temporary name,
// renamed over the old one) reaches the kernel: the test polls the
// kernel's ruleset generation, never sleeps for it, and logs the latency
// from the rename to the commit that carries the change, with the daemon's
// default flags. $NFTPOLICY_REPLACE_CHANGES sets how many changes (20); the
// figures in docs/performance.md are of 200, and of a daemon built before
// the directory was watched ($NFTPOLICY_BIN).
func TestIntegrationRunFileReplaceToKernel(t *testing.T) {
	changes := 20
	if s := os.Getenv("NFTPOLICY_REPLACE_CHANGES"); s != "" {
		var err error
		if changes, err = strconv.Atoi(s); err != nil || changes < 1 {
			t.Fatalf("$NFTPOLICY_REPLACE_CHANGES %q", s)
		}
	}
	ns := testns.New(t, "nftpt")
	dir := t.TempDir()
	if s := os.Getenv("NFTPOLICY_REPLACE_SCALE"); s != "" {
		replaceAtScale(t, s, ns, dir, changes)
		return
	}
	for _, f := range []string{"namespaces.yaml", "pods.yaml", "policies.yaml"} {
		copyFile(t, filepath.Join(clusterDir, f), filepath.Join(dir, f))
	}
	c := startManifestsDaemon(t, dir, ns)

	var lat []time.Duration
	for i := range changes {
		// Quiet before each change, longer than --debounce: each one is an
		// isolated edit, not part of a burst.
		time.Sleep(enforcer.DefaultDebounce + 50*time.Millisecond)
		port := strconv.Itoa(8100 + i%800)
		tmp := filepath.Join(dir, ".policies.yaml.tmp")
		writeFile(t, tmp, clusterFile(t, "policies.yaml", "endPort: 8080", "endPort: "+port))
		lat = append(lat, renameToKernel(t, c, tmp, filepath.Join(dir, "policies.yaml"), func() bool {
			return strings.Contains(testns.ListTable(t, ns, "nftpolicy"), "8000-"+port)
		}))
	}
	logLatency(t, "file->kernel", lat)
}

// replaceAtScale is TestIntegrationRunFileReplaceToKernel on a synthetic
// cluster of internal/scale, NxPxK (namespaces x pods per namespace x
// policies per namespace, $NFTPOLICY_REPLACE_SCALE): one file of
// namespaces, one of pods, one of policies per namespace, as an operator
// would keep them. Each change replaces ns-0's file with the port of
// ns-0/policy-0's first rule changed, and is timed from the rename to the
// commit after which that policy's chain holds it.
func replaceAtScale(t *testing.T, size, ns, dir string, changes int) {
	var nsN, podsN, polN int
	if _, err := fmt.Sscanf(size, "%dx%dx%d", &nsN, &podsN, &polN); err != nil {
		t.Fatalf("$NFTPOLICY_REPLACE_SCALE %q: want NxPxK", size)
	}
	snap := scale.Cluster(nsN, podsN, polN, 110, "node-1", false)
	write := func(name string, objs []any) {
		var b strings.Builder
		for _, o := range objs {
			y, err := yaml.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			b.WriteString("---\n")
			b.Write(y)
		}
		writeFile(t, filepath.Join(dir, name), b.String())
	}
	var nss, pods []any
	for _, o := range snap.Namespaces {
		o.APIVersion, o.Kind = "v1", "Namespace"
		nss = append(nss, o)
	}
	for _, o := range snap.Pods {
		pods = append(pods, o.Core())
	}
	write("namespaces.yaml", nss)
	write("pods.yaml", pods)
	byNS := map[string][]*networkingv1.NetworkPolicy{}
	for _, o := range snap.Policies {
		o.APIVersion, o.Kind = "networking.k8s.io/v1", "NetworkPolicy"
		byNS[o.Namespace] = append(byNS[o.Namespace], o)
	}
	policiesOf := func(namespace string) []any {
		var out []any
		for _, o := range byNS[namespace] {
			out = append(out, o)
		}
		return out
	}
	for namespace := range byNS {
		write("policies-"+namespace+".yaml", policiesOf(namespace))
	}
	c := startManifestsDaemon(t, dir, ns)
	rules, err := ruleprobe.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer rules.Close()
	chain, err := rules.Chain("ingress-", "-ns-0/policy-0")
	if err != nil {
		t.Fatal(err)
	}
	target := byNS["ns-0"][0]
	var lat []time.Duration
	for i := range changes {
		time.Sleep(enforcer.DefaultDebounce + 50*time.Millisecond) // an isolated edit
		port := int32(20000 + i)
		target.Spec.Ingress[0].Ports[0].Port.IntVal = port
		tmp := filepath.Join(dir, ".policies-ns-0.yaml.tmp")
		write(filepath.Base(tmp), policiesOf("ns-0"))
		lat = append(lat, renameToKernel(t, c, tmp, filepath.Join(dir, "policies-ns-0.yaml"), func() bool {
			ok, err := rules.ComparesPort(chain, uint16(port))
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}))
	}
	logLatency(t, "file->kernel at "+size, lat)
}

// startManifestsDaemon runs `nftpolicy run --manifests dir` for node-1 in
// ns until its first sync, and returns a connection to ns.
func startManifestsDaemon(t *testing.T, dir, ns string) *nft.Conn {
	t.Helper()
	d := startDaemon(t, "--manifests", dir, "--node", "node-1", "--netns", ns)
	d.waitGeneration(t, 0)
	c, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// renameToKernel renames tmp over dst and returns how long until a commit
// after which holds reports the change in the kernel. It polls the
// ruleset generation over netlink, and reads the kernel only after a
// commit; it never sleeps to wait.
func renameToKernel(t *testing.T, c *nft.Conn, tmp, dst string, holds func() bool) time.Duration {
	t.Helper()
	gen, err := c.Generation()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
	for deadline := start.Add(30 * time.Second); ; {
		g, err := c.Generation()
		if err != nil {
			t.Fatal(err)
		}
		if g != gen {
			at := time.Since(start)
			gen = g
			if holds() {
				return at
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not in the kernel within 30s", dst)
		}
	}
}

// logLatency logs p50, p99 and the maximum of lat.
func logLatency(t *testing.T, what string, lat []time.Duration) {
	slices.Sort(lat)
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }
	t.Logf("%s: p50=%s p99=%s max=%s ms (%d changes)", what, ms(lat[len(lat)/2]), ms(lat[len(lat)*99/100]), ms(lat[len(lat)-1]), len(lat))
}
