package netns

import (
	"os"
	"os/exec"
	"testing"
)

// RequireRoot skips t unless the process is root and ip, nft and sysctl are
// installed; when the environment variable CI is set it fails t instead, so
// that a misconfigured CI runner cannot pass by skipping every kernel test.
func RequireRoot(t testing.TB) {
	t.Helper()
	missing := ""
	if os.Geteuid() != 0 {
		missing = "root (network namespaces)"
	}
	for _, bin := range []string{"ip", "nft", "sysctl", "bridge"} {
		if missing != "" {
			break
		}
		if _, err := exec.LookPath(bin); err != nil {
			missing = bin
		}
	}
	if missing == "" {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("this test needs %s; CI is set, so failing instead of skipping", missing)
	}
	t.Skipf("this test needs %s", missing)
}

// NewTestCluster is NewCluster for tests: it calls RequireRoot, fails t on
// error, and closes the cluster when t ends, passed or failed.
func NewTestCluster(t testing.TB, opts Options) *Cluster {
	t.Helper()
	RequireRoot(t)
	c, err := NewCluster(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close cluster %s: %v", c.ID(), err)
		}
	})
	return c
}

// StartTestDaemons is Cluster.StartDaemons for tests: it fails t on error
// and stops the daemons when t ends (before the cluster's own cleanup, which
// NewTestCluster registered earlier).
func StartTestDaemons(t testing.TB, c *Cluster, dir string, opts DaemonOptions) *Daemons {
	t.Helper()
	d, err := c.StartDaemons(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d
}
