package nft

import (
	"slices"
	"sync"
)

// Commits by others.
//
// Each nf_tables notification carries, in its netlink header, the port id
// of the socket whose batch made the change (the NEWGEN that closes a
// commit too). Our batches go out on sockets this Conn opened (see
// batchTransport.send), whose port ids it keeps; a commit to our table from any
// other port is someone else's: `nft flush ruleset`, `nft add table inet
// nftpolicy { flags dormant; }`, another daemon. The Monitor signals those
// at once, so the table is checked and repaired without waiting for the
// next periodic drift check.

// maxOwnPorts bounds the port ids a Conn remembers: those of the sockets
// its last batches went out on (see batchTransport.send). A Conn sends on
// one parked socket batch after batch, and on another only when a batch
// breaks its socket or two run at once; reads share the parked socket but
// send no batch, so they are not recorded. Each send makes its port the
// most recent, so the parked socket's is never the one forgotten, and a
// port forgotten early only costs one needless drift check.
const maxOwnPorts = 16

// ownPorts holds the last maxOwnPorts distinct port ids, most recent
// last. The zero value is empty.
type ownPorts struct {
	mu  sync.Mutex
	ids []uint32
}

// add makes id the most recent, forgetting the least recent beyond
// maxOwnPorts.
func (p *ownPorts) add(id uint32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := slices.Index(p.ids, id); i >= 0 {
		p.ids = slices.Delete(p.ids, i, i+1)
	} else if len(p.ids) == maxOwnPorts {
		p.ids = slices.Delete(p.ids, 0, 1)
	}
	p.ids = append(p.ids, id)
}

func (p *ownPorts) has(id uint32) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.ids, id)
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
