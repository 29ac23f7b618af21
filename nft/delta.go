package nft

import (
	"reflect"
	"slices"
)

// A Delta is what changes between two versions of a table: the chains and
// sets to add, delete or rewrite. Set elements are diffed when the delta is
// applied, on their encoded form.
type Delta struct {
	// Full reports a change that an in-place update cannot express (a base
	// chain's hook or priority, a set's type or flags): the table must be
	// replaced as a whole. The other fields are empty then.
	Full   bool
	Reason string

	AddChains     []*Chain // new chains, with their rules
	RewriteChains []*Chain // existing chains whose rules changed: flushed and refilled
	DeleteChains  []string
	AddSets       []*Set // new sets, with their elements
	UpdateSets    []SetUpdate
	DeleteSets    []string
}

// A SetUpdate pairs the programmed and the desired version of a set whose
// elements differ. When Exact is set, Added and Removed are exactly the
// elements New has and Old has not, and the reverse, and the applier writes
// them without comparing the two sets; otherwise it compares them.
type SetUpdate struct {
	Old, New       *Set
	Exact          bool
	Added, Removed []Element
}

// Empty reports whether the delta changes nothing.
func (d *Delta) Empty() bool {
	return !d.Full && len(d.AddChains)+len(d.RewriteChains)+len(d.DeleteChains)+
		len(d.AddSets)+len(d.UpdateSets)+len(d.DeleteSets) == 0
}

// Diff computes the delta from old, the table as last programmed, to new. A
// nil old means nothing is programmed: the delta is Full.
func Diff(old, new *Table) *Delta {
	if old == nil {
		return &Delta{Full: true, Reason: "nothing programmed yet"}
	}
	if old.Family != new.Family || old.Name != new.Name {
		return &Delta{Full: true, Reason: "another table"}
	}
	d := &Delta{}
	pairByName(old.Chains, new.Chains, func(c *Chain) string { return c.Name }, d.RecordChain)
	pairByName(old.Sets, new.Sets, func(s *Set) string { return s.Name }, d.RecordSet)
	return d
}

// pairByName calls record with each object of new and its namesake in old
// (the zero value if none), in new's order, then with each object only old
// has and the zero value.
func pairByName[T any](old, new []T, name func(T) string, record func(old, new T)) {
	before := make(map[string]T, len(old))
	for _, o := range old {
		before[name(o)] = o
	}
	kept := make(map[string]bool, len(new))
	for _, n := range new {
		kept[name(n)] = true
		record(before[name(n)], n)
	}
	var none T
	for _, o := range old {
		if !kept[name(o)] {
			record(o, none)
		}
	}
}

// RecordChain records in d how one chain changes from old to new (nil:
// absent on that side). Tables from one enforcer.Compiler share what did
// not change, so the same pointer is no change. A change of hook or
// priority cannot be made in place: d becomes Full.
func (d *Delta) RecordChain(old, new *Chain) {
	switch {
	case d.Full || old == new:
	case old == nil:
		d.AddChains = append(d.AddChains, new)
	case new == nil:
		d.DeleteChains = append(d.DeleteChains, old.Name)
	case !reflect.DeepEqual(old.Hook, new.Hook):
		*d = Delta{Full: true, Reason: "base chain " + new.Name + " changed its hook or priority"}
	case !slices.EqualFunc(old.Rules, new.Rules, Rule.Equal):
		d.RewriteChains = append(d.RewriteChains, new)
	}
}

// RecordSet records in d how one set changes from old to new (nil: absent
// on that side), as RecordChain does for chains. A change of type, flags
// or comment cannot be made in place: d becomes Full.
func (d *Delta) RecordSet(old, new *Set) {
	switch {
	case d.Full || old == new:
	case old == nil:
		d.AddSets = append(d.AddSets, new)
	case new == nil:
		d.DeleteSets = append(d.DeleteSets, old.Name)
	case old.Key != new.Key || old.Interval != new.Interval || old.PerAddress != new.PerAddress || old.Verdict != new.Verdict || old.Comment != new.Comment:
		*d = Delta{Full: true, Reason: "set " + new.Name + " changed its type, flags or comment"}
	case !sameElements(old, new):
		d.UpdateSets = append(d.UpdateSets, SetUpdate{Old: old, New: new})
	}
}

// changes returns the elements the update removes and adds: Removed and
// Added when they are exact, otherwise what comparing Old with New finds.
func (u SetUpdate) changes() (gone, came []Element) {
	if u.Exact {
		return u.Removed, u.Added
	}
	return diffElements(u.Old, u.New)
}

// kernelChanges returns changes() as the kernel's elements change: for a
// set held per address (PerAddress), by address, so that a range grown by
// one address adds that address, not the range again. What it deletes
// the kernel holds, and what it adds it does not.
func (u SetUpdate) kernelChanges() (gone, came []Element) {
	gone, came = u.changes()
	if u.Old.PerAddress && u.New.PerAddress {
		return AddressDiff(gone, came), AddressDiff(came, gone)
	}
	return gone, came
}

// diffElements returns the elements old has and new has not, and the
// reverse. It compares model elements, each single value spelled one way
// (see Element.normalize): its cost follows the size of the sets, but it
// never encodes what stays. An element of an address . protocol . port
// map whose range or verdict changes is one element gone and one come:
// the writer deletes before it adds, so the kernel never sees the two
// overlap.
func diffElements(old, new *Set) (gone, came []Element) {
	had := make(map[Element]bool, old.Len())
	for _, e := range old.All() {
		had[e.normalize()] = true
	}
	has := make(map[Element]bool, new.Len())
	for _, e := range new.All() {
		has[e.normalize()] = true
	}
	for _, e := range old.All() {
		if !has[e.normalize()] {
			gone = append(gone, e)
		}
	}
	for _, e := range new.All() {
		if !had[e.normalize()] {
			came = append(came, e)
		}
	}
	return gone, came
}
