//go:build !linux

package conntrack

import (
	"fmt"
	"runtime"

	"github.com/nftpolicy/nftpolicy/nft"
)

// ErrUnsupported is returned by Open off Linux: conntrack and ctnetlink
// exist only there. Change, the decision, works everywhere.
var ErrUnsupported = fmt.Errorf("conntrack needs Linux, this is %s", runtime.GOOS)

// A Cleaner deletes conntrack entries; off Linux it cannot be opened.
type Cleaner struct{}

// Open fails off Linux.
func Open(netns string) (*Cleaner, error) { return nil, ErrUnsupported }

// Close does nothing.
func (c *Cleaner) Close() error { return nil }

// Narrowed fails off Linux.
func (c *Cleaner) Narrowed(old, new *nft.Table) (Stats, error) { return Stats{}, ErrUnsupported }

// Recheck fails off Linux.
func (c *Cleaner) Recheck(t *nft.Table) (Stats, error) { return Stats{}, ErrUnsupported }

// DeleteMarked fails off Linux.
func (c *Cleaner) DeleteMarked(bit uint32) (int, error) { return 0, ErrUnsupported }
