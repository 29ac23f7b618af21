package nft

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// applyIn is what testns.AssertSameAsNft runs to load table: Apply it in
// the namespace it is given.
func applyIn(table *Table) func(netns string) error {
	return func(netns string) error {
		c, err := Open(netns)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Apply(table)
		return err
	}
}

func TestKernelApplyMatchesNft(t *testing.T) {
	table := sampleTable()
	testns.AssertSameAsNft(t, table.Name, applyIn(table), Render(table))
}

func TestKernelApplyReplacesAtomically(t *testing.T) {
	ns, c := openTestNS(t)
	if _, err := c.Apply(sampleTable()); err != nil {
		t.Fatal(err)
	}
	before := testns.Nft(t, ns, "", "list", "table", "inet", "nftpolicy")

	// A rule naming a chain that does not exist makes the kernel refuse the
	// batch (ENOENT); the table programmed before must survive untouched.
	broken := sampleTable()
	broken.Chains[1].Rules = append(broken.Chains[1].Rules, Rule{Exprs: []Expr{Verdict{Kind: Jump, Chain: "no-such-chain"}}})
	if _, err := c.Apply(broken); err == nil {
		t.Fatal("Apply of a table jumping to a missing chain succeeded")
	}
	// An encoding error (a set the rule names is missing) never reaches the kernel.
	broken = sampleTable()
	broken.Sets = broken.Sets[1:]
	if _, err := c.Apply(broken); err == nil || !strings.Contains(err.Error(), "peers-v4") {
		t.Fatalf("Apply with a missing set: got %v, want an error naming the set", err)
	}
	// A map holding one key twice (two pods on one address once did) is
	// refused by name before anything is sent, as a delta too.
	broken = sampleTable()
	pods := broken.Sets[5]
	pods.Elements = append(pods.Elements, Element{Addr: pods.Elements[0].Addr, Verdict: Verdict{Kind: Jump, Chain: "leaf"}})
	if _, err := c.Apply(broken); err == nil || !strings.Contains(err.Error(), "set pods-v4: element 1 repeats the key of element 0") {
		t.Fatalf("Apply with a key twice in a map: got %v, want an error naming the set", err)
	}
	if _, err := c.Update(sampleTable(), broken); err == nil || !strings.Contains(err.Error(), "set pods-v4: element 1 repeats") {
		t.Fatalf("Update with a key twice in a map: got %v, want an error naming the set", err)
	}
	if after := testns.Nft(t, ns, "", "list", "table", "inet", "nftpolicy"); after != before {
		t.Errorf("a refused batch changed the table:\n%s", cmp.Diff(before, after))
	}

	st, err := c.ReadTable("nftpolicy")
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Chains["pod-x/a"]; len(got) != 8 || got[7] != "x/a: no policy allows" {
		t.Errorf("ReadTable chain pod-x/a comments = %q", got)
	}
	if got := st.Sets["np-v4"]; got != 1 {
		t.Errorf("ReadTable set np-v4 has %d elements, want 1", got)
	}

	if err := c.Delete(FamilyInet, "nftpolicy"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadTable("nftpolicy"); err == nil {
		t.Error("table still readable after Delete")
	}
	if err := c.Delete(FamilyInet, "nftpolicy"); err != nil {
		t.Errorf("Delete of a missing table: %v", err)
	}
}

func TestKernelLargeSetsAreChunked(t *testing.T) {
	table := &Table{Family: FamilyInet, Name: "nftpolicy"}
	big := &Set{Name: "big-v6", Key: KeyIPv6ProtoPort}
	ivl := &Set{Name: "ivl-v4", Key: KeyIPv4, Interval: true}
	base := netip.MustParseAddr("fd00::")
	v4 := netip.MustParseAddr("10.0.0.0")
	for i := 0; i < 3000; i++ {
		base = base.Next()
		big.Elements = append(big.Elements, Element{Addr: base, Proto: ProtoTCP, Port: 80})
		v4 = v4.Next().Next() // gaps keep every address its own interval
		ivl.Elements = append(ivl.Elements, Element{Addr: v4})
	}
	table.Sets = []*Set{big, ivl}
	_, c := openTestNS(t)
	stats, err := c.Apply(table)
	if err != nil {
		t.Fatal(err)
	}
	// Each interval is a start and an end element, after the leading end
	// element at 0.0.0.0; at most elementsPerMessage go in one message.
	if want := 3000 + 1 + 2*3000; stats.ElementsAdded != want {
		t.Errorf("%d elements sent, want %d", stats.ElementsAdded, want)
	}
	// The table is one message: with nothing there, it is created
	// exclusively, not added, deleted and added again.
	if want := 1 + 2 + (3000+elementsPerMessage-1)/elementsPerMessage + (6001+elementsPerMessage-1)/elementsPerMessage; stats.Messages < want {
		t.Errorf("%d messages sent, want at least %d (table, sets, chunks)", stats.Messages, want)
	}
	st, err := c.ReadTable("nftpolicy")
	if err != nil {
		t.Fatal(err)
	}
	if st.Sets["big-v6"] != 3000 || st.Sets["ivl-v4"] != 6001 {
		t.Errorf("big-v6 holds %d elements, want 3000; ivl-v4 %d, want 6001", st.Sets["big-v6"], st.Sets["ivl-v4"])
	}
	// By content: every element of both sets is in the kernel as written.
	if drift, err := c.Drift(table); err != nil || drift != "" {
		t.Errorf("drift after writing the large sets: %q, %v", drift, err)
	}
}
