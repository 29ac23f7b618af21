package nft

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// Kernel tests of sets held per address (Set.PerAddress): ranges in the
// model, one kernel element per address in a set without intervals.

// TestKernelPerAddressSet: a set held per address is written as one
// element an address into a set without intervals, lists as nft -f of its
// rendering does, reads back without drift, and is patched by address: a
// range that grows or splits sends the addresses that changed, not the
// range again, whether the delta is exact (as the compiler's peer patches
// are) or found by comparing the sets; the text of each delta, loaded by
// nft over the old table, leaves the same.
func TestKernelPerAddressSet(t *testing.T) {
	old := perAddressTable([]string{"10.0.0.1-10.0.0.3", "10.0.0.7"}, []string{"fd00::1-fd00::2"})
	next := perAddressTable([]string{"10.0.0.1", "10.0.0.3-10.0.0.4"}, []string{"fd00::1-fd00::2"})

	listing := testns.AssertSameAsNft(t, old.Name, applyIn(old), Render(old))
	if strings.Contains(listing, "interval") || !strings.Contains(listing, "10.0.0.2") {
		t.Errorf("want one element an address in a set without intervals, nft lists:\n%s", listing)
	}

	ns, c := openTestNS(t)
	st, err := c.Apply(old)
	if err != nil {
		t.Fatal(err)
	}
	if st.ElementsAdded != 6 {
		t.Errorf("%d elements written for 6 addresses", st.ElementsAdded)
	}
	if drift, err := c.Drift(old); err != nil || drift != "" {
		t.Fatalf("as written: drift %q, %v", drift, err)
	}

	exact := &Delta{UpdateSets: []SetUpdate{{Old: old.Sets[0], New: next.Sets[0], Exact: true,
		Removed: rangeElements([]string{"10.0.0.1-10.0.0.3", "10.0.0.7"}),
		Added:   rangeElements([]string{"10.0.0.1", "10.0.0.3-10.0.0.4"})}}}
	for _, step := range []struct {
		name          string
		from, to      *Table
		delta         *Delta
		deleted, adds int
	}{
		// 10.0.0.2 and 10.0.0.7 leave, 10.0.0.4 joins.
		{"exact patch", old, next, exact, 2, 1},
		{"compared back", next, old, Diff(next, old), 1, 2},
		{"compared again", old, next, Diff(old, next), 2, 1},
	} {
		text := RenderDelta(step.delta, step.to)
		st, err := c.WriteDeltaAt(step.delta, step.to, 0)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if st.Full || st.ElementsDeleted != step.deleted || st.ElementsAdded != step.adds {
			t.Errorf("%s: %+v, want %d elements deleted and %d added", step.name, st, step.deleted, step.adds)
		}
		if drift, err := c.Drift(step.to); err != nil || drift != "" {
			t.Errorf("%s: drift %q, %v", step.name, drift, err)
		}
		theirs, n := openTestNS(t)
		if _, err := n.Apply(step.from); err != nil {
			t.Fatal(err)
		}
		testns.Nft(t, theirs, text, "-f", "-")
		if got, want := testns.ListTable(t, theirs, "nftpolicy"), testns.ListTable(t, ns, "nftpolicy"); got != want {
			t.Errorf("%s: nft -f of\n%s\nlists (-written +loaded):\n%s", step.name, text, cmp.Diff(want, got))
		}
	}
}

// TestKernelPerAddressDrift: another process's edit of a set held per
// address is drift, whichever address it takes out or puts in, even one
// inside a range of the model; the table as written, or loaded by nft
// from its text, is none.
func TestKernelPerAddressDrift(t *testing.T) {
	ns, c := openTestNS(t)
	table := perAddressTable([]string{"10.0.0.1-10.0.0.3", "10.0.0.7"}, []string{"fd00::1-fd00::2"})
	for _, step := range []struct {
		name   string
		nft    string
		wanted string // "" no drift, else a part of the description
	}{
		{"as programmed", "", ""},
		{"loaded by nft from the text", "-f -", ""},
		{"an address inside a range taken out", "delete element inet nftpolicy pods { 10.0.0.2 }", "10.0.0.2"},
		{"an address next to a range put in", "add element inet nftpolicy pods { 10.0.0.4 }", "10.0.0.4"},
		{"an IPv6 address taken out", "delete element inet nftpolicy pods6 { fd00::2 }", "fd00::2"},
		{"the set made an interval set", "flush chain inet nftpolicy filter-forward\ndelete set inet nftpolicy pods\n" +
			"add set inet nftpolicy pods { type ipv4_addr; flags interval; comment \"pods\"; elements = { 10.0.0.1-10.0.0.3, 10.0.0.7 } }\n" +
			"add rule inet nftpolicy filter-forward ip saddr @pods accept\nadd rule inet nftpolicy filter-forward ip6 saddr @pods6 accept", "set pods has flags"},
	} {
		checkDriftAfter(t, ns, c, table, step.name, step.nft, step.wanted)
	}
}
