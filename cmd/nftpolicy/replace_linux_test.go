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

	"github.com/nftpolicy/nftpolicy/internal/testns"
	"github.com/nftpolicy/nftpolicy/nft"
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
	for _, f := range []string{"namespaces.yaml", "pods.yaml", "policies.yaml"} {
		copyFile(t, filepath.Join(clusterDir, f), filepath.Join(dir, f))
	}
	d := startDaemon(t, "--manifests", dir, "--node", "node-1", "--netns", ns)
	d.waitGeneration(t, 0)
	c, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	var lat []time.Duration
	for i := range changes {
		// Quiet before each change, longer than --debounce: each one is an
		// isolated edit, not part of a burst.
		time.Sleep(200 * time.Millisecond)
		port := strconv.Itoa(8100 + i%800)
		tmp := filepath.Join(dir, ".policies.yaml.tmp")
		writeFile(t, tmp, clusterFile(t, "policies.yaml", "endPort: 8080", "endPort: "+port))
		gen, err := c.Generation()
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := os.Rename(tmp, filepath.Join(dir, "policies.yaml")); err != nil {
			t.Fatal(err)
		}
		for deadline := start.Add(15 * time.Second); ; {
			g, err := c.Generation()
			if err != nil {
				t.Fatal(err)
			}
			if g != gen {
				at := time.Since(start)
				gen = g
				if strings.Contains(testns.ListTable(t, ns, "nftpolicy"), "8000-"+port) {
					lat = append(lat, at)
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("change %d (endPort %s) not in the kernel within 15s", i, port)
			}
		}
	}
	slices.Sort(lat)
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }
	t.Logf("file->kernel: p50=%s p99=%s max=%s ms (%d changes)", ms(lat[len(lat)/2]), ms(lat[len(lat)*99/100]), ms(lat[len(lat)-1]), len(lat))
}
