package nft

import (
	"net/netip"
	"slices"
	"strconv"
)

// A Table is the whole desired state of one nftables table: its chains, in
// the order they are listed, and its named sets and verdict maps. The
// compiler builds a Table; the renderer prints it and the applier programs
// it. A Table is a value: nothing in this package mutates one it was given.
type Table struct {
	Family Family
	Name   string
	// Comment is the table's comment (its NFTA_TABLE_USERDATA), written
	// when the whole table is; nftpolicy keeps its owner record there (see
	// Owner).
	Comment string
	Sets    []*Set
	Chains  []*Chain
}

// A Family is an nftables address family. nftpolicy only writes inet tables,
// but the reader reports other tables' base chains with their family.
type Family string

// Families nftpolicy reads or writes.
const (
	FamilyInet Family = "inet"
	FamilyIPv4 Family = "ip"
	FamilyIPv6 Family = "ip6"
)

// A Chain is a named list of rules. A base chain (Hook != nil) is attached to
// a netfilter hook; a regular chain is reached by jump or goto.
type Chain struct {
	Name  string
	Hook  *Hook
	Rules []Rule
}

// A Hook attaches a base chain: `type filter hook forward priority -1; policy accept;`.
type Hook struct {
	Type     string // "filter"
	Hook     string // "forward"
	Priority int32
	Policy   VerdictKind // Accept or Drop
}

// A Rule is an ordered list of expressions: matches first, then statements,
// then at most one verdict. Comment is stored as rule userdata, as nft does.
type Rule struct {
	Exprs   []Expr
	Comment string
}

// Equal reports whether two rules are the same, comment included.
func (r Rule) Equal(o Rule) bool {
	return r.Comment == o.Comment && slices.Equal(r.Exprs, o.Exprs)
}

// An Expr is one piece of a rule. The concrete types below are the only
// ones; each documents the nft text it renders to.
type Expr interface{ isExpr() }

// An AddrField selects the source or the destination address of a packet.
type AddrField string

// Address fields.
const (
	Saddr AddrField = "saddr"
	Daddr AddrField = "daddr"
)

// An IPFamily is the network protocol a match applies to inside an inet table.
type IPFamily uint8

// IP families: the values are the NFPROTO numbers (meta nfproto).
const (
	IPv4 IPFamily = 2
	IPv6 IPFamily = 10
)

// Keyword is the nft payload keyword for the family: "ip" or "ip6".
func (f IPFamily) Keyword() string {
	if f == IPv6 {
		return "ip6"
	}
	return "ip"
}

// FamilyOf reports the IPFamily of an address.
func FamilyOf(a netip.Addr) IPFamily {
	if a.Is4() || a.Is4In6() {
		return IPv4
	}
	return IPv6
}

// CtStateEstablishedRelated matches replies and related traffic:
// `ct state established,related`.
type CtStateEstablishedRelated struct{}

// CtStatusDNAT matches a connection whose destination was translated (a
// Service address replaced by an endpoint's): `ct status dnat`.
type CtStatusDNAT struct{}

// ReversePath matches a packet that came in on the interface its source
// address routes back through, as a reverse-path filter checks:
// `fib saddr . iif oif exists`. A forged source arriving elsewhere fails.
type ReversePath struct{}

// AddrEq matches one address: `ip saddr 10.0.0.1`.
type AddrEq struct {
	Field AddrField
	Addr  netip.Addr
}

// AddrInSet matches an address against a named set: `ip saddr @set`.
type AddrInSet struct {
	Family IPFamily
	Field  AddrField
	Set    string
}

// AddrVmap looks an address up in a verdict map and applies the verdict it
// finds: `ip daddr vmap @map`. A miss falls through to the next rule.
type AddrVmap struct {
	Family IPFamily
	Field  AddrField
	Map    string
}

// L4ProtoEq matches the transport protocol: `meta l4proto tcp`.
type L4ProtoEq struct{ Proto Proto }

// NfprotoEq matches the packet's IP family: `meta nfproto ipv4`. A rule
// that only jumps to a chain of one family's rules uses it, so a packet
// walks its own family's rules alone.
type NfprotoEq struct{ Family IPFamily }

// DportRange matches the transport destination port, a single port when
// First == Last: `th dport 80` or `th dport 80-90`. It must follow an
// L4ProtoEq for a protocol that has ports.
type DportRange struct{ First, Last uint16 }

// AddrProtoPortInSet matches address, protocol and destination port together
// against a concatenated set: `ip daddr . meta l4proto . th dport @set`.
type AddrProtoPortInSet struct {
	Family IPFamily
	Field  AddrField
	Set    string
}

// AddrProtoPortVmap looks address, protocol and destination port up
// together in an address . protocol . port verdict map (a Set with Key
// KeyIPv4ProtoPort or KeyIPv6ProtoPort and Verdict) and applies the
// verdict of the one element that holds all three: `ip saddr . meta
// l4proto . th dport vmap @map`. A miss falls through to the next rule, as
// does a `continue` element. It is one lookup in place of a chain of
// first-match rules.
//
// The map decides what kind of lookup it is. In an interval map
// (Interval) an element holds a range of each of the three, and the
// kernel picks its pipapo set, whose cost grows with the ranges' spread.
// In an exact map (no Interval) an element is one address, one protocol
// and one port, and the kernel picks a hash set: a lookup costs the same
// whatever the map's size, which is what a map of every pod address ×
// port needs. nft encodes the two lookups differently (the interval one
// swaps the protocol's register first), so the writer asks the map.
//
// A packet of another family, or one without a transport header the
// kernel can read (a fragment after the first), is a miss. For a protocol
// without ports `th dport` reads bytes 2-3 of whatever header follows
// (ICMP's checksum); Set.Validate therefore requires an interval element
// whose protocols include one without ports to span every port, and
// refuses such a protocol in an exact map, so that the value read never
// decides.
type AddrProtoPortVmap struct {
	Family IPFamily
	Field  AddrField
	Map    string
}

// ICMPv6TypeRange matches IPv6 ICMP messages of a type in [First, Last],
// and with HopLimit, unless it is 0, as their hop limit:
// `icmpv6 type 133-137 ip6 hoplimit 255`.
type ICMPv6TypeRange struct{ First, Last, HopLimit uint8 }

// MarkBitsSet matches when all of Bits are set in the packet mark:
// `meta mark & 0x00000040 == 0x00000040`.
type MarkBitsSet struct{ Bits uint32 }

// MarkBitsClear matches when none of Bits is set in the packet mark:
// `meta mark & 0x00000040 == 0x00000000`.
type MarkBitsClear struct{ Bits uint32 }

// CtMarkBitsSet matches when all of Bits are set in the conntrack mark of
// the packet's connection: `ct mark & 0x00000004 == 0x00000004`. A packet
// without a conntrack entry (untracked, invalid) never matches.
type CtMarkBitsSet struct{ Bits uint32 }

// SetMark rewrites only the bits in Clear|Set of the packet mark, leaving
// every other component's bits as they were:
// `meta mark set meta mark & ~Clear | Set`.
type SetMark struct{ Clear, Set uint32 }

// Counter counts the packets and bytes that reach it in the rule, in the
// rule itself: `counter`. It matches every packet. nft lists it with its
// values (`counter packets 3 bytes 180`); Conn.RuleCounters reads them, and
// Drift ignores them: a count is no content.
type Counter struct{}

// Limit lets Rate packets a second through, with bursts of up to Burst,
// counted over every packet that reaches it in the rule: `limit rate
// 20/second burst 40 packets`. A packet over the limit ends the rule
// there, as a failed match does, and goes on to the next rule: so a limit
// belongs in a rule of its own (before a log, say), never in one whose
// verdict every matching packet must get. Its state (the tokens left) is
// the kernel's, no content, like a counter's values.
type Limit struct{ Rate, Burst uint32 }

// Log hands the packet to the nflog group Group, with Prefix, for the
// reader bound to that group (nfnetlink_log; see package flowlog): `log
// prefix "..." group 100`. It matches every packet. The kernel keeps at
// most 127 bytes of a prefix (NF_LOG_PREFIXLEN).
type Log struct {
	Group  uint16
	Prefix string
}

// Verdict ends evaluation of the rule: `accept`, `drop`, `return`,
// `jump chain` or `goto chain`. `continue` (in a verdict map element, where
// it makes a hit act as a miss) ends only the rule: the next one runs.
type Verdict struct {
	Kind  VerdictKind
	Chain string // for Jump and Goto
}

// A VerdictKind is one of the nftables verdicts nftpolicy uses.
type VerdictKind string

// Verdicts.
const (
	Accept VerdictKind = "accept"
	Drop   VerdictKind = "drop"
	Return VerdictKind = "return"
	Jump   VerdictKind = "jump"
	Goto   VerdictKind = "goto"
	// Continue goes on with the next rule, as if the rule had not
	// matched: in a verdict map, an element that deliberately decides
	// nothing.
	Continue VerdictKind = "continue"
)

func (CtStateEstablishedRelated) isExpr() {}
func (CtStatusDNAT) isExpr()              {}
func (ReversePath) isExpr()               {}
func (AddrEq) isExpr()                    {}
func (AddrInSet) isExpr()                 {}
func (AddrVmap) isExpr()                  {}
func (L4ProtoEq) isExpr()                 {}
func (DportRange) isExpr()                {}
func (AddrProtoPortInSet) isExpr()        {}
func (NfprotoEq) isExpr()                 {}
func (AddrProtoPortVmap) isExpr()         {}
func (ICMPv6TypeRange) isExpr()           {}
func (MarkBitsSet) isExpr()               {}
func (MarkBitsClear) isExpr()             {}
func (CtMarkBitsSet) isExpr()             {}
func (SetMark) isExpr()                   {}
func (Counter) isExpr()                   {}
func (Limit) isExpr()                     {}
func (Log) isExpr()                       {}
func (Verdict) isExpr()                   {}

// A Proto is an IP protocol number as matched by `meta l4proto`.
type Proto uint8

// Transport protocols NetworkPolicy can name, plus ICMP for tests.
const (
	ProtoICMP   Proto = 1
	ProtoTCP    Proto = 6
	ProtoUDP    Proto = 17
	ProtoICMPv6 Proto = 58
	ProtoSCTP   Proto = 132
)

// HasPorts reports whether the protocol's header starts with a source and
// a destination port, which `th dport` reads: TCP, UDP, DCCP (33), SCTP
// and UDP-Lite (136). For any other protocol `th dport` reads bytes 2-3 of
// its header, which are no port (ICMP's checksum).
func (p Proto) HasPorts() bool {
	switch p {
	case ProtoTCP, ProtoUDP, 33, ProtoSCTP, 136:
		return true
	}
	return false
}

// String is the nft keyword for the protocol.
func (p Proto) String() string {
	switch p {
	case ProtoICMP:
		return "icmp"
	case ProtoTCP:
		return "tcp"
	case ProtoUDP:
		return "udp"
	case ProtoICMPv6:
		return "ipv6-icmp"
	case ProtoSCTP:
		return "sctp"
	}
	return strconv.Itoa(int(p))
}

// A Set is a named set or verdict map. Its key type decides which Element
// fields are meaningful.
type Set struct {
	Name    string
	Comment string
	Key     KeyType
	// Interval sets hold address ranges (ipBlock minus except); their
	// elements must not overlap, which the compiler guarantees by building
	// them with netipx.IPSet. With an address . protocol . port key,
	// Interval is only valid together with Verdict: an interval verdict
	// map whose elements hold a range of each of the three (see
	// AddrProtoPortVmap).
	Interval bool
	// PerAddress sets hold address ranges in the model, as Interval sets
	// do, but the kernel holds each address of them as one element of a
	// set without intervals: a hash set, whose lookup is one hash where an
	// interval set's is a binary search of its ranges (about 200 ns a
	// NEW packet less for a set of thousands of pods, hack/bench/pps).
	// For sets of pod addresses: ranges of one address mostly, written
	// as one element instead of an interval's two. Only for a plain
	// address key, without Interval or Verdict.
	PerAddress bool
	// Verdict makes this a verdict map from the key to Element.Verdict.
	// A verdict map's key is an address or an address . protocol . port
	// concatenation; the latter exact (one value of each, a hash lookup)
	// or, with Interval, of ranges.
	Verdict  bool
	Elements []Element
	// Chunks hold the elements instead of Elements, when a set is large
	// and patched often: the elements are the chunks' one after the
	// other, Elements is then empty. Two versions of a set share the
	// chunks an edit did not touch, so that a pod event patching a
	// named-port set of 300k elements copies a chunk, not the set (which
	// was 26 MB an event at 150k pods). Chunks, like every part of a
	// Table, are never edited once made: a patch makes new ones. Read a
	// set's elements with Len, All and List, which see both forms.
	Chunks [][]Element
}

// ranged reports whether s's model elements are address ranges: an
// interval set or map, or a set held per address.
func (s *Set) ranged() bool { return s.Interval || s.PerAddress }

// protoPortMap reports whether s is an address . protocol . port interval
// verdict map: its elements are ranges of all three, encoded as a key and
// a key end (the kernel's pipapo set), not as interval end elements.
func (s *Set) protoPortMap() bool { return s.Key.Concat() && s.Interval }

// exactProtoPortMap reports whether s is an exact address . protocol .
// port verdict map: one value of each per element, a plain key (the
// kernel's hash set).
func (s *Set) exactProtoPortMap() bool { return s.Key.Concat() && s.Verdict && !s.Interval }

// A KeyType is the type of a set's key.
type KeyType int

// Key types.
const (
	KeyIPv4 KeyType = iota + 1
	KeyIPv6
	KeyIPv4ProtoPort // ipv4_addr . inet_proto . inet_service
	KeyIPv6ProtoPort // ipv6_addr . inet_proto . inet_service
)

// Family is the IP family of the key's address.
func (k KeyType) Family() IPFamily {
	if k == KeyIPv6 || k == KeyIPv6ProtoPort {
		return IPv6
	}
	return IPv4
}

// Concat reports whether the key is address . protocol . port.
func (k KeyType) Concat() bool { return k == KeyIPv4ProtoPort || k == KeyIPv6ProtoPort }

// An Element is one member of a Set. Which fields are meaningful depends on
// the set; the others must be zero:
//
//   - address sets: Addr, and for interval sets Last (inclusive; zero or
//     equal to Addr for a single address);
//   - concatenated sets: Addr, Proto and Port;
//   - verdict maps keyed by address: Addr and Verdict;
//   - exact address . protocol . port verdict maps: Addr, Proto, Port
//     and Verdict; the element holds a packet whose address, protocol
//     and port equal them;
//   - address . protocol . port interval verdict maps: the inclusive
//     ranges Addr-Last, Proto-ProtoLast and Port-PortLast, each end zero
//     or equal to its start for a single value, and Verdict. The element
//     holds a packet whose address, protocol and port are each in range.
//
// An Element is comparable: two elements are the same when all fields are
// (see also normalize, for the two spellings of a single value).
type Element struct {
	Addr      netip.Addr
	Last      netip.Addr
	Proto     Proto
	ProtoLast Proto
	Port      uint16
	PortLast  uint16
	Verdict   Verdict
}

// protoRange is the element's inclusive protocol range.
func (e Element) protoRange() (Proto, Proto) {
	if e.ProtoLast == 0 {
		return e.Proto, e.Proto
	}
	return e.Proto, e.ProtoLast
}

// portRange is the element's inclusive port range.
func (e Element) portRange() (uint16, uint16) {
	if e.PortLast == 0 {
		return e.Port, e.Port
	}
	return e.Port, e.PortLast
}

// normalize spells each single value of e one way (its end zero), so that
// elements that encode alike compare equal.
func (e Element) normalize() Element {
	if e.Last == e.Addr {
		e.Last = netip.Addr{}
	}
	if e.ProtoLast == e.Proto {
		e.ProtoLast = 0
	}
	if e.PortLast == e.Port {
		e.PortLast = 0
	}
	return e
}
