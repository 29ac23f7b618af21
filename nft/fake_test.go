package nft

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// Each delta the Fake applies leaves it holding exactly the table the
// delta leads to, whatever order it added things in.
func TestFakeAppliesDeltas(t *testing.T) {
	f := NewFake()
	old := sampleTable()
	st, err := f.ApplyAt(old, 0)
	if err != nil || !st.Full || st.Messages == 0 {
		t.Fatalf("apply: %+v, %v", st, err)
	}
	steps := []struct {
		name   string
		change func(t *Table)
	}{
		{"a chain and a jump to it", func(t *Table) {
			t.Chains = append(t.Chains, &Chain{Name: "new-leaf"})
			c := chainNamed(t, "leaf")
			c.Rules = append(c.Rules, Rule{Exprs: []Expr{Verdict{Kind: Jump, Chain: "new-leaf"}}})
		}},
		{"an element out, one in", func(t *Table) {
			s := setNamed(t, "plain-v4")
			s.Elements = []Element{{Addr: netip.MustParseAddr("10.9.9.10")}}
		}},
		{"a map element to the new chain", func(t *Table) {
			s := setNamed(t, "pods-v6")
			s.Elements = append(s.Elements, Element{Addr: netip.MustParseAddr("fd00::2"), Verdict: Verdict{Kind: Goto, Chain: "new-leaf"}})
		}},
		{"the chain and its references gone", func(t *Table) {
			setNamed(t, "pods-v6").Elements = nil
			chainNamed(t, "leaf").Rules = nil
			t.Chains = t.Chains[:len(t.Chains)-1]
		}},
		{"a set gone with its rule", func(t *Table) {
			c := chainNamed(t, "np-x/allow")
			c.Rules = c.Rules[:4]
			t.Sets = t.Sets[:4]
			t.Sets = append(t.Sets, &Set{Name: "pods-v4", Key: KeyIPv4, Verdict: true, Elements: setNamed(old, "pods-v4").Elements},
				&Set{Name: "pods-v6", Key: KeyIPv6, Verdict: true}, setNamed(old, "ports-v4"), setNamed(old, "ports-v6"),
				setNamed(old, "svc-v4"), setNamed(old, "svc-v6"))
		}},
	}
	for _, step := range steps {
		next := clone(old)
		step.change(next)
		d := Diff(old, next)
		if d.Full || d.Empty() {
			t.Fatalf("%s: the step is no in-place delta: %+v", step.name, d)
		}
		gen, _ := f.Generation()
		st, err := f.WriteDeltaAt(d, next, gen)
		if err != nil {
			t.Fatalf("%s: %v\n%s", step.name, err, RenderDelta(d, next))
		}
		if st.Full || st.Messages == 0 || st.Generation != gen+1 {
			t.Errorf("%s: stats %+v after generation %d", step.name, st, gen)
		}
		if drift, _ := f.Drift(next); drift != "" {
			t.Errorf("%s: drift %s", step.name, drift)
		}
		if got, want := f.Dump(), Render(canonical(next)); got != want {
			t.Errorf("%s: Dump:\n%s\nwant:\n%s", step.name, got, want)
		}
		old = next
	}
}

// The Fake refuses what the kernel refuses, and a refused batch changes
// nothing.
func TestFakeRefusesWhatTheKernelRefuses(t *testing.T) {
	f := NewFake()
	base := sampleTable()
	if _, err := f.ApplyAt(base, 0); err != nil {
		t.Fatal(err)
	}
	before := f.Dump()
	cases := []struct {
		name   string
		change func(t *Table)
		want   error
	}{
		{"a jump to a missing chain", func(t *Table) {
			c := chainNamed(t, "leaf")
			c.Rules = append(c.Rules, Rule{Exprs: []Expr{Verdict{Kind: Jump, Chain: "nowhere"}}})
		}, syscall.ENOENT},
		{"a lookup of a missing set", func(t *Table) {
			c := chainNamed(t, "leaf")
			c.Rules = append(c.Rules, Rule{Exprs: []Expr{AddrInSet{Family: IPv4, Field: Saddr, Set: "nothing"}}})
		}, syscall.ENOENT},
		{"a chain deleted while jumped to", func(t *Table) {
			t.Chains = t.Chains[:len(t.Chains)-1] // leaf, np-x/allow's goto target
		}, syscall.EBUSY},
		{"a map deleted while looked up", func(t *Table) {
			t.Sets = t.Sets[:len(t.Sets)-1] // pods-v6
		}, syscall.EBUSY},
	}
	for _, tc := range cases {
		next := clone(base)
		tc.change(next)
		if _, err := f.WriteDeltaAt(Diff(base, next), next, 0); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if f.Dump() != before {
			t.Errorf("%s: a refused batch changed the table", tc.name)
		}
	}
	// A whole table with a dangling jump is refused as well.
	bad := clone(base)
	chainNamed(bad, "leaf").Rules = []Rule{{Exprs: []Expr{Verdict{Kind: Goto, Chain: "nowhere"}}}}
	if _, err := f.ApplyAt(bad, 0); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("whole table with a dangling goto: %v, want ENOENT", err)
	}
	// An element deleted that is not there.
	stale := clone(base)
	setNamed(stale, "plain-v4").Elements = []Element{{Addr: netip.MustParseAddr("10.7.7.7")}}
	next := clone(base)
	setNamed(next, "plain-v4").Elements = nil
	if _, err := f.WriteDeltaAt(Diff(stale, next), next, 0); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("deleting a missing element: %v, want ENOENT", err)
	}
	if f.Dump() != before {
		t.Errorf("a refused batch changed the table")
	}
}

// The knobs: refusals, generation conflicts, commits by others as the
// monitors see them, drift, beacons and forward chains.
func TestFakeKnobs(t *testing.T) {
	f := NewFake()
	base := sampleTable()
	base.Comment = "owner record"
	st, err := f.ApplyAt(base, 0)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := f.Monitor(base.Name)
	defer m.Close()
	next := clone(base)
	setNamed(next, "plain-v4").Elements = nil
	d := Diff(base, next)

	boom := errors.New("boom")
	f.Refuse(2, boom)
	for i := range 2 {
		if _, err := f.WriteDeltaAt(d, next, st.Generation); !errors.Is(err, boom) {
			t.Errorf("refused batch %d: %v", i+1, err)
		}
	}
	f.Commit() // another table
	if !m.Untouched(st.Generation, st.Generation+1, time.Second) {
		t.Errorf("a commit to another table touched ours")
	}
	if _, err := f.WriteDeltaAt(d, next, st.Generation); !errors.Is(err, ErrGenerationChanged) {
		t.Errorf("delta at a stale generation: %v", err)
	}
	gen, _ := f.Generation()
	st, err = f.WriteDeltaAt(d, next, gen)
	if err != nil || f.Batches() != 5 {
		t.Fatalf("delta at the current generation: %v; %d batches", err, f.Batches())
	}
	if m.Untouched(gen, st.Generation, time.Second) {
		t.Errorf("our own commit is not seen by the monitor")
	}
	if c, _ := f.TableComment(base.Name); c != "owner record" {
		t.Errorf("a delta changed the table's comment to %q", c)
	}
	select {
	case <-m.Foreign():
		t.Errorf("our own commits signalled as foreign")
	default:
	}

	f.Tamper(func(t *Table) { setNamed(t, "pods-v4").Elements = nil })
	select {
	case <-m.Foreign():
	default:
		t.Errorf("Tamper did not signal a foreign commit")
	}
	if m.Untouched(st.Generation, st.Generation+1, time.Second) {
		t.Errorf("Tamper's commit is untouched")
	}
	if drift, _ := f.Drift(next); drift == "" {
		t.Errorf("no drift after Tamper")
	}
	f.DeleteTable()
	if drift, _ := f.Drift(next); drift == "" {
		t.Errorf("no drift after DeleteTable")
	}
	if _, err := f.TableComment(base.Name); !errors.Is(err, ErrNoTable) {
		t.Errorf("TableComment of a deleted table: %v", err)
	}

	f.AddForwardChain(BaseChain{Family: FamilyIPv4, Table: "kube-proxy", Name: "forward", Type: "filter", Hook: "forward", Priority: -5})
	select {
	case <-m.ForwardChains():
	default:
		t.Errorf("AddForwardChain did not signal")
	}
	if chains, _ := f.BaseChains("forward"); len(chains) != 1 || chains[0].Table != "kube-proxy" {
		t.Errorf("forward chains %+v", chains)
	}

	o := NewOwner(time.Now())
	b, err := f.Hold(o)
	if alive, _ := f.Alive(o); err != nil || !alive {
		t.Errorf("held beacon: alive %v, %v", alive, err)
	}
	b.Close()
	if alive, _ := f.Alive(o); alive {
		t.Errorf("closed beacon still alive")
	}
	f.DeleteNetns()
	if err := f.CheckNetns(); !errors.Is(err, ErrNetnsGone) {
		t.Errorf("CheckNetns after DeleteNetns: %v", err)
	}
}
