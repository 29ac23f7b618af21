package k8s

import (
	"strings"
	"testing"
)

func TestShorten(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"abcdefghijkl", 10, "abcdefghij…[2 more bytes]"},
		{"ab" + "é" + "cd", 3, "ab…[4 more bytes]"}, // never cut inside é
		{strings.Repeat("n", 20000), maxLogName, strings.Repeat("n", maxLogName) + "…[19744 more bytes]"},
	} {
		if got := Shorten(tc.in, tc.max); got != tc.want {
			t.Errorf("Shorten(%.20q, %d) = %.300q, want %.300q", tc.in, tc.max, got, tc.want)
		}
	}
}
