package nft

import (
	"fmt"
	"net/netip"
	"slices"
)

// A Packet is what Trace needs to know of a packet.
type Packet struct {
	Src, Dst netip.Addr
	Proto    Proto
	// Dport is the destination port, ignored by port matches for
	// protocols without ports. An address . protocol . port map lookup
	// (AddrProtoPortVmap) reads it for every protocol, as `th dport`
	// reads bytes 2-3 of any transport header: for a protocol without
	// ports it stands for those bytes (ICMP's checksum), 0 if unknown;
	// Set.Validate makes sure it decides nothing there.
	Dport    uint16
	ICMPType uint8 // for ICMP and ICMPv6
	// HopLimit is the IPv6 hop limit as the forward hook sees it: 255 only
	// for a packet that was not routed (neighbour discovery on a bridge),
	// since routing decrements it first.
	HopLimit uint8
	Mark     uint32
	// CtMark is the conntrack mark of the packet's connection: zero for
	// the first packet of one (NEW), which is all the policy judges.
	CtMark uint32
	// Established marks a packet of a connection conntrack already knows
	// (ct state established or related); otherwise the packet is NEW.
	Established bool
	// DNAT marks a connection whose destination was translated on its way
	// in (a Service address to an endpoint): ct status dnat.
	DNAT bool
	// OverLimit makes every limit the packet meets exhausted (a flood):
	// a Limit fails, and the rest of its rule is not run.
	OverLimit bool
	// WrongIif marks a packet that came in on an interface its source
	// address does not route back through: a forged source, which a
	// reverse-path check (ReversePath) rejects.
	WrongIif bool
}

// A TraceResult is the outcome of a packet through a table's base chain.
type TraceResult struct {
	Verdict VerdictKind // Accept or Drop
	Mark    uint32      // the mark when the packet leaves the table
	Path    []string    // "chain: rule" for each rule that matched
}

// Trace runs a packet through the base chain named hookChain the way the
// kernel would, over the model rather than the kernel: it lets the compiler
// be tested for what a ruleset does (src, dst, proto, port → verdict)
// independently of how it is laid out.
func Trace(t *Table, hookChain string, p Packet) (TraceResult, error) {
	return NewTracer(t).Trace(hookChain, p)
}

type tracer struct {
	chains map[string]*Chain
	sets   map[string]*Set
	exact  map[string]map[exactKey]Element // see Tracer
	p      Packet
	path   []string
}

// maxDepth mirrors the kernel's jump stack limit (NFT_JUMP_STACK_SIZE).
const maxDepth = 16

// run evaluates a chain and returns the final verdict, or "" when the chain
// ran to its end or returned.
func (tr *tracer) run(c *Chain, depth int) (VerdictKind, error) {
	if depth > maxDepth {
		return "", fmt.Errorf("trace: jump stack exceeded at chain %s", c.Name)
	}
	for _, r := range c.Rules {
		v, err := tr.rule(c, r, depth)
		if err != nil || v != "" {
			return v, err
		}
	}
	return "", nil
}

// rule evaluates one rule: "" means go on with the next rule of the chain;
// Return ends the chain; Accept and Drop end evaluation.
func (tr *tracer) rule(c *Chain, r Rule, depth int) (VerdictKind, error) {
	p := &tr.p
	hit := func(v Verdict) (VerdictKind, error) {
		tr.path = append(tr.path, c.Name+": "+RenderRule(r)+" -> "+renderVerdict(v))
		return tr.verdict(c, v, depth)
	}
	for _, e := range r.Exprs {
		if ok, isMatch := tr.match(e); isMatch {
			if !ok {
				return "", nil
			}
			continue
		}
		switch e := e.(type) {
		case AddrVmap:
			if !tr.inFamily(e.Family) {
				return "", nil
			}
			s := tr.sets[e.Map]
			if s == nil {
				return "", fmt.Errorf("trace: chain %s: no map %s", c.Name, e.Map)
			}
			a := tr.addr(e.Field)
			elems := s.List()
			i := slices.IndexFunc(elems, func(el Element) bool {
				if s.Interval {
					return addrRangeOf(el).Contains(a)
				}
				return el.Addr == a
			})
			switch {
			case i < 0:
				return "", nil // a miss ends the rule
			case elems[i].Verdict.Kind == Continue:
				continue // the rule goes on
			}
			return hit(elems[i].Verdict)
		case AddrProtoPortVmap:
			el, ok, err := tr.protoPortLookup(e)
			if err != nil {
				return "", fmt.Errorf("trace: chain %s: %w", c.Name, err)
			}
			if !ok {
				return "", nil // a miss ends the rule
			}
			if el.Verdict.Kind == Continue {
				continue // the rule goes on
			}
			return hit(el.Verdict)
		case SetMark:
			p.Mark = p.Mark&^(e.Clear|e.Set) | e.Set
		case Counter:
			// Counts; the packet goes on.
		case Log:
			// Logs; the packet goes on.
		case Verdict:
			if e.Kind == Continue {
				continue // the rule goes on, to its end and the next rule
			}
			tr.path = append(tr.path, c.Name+": "+RenderRule(r))
			return tr.verdict(c, e, depth)
		default:
			return "", fmt.Errorf("trace: cannot evaluate %T", e)
		}
	}
	return "", nil
}

// match evaluates e if it is a match expression (isMatch), reporting
// whether the packet matches it; statements (marks, maps, verdicts) are
// left to the caller.
func (tr *tracer) match(e Expr) (ok, isMatch bool) {
	p := &tr.p
	switch e := e.(type) {
	case CtStateEstablishedRelated:
		return p.Established, true
	case CtStatusDNAT:
		return p.DNAT, true
	case ReversePath:
		return !p.WrongIif, true
	case AddrEq:
		return tr.addr(e.Field) == e.Addr, true
	case AddrInSet:
		return tr.inFamily(e.Family) && tr.lookup(e.Set, tr.addr(e.Field), 0, 0), true
	case L4ProtoEq:
		return p.Proto == e.Proto, true
	case NfprotoEq:
		return tr.inFamily(e.Family), true
	case DportRange:
		return p.Dport >= e.First && p.Dport <= e.Last, true
	case AddrProtoPortInSet:
		return tr.inFamily(e.Family) && tr.lookup(e.Set, tr.addr(e.Field), p.Proto, p.Dport), true
	case ICMPv6TypeRange:
		return FamilyOf(p.Src) == IPv6 && p.Proto == ProtoICMPv6 && p.ICMPType >= e.First && p.ICMPType <= e.Last &&
			(e.HopLimit == 0 || p.HopLimit == e.HopLimit), true
	case MarkBitsSet:
		return p.Mark&e.Bits == e.Bits, true
	case MarkBitsClear:
		return p.Mark&e.Bits == 0, true
	case CtMarkBitsSet:
		return p.CtMark&e.Bits == e.Bits, true
	case Limit:
		return !p.OverLimit, true
	}
	return false, false
}

func (tr *tracer) verdict(c *Chain, v Verdict, depth int) (VerdictKind, error) {
	switch v.Kind {
	case Accept, Drop, Return:
		return v.Kind, nil
	case Jump, Goto:
		next, ok := tr.chains[v.Chain]
		if !ok {
			return "", fmt.Errorf("trace: chain %s: %s to missing chain %s", c.Name, v.Kind, v.Chain)
		}
		res, err := tr.run(next, depth+1)
		if err != nil {
			return "", err
		}
		if res == Return || res == "" {
			if v.Kind == Goto {
				return Return, nil // goto does not come back: the caller's chain ends too
			}
			return "", nil
		}
		return res, nil
	}
	return "", fmt.Errorf("trace: unknown verdict %q", v.Kind)
}

func (tr *tracer) addr(f AddrField) netip.Addr {
	if f == Saddr {
		return tr.p.Src
	}
	return tr.p.Dst
}

func (tr *tracer) inFamily(f IPFamily) bool { return FamilyOf(tr.p.Src) == f }

// protoPortLookup finds the element of an address . protocol . port map
// that holds the packet's address, protocol and Dport, as the kernel's
// lookup does: in an interval map the one whose three ranges hold them
// (Validate leaves at most one; in a map it did not check, the first in
// order wins), in an exact map the one whose key equals them. A packet of
// another family misses.
func (tr *tracer) protoPortLookup(e AddrProtoPortVmap) (Element, bool, error) {
	s := tr.sets[e.Map]
	if s == nil {
		return Element{}, false, fmt.Errorf("no map %s", e.Map)
	}
	if !s.Key.Concat() || !s.Verdict || s.Key.Family() != e.Family {
		return Element{}, false, fmt.Errorf("map %s is no %s address . protocol . port verdict map", e.Map, e.Family.Keyword())
	}
	if !tr.inFamily(e.Family) {
		return Element{}, false, nil
	}
	a, p := tr.addr(e.Field), tr.p
	if s.exactProtoPortMap() {
		el, ok := tr.exact[e.Map][exactKey{a, p.Proto, p.Dport}]
		return el, ok, nil
	}
	for _, el := range s.All() {
		p0, p1 := el.protoRange()
		q0, q1 := el.portRange()
		if addrRangeOf(el).Contains(a) && p.Proto >= p0 && p.Proto <= p1 && p.Dport >= q0 && p.Dport <= q1 {
			return el, true, nil
		}
	}
	return Element{}, false, nil
}

func (tr *tracer) lookup(name string, a netip.Addr, proto Proto, port uint16) bool {
	s := tr.sets[name]
	if s == nil {
		return false
	}
	for _, e := range s.All() {
		switch {
		case s.Key.Concat():
			if e.Addr == a && e.Proto == proto && e.Port == port {
				return true
			}
		case s.ranged():
			if addrRangeOf(e).Contains(a) {
				return true
			}
		default:
			if e.Addr == a {
				return true
			}
		}
	}
	return false
}
