package nft

import (
	"strings"
	"testing"
)

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
	if got := joinRanges(addressDiff(gone, came)); got != "10.0.0.2, 10.0.0.7" {
		t.Errorf("deleted %s, want 10.0.0.2, 10.0.0.7", got)
	}
	if got := joinRanges(addressDiff(came, gone)); got != "10.0.0.4" {
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
		for range addresses(rangeElements([]string{tc.r})[0]) {
			n++
		}
		if n != tc.want {
			t.Errorf("%s: %d addresses, want %d", tc.r, n, tc.want)
		}
	}
}
