//go:build !linux

package nft

// TableComment fails off Linux.
func (c *Conn) TableComment(name string) (string, error) { return "", ErrUnsupported }

// ApplyGuarded fails off Linux.
func (c *Conn) ApplyGuarded(t *Table, check func(comment string, exists bool) error) (BatchStats, error) {
	return BatchStats{}, ErrUnsupported
}

// DeleteGuarded fails off Linux.
func (c *Conn) DeleteGuarded(name string, check func(comment string, exists bool) error) error {
	return ErrUnsupported
}

// CheckNetns fails off Linux.
func (c *Conn) CheckNetns() error { return ErrUnsupported }

// A Beacon is a live owner's socket; off Linux there is none.
type Beacon struct{}

// Hold fails off Linux.
func (c *Conn) Hold(o Owner) (*Beacon, error) { return nil, ErrUnsupported }

// Close does nothing off Linux.
func (b *Beacon) Close() error { return nil }

// Alive fails off Linux.
func (c *Conn) Alive(o Owner) (bool, error) { return false, ErrUnsupported }

// ForwardChains never signals off Linux.
func (m *Monitor) ForwardChains() <-chan struct{} { return nil }
