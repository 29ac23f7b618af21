package nft

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Encoding the model as google/nftables values: chains' hooks, set key
// types, set elements and rule expressions, exactly as nft encodes the
// same text. Nothing here talks to the kernel; the writer queues what
// these return, and the reader compares the kernel's dump with them.

func hookNum(name string) (*nftables.ChainHook, error) {
	switch name {
	case "forward":
		return nftables.ChainHookForward, nil
	case "input":
		return nftables.ChainHookInput, nil
	case "output":
		return nftables.ChainHookOutput, nil
	case "prerouting":
		return nftables.ChainHookPrerouting, nil
	case "postrouting":
		return nftables.ChainHookPostrouting, nil
	}
	return nil, fmt.Errorf("unknown hook %q", name)
}

var (
	typeIPv4ProtoPort = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)
	typeIPv6ProtoPort = nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeInetProto, nftables.TypeInetService)
)

func keyDatatype(k KeyType) nftables.SetDatatype {
	switch k {
	case KeyIPv6:
		return nftables.TypeIP6Addr
	case KeyIPv4ProtoPort:
		return typeIPv4ProtoPort
	case KeyIPv6ProtoPort:
		return typeIPv6ProtoPort
	}
	return nftables.TypeIPAddr
}

// elementDelta encodes the elements gone from and come to a set between
// old and new: what to delete from it and add to it.
//
// Intervals are replaced whole: a range that grows or splits is deleted and
// its new ranges added, both start and end elements, in the same batch. A
// finer diff of the encoded boundaries (adding an end element inside a live
// range) is refused by the kernel's overlap check with EEXIST.
func elementDelta(old, new *Set, gone, came []Element) (del, add []nftables.SetElement, err error) {
	if del, err = encodeList(old, gone); err != nil {
		return nil, nil, err
	}
	if add, err = encodeList(new, came); err != nil {
		return nil, nil, err
	}
	if new.Interval && !new.protoPortMap() {
		zero := nftables.SetElement{Key: addrBytes(zeroAddr(new.Key.Family())), IntervalEnd: true}
		switch before, after := leadingEnd(old), leadingEnd(new); {
		case before && !after:
			del = append([]nftables.SetElement{zero}, del...)
		case after && !before:
			add = append([]nftables.SetElement{zero}, add...)
		}
	}
	return del, add, nil
}

// encodeElements turns model elements into netlink set elements. Interval
// sets are encoded the way nft encodes them: each range is a start element
// and an end element one past its last address, plus a leading end element
// at the zero address when the first range does not start there.
func encodeElements(s *Set) ([]nftables.SetElement, error) {
	out, err := encodeList(s, s.List())
	if err != nil || !leadingEnd(s) {
		return out, err
	}
	zero := nftables.SetElement{Key: addrBytes(zeroAddr(s.Key.Family())), IntervalEnd: true}
	return append([]nftables.SetElement{zero}, out...), nil
}

// leadingEnd reports whether an interval set's encoding starts with an end
// element at the zero address, as nft writes it when the first range does
// not start there: the kernel's interval tree needs the gap before the
// first range closed.
func leadingEnd(s *Set) bool {
	if !s.Interval || s.Key.Concat() {
		return false
	}
	for _, first := range s.All() {
		return addrRangeOf(first).From() != zeroAddr(s.Key.Family())
	}
	return false
}

// encodeList encodes elements of s (all of them or a part) without the
// leading end element of an interval set.
func encodeList(s *Set, elems []Element) ([]nftables.SetElement, error) {
	return appendEncoded(make([]nftables.SetElement, 0, len(elems)), s, elems)
}

// appendEncoded is encodeList appending to out.
func appendEncoded(out []nftables.SetElement, s *Set, elems []Element) ([]nftables.SetElement, error) {
	fam := s.Key.Family()
	for i, e := range elems {
		if !e.Addr.IsValid() || FamilyOf(e.Addr) != fam {
			return nil, fmt.Errorf("element %d: address %v is not %s", i, e.Addr, fam.Keyword())
		}
		switch {
		case s.protoPortMap():
			// As nft encodes `10.0.0.0/24 . tcp . 80-81 : drop` (nft
			// 1.0.6 --debug netlink): the first values as the key, the
			// last ones as the key end (also for single values), no
			// interval flags, the verdict as data.
			kind, err := verdictKind(e.Verdict.Kind)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
			r := addrRangeOf(e)
			p0, p1 := e.protoRange()
			q0, q1 := e.portRange()
			out = append(out, nftables.SetElement{
				Key:         protoPortKey(r.From(), p0, q0),
				KeyEnd:      protoPortKey(r.To(), p1, q1),
				VerdictData: &expr.Verdict{Kind: kind, Chain: e.Verdict.Chain},
			})
		case s.Verdict && s.Interval:
			// As nft encodes `10.0.0.0-10.0.0.9 : goto c`: the start
			// element holds the verdict, the end element none.
			kind, err := verdictKind(e.Verdict.Kind)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
			r := addrRangeOf(e)
			out = append(out, nftables.SetElement{Key: addrBytes(r.From()), VerdictData: &expr.Verdict{Kind: kind, Chain: e.Verdict.Chain}})
			if next := r.To().Next(); next.IsValid() {
				out = append(out, nftables.SetElement{Key: addrBytes(next), IntervalEnd: true})
			}
		case s.Verdict:
			kind, err := verdictKind(e.Verdict.Kind)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
			key := addrBytes(e.Addr)
			if s.Key.Concat() {
				// As nft encodes `10.0.0.1 . tcp . 80 : accept` in a map
				// without intervals: the key alone, no key end, no flags.
				key = protoPortKey(e.Addr, e.Proto, e.Port)
			}
			out = append(out, nftables.SetElement{Key: key, VerdictData: &expr.Verdict{Kind: kind, Chain: e.Verdict.Chain}})
		case s.Key.Concat():
			out = append(out, nftables.SetElement{Key: protoPortKey(e.Addr, e.Proto, e.Port)})
		case s.PerAddress:
			for a := range Addresses(e) {
				out = append(out, nftables.SetElement{Key: addrBytes(a)})
			}
		case s.Interval:
			r := addrRangeOf(e)
			out = append(out, nftables.SetElement{Key: addrBytes(r.From())})
			if next := r.To().Next(); next.IsValid() {
				out = append(out, nftables.SetElement{Key: addrBytes(next), IntervalEnd: true})
			}
		default:
			out = append(out, nftables.SetElement{Key: addrBytes(e.Addr)})
		}
	}
	return out, nil
}

// protoPortKey is an address . protocol . port key: each field padded to
// 4 bytes (a register), the protocol as one byte, the port big-endian.
func protoPortKey(a netip.Addr, proto Proto, port uint16) []byte {
	return append(addrBytes(a), byte(proto), 0, 0, 0, byte(port>>8), byte(port), 0, 0)
}

func zeroAddr(f IPFamily) netip.Addr {
	if f == IPv6 {
		return netip.IPv6Unspecified()
	}
	return netip.IPv4Unspecified()
}

func addrBytes(a netip.Addr) []byte {
	if a.Is4() || a.Is4In6() {
		b := a.Unmap().As4()
		return b[:]
	}
	b := a.As16()
	return b[:]
}

func verdictKind(k VerdictKind) (expr.VerdictKind, error) {
	switch k {
	case Accept:
		return expr.VerdictAccept, nil
	case Drop:
		return expr.VerdictDrop, nil
	case Return:
		return expr.VerdictReturn, nil
	case Jump:
		return expr.VerdictJump, nil
	case Goto:
		return expr.VerdictGoto, nil
	case Continue:
		return expr.VerdictContinue, nil
	}
	return 0, fmt.Errorf("unknown verdict %q", k)
}

// Register numbers as nft allocates them. nft addresses the first operand as
// the 16-byte register 1; the following operands of a concatenation go into
// the next 4-byte registers (NFT_REG32_00 is 8), except that an operand
// starting on a 16-byte boundary is again named by its 16-byte register.
const (
	reg1        = 1
	reg32Offset = 8
)

// concatRegister is the register nft uses for the operand at byte offset off
// of a concatenation that starts in register 1.
func concatRegister(off uint32) uint32 {
	if off%16 == 0 {
		return reg1 + off/16
	}
	return reg32Offset + off/4
}

// encodeRule encodes r's expressions. sets holds the table's sets by
// name: their names and ids, and Interval, which decides how a verdict
// map lookup of address . protocol . port is encoded.
func encodeRule(r Rule, sets map[string]*nftables.Set) ([]expr.Any, error) {
	var out []expr.Any
	lookupSet := func(name string) (*nftables.Set, error) {
		s, ok := sets[name]
		if !ok {
			return nil, fmt.Errorf("set %q is not in the table", name)
		}
		return s, nil
	}
	for _, e := range r.Exprs {
		switch e := e.(type) {
		case CtStateEstablishedRelated:
			out = append(out,
				&expr.Ct{Register: reg1, Key: expr.CtKeySTATE},
				&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
					Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
					Xor:  binaryutil.NativeEndian.PutUint32(0)},
				&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: binaryutil.NativeEndian.PutUint32(0)},
			)
		case CtStatusDNAT:
			// IPS_DST_NAT (include/uapi/linux/netfilter/nf_conntrack_common.h).
			const ipsDstNAT = 1 << 5
			out = append(out,
				&expr.Ct{Register: reg1, Key: expr.CtKeySTATUS},
				&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
					Mask: binaryutil.NativeEndian.PutUint32(ipsDstNAT),
					Xor:  binaryutil.NativeEndian.PutUint32(0)},
				&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: binaryutil.NativeEndian.PutUint32(0)},
			)
		case ReversePath:
			// With F_PRESENT the lookup leaves 1 in the register when a
			// route exists; nft compares the whole 32-bit register (a
			// shorter compare lists as `exists/8`).
			out = append(out,
				&expr.Fib{Register: reg1, FlagSADDR: true, FlagIIF: true, ResultOIF: true, FlagPRESENT: true},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binaryutil.NativeEndian.PutUint32(1)},
			)
		case AddrEq:
			f := FamilyOf(e.Addr)
			out = append(out, matchNfproto(f)...)
			out = append(out, loadAddr(f, e.Field, reg1),
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: addrBytes(e.Addr)})
		case AddrInSet:
			s, err := lookupSet(e.Set)
			if err != nil {
				return nil, err
			}
			out = append(out, matchNfproto(e.Family)...)
			out = append(out, loadAddr(e.Family, e.Field, reg1),
				&expr.Lookup{SourceRegister: reg1, SetName: s.Name, SetID: s.ID})
		case AddrVmap:
			s, err := lookupSet(e.Map)
			if err != nil {
				return nil, err
			}
			out = append(out, matchNfproto(e.Family)...)
			out = append(out, loadAddr(e.Family, e.Field, reg1),
				&expr.Lookup{SourceRegister: reg1, DestRegister: 0, IsDestRegSet: true, SetName: s.Name, SetID: s.ID})
		case NfprotoEq:
			out = append(out, matchNfproto(e.Family)...)
		case L4ProtoEq:
			out = append(out,
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{byte(e.Proto)}})
		case DportRange:
			out = append(out, &expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2})
			if e.First == e.Last {
				out = append(out, &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binaryutil.BigEndian.PutUint16(e.First)})
			} else {
				out = append(out,
					&expr.Cmp{Op: expr.CmpOpGte, Register: reg1, Data: binaryutil.BigEndian.PutUint16(e.First)},
					&expr.Cmp{Op: expr.CmpOpLte, Register: reg1, Data: binaryutil.BigEndian.PutUint16(e.Last)})
			}
		case AddrProtoPortInSet:
			s, err := lookupSet(e.Set)
			if err != nil {
				return nil, err
			}
			addrLen := uint32(4)
			if e.Family == IPv6 {
				addrLen = 16
			}
			out = append(out, matchNfproto(e.Family)...)
			out = append(out,
				loadAddr(e.Family, e.Field, reg1),
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: concatRegister(addrLen)},
				&expr.Payload{DestRegister: concatRegister(addrLen + 4), Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Lookup{SourceRegister: reg1, SetName: s.Name, SetID: s.ID})
		case AddrProtoPortVmap:
			s, err := lookupSet(e.Map)
			if err != nil {
				return nil, err
			}
			addrLen := uint32(4)
			if e.Family == IPv6 {
				addrLen = 16
			}
			// As nft 1.0.6 writes `ip saddr . meta l4proto . th dport
			// vmap @m` (nft --debug netlink). For an interval map the
			// protocol's register goes through a byteorder hton of size
			// 2 and length 1, which the kernel runs as a no-op (it swaps
			// len/size = 0 units); nft emits it for a host-order field of
			// an interval concatenation, and not for an exact map, whose
			// lookup is then the set lookup's with a verdict.
			proto := concatRegister(addrLen)
			out = append(out, matchNfproto(e.Family)...)
			out = append(out,
				loadAddr(e.Family, e.Field, reg1),
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: proto})
			if s.Interval {
				out = append(out, &expr.Byteorder{SourceRegister: proto, DestRegister: proto, Op: expr.ByteorderHton, Len: 1, Size: 2})
			}
			out = append(out,
				&expr.Payload{DestRegister: concatRegister(addrLen + 4), Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Lookup{SourceRegister: reg1, DestRegister: 0, IsDestRegSet: true, SetName: s.Name, SetID: s.ID})
		case ICMPv6TypeRange:
			out = append(out, matchNfproto(IPv6)...)
			out = append(out,
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{byte(ProtoICMPv6)}},
				&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1})
			if e.First == e.Last {
				out = append(out, &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{e.First}})
			} else {
				out = append(out,
					&expr.Cmp{Op: expr.CmpOpGte, Register: reg1, Data: []byte{e.First}},
					&expr.Cmp{Op: expr.CmpOpLte, Register: reg1, Data: []byte{e.Last}})
			}
			if e.HopLimit != 0 {
				// ip6 hoplimit: byte 7 of the IPv6 header; the nfproto
				// check above already stands for it, as nft writes it.
				out = append(out,
					&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: 7, Len: 1},
					&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{e.HopLimit}})
			}
		case MarkBitsSet:
			out = append(out,
				&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
				&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
					Mask: binaryutil.NativeEndian.PutUint32(e.Bits), Xor: binaryutil.NativeEndian.PutUint32(0)},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binaryutil.NativeEndian.PutUint32(e.Bits)})
		case MarkBitsClear:
			out = append(out,
				&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
				&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
					Mask: binaryutil.NativeEndian.PutUint32(e.Bits), Xor: binaryutil.NativeEndian.PutUint32(0)},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binaryutil.NativeEndian.PutUint32(0)})
		case CtMarkBitsSet:
			// As nft 1.0.6 writes `ct mark & 0x4 == 0x4` (nft --debug netlink).
			out = append(out,
				&expr.Ct{Register: reg1, Key: expr.CtKeyMARK},
				&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
					Mask: binaryutil.NativeEndian.PutUint32(e.Bits), Xor: binaryutil.NativeEndian.PutUint32(0)},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binaryutil.NativeEndian.PutUint32(e.Bits)})
		case SetMark:
			out = append(out,
				&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
				&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
					Mask: binaryutil.NativeEndian.PutUint32(^(e.Clear | e.Set)), Xor: binaryutil.NativeEndian.PutUint32(e.Set)},
				&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1})
		case Counter:
			// As nft writes `counter`: both values, zero.
			out = append(out, &expr.Counter{})
		case Limit:
			// As nft 1.0.6 writes `limit rate 20/second burst 40 packets`
			// (nft --debug netlink): rate, unit in seconds, burst, type
			// packets, flags 0 (not inverted).
			out = append(out, &expr.Limit{Type: expr.LimitTypePkts, Rate: uint64(e.Rate), Unit: expr.LimitTimeSecond, Burst: e.Burst})
		case Log:
			// As nft writes `log prefix "..." group 100`: the group and the
			// prefix (NUL-terminated) only; no snaplen or queue threshold,
			// which the kernel then leaves at their defaults.
			key := uint32(1 << unix.NFTA_LOG_GROUP)
			if e.Prefix != "" {
				key |= 1 << unix.NFTA_LOG_PREFIX
			}
			out = append(out, &expr.Log{Key: key, Group: e.Group, Data: []byte(e.Prefix)})
		case Verdict:
			kind, err := verdictKind(e.Kind)
			if err != nil {
				return nil, err
			}
			out = append(out, &expr.Verdict{Kind: kind, Chain: e.Chain})
		default:
			return nil, fmt.Errorf("cannot encode %T", e)
		}
	}
	return out, nil
}

// matchNfproto is the implicit `meta nfproto ipv4` nft puts before any
// ip/ip6 payload match in an inet table.
func matchNfproto(f IPFamily) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{byte(f)}},
	}
}

func loadAddr(f IPFamily, field AddrField, reg uint32) *expr.Payload {
	off, n := uint32(12), uint32(4) // IPv4 saddr
	switch {
	case f == IPv4 && field == Daddr:
		off = 16
	case f == IPv6 && field == Saddr:
		off, n = 8, 16
	case f == IPv6 && field == Daddr:
		off, n = 24, 16
	}
	return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}
}
