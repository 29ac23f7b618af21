package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/nftpolicy/nftpolicy/internal/testbin"
	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// Without CAP_NET_ADMIN (or CAP_SYS_ADMIN with --netns) apply and run fail
// at once, say what the kernel refused and which capability is missing,
// and program nothing. setpriv (util-linux) drops the capability from the
// bounding set, so root's exec of nftpolicy does not get it.
func TestIntegrationMissingCapabilities(t *testing.T) {
	ns := testns.New(t, "nftpt")
	bin := testbin.Nftpolicy(t)
	for _, tc := range []struct{ cap, cmd string }{
		{"net_admin", "apply"}, {"net_admin", "run"}, {"sys_admin", "apply"},
	} {
		out, err := exec.Command("setpriv", "--bounding-set", "-"+tc.cap, bin, tc.cmd,
			"--manifests", clusterDir, "--node", "node-1", "--netns", ns).CombinedOutput()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != 1 || !strings.Contains(string(out), "operation not permitted") || !strings.Contains(string(out), "needs CAP_NET_ADMIN") {
			t.Errorf("%s without %s: exit %d (%v), want 1 naming the refusal and the capability:\n%s", tc.cmd, tc.cap, code, err, out)
		}
	}
	if out, err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "tables").CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("something was programmed: %s %v", out, err)
	}
}
