package nft

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// Root-free byte tests of the encoders.
//
// The writer queues a whole table on a google/nftables connection whose
// Flush hands the batch to a function instead of a socket (the library's
// WithTestDial, the seam the batch transport uses in production). Its
// rule and set element messages are printed the way libnftnl prints them
// for `nft --debug netlink`, from the bytes alone, and compared with
// testdata/sample.netlink, which is nft's own output for Render of the
// same table, normalized (see normalizeNftDebug). So the bytes we send
// are the bytes nft sends, without a kernel; TestKernelNetlinkGoldenIsNfts
// checks, where nft can run, that the golden file is still what nft
// prints, and -update rewrites it from nft, never from us.

// sentBatch returns the messages the writer queues for t, without a
// kernel: those it hands the library, and the set element messages it
// encodes itself (appendElemMessage), as the batch holds them.
func sentBatch(t *testing.T, table *Table) []netlink.Message {
	t.Helper()
	tx := &batchTransport{}
	nl, err := nftables.New(nftables.WithTestDial(tx.roundTrip))
	if err != nil {
		t.Fatal(err)
	}
	b := &writer{
		nl:     nl,
		tx:     tx,
		table:  &nftables.Table{Family: nftables.TableFamilyINet, Name: table.Name},
		chains: map[string]*nftables.Chain{},
		sets:   map[string]*nftables.Set{},
	}
	if err := b.writeTable(table); err != nil {
		t.Fatal(err)
	}
	if err := tx.handOver(nl); err != nil {
		t.Fatal(err)
	}
	return batchMessages(t, tx)
}

// batchMessages decodes the messages a batch transport holds.
func batchMessages(t *testing.T, tx *batchTransport) []netlink.Message {
	t.Helper()
	var all []byte
	for _, p := range tx.pages {
		all = append(all, p...)
	}
	var out []netlink.Message
	for len(all) > 0 {
		if len(all) < nlmsgHeaderLen {
			t.Fatalf("a batch ends in %d bytes, less than a header", len(all))
		}
		n := int(binary.NativeEndian.Uint32(all))
		if n < nlmsgHeaderLen || n > len(all) {
			t.Fatalf("a message of %d bytes in %d", n, len(all))
		}
		out = append(out, netlink.Message{
			Header: netlink.Header{
				Length:   uint32(n),
				Type:     netlink.HeaderType(binary.NativeEndian.Uint16(all[4:])),
				Flags:    netlink.HeaderFlags(binary.NativeEndian.Uint16(all[6:])),
				Sequence: binary.NativeEndian.Uint32(all[8:]),
				PID:      binary.NativeEndian.Uint32(all[12:]),
			},
			Data: all[nlmsgHeaderLen:n],
		})
		all = all[min(nlmsgAlign(n), len(all)):]
	}
	if len(out) != tx.messages {
		t.Fatalf("decoded %d messages from a batch of %d", len(out), tx.messages)
	}
	return out
}

// debugNetlink prints the rules and set elements of a batch as
// `nft --debug netlink` does, normalized as normalizeNftDebug does.
func debugNetlink(t *testing.T, msgs []netlink.Message) string {
	t.Helper()
	var b strings.Builder
	for _, m := range msgs {
		if m.Header.Type>>8 != unix.NFNL_SUBSYS_NFTABLES || len(m.Data) < 4 {
			continue
		}
		var err error
		switch m.Header.Type & 0xff {
		case unix.NFT_MSG_NEWRULE:
			err = debugRule(&b, m.Data[4:])
		case unix.NFT_MSG_NEWSETELEM:
			err = debugElements(&b, m.Data[4:])
		}
		if err != nil {
			t.Fatalf("message %v: %v", m.Header, err)
		}
	}
	return b.String()
}

func debugRule(b *strings.Builder, data []byte) error {
	var table, chain string
	var exprs, udata []byte
	err := walk(data, func(typ uint16, v []byte) error {
		switch typ {
		case unix.NFTA_RULE_TABLE:
			table = str(v)
		case unix.NFTA_RULE_CHAIN:
			chain = str(v)
		case unix.NFTA_RULE_EXPRESSIONS:
			exprs = v
		case unix.NFTA_RULE_USERDATA:
			udata = v
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(b, "inet %s %s\n", table, chain)
	err = walk(exprs, func(typ uint16, v []byte) error {
		name, data, err := exprParts(v)
		if err != nil {
			return err
		}
		attrs := map[uint16][]byte{}
		if err := walk(data, func(typ uint16, v []byte) error { attrs[typ] = v; return nil }); err != nil {
			return err
		}
		s, err := debugExpr(name, attrs)
		if err != nil {
			return err
		}
		fmt.Fprintf(b, "  [ %s ]\n", s)
		return nil
	})
	if err != nil {
		return err
	}
	if udata != nil {
		fmt.Fprintf(b, "  userdata = { %s }\n", escapeUserdata(udata))
	}
	b.WriteString("\n")
	return nil
}

// escapeUserdata prints bytes as libnftnl does: printable ASCII as it is,
// anything else as \xNN.
func escapeUserdata(u []byte) string {
	var b strings.Builder
	for _, c := range u {
		if c >= 0x20 && c < 0x7f {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, `\x%02x`, c)
		}
	}
	return b.String()
}

// words prints data as libnftnl does: 32-bit words in host order, the last
// one padded with zero bytes.
func words(data []byte) string {
	var out []string
	for i := 0; i < len(data); i += 4 {
		var w [4]byte
		copy(w[:], data[i:])
		out = append(out, fmt.Sprintf("0x%08x", binary.NativeEndian.Uint32(w[:])))
	}
	return strings.Join(out, " ")
}

// value is the value of an nft_data nest (NFTA_DATA_VALUE).
func value(nest []byte) []byte {
	var out []byte
	walk(nest, func(typ uint16, v []byte) error {
		if typ == unix.NFTA_DATA_VALUE {
			out = v
		}
		return nil
	})
	return out
}

// verdictText prints an nft_data nest holding a verdict: `accept`,
// `jump -> chain`.
func verdictText(nest []byte) (string, error) {
	var code uint32
	var chain string
	var found bool
	walk(nest, func(typ uint16, v []byte) error {
		if typ == unix.NFTA_DATA_VERDICT {
			found = true
			walk(v, func(typ uint16, v []byte) error {
				switch typ {
				case unix.NFTA_VERDICT_CODE:
					code = u32(v)
				case unix.NFTA_VERDICT_CHAIN:
					chain = str(v)
				}
				return nil
			})
		}
		return nil
	})
	if !found {
		return "", fmt.Errorf("no verdict in %x", nest)
	}
	switch int32(code) {
	case 1: // NF_ACCEPT
		return "accept", nil
	case 0: // NF_DROP
		return "drop", nil
	case unix.NFT_RETURN:
		return "return", nil
	case unix.NFT_JUMP:
		return "jump -> " + chain, nil
	case unix.NFT_GOTO:
		return "goto -> " + chain, nil
	case unix.NFT_CONTINUE:
		return "continue", nil
	}
	return "", fmt.Errorf("verdict code %d", int32(code))
}

var (
	metaKeys   = map[uint32]string{unix.NFT_META_MARK: "mark", unix.NFT_META_NFPROTO: "nfproto", unix.NFT_META_L4PROTO: "l4proto"}
	ctKeys     = map[uint32]string{unix.NFT_CT_STATE: "state", unix.NFT_CT_STATUS: "status", unix.NFT_CT_MARK: "mark"}
	cmpOps     = map[uint32]string{unix.NFT_CMP_EQ: "eq", unix.NFT_CMP_NEQ: "neq", unix.NFT_CMP_LT: "lt", unix.NFT_CMP_LTE: "lte", unix.NFT_CMP_GT: "gt", unix.NFT_CMP_GTE: "gte"}
	bases      = map[uint32]string{unix.NFT_PAYLOAD_LL_HEADER: "link", unix.NFT_PAYLOAD_NETWORK_HEADER: "network", unix.NFT_PAYLOAD_TRANSPORT_HEADER: "transport"}
	fibFlags   = []string{"saddr", "daddr", "mark", "iif", "oif", "present"} // NFTA_FIB_F_*, bit by bit
	fibResults = map[uint32]string{unix.NFT_FIB_RESULT_OIF: "oif", unix.NFT_FIB_RESULT_OIFNAME: "oifname", unix.NFT_FIB_RESULT_ADDRTYPE: "type"}
)

// debugExpr prints one expression as libnftnl's snprintf does, for the
// expressions and attributes the writer uses; anything else is an error,
// so an expression the writer starts to use must be taught here first.
func debugExpr(name string, a map[uint16][]byte) (string, error) {
	known := func(m map[uint32]string, v []byte) string {
		if s, ok := m[u32(v)]; ok {
			return s
		}
		return fmt.Sprintf("unknown %d", u32(v))
	}
	switch name {
	case "meta":
		if r, ok := a[unix.NFTA_META_SREG]; ok {
			return fmt.Sprintf("meta set %s with reg %d", known(metaKeys, a[unix.NFTA_META_KEY]), u32(r)), nil
		}
		return fmt.Sprintf("meta load %s => reg %d", known(metaKeys, a[unix.NFTA_META_KEY]), u32(a[unix.NFTA_META_DREG])), nil
	case "ct":
		if _, ok := a[unix.NFTA_CT_DIRECTION]; ok {
			return "", fmt.Errorf("ct with a direction")
		}
		return fmt.Sprintf("ct load %s => reg %d", known(ctKeys, a[unix.NFTA_CT_KEY]), u32(a[unix.NFTA_CT_DREG])), nil
	case "cmp":
		return fmt.Sprintf("cmp %s reg %d %s", known(cmpOps, a[unix.NFTA_CMP_OP]), u32(a[unix.NFTA_CMP_SREG]), words(value(a[unix.NFTA_CMP_DATA]))), nil
	case "bitwise":
		if op, ok := a[nftaBitwiseOp]; ok && u32(op) != unix.NFT_BITWISE_BOOL {
			return "", fmt.Errorf("bitwise op %d", u32(op))
		}
		return fmt.Sprintf("bitwise reg %d = ( reg %d & %s ) ^ %s", u32(a[unix.NFTA_BITWISE_DREG]), u32(a[unix.NFTA_BITWISE_SREG]),
			words(value(a[unix.NFTA_BITWISE_MASK])), words(value(a[unix.NFTA_BITWISE_XOR]))), nil
	case "payload":
		return fmt.Sprintf("payload load %db @ %s header + %d => reg %d", u32(a[unix.NFTA_PAYLOAD_LEN]),
			known(bases, a[unix.NFTA_PAYLOAD_BASE]), u32(a[unix.NFTA_PAYLOAD_OFFSET]), u32(a[unix.NFTA_PAYLOAD_DREG])), nil
	case "lookup":
		s := fmt.Sprintf("lookup reg %d set %s", u32(a[unix.NFTA_LOOKUP_SREG]), str(a[unix.NFTA_LOOKUP_SET]))
		if r, ok := a[unix.NFTA_LOOKUP_DREG]; ok {
			s += fmt.Sprintf(" dreg %d", u32(r))
		}
		if f, ok := a[unix.NFTA_LOOKUP_FLAGS]; ok && u32(f)&unix.NFT_LOOKUP_F_INV != 0 {
			s += " inv"
		}
		return s, nil
	case "fib":
		var flags []string
		for i, f := range fibFlags {
			if u32(a[unix.NFTA_FIB_FLAGS])&(1<<i) != 0 && f != "present" {
				flags = append(flags, f)
			}
		}
		s := "fib " + strings.Join(flags, " . ") + " " + known(fibResults, a[unix.NFTA_FIB_RESULT])
		if u32(a[unix.NFTA_FIB_FLAGS])&unix.NFTA_FIB_F_PRESENT != 0 {
			s += " present"
		}
		return s + fmt.Sprintf(" => reg %d", u32(a[unix.NFTA_FIB_DREG])), nil
	case "counter":
		return fmt.Sprintf("counter pkts %d bytes %d", u64(a[unix.NFTA_COUNTER_PACKETS]), u64(a[unix.NFTA_COUNTER_BYTES])), nil
	case "limit":
		units := map[uint64]string{1: "second", 60: "minute", 3600: "hour", 86400: "day"}
		types := map[uint32]string{unix.NFT_LIMIT_PKTS: "packets", unix.NFT_LIMIT_PKT_BYTES: "bytes"}
		unit, ok := units[u64(a[unix.NFTA_LIMIT_UNIT])]
		if !ok {
			return "", fmt.Errorf("limit unit %d", u64(a[unix.NFTA_LIMIT_UNIT]))
		}
		return fmt.Sprintf("limit rate %d/%s burst %d type %s flags 0x%x", u64(a[unix.NFTA_LIMIT_RATE]), unit,
			u32(a[unix.NFTA_LIMIT_BURST]), known(types, a[unix.NFTA_LIMIT_TYPE]), u32(a[unix.NFTA_LIMIT_FLAGS])), nil
	case "log":
		if _, ok := a[unix.NFTA_LOG_GROUP]; !ok {
			return "", fmt.Errorf("log without a group")
		}
		var s string
		if p, ok := a[unix.NFTA_LOG_PREFIX]; ok {
			s = "prefix " + str(p) + " "
		}
		var snaplen uint32
		var qthreshold uint16
		if v, ok := a[unix.NFTA_LOG_SNAPLEN]; ok {
			snaplen = u32(v)
		}
		if v, ok := a[unix.NFTA_LOG_QTHRESHOLD]; ok {
			qthreshold = binary.BigEndian.Uint16(v)
		}
		return fmt.Sprintf("log %sgroup %d snaplen %d qthreshold %d", s, binary.BigEndian.Uint16(a[unix.NFTA_LOG_GROUP]), snaplen, qthreshold), nil
	case "byteorder":
		ops := map[uint32]string{unix.NFT_BYTEORDER_NTOH: "ntoh", unix.NFT_BYTEORDER_HTON: "hton"}
		return fmt.Sprintf("byteorder reg %d = %s(reg %d, %d, %d)", u32(a[unix.NFTA_BYTEORDER_DREG]), known(ops, a[unix.NFTA_BYTEORDER_OP]),
			u32(a[unix.NFTA_BYTEORDER_SREG]), u32(a[unix.NFTA_BYTEORDER_SIZE]), u32(a[unix.NFTA_BYTEORDER_LEN])), nil
	case "immediate":
		v, err := verdictText(a[unix.NFTA_IMMEDIATE_DATA])
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("immediate reg %d %s", u32(a[unix.NFTA_IMMEDIATE_DREG]), v), nil
	}
	return "", fmt.Errorf("no printer for expression %q", name)
}

func debugElements(b *strings.Builder, data []byte) error {
	var set string
	var elems []byte
	err := walk(data, func(typ uint16, v []byte) error {
		switch typ {
		case unix.NFTA_SET_ELEM_LIST_SET:
			set = str(v)
		case unix.NFTA_SET_ELEM_LIST_ELEMENTS:
			elems = v
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(b, "set %s\n", set)
	return walk(elems, func(typ uint16, v []byte) error {
		var key, keyEnd []byte
		var flags uint32
		var verdict string
		err := walk(v, func(typ uint16, v []byte) error {
			var err error
			switch typ {
			case unix.NFTA_SET_ELEM_KEY:
				key = value(v)
			case nftaSetElemKeyEnd:
				keyEnd = value(v)
			case unix.NFTA_SET_ELEM_FLAGS:
				flags = u32(v)
			case unix.NFTA_SET_ELEM_DATA:
				verdict, err = verdictText(v)
				verdict += " "
			default:
				err = fmt.Errorf("element attribute %d", typ)
			}
			return err
		})
		if err != nil {
			return err
		}
		end := ""
		if keyEnd != nil {
			end = "  - " + strings.ReplaceAll(words(keyEnd), "0x", "")
		}
		fmt.Fprintf(b, "\telement %s%s  : %s%d [end]\n", strings.ReplaceAll(words(key), "0x", ""), end, verdict, flags)
		return nil
	})
}

// normalizeNftDebug keeps of `nft --debug netlink` output the rules and
// the set elements, in the form debugNetlink prints: table and chain lines
// and set declarations are left out (their attributes are checked by the
// kernel tests), each element goes on a line of its own under the name of
// its set, and the set's userdata that nft prints after the elements is
// dropped.
func normalizeNftDebug(out string) string {
	var b strings.Builder
	lines := strings.Split(out, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case strings.HasPrefix(l, "\telement "):
			set := strings.Fields(lines[i-1])[0]
			if j := strings.Index(l, "  userdata = "); j >= 0 {
				l = l[:j]
			}
			fmt.Fprintf(&b, "set %s\n", set)
			for _, e := range strings.Split(l[1:], "\t") {
				fmt.Fprintf(&b, "\t%s\n", e)
			}
		case strings.HasPrefix(l, "inet ") && !strings.HasPrefix(l, "inet (null)"):
			// A rule: its header, then its indented lines (nft prints no
			// blank line after a rule with userdata).
			b.WriteString(l + "\n")
			for ; i+1 < len(lines) && strings.HasPrefix(lines[i+1], "  "); i++ {
				b.WriteString(lines[i+1] + "\n")
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// TestEncodeIsNfts: the rules and elements the writer sends for the
// sample table are, byte for byte, what nft sends for its rendering.
func TestEncodeIsNfts(t *testing.T) {
	got := debugNetlink(t, sentBatch(t, sampleTable()))
	if *update {
		t.Skip("the golden file is nft's: -update rewrites it in TestKernelNetlinkGoldenIsNfts")
	}
	golden(t, "sample.netlink", got)
}

// TestKernelNetlinkGoldenIsNfts: testdata/sample.netlink is what nft
// prints for the rendered sample table (nft needs root to build its
// cache, even for a check). With -update it rewrites the file from nft.
func TestKernelNetlinkGoldenIsNfts(t *testing.T) {
	ns := testns.New(t, "nftpt")
	out := testns.Nft(t, ns, Render(sampleTable()), "--check", "--debug", "netlink", "-f", "-")
	golden(t, "sample.netlink", normalizeNftDebug(out))
}
