package enforcer

import (
	"io"
	"time"

	"github.com/nftpolicy/nftpolicy/nft"
)

// kernel is what a Syncer needs of nf_tables in the namespace it programs.
//
// The house has no interfaces for tests only, and this one has a single
// implementation in production, connKernel, an *nft.Conn that behaves as
// before. It is there because the refactoring issue asked for a seam
// under the Syncer: with the concrete *nft.Conn, the paths that matter
// most when something goes wrong (a refused batch and its retries with
// backoff, a generation conflict, drift and its repair, Run's debounce and
// its reaction to the commit monitor) could be tested only as root, and
// Run had no test at all. nft.Fake implements it in memory and can refuse
// a batch, commit as another process would, or drift, so those paths have
// root-free tests (sync_test.go, run_test.go); the kernel tests
// (*_linux_test.go) keep checking the same Syncer on a real kernel.
//
// Its methods are nft.Conn's of the same name, documented there, but for
// Hold and Watch, whose concrete results (nft.Beacon, nft.Monitor) it
// names by what the Syncer does with them.
type kernel interface {
	// Writing: a delta checked against the generation of our last commit,
	// or the whole table checked against the owner record it replaces.
	Generation() (uint32, error)
	WriteDeltaAt(d *nft.Delta, new *nft.Table, gen uint32) (nft.BatchStats, error)
	ApplyGuarded(t *nft.Table, check func(comment string, exists bool) error) (nft.BatchStats, error)

	// Reading back: our table for drift, and the base chains on the
	// forward hook for the priority (ResolvePriority).
	Drift(t *nft.Table) (string, error)
	BaseChains(hook string) ([]nft.BaseChain, error)

	// The owner record and liveness (see Ownership).
	TableComment(name string) (string, error)
	Hold(o nft.Owner) (io.Closer, error)
	Alive(o nft.Owner) (bool, error)
	CheckNetns() error

	// Watch starts following the commits of the namespace (nft.Monitor).
	Watch(table string) (commitMonitor, error)
}

// commitMonitor is nft.Monitor as a Syncer uses it (see WatchCommits).
type commitMonitor interface {
	Untouched(since, upto uint32, wait time.Duration) bool
	Foreign() <-chan struct{}
	ForwardChains() <-chan struct{}
	Close() error
}

// connKernel is the kernel of production: an *nft.Conn, with its beacon
// and monitor returned as the interfaces kernel names.
type connKernel struct{ *nft.Conn }

func (c connKernel) Hold(o nft.Owner) (io.Closer, error) {
	b, err := c.Conn.Hold(o)
	if err != nil {
		return nil, err // not a nil *nft.Beacon in a non-nil io.Closer
	}
	return b, nil
}

func (c connKernel) Watch(table string) (commitMonitor, error) {
	m, err := c.Conn.Monitor(table)
	if err != nil {
		return nil, err
	}
	return m, nil
}
