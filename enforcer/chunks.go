package enforcer

import (
	"slices"

	"github.com/nftpolicy/nftpolicy/nft"
)

// Chunked element lists. A named-port set of the egress direction may hold
// an element for every pod of the cluster serving the name
// (namedports.go): 300k elements, 26 MB, at 150k dual-stack pods. The tables a Compiler returns are
// immutable, so patching such a set for one pod event copied it whole, and
// the garbage made the collector run every few events over a heap of
// hundreds of MB: the p99 of pod events at that size. Kept in chunks
// (nft.Set.Chunks), a patch copies only the chunks it edits and shares the
// others with the previous table.

// chunkSize is how many elements a chunk is made with: a patch of one pod
// copies 45 KB. A chunk patched to twice this is split in two; one patched
// empty is dropped.
const chunkSize = 512

// chunked cuts sorted elements into chunks of chunkSize, each in an array
// of its own, so that a chunk replaced later frees its memory; nil for
// none.
func chunked(elems []nft.Element) [][]nft.Element {
	var out [][]nft.Element
	for len(elems) > 0 {
		n := min(len(elems), chunkSize)
		out = append(out, slices.Clone(elems[:n]))
		elems = elems[n:]
	}
	return out
}

// patchChunks returns new chunks holding the elements of chunks (their
// concatenation sorted by compareElements, without repeats) without
// removed, with added (both sorted and without repeats). Chunks without an
// edit are shared, never modified.
func patchChunks(chunks [][]nft.Element, removed, added []nft.Element) [][]nft.Element {
	if len(chunks) == 0 {
		return chunked(added) // nothing to remove from
	}
	out := make([][]nft.Element, 0, len(chunks)+1)
	for i, chunk := range chunks {
		// The edits falling in this chunk: up to its last element, and
		// for the last chunk every edit left.
		n, m := len(removed), len(added)
		if i < len(chunks)-1 {
			last := chunk[len(chunk)-1]
			var found bool
			if n, found = slices.BinarySearchFunc(removed, last, compareElements); found {
				n++
			}
			if m, found = slices.BinarySearchFunc(added, last, compareElements); found {
				m++
			}
		}
		if n == 0 && m == 0 {
			out = append(out, chunk)
			continue
		}
		next := patchSorted(chunk, removed[:n], added[:m])
		removed, added = removed[n:], added[m:]
		switch {
		case len(next) == 0:
		case len(next) >= 2*chunkSize:
			out = append(out, chunked(next)...)
		default:
			out = append(out, next)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// searchChunks reports whether sorted chunks hold el.
func searchChunks(chunks [][]nft.Element, el nft.Element) bool {
	i, _ := slices.BinarySearchFunc(chunks, el, func(c []nft.Element, el nft.Element) int {
		return compareElements(c[len(c)-1], el)
	})
	if i == len(chunks) {
		return false
	}
	_, found := slices.BinarySearchFunc(chunks[i], el, compareElements)
	return found
}
