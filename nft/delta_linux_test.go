package nft

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// TestKernelRenderDeltaIsWhatIsSent: the text form of a delta, loaded
// with nft over the old table, leaves what writing the delta leaves, and
// the table the delta leads to (Drift finds nothing).
func TestKernelRenderDeltaIsWhatIsSent(t *testing.T) {
	for _, tc := range []struct {
		name     string
		old, new *Table
	}{
		{"change", sampleTable(), changedSample()},
		{"change back", changedSample(), sampleTable()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Diff(tc.old, tc.new)
			if d.Full || d.Empty() {
				t.Fatalf("the delta is full or empty: %+v", d)
			}
			ours, c := openTestNS(t)
			theirs, n := openTestNS(t)
			for _, c := range []*Conn{c, n} {
				if _, err := c.Apply(tc.old); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := c.WriteDeltaAt(d, tc.new, 0); err != nil {
				t.Fatal(err)
			}
			text := RenderDelta(d, tc.new)
			testns.Nft(t, theirs, text, "-f", "-")
			want, got := testns.ListTable(t, ours, tc.new.Name), testns.ListTable(t, theirs, tc.new.Name)
			if want != got {
				t.Errorf("nft -f of\n%s\nlists (-written +loaded):\n%s", text, cmp.Diff(want, got))
			}
			if drift, err := n.Drift(tc.new); err != nil || drift != "" {
				t.Errorf("after nft -f of the delta text, drift %q, %v", drift, err)
			}
		})
	}
}
