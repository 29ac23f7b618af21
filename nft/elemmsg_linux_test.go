package nft

import (
	"bytes"
	"io"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
)

// libraryElemMessage is the body of the message google/nftables encodes
// for elems of ns: SetAddElements, or SetDeleteElements.
func libraryElemMessage(t *testing.T, ns *nftables.Set, elems []nftables.SetElement, add bool) netlink.Message {
	t.Helper()
	return libraryMessage(t, func(nl *nftables.Conn) error {
		if add {
			return nl.SetAddElements(ns, elems)
		}
		return nl.SetDeleteElements(ns, elems)
	})
}

// libraryMessage is the one message google/nftables sends in the batch
// queue queues.
func libraryMessage(t *testing.T, queue func(nl *nftables.Conn) error) netlink.Message {
	t.Helper()
	var sent []netlink.Message
	nl, err := nftables.New(nftables.WithTestDial(func(req []netlink.Message) ([]netlink.Message, error) {
		if req != nil {
			sent = append(sent, req...)
			return nil, nil
		}
		return nil, io.EOF
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := queue(nl); err != nil {
		t.Fatal(err)
	}
	if err := nl.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(sent) != 3 { // begin, the message, end
		t.Fatalf("the library sent %d messages, want begin, one, end", len(sent))
	}
	return sent[1]
}

// elemMessageSets are sets of every kind the writer writes: the sample
// table's, and a per-address set, an interval verdict map and an
// interval set large enough for several messages.
func elemMessageSets() []*Set {
	a := netip.MustParseAddr
	sets := sampleTable().Sets
	large := &Set{Name: "large-v6", Key: KeyIPv6, Interval: true}
	for i := range 3 * elementsPerMessage {
		first := netip.AddrFrom16([16]byte{0: 0xfd, 13: byte(i >> 8), 14: byte(i), 15: 0})
		last := netip.AddrFrom16([16]byte{0: 0xfd, 13: byte(i >> 8), 14: byte(i), 15: byte(i % 7)})
		large.Elements = append(large.Elements, Element{Addr: first, Last: last})
	}
	return append(sets,
		&Set{Name: "per-address-v4", Key: KeyIPv4, PerAddress: true, Elements: []Element{
			{Addr: a("10.0.0.1"), Last: a("10.0.0.5")}, {Addr: a("10.0.1.9")}}},
		&Set{Name: "ranges-verdict-v4", Key: KeyIPv4, Interval: true, Verdict: true, Elements: []Element{
			{Addr: a("10.0.0.0"), Last: a("10.0.0.9"), Verdict: Verdict{Kind: Goto, Chain: "leaf"}},
			{Addr: a("10.0.1.1"), Verdict: Verdict{Kind: Drop}},
			{Addr: a("255.255.255.0"), Last: a("255.255.255.255"), Verdict: Verdict{Kind: Accept}}}},
		&Set{Name: "ends-v4", Key: KeyIPv4, Interval: true, Elements: []Element{
			{Addr: a("0.0.0.0"), Last: a("0.0.0.3")}, {Addr: a("255.255.255.255")}}},
		large,
	)
}

// TestElemMessageIsTheLibrarys: for every kind of set the writer writes,
// appendElemMessage encodes the elements the writer queues (appendEncoded,
// with the leading end element, cut into messages as the writer cuts
// them) into the very bytes google/nftables encodes, for additions and
// deletions. With this, the golden test against nft (TestEncodeIsNfts)
// and every kernel test stand for both encoders.
func TestElemMessageIsTheLibrarys(t *testing.T) {
	b := &writer{table: &nftables.Table{Family: nftables.TableFamilyINet, Name: "nftpolicy"}}
	var buf []byte
	for _, s := range elemMessageSets() {
		if err := s.Validate(); err != nil {
			t.Fatalf("set %s: %v", s.Name, err)
		}
		ns := withSetID(b.librarySet(s))
		elems, err := encodeElements(s)
		if err != nil {
			t.Fatalf("set %s: %v", s.Name, err)
		}
		messages := 0
		for rest := elems; len(rest) > 0; messages++ {
			n := min(len(rest), elementsPerMessage)
			if ns.Interval && n < len(rest) && rest[n].IntervalEnd {
				n++
			}
			for _, add := range []bool{true, false} {
				want := libraryElemMessage(t, ns, rest[:n], add)
				if buf, err = appendElemMessage(buf[:0], ns, rest[:n]); err != nil {
					t.Fatalf("set %s: %v", s.Name, err)
				}
				if !bytes.Equal(buf, want.Data) {
					t.Fatalf("set %s, message %d (add %v), %d elements:\nours    %x\nlibrary %x", s.Name, messages, add, n, buf, want.Data)
				}
			}
			rest = rest[n:]
		}
		t.Logf("set %s: %d elements in %d messages, alike", s.Name, len(elems), messages)
	}
}

// TestElemMessageTooLarge: a message whose element list would overflow
// its 16-bit attribute length is refused, not sent cut short (the writer
// cuts messages so that this never happens: TestHostileRound13Sets*).
func TestElemMessageTooLarge(t *testing.T) {
	b := &writer{table: &nftables.Table{Family: nftables.TableFamilyINet, Name: "nftpolicy"}}
	ns := withSetID(b.librarySet(&Set{Name: "big", Key: KeyIPv6}))
	var elems []nftables.SetElement
	for i := range 3000 {
		elems = append(elems, nftables.SetElement{Key: netip.AddrFrom16([16]byte{0: 0xfd, 14: byte(i >> 8), 15: byte(i)}).AsSlice()})
	}
	if _, err := appendElemMessage(nil, ns, elems); err == nil || !strings.Contains(err.Error(), "do not fit") {
		t.Fatalf("3000 IPv6 elements in one message: %v, want an error saying they do not fit", err)
	}
}

// TestEncodedElemSize: the size the writer cuts messages by is the size
// the encoder writes, element by element, for every kind of set, and for
// verdicts naming chains of every length up to the kernel's 255 bytes.
func TestEncodedElemSize(t *testing.T) {
	b := &writer{table: &nftables.Table{Family: nftables.TableFamilyINet, Name: "nftpolicy"}}
	sets := elemMessageSets()
	long := &Set{Name: "long-chains-v6", Key: KeyIPv6, Verdict: true}
	for i := range 256 {
		long.Elements = append(long.Elements, Element{
			Addr:    netip.AddrFrom16([16]byte{0: 0xfd, 14: byte(i >> 8), 15: byte(i)}),
			Verdict: Verdict{Kind: Jump, Chain: string(bytes.Repeat([]byte{'c'}, max(1, i)))},
		})
	}
	for _, s := range append(sets, long) {
		ns := withSetID(b.librarySet(s))
		elems, err := encodeElements(s)
		if err != nil {
			t.Fatalf("set %s: %v", s.Name, err)
		}
		empty, err := appendElemMessage(nil, ns, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range elems {
			one, err := appendElemMessage(nil, ns, elems[i:i+1])
			if err != nil {
				t.Fatal(err)
			}
			if got, want := encodedElemSize(&elems[i]), len(one)-len(empty); got != want {
				t.Fatalf("set %s, element %d (%+v): encodedElemSize %d, the encoder wrote %d", s.Name, i, elems[i], got, want)
			}
		}
	}
}
