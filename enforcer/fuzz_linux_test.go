package enforcer

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/nftpolicy/nftpolicy/internal/testns"
	"github.com/nftpolicy/nftpolicy/nft"
)

// A fuzzKernel is the network namespace in which FuzzCompile loads each
// compiled table: one per process (the fuzzing coordinator and each
// worker), removed by the F's cleanup when the process is done, since a
// namespace per input would cost more than the input. Apply replaces the
// whole table, so each load starts from nothing.
//
// Without root it does nothing, so that the tracer half of the target
// still runs; under CI it fails instead, as every kernel test does.
//
// The namespace is named nftfuzz<pid>-<random>: a worker that the fuzzing
// coordinator kills (after a failure, or at a timeout) never runs its
// cleanup, so each new fuzzKernel removes those of processes that are gone.
type fuzzKernel struct{ conn *nft.Conn }

func newFuzzKernel(f *testing.F) *fuzzKernel {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			testns.RequireRoot(f)
		}
		return &fuzzKernel{}
	}
	removeStaleFuzzNamespaces()
	conn, err := nft.Open(testns.New(f, fmt.Sprintf("nftfuzz%d", os.Getpid())))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { conn.Close() })
	return &fuzzKernel{conn: conn}
}

func (k *fuzzKernel) apply(t *testing.T, table *nft.Table, gc *genned) {
	t.Helper()
	if k.conn == nil {
		return
	}
	if _, err := k.conn.Apply(table); err != nil {
		t.Fatalf("the kernel refused the compiled table: %v\ncluster:\n%s\ntable:\n%s", err, gc.yaml(), nft.Render(table))
	}
}

// removeStaleFuzzNamespaces deletes the namespaces of fuzzKernels whose
// process no longer exists.
func removeStaleFuzzNamespaces() {
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "nftfuzz")
		if !ok {
			continue
		}
		pid, _, _ := strings.Cut(rest, "-")
		if _, err := strconv.Atoi(pid); err != nil {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); err == nil {
			continue // still running
		}
		exec.Command("ip", "netns", "del", e.Name()).Run()
	}
}
