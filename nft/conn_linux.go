package nft

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Connecting to nf_tables: a Conn, the namespace it works in, the sockets
// and their buffers, and the one query that needs no table (BaseChains).
// A Conn is a handle on nf_tables in one network namespace.
//
// Every operation builds its own google/nftables connection: messages queue
// inside that object until Flush, so a batch abandoned halfway (an encoding
// error) is dropped with it and can never leak into the next batch. Batches
// reach the kernel through a batchTransport of their own (see transport_linux.go),
// which adds the generation check and reads back the generation committed.
// The netlink socket under them is kept from one batch to the next, drained
// in between; one whose socket failed is closed. A Conn may be used from
// several goroutines; Close releases the socket.
type Conn struct {
	nsFd int    // -1 when operating in the caller's own namespace
	path string // of the namespace nsFd holds, for CheckNetns

	mu     sync.Mutex
	idle   *netlink.Conn // socket of the last batch, for the next one
	closed bool
	// nsUsers counts the holds on nsFd (holdNetns): Close leaves the
	// handle to the last one to release.
	nsUsers int

	ports ownPorts // of the batch sockets, to tell our commits (see Monitor.Foreign)

	// opened counts the sockets dial opened and the query connections
	// made, for the tests that hold the sync path to its one batch
	// socket (see onBatchSocket).
	opened atomic.Int64

	// betweenBatches, set only by tests, runs after batch n (1 to 3) of
	// a write through the handover table, for another writer to act
	// between the batches at a known point; and with n = 0 once the
	// reads that plan a whole-table write are done, before its first
	// batch is encoded and sent (the window of a write that takes long
	// to encode).
	betweenBatches func(n int)
}

// newQueryConn returns a fresh google/nftables connection in this Conn's
// namespace for a query, which sends no batch, and the release the caller
// calls when done with it: the library opens its sockets with the
// namespace handle as it goes. Batches that write use newBatchConn.
func (c *Conn) newQueryConn() (*nftables.Conn, func(), error) {
	fd, release, err := c.holdNetns()
	if err != nil {
		return nil, nil, err
	}
	c.opened.Add(1)
	opts := []nftables.ConnOption{nftables.WithSockOptions(largeBuffers, wideDumps)}
	if fd >= 0 {
		opts = append(opts, nftables.WithNetNSFd(fd))
	}
	nl, err := nftables.New(opts...)
	if err != nil {
		release()
		return nil, nil, err
	}
	return nl, release, nil
}

// holdNetns returns the namespace handle (-1 for the caller's own
// namespace), kept open until release is called, or ErrClosed after
// Close. Whatever makes a socket or enters the namespace holds it: a
// descriptor closed under it would be another file's number, even
// another namespace's.
func (c *Conn) holdNetns() (fd int, release func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return -1, nil, ErrClosed
	}
	c.nsUsers++
	var once sync.Once
	return c.nsFd, func() { once.Do(c.releaseNetns) }, nil
}

func (c *Conn) releaseNetns() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nsUsers--
	if c.nsUsers == 0 && c.closed {
		c.closeNetns()
	}
}

// closeNetns closes the namespace handle, once; c.mu is held.
func (c *Conn) closeNetns() {
	if c.nsFd >= 0 {
		unix.Close(c.nsFd)
		c.nsFd = -1 // closed: holdNetns refuses anyway
	}
}

// Socket buffer sizes for a batch. A batch goes to the kernel in a single
// sendmsg, which netlink refuses (EMSGSIZE) when it exceeds the socket's send
// buffer, and the kernel queues one ack per message, which overflows a small
// receive buffer (ENOBUFS). nft itself raises both with the *FORCE options,
// which need CAP_NET_ADMIN, as writing nf_tables does anyway. These are
// limits, not allocations: the kernel only uses what a batch needs.
const (
	sendBufferBytes    = 512 << 20
	receiveBufferBytes = 64 << 20
)

func largeBuffers(conn *netlink.Conn) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sendBufferBytes); serr != nil {
			return
		}
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, receiveBufferBytes)
	})
	if err != nil {
		return err
	}
	return serr
}

// wideDumps makes the kernel fill each message of a dump on conn with up
// to 32 KB, not a page. The kernel sizes a dump's buffers by the largest
// buffer the socket has been read with (nlk->max_recvmsg_len, capped at
// 32 KB), and a rule that does not fit an empty buffer ends the dump
// there, with NLMSG_DONE and no error. mdlayher/netlink reads each
// message with a buffer of the size it peeks, so on a fresh socket every
// dump buffer is a page: a rule of about 70 expressions or more (another
// program's; ours are far smaller) and every rule after it were left out
// of what Drift, ReadTable and Inspect read, so that an intruder's wide
// rule at the end of our base chain went unseen
// (TestHostileRound16ReadersSeeWideRules). nft reads with 32 KB buffers
// too. So a generation request's answer is read once with a 32 KB buffer
// before anything else. A rule of up to 32 KB is then read: any rule
// nftpolicy writes, and 128 plain expressions. A larger one (127
// references to counters with 255-byte names make 37 KB) still ends the
// dump unseen, by nft too: TestHostileRound17RuleOverDumpBuffer, open.
func wideDumps(conn *netlink.Conn) error {
	req := netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETGEN), Flags: netlink.Request},
		Data:   []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, 0},
	}
	if _, err := conn.Send(req); err != nil {
		return fmt.Errorf("read ruleset generation: %w", err)
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	buf := make([]byte, wideDumpBytes)
	var rerr error
	err = raw.Read(func(fd uintptr) bool {
		_, _, _, _, rerr = unix.Recvmsg(int(fd), buf, nil, 0)
		return rerr != unix.EAGAIN && rerr != unix.EINTR
	})
	if err != nil {
		return err
	}
	if rerr != nil {
		return fmt.Errorf("read ruleset generation: %w", rerr)
	}
	return nil
}

// wideDumpBytes is the largest dump buffer the kernel makes (it caps what
// a socket asks at 32 KB with the skb's overhead taken out).
const wideDumpBytes = 32 << 10

// Open connects to nf_tables in the network namespace netns: "" for the
// current one, a name under /run/netns (as `ip netns add` makes), or a path
// to a namespace file such as /proc/PID/ns/net.
func Open(netns string) (*Conn, error) {
	if netns == "" {
		return &Conn{nsFd: -1}, nil
	}
	path := netns
	if !strings.Contains(netns, "/") {
		path = "/run/netns/" + netns
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", path, err)
	}
	return &Conn{nsFd: fd, path: path}, nil
}

// Close releases the parked socket and the namespace handle, at once or
// when the last call using the handle is done. Afterwards every call
// fails with ErrClosed; closing again does nothing.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	idle := c.idle
	c.idle, c.closed = nil, true
	if c.nsUsers == 0 {
		c.closeNetns()
	}
	c.mu.Unlock()
	if idle != nil {
		idle.Close()
	}
	return nil
}

// BaseChains lists every base chain on the given hook in this namespace, in
// the families that see routed IP traffic (ip, ip6, inet).
func (c *Conn) BaseChains(hook string) ([]BaseChain, error) {
	want, err := hookNum(hook)
	if err != nil {
		return nil, err
	}
	nl, release, err := c.newQueryConn()
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	defer release()
	chains, err := nl.ListChains()
	if err != nil {
		return nil, fmt.Errorf("list chains: %w", err)
	}
	var out []BaseChain
	for _, ch := range chains {
		if ch.Hooknum == nil || ch.Priority == nil || *ch.Hooknum != *want {
			continue
		}
		fam, ok := fromTableFamily(ch.Table.Family)
		if !ok {
			continue
		}
		out = append(out, BaseChain{Family: fam, Table: ch.Table.Name, Name: ch.Name, Type: string(ch.Type), Hook: hook, Priority: int32(*ch.Priority)})
	}
	return out, nil
}

// fromTableFamily is the Family of the library's table family; ok is false
// for families that do not see routed IP traffic (arp, bridge, netdev).
func fromTableFamily(f nftables.TableFamily) (fam Family, ok bool) {
	switch f {
	case nftables.TableFamilyINet:
		return FamilyInet, true
	case nftables.TableFamilyIPv4:
		return FamilyIPv4, true
	case nftables.TableFamilyIPv6:
		return FamilyIPv6, true
	}
	return "", false
}
