package nft

import "sync"

// Commits by others.
//
// Each nf_tables notification carries, in its netlink header, the port id
// of the socket whose batch made the change (the NEWGEN that closes a
// commit too). Our batches go out on sockets this Conn opened (see
// batchSocket), whose port ids it keeps; a commit to our table from any
// other port is someone else's: `nft flush ruleset`, `nft add table inet
// nftpolicy { flags dormant; }`, another daemon. The Monitor signals those
// at once, so the table is checked and repaired without waiting for the
// next periodic drift check.

// maxOwnPorts bounds the port ids a Conn remembers. A Conn uses one batch
// socket at a time and opens a new one only when a batch breaks its socket
// (or two batches run at once), so these are the last several sockets; a
// port forgotten early only costs one needless drift check.
const maxOwnPorts = 16

// ownPorts is a small ring of port ids. The zero value is empty.
type ownPorts struct {
	mu  sync.Mutex
	ids [maxOwnPorts]uint32
	n   int // ids written so far; the ring holds the last maxOwnPorts
}

func (p *ownPorts) add(id uint32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ids[p.n%maxOwnPorts] = id
	p.n++
}

func (p *ownPorts) has(id uint32) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range min(p.n, maxOwnPorts) {
		if p.ids[i] == id {
			return true
		}
	}
	return false
}

// Foreign signals, without blocking the Monitor, each commit that changed
// the table (deleting it included) and did not come from this Conn's
// batches, and each loss of notifications, which may have hidden one. The
// reader checks the table for drift (see Untouched, which tells exactly
// which generations touched it). Signals coalesce: one receive may stand
// for several commits, and our own commits never send one.
func (m *Monitor) Foreign() <-chan struct{} { return m.foreign }

func (m *Monitor) notifyForeign() {
	select {
	case m.foreign <- struct{}{}:
	default:
	}
}
