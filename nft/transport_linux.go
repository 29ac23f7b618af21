package nft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync/atomic"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Ruleset generations.
//
// nf_tables numbers the states of a namespace's ruleset: every committed
// batch, ours or anyone's, creates a new generation. A batch whose begin
// message carries NFNL_BATCH_GENID is refused as a whole, with nothing
// applied, unless the ruleset is still at that generation; the check and the
// commit run under the same nf_tables commit mutex, so nothing can slip in
// between. nft uses the same attribute for its cache.
//
// google/nftables v0.3.0 builds the batch begin message inside Flush and has
// no way to add an attribute to it, and it has no call to read the
// generation. Both are done here: Generation sends NFT_MSG_GETGEN itself, and
// batches go through a batchTransport.

var (
	newGenType = netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWGEN)
	getGenType = netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETGEN)
)

// nfgenmsg is the header every nfnetlink message starts with.
func nfgenmsg(family uint8, resID uint16) []byte {
	return []byte{family, unix.NFNETLINK_V0, byte(resID >> 8), byte(resID)}
}

// genOf decodes the generation from an NFT_MSG_NEWGEN message.
func genOf(m netlink.Message) (uint32, error) {
	if len(m.Data) < 4 {
		return 0, errors.New("short NEWGEN message")
	}
	ad, err := netlink.NewAttributeDecoder(m.Data[4:])
	if err != nil {
		return 0, err
	}
	ad.ByteOrder = binary.BigEndian
	var gen uint32
	found := false
	for ad.Next() {
		if ad.Type() == unix.NFTA_GEN_ID {
			gen, found = ad.Uint32(), true
		}
	}
	if err := ad.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, errors.New("NEWGEN message without a generation id")
	}
	return gen, nil
}

// dial opens a NETLINK_NETFILTER socket in this Conn's namespace.
func (c *Conn) dial() (*netlink.Conn, error) {
	cfg := &netlink.Config{}
	if c.nsFd >= 0 {
		cfg.NetNS = c.nsFd
	}
	return netlink.Dial(unix.NETLINK_NETFILTER, cfg)
}

// dialLarge is dial with the buffers a batch or a stream of notifications
// needs (see largeBuffers).
func (c *Conn) dialLarge() (*netlink.Conn, error) {
	nl, err := c.dial()
	if err != nil {
		return nil, err
	}
	if err := largeBuffers(nl); err != nil {
		nl.Close()
		return nil, err
	}
	return nl, nil
}

// Generation returns the current ruleset generation of the namespace. It
// changes with every batch anyone commits there; pass it to WriteDeltaAt
// (or ApplyAt) to write only if nobody has committed since.
func (c *Conn) Generation() (uint32, error) {
	nl, err := c.dial()
	if err != nil {
		return 0, fmt.Errorf("read ruleset generation: netlink: %w", err)
	}
	defer nl.Close()
	return ReadGeneration(nl)
}

// ReadGeneration reads the ruleset generation on nl, a NETLINK_NETFILTER
// socket of the namespace: for a caller that polls it and keeps its own
// socket open (hack/bench/scale reads it every 0.2 ms, where a socket and
// two setns calls a read, as Generation makes, cost ~80 against ~17 µs).
func ReadGeneration(nl *netlink.Conn) (uint32, error) {
	msgs, err := nl.Execute(netlink.Message{
		Header: netlink.Header{Type: getGenType, Flags: netlink.Request},
		Data:   nfgenmsg(unix.AF_UNSPEC, 0),
	})
	if err != nil {
		return 0, fmt.Errorf("read ruleset generation: %w", err)
	}
	for _, m := range msgs {
		if m.Header.Type == newGenType {
			gen, err := genOf(m)
			if err != nil {
				return 0, fmt.Errorf("read ruleset generation: %w", err)
			}
			return gen, nil
		}
	}
	return 0, errors.New("read ruleset generation: the kernel sent no generation")
}

// A batchTransport carries one batch of a google/nftables connection to the
// kernel over a netlink socket of its own, adding what the library cannot
// express: the expected generation, a request for the generation the
// commit creates, and no ack per message (as nft sends batches).
//
// The library's only seam for this is its TestDial option: with it, Flush
// talks to a netlink.Conn that nltest.Dial builds around a function, and
// roundTrip is that function. nltest hands it the whole batch, begin and end
// included, as Flush sends it; roundTrip rewrites it and sends it on a real
// socket in the Conn's namespace, with largeBuffers (the library would apply
// socket options to nltest's connection, which has no socket, so they are
// applied here instead). roundTrip returns no replies from the send, so each
// Receive that Flush then makes (one or two per message it sent, in
// receiveAckAware) comes back to roundTrip with a nil request, and roundTrip
// answers it with the next datagram from the real socket. The library thus
// keeps its own message encoding and error accounting; only the begin
// message and the flags differ from what it would send. The
// option is documented for testing, and this leans on how Flush and nltest
// consume replies (described below, as of google/nftables v0.3.0 and
// mdlayher/netlink v1.11): the kernel tests go through its commit, refused
// message and stale generation paths, so an upgrade that changes them fails
// there.
//
// The rewrite:
//
//   - With an expected generation, the begin message gets NFNL_BATCH_GENID
//     (u32, big endian), as nft's mnl_batch_begin sends it.
//   - The first message after the begin gets NLM_F_ECHO. At commit,
//     nf_tables_gen_notify sends NFT_MSG_NEWGEN with the generation just
//     created to the sender when the first message of the batch asked for
//     echo, still under the commit mutex, so it is exactly our commit's
//     generation. The kernel also echoes the objects that one message
//     changed (at most the new table for Apply, whose first message adds
//     the table; for Update one message's set elements or one chain's
//     rules at most); roundTrip drops every such notification. A marker message of no effect would
//     be cheaper, but the kernel refuses non-batch messages such as GETGEN
//     inside a batch (EINVAL), and every batch message changes something.
//     The NEWGEN reaches the socket before any ack, since the kernel acks
//     after committing; roundTrip keeps its generation and never passes it
//     on.
//
// The messages go without NLM_F_ACK: the kernel then answers only the
// messages it refuses (a batch refused as a whole gets one error addressed
// to the begin message; a stale generation is ERESTART), and the NEWGEN
// echo says the batch committed. Flush still waits for an ack per message,
// which on a plain socket would block forever. But the kernel processes a
// batch synchronously inside sendmsg, so every reply is queued on the
// socket before the first Receive (nft's mnl_batch_talk relies on the same,
// reading the replies with a zero select timeout). roundTrip therefore
// passes on the queued replies and, once the socket is empty, answers
// io.EOF, which nltest's connection turns into an empty reply and
// receiveAckAware accepts: Flush returns the error the kernel sent, if any.
// Should the socket run dry with neither an error nor the NEWGEN, roundTrip
// reports that rather than letting Flush take silence for success.
type batchTransport struct {
	c   *Conn
	gen uint32 // expected generation; 0: unchecked
	// guard, if set, replaces gen right before the send, or cancels the
	// batch with its error (see Conn.ApplyGuarded).
	guard func() (uint32, error)
	// tableUserdata is added to each NEWTABLE message (see
	// tableUserdataAttr); nil: none.
	tableUserdata []byte

	nl        *netlink.Conn // the real socket, from the send until close
	batchSeq  uint32        // sequence number of the begin message as sent
	sendErr   error         // the batch never reached the kernel
	refusal   error         // the kernel's error addressed to the batch as a whole
	failed    bool          // the kernel reported an error
	broken    bool          // the socket failed (not a reply): close it after the batch
	dry       bool          // every queued reply has been read
	committed uint32        // the generation from the NEWGEN echo; 0: none seen
}

// newBatchConn returns a fresh google/nftables connection whose Flush goes
// through t.
func (c *Conn) newBatchConn(gen uint32) (*nftables.Conn, *batchTransport, error) {
	t := &batchTransport{c: c, gen: gen}
	nl, err := nftables.New(nftables.WithTestDial(t.roundTrip))
	if err != nil {
		return nil, nil, err
	}
	return nl, t, nil
}

func (t *batchTransport) roundTrip(req []netlink.Message) ([]netlink.Message, error) {
	if req != nil {
		if err := t.send(req); err != nil {
			t.sendErr = err
			// nltest returns this from the next Receive.
			return nil, err
		}
		return nil, nil
	}
	return t.receive()
}

func (t *batchTransport) send(req []netlink.Message) error {
	if t.nl != nil {
		return errors.New("batch transport used for a second send")
	}
	if len(req) < 2 || req[0].Header.Type != netlink.HeaderType(unix.NFNL_MSG_BATCH_BEGIN) ||
		req[len(req)-1].Header.Type != netlink.HeaderType(unix.NFNL_MSG_BATCH_END) {
		return errors.New("batch transport: not a batch")
	}
	if t.guard != nil {
		gen, err := t.guard()
		if err != nil {
			return err
		}
		t.gen = gen
	}
	begin := req[0]
	if t.gen != 0 {
		ae := netlink.NewAttributeEncoder()
		ae.ByteOrder = binary.BigEndian
		ae.Uint32(unix.NFNL_BATCH_GENID, t.gen)
		attrs, err := ae.Encode()
		if err != nil {
			return err
		}
		begin.Data = append(slices.Clip(begin.Data), attrs...)
		begin.Header.Length = 0 // the socket sets it
	}
	msgs := append([]netlink.Message{begin}, req[1:]...)
	for i := range msgs {
		msgs[i] = withTableUserdata(msgs[i], t.tableUserdata)
		msgs[i].Header.PID = 0 // nltest's; the socket sets its own
		// No ack and no echo per message: the kernel reports failures
		// anyway, and the NEWGEN echo below confirms the commit. The
		// library asks for an ack on every message and an echo of every
		// rule (to learn rule handles, which we never use): at 10k policies
		// ~100k replies to build, receive and drop, 28 MB of them echoes;
		// dropping the acks took that batch from 5.5 to 4.1 s.
		msgs[i].Header.Flags &^= netlink.Acknowledge | netlink.Echo
	}
	if len(msgs) > 2 {
		msgs[1].Header.Flags |= netlink.Echo
	}
	nl, err := t.c.batchSocket()
	if err != nil {
		return err
	}
	t.nl = nl
	buf := marshalBatch(msgs)
	t.batchSeq = msgs[0].Header.Sequence
	if err := sendBatch(nl, buf); err != nil {
		return fmt.Errorf("send batch: %w", err)
	}
	return nil
}

// marshalBatch encodes a batch into one buffer of exactly its size, as one
// sendmsg needs it. netlink.Conn.SendMessages would encode each message
// into a buffer of its own and append them all to a growing one: at 10k
// policies, two extra copies of a batch of tens of MB at the peak of a
// full apply. Messages without a sequence number get one.
func marshalBatch(msgs []netlink.Message) []byte {
	size := 0
	for _, m := range msgs {
		size += nlmsgAlign(nlmsgHeaderLen + len(m.Data))
	}
	buf := make([]byte, size)
	off := 0
	for i := range msgs {
		m := &msgs[i]
		if m.Header.Sequence == 0 {
			m.Header.Sequence = batchSequence.Add(1)
		}
		n := nlmsgAlign(nlmsgHeaderLen + len(m.Data))
		m.Header.Length = uint32(n)
		b := buf[off : off+n]
		binary.NativeEndian.PutUint32(b[0:], m.Header.Length)
		binary.NativeEndian.PutUint16(b[4:], uint16(m.Header.Type))
		binary.NativeEndian.PutUint16(b[6:], uint16(m.Header.Flags))
		binary.NativeEndian.PutUint32(b[8:], m.Header.Sequence)
		binary.NativeEndian.PutUint32(b[12:], m.Header.PID)
		copy(b[nlmsgHeaderLen:], m.Data)
		off += n
	}
	return buf
}

const nlmsgHeaderLen = 16

func nlmsgAlign(n int) int { return (n + 3) &^ 3 }

var batchSequence atomic.Uint32

// sendBatch writes buf to the kernel in one sendmsg on nl's socket.
func sendBatch(nl *netlink.Conn, buf []byte) error {
	raw, err := nl.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = raw.Write(func(fd uintptr) bool {
		serr = unix.Sendto(int(fd), buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		return serr != unix.EAGAIN // wait for the socket to take it
	})
	if err != nil {
		return err
	}
	return serr
}

func (t *batchTransport) receive() ([]netlink.Message, error) {
	if t.nl == nil || t.sendErr != nil || t.dry {
		return nil, io.EOF
	}
	for {
		queued, err := replyQueued(t.nl)
		if err != nil {
			t.dry = true
			return nil, err
		}
		if !queued {
			t.dry = true
			if !t.failed && t.committed == 0 {
				return nil, errors.New("the kernel neither refused the batch nor announced its commit")
			}
			return nil, io.EOF
		}
		msgs, err := t.nl.Receive()
		if err != nil {
			t.failed = true
			var oe *netlink.OpError
			if !errors.As(err, &oe) || oe.Err == unix.ENOBUFS {
				t.broken = true // not a reply: the socket is not to be reused
			}
			if errors.As(err, &oe) {
				if oe.Sequence == t.batchSeq && t.refusal == nil {
					t.refusal = oe.Err
				}
				// nltest's connection wraps what we return in an OpError
				// of its own, as the real one does with the errno.
				err = oe.Err
			}
			return nil, err
		}
		var acks []netlink.Message
		for _, m := range msgs {
			switch {
			case m.Header.Type == newGenType:
				if gen, err := genOf(m); err == nil {
					t.committed = gen
				}
			case m.Header.Type>>8 == unix.NFNL_SUBSYS_NFTABLES:
				// Another notification: none is asked for.
			default:
				acks = append(acks, m)
			}
		}
		if len(acks) > 0 {
			return acks, nil
		}
	}
}

// replyQueued reports, without waiting, whether a datagram is queued on the
// socket. A pending socket error (ENOBUFS: replies were lost) is returned:
// peeking consumes it, so Receive would not see it.
func replyQueued(nl *netlink.Conn) (bool, error) {
	raw, err := nl.SyscallConn()
	if err != nil {
		return false, err
	}
	var rerr error
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		for {
			_, _, rerr = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			if rerr != unix.EINTR {
				return true
			}
		}
	})
	switch {
	case err != nil:
		return false, err
	case rerr == unix.EAGAIN:
		return false, nil
	case rerr != nil:
		return false, os.NewSyscallError("recvfrom", rerr)
	}
	return true, nil
}

func (t *batchTransport) close() {
	switch {
	case t.nl == nil:
	case t.sendErr != nil || t.broken:
		t.nl.Close()
	default:
		t.c.releaseBatchSocket(t.nl)
	}
}

// batchSocket returns the Conn's idle batch socket, or a new one. Opening
// a socket in another network namespace (a thread switched into it and
// back) and raising its buffers costs about as much as a small batch, so
// one socket serves batch after batch.
func (c *Conn) batchSocket() (*netlink.Conn, error) {
	c.mu.Lock()
	nl := c.idle
	c.idle = nil
	c.mu.Unlock()
	if nl != nil {
		return nl, nil
	}
	nl, err := c.dialLarge()
	if err == nil {
		c.ports.add(nl.PID())
	}
	return nl, err
}

// releaseBatchSocket parks a socket whose batch is done for the next one,
// after reading whatever the kernel still had queued on it, so no reply
// of one batch is ever taken for the next one's.
func (c *Conn) releaseBatchSocket(nl *netlink.Conn) {
	for {
		queued, err := replyQueued(nl)
		if err != nil {
			nl.Close()
			return
		}
		if !queued {
			break
		}
		if _, err := nl.Receive(); err != nil {
			var oe *netlink.OpError
			if !errors.As(err, &oe) {
				nl.Close()
				return
			}
		}
	}
	c.mu.Lock()
	if c.idle == nil && !c.closed {
		c.idle, nl = nl, nil
	}
	c.mu.Unlock()
	if nl != nil {
		nl.Close()
	}
}

// flush sends the batch queued on nl through t. It returns the generation
// the kernel announced for the commit, or 0 if it announced none. The error
// is the library's, with ErrGenerationChanged added when the kernel refused
// the batch for a stale generation.
func (t *batchTransport) flush(nl *nftables.Conn) (uint32, error) {
	err := nl.Flush()
	t.close()
	if t.sendErr != nil {
		return 0, t.sendErr
	}
	if err != nil {
		if t.gen != 0 && errors.Is(t.refusal, unix.ERESTART) {
			return 0, fmt.Errorf("%w: expected generation %d: %w", ErrGenerationChanged, t.gen, err)
		}
		return 0, err
	}
	return t.committed, nil
}
