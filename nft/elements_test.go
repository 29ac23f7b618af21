package nft

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// TestChunkedElements: Len, All, List and the delta see a set's elements
// whether they are in Elements or in Chunks, cut anywhere; Validate checks
// across chunk edges and refuses a set with both.
func TestChunkedElements(t *testing.T) {
	var elems []Element
	a := netip.MustParseAddr("10.0.0.0")
	for range 40 {
		a = a.Next()
		elems = append(elems, Element{Addr: a, Proto: ProtoTCP, Port: 80})
	}
	flat := &Set{Name: "np-v4", Key: KeyIPv4ProtoPort, Elements: elems}
	for _, sizes := range [][]int{{1}, {7, 3}, {39}, {40}, {100}} {
		s := &Set{Name: "np-v4", Key: KeyIPv4ProtoPort, Chunks: chunksOf(elems, sizes...)}
		if s.Len() != 40 || !slices.Equal(s.List(), elems) {
			t.Fatalf("chunks of %v: Len %d, List %v", sizes, s.Len(), s.List())
		}
		i := 0
		for j, e := range s.All() {
			if j != i || e != elems[i] {
				t.Fatalf("chunks of %v: All yields %d %v at %d", sizes, j, e, i)
			}
			i++
		}
		if !sameElements(flat, s) || !sameElements(s, flat) {
			t.Errorf("chunks of %v: not the same elements as the flat set", sizes)
		}
		if err := s.Validate(); err != nil {
			t.Errorf("chunks of %v: %v", sizes, err)
		}
		// One element changed in the last chunk, same boundaries.
		other := &Set{Name: "np-v4", Key: KeyIPv4ProtoPort, Chunks: chunksOf(elems, sizes...)}
		last := other.Chunks[len(other.Chunks)-1]
		last[len(last)-1].Port = 81
		if sameElements(s, other) {
			t.Errorf("chunks of %v: an element changed, and the sets compare the same", sizes)
		}
		d := Diff(&Table{Sets: []*Set{s}}, &Table{Sets: []*Set{other}})
		if len(d.UpdateSets) != 1 {
			t.Errorf("chunks of %v: Diff = %+v, want one update", sizes, d)
		}
		// A key in two chunks is refused, wherever the edge is.
		dup := &Set{Name: "np-v4", Key: KeyIPv4ProtoPort, Chunks: append(chunksOf(elems, sizes...), []Element{elems[0]})}
		if err := dup.Validate(); err == nil || !strings.Contains(err.Error(), "element 40 repeats the key of element 0") {
			t.Errorf("chunks of %v with a key twice: Validate = %v", sizes, err)
		}
	}
	if sameElements(flat, &Set{Chunks: chunksOf(elems[:39], 10)}) {
		t.Error("a set one element short compares the same")
	}
	both := &Set{Name: "np-v4", Key: KeyIPv4ProtoPort, Elements: elems[:1], Chunks: chunksOf(elems[1:], 5)}
	if err := both.Validate(); err == nil {
		t.Error("Validate took a set with both Elements and Chunks")
	}
	empty := &Set{Name: "np-v4", Key: KeyIPv4ProtoPort, Chunks: [][]Element{}}
	if empty.Len() != 0 || len(empty.List()) != 0 || !sameElements(empty, &Set{}) {
		t.Error("a set of no chunks is not empty")
	}
}

// chunksOf cuts elems into chunks of the sizes given in turn, the last
// size repeating: boundaries that line up with no message.
func chunksOf(elems []Element, sizes ...int) [][]Element {
	var out [][]Element
	for i := 0; len(elems) > 0; i++ {
		n := min(len(elems), sizes[min(i, len(sizes)-1)])
		out = append(out, slices.Clone(elems[:n]))
		elems = elems[n:]
	}
	return out
}
