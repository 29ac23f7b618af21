//go:build !linux

package nft

import (
	"fmt"
	"runtime"
	"time"
)

// ErrUnsupported is returned by every kernel operation off Linux: nf_tables
// exists only there. The model and the renderer work everywhere.
var ErrUnsupported = fmt.Errorf("nf_tables needs Linux, this is %s", runtime.GOOS)

// A Conn is a handle on nf_tables; off Linux it cannot be opened.
type Conn struct{}

// Open fails off Linux.
func Open(netns string) (*Conn, error) { return nil, ErrUnsupported }

// Close does nothing.
func (c *Conn) Close() error { return nil }

// Apply fails off Linux.
func (c *Conn) Apply(t *Table) (BatchStats, error) { return BatchStats{}, ErrUnsupported }

// Update fails off Linux.
func (c *Conn) Update(old, new *Table) (BatchStats, error) { return BatchStats{}, ErrUnsupported }

// Generation fails off Linux.
func (c *Conn) Generation() (uint32, error) { return 0, ErrUnsupported }

// ApplyAt fails off Linux.
func (c *Conn) ApplyAt(t *Table, gen uint32) (BatchStats, error) { return BatchStats{}, ErrUnsupported }

// UpdateAt fails off Linux.
func (c *Conn) UpdateAt(old, new *Table, gen uint32) (BatchStats, error) {
	return BatchStats{}, ErrUnsupported
}

// WriteDeltaAt fails off Linux.
func (c *Conn) WriteDeltaAt(d *Delta, new *Table, gen uint32) (BatchStats, error) {
	return BatchStats{}, ErrUnsupported
}

// Delete fails off Linux.
func (c *Conn) Delete(family Family, name string) error { return ErrUnsupported }

// BaseChains fails off Linux.
func (c *Conn) BaseChains(hook string) ([]BaseChain, error) { return nil, ErrUnsupported }

// Drift fails off Linux.
func (c *Conn) Drift(t *Table) (string, error) { return "", ErrUnsupported }

// ReadTable fails off Linux.
func (c *Conn) ReadTable(name string) (*TableState, error) { return nil, ErrUnsupported }

// A Monitor follows commits; off Linux there are none.
type Monitor struct{}

// Monitor fails off Linux.
func (c *Conn) Monitor(table string) (*Monitor, error) { return nil, ErrUnsupported }

// Close does nothing off Linux.
func (m *Monitor) Close() error { return nil }

// Untouched cannot tell off Linux.
func (m *Monitor) Untouched(since, upto uint32, wait time.Duration) bool { return false }

// Foreign never signals off Linux.
func (m *Monitor) Foreign() <-chan struct{} { return nil }
