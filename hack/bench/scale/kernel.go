package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftpolicy/nftpolicy/enforcer"
)

// tableName is the daemon's table, in family inet.
const tableName = enforcer.DefaultTable

// A kernel reads the daemon's namespace over netlink: the ruleset
// generation on a socket kept open (a read every 0.2 ms must not cost a
// socket and a setns each), the table's content through google/nftables.
type kernel struct {
	fd    int
	gen   *netlink.Conn
	conn  *nftables.Conn
	table *nftables.Table
}

func openKernel(netns string) (*kernel, error) {
	fd, err := unix.Open("/run/netns/"+netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	k := &kernel{fd: fd, table: &nftables.Table{Name: tableName, Family: nftables.TableFamilyINet}}
	if k.gen, err = netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: fd}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink in %s: %w", netns, err)
	}
	if k.conn, err = nftables.New(nftables.AsLasting(), nftables.WithNetNSFd(fd)); err != nil {
		k.gen.Close()
		unix.Close(fd)
		return nil, fmt.Errorf("nftables in %s: %w", netns, err)
	}
	return k, nil
}

func (k *kernel) Close() {
	k.conn.CloseLasting()
	k.gen.Close()
	unix.Close(k.fd)
}

// generation reads the ruleset generation (NFT_MSG_GETGEN), which every
// commit in the namespace changes.
func (k *kernel) generation() (uint32, error) {
	msgs, err := k.gen.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETGEN), Flags: netlink.Request},
		Data:   []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, 0},
	})
	if err != nil {
		return 0, fmt.Errorf("read the ruleset generation: %w", err)
	}
	for _, m := range msgs {
		if m.Header.Type != netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWGEN) || len(m.Data) < 4 {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return 0, err
		}
		ad.ByteOrder = binary.BigEndian
		for ad.Next() {
			if ad.Type() == unix.NFTA_GEN_ID {
				return ad.Uint32(), nil
			}
		}
	}
	return 0, errors.New("read the ruleset generation: the kernel sent none")
}

// chains lists the names of the chains of our table.
func (k *kernel) chains() ([]string, error) {
	all, err := k.conn.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range all {
		if c.Table.Name == tableName {
			out = append(out, c.Name)
		}
	}
	return out, nil
}

// hasTable reports whether our table exists and holds chains: the first
// sync writes it whole, in one batch.
func (k *kernel) hasTable() (bool, error) {
	chains, err := k.chains()
	return len(chains) > 0, err
}

// chain returns the name of the chain of our table that has prefix and
// suffix.
func (k *kernel) chain(prefix, suffix string) (string, error) {
	chains, err := k.chains()
	if err != nil {
		return "", err
	}
	for _, c := range chains {
		if strings.HasPrefix(c, prefix) && strings.HasSuffix(c, suffix) {
			return c, nil
		}
	}
	return "", fmt.Errorf("no chain %s…%s in table inet %s", prefix, suffix, tableName)
}

// comparesPort reports whether a rule of chain compares a field with the
// 16-bit port (`th dport PORT`).
func (k *kernel) comparesPort(chain string, port uint16) (bool, error) {
	rules, err := k.conn.GetRules(k.table, &nftables.Chain{Name: chain, Table: k.table})
	if err != nil {
		return false, err
	}
	want := binary.BigEndian.AppendUint16(nil, port)
	for _, rule := range rules {
		for _, e := range rule.Exprs {
			if c, ok := e.(*expr.Cmp); ok && c.Op == expr.CmpOpEq && bytes.Equal(c.Data, want) {
				return true, nil
			}
		}
	}
	return false, nil
}

// ipv4Sets returns the IPv4 address sets of our table by comment (the
// peer sets' comments spell their key). google/nftables does not decode
// a set's comment, so the sets are dumped here (NFT_MSG_GETSET).
func (k *kernel) ipv4Sets() (map[string]*nftables.Set, error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.NFTA_SET_TABLE, tableName)
	attrs, err := ae.Encode()
	if err != nil {
		return nil, err
	}
	msgs, err := k.gen.Execute(netlink.Message{
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
			out[comment] = &nftables.Set{Table: k.table, Name: name, KeyType: nftables.TypeIPAddr,
				Interval: flags&unix.NFT_SET_INTERVAL != 0, Comment: comment}
		}
	}
	return out, nil
}

// setHas reports whether an element of the IPv4 interval set s holds addr.
// The kernel keeps such a set in an rbtree and dumps each interval as two
// elements: its first address, and the first address after it flagged
// as an interval end. A set keyed by ranges (pipapo) gives KeyEnd, the
// last address, instead.
func (k *kernel) setHas(s *nftables.Set, addr netip.Addr) (bool, error) {
	elems, err := k.conn.GetSetElements(s)
	if err != nil {
		return false, fmt.Errorf("elements of set %s: %w", s.Name, err)
	}
	key := addr.AsSlice()
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
