package enforcer

import (
	"fmt"
	"maps"
)

// A peerIndex finds the peer lists a change may touch without visiting
// every list. At 10k policies the compiler holds thousands of lists, and
// asking each whether a pod event touched it (peersTouched) cost 2-3 ms
// of every event, most of it cache misses on lists the event could not
// touch. The index narrows the lists to ask; peersTouched still decides,
// so what is recomputed or patched is what walking every list found.
//
// A selector peer names the pods of its policy's own namespace (no
// namespace selector) or of the namespaces its namespace selector
// selects. So the lists a change to the pods of namespace ns may touch
// are those with an own-namespace selector of ns, and those with a
// namespace selector that selects ns (read as it is now: a namespace
// whose view changed makes its selectors' lists candidates anyway). The
// namespace selectors are few (lists share them: "team=payments" in a
// hundred policies), so each is asked once per changed namespace.
type peerIndex struct {
	ownNS     map[string]map[*peerSets]bool // lists with an own-namespace selector, by that namespace
	selectors map[string]*nsSelectorLists   // namespace selectors, by nsSelectorKey
	nodes     map[*peerSets]bool            // lists that name nodes
	unions    map[string]map[*peerSets]bool // unions, by the key of each of their parts
}

// nsSelectorLists are the lists that hold one namespace selector.
type nsSelectorLists struct {
	sel   peerSelector // its namespaces (its pods are the first list's, and not read)
	lists map[*peerSets]bool
}

// nsSelectorKey identifies what a namespace selector selects: its
// requirements as labels.Selector writes them, its type (an empty
// selector that matches nothing writes as one that matches everything),
// and whether it names the namespaces it may (mayBe). Two selectors with
// one key select alike: a selector that parsed (LabelSelectorAsSelector)
// has keys and values of label syntax, which cannot hold the commas,
// parentheses and operators that String writes between them, so the
// text is the requirements, one way. Were two lists to share a key
// wrongly, the second's changes would be judged by the first's selector.
func nsSelectorKey(s peerSelector) string {
	return fmt.Sprintf("%T|%v|%s", s.namespaces, s.mayBe, s.namespaces.String())
}

func (x *peerIndex) add(e *peerSets) {
	if e.parts != nil {
		for _, k := range e.parts {
			addTo(&x.unions, k, e)
		}
		return
	}
	if e.parsed == nil {
		return
	}
	if len(e.parsed.nodes) > 0 {
		if x.nodes == nil {
			x.nodes = map[*peerSets]bool{}
		}
		x.nodes[e] = true
	}
	for _, s := range e.parsed.selectors {
		if s.namespaces == nil {
			addTo(&x.ownNS, e.parsed.policyNS, e)
			continue
		}
		if x.selectors == nil {
			x.selectors = map[string]*nsSelectorLists{}
		}
		k := nsSelectorKey(s)
		use, ok := x.selectors[k]
		if !ok {
			use = &nsSelectorLists{sel: s, lists: map[*peerSets]bool{}}
			x.selectors[k] = use
		}
		use.lists[e] = true
	}
}

func (x *peerIndex) remove(e *peerSets) {
	if e.parts != nil {
		for _, k := range e.parts {
			removeFrom(x.unions, k, e)
		}
		return
	}
	if e.parsed == nil {
		return
	}
	delete(x.nodes, e)
	for _, s := range e.parsed.selectors {
		if s.namespaces == nil {
			removeFrom(x.ownNS, e.parsed.policyNS, e)
			continue
		}
		k := nsSelectorKey(s)
		if use, ok := x.selectors[k]; ok {
			delete(use.lists, e)
			if len(use.lists) == 0 {
				delete(x.selectors, k)
			}
		}
	}
}

func addTo[V comparable](m *map[string]map[V]bool, k string, e V) {
	if *m == nil {
		*m = map[string]map[V]bool{}
	}
	if (*m)[k] == nil {
		(*m)[k] = map[V]bool{}
	}
	(*m)[k][e] = true
}

func removeFrom[V comparable](m map[string]map[V]bool, k string, e V) {
	delete(m[k], e)
	if len(m[k]) == 0 {
		delete(m, k)
	}
}

// peerCandidates are the lists (not unions) ch may touch: a superset of those
// peersTouched finds among all lists.
func (c *Compiler) peerCandidates(ch *changes) map[*peerSets]bool {
	x := &c.peerIdx
	out := map[*peerSets]bool{}
	if ch.nodes {
		maps.Copy(out, x.nodes)
	}
	for ns := range ch.pods {
		maps.Copy(out, x.ownNS[ns])
	}
	for _, use := range x.selectors {
		if selectsAny(use.sel, ch, c.namespaceView) {
			maps.Copy(out, use.lists)
		}
	}
	return out
}

// selectsAny reports whether s may name pods ch changed: it selects a
// namespace whose pods changed (as the namespace is now), or a changed
// namespace before or after its change.
func selectsAny(s peerSelector, ch *changes, view func(string) nsView) bool {
	for _, nc := range ch.namespaces {
		if nc.old.selects(s, nc.name) || nc.new.selects(s, nc.name) {
			return true
		}
	}
	for ns := range ch.pods {
		if view(ns).selects(s, ns) {
			return true
		}
	}
	return false
}
