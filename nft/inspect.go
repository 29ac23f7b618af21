package nft

import "strconv"

// Reading every table of a namespace.
//
// Conn.Inspect is the reader `nftpolicy doctor` stands on: unlike Drift and
// ReadTable, which read our own table, it reads every table of every
// family (ip, ip6, inet, arp, bridge, netdev): the base chains with their
// hooks and priorities, and, decoded from each rule, where the rule reads
// or writes the packet mark or the conntrack mark and which bits. It never
// writes. Conn.ProbeFeatures checks the kernel features the table needs in
// a throwaway namespace of its own, never in the one a Conn is opened on.

// An Inspection is one consistent read of a namespace's whole ruleset:
// every table, read between two reads of the ruleset generation that
// agree.
type Inspection struct {
	Generation uint32
	Tables     []InspectedTable // by family, then name
}

// An InspectedTable is one table of any family, as Conn.Inspect read it.
type InspectedTable struct {
	Family string // ip, ip6, inet, arp, bridge, netdev
	Name   string
	Chains []InspectedChain // by name
	// Marks lists, rule by rule, each read or write of a mark.
	Marks []MarkUse
	// Errors names the chains whose rules could not be read or decoded;
	// their marks are missing from Marks.
	Errors []string
}

// An InspectedChain is a chain of an InspectedTable.
type InspectedChain struct {
	Name  string
	Hook  *InspectedHook // nil for a regular chain
	Rules int
}

// An InspectedHook is where and when a base chain runs.
type InspectedHook struct {
	Type     string // filter, nat, route
	Hook     string // see HookName
	Priority int32
	Policy   string // accept or drop; "" when the kernel gave none
	Device   string // of a netdev chain (or an inet ingress one)
}

// A MarkKind names the mark a rule reads or writes.
type MarkKind string

// Mark kinds.
const (
	MetaMark MarkKind = "meta mark" // the packet mark (skb->mark)
	CtMark   MarkKind = "ct mark"   // the conntrack mark of the packet's connection
)

// A MarkUse is one read or write of a mark by one rule.
//
// A read is a compare (cmp, range, set lookup) of the mark under a mask:
// Bits is the mask and Value the value compared with, so `meta mark &
// 0x4000 == 0x4000` reads Bits 0x4000. A compare of the whole mark with
// one value, `meta mark 0x4000`, is Exact: it fails as soon as any other
// bit is set, ours included, which is why nftpolicy leaves none of its bits
// set when its chain ends.
//
// A write is an assignment of the mark: Bits are the bits it may change,
// Value the constant it sets them to where there is one. `meta mark set
// meta mark | 0x4000` writes Bits 0x4000; `meta mark set 0x4000` and `meta
// mark set ct mark` write all 32, and so does `ct mark set meta mark &
// 0x4`, which clears every other bit of the conntrack mark. A copy from
// one mark into the other also reads the bits it carries over: `ct mark
// set meta mark & 0x4` reads meta mark Bits 0x4.
type MarkUse struct {
	Chain  string
	Handle uint64
	Kind   MarkKind
	Write  bool
	Bits   uint32
	Value  uint32
	Exact  bool
	// Via is how the rule does it: "nft" for native expressions, else the
	// xtables extension iptables-nft left in the rule ("xt MARK rev 2").
	Via string
	// Undecoded is set for an xtables extension of a revision whose data
	// is not decoded: Bits is then all 32, the worst case.
	Undecoded bool
}

// A FeatureCheck is one kernel feature the table needs, as
// Conn.ProbeFeatures found it.
type FeatureCheck struct {
	Name string
	// Used is whether this build's table needs it; a feature that is not
	// is checked because a configuration or the next layout may.
	Used bool
	Err  error // nil when the kernel took it
}

// HookName names hook number n of a chain of family: "forward",
// "ingress", or "hook N" for a number this reader does not know.
func HookName(family string, n uint32) string {
	var names []string
	switch family {
	case "ip", "ip6", "inet":
		names = []string{"prerouting", "input", "forward", "output", "postrouting", "ingress"}
	case "bridge":
		names = []string{"prerouting", "input", "forward", "output", "postrouting"}
	case "arp":
		names = []string{"input", "output", "forward"}
	case "netdev":
		names = []string{"ingress", "egress"}
	}
	if int(n) < len(names) {
		return names[n]
	}
	return "hook " + strconv.FormatUint(uint64(n), 10)
}
