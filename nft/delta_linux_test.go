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

// TestKernelSyncPathKeepsItsSocket: once a table is written, the reads and
// deltas of a sync open no socket of their own. Closing a netfilter socket
// waits for nf_tables to destroy what the last commit replaced (an RCU
// grace period), which made every delta 5-28 ms slower at 150k pods when
// WriteDeltaAt read the table's flags on a socket it then closed.
func TestKernelSyncPathKeepsItsSocket(t *testing.T) {
	_, c := openTestNS(t)
	gen0, err := c.Apply(sampleTable())
	if err != nil {
		t.Fatal(err)
	}
	opened := c.opened.Load()
	old, new, gen := sampleTable(), changedSample(), gen0.Generation
	for i := range 4 {
		d := Diff(old, new)
		st, err := c.WriteDeltaAt(d, new, gen)
		if err != nil {
			t.Fatalf("delta %d: %v", i, err)
		}
		if now, err := c.Generation(); err != nil || now != st.Generation {
			t.Fatalf("delta %d: generation %d, %v; the batch announced %d", i, now, err, st.Generation)
		}
		old, new, gen = new, old, st.Generation
	}
	if n := c.opened.Load() - opened; n != 0 {
		t.Errorf("4 deltas and generation reads opened %d sockets besides the batch socket", n)
	}
	if drift, err := c.Drift(old); err != nil || drift != "" {
		t.Errorf("after the deltas, drift %q, %v", drift, err)
	}
}
