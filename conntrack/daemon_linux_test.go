package conntrack_test

import (
	"path/filepath"
	"testing"

	"github.com/nftpolicy/nftpolicy/hack/netns"
)

// TestIntegrationRunStopsNarrowedFlows runs the daemon (`nftpolicy run`,
// --conntrack-cleanup on by default) over a manifests directory: a TCP
// connection and a UDP flow that a policy edit no longer allows stop at
// their next packet, within the sync of the edit, while a connection the
// edit still allows goes on on the same socket. With the cleanup turned
// off, the narrowed flows keep going: the bug this fixes.
func TestIntegrationRunStopsNarrowedFlows(t *testing.T) {
	for _, cleanup := range []bool{true, false} {
		name := map[bool]string{true: "cleanup", false: "no-cleanup"}[cleanup]
		t.Run(name, func(t *testing.T) {
			d := newDataPlane(t)
			dir := t.TempDir()
			for file, content := range map[string]string{"cluster.yaml": d.c.Manifests(), "policies.yaml": fromXAndY} {
				if err := netns.WriteFileAtomic(filepath.Join(dir, file), []byte(content)); err != nil {
					t.Fatal(err)
				}
			}
			var args []string
			if !cleanup {
				args = []string{"--conntrack-cleanup=false"}
			}
			daemons := netns.StartTestDaemons(t, d.c, dir, netns.DaemonOptions{Args: args})

			xb4, xb6 := d.addr("x/b", netns.IPv4), d.addr("x/b", netns.IPv6)
			narrowed := []*flow{d.dial(t, "x/a", "tcp", xb4), d.dial(t, "x/a", "udp", xb4), d.dial(t, "x/a", "tcp", xb6)}
			kept := []*flow{d.dial(t, "y/a", "tcp", xb4), d.dial(t, "y/a", "udp", xb6)}
			for _, f := range append(append([]*flow{}, narrowed...), kept...) {
				f.mustPass(t, "under the allowing policy")
			}

			if err := daemons.WriteFile("policies.yaml", fromY); err != nil {
				t.Fatal(err)
			}
			if cleanup {
				allStop(t, narrowed, "after the edit's sync")
			} else {
				for _, f := range narrowed {
					f.mustPass(t, "after the edit, cleanup off (the bug)")
				}
			}
			for _, f := range kept {
				f.mustPass(t, "after the edit's sync")
			}
			if t.Failed() {
				t.Logf("daemon log:\n%s", daemons.Logs(d.node))
			}
		})
	}
}
