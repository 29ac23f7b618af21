package nft

import (
	"fmt"
	"net/netip"
)

// Validate checks what the encoder relies on and the kernel would refuse
// (EEXIST, EINVAL) for the whole batch: a known key type; every address
// valid and of the key's family; in an interval set, ranges that are
// well-formed, sorted and do not overlap; elsewhere no key twice; in a
// verdict map, verdicts a map can hold. A set that fails is a compiler bug,
// and is refused before anything is sent, naming the set and the element.
func (s *Set) Validate() error {
	if s.Key < KeyIPv4 || s.Key > KeyIPv6ProtoPort {
		return fmt.Errorf("unknown key type %d", s.Key)
	}
	if s.Interval && (s.Verdict || s.Key.Concat()) {
		return fmt.Errorf("interval sets here hold plain addresses")
	}
	fam := s.Key.Family()
	type key struct {
		addr  netip.Addr
		proto Proto
		port  uint16
	}
	seen := make(map[key]int, len(s.Elements))
	for i, e := range s.Elements {
		if !e.Addr.IsValid() || FamilyOf(e.Addr) != fam || e.Addr.Is4In6() {
			return fmt.Errorf("element %d: address %v is not %s", i, e.Addr, fam.Keyword())
		}
		if s.Interval {
			r := addrRangeOf(e)
			if !r.IsValid() || FamilyOf(r.To()) != fam {
				return fmt.Errorf("element %d: %v-%v is not a range", i, e.Addr, e.Last)
			}
			if i > 0 {
				prev := addrRangeOf(s.Elements[i-1])
				if !prev.To().Less(r.From()) {
					return fmt.Errorf("element %d (%v) overlaps or precedes element %d (%v)", i, r, i-1, prev)
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
			return fmt.Errorf("element %d repeats the key of element %d (%v)", i, j, e.Addr)
		}
		seen[k] = i
		if s.Verdict {
			switch e.Verdict.Kind {
			case Jump, Goto:
				if e.Verdict.Chain == "" {
					return fmt.Errorf("element %d: %s without a chain", i, e.Verdict.Kind)
				}
			case Accept, Drop, Return:
			default:
				return fmt.Errorf("element %d: verdict %q", i, e.Verdict.Kind)
			}
		}
	}
	return nil
}
