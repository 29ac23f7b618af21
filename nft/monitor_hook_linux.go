package nft

import (
	"encoding/binary"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

var newChainType = netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWCHAIN)

// ForwardChains signals, without blocking the Monitor, each commit that
// added a base chain on the forward hook to another table (of the ip, ip6
// or inet family; our handover table is ours), and each loss of notifications, which may have hidden
// one. Such a chain may take our forward chain's priority slot or run
// ahead of it (see enforcer.ChoosePriority); the reader re-resolves the
// priority. Signals coalesce: one receive may stand for several chains.
func (m *Monitor) ForwardChains() <-chan struct{} { return m.forward }

func (m *Monitor) notifyForward() {
	select {
	case m.forward <- struct{}{}:
	default:
	}
}

// noteChain signals a NEWCHAIN notification of a forward base chain in
// another table; m.mu is held.
func (m *Monitor) noteChain(msg netlink.Message) {
	fam := msg.Data[0]
	if fam != unix.NFPROTO_INET && fam != unix.NFPROTO_IPV4 && fam != unix.NFPROTO_IPV6 {
		return
	}
	ad, err := netlink.NewAttributeDecoder(msg.Data[4:])
	if err != nil {
		m.notifyForward()
		return
	}
	ad.ByteOrder = binary.BigEndian
	var table string
	forward := false
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_CHAIN_TABLE:
			table = ad.String()
		case unix.NFTA_CHAIN_HOOK:
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				for nad.Next() {
					if nad.Type() == unix.NFTA_HOOK_HOOKNUM && nad.Uint32() == unix.NF_INET_FORWARD {
						forward = true
					}
				}
				return nil
			})
		}
	}
	if ad.Err() != nil {
		m.notifyForward()
		return
	}
	if forward && !(fam == unix.NFPROTO_INET && (table == m.table || table == HandoverTable(m.table))) {
		m.notifyForward()
	}
}
