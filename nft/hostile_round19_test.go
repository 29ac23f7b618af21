package nft

// Hostile round 19: Set.Validate after its duplicate-key map became
// exact-sets-only. Duplicates must still be refused in every exact set,
// overlaps and disorder in every ranged one, for every key type, whether
// the elements are in Elements or in Chunks; valid sets must pass.

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// r19Chunked returns s with its elements cut into chunks of n (Elements
// emptied), as large patched sets are held.
func r19Chunked(s Set, n int) Set {
	var chunks [][]Element
	for e := range slices.Chunk(s.Elements, n) {
		chunks = append(chunks, slices.Clone(e))
	}
	s.Elements, s.Chunks = nil, chunks
	return s
}

func r19Addr(fam IPFamily, i int) netip.Addr {
	if fam == IPv4 {
		return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	}
	var b [16]byte
	b[0], b[1] = 0xfd, 0
	b[13], b[14], b[15] = byte(i>>16), byte(i>>8), byte(i)
	return netip.AddrFrom16(b)
}

// r19Shapes are the set shapes Validate checks; ranged ones hold
// address ranges in order, exact ones single keys.
type r19Shape struct {
	name                               string
	key                                KeyType
	interval, perAddress, verdict, ppm bool
}

func r19AllShapes() []r19Shape {
	var out []r19Shape
	for _, k := range []KeyType{KeyIPv4, KeyIPv6} {
		out = append(out,
			r19Shape{name: "set", key: k},
			r19Shape{name: "map", key: k, verdict: true},
			r19Shape{name: "interval set", key: k, interval: true},
			r19Shape{name: "interval map", key: k, interval: true, verdict: true},
			r19Shape{name: "per-address set", key: k, perAddress: true})
	}
	for _, k := range []KeyType{KeyIPv4ProtoPort, KeyIPv6ProtoPort} {
		out = append(out,
			r19Shape{name: "concat set", key: k},
			r19Shape{name: "concat map", key: k, verdict: true},
			r19Shape{name: "concat interval map", key: k, interval: true, verdict: true, ppm: true})
	}
	return out
}

func (sh r19Shape) set(elems []Element) Set {
	s := Set{Name: "s", Key: sh.key, Interval: sh.interval, PerAddress: sh.perAddress, Verdict: sh.verdict, Elements: elems}
	if sh.verdict {
		for i := range s.Elements {
			s.Elements[i].Verdict = Verdict{Kind: Jump, Chain: "c"}
		}
	}
	return s
}

// element i of a valid set of this shape: distinct keys, ranged ones in
// order and apart.
func (sh r19Shape) elem(i int) Element {
	fam := sh.key.Family()
	e := Element{Addr: r19Addr(fam, 4*i+1)}
	if sh.interval || sh.perAddress {
		if i%2 == 0 {
			e.Last = r19Addr(fam, 4*i+2)
		}
	}
	if sh.key.Concat() {
		e.Proto, e.Port = ProtoTCP, uint16(80+i%3)
	}
	return e
}

func r19Check(t *testing.T, what string, s Set, wantErr bool) {
	t.Helper()
	for _, form := range []struct {
		name string
		set  Set
	}{{"elements", s}, {"chunks of 1", r19Chunked(s, 1)}, {"chunks of 3", r19Chunked(s, 3)}} {
		err := form.set.Validate()
		if wantErr && err == nil {
			t.Errorf("%s (%s): accepted, want refused", what, form.name)
		}
		if !wantErr && err != nil {
			t.Errorf("%s (%s): %v, want valid", what, form.name, err)
		}
	}
}

// TestHostileRound19ValidateEveryShape: for every key type and shape, a
// valid set of 1 to 40 elements passes; the same with one key repeated
// (adjacent, or far from its twin) is refused; in a ranged set, an
// element overlapping, touching or preceding its neighbour is refused;
// each in Elements and in chunks.
func TestHostileRound19ValidateEveryShape(t *testing.T) {
	r := rand.New(rand.NewPCG(rand.Uint64(), 19))
	for _, sh := range r19AllShapes() {
		what := fmt.Sprintf("%s %d", sh.name, sh.key)
		for _, n := range []int{1, 2, 3, 7, 40} {
			valid := make([]Element, n)
			for i := range valid {
				valid[i] = sh.elem(i)
			}
			r19Check(t, fmt.Sprintf("%s: %d valid elements", what, n), sh.set(slices.Clone(valid)), false)
			if n < 2 {
				continue
			}
			// A repeat of element j at position i (ranged sets: in order).
			for range 5 {
				j := r.IntN(n)
				elems := slices.Insert(slices.Clone(valid), j+1, valid[j])
				r19Check(t, fmt.Sprintf("%s: element %d of %d twice, adjacent", what, j, n), sh.set(elems), true)
				if !sh.interval && !sh.perAddress {
					// Exact sets have no order: the twin anywhere.
					i := r.IntN(n + 1)
					elems := slices.Insert(slices.Clone(valid), i, valid[j])
					r19Check(t, fmt.Sprintf("%s: element %d of %d again at %d", what, j, n, i), sh.set(elems), true)
				}
			}
			if sh.ppm {
				// Any order is fine, but overlapping is not.
				shuffled := slices.Clone(valid)
				r.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
				r19Check(t, what+": shuffled", sh.set(shuffled), false)
				j := r.IntN(n)
				over := valid[j]
				over.Port, over.PortLast = 0, 0xffff // covers element j whole
				elems := append(slices.Clone(shuffled), over)
				r.Shuffle(len(elems), func(a, b int) { elems[a], elems[b] = elems[b], elems[a] })
				r19Check(t, fmt.Sprintf("%s: an element covering %d", what, j), sh.set(elems), true)
				continue
			}
			if sh.interval || sh.perAddress {
				fam := sh.key.Family()
				j := r.IntN(n - 1)
				// Swapped neighbours: out of order.
				elems := slices.Clone(valid)
				elems[j], elems[j+1] = elems[j+1], elems[j]
				r19Check(t, fmt.Sprintf("%s: elements %d and %d swapped", what, j, j+1), sh.set(elems), true)
				// Element j stretched to touch j+1's first address.
				elems = slices.Clone(valid)
				elems[j].Last = elems[j+1].Addr
				r19Check(t, fmt.Sprintf("%s: element %d reaching %d", what, j, j+1), sh.set(elems), true)
				// ... or to cover it whole.
				elems = slices.Clone(valid)
				elems[j].Last = r19Addr(fam, 4*(j+1)+3)
				r19Check(t, fmt.Sprintf("%s: element %d covering %d", what, j, j+1), sh.set(elems), true)
				// ... but stopping just before it is fine.
				elems = slices.Clone(valid)
				elems[j].Last = elems[j+1].Addr.Prev()
				r19Check(t, fmt.Sprintf("%s: element %d up to just before %d", what, j, j+1), sh.set(elems), false)
			} else if sh.key.Concat() {
				// Same address, other protocol or port: distinct keys.
				elems := slices.Clone(valid)
				e := valid[0]
				e.Proto = ProtoUDP
				elems = append(elems, e)
				e.Proto, e.Port = ProtoTCP, 9999
				elems = append(elems, e)
				r19Check(t, what+": same address, other protocol or port", sh.set(elems), false)
			} else {
				// A plain address key: proto and port are not part of it.
				elems := slices.Clone(valid)
				e := valid[0]
				e.Proto, e.Port = ProtoUDP, 53
				elems = append(elems, e)
				r19Check(t, what+": an address twice, with proto and port set on one", sh.set(elems), true)
			}
		}
	}
}

// TestHostileRound19ValidateManyDuplicates: a large exact set with one
// duplicate far apart (first and last), and a large ranged set with one
// pair out of order deep inside, across chunk boundaries.
func TestHostileRound19ValidateManyDuplicates(t *testing.T) {
	for _, sh := range r19AllShapes() {
		const n = 5000
		elems := make([]Element, n)
		for i := range elems {
			elems[i] = sh.elem(i)
		}
		r19CheckChunks := func(what string, s Set, wantErr bool) {
			t.Helper()
			for _, c := range []int{0, 64, 4999} {
				f := s
				if c > 0 {
					f = r19Chunked(s, c)
				}
				if err := f.Validate(); (err != nil) != wantErr {
					t.Errorf("%s %d %s (chunks of %d): err %v, want error %v", sh.name, sh.key, what, c, err, wantErr)
				}
			}
		}
		r19CheckChunks("valid", sh.set(slices.Clone(elems)), false)
		switch {
		case sh.ppm:
			e := slices.Clone(elems)
			e = append(e, elems[0])
			r19CheckChunks("first element again at the end", sh.set(e), true)
		case sh.interval || sh.perAddress:
			e := slices.Clone(elems)
			e[2500], e[2501] = e[2501], e[2500]
			r19CheckChunks("two swapped in the middle", sh.set(e), true)
			e = slices.Clone(elems)
			e[n-1] = e[0]
			e[n-1].Last = netip.Addr{}
			r19CheckChunks("the last being the first address", sh.set(e), true)
		default:
			e := slices.Clone(elems)
			e = append(e, elems[0])
			r19CheckChunks("first element again at the end", sh.set(e), true)
		}
	}
}

// TestHostileRound19ValidateZonedDuplicate: the kernel's key of an IPv6
// address is its 16 bytes (a zone is no part of it), so fd00::1%a and
// fd00::1 in one exact set are one key twice (EEXIST), which Validate
// promises to refuse before anything is sent. A zoned address is no
// ip6 key at all, either. Ranged sets refuse it (netipx refuses a zoned
// range); exact ones must too.
func TestHostileRound19ValidateZonedDuplicate(t *testing.T) {
	z := netip.MustParseAddr("fd00::1%eth0")
	plain := netip.MustParseAddr("fd00::1")
	for _, sh := range r19AllShapes() {
		if sh.key.Family() != IPv6 {
			continue
		}
		e1, e2 := Element{Addr: plain}, Element{Addr: z}
		if sh.key.Concat() {
			e1.Proto, e1.Port, e2.Proto, e2.Port = ProtoTCP, 80, ProtoTCP, 80
		}
		s := sh.set([]Element{e1, e2})
		if err := s.Validate(); err == nil {
			t.Errorf("%s %d: fd00::1 and fd00::1%%eth0 accepted: one kernel key twice, and a zone is no ip6 key", sh.name, sh.key)
		}
	}
}
