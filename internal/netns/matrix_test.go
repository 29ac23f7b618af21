package netns

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var xyz = []string{"x/a", "x/b", "y/a", "y/b"}

func TestMatrixExpect(t *testing.T) {
	m := NewMatrix(xyz, true).Expect("*", "y/*", false).Expect("y/*", "y/*", true).Expect("*/b", "x/a", false)
	want := map[[2]string]bool{
		{"x/a", "y/a"}: false, {"x/a", "y/b"}: false,
		{"x/b", "y/a"}: false, {"x/b", "y/b"}: false,
		{"x/b", "x/a"}: false, {"y/b", "x/a"}: false,
	}
	for _, from := range xyz {
		for _, to := range xyz {
			w, ok := want[[2]string{from, to}]
			if !ok {
				w = true
			}
			if got := m.Get(from, to); got != w {
				t.Errorf("Get(%s, %s) = %v, want %v", from, to, got, w)
			}
		}
	}
	if a, b := m.Count(); a != 10 || b != 6 {
		t.Errorf("Count() = %d, %d; want 10, 6", a, b)
	}
}

func TestMatrixExpectPanicsOnNoMatch(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Expect with a pattern that matches nothing did not panic")
		}
	}()
	NewMatrix(xyz, true).Expect("z/*", "*", false)
}

func TestMatrixString(t *testing.T) {
	m := NewMatrix(xyz, true).Expect("x/b", "*", false)
	got := m.String()
	wantLines := []string{
		"12 allowed, 4 blocked  (. allowed, X blocked)",
		"from\\to x/a x/b y/a y/b",
		"x/a     .   .   .   .",
		"x/b     X   X   X   X",
		"y/a     .   .   .   .",
		"y/b     .   .   .   .",
	}
	if diff := cmp.Diff(strings.Join(wantLines, "\n")+"\n", got); diff != "" {
		t.Errorf("String() (-want +got):\n%s", diff)
	}
}

func TestMatrixDiff(t *testing.T) {
	want := NewMatrix(xyz, true)
	got := want.Clone()
	got.Family, got.Proto, got.Port = IPv4, TCP, 80
	if d := got.Diff(want); d != "" || !got.Equal(want) {
		t.Fatalf("equal matrices differ:\n%s", d)
	}
	got.Set("y/a", "x/b", false)
	got.Set("x/a", "x/a", false)
	if got.Equal(want) {
		t.Fatal("Equal after Set")
	}
	d := got.Diff(want)
	for _, line := range []string{
		"reachability tcp/80 ipv4: 2 of 16 cells differ",
		"expected:",
		"observed:",
		"differences (X differs):",
		"x/a     X   .   .   .",
		"y/a     .   X   .   .",
		"x/a -> x/a: expected allowed, observed blocked",
		"y/a -> x/b: expected allowed, observed blocked",
	} {
		if !strings.Contains(d, line+"\n") {
			t.Errorf("Diff lacks line %q:\n%s", line, d)
		}
	}
	if want.Get("y/a", "x/b") != true {
		t.Error("Clone shares cells with its original")
	}
	other := NewMatrix([]string{"x/a"}, true)
	if d := other.Diff(want); !strings.Contains(d, "pods differ") {
		t.Errorf("Diff of different pods = %q", d)
	}
}
