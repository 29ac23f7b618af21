package conntrack

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/mdlayher/netlink"
	ctnl "github.com/ti-mo/conntrack"
	"github.com/ti-mo/netfilter"
	"golang.org/x/sys/unix"

	"github.com/nftpolicy/nftpolicy/nft"
)

// A Cleaner deletes the conntrack entries a policy change no longer allows,
// in one network namespace, over ctnetlink. Its sockets are created inside
// that namespace (netlink.Config.NetNS: a thread switched into it creates
// the socket, which belongs to the namespace for its whole life), so the
// calling thread never changes namespace. They are kept from one call to
// the next (creating them costs milliseconds, more than a small cleanup),
// and made again after an error. A Cleaner may be used from several
// goroutines; calls run one at a time.
type Cleaner struct {
	nsFd int // -1: the caller's own namespace

	mu     sync.Mutex
	closed bool
	ct     *ctnl.Conn    // ctnetlink, nil until needed or after an error
	rt     *netlink.Conn // rtnetlink, for the namespace's addresses
}

// Open returns a Cleaner for the network namespace netns, named as nft.Open
// names it: "" for the current one, a name under /run/netns, or a path to
// a namespace file such as /proc/PID/ns/net.
func Open(netns string) (*Cleaner, error) {
	if netns == "" {
		return &Cleaner{nsFd: -1}, nil
	}
	path := netns
	if !strings.Contains(netns, "/") {
		path = "/run/netns/" + netns
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("conntrack: open netns %s: %w", path, err)
	}
	return &Cleaner{nsFd: fd}, nil
}

// Close releases the namespace handle.
func (c *Cleaner) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	c.drop()
	if c.nsFd >= 0 {
		return unix.Close(c.nsFd)
	}
	return nil
}

// drop closes the sockets; the next call makes new ones.
func (c *Cleaner) drop() {
	if c.ct != nil {
		c.ct.Close()
		c.ct = nil
	}
	if c.rt != nil {
		c.rt.Close()
		c.rt = nil
	}
}

// dial makes the sockets that are missing.
func (c *Cleaner) dial() error {
	var err error
	if c.rt == nil {
		if c.rt, err = netlink.Dial(unix.NETLINK_ROUTE, c.config()); err != nil {
			return err
		}
	}
	if c.ct == nil {
		if c.ct, err = ctnl.Dial(c.config()); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cleaner) config() *netlink.Config {
	cfg := &netlink.Config{}
	if c.nsFd >= 0 {
		cfg.NetNS = c.nsFd
	}
	return cfg
}

// Narrowed deletes the conntrack entries of the flows that old, the table
// programmed before a write, accepted and new, the table the write
// programmed, drops (see Change). old nil means no table: every flow new
// drops is deleted. It reads nothing from the kernel when Change.Nothing.
//
// An entry that vanished before its delete is counted in Stats.Gone. A
// failed delete does not stop the others; the error names how many failed
// and the first failure.
func (c *Cleaner) Narrowed(old, new *nft.Table) (Stats, error) {
	start := time.Now()
	ch := NewChange(old, new)
	if ch.Nothing() {
		return Stats{Total: time.Since(start)}, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return Stats{}, errors.New("conntrack: cleaner closed")
	}
	if err := c.dial(); err != nil {
		c.drop()
		return Stats{}, fmt.Errorf("conntrack: netlink: %w", err)
	}
	st, err := c.narrowed(ch)
	if err != nil {
		c.drop() // a socket may hold the rest of a reply
	}
	st.Total = time.Since(start)
	return st, err
}

func (c *Cleaner) narrowed(ch *Change) (Stats, error) {
	var st Stats
	t0 := time.Now()
	local, err := localAddrs(c.rt)
	if err != nil {
		return st, fmt.Errorf("conntrack: list local addresses: %w", err)
	}
	conn := c.ct
	flows, err := dump(conn, ch)
	if err != nil {
		return st, fmt.Errorf("conntrack: dump: %w", err)
	}
	st.Dumped = len(flows)
	st.Dump = time.Since(t0)

	t0 = time.Now()
	var doomed []ctnl.Flow
	for i := range flows {
		f := &flows[i]
		if f.TupleMaster.IP.SourceAddress.IsValid() {
			st.Related++
			continue
		}
		flow := FlowOf(tupleOf(f.TupleOrig), tupleOf(f.TupleReply))
		if local[flow.Src] || local[flow.Dst] {
			st.Local++
			continue
		}
		if !ch.Concerns(flow) {
			continue
		}
		st.Candidates++
		narrowed, err := ch.Narrows(flow)
		if err != nil {
			return st, fmt.Errorf("conntrack: trace %s: %w", f.TupleOrig, err)
		}
		if narrowed {
			// The reply tuple only tells the library the family (IPv6 needs both).
			doomed = append(doomed, ctnl.Flow{TupleOrig: f.TupleOrig, TupleReply: f.TupleReply, Zone: f.Zone})
		}
	}
	st.Narrowed = len(doomed)
	st.Trace = time.Since(t0)

	t0 = time.Now()
	var failed int
	var first error
	for _, f := range doomed {
		switch err := conn.Delete(f); {
		case err == nil:
			st.Deleted++
		case errors.Is(err, unix.ENOENT):
			st.Gone++ // it ended, or was replaced, since the dump
		default:
			failed++
			if first == nil {
				first = fmt.Errorf("%s: %w", f.TupleOrig, err)
			}
		}
	}
	st.Delete = time.Since(t0)
	if failed > 0 {
		return st, fmt.Errorf("conntrack: %d of %d deletes failed, first %w", failed, len(doomed), first)
	}
	return st, nil
}

// dump reads the entries of the families the change concerns: all of
// them when both, one family through a kernel-side filter (Linux 4.20)
// otherwise.
func dump(conn *ctnl.Conn, ch *Change) ([]ctnl.Flow, error) {
	switch v4, v6 := ch.Families(); {
	case v4 && v6:
		return conn.Dump(nil)
	case v4:
		return conn.DumpFilter(ctnl.NewFilter().Family(netfilter.ProtoIPv4), nil)
	case v6:
		return conn.DumpFilter(ctnl.NewFilter().Family(netfilter.ProtoIPv6), nil)
	}
	return nil, nil
}

func tupleOf(t ctnl.Tuple) Tuple {
	return Tuple{
		Src:      t.IP.SourceAddress,
		Dst:      t.IP.DestinationAddress,
		Proto:    nft.Proto(t.Proto.Protocol),
		Sport:    t.Proto.SourcePort,
		Dport:    t.Proto.DestinationPort,
		ICMPType: t.Proto.ICMPType,
	}
}

// localAddrs lists the addresses configured in the namespace
// (RTM_GETADDR): a flow from or to one of them is the node's own, which
// the forward hook never sees.
func localAddrs(conn *netlink.Conn) (map[netip.Addr]bool, error) {
	msgs, err := conn.Execute(netlink.Message{
		Header: netlink.Header{Type: unix.RTM_GETADDR, Flags: netlink.Request | netlink.Dump},
		Data:   make([]byte, unix.SizeofIfAddrmsg), // family AF_UNSPEC: both
	})
	if err != nil {
		return nil, err
	}
	addrs := map[netip.Addr]bool{}
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWADDR || len(m.Data) < unix.SizeofIfAddrmsg {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[unix.SizeofIfAddrmsg:])
		if err != nil {
			return nil, err
		}
		// IFA_LOCAL is the local address; IFA_ADDRESS is too, except on a
		// point-to-point link, where it is the peer's.
		var local, address netip.Addr
		for ad.Next() {
			switch ad.Type() {
			case unix.IFA_LOCAL:
				local, _ = netip.AddrFromSlice(ad.Bytes())
			case unix.IFA_ADDRESS:
				address, _ = netip.AddrFromSlice(ad.Bytes())
			}
		}
		if err := ad.Err(); err != nil {
			return nil, err
		}
		if local.IsValid() {
			addrs[local.Unmap()] = true
		} else if address.IsValid() {
			addrs[address.Unmap()] = true
		}
	}
	return addrs, nil
}
