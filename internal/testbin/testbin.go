// Package testbin builds the commands of this module for tests that need
// them as processes, and runs them: the nftpolicy daemon (a process that
// outlives a call, signals, a ServiceAccount token) and the network
// harness's nettool.
//
// # Building
//
// Nftpolicy returns the nftpolicy binary: $NFTPOLICY_BIN when set, else one
// built once per test process. Command builds any command of the module the
// same way, and Build builds nftpolicy into a directory with linker flags
// (an older table layout, a version).
//
// Builds use the caller's own environment (no CGO_ENABLED=0 unless asked),
// so the packages are those `go test` already compiled and a build costs a
// link. A binary built once per process is opened and its temporary
// directory removed at once; it runs as /proc/<pid>/fd/<n> of the test
// process, so no temporary file outlives the tests however they end (a
// timeout, kill -9).
//
// # Processes
//
// A Proc is a started command whose exit is awaited once, however many
// goroutines ask (two exec.Cmd.Wait calls on one process can block
// forever). Stop asks it to exit with SIGTERM and kills it after a grace
// period; Kill is kill -9.
//
// # Daemons
//
// StartDaemon runs `nftpolicy run` with a health address it chose (a free
// port on 127.0.0.1, passed as --health-addr: nothing is read from the
// log), keeping its log. Readyz asks /readyz and ParseReadyz reads its
// answer: the reasons for not being ready, one per line, then "synced
// generation N" once a sync succeeded (cmd/nftpolicy healthHandler).
package testbin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// BinEnv names the environment variable that may hold the path of a
// prebuilt nftpolicy binary, used instead of building one.
const BinEnv = "NFTPOLICY_BIN"

// NftpolicyPkg is the nftpolicy command, relative to the module.
const NftpolicyPkg = "./cmd/nftpolicy"

// Nftpolicy returns the path of the nftpolicy binary (see Path), failing t
// if there is none.
func Nftpolicy(t testing.TB) string {
	t.Helper()
	p, err := Path()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Path returns the path of the nftpolicy binary: $NFTPOLICY_BIN made
// absolute when set, else one built from this checkout once per process.
func Path() (string, error) {
	if p := os.Getenv(BinEnv); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("testbin: prebuilt nftpolicy ($%s): %w", BinEnv, err)
		}
		return abs, nil
	}
	return Command(NftpolicyPkg)
}

// Build builds nftpolicy into dir with the linker flags ldflags ("" for
// none) and returns the binary's path. The file stays where it is: dir is
// the caller's (t.TempDir()).
func Build(dir, ldflags string) (string, error) {
	return build(dir, NftpolicyPkg, ldflags, nil)
}

var (
	mu    sync.Mutex
	built = map[string]*builtCommand{} // by package and environment
)

type builtCommand struct {
	once sync.Once
	path string
	file *os.File // kept open: path names it
	err  error
}

// Command builds the command pkg of this module ("./cmd/nftpolicy"), with
// env added to the environment, once per process, and returns a path that
// runs it (see Building).
func Command(pkg string, env ...string) (string, error) {
	key := pkg + "\x00" + strings.Join(env, "\x00")
	mu.Lock()
	b := built[key]
	if b == nil {
		b = &builtCommand{}
		built[key] = b
	}
	mu.Unlock()
	b.once.Do(func() { b.path, b.file, b.err = buildOpen(pkg, env) })
	return b.path, b.err
}

// buildOpen builds pkg into a temporary directory, opens the binary and
// removes the directory: the open file is all that is left of it.
func buildOpen(pkg string, env []string) (string, *os.File, error) {
	dir, err := os.MkdirTemp("", "nftpolicy-testbin-")
	if err != nil {
		return "", nil, err
	}
	defer os.RemoveAll(dir)
	out, err := build(dir, pkg, "", env)
	if err != nil {
		return "", nil, err
	}
	f, err := os.Open(out)
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd()), f, nil
}

func build(dir, pkg, ldflags string, env []string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("testbin: building %s needs the go command: %w", pkg, err)
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	args := []string{"build", "-o", out}
	if ldflags != "" {
		args = append(args, "-ldflags", ldflags)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, append(args, pkg)...)
	cmd.Dir = moduleRoot()
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("testbin: go build %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}

// moduleRoot is the directory of this module's go.mod, found from this
// source file (internal/testbin), so that a relative package resolves in
// this module whatever the test's working directory.
func moduleRoot() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return ""
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}
