package nft

import (
	"cmp"
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

// dial opens a NETLINK_NETFILTER socket in this Conn's namespace, whose
// dumps carry rules of any size the kernel takes (wideDumps).
func (c *Conn) dial() (*netlink.Conn, error) {
	fd, release, err := c.holdNetns()
	if err != nil {
		return nil, err
	}
	defer release() // a socket keeps the namespace it was made in
	c.opened.Add(1)
	cfg := &netlink.Config{}
	if fd >= 0 {
		cfg.NetNS = fd
	}
	nl, err := netlink.Dial(unix.NETLINK_NETFILTER, cfg)
	if err != nil {
		return nil, err
	}
	if err := wideDumps(nl); err != nil {
		nl.Close()
		return nil, err
	}
	return nl, nil
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
	var gen uint32
	err := c.onBatchSocket("read ruleset generation", func(nl *netlink.Conn) error {
		var err error
		gen, err = ReadGeneration(nl)
		return err
	})
	return gen, err
}

// onBatchSocket runs read (what, for errors), a request and its replies, on the Conn's batch
// socket. Reads on the sync path (Generation, the table's flags before a
// delta) must not open and close a socket of their own: closing a
// NETLINK_NETFILTER socket makes nf_tables finish destroying what the last
// commit replaced first (nft_rcv_nl_event flushes the destroy work, an RCU
// grace period), which took 5-28 ms after each delta at 150k pods, more
// than the delta itself.
func (c *Conn) onBatchSocket(what string, read func(nl *netlink.Conn) error) error {
	nl, err := c.batchSocket()
	if err != nil {
		return fmt.Errorf("%s: netlink: %w", what, err)
	}
	err = read(nl)
	var oe *netlink.OpError
	if err == nil || errors.As(err, &oe) {
		// The kernel answered (an error reply included): the socket is
		// as good as before, and release drains anything left on it.
		c.releaseBatchSocket(nl)
	} else {
		nl.Close()
	}
	return err
}

// ReadGeneration reads the ruleset generation on nl, a NETLINK_NETFILTER
// socket of the namespace: for a caller that polls it and keeps its own
// socket open (hack/bench/scale reads it every 0.2 ms, where a socket and
// two setns calls a read cost ~80 against ~17 µs, and its close waits for
// the last commit's garbage: see onBatchSocket).
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
// hands its queued messages to a netlink.Conn that nltest.Dial builds
// around a function, and roundTrip is that function. roundTrip sends
// nothing: it encodes the messages into the batch being built (keep) and
// answers every Receive that Flush then makes with nothing, which Flush
// takes as success. Flush then forgets its messages, so a writer may call
// it as often as it likes while queueing (see writer.queued): the batch is
// held once, encoded, instead of as the library's messages and then as
// the buffer a sendmsg needs (at 150k pods, 37 MB twice at the first
// sync's peak). flush (below) hands over the rest and sends the batch in
// one sendmsg, its pages as an iovec each, and reads the kernel's replies
// itself. The option is documented for testing, and this leans on how
// Flush and nltest consume replies (as of google/nftables v0.3.0 and
// mdlayher/netlink v1.11): the kernel tests go through its commit,
// refused message and stale generation paths, so an upgrade that changes
// them fails there.
//
// What the batch holds beyond the library's messages:
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
//     rules at most); replies drops every such notification. A marker
//     message of no effect would be cheaper, but the kernel refuses
//     non-batch messages such as GETGEN inside a batch (EINVAL), and every
//     batch message changes something. The NEWGEN reaches the socket
//     before any ack, since the kernel acks after committing.
//   - Every message gets a sequence number of its own, unique in the
//     process (the library's restart with each Flush).
//
// The messages go without NLM_F_ACK: the kernel then answers only the
// messages it refuses (a batch refused as a whole gets one error addressed
// to the begin message; a stale generation is ERESTART), and the NEWGEN
// echo says the batch committed. The kernel processes a batch
// synchronously inside sendmsg, so every reply is queued on the socket
// when sendmsg returns (nft's mnl_batch_talk relies on the same, reading
// the replies with a zero select timeout): replies reads until the socket
// is empty. A batch that changed nothing gets neither an error nor the
// NEWGEN: the kernel commits nothing.
type batchTransport struct {
	c   *Conn
	gen uint32 // expected generation; 0: unchecked
	// guard, if set, replaces gen right before the send, or cancels the
	// batch with its error (see Conn.ApplyGuarded).
	guard func() (uint32, error)

	// pages hold the batch's messages so far, encoded one after the
	// other (a message may span two pages: the kernel copies the whole
	// sendmsg into one buffer); messages counts them.
	pages    [][]byte
	messages int
	keepErr  error // a batch that cannot be sent

	nl        *netlink.Conn // the real socket, from the send until close
	batchSeq  uint32        // sequence number of the begin message as sent
	refusal   error         // the kernel's error addressed to the batch as a whole
	broken    bool          // the socket failed (not a reply): close it after the batch
	committed uint32        // the generation from the NEWGEN echo; 0: none seen

	// lastSeq is the sequence number of the message added last; rules
	// says which rule each rule message is (their sequence numbers
	// rise, modulo 2^32), so that a refusal, which carries the sequence number of the
	// message refused, names the rule (see named).
	lastSeq uint32
	rules   []ruleMessage
}

// A ruleMessage says which rule of which chain the message of sequence
// number seq adds.
type ruleMessage struct {
	seq   uint32
	chain string
	rule  int
}

// ruleAdded records that the message added last adds rule rule of chain.
func (t *batchTransport) ruleAdded(chain string, rule int) {
	t.rules = append(t.rules, ruleMessage{seq: t.lastSeq, chain: chain, rule: rule})
}

// named wraps err, the kernel's refusal of the message of sequence number
// seq, with the chain and rule that message adds, if it adds one.
//
// Sequence numbers are compared as offsets from the batch's first rule
// message: batchSequence wraps past 2^32 in a long-lived daemon, and a
// batch may straddle the wrap (TestHostileRound17RefusalAcrossSequenceWrap).
func (t *batchTransport) named(seq uint32, err error) error {
	if len(t.rules) == 0 {
		return err
	}
	base := t.rules[0].seq
	i, found := slices.BinarySearchFunc(t.rules, seq-base, func(r ruleMessage, off uint32) int { return cmp.Compare(r.seq-base, off) })
	if !found {
		return err
	}
	return fmt.Errorf("chain %s rule %d: %w", t.rules[i].chain, t.rules[i].rule, err)
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
		if err := t.keep(req); err != nil {
			t.keepErr = err
			// nltest returns this from the next Receive.
			return nil, err
		}
		return nil, nil
	}
	// Nothing was sent, so nothing answers. nltest's connection turns
	// io.EOF into an empty reply, which Flush's receiveAckAware accepts.
	return nil, io.EOF
}

// keep encodes the messages of one library Flush (begin and end left out:
// flush sends its own) into the batch.
func (t *batchTransport) keep(req []netlink.Message) error {
	if t.nl != nil {
		return errors.New("batch transport: messages after the send")
	}
	if len(req) < 2 || req[0].Header.Type != netlink.HeaderType(unix.NFNL_MSG_BATCH_BEGIN) ||
		req[len(req)-1].Header.Type != netlink.HeaderType(unix.NFNL_MSG_BATCH_END) {
		return errors.New("batch transport: not a batch")
	}
	for _, m := range req[1 : len(req)-1] {
		t.add(m)
	}
	return nil
}

// addOwn adds a message the writer encoded itself (not through the
// library: appendElemMessage), after the library's so far, which the
// caller has handed over.
func (t *batchTransport) addOwn(m netlink.Message) error {
	if t.keepErr != nil {
		return t.keepErr
	}
	if t.nl != nil {
		return errors.New("batch transport: messages after the send")
	}
	t.add(m)
	return nil
}

// add encodes one message at the end of the batch. No ack and no echo per
// message: the kernel reports failures anyway, and the NEWGEN echo, asked
// for by the first message, confirms the commit. The library asks for an
// ack on every message and an echo of every rule (to learn rule handles,
// which we never use): at 10k policies ~100k replies to build, receive
// and drop, 28 MB of them echoes; dropping the acks took that batch from
// 5.5 to 4.1 s.
func (t *batchTransport) add(m netlink.Message) {
	m.Header.Flags &^= netlink.Acknowledge | netlink.Echo
	if t.messages == 0 {
		m.Header.Flags |= netlink.Echo
	}
	m.Header.PID = 0 // the socket's
	m.Header.Sequence = batchSequence.Add(1)
	t.lastSeq = m.Header.Sequence
	t.append(m)
	t.messages++
}

// Pages of the batch: the first is small, as most batches are (a pod
// event's is a few kB); each next one twice the last, up to the largest.
const (
	firstBatchPage = 16 << 10
	largestPage    = 4 << 20
)

// append encodes m at the end of the batch.
func (t *batchTransport) append(m netlink.Message) {
	n := nlmsgAlign(nlmsgHeaderLen + len(m.Data))
	var h [nlmsgHeaderLen]byte
	binary.NativeEndian.PutUint32(h[0:], uint32(n))
	binary.NativeEndian.PutUint16(h[4:], uint16(m.Header.Type))
	binary.NativeEndian.PutUint16(h[6:], uint16(m.Header.Flags))
	binary.NativeEndian.PutUint32(h[8:], m.Header.Sequence)
	binary.NativeEndian.PutUint32(h[12:], m.Header.PID)
	t.write(h[:])
	t.write(m.Data)
	var pad [4]byte
	t.write(pad[:n-nlmsgHeaderLen-len(m.Data)])
}

func (t *batchTransport) write(b []byte) {
	for len(b) > 0 {
		last := len(t.pages) - 1
		if last < 0 || len(t.pages[last]) == cap(t.pages[last]) {
			size := largestPage
			if last < 0 {
				size = firstBatchPage
			} else if c := 2 * cap(t.pages[last]); c < size {
				size = c
			}
			t.pages = append(t.pages, make([]byte, 0, size))
			last++
		}
		p := t.pages[last]
		k := copy(p[len(p):cap(p)], b)
		t.pages[last] = p[:len(p)+k]
		b = b[k:]
	}
}

// control encodes a batch begin or end message.
func control(typ uint16, seq uint32, attrs []byte) []byte {
	data := append(nfgenmsg(unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES), attrs...)
	n := nlmsgAlign(nlmsgHeaderLen + len(data))
	b := make([]byte, n)
	binary.NativeEndian.PutUint32(b[0:], uint32(n))
	binary.NativeEndian.PutUint16(b[4:], typ)
	binary.NativeEndian.PutUint16(b[6:], uint16(netlink.Request))
	binary.NativeEndian.PutUint32(b[8:], seq)
	copy(b[nlmsgHeaderLen:], data)
	return b
}

// send sends the batch kept so far, between a begin message (with the
// expected generation, if any) and an end message, in one sendmsg, and
// lets go of it: the kernel has its own copy.
func (t *batchTransport) send() error {
	if t.guard != nil {
		gen, err := t.guard()
		if err != nil {
			return err
		}
		t.gen = gen
	}
	var genAttr []byte
	if t.gen != 0 {
		ae := netlink.NewAttributeEncoder()
		ae.ByteOrder = binary.BigEndian
		ae.Uint32(unix.NFNL_BATCH_GENID, t.gen)
		var err error
		if genAttr, err = ae.Encode(); err != nil {
			return err
		}
	}
	t.batchSeq = batchSequence.Add(1)
	iov := make([][]byte, 0, len(t.pages)+2)
	iov = append(iov, control(unix.NFNL_MSG_BATCH_BEGIN, t.batchSeq, genAttr))
	iov = append(iov, t.pages...)
	iov = append(iov, control(unix.NFNL_MSG_BATCH_END, batchSequence.Add(1), nil))
	t.pages = nil
	nl, err := t.c.batchSocket()
	if err != nil {
		return err
	}
	t.nl = nl
	// Before the send: the Monitor may read the commit's notification
	// before sendBatch returns.
	t.c.ports.add(nl.PID())
	if err := sendBatch(nl, iov); err != nil {
		t.broken = true
		return fmt.Errorf("send batch: %w", err)
	}
	return nil
}

const nlmsgHeaderLen = 16

func nlmsgAlign(n int) int { return (n + 3) &^ 3 }

var batchSequence atomic.Uint32

// sendBatch writes the buffers, one after the other, to the kernel in one
// sendmsg on nl's socket. There may be at most UIO_MAXIOV (1024) of them:
// pages of up to largestPage make that a batch of 4 GB.
func sendBatch(nl *netlink.Conn, iov [][]byte) error {
	if len(iov) > 1024 {
		return fmt.Errorf("a batch of %d pages: more than a sendmsg takes", len(iov))
	}
	raw, err := nl.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = raw.Write(func(fd uintptr) bool {
		_, serr = unix.SendmsgBuffers(int(fd), iov, nil, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}, 0)
		return serr != unix.EAGAIN // wait for the socket to take it
	})
	if err != nil {
		return err
	}
	return serr
}

// replies reads every reply the kernel queued for the batch: the errors of
// the messages it refused, and the generation it announced. Silence, with
// neither, is a batch that changed nothing: the kernel commits nothing and
// announces no generation (the same element added twice, an empty chain
// flushed), and flush's caller reads the current one.
//
// A batch refused message by message may have tens of thousands of
// refusals: the error names the first maxRefusals and counts the rest
// (joining each to all the ones before took minutes to print at 80k).
// Should they overflow the socket's receive buffer (ENOBUFS: the kernel
// dropped the rest), the ones queued before are still read, so the error
// still names what was refused; the socket is then closed, not reused.
func (t *batchTransport) replies() error {
	var refused []error
	more := 0
	var lost error
	for {
		queued, err := replyQueued(t.nl)
		if err != nil {
			if errors.Is(err, unix.ENOBUFS) && lost == nil {
				lost, t.broken = err, true
				continue
			}
			t.broken = true
			return errors.Join(append(refused, err)...)
		}
		if !queued {
			break
		}
		msgs, err := t.nl.Receive()
		if err != nil {
			var oe *netlink.OpError
			switch {
			case errors.As(err, &oe) && oe.Err == unix.ENOBUFS && lost == nil:
				lost, t.broken = err, true
				continue
			case !errors.As(err, &oe) || oe.Err == unix.ENOBUFS:
				t.broken = true // not a reply: the socket is not to be reused
				return errors.Join(append(refused, err)...)
			}
			if oe.Sequence == t.batchSeq && t.refusal == nil {
				t.refusal = oe.Err
			}
			if len(refused) < maxRefusals {
				refused = append(refused, t.named(oe.Sequence, err))
			} else {
				more++
			}
			continue
		}
		for _, m := range msgs {
			if m.Header.Type == newGenType {
				if gen, err := genOf(m); err == nil {
					t.committed = gen
				}
			}
			// Anything else is a notification of what one message
			// changed (see above): none is asked for.
		}
	}
	if more > 0 {
		refused = append(refused, fmt.Errorf("and %d more refused messages", more))
	}
	if lost != nil {
		refused = append(refused, fmt.Errorf("more refusals than the socket could hold were dropped: %w", lost))
	}
	return errors.Join(refused...)
}

// maxRefusals is how many of the kernel's refusals a batch's error names.
const maxRefusals = 20

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
	case t.broken:
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
	if err != nil {
		return nil, err
	}
	if err := capAcks(nl); err != nil {
		nl.Close()
		return nil, err
	}
	return nl, nil
}

// capAcks asks the kernel to leave the refused message out of each error
// it sends on nl (NETLINK_CAP_ACK): a refusal is then its
// errno and the refused message's header, ~36 bytes, not a copy of the
// whole message. A batch refused message by message (a kernel without an
// expression that thousands of rules use) otherwise filled the receive
// buffer at about 100k refusals of ~750 bytes, and the replies that said
// why were dropped. The socket asks for no extended acks, whose
// attributes mdlayher/netlink v1.11 would look for past the whole refused
// message, not past its header, in a capped error.
func capAcks(nl *netlink.Conn) error {
	raw, err := nl.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
	}); err != nil {
		return err
	}
	return serr
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

// handOver hands the messages nl holds over to the batch (keep), so that
// the library lets go of them.
func (t *batchTransport) handOver(nl *nftables.Conn) error {
	if err := nl.Flush(); err != nil {
		if t.keepErr != nil {
			return t.keepErr
		}
		return err // the library's own: a message it could not encode
	}
	return nil
}

// flush sends the batch queued on nl through t. It returns the generation
// the kernel announced for the commit, or 0 if it announced none (a batch
// of no message is not sent). The error says what the kernel refused,
// with ErrGenerationChanged added when it refused the batch for a stale
// generation; a guard's error is returned as it is.
func (t *batchTransport) flush(nl *nftables.Conn) (uint32, error) {
	if err := t.handOver(nl); err != nil { // the rest of the messages
		return 0, err
	}
	if t.messages == 0 {
		return 0, nil
	}
	err := t.send()
	if err == nil {
		err = t.replies()
	}
	t.close()
	if err != nil {
		if t.gen != 0 && errors.Is(t.refusal, unix.ERESTART) {
			return 0, fmt.Errorf("%w: expected generation %d: %w", ErrGenerationChanged, t.gen, err)
		}
		return 0, err
	}
	return t.committed, nil
}
