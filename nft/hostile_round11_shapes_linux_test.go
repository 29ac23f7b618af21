package nft

import (
	"fmt"
	"testing"
)

// Hostile review, round 11: whole writes and deltas between tables of
// different shapes, all judging alike, while packets ask them (promise
// 1): with and without an interval set (either way round), the
// smallest interval set (two addresses and the probe's rule), a large
// one (60k ranges), one with an extra empty interval set, and deltas
// that add and remove that empty set. Holds if no packet is misjudged
// and the last write is exactly in force.
func TestHostileRound11TableShapes(t *testing.T) {
	ns, c := r11NS(t)
	plain := func(comment string) *Table {
		t := r11Table(0, comment, false)
		s := *t.Sets[0]
		s.Interval, s.PerAddress = false, true
		t.Sets = []*Set{&s}
		return t
	}
	withEmpty := func(fill int, comment string) *Table {
		t := r11Table(fill, comment, false)
		t.Sets = append(append([]*Set(nil), t.Sets...), &Set{Name: "e", Key: KeyIPv4, Interval: true})
		return t
	}
	large := func(comment string) *Table {
		t := r10BigTable(60000, comment)
		return withProbeRule(t)
	}
	shapes := []struct {
		name string
		t    *Table
	}{
		{"plain", plain("p1")},
		{"tiny interval", r11Table(0, "tiny", false)},
		{"plain again", plain("p2")},
		{"large interval", large("large")},
		{"tiny interval again", r11Table(0, "tiny2", false)},
		{"with an empty interval set", withEmpty(2000, "e1")},
		{"plain 3", plain("p3")},
		{"with an empty interval set again", withEmpty(0, "e2")},
		{"large again", large("large2")},
		{"interval", r11Table(5000, "last", false)},
	}
	if _, err := c.Apply(plain("first")); err != nil {
		t.Fatal(err)
	}
	v := r11StartCounter(t, ns)
	defer v.finish()
	var last *Table
	var gen uint32
	for i, s := range shapes {
		var st BatchStats
		var err error
		if i%2 == 0 {
			st, err = c.ApplyGuarded(s.t, func(string, bool) error { return nil })
		} else {
			st, err = c.Apply(s.t)
		}
		if err != nil {
			v.finish()
			t.Fatalf("%s: %v", s.name, err)
		}
		t.Logf("%s: handover %v", s.name, st.Handover)
		last, gen = s.t, st.Generation
		// A delta that adds an empty interval set, and one that takes it
		// away again (a staged set, then a deleted one).
		if i == 4 || i == 9 {
			more := withEmpty(0, last.Comment)
			more.Sets[0] = last.Sets[0]
			more.Chains = last.Chains
			st, err := c.WriteDeltaAt(Diff(last, more), more, gen)
			if err != nil {
				v.finish()
				t.Fatalf("delta adding an empty interval set: %v", err)
			}
			st2, err := c.WriteDeltaAt(Diff(more, last), last, st.Generation)
			if err != nil {
				v.finish()
				t.Fatalf("delta taking it away: %v", err)
			}
			gen = st2.Generation
			t.Logf("deltas: staged %d", st.Staged)
		}
	}
	v.finish()
	t.Logf("%s", v)
	if b, l, p := v.blocks.Load(), v.leaks.Load(), v.probeDrops.Load(); b != 0 || l != 0 || p != 0 || v.sent.Load() == 0 {
		t.Errorf("%d blocks, %d leaks, %d probe drops", b, l, p)
	}
	r9AssertClean(t, ns, c, last, fmt.Sprint("after ", len(shapes), " writes"))
	_ = gen
}

// withProbeRule adds r11Table's probe rule to t (whose set s does not
// hold the probe).
func withProbeRule(t *Table) *Table {
	ch := *t.Chains[0]
	ch.Rules = append([]Rule{{Exprs: []Expr{AddrEq{Field: Daddr, Addr: r11Probe}, AddrInSet{Family: IPv4, Field: Daddr, Set: "s"}, Verdict{Kind: Drop}}}}, ch.Rules...)
	t.Chains = []*Chain{&ch}
	return t
}
