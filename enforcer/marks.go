package enforcer

import (
	"fmt"
	"math/bits"
	"strings"
)

// DefaultMarkMask is the packet-mark bit nftpolicy owns unless told
// otherwise. 0x4 is the one bit that none of the components in
// KnownMarkUsers has been seen to set on packets at the node: see
// docs in README and the table below for who uses what.
const DefaultMarkMask uint32 = 0x00000004

// A MarkUser is a component known to keep its own state in the packet mark.
type MarkUser struct {
	Name string
	Bits uint32
	Why  string
}

// KnownMarkUsers lists the mark bits of components that share a node with a
// NetworkPolicy enforcer. A mask overlapping any of them is refused unless
// the operator allows it explicitly: clearing our bits when our chain ends
// would also clear theirs.
var KnownMarkUsers = []MarkUser{
	{"kube-proxy", 0x00004000, "KUBE-MARK-MASQ masquerade mark, matched exactly as `meta mark 0x4000` in its nftables mode"},
	{"kubelet", 0x00008000, "legacy KUBE-MARK-DROP"},
	{"Calico", 0xffff0000, "default iptablesMarkMask; allocates accept/pass/scratch/endpoint bits from it"},
	{"Cilium", 0x00000f00, "MARK_MAGIC_HOST_MASK"},
	{"Antrea", 0x00000001, "HostLocalSourceMark (bit 0)"},
	{"kube-router", 0x00030000, "0x10000 and 0x20000 in its network policy chains"},
	{"Azure NPM", 0x00003000 | 0x00000e00, "0x1000-0x3000 and 0x200-0x800"},
	{"Weave Net", 0x00040000, "weave-npc"},
	// Istio's sidecar (0x539) and in-pod ambient marks (0x111, 0x539 under
	// 0xfff) are set inside pod network namespaces, and veth scrubs the mark
	// when a packet changes namespace, but the node-level ambient redirection
	// of Istio <= 1.20 set 0x40, 0x100, 0x200, 0x210, 0x220, 0x400-0x402 and
	// 0x4d2/0x4d3 on the node: the union of every value is 0x7fb.
	{"Istio", 0x000007fb, "0x539 owner mark, ambient 0x111/0x210/0x220/0x40/0x4d3"},
}

// CheckMarkMask refuses an empty mask and, unless allowOverlap, a mask that
// shares bits with a known component, naming each such component.
func CheckMarkMask(mask uint32, allowOverlap bool) error {
	if mask == 0 {
		return fmt.Errorf("mark mask 0x%08x: nftpolicy needs at least one bit", mask)
	}
	if allowOverlap {
		return nil
	}
	var clashes []string
	for _, u := range KnownMarkUsers {
		if mask&u.Bits != 0 {
			clashes = append(clashes, fmt.Sprintf("%s (0x%08x: %s)", u.Name, mask&u.Bits, u.Why))
		}
	}
	if len(clashes) > 0 {
		return fmt.Errorf("mark mask 0x%08x overlaps bits used by %s; pick other bits or pass --allow-mark-overlap",
			mask, strings.Join(clashes, ", "))
	}
	return nil
}

// allowBit is the mark bit a policy chain sets when one of its rules allows
// the packet: the lowest bit of the mask.
func allowBit(mask uint32) uint32 {
	return 1 << bits.TrailingZeros32(mask)
}

// RevokedBit is the conntrack-mark bit that marks a connection the policy
// no longer allows (see revokeRule): the highest bit of the mask.
//
// The conntrack mark is not the packet mark: nftpolicy's only bit in it is
// this one, and the allow bit lives in the packet mark alone, so the two
// never meet even when, as with the default one-bit mask, they are the same
// number. It comes from the mask all the same, because the mask is the
// operator's word (checked against KnownMarkUsers) for the bits no other
// component uses, and components that keep state in the conntrack mark
// copy it to and from the packet mark bit for bit (`CONNMARK
// --save-mark/--restore-mark`, `ct mark set meta mark`): a bit outside the
// mask could be another's, overwritten by their save or read by their
// restore. The highest bit rather than the allow bit (the lowest) keeps
// them apart when the mask has room: a restore into the packet mark then
// cannot present our allow bit, which pod chains clear on entry anyway.
func RevokedBit(mask uint32) uint32 {
	if mask == 0 {
		mask = DefaultMarkMask
	}
	return 1 << (31 - bits.LeadingZeros32(mask))
}
