//go:build linux

package nft

import (
	"errors"
	"fmt"
	"math/rand"
	"net/netip"
	"syscall"
	"testing"

	"go4.org/netipx"
)

// Hostile review, round 5: nft.Fake against the kernel for sets held per
// address. Each step applies the same delta to a Fake and to a real
// table in a test namespace, and holds the Fake to the kernel: refused
// or not (ENOENT), the same BatchStats, the same addresses held after.

type r5Pair struct {
	f  *Fake
	c  *Conn
	at *Table // what both should hold
}

func r5Open(t *testing.T, from *Table) *r5Pair {
	t.Helper()
	_, c := openTestNS(t)
	p := &r5Pair{f: NewFake(), c: c, at: from}
	ks, kerr := c.Apply(from)
	fs, ferr := p.f.ApplyAt(from, 0)
	if kerr != nil || ferr != nil {
		t.Fatalf("apply: kernel %v, fake %v", kerr, ferr)
	}
	r5Stats(t, "apply", ks, fs)
	return p
}

func r5Stats(t *testing.T, step string, k, f BatchStats) {
	t.Helper()
	// Messages are the Fake's approximation (see Fake): not compared.
	k.Generation, f.Generation = 0, 0
	k.Messages, f.Messages = 0, 0
	if k != f {
		t.Errorf("%s: kernel counted %+v, the Fake %+v", step, k, f)
	}
}

// step applies d (towards to) to both and compares.
func (p *r5Pair) step(t *testing.T, name string, d *Delta, to *Table) {
	t.Helper()
	before := p.f.Dump()
	ks, kerr := p.c.WriteDeltaAt(d, to, 0)
	fs, ferr := p.f.WriteDeltaAt(d, to, 0)
	if (kerr == nil) != (ferr == nil) {
		t.Errorf("%s: kernel %v (ENOENT %v), the Fake %v (ENOENT %v)", name, kerr, errors.Is(kerr, syscall.ENOENT), ferr, errors.Is(ferr, syscall.ENOENT))
	} else if kerr != nil && errors.Is(kerr, syscall.ENOENT) != errors.Is(ferr, syscall.ENOENT) {
		t.Errorf("%s: kernel %v, the Fake %v: not the same refusal", name, kerr, ferr)
	}
	if ferr != nil && p.f.Dump() != before {
		t.Errorf("%s: a batch the Fake refused changed it", name)
	}
	if kerr == nil && ferr == nil {
		r5Stats(t, name, ks, fs)
	}
	// Whatever happened, the two must hold the same.
	p.f.mu.Lock()
	held := cloneTable(p.f.table)
	p.f.mu.Unlock()
	if drift, err := p.c.Drift(held); err != nil || drift != "" {
		t.Errorf("%s: the kernel differs from the Fake: %q %v", name, drift, err)
	}
}

func r5Exact(old, new *Set, removed, added []string) *Delta {
	return &Delta{UpdateSets: []SetUpdate{{Old: old, New: new, Exact: true,
		Removed: rangeElements(removed), Added: rangeElements(added)}}}
}

// TestHostileRound5FakePerAddressEdges: deltas a careless patch could
// send, each against a fresh pair.
func TestHostileRound5FakePerAddressEdges(t *testing.T) {
	held := []string{"10.0.0.1-10.0.0.3", "10.0.0.7"}
	for _, tc := range []struct {
		name           string
		removed, added []string
		after          []string
	}{
		{"overlapping removals", []string{"10.0.0.1-10.0.0.3", "10.0.0.2"}, nil, []string{"10.0.0.7"}},
		{"one address removed twice", []string{"10.0.0.7", "10.0.0.7"}, nil, []string{"10.0.0.1-10.0.0.3"}},
		{"overlapping removals with an addition", []string{"10.0.0.1-10.0.0.3", "10.0.0.2"}, []string{"10.0.0.9"}, []string{"10.0.0.7", "10.0.0.9"}},
		{"remove what is not held", []string{"10.0.0.4"}, nil, held},
		{"remove a range partly held", []string{"10.0.0.3-10.0.0.4"}, nil, held},
		{"remove and add one not held", []string{"10.0.0.9"}, []string{"10.0.0.9"}, []string{"10.0.0.1-10.0.0.3", "10.0.0.7", "10.0.0.9"}},
		{"add one address twice", nil, []string{"10.0.0.9", "10.0.0.9"}, []string{"10.0.0.1-10.0.0.3", "10.0.0.7", "10.0.0.9"}},
		{"remove and re-add held", []string{"10.0.0.1-10.0.0.3"}, []string{"10.0.0.2"}, []string{"10.0.0.2", "10.0.0.7"}},
		{"a large addition", nil, []string{"10.0.4.0-10.0.7.255"}, []string{"10.0.0.1-10.0.0.3", "10.0.0.7", "10.0.4.0-10.0.7.255"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from := perAddressTable(held, nil)
			to := perAddressTable(tc.after, nil)
			p := r5Open(t, from)
			p.step(t, tc.name, r5Exact(from.Sets[0], to.Sets[0], tc.removed, tc.added), to)
		})
	}
	t.Run("a large removal found by Diff", func(t *testing.T) {
		from := perAddressTable([]string{"10.0.4.0-10.0.7.255"}, []string{"fd00::1-fd00::2"})
		to := perAddressTable([]string{"10.0.5.0"}, []string{"fd00::1-fd00::2"})
		p := r5Open(t, from)
		p.step(t, "diff", Diff(from, to), to)
		p.step(t, "diff back", Diff(to, from), from)
	})
}

// TestHostileRound5FakePerAddressRandomExact: the same with only patches
// that are exact (what is removed is held, what is added is not, as the
// compiler's peer patches are) and compared deltas.
func TestHostileRound5FakePerAddressRandomExact(t *testing.T) {
	r5Random(t, true)
}

func r5Random(t *testing.T, exactOnly bool) {
	rng := rand.New(rand.NewSource(5))
	addr := func(i int) string { return netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}).String() }
	rnd := func() []string {
		var out []string
		for range rng.Intn(3) {
			a := rng.Intn(40)
			if rng.Intn(2) == 0 {
				out = append(out, addr(a))
			} else {
				out = append(out, addr(a)+"-"+addr(a+rng.Intn(6)))
			}
		}
		return out
	}
	normalized := func(r []string) []string {
		var b netipx.IPSetBuilder
		for _, e := range rangeElements(r) {
			b.AddRange(addrRangeOf(e))
		}
		s, _ := b.IPSet()
		var out []string
		for _, x := range s.Ranges() {
			if x.From() == x.To() {
				out = append(out, x.From().String())
			} else {
				out = append(out, x.From().String()+"-"+x.To().String())
			}
		}
		return out
	}
	cur := normalized([]string{"10.0.0.1-10.0.0.5", "10.0.0.20"})
	p := r5Open(t, perAddressTable(cur, nil))
	for i := range 60 {
		from := perAddressTable(cur, nil)
		removed, added := rnd(), rnd()
		if exactOnly {
			var hb netipx.IPSetBuilder
			for _, e := range rangeElements(cur) {
				hb.AddRange(addrRangeOf(e))
			}
			hs, _ := hb.IPSet()
			var rb, ab netipx.IPSetBuilder
			for _, e := range rangeElements(removed) {
				rb.AddRange(addrRangeOf(e))
			}
			rb.Intersect(hs)
			for _, e := range rangeElements(added) {
				ab.AddRange(addrRangeOf(e))
			}
			ab.RemoveSet(hs)
			rs, _ := rb.IPSet()
			as, _ := ab.IPSet()
			removed, added = nil, nil
			for _, x := range rs.Ranges() {
				removed = append(removed, x.From().String()+"-"+x.To().String())
			}
			for _, x := range as.Ranges() {
				added = append(added, x.From().String()+"-"+x.To().String())
			}
		}
		var b netipx.IPSetBuilder
		for _, e := range rangeElements(cur) {
			b.AddRange(addrRangeOf(e))
		}
		for _, e := range rangeElements(removed) {
			b.RemoveRange(addrRangeOf(e))
		}
		for _, e := range rangeElements(added) {
			b.AddRange(addrRangeOf(e))
		}
		s, _ := b.IPSet()
		var next []string
		for _, x := range s.Ranges() {
			if x.From() == x.To() {
				next = append(next, x.From().String())
			} else {
				next = append(next, x.From().String()+"-"+x.To().String())
			}
		}
		to := perAddressTable(next, nil)
		var d *Delta
		name := fmt.Sprintf("step %d", i)
		if rng.Intn(3) == 0 {
			d = Diff(from, to)
			name += fmt.Sprintf(" diff %v→%v", cur, next)
		} else {
			d = r5Exact(from.Sets[0], to.Sets[0], removed, added)
			name += fmt.Sprintf(" exact held %v -%v +%v", cur, removed, added)
		}
		failedBefore := t.Failed()
		p.step(t, name, d, to)
		if !failedBefore && t.Failed() {
			t.Logf("first divergence at %s", name)
		}
		// Follow what both hold (checked equal by step).
		p.f.mu.Lock()
		cur = nil
		for _, e := range p.f.table.Sets[0].Elements {
			r := addrRangeOf(e)
			cur = append(cur, r.From().String()+"-"+r.To().String())
		}
		p.f.mu.Unlock()
		cur = normalized(cur)
		if t.Failed() {
			break
		}
	}
}
