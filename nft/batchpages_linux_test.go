package nft

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The batch kept in pages reads, page after page, as the messages
// encoded one after the other, whatever the page boundaries cut: a
// header, data or padding.
func TestBatchPagesHoldTheMessagesInOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	tx := &batchTransport{}
	begin := netlink.Message{Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_MSG_BATCH_BEGIN)}}
	end := netlink.Message{Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_MSG_BATCH_END)}}
	var want bytes.Buffer
	for flush := range 40 {
		req := []netlink.Message{begin}
		for range 1 + r.IntN(300) {
			data := make([]byte, r.IntN(40000))
			for i := range data {
				data[i] = byte(r.Uint32())
			}
			req = append(req, netlink.Message{
				Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWSETELEM),
					Flags: netlink.Request | netlink.Acknowledge | netlink.Echo, PID: 77},
				Data: data,
			})
		}
		req = append(req, end)
		if err := tx.keep(req); err != nil {
			t.Fatalf("flush %d: %v", flush, err)
		}
		// What the kernel should read: each message as netlink encodes
		// it, with the flags, PID and sequence number keep gave it.
		for i := range req[1 : len(req)-1] {
			m := req[1+i]
			m.Header.Flags = netlink.Request
			if want.Len() == 0 {
				m.Header.Flags |= netlink.Echo
			}
			m.Header.PID = 0
			m.Header.Length = uint32(nlmsgAlign(nlmsgHeaderLen + len(m.Data)))
			m.Header.Sequence = 0 // compared apart: keep numbers them
			b, err := m.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			want.Write(b)
		}
	}
	var got []byte
	for i, p := range tx.pages {
		if i < len(tx.pages)-1 && len(p) != cap(p) {
			t.Fatalf("page %d of %d holds %d bytes of %d: only the last may have room", i, len(tx.pages), len(p), cap(p))
		}
		if cap(p) > largestPage {
			t.Fatalf("page %d is %d bytes, more than %d", i, cap(p), largestPage)
		}
		got = append(got, p...)
	}
	if len(tx.pages) < 3 {
		t.Fatalf("%d pages: the test means to cross pages", len(tx.pages))
	}
	// Read the sequence numbers out, checking they are all different,
	// then compare the rest byte for byte.
	seen := map[uint32]bool{}
	for off := 0; off < len(got); {
		n := int(nativeUint32(got[off:]))
		seq := nativeUint32(got[off+8:])
		if seen[seq] {
			t.Fatalf("sequence number %d twice", seq)
		}
		seen[seq] = true
		copy(got[off+8:off+12], []byte{0, 0, 0, 0})
		off += n
	}
	if len(seen) != tx.messages {
		t.Fatalf("%d messages read back, %d kept", len(seen), tx.messages)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("the pages (%d bytes) differ from the messages encoded in order (%d bytes)", len(got), want.Len())
	}
}

func nativeUint32(b []byte) uint32 { return binary.NativeEndian.Uint32(b) }

// A batch of many pages (a set of 100k elements, ~5 MB) reaches the
// kernel whole, in one transaction: every element is there as written.
func TestKernelBatchOfManyPages(t *testing.T) {
	table := &Table{Family: FamilyInet, Name: "nftpolicy"}
	big := &Set{Name: "big-v6", Key: KeyIPv6ProtoPort}
	a := netip.MustParseAddr("fd00::")
	for range 100_000 {
		a = a.Next()
		big.Elements = append(big.Elements, Element{Addr: a, Proto: ProtoUDP, Port: 53})
	}
	table.Sets = []*Set{big}
	_, c := openTestNS(t)
	stats, err := c.Apply(table)
	if err != nil {
		t.Fatal(err)
	}
	if stats.ElementsAdded != 100_000 {
		t.Errorf("%d elements sent, want 100000", stats.ElementsAdded)
	}
	if drift, err := c.Drift(table); err != nil || drift != "" {
		t.Errorf("drift after a batch of many pages: %q, %v", drift, err)
	}
}
