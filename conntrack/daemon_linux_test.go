package conntrack_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nftpolicy/nftpolicy/internal/netns"
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

// TestIntegrationRunRevokesWhenTheServerSendsFirst runs the daemon through
// a tightening that denies only the servers' ingress, x/a → x/b, while
// x/b → x/a stays allowed, and back. With --conntrack-cleanup (the
// default) x/a's TCP connection and UDP flow stay blocked both ways though
// x/b sends first, y/a's connection goes on on the same socket, and the
// widening gives x/a's connections back and lets new ones start. With
// --conntrack-cleanup=false the whole feature is off: no revoke rule in
// the table, and the established flows go on (the bug the cleanup fixes).
func TestIntegrationRunRevokesWhenTheServerSendsFirst(t *testing.T) {
	for _, cleanup := range []bool{true, false} {
		name := map[bool]string{true: "cleanup", false: "no-cleanup"}[cleanup]
		t.Run(name, func(t *testing.T) {
			d := newDataPlane(t)
			dir := t.TempDir()
			for file, content := range map[string]string{"cluster.yaml": d.c.Manifests(), "policies.yaml": pushPolicy("x", "y")} {
				if err := netns.WriteFileAtomic(filepath.Join(dir, file), []byte(content)); err != nil {
					t.Fatal(err)
				}
			}
			var args []string
			if !cleanup {
				args = []string{"--conntrack-cleanup=false"}
			}
			daemons := netns.StartTestDaemons(t, d.c, dir, netns.DaemonOptions{Args: args})
			defer func() {
				if t.Failed() {
					t.Logf("daemon log:\n%s", daemons.Logs(d.node))
				}
			}()
			listing, err := d.node.Exec("nft", "list", "table", "inet", "nftpolicy")
			if err != nil {
				t.Fatalf("nft list: %v: %s", err, listing)
			}
			if got := strings.Contains(string(listing), "ct mark"); got != cleanup {
				t.Errorf("the table reads the conntrack mark: %v, want %v:\n%s", got, cleanup, listing)
			}

			srv := startPushServers(t, d.pods["x/b"].NetnsPath())
			xb := d.addr("x/b", netns.IPv4)
			revoked := []*duplex{srv.dial(t, d.pods["x/a"], "tcp", xb), srv.dial(t, d.pods["x/a"], "udp", xb)}
			kept := srv.dial(t, d.pods["y/a"], "tcp", xb)
			for _, f := range append(revoked, kept) {
				f.mustTalk(t, "under the wide policy", passTimeout)
			}

			if err := daemons.WriteFile("policies.yaml", pushPolicy("y")); err != nil {
				t.Fatal(err)
			}
			if cleanup {
				mustStayDead(t, revoked, "after the tightening's sync, the server sending first")
			} else {
				for _, f := range revoked {
					f.mustTalk(t, "after the tightening, cleanup off (the bug)", passTimeout)
				}
			}
			kept.mustTalk(t, "after the tightening's sync", passTimeout)

			if err := daemons.WriteFile("policies.yaml", pushPolicy("x", "y")); err != nil {
				t.Fatal(err)
			}
			for _, f := range revoked {
				f.mustTalk(t, "after the widening's sync", 30*time.Second)
			}
			srv.dial(t, d.pods["x/a"], "tcp", xb).mustTalk(t, "a new connection after the widening", passTimeout)
			kept.mustTalk(t, "after the widening's sync", passTimeout)
		})
	}
}
