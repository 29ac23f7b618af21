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

// A Cleaner revokes the conntrack entries a policy change no longer allows,
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
	ct     *ctnl.Conn      // ctnetlink, nil until needed or after an error
	nf     *netfilter.Conn // ctnetlink for masked mark updates, likewise
	rt     *netlink.Conn   // rtnetlink, for the namespace's addresses
	last   *nft.Table      // new of the last call that succeeded
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
	if c.nf != nil {
		c.nf.Close()
		c.nf = nil
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
	if c.nf == nil {
		if c.nf, err = netfilter.Dial(c.config()); err != nil {
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

// Narrowed revokes the conntrack entries of the flows that old, the table
// programmed before a write, accepted and new, the table the write
// programmed, drops (see Change). old nil means no table: every flow new
// drops is revoked. When new drops marked connections (RevokedBit), an
// entry is revoked by setting that bit in its mark and the marks of
// flows new accepts from any link are cleared; otherwise it is deleted.
// A hairpin new accepts only from its own link is deleted either way, for
// the kernel to judge with its link (Change.ByLink).
//
// It reads nothing from the kernel when Change.Nothing, unless marks
// outside what old drops may exist: old is not the new table of the
// previous call that succeeded (a first call, nil, or after a failure), and
// new marks. A mark is then looked for on every entry, both families.
//
// An entry that vanished before its update is counted in Stats.Gone. A
// failed update does not stop the others; the error names how many failed
// and the first failure.
func (c *Cleaner) Narrowed(old, new *nft.Table) (Stats, error) {
	ch := NewChange(old, new)
	c.mu.Lock()
	defer c.mu.Unlock()
	// Once a call succeeded, every marked entry is one its new table drops
	// (it cleared the others), so a prefilter that finds no flow the next
	// change concerns finds no mark to clear either. Otherwise, sweep.
	sweep := ch.Revoked() != 0 && (old == nil || old != c.last)
	return c.run(ch, new, sweep)
}

// Recheck judges every flow again by t, the table programmed all along
// since an earlier call brought conntrack in line with it (see Recheck,
// the Change): it revokes the flows t drops that are not marked revoked,
// which got their permission back from someone else (Stats.Revived),
// restores the marked flows t accepts, and deletes the entries of
// hairpins t drops only from another link (Change.ByLink). Unmarked
// hairpins are judged as coming in on their own link. The daemon calls it
// at every drift check, so that a revoked connection revived by another
// component's write to the conntrack mark is revoked again within one
// period once nothing clears the mark any more. Its cost is that of a
// Narrowed with no table before: a dump of every entry and a trace of
// those to or from an isolated pod, unless t isolates nobody.
func (c *Cleaner) Recheck(t *nft.Table) (Stats, error) {
	ch := Recheck(t)
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := c.run(ch, t, ch.Revoked() != 0)
	st.Revived = st.Narrowed
	return st, err
}

// run carries out a change to table new; mu is held.
func (c *Cleaner) run(ch *Change, new *nft.Table, sweep bool) (Stats, error) {
	start := time.Now()
	if ch.Nothing() && !sweep {
		c.last = new
		return Stats{Total: time.Since(start)}, nil
	}
	if c.closed {
		return Stats{}, errors.New("conntrack: cleaner closed")
	}
	c.last = nil
	if err := c.dial(); err != nil {
		c.drop()
		return Stats{}, fmt.Errorf("conntrack: netlink: %w", err)
	}
	st, err := c.narrowed(ch, sweep)
	if err != nil {
		c.drop() // a socket may hold the rest of a reply
	} else {
		c.last = new
	}
	st.Total = time.Since(start)
	return st, err
}

func (c *Cleaner) narrowed(ch *Change, sweep bool) (Stats, error) {
	var st Stats
	t0 := time.Now()
	local, err := localAddrs(c.rt)
	if err != nil {
		return st, fmt.Errorf("conntrack: list local addresses: %w", err)
	}
	conn := c.ct
	bit := ch.Revoked()
	var flows []ctnl.Flow
	switch {
	case sweep && ch.Nothing():
		// Only marks to look at: the kernel returns only marked entries.
		flows, err = conn.DumpFilter(ctnl.NewFilter().Mark(bit).MarkMask(bit), nil)
	case sweep:
		flows, err = conn.Dump(nil)
	default:
		flows, err = dump(conn, ch)
	}
	if err != nil {
		return st, fmt.Errorf("conntrack: dump: %w", err)
	}
	st.Dumped = len(flows)
	st.Dump = time.Since(t0)

	t0 = time.Now()
	// doomed are revoked (marked, or deleted without a revoke rule),
	// handed deleted so that the kernel judges their next packet with its
	// link (ByLink), restored have their mark cleared.
	var doomed, handed, restored []ctnl.Flow
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
		// The reply tuple only tells the library the family (IPv6 needs both).
		entry := ctnl.Flow{TupleOrig: f.TupleOrig, TupleReply: f.TupleReply, Zone: f.Zone}
		if bit != 0 && f.Mark&bit != 0 {
			// Revoked by an earlier change: it stays so while new drops
			// it, and is given back as soon as new allows it (a widening),
			// or the connection would stay dead though policy allows it.
			st.Marked++
			allowed, err := ch.Allows(flow)
			if err != nil {
				return st, fmt.Errorf("conntrack: trace %s: %w", f.TupleOrig, err)
			}
			if allowed {
				restored = append(restored, entry)
				continue
			}
			byLink, err := ch.ByLink(flow)
			if err != nil {
				return st, fmt.Errorf("conntrack: trace %s: %w", f.TupleOrig, err)
			}
			if byLink {
				handed = append(handed, entry)
			}
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
		if !narrowed {
			continue
		}
		st.Narrowed++
		byLink, err := ch.ByLink(flow)
		if err != nil {
			return st, fmt.Errorf("conntrack: trace %s: %w", f.TupleOrig, err)
		}
		if byLink {
			handed = append(handed, entry)
		} else {
			doomed = append(doomed, entry)
		}
	}
	st.Trace = time.Since(t0)

	t0 = time.Now()
	var failed int
	var first error
	do := func(f ctnl.Flow, op func(ctnl.Flow) error, done *int) {
		switch err := op(f); {
		case err == nil:
			*done++
		case errors.Is(err, unix.ENOENT):
			st.Gone++ // it ended, or was replaced, since the dump
		default:
			failed++
			if first == nil {
				first = fmt.Errorf("%s: %w", f.TupleOrig, err)
			}
		}
	}
	for _, f := range doomed {
		if bit != 0 {
			do(f, func(f ctnl.Flow) error { return c.setMark(f, bit, bit) }, &st.Revoked)
		} else {
			do(f, conn.Delete, &st.Deleted)
		}
	}
	for _, f := range handed {
		do(f, conn.Delete, &st.Hairpins)
	}
	st.Deleted += st.Hairpins
	for _, f := range restored {
		do(f, func(f ctnl.Flow) error { return c.setMark(f, bit, 0) }, &st.Restored)
	}
	st.Delete = time.Since(t0)
	if failed > 0 {
		return st, fmt.Errorf("conntrack: %d of %d updates failed, first %w", failed, len(doomed)+len(handed)+len(restored), first)
	}
	return st, nil
}

// DeleteMarked deletes every conntrack entry whose mark carries bit, and
// returns how many it deleted. It is for a daemon whose table drops no
// revoked connection (--conntrack-cleanup=false) after one that did:
// the entries an earlier run revoked would otherwise pass as established,
// their mark meaning nothing any more. Deleted, their next packet is NEW
// and judged by the table; a server that sends first starts its
// connection anew, server to client, as any connection does once
// conntrack has forgotten it (package documentation, # Revoking).
func (c *Cleaner) DeleteMarked(bit uint32) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, errors.New("conntrack: cleaner closed")
	}
	c.last = nil // the marks are gone: a later Narrowed sweeps
	if err := c.dial(); err != nil {
		c.drop()
		return 0, fmt.Errorf("conntrack: netlink: %w", err)
	}
	flows, err := c.ct.DumpFilter(ctnl.NewFilter().Mark(bit).MarkMask(bit), nil)
	if err != nil {
		c.drop()
		return 0, fmt.Errorf("conntrack: dump: %w", err)
	}
	deleted, failed := 0, 0
	var first error
	for _, f := range flows {
		switch err := c.ct.Delete(ctnl.Flow{TupleOrig: f.TupleOrig, TupleReply: f.TupleReply, Zone: f.Zone}); {
		case err == nil:
			deleted++
		case errors.Is(err, unix.ENOENT): // gone since the dump
		default:
			failed++
			if first == nil {
				first = fmt.Errorf("%s: %w", f.TupleOrig, err)
			}
		}
	}
	if failed > 0 {
		c.drop()
		return deleted, fmt.Errorf("conntrack: %d of %d deletes failed, first %w", failed, len(flows), first)
	}
	return deleted, nil
}

// Attributes of ctnetlink (include/uapi/linux/netfilter/nfnetlink_conntrack.h).
const (
	ctaTupleOrig    = 1
	ctaMark         = 8
	ctaZone         = 18
	ctaMarkMask     = 21
	ctaTupleIP      = 1
	ctaTupleProto   = 2
	ctaTupleZone    = 3
	ctaIPv4Src      = 1
	ctaIPv4Dst      = 2
	ctaIPv6Src      = 3
	ctaIPv6Dst      = 4
	ctaProtoNum     = 1
	ctaProtoSrcPort = 2
	ctaProtoDstPort = 3
	ctaProtoICMPID  = 4
	ctaProtoICMPTyp = 5
	ctaProtoICMPCod = 6
	ctaProtoICMP6ID = 7
	ctaProtoICMP6Ty = 8
	ctaProtoICMP6Co = 9
	ipctnlMsgCtNew  = 0 // IPCTNL_MSG_CT_NEW: updates an entry that exists
)

// setMark rewrites the bits of mask in the mark of the entry with f's
// original tuple to value, in one request that leaves every other bit of
// the mark as it is at that moment: CTA_MARK with CTA_MARK_MASK, which
// the kernel applies as mark = (mark & ^mask) ^ value
// (ctnetlink_change_mark). Other components' bits are theirs, as in the
// packet mark; a read, change and write from user space could undo a
// change of theirs made in between. Without NLM_F_CREATE an entry that
// is gone is ENOENT, not created.
func (c *Cleaner) setMark(f ctnl.Flow, mask, value uint32) error {
	orig, err := tupleAttr(ctaTupleOrig, f.TupleOrig)
	if err != nil {
		return err
	}
	attrs := []netfilter.Attribute{orig,
		{Type: ctaMark, Data: netfilter.Uint32Bytes(value)},
		{Type: ctaMarkMask, Data: netfilter.Uint32Bytes(mask)},
	}
	if f.Zone != 0 {
		attrs = append(attrs, netfilter.Attribute{Type: ctaZone, Data: netfilter.Uint16Bytes(f.Zone)})
	}
	family := netfilter.ProtoIPv4
	if f.TupleOrig.IP.SourceAddress.Is6() {
		family = netfilter.ProtoIPv6
	}
	req, err := netfilter.MarshalNetlink(netfilter.Header{
		SubsystemID: netfilter.NFSubsysCTNetlink,
		MessageType: ipctnlMsgCtNew,
		Family:      family,
		Flags:       netlink.Request | netlink.Acknowledge,
	}, attrs)
	if err != nil {
		return err
	}
	_, err = c.nf.Query(req)
	return err
}

// tupleAttr encodes a tuple as ctnetlink reads it (ctnetlink_parse_tuple).
func tupleAttr(typ uint16, t ctnl.Tuple) (netfilter.Attribute, error) {
	src, dst := t.IP.SourceAddress, t.IP.DestinationAddress
	ip := netfilter.Attribute{Type: ctaTupleIP, Nested: true}
	switch {
	case src.Is4() && dst.Is4():
		ip.Children = []netfilter.Attribute{{Type: ctaIPv4Src, Data: src.AsSlice()}, {Type: ctaIPv4Dst, Data: dst.AsSlice()}}
	case src.Is6() && dst.Is6():
		ip.Children = []netfilter.Attribute{{Type: ctaIPv6Src, Data: src.AsSlice()}, {Type: ctaIPv6Dst, Data: dst.AsSlice()}}
	default:
		return netfilter.Attribute{}, fmt.Errorf("tuple %s: addresses of two families", t)
	}
	p := t.Proto
	proto := netfilter.Attribute{Type: ctaTupleProto, Nested: true, Children: []netfilter.Attribute{{Type: ctaProtoNum, Data: []byte{p.Protocol}}}}
	switch p.Protocol {
	case unix.IPPROTO_ICMP:
		proto.Children = append(proto.Children,
			netfilter.Attribute{Type: ctaProtoICMPID, Data: netfilter.Uint16Bytes(p.ICMPID)},
			netfilter.Attribute{Type: ctaProtoICMPTyp, Data: []byte{p.ICMPType}},
			netfilter.Attribute{Type: ctaProtoICMPCod, Data: []byte{p.ICMPCode}})
	case unix.IPPROTO_ICMPV6:
		proto.Children = append(proto.Children,
			netfilter.Attribute{Type: ctaProtoICMP6ID, Data: netfilter.Uint16Bytes(p.ICMPID)},
			netfilter.Attribute{Type: ctaProtoICMP6Ty, Data: []byte{p.ICMPType}},
			netfilter.Attribute{Type: ctaProtoICMP6Co, Data: []byte{p.ICMPCode}})
	default:
		proto.Children = append(proto.Children,
			netfilter.Attribute{Type: ctaProtoSrcPort, Data: netfilter.Uint16Bytes(p.SourcePort)},
			netfilter.Attribute{Type: ctaProtoDstPort, Data: netfilter.Uint16Bytes(p.DestinationPort)})
	}
	attr := netfilter.Attribute{Type: typ, Nested: true, Children: []netfilter.Attribute{ip, proto}}
	if t.Zone != 0 {
		attr.Children = append(attr.Children, netfilter.Attribute{Type: ctaTupleZone, Data: netfilter.Uint16Bytes(t.Zone)})
	}
	return attr, nil
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
