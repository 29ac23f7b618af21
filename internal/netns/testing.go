package netns

import (
	"testing"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// Tools are the commands a Cluster runs besides nettool.
var Tools = []string{"ip", "nft", "sysctl", "bridge"}

// RequireRoot is testns.RequireRoot for what a Cluster needs: root and
// Tools.
func RequireRoot(t testing.TB) {
	t.Helper()
	testns.RequireRoot(t, Tools...)
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
