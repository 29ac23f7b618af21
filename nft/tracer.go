package nft

import (
	"fmt"
	"net/netip"
)

// A Tracer is Trace for many packets through one table: it indexes the
// table's chains and sets once, where Trace does it for every packet (at
// 10k packets through a table of a hundred pod chains, indexing is most
// of Trace's cost). The table must not change while the Tracer is used;
// a Tracer may be used from several goroutines.
type Tracer struct {
	chains map[string]*Chain
	sets   map[string]*Set
	// exact indexes each exact address . protocol . port map by key, as
	// the kernel's hash does: such a map holds an element per pod address
	// and port, thousands, and a packet looks one up.
	exact map[string]map[exactKey]Element
}

// An exactKey is the key of an element of an exact address . protocol .
// port map.
type exactKey struct {
	addr  netip.Addr
	proto Proto
	port  uint16
}

// NewTracer indexes t for tracing.
func NewTracer(t *Table) *Tracer {
	x := &Tracer{chains: make(map[string]*Chain, len(t.Chains)), sets: make(map[string]*Set, len(t.Sets)), exact: map[string]map[exactKey]Element{}}
	for _, c := range t.Chains {
		x.chains[c.Name] = c
	}
	for _, s := range t.Sets {
		x.sets[s.Name] = s
		if !s.exactProtoPortMap() {
			continue
		}
		idx := make(map[exactKey]Element, s.Len())
		for _, e := range s.All() {
			k := exactKey{e.Addr, e.Proto, e.Port}
			if _, dup := idx[k]; !dup { // in a map Validate did not check, the first wins
				idx[k] = e
			}
		}
		x.exact[s.Name] = idx
	}
	return x
}

// Trace is Trace(t, hookChain, p) for the table the Tracer indexed.
func (x *Tracer) Trace(hookChain string, p Packet) (TraceResult, error) {
	base, ok := x.chains[hookChain]
	if !ok || base.Hook == nil {
		return TraceResult{}, fmt.Errorf("trace: no base chain %q", hookChain)
	}
	tr := &tracer{chains: x.chains, sets: x.sets, exact: x.exact, p: p}
	v, err := tr.run(base, 0)
	if err != nil {
		return TraceResult{}, err
	}
	if v == "" || v == Return {
		v = base.Hook.Policy
	}
	return TraceResult{Verdict: v, Mark: tr.p.Mark, Path: tr.path}, nil
}

// Matches reports whether p matches every match expression of rule i of
// chain, up to the rule's first statement (a mark set, a map, a verdict),
// which is not run. A trace stops at the first rule that decides; this
// answers for any rule, which is how `nftpolicy explain` lists every rule
// that allows a connection, not just the first.
//
// An address . protocol . port map lookup (AddrProtoPortVmap) stands for
// the chain of first-match rules it replaces, so it counts as a match: p
// matches it when the map holds an element for p whose verdict is not
// `continue` (the verdict is not applied; LookupProtoPort tells which);
// a miss is no match. After a `continue` element the rule's next
// expressions decide. An address-keyed map (AddrVmap) is a statement, as
// ever: the rule matches there.
func (x *Tracer) Matches(chain string, i int, p Packet) (bool, error) {
	c, ok := x.chains[chain]
	if !ok || i < 0 || i >= len(c.Rules) {
		return false, fmt.Errorf("trace: no rule %d in chain %q", i, chain)
	}
	tr := &tracer{chains: x.chains, sets: x.sets, exact: x.exact, p: p}
	for _, e := range c.Rules[i].Exprs {
		if m, isMap := e.(AddrProtoPortVmap); isMap {
			el, hit, err := tr.protoPortLookup(m)
			if err != nil {
				return false, fmt.Errorf("trace: chain %s rule %d: %w", chain, i, err)
			}
			if !hit || el.Verdict.Kind != Continue {
				return hit, nil
			}
			continue
		}
		ok, isMatch := tr.match(e)
		if !isMatch {
			return true, nil
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

// LookupProtoPort returns the element the lookup e finds for p in its
// address . protocol . port map, as Trace would find it, and false on a
// miss (a packet of another family included).
func (x *Tracer) LookupProtoPort(e AddrProtoPortVmap, p Packet) (Element, bool, error) {
	tr := &tracer{chains: x.chains, sets: x.sets, exact: x.exact, p: p}
	el, ok, err := tr.protoPortLookup(e)
	if err != nil {
		return Element{}, false, fmt.Errorf("trace: %w", err)
	}
	return el, ok, nil
}
