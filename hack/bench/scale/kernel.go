package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftpolicy/nftpolicy/enforcer"
	"github.com/nftpolicy/nftpolicy/internal/ruleprobe"
	"github.com/nftpolicy/nftpolicy/nft"
)

// tableName is the daemon's table, in family inet.
const tableName = enforcer.DefaultTable

// A kernel reads the daemon's namespace over netlink: the table's chains
// and a chain's rules (ruleprobe.Reader), and on a socket kept open (a
// read every 0.2 ms must not cost a socket and a setns each) the ruleset
// generation and the headers of the table's sets (ipv4Sets).
type kernel struct {
	*ruleprobe.Reader
	fd int
	nl *netlink.Conn
}

func openKernel(netns string) (*kernel, error) {
	r, err := ruleprobe.Open(netns)
	if err != nil {
		return nil, err
	}
	k := &kernel{Reader: r, fd: -1}
	fail := func(err error) (*kernel, error) {
		k.Close()
		return nil, err
	}
	if k.fd, err = unix.Open("/run/netns/"+netns, unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
		return fail(err)
	}
	if k.nl, err = netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: k.fd}); err != nil {
		return fail(fmt.Errorf("netlink in %s: %w", netns, err))
	}
	return k, nil
}

func (k *kernel) Close() {
	if k.nl != nil {
		k.nl.Close()
	}
	if k.fd >= 0 {
		unix.Close(k.fd)
	}
	k.Reader.Close()
}

// generation reads the ruleset generation, which every commit in the
// namespace changes.
func (k *kernel) generation() (uint32, error) { return nft.ReadGeneration(k.nl) }

// hasTable reports whether our table exists and holds chains: the first
// sync writes it whole, in one batch.
func (k *kernel) hasTable() (bool, error) {
	chains, err := k.Chains()
	return len(chains) > 0, err
}

// ipv4Sets returns the IPv4 address sets of our table by comment (the
// peer sets' comments spell their key); nil for a comment two sets share. google/nftables does not decode
// a set's comment, so the sets are dumped here (NFT_MSG_GETSET).
func (k *kernel) ipv4Sets() (map[string]*nftables.Set, error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.NFTA_SET_TABLE, tableName)
	attrs, err := ae.Encode()
	if err != nil {
		return nil, err
	}
	msgs, err := k.nl.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETSET), Flags: netlink.Request | netlink.Dump},
		Data:   append([]byte{unix.NFPROTO_INET, unix.NFNETLINK_V0, 0, 0}, attrs...),
	})
	if err != nil {
		return nil, fmt.Errorf("list the sets of table inet %s: %w", tableName, err)
	}
	out := map[string]*nftables.Set{}
	for _, m := range msgs {
		if m.Header.Type != netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWSET) || len(m.Data) < 4 {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return nil, err
		}
		ad.ByteOrder = binary.BigEndian
		var name, comment string
		var keyType, flags uint32
		for ad.Next() {
			switch ad.Type() {
			case unix.NFTA_SET_NAME:
				name = ad.String()
			case unix.NFTA_SET_KEY_TYPE:
				keyType = ad.Uint32()
			case unix.NFTA_SET_FLAGS:
				flags = ad.Uint32()
			case unix.NFTA_SET_USERDATA:
				comment, _ = userdata.GetString(ad.Bytes(), userdata.NFTNL_UDATA_SET_COMMENT)
			}
		}
		if err := ad.Err(); err != nil {
			return nil, err
		}
		if keyType == nftables.TypeIPAddr.GetNFTMagic() && flags&unix.NFT_SET_MAP == 0 {
			if _, twice := out[comment]; twice {
				// Comments are cut at 128 bytes (enforcer.PeerSetComment):
				// two peer lists may share one. Such a set is no one's.
				out[comment] = nil
				continue
			}
			out[comment] = &nftables.Set{Table: k.Table, Name: name, KeyType: nftables.TypeIPAddr,
				Interval: flags&unix.NFT_SET_INTERVAL != 0, Comment: comment}
		}
	}
	return out, nil
}

// setHas reports whether an element of the IPv4 set s holds addr. A set
// without intervals (a peer set of pods alone, held per address) holds
// one address an element. The kernel keeps an interval set in an rbtree
// and dumps each interval as two elements: its first address, and the
// first address after it flagged as an interval end. A set keyed by
// ranges (pipapo) gives KeyEnd, the last address, instead.
func (k *kernel) setHas(s *nftables.Set, addr netip.Addr) (bool, error) {
	elems, err := k.Conn.GetSetElements(s)
	if err != nil {
		return false, fmt.Errorf("elements of set %s: %w", s.Name, err)
	}
	key := addr.AsSlice()
	if !s.Interval {
		return slices.ContainsFunc(elems, func(e nftables.SetElement) bool { return bytes.Equal(e.Key, key) }), nil
	}
	type bound struct {
		key []byte
		end bool
	}
	bounds := make([]bound, 0, len(elems))
	for _, e := range elems {
		if len(e.KeyEnd) > 0 {
			if bytes.Compare(e.Key, key) <= 0 && bytes.Compare(key, e.KeyEnd) <= 0 {
				return true, nil
			}
			continue
		}
		bounds = append(bounds, bound{e.Key, e.IntervalEnd})
	}
	slices.SortFunc(bounds, func(a, b bound) int { return bytes.Compare(a.key, b.key) })
	// The last bound at or before addr: inside an interval if it starts one.
	i, found := slices.BinarySearchFunc(bounds, key, func(b bound, k []byte) int { return bytes.Compare(b.key, k) })
	if found {
		return !bounds[i].end, nil
	}
	return i > 0 && !bounds[i-1].end, nil
}
