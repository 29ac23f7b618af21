package nft

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"go4.org/netipx"
)

// Validate checks what the encoder relies on and the kernel would refuse
// (EEXIST, EINVAL) for the whole batch: a known key type; every address
// valid and of the key's family; in an interval set, a set held per
// address or an address interval verdict map, ranges that are
// well-formed, sorted and do not overlap;
// elsewhere no key twice; in a verdict map, verdicts a map can hold. A set
// that fails is a compiler bug, and is refused before anything is sent,
// naming the set and the element.
//
// An address . protocol . port interval verdict map (see AddrProtoPortVmap)
// has elements in any order, each with well-formed ranges, no two
// overlapping (holding one packet both), and, in an element whose
// protocols include one without ports, every port. The kernel's set
// (pipapo) refuses an element whose first or last key falls in another
// (EEXIST), but takes one that covers another whole, and a packet in both
// then gets whichever the kernel finds first: so any overlap is refused
// here.
//
// An exact address . protocol . port verdict map holds single values, no
// key twice, and no protocol without ports: `th dport` reads ICMP's
// checksum there, and an exact port would decide by it.
func (s *Set) Validate() error {
	if s.Key < KeyIPv4 || s.Key > KeyIPv6ProtoPort {
		return fmt.Errorf("unknown key type %d", s.Key)
	}
	if len(s.Elements) > 0 && s.Chunks != nil {
		return fmt.Errorf("elements both in Elements and in Chunks")
	}
	if s.Key.Concat() && s.Interval {
		if !s.Verdict {
			return fmt.Errorf("interval sets here hold plain addresses, or address . protocol . port ranges in a verdict map")
		}
		return s.validateProtoPortMap()
	}
	if s.Interval && s.Key.Concat() {
		return fmt.Errorf("interval sets here hold plain addresses")
	}
	if s.PerAddress && (s.Interval || s.Verdict || s.Key.Concat()) {
		return fmt.Errorf("a set held per address is a plain address set, without intervals or verdicts")
	}
	fam := s.Key.Family()
	type key struct {
		addr  netip.Addr
		proto Proto
		port  uint16
	}
	var seen map[key]int // for exact keys only: ranged sets are checked in order
	if !s.ranged() {
		seen = make(map[key]int, s.Len())
	}
	var prev Element
	for i, e := range s.All() {
		if !e.Addr.IsValid() || FamilyOf(e.Addr) != fam || e.Addr.Is4In6() {
			return fmt.Errorf("element %d: address %v is not %s", i, e.Addr, fam.Keyword())
		}
		if e.Addr.Zone() != "" || e.Last.Zone() != "" {
			// The kernel's key is the 16 bytes alone: fd00::1%a and
			// fd00::1 would be one key twice.
			return fmt.Errorf("element %d: address %v has a zone, which no set key holds", i, e.Addr)
		}
		if e.ProtoLast != 0 || e.PortLast != 0 {
			return fmt.Errorf("element %d: a protocol or port range outside an address . protocol . port interval map", i)
		}
		if s.ranged() {
			r := addrRangeOf(e)
			if !r.IsValid() || FamilyOf(r.To()) != fam {
				return fmt.Errorf("element %d: %v-%v is not a range", i, e.Addr, e.Last)
			}
			if i > 0 {
				prev := addrRangeOf(prev)
				if !prev.To().Less(r.From()) {
					return fmt.Errorf("element %d (%v) overlaps or precedes element %d (%v)", i, r, i-1, prev)
				}
			}
			prev = e
			if s.Verdict {
				if err := validVerdict(e.Verdict); err != nil {
					return fmt.Errorf("element %d: %w", i, err)
				}
			}
			continue
		}
		if e.Last.IsValid() {
			return fmt.Errorf("element %d: a range in a set without intervals", i)
		}
		k := key{addr: e.Addr}
		if s.Key.Concat() {
			k.proto, k.port = e.Proto, e.Port
		}
		if j, dup := seen[k]; dup {
			key := e.Addr.String()
			if s.Key.Concat() {
				key = fmt.Sprintf("%s . %s . %d", e.Addr, e.Proto, e.Port)
			}
			return fmt.Errorf("element %d repeats the key of element %d (%s)", i, j, key)
		}
		seen[k] = i
		if s.exactProtoPortMap() && !e.Proto.HasPorts() {
			return fmt.Errorf("element %d (%s): protocol %s has no ports, so an exact port would match bytes of another header", i, renderElement(s, e), e.Proto)
		}
		if s.Verdict {
			if err := validVerdict(e.Verdict); err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
		}
	}
	return nil
}

// validVerdict checks a verdict a map element can hold.
func validVerdict(v Verdict) error {
	switch v.Kind {
	case Jump, Goto:
		if v.Chain == "" {
			return fmt.Errorf("%s without a chain", v.Kind)
		}
	case Accept, Drop, Return, Continue:
		if v.Chain != "" {
			return fmt.Errorf("%s with a chain", v.Kind)
		}
	default:
		return fmt.Errorf("verdict %q", v.Kind)
	}
	return nil
}

// validateProtoPortMap is Validate for an address . protocol . port
// interval verdict map. Overlaps are found by a sweep over the elements
// sorted by first address, comparing each only with those whose address
// range is still open: a map of pods' ports compares an element with the
// others of its address only.
func (s *Set) validateProtoPortMap() error {
	fam := s.Key.Family()
	type span struct {
		i      int
		addr   netipx.IPRange
		p0, p1 Proto
		q0, q1 uint16
	}
	elems := s.List()
	spans := make([]span, 0, len(elems))
	for i, e := range elems {
		if !e.Addr.IsValid() || FamilyOf(e.Addr) != fam || e.Addr.Is4In6() {
			return fmt.Errorf("element %d: address %v is not %s", i, e.Addr, fam.Keyword())
		}
		r := addrRangeOf(e)
		if !r.IsValid() || FamilyOf(r.To()) != fam || r.To().Is4In6() {
			return fmt.Errorf("element %d: %v-%v is not a range", i, e.Addr, e.Last)
		}
		p0, p1 := e.protoRange()
		if p1 < p0 {
			return fmt.Errorf("element %d: protocols %d-%d are not a range", i, e.Proto, e.ProtoLast)
		}
		q0, q1 := e.portRange()
		if q1 < q0 {
			return fmt.Errorf("element %d: ports %d-%d are not a range", i, e.Port, e.PortLast)
		}
		if q0 != 0 || q1 != 0xffff {
			for p := int(p0); p <= int(p1); p++ {
				if !Proto(p).HasPorts() {
					return fmt.Errorf("element %d (%s): protocol %s has no ports, so the element must span ports 0-65535", i, renderElement(s, e), Proto(p))
				}
			}
		}
		if err := validVerdict(e.Verdict); err != nil {
			return fmt.Errorf("element %d: %w", i, err)
		}
		spans = append(spans, span{i: i, addr: r, p0: p0, p1: p1, q0: q0, q1: q1})
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Or(a.addr.From().Compare(b.addr.From()), cmp.Compare(a.i, b.i)) })
	var open []span
	for _, x := range spans {
		open = slices.DeleteFunc(open, func(o span) bool { return o.addr.To().Less(x.addr.From()) })
		for _, o := range open {
			if o.p0 <= x.p1 && x.p0 <= o.p1 && o.q0 <= x.q1 && x.q0 <= o.q1 {
				i, j := min(o.i, x.i), max(o.i, x.i)
				return fmt.Errorf("element %d (%s) overlaps element %d (%s)", j, renderElement(s, elems[j]), i, renderElement(s, elems[i]))
			}
		}
		open = append(open, x)
	}
	return nil
}

// Validate checks the whole table: each set (Set.Validate), and every
// name a rule or a map element gives: a jump or goto names a chain of the
// table, a lookup a set of the table whose key is what the lookup loads
// (its family; an address, or an address . protocol . port), and a verdict
// map lookup a verdict map. The kernel refuses a missing chain or set
// (ENOENT), but not every lookup of the wrong key: an IPv4 address looked
// up in an IPv6 set reads registers nothing wrote.
func (t *Table) Validate() error {
	for _, s := range t.Sets {
		if err := s.Validate(); err != nil {
			return fmt.Errorf("set %s: %w", s.Name, err)
		}
	}
	return t.validateRefs(true)
}

// validateRefs is Validate without checking each set's elements, and,
// unless chainsToo, without checking the chains jumps name (the kernel
// refuses a missing one with ENOENT, an answer callers rely on).
func (t *Table) validateRefs(chainsToo bool) error {
	chains := make(map[string]bool, len(t.Chains))
	for _, c := range t.Chains {
		chains[c.Name] = true
	}
	sets := make(map[string]*Set, len(t.Sets))
	for _, s := range t.Sets {
		sets[s.Name] = s
	}
	chainRef := func(v Verdict) error {
		if chainsToo && (v.Kind == Jump || v.Kind == Goto) && !chains[v.Chain] {
			return fmt.Errorf("%s to chain %s, which is not in the table", v.Kind, v.Chain)
		}
		return nil
	}
	setRef := func(name string, fam IPFamily, concat, vmap bool) error {
		s, ok := sets[name]
		if !ok {
			return fmt.Errorf("set %s is not in the table", name)
		}
		switch {
		case s.Key.Family() != fam || s.Key.Concat() != concat:
			return fmt.Errorf("set %s has key %s, the lookup loads another", name, keyTypeName(s.Key))
		case vmap && !s.Verdict:
			return fmt.Errorf("set %s is no verdict map", name)
		case !vmap && concat && s.Interval:
			return fmt.Errorf("set %s is an interval verdict map", name)
		}
		return nil
	}
	for _, c := range t.Chains {
		for i, r := range c.Rules {
			for _, e := range r.Exprs {
				var err error
				switch e := e.(type) {
				case Verdict:
					err = chainRef(e)
				case AddrInSet:
					err = setRef(e.Set, e.Family, false, false)
				case AddrVmap:
					err = setRef(e.Map, e.Family, false, true)
				case AddrProtoPortInSet:
					err = setRef(e.Set, e.Family, true, false)
				case AddrProtoPortVmap:
					err = setRef(e.Map, e.Family, true, true)
				}
				if err != nil {
					return fmt.Errorf("chain %s rule %d (%s): %w", c.Name, i, RenderRule(r), err)
				}
			}
		}
	}
	for _, s := range t.Sets {
		if !s.Verdict {
			continue
		}
		for i, e := range s.All() {
			if err := chainRef(e.Verdict); err != nil {
				return fmt.Errorf("map %s element %d (%s): %w", s.Name, i, renderElement(s, e), err)
			}
		}
	}
	return nil
}
