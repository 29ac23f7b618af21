// Package testbin builds the nftpolicy command for tests that need it as a
// process: a daemon that outlives a call, signals, a ServiceAccount token.
//
// # Building
//
// The binary is built once per test process with the caller's own
// environment, so the packages are those `go test` already compiled and
// the build costs a link. It lives in a temporary directory that is
// removed when the process's tests are done (see Main).
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	once sync.Once
	dir  string
	path string
	err  error
)

// Nftpolicy returns the path of an nftpolicy binary built from this
// checkout, building it on the first call; it fails t if the build fails.
func Nftpolicy(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		dir, err = os.MkdirTemp("", "nftpolicy-bin-")
		if err != nil {
			return
		}
		path = filepath.Join(dir, "nftpolicy")
		cmd := exec.Command("go", "build", "-o", path, "github.com/nftpolicy/nftpolicy/cmd/nftpolicy")
		// Build from this package's directory so the import path resolves
		// in this module whatever the test's working directory.
		if _, file, _, ok := runtime.Caller(0); ok {
			cmd.Dir = filepath.Dir(file)
		}
		if out, buildErr := cmd.CombinedOutput(); buildErr != nil {
			err = fmt.Errorf("go build nftpolicy: %v\n%s", buildErr, out)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// Main is a TestMain for packages that call Nftpolicy: it runs the tests,
// removes the built binary and exits with the tests' code.
func Main(m *testing.M) {
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}
