package nft

import (
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"
)

// perAddressTable is a table whose sets pods (IPv4) and pods6 hold the
// given ranges ("a" or "a-b") per address, looked up by source address.
func perAddressTable(v4, v6 []string) *Table {
	set := func(name string, key KeyType, ranges []string) *Set {
		s := &Set{Name: name, Comment: "pods", Key: key, PerAddress: true}
		s.Elements = rangeElements(ranges)
		return s
	}
	return &Table{Family: FamilyInet, Name: "nftpolicy", Sets: []*Set{set("pods", KeyIPv4, v4), set("pods6", KeyIPv6, v6)}, Chains: []*Chain{
		{Name: "filter-forward", Hook: &Hook{Type: "filter", Hook: "forward", Policy: Accept}, Rules: []Rule{
			{Exprs: []Expr{AddrInSet{Family: IPv4, Field: Saddr, Set: "pods"}, Verdict{Kind: Accept}}},
			{Exprs: []Expr{AddrInSet{Family: IPv6, Field: Saddr, Set: "pods6"}, Verdict{Kind: Accept}}},
		}},
	}}
}

func rangeElements(ranges []string) []Element {
	var out []Element
	for _, r := range ranges {
		first, last, isRange := strings.Cut(r, "-")
		e := Element{Addr: netip.MustParseAddr(first)}
		if isRange {
			e.Last = netip.MustParseAddr(last)
		}
		out = append(out, e)
	}
	return out
}

// TestValidatePerAddress: a set held per address is a plain address set
// of sorted ranges that do not overlap, as an interval set's.
func TestValidatePerAddress(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  Set
		want string // "" valid, else a part of the error
	}{
		{"ranges", Set{Key: KeyIPv4, PerAddress: true, Elements: rangeElements([]string{"10.0.0.1-10.0.0.3", "10.0.0.5"})}, ""},
		{"with intervals", Set{Key: KeyIPv4, PerAddress: true, Interval: true}, "without intervals"},
		{"a map", Set{Key: KeyIPv4, PerAddress: true, Verdict: true}, "without intervals or verdicts"},
		{"concatenated", Set{Key: KeyIPv4ProtoPort, PerAddress: true}, "without intervals or verdicts"},
		{"overlapping", Set{Key: KeyIPv4, PerAddress: true, Elements: rangeElements([]string{"10.0.0.1-10.0.0.3", "10.0.0.3"})}, "overlaps"},
		{"unsorted", Set{Key: KeyIPv4, PerAddress: true, Elements: rangeElements([]string{"10.0.0.5", "10.0.0.1"})}, "overlaps or precedes"},
		{"other family", Set{Key: KeyIPv6, PerAddress: true, Elements: rangeElements([]string{"10.0.0.1"})}, "is not"},
	} {
		err := tc.set.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one with %q", tc.name, err, tc.want)
		}
	}
}

// TestAddressDiff: what a set held per address loses and gains, by address.
func TestAddressDiff(t *testing.T) {
	gone := rangeElements([]string{"10.0.0.1-10.0.0.3", "10.0.0.7"})
	came := rangeElements([]string{"10.0.0.1", "10.0.0.3-10.0.0.4"})
	if got := joinRanges(AddressDiff(gone, came)); got != "10.0.0.2, 10.0.0.7" {
		t.Errorf("deleted %s, want 10.0.0.2, 10.0.0.7", got)
	}
	if got := joinRanges(AddressDiff(came, gone)); got != "10.0.0.4" {
		t.Errorf("added %s, want 10.0.0.4", got)
	}
}

func joinRanges(elems []Element) string {
	var out []string
	for _, e := range elems {
		out = append(out, renderAddrRange(e))
	}
	return strings.Join(out, ", ")
}

// TestAddressesAtTheEdges: a range's addresses, at both ends of both
// families' spaces, each once.
func TestAddressesAtTheEdges(t *testing.T) {
	for _, tc := range []struct {
		r    string
		want int
	}{
		{"0.0.0.0-0.0.0.2", 3},
		{"255.255.255.254-255.255.255.255", 2},
		{"255.255.255.255", 1},
		{"::-::1", 2},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 2},
	} {
		n := 0
		for range Addresses(rangeElements([]string{tc.r})[0]) {
			n++
		}
		if n != tc.want {
			t.Errorf("%s: %d addresses, want %d", tc.r, n, tc.want)
		}
	}
}

// TestFakePerAddressSet: the Fake holds a set held per address as the
// kernel does (TestKernelPerAddressSet, the same steps): it deletes and
// adds addresses, counts them so, and refuses to delete one it does not
// hold, changing nothing.
func TestFakePerAddressSet(t *testing.T) {
	old := perAddressTable([]string{"10.0.0.1-10.0.0.3", "10.0.0.7"}, []string{"fd00::1-fd00::2"})
	next := perAddressTable([]string{"10.0.0.1", "10.0.0.3-10.0.0.4"}, []string{"fd00::1-fd00::2"})
	f := NewFake()
	st, err := f.ApplyAt(old, 0)
	if err != nil || st.ElementsAdded != 6 {
		t.Fatalf("apply: %+v, %v; want 6 elements for 6 addresses", st, err)
	}
	exact := &Delta{UpdateSets: []SetUpdate{{Old: old.Sets[0], New: next.Sets[0], Exact: true,
		Removed: rangeElements([]string{"10.0.0.1-10.0.0.3", "10.0.0.7"}),
		Added:   rangeElements([]string{"10.0.0.1", "10.0.0.3-10.0.0.4"})}}}
	for _, step := range []struct {
		name          string
		to            *Table
		delta         *Delta
		deleted, adds int
	}{
		{"exact patch", next, exact, 2, 1},
		{"compared back", old, Diff(next, old), 1, 2},
		{"compared again", next, Diff(old, next), 2, 1},
	} {
		st, err := f.WriteDeltaAt(step.delta, step.to, 0)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if st.ElementsDeleted != step.deleted || st.ElementsAdded != step.adds {
			t.Errorf("%s: %+v, want %d elements deleted and %d added", step.name, st, step.deleted, step.adds)
		}
		if d, err := f.Drift(step.to); err != nil || d != "" {
			t.Errorf("%s: drift %q, %v", step.name, d, err)
		}
	}
	before := f.Dump()
	missing := &Delta{UpdateSets: []SetUpdate{{Old: next.Sets[0], New: next.Sets[0], Exact: true,
		Removed: []Element{{Addr: netip.MustParseAddr("10.0.0.2")}}}}}
	if _, err := f.WriteDeltaAt(missing, next, 0); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("deleting an address the set does not hold: %v, want ENOENT", err)
	}
	if f.Dump() != before {
		t.Error("a refused batch changed the table")
	}
}
