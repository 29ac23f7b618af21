package nft

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// r17Victim is the sample table with a chain "victim" of ten counting
// rules reached from the base chain, and the same table with bad inserted
// as victim's rule 6.
func r17Victim(bad Rule) (good, worse *Table) {
	good = sampleTable()
	victim := &Chain{Name: "victim"}
	for i := range 10 {
		victim.Rules = append(victim.Rules, Rule{Exprs: []Expr{Counter{}}, Comment: fmt.Sprint("good ", i)})
	}
	good.Chains = append(good.Chains, victim)
	fwd := good.Chains[0]
	fwd.Rules = append(slices.Clone(fwd.Rules), Rule{Exprs: []Expr{MarkBitsSet{Bits: 0x200}, Verdict{Kind: Jump, Chain: "victim"}}})
	worse = clone(good)
	bv := chainNamed(worse, "victim")
	bv.Rules = slices.Insert(bv.Rules, 6, bad)
	return good, worse
}

// TestHostileRound17RefusalAcrossSequenceWrap tries a refused rule (a
// comment of 254 bytes, victim's rule 6) in a batch whose message
// sequence numbers wrap past 2^32 (batchSequence is a process-wide
// uint32 counter; a long-running daemon gets there). The batch transport
// finds the refused rule by binary search over the sequence numbers of
// its rule messages, which it takes to rise; across the wrap they do not.
// The wrap is put at every offset of the write's messages, whole write
// and delta.
//
// What happened: a defect. Where the wrap falls among the rule messages
// (14 of 71 offsets of the whole write, 3 of 17 of the delta) the error
// names no rule, only the errno, e.g.
//
//	apply table inet nftpolicy: kernel refused the batch: netlink receive:
//	numerical result out of range (writing table inet nftpolicy-handover, dormant)
//	update table inet nftpolicy: kernel refused the batch: netlink receive:
//	numerical result out of range
//
// (batchTransport.named's slices.BinarySearchFunc over t.rules, whose
// seq fields are not sorted once the counter wraps). Nothing is applied
// (held). Fixed: named compares offsets from the batch's first rule
// message, which rise across the wrap.
func TestHostileRound17RefusalAcrossSequenceWrap(t *testing.T) {
	ns, c := openTestNS(t)
	good, bad := r17Victim(Rule{Exprs: []Expr{Counter{}}, Comment: strings.Repeat("c", 254)})
	if _, err := c.Apply(good); err != nil {
		t.Fatal(err)
	}
	before := testns.ListTable(t, ns, good.Name)
	// How many sequence numbers a delta and a whole write take.
	for _, how := range []string{"whole", "delta"} {
		write := func() error {
			if how == "whole" {
				_, err := c.Apply(bad)
				return err
			}
			_, err := c.WriteDeltaAt(Diff(good, bad), bad, 0)
			return err
		}
		s0 := batchSequence.Load()
		if err := write(); err == nil {
			t.Fatal("taken")
		}
		used := batchSequence.Load() - s0
		bad16 := 0
		for k := uint32(0); k <= used+2; k++ {
			batchSequence.Store(math.MaxUint32 - used + k)
			err := write()
			if err == nil {
				t.Fatalf("%s, wrap at %d: taken", how, k)
			}
			if msg := err.Error(); !strings.Contains(msg, "chain victim rule 6:") {
				bad16++
				if bad16 <= 3 {
					t.Errorf("%s, wrap at %d of %d: the error does not name chain victim rule 6: %v", how, k, used, err)
				}
			}
			if after := testns.ListTable(t, ns, good.Name); after != before {
				t.Fatalf("%s, wrap at %d: the table changed", how, k)
			}
		}
		if bad16 > 0 {
			t.Errorf("%s: %d of %d wrap offsets misname the refused rule", how, bad16, used+3)
		}
	}
}

// TestHostileRound17SeveralRefusedRules tries three rules the kernel
// refuses in one write: victim's rule 6 (a comment of 254 bytes), its
// rule 9 (a log prefix of 128 bytes) and rule 1 of another chain
// "victim2" (129 expressions), whole write and delta.
//
// Held: the error names all three, each with its own errno; the table
// in force stays.
func TestHostileRound17SeveralRefusedRules(t *testing.T) {
	ns, c := openTestNS(t)
	good, bad := r17Victim(Rule{Exprs: []Expr{Counter{}}, Comment: strings.Repeat("c", 254)})
	v2 := &Chain{Name: "victim2", Rules: []Rule{{Exprs: []Expr{Counter{}}}, {Exprs: []Expr{Counter{}}}}}
	good.Chains = append(good.Chains, v2)
	bad.Chains = append(bad.Chains, &Chain{Name: "victim2", Rules: []Rule{{Exprs: []Expr{Counter{}}}, r16Wide(129)}})
	bv := chainNamed(bad, "victim")
	bv.Rules[9] = Rule{Exprs: []Expr{Log{Group: 1, Prefix: strings.Repeat("p", 128)}}}
	if _, err := c.Apply(good); err != nil {
		t.Fatal(err)
	}
	before := testns.ListTable(t, ns, good.Name)
	for _, how := range []string{"whole", "delta"} {
		var err error
		if how == "whole" {
			_, err = c.Apply(bad)
		} else {
			_, err = c.WriteDeltaAt(Diff(good, bad), bad, 0)
		}
		if err == nil {
			t.Fatalf("%s: taken", how)
		}
		t.Logf("%s: %v", how, err)
		for _, want := range []string{"chain victim rule 6:", "chain victim rule 9:", "chain victim2 rule 1:"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: the error does not say %q", how, want)
			}
		}
		if after := testns.ListTable(t, ns, good.Name); after != before {
			t.Errorf("%s: the table changed", how)
		}
	}
}

// TestHostileRound17RefusedElementNotARule tries a refusal of an element
// message, not a rule's: pods-v4 gets an element jumping to the base
// chain filter-forward (EOPNOTSUPP), along with a good new rule in leaf,
// whole and by a delta. The error must not name a rule (none was
// refused), and nothing is applied.
//
// Held: "kernel refused the batch: netlink receive: operation not
// supported", no rule named, the table unchanged. (It names no set or
// element either: the refused message is not identified at all.)
func TestHostileRound17RefusedElementNotARule(t *testing.T) {
	ns, c := openTestNS(t)
	good := sampleTable()
	if _, err := c.Apply(good); err != nil {
		t.Fatal(err)
	}
	before := testns.ListTable(t, ns, good.Name)
	bad := clone(good)
	for _, s := range bad.Sets {
		if s.Name == "pods-v4" {
			s.Elements = append(slices.Clone(s.Elements), Element{Addr: netip.MustParseAddr("10.0.0.9"), Verdict: Verdict{Kind: Jump, Chain: "filter-forward"}})
		}
	}
	leaf := chainNamed(bad, "leaf")
	leaf.Rules = append(slices.Clone(leaf.Rules), Rule{Exprs: []Expr{Counter{}}, Comment: "fine"})
	for _, how := range []string{"whole", "delta"} {
		var err error
		if how == "whole" {
			_, err = c.Apply(bad)
		} else {
			_, err = c.WriteDeltaAt(Diff(good, bad), bad, 0)
		}
		t.Logf("%s: %v", how, err)
		if err == nil {
			t.Errorf("%s: taken", how)
			continue
		}
		if strings.Contains(err.Error(), " rule ") {
			t.Errorf("%s: the error names a rule, but an element was refused", how)
		}
		if after := testns.ListTable(t, ns, good.Name); after != before {
			t.Errorf("%s: the table changed", how)
		}
	}
}

// TestHostileRound17IntruderElementsAmongMany tries the reader on a set
// of 30,000 elements written by us, of which nft then deletes one in the
// middle and adds it back jumping to our empty chain of a 255-byte name,
// so that the set dump spans many buffers and the difference sits
// deep in it.
//
// Held: Drift reports both ("set pods-v4: element 10.1.58.152 : jump
// pod-x/a is missing"; for the changed verdict it says the same, the
// element being there with another verdict).
func TestHostileRound17IntruderElementsAmongMany(t *testing.T) {
	ns, c := openTestNS(t)
	tb := sampleTable()
	for _, s := range tb.Sets {
		if s.Name == "pods-v4" {
			s.Elements = nil
			for i := range 30000 {
				s.Elements = append(s.Elements, Element{Addr: netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), Verdict: Verdict{Kind: Jump, Chain: "pod-x/a"}})
			}
		}
	}
	long := "m" + strings.Repeat("0123456789abcdef", 15) + strings.Repeat("w", 14)
	tb.Chains = append(tb.Chains, &Chain{Name: long})
	if _, err := c.Apply(tb); err != nil {
		t.Fatal(err)
	}
	if d, err := c.Drift(tb); err != nil || d != "" {
		t.Fatalf("Drift of the table written: %q, %v", d, err)
	}
	testns.Nft(t, ns, "", "delete", "element", "inet", tb.Name, "pods-v4", "{ 10.1.58.152 }")
	d, err := c.Drift(tb)
	t.Logf("one element deleted: %q, %v", d, err)
	if err != nil || d == "" {
		t.Errorf("one of 30,000 elements deleted by nft: Drift %q, %v", d, err)
	}
	testns.Nft(t, ns, "", "add", "element", "inet", tb.Name, "pods-v4", fmt.Sprintf("{ 10.1.58.152 : jump %s }", long))
	d, err = c.Drift(tb)
	t.Logf("the element jumping to the long chain instead: %q, %v", d, err)
	if err != nil || d == "" {
		t.Errorf("an element's verdict changed by nft: Drift %q, %v", d, err)
	}
}
