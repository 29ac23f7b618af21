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

	verdicts map[Flow]bool // flow → narrowed, within this Change
}

// NewChange describes the write from old to new.
func NewChange(old, new *nft.Table) *Change {
	c := &Change{
		old: old, new: new,
		oldHooks: forwardChains(old), newHooks: forwardChains(new),
		src: map[netip.Addr]bool{}, dst: map[netip.Addr]bool{},
		verdicts: map[Flow]bool{},
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
	p := f.Packet()
	if c.old == nil && f.DNAT && f.Src == f.Dst {
		// A connection to itself through a Service is exempt only when it
		// came in on the pod's own link, which a conntrack entry does not
		// say. With no table before (a start, or a repair after the table
		// was flushed or dormant, when anyone could start anything) it is
		// judged as one that did not: another pod forging the address is
		// cut, and a genuine hairpin is ended once and reconnects, its new
		// first packet judged by the kernel, interface included.
		p.WrongIif = true
	}
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
			if s, field, ok := dropsByAddress(r, sets); ok {
				for _, el := range s.Elements {
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
						for _, el := range s.Elements {
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
	Deleted    int // of those, deleted
	Gone       int // of those, already gone when deleted (ENOENT)

	Dump, Trace, Delete, Total time.Duration
}
