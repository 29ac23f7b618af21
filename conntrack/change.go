package conntrack

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"go4.org/netipx"

	"github.com/nftpolicy/nftpolicy/nft"
)

// A Flow is a connection's first packet as the forward hook saw it: after
// DNAT, before SNAT. FlowOf derives it from a conntrack entry's tuples.
type Flow struct {
	Src, Dst netip.Addr
	Proto    nft.Proto
	Dport    uint16 // zero for protocols without ports
	ICMPType uint8  // for ICMP and ICMPv6, the type of the first message
	DNAT     bool   // the destination was translated (a Service address)
}

// Packet is the NEW packet nft.Trace evaluates for the flow.
func (f Flow) Packet() nft.Packet {
	return nft.Packet{Src: f.Src, Dst: f.Dst, Proto: f.Proto, Dport: f.Dport, ICMPType: f.ICMPType, DNAT: f.DNAT}
}

// A Tuple is one direction of a conntrack entry.
type Tuple struct {
	Src, Dst     netip.Addr
	Proto        nft.Proto
	Sport, Dport uint16
	ICMPType     uint8 // for ICMP and ICMPv6
}

// FlowOf is the first packet of the connection with these tuples: the
// original source, the real destination (the reply's source, which DNAT
// set), the real destination port (the reply's source port) and the
// original ICMP type.
func FlowOf(orig, reply Tuple) Flow {
	f := Flow{Src: orig.Src.Unmap(), Dst: reply.Src.Unmap(), Proto: orig.Proto}
	// The destination was translated when the reply comes from elsewhere
	// (as ct status dnat says; a port-only DNAT shows in the ports).
	f.DNAT = orig.Dst.Unmap() != f.Dst || (hasPorts(orig.Proto) && orig.Dport != reply.Sport)
	switch {
	case orig.Proto == nft.ProtoICMP || orig.Proto == nft.ProtoICMPv6:
		f.ICMPType = orig.ICMPType
	case hasPorts(orig.Proto):
		f.Dport = reply.Sport
	}
	return f
}

// hasPorts reports whether nft's `th dport` means something for the
// protocol, as far as nftpolicy matches ports.
func hasPorts(p nft.Proto) bool {
	switch p {
	case nft.ProtoTCP, nft.ProtoUDP, nft.ProtoSCTP, udpLite, dccp:
		return true
	}
	return false
}

// Protocols with ports that NetworkPolicy cannot name but conntrack tracks.
const (
	dccp    nft.Proto = 33
	udpLite nft.Proto = 136
)

// A Change is a write from table old to table new, as it bears on
// connections conntrack already knows. It decides which of them lost their
// permission. A nil table stands for no table: everything is accepted.
// A Change is not safe for concurrent use (it caches verdicts).
type Change struct {
	old, new *nft.Table
	oldHooks []string // forward base chains, by priority
	newHooks []string
	oldTrace *nft.Tracer // nil for a nil table
	newTrace *nft.Tracer

	// Addresses looked up in the forward base chains' verdict maps, by
	// field, of either table. When every flow outside them is accepted by
	// both tables (filtered), only flows that touch one need a trace.
	src, dst map[netip.Addr]bool
	// Ranges a rule drops outright by one address field (the enforcer's
	// unknown-local sets, with --default-deny-unknown).
	srcRanges, dstRanges []netipx.IPRange
	filtered             bool

	// revoked is the conntrack-mark bit new's base chain drops ahead of
	// its established accept (RevokedBit), 0 when it has no such rule.
	revoked uint32

	// linkUnknown: an unmarked hairpin may have started while no table
	// judged it, so it is not known to have come in on its pod's own link
	// (see packet). True with no table before, false for a Recheck.
	linkUnknown bool

	verdicts map[Flow]bool // flow → narrowed, within this Change
	allowed  map[Flow]bool // flow → new accepts it from any link, within this Change
	byLink   map[Flow]bool // flow → new's verdict depends on the link, within this Change
}

// NewChange describes the write from old to new.
func NewChange(old, new *nft.Table) *Change {
	c := &Change{
		old: old, new: new,
		oldHooks: forwardChains(old), newHooks: forwardChains(new),
		src: map[netip.Addr]bool{}, dst: map[netip.Addr]bool{},
		verdicts: map[Flow]bool{}, allowed: map[Flow]bool{}, byLink: map[Flow]bool{},
		revoked: RevokedBit(new), linkUnknown: old == nil,
	}
	c.filtered = c.dispatchKeys(old) && c.dispatchKeys(new)
	if old != nil {
		c.oldTrace = nft.NewTracer(old)
	}
	if new != nil {
		c.newTrace = nft.NewTracer(new)
	}
	return c
}

// Recheck describes a judgement of every flow by t, the table programmed
// all along since conntrack was last brought in line with it (a Change
// from t to t that forgets nothing). Any flow t drops is revoked: it got
// its permission back from someone else, as when another table writes the
// conntrack mark (`ct mark set meta mark`) and clears the revoked bit, or
// its entry was made around the table (ctnetlink, conntrackd). A hairpin
// is judged as the kernel judged it, on its own link: the table was there
// when it started, and one that was there before the table has been
// handed to the kernel already (see ByLink).
func Recheck(t *nft.Table) *Change {
	c := NewChange(nil, t)
	c.linkUnknown = false
	return c
}

// Nothing reports, without looking at any flow, that the change cannot have
// taken permission from any flow: both tables are the same one, or neither
// can drop a packet at all.
func (c *Change) Nothing() bool {
	return c.old == c.new || c.filtered && len(c.src)+len(c.dst)+len(c.srcRanges)+len(c.dstRanges) == 0
}

// Families are the IP families whose flows may have lost permission:
// with the prefilter, those of the addresses in either table's maps;
// otherwise both.
func (c *Change) Families() (v4, v6 bool) {
	if !c.filtered {
		return true, true
	}
	for _, r := range append(slices.Clip(c.srcRanges), c.dstRanges...) {
		if nft.FamilyOf(r.From()) == nft.IPv4 {
			v4 = true
		} else {
			v6 = true
		}
	}
	for _, m := range []map[netip.Addr]bool{c.src, c.dst} {
		for a := range m {
			if nft.FamilyOf(a) == nft.IPv4 {
				v4 = true
			} else {
				v6 = true
			}
		}
	}
	return v4, v6
}

// Concerns reports whether the flow may have lost permission at all: it
// is false only for flows both tables accept without a trace.
func (c *Change) Concerns(f Flow) bool {
	return !c.filtered || c.src[f.Src] || c.dst[f.Dst] || inRanges(c.srcRanges, f.Src) || inRanges(c.dstRanges, f.Dst)
}

// Narrows reports whether old accepted the flow's first packet and new
// drops it.
func (c *Change) Narrows(f Flow) (bool, error) {
	if !c.Concerns(f) {
		return false, nil
	}
	if v, ok := c.verdicts[f]; ok {
		return v, nil
	}
	p := c.packet(f, c.linkUnknown)
	after, err := verdict(c.newTrace, c.newHooks, p)
	if err != nil {
		return false, fmt.Errorf("new table: %w", err)
	}
	narrowed := false
	if after == nft.Drop {
		before, err := verdict(c.oldTrace, c.oldHooks, p)
		if err != nil {
			return false, fmt.Errorf("old table: %w", err)
		}
		narrowed = before == nft.Accept
	}
	c.verdicts[f] = narrowed
	return narrowed, nil
}

// packet is the first packet of the flow as a table is asked about it.
// A pod's connection to itself through a Service (a hairpin) is exempt
// only when it came in on the pod's own link, which a conntrack entry does
// not say; with wrongLink it is judged as one that did not.
func (c *Change) packet(f Flow, wrongLink bool) nft.Packet {
	p := f.Packet()
	p.WrongIif = wrongLink && f.hairpin()
	return p
}

// hairpin reports a pod's connection to itself through a Service: the
// only flow whose verdict can depend on the link it came in on.
func (f Flow) hairpin() bool { return f.DNAT && f.Src == f.Dst }

// Revoked is the conntrack-mark bit that the new table drops ahead of its
// established accept (see RevokedBit): the cleanup marks a narrowed flow
// with it instead of deleting its entry. 0 when the new table has none.
func (c *Change) Revoked() uint32 { return c.revoked }

// Allows reports whether the new table accepts the flow's first packet
// from any link: whether a flow marked revoked may have its mark cleared.
// It holds for any flow, marked by whichever table before, not only for
// the flows the prefilter concerns. A hairpin is judged as if it came in
// on another link than its pod's, as it may have been revoked so (with no
// table before, see ByLink; or by an earlier version, which marked such
// flows): clearing its mark because its pod's own link would be exempt
// let a connection forged while no table was there come back at the next
// change. One that new accepts only from its pod's own link is ByLink.
func (c *Change) Allows(f Flow) (bool, error) {
	if c.filtered && !c.Concerns(f) {
		return true, nil // accepted by both tables, new included
	}
	if v, ok := c.allowed[f]; ok {
		return v, nil
	}
	v, err := verdict(c.newTrace, c.newHooks, c.packet(f, true))
	if err != nil {
		return false, fmt.Errorf("new table: %w", err)
	}
	c.allowed[f] = v == nft.Accept
	return v == nft.Accept, nil
}

// ByLink reports a hairpin that the new table accepts when it comes in on
// its pod's own link and drops otherwise: only the kernel can tell which,
// at the connection's next packet. The cleanup deletes its entry rather
// than marking it or clearing its mark, so that the next packet is NEW and
// judged with its link. A genuine hairpin goes on (or, if the Service's
// masquerade picks another port, resets and reconnects); a forged one (a
// pod sending with another pod's address as its source) is dropped. For a
// hairpin, deleting leaves no gap from the server's end, as it does for
// other flows (package documentation, # Revoking): the server's packets go
// to the node's address (masquerade) or stay in the pod (none), so none
// starts a forwarded connection the policy would judge.
func (c *Change) ByLink(f Flow) (bool, error) {
	if !f.hairpin() || c.filtered && !c.Concerns(f) {
		return false, nil
	}
	if v, ok := c.byLink[f]; ok {
		return v, nil
	}
	own, err := verdict(c.newTrace, c.newHooks, c.packet(f, false))
	if err != nil {
		return false, fmt.Errorf("new table: %w", err)
	}
	v := false
	if own == nft.Accept {
		if v, err = c.Allows(f); err != nil {
			return false, err
		}
		v = !v
	}
	c.byLink[f] = v
	return v, nil
}

// RevokedBit is the conntrack-mark bit B of a rule `ct mark & B == B drop`
// (nft.CtMarkBitsSet) that a forward base chain of t runs before its
// established accept (the enforcer's Options.Revoke), 0 when there is
// none. Every packet of a connection whose entry carries B is then
// dropped, whichever end sends it: marking the entry revokes the
// connection for good, where deleting it lets the first packet of either
// end start it again (see the package documentation, # Revoking).
func RevokedBit(t *nft.Table) uint32 {
	if t == nil {
		return 0
	}
	for _, ch := range t.Chains {
		if ch.Hook == nil || ch.Hook.Hook != "forward" {
			continue
		}
		for _, r := range ch.Rules {
			if b := revokeRule(r); b != 0 {
				return b
			}
			if slices.ContainsFunc(r.Exprs, func(e nft.Expr) bool { _, ok := e.(nft.CtStateEstablishedRelated); return ok }) {
				break // too late: established packets were accepted
			}
		}
	}
	return 0
}

// revokeRule returns B for a rule `ct mark & B == B drop` with one bit B.
func revokeRule(r nft.Rule) uint32 {
	if len(r.Exprs) != 2 {
		return 0
	}
	m, ok1 := r.Exprs[0].(nft.CtMarkBitsSet)
	v, ok2 := r.Exprs[1].(nft.Verdict)
	if !ok1 || !ok2 || v.Kind != nft.Drop || m.Bits == 0 || m.Bits&(m.Bits-1) != 0 {
		return 0
	}
	return m.Bits
}

// verdict runs a NEW packet through the forward base chains of a table, in
// priority order: accept ends only its own base chain, drop is final.
func verdict(t *nft.Tracer, hooks []string, p nft.Packet) (nft.VerdictKind, error) {
	for _, name := range hooks {
		res, err := t.Trace(name, p)
		if err != nil {
			return "", err
		}
		if res.Verdict == nft.Drop {
			return nft.Drop, nil
		}
	}
	return nft.Accept, nil
}

// forwardChains names t's base chains on the forward hook, by priority.
func forwardChains(t *nft.Table) []string {
	if t == nil {
		return nil
	}
	var chains []*nft.Chain
	for _, ch := range t.Chains {
		if ch.Hook != nil && ch.Hook.Hook == "forward" {
			chains = append(chains, ch)
		}
	}
	slices.SortStableFunc(chains, func(a, b *nft.Chain) int { return cmp.Compare(a.Hook.Priority, b.Hook.Priority) })
	names := make([]string, len(chains))
	for i, ch := range chains {
		names[i] = ch.Name
	}
	return names
}

func inRanges(rs []netipx.IPRange, a netip.Addr) bool {
	for _, r := range rs {
		if r.Contains(a) {
			return true
		}
	}
	return false
}

// dispatchKeys adds to c.src and c.dst the addresses t's forward base
// chains look up in verdict maps, by the field looked up, and to
// c.srcRanges and c.dstRanges those a rule drops by one address field
// alone (`ip saddr @set drop`), and reports whether that is the only way
// those chains can do anything but accept: policy accept, no other verdict
// but accept, verdict maps keyed by address only. Then a packet whose
// source and destination are none of these is accepted, whatever else it
// is. The enforcer's base chain is such a chain (its maps are the dispatch
// maps, one key per isolated local pod; its only drops are of the unknown
// addresses of --default-deny-unknown); for any other, it reports false.
func (c *Change) dispatchKeys(t *nft.Table) bool {
	src, dst := c.src, c.dst
	if t == nil {
		return true
	}
	sets := map[string]*nft.Set{}
	for _, s := range t.Sets {
		sets[s.Name] = s
	}
	for _, ch := range t.Chains {
		if ch.Hook == nil || ch.Hook.Hook != "forward" {
			continue
		}
		if ch.Hook.Policy != nft.Accept {
			return false
		}
		for _, r := range ch.Rules {
			if revokeRule(r) != 0 {
				// It drops only packets of connections the cleanup
				// marked, never a first packet (a new entry's mark is 0).
				continue
			}
			if s, field, ok := dropsByAddress(r, sets); ok {
				for _, el := range s.All() {
					rng := netipx.IPRangeFrom(el.Addr, el.Addr)
					if el.Last.IsValid() {
						rng = netipx.IPRangeFrom(el.Addr, el.Last)
					}
					if field == nft.Saddr {
						c.srcRanges = append(c.srcRanges, rng)
					} else {
						c.dstRanges = append(c.dstRanges, rng)
					}
				}
				continue
			}
			for _, e := range r.Exprs {
				switch e := e.(type) {
				case nft.Verdict:
					if e.Kind != nft.Accept {
						return false
					}
				case nft.AddrVmap:
					keys := dst
					if e.Field == nft.Saddr {
						keys = src
					}
					if s := sets[e.Map]; s != nil {
						for _, el := range s.All() {
							keys[el.Addr] = true
						}
					}
				case nft.CtStateEstablishedRelated, nft.CtStatusDNAT, nft.ReversePath, nft.AddrEq, nft.AddrInSet, nft.L4ProtoEq, nft.DportRange,
					nft.AddrProtoPortInSet, nft.ICMPv6TypeRange, nft.MarkBitsSet, nft.SetMark:
					// matches, and a mark write: they never end a packet's way
				default:
					return false // an expression this filter does not know: trace everything
				}
			}
		}
	}
	return true
}

// dropsByAddress reports a rule that drops by one address field alone,
// `ip saddr @set drop`, with its set.
func dropsByAddress(r nft.Rule, sets map[string]*nft.Set) (*nft.Set, nft.AddrField, bool) {
	if len(r.Exprs) != 2 {
		return nil, "", false
	}
	in, ok1 := r.Exprs[0].(nft.AddrInSet)
	v, ok2 := r.Exprs[1].(nft.Verdict)
	s := sets[in.Set]
	if !ok1 || !ok2 || v.Kind != nft.Drop || s == nil || s.Verdict || s.Key.Concat() {
		return nil, "", false
	}
	return s, in.Field, true
}

// Stats report one cleanup.
type Stats struct {
	Dumped     int // conntrack entries read
	Local      int // skipped: to or from the namespace's own addresses
	Related    int // skipped: expected by a helper (they have a master)
	Candidates int // traced: an address is a key of a dispatch map, or no prefilter
	Narrowed   int // allowed by old, dropped by new
	Revoked    int // of those, marked revoked (the new table has a revoke rule)
	Deleted    int // deleted: narrowed, when new has no revoke rule, and Hairpins
	Marked     int // found marked revoked by an earlier change
	Restored   int // of those, allowed by new: the mark cleared
	Hairpins   int // narrowed or marked hairpins new drops only from another link (ByLink): deleted
	Revived    int // Recheck: unmarked flows new drops (a mark cleared by someone else), revoked again
	Gone       int // revoked, deleted or restored, but already gone (ENOENT)

	Dump, Trace, Delete, Total time.Duration // Delete: the deletes or mark updates
}
