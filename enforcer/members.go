package enforcer

// A memberPatch follows one patch of a set whose members several pods may
// give at once (two pods at one address, briefly): the named-port sets
// (refreshPortSets) and the peer sets (patchPeers). dups, kept with the
// set, counts the givers of a member beyond the first (usually none);
// whether a member is in the set at all, the set's own elements say (in),
// so nothing counts the members given once, which at 150k pods were maps
// of 100k to 300k entries. The pods' changes are taken one by one, and a
// member can leave with one pod and come back with another, which is no
// change: gone and came are what the patch removes and adds.
type memberPatch[K comparable] struct {
	dups       map[K]int32
	in         func(K) bool // a member before the patch
	gone, came map[K]bool
}

func newMemberPatch[K comparable](dups map[K]int32, in func(K) bool) *memberPatch[K] {
	return &memberPatch[K]{dups: dups, in: in, gone: map[K]bool{}, came: map[K]bool{}}
}

// leave notes that one giver of k, a member, stops giving it.
func (p *memberPatch[K]) leave(k K) {
	switch {
	case p.dups[k] > 0:
		if p.dups[k]--; p.dups[k] == 0 {
			delete(p.dups, k)
		}
	case p.came[k]:
		delete(p.came, k)
	default:
		p.gone[k] = true
	}
}

// join notes one more giver of k.
func (p *memberPatch[K]) join(k K) {
	switch {
	case p.came[k] || !p.gone[k] && p.in(k):
		p.dups[k]++
	case p.gone[k]:
		delete(p.gone, k)
	default:
		p.came[k] = true
	}
}
