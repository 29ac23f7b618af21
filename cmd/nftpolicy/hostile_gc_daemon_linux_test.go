package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nftpolicy/nftpolicy/internal/testbin"
	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// TestHostileGCDaemonKeepsGOGC: `nftpolicy run` started with GOGC in its
// environment runs with that collector target once programmed (the
// runtime's own go_gc_gogc_percent, scraped from --metrics-addr), and
// started without it runs with daemonGCPercent; its log names the target
// either way.
func TestHostileGCDaemonKeepsGOGC(t *testing.T) {
	testns.RequireRoot(t, "nft", "ip")
	for _, tc := range []struct {
		env  string
		want float64
	}{{"80", 80}, {"off", -1}, {"", daemonGCPercent}} {
		t.Run("GOGC="+tc.env, func(t *testing.T) {
			t.Setenv("GOGC", tc.env)
			ns := testns.New(t, "nftgc")
			dir := t.TempDir()
			for _, f := range []string{"namespaces.yaml", "pods.yaml", "policies.yaml"} {
				copyFile(t, filepath.Join(clusterDir, f), filepath.Join(dir, f))
			}
			addr, err := testbin.FreeAddr()
			if err != nil {
				t.Fatal(err)
			}
			d := startDaemon(t, "--manifests", dir, "--node", "node-1", "--netns", ns, "--metrics-addr", addr)
			d.waitGeneration(t, 0)
			// The steady target follows the first sync within a tick of
			// releaseAfterFirstSync: wait for it, then hold it to want.
			var got float64
			for range 100 {
				v, ok := scrape(t, addr)["go_gc_gogc_percent"]
				if !ok {
					t.Skip("the Go collector does not export go_gc_gogc_percent")
				}
				if got = v; tc.want == -1 && got >= 1<<63 {
					got = -1 // runtime/metrics gives "off" as an unsigned -1
				}
				if got == tc.want {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if got != tc.want {
				t.Errorf("GOGC=%q: the daemon runs with a collector target of %v, want %v", tc.env, got, tc.want)
			}
			if logs := d.Logs(); !strings.Contains(logs, "collector target") {
				t.Errorf("GOGC=%q: no log line names the collector target:\n%s", tc.env, logs)
			}
		})
	}
}
