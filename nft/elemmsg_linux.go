package nft

import (
	"encoding/binary"
	"fmt"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// Set element messages (NEWSETELEM, DELSETELEM) are encoded here rather
// than by google/nftables: they are nearly all of a large batch (a table
// of 150k pods is ~450k elements), and the library builds a slice of
// attributes per element and marshals every level of nesting into a new
// buffer, ~55 MB of garbage for that table. appendElemMessage writes the
// same bytes straight into one buffer that serves message after message.
// TestElemMessageIsTheLibrarys holds it to the library's encoding, byte
// for byte, for every kind of element the writer queues.

// nlaHeaderLen is the length of a netlink attribute's header.
const nlaHeaderLen = 4

// appendElemMessage appends to buf the body of a NEWSETELEM or DELSETELEM
// message (the nfgenmsg header and the attributes) for elems of set s, as
// google/nftables v0.3.0 encodes it (Conn.SetAddElements,
// Set.makeElemList). Only the element fields the writer sets are
// encoded: Key, KeyEnd, IntervalEnd and VerdictData (appendEncoded never
// sets Val, Timeout or Comment, and elementFieldsKnown says so).
func appendElemMessage(buf []byte, s *nftables.Set, elems []nftables.SetElement) ([]byte, error) {
	buf = append(buf, byte(s.Table.Family), unix.NFNETLINK_V0, 0, 0) // nfgenmsg, res_id 0
	buf = appendStringAttr(buf, unix.NFTA_SET_ELEM_LIST_SET, s.Name)
	buf = appendU32Attr(buf, unix.NFTA_SET_ELEM_LIST_SET_ID, s.ID)
	buf = appendStringAttr(buf, unix.NFTA_SET_ELEM_LIST_TABLE, s.Table.Name)
	list := beginNested(&buf, unix.NFTA_SET_ELEM_LIST_ELEMENTS)
	for i, e := range elems {
		item := beginNested(&buf, uint16(i+1))
		if e.IntervalEnd {
			// The library flags this attribute nested; the kernel
			// ignores the flag. Kept, so that the bytes are the same.
			buf = appendU32Attr(buf, unix.NFTA_SET_ELEM_FLAGS|unix.NLA_F_NESTED, unix.NFT_SET_ELEM_INTERVAL_END)
		}
		key := beginNested(&buf, unix.NFTA_SET_ELEM_KEY)
		buf = appendAttr(buf, unix.NFTA_DATA_VALUE, e.Key)
		endNested(buf, key)
		if len(e.KeyEnd) > 0 {
			end := beginNested(&buf, nftables.NFTA_SET_ELEM_KEY_END)
			buf = appendAttr(buf, unix.NFTA_DATA_VALUE, e.KeyEnd)
			endNested(buf, end)
		}
		if v := e.VerdictData; v != nil {
			data := beginNested(&buf, unix.NFTA_SET_ELEM_DATA)
			verdict := beginNested(&buf, unix.NFTA_DATA_VERDICT)
			buf = appendU32Attr(buf, unix.NFTA_VERDICT_CODE, uint32(v.Kind))
			if v.Chain != "" {
				buf = appendStringAttr(buf, unix.NFTA_VERDICT_CHAIN, v.Chain)
			}
			endNested(buf, verdict)
			endNested(buf, data)
		}
		endNested(buf, item)
	}
	if len(buf)-list > 0xffff {
		return nil, fmt.Errorf("%d elements do not fit one netlink attribute (%d bytes)", len(elems), len(buf)-list)
	}
	endNested(buf, list)
	return buf, nil
}

// encodedElemSize is the bytes appendElemMessage writes for e in the
// element list (TestEncodedElemSize holds it to the encoder).
func encodedElemSize(e *nftables.SetElement) int {
	n := nlaHeaderLen // the element's own nested attribute
	if e.IntervalEnd {
		n += nlaHeaderLen + 4
	}
	n += 2*nlaHeaderLen + nlaAlign(len(e.Key))
	if len(e.KeyEnd) > 0 {
		n += 2*nlaHeaderLen + nlaAlign(len(e.KeyEnd))
	}
	if v := e.VerdictData; v != nil {
		n += 3*nlaHeaderLen + 4 // data, verdict, code
		if v.Chain != "" {
			n += nlaHeaderLen + nlaAlign(len(v.Chain)+1)
		}
	}
	return n
}

func nlaAlign(n int) int { return (n + 3) &^ 3 }

// elementFieldsKnown reports whether appendElemMessage encodes every
// field e sets.
func elementFieldsKnown(e *nftables.SetElement) bool {
	return len(e.Val) == 0 && e.Timeout == 0 && e.Comment == ""
}

// appendAttr appends one attribute, its data padded to 4 bytes; its
// length counts the data without the padding, as netlink's does.
func appendAttr(buf []byte, typ uint16, data []byte) []byte {
	buf = binary.NativeEndian.AppendUint16(buf, uint16(nlaHeaderLen+len(data)))
	buf = binary.NativeEndian.AppendUint16(buf, typ)
	buf = append(buf, data...)
	return appendPad(buf, len(data))
}

// appendStringAttr appends a string attribute, NUL-terminated.
func appendStringAttr(buf []byte, typ uint16, s string) []byte {
	buf = binary.NativeEndian.AppendUint16(buf, uint16(nlaHeaderLen+len(s)+1))
	buf = binary.NativeEndian.AppendUint16(buf, typ)
	buf = append(buf, s...)
	buf = append(buf, 0)
	return appendPad(buf, len(s)+1)
}

// appendU32Attr appends a 32-bit attribute in network byte order.
func appendU32Attr(buf []byte, typ uint16, v uint32) []byte {
	buf = binary.NativeEndian.AppendUint16(buf, nlaHeaderLen+4)
	buf = binary.NativeEndian.AppendUint16(buf, typ)
	return binary.BigEndian.AppendUint32(buf, v)
}

func appendPad(buf []byte, n int) []byte {
	for ; n%4 != 0; n++ {
		buf = append(buf, 0)
	}
	return buf
}

// beginNested appends the header of a nested attribute, to be completed
// by endNested once its children are appended, and returns where it is.
func beginNested(buf *[]byte, typ uint16) int {
	at := len(*buf)
	*buf = binary.NativeEndian.AppendUint16(*buf, 0)
	*buf = binary.NativeEndian.AppendUint16(*buf, typ|unix.NLA_F_NESTED)
	return at
}

// endNested writes the length of the nested attribute begun at at: its
// children are each padded, so it needs no padding of its own. Its length
// field is 16 bits: the writer cuts messages by their elements' encoded
// size (elementListBytes) to stay under it, and appendElemMessage checks.
func endNested(buf []byte, at int) {
	binary.NativeEndian.PutUint16(buf[at:], uint16(min(len(buf)-at, 0xffff)))
}
