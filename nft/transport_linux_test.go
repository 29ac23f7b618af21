package nft

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

func openTestNS(t *testing.T) (string, *Conn) {
	t.Helper()
	ns := testns.New(t, "nftpt")
	c, err := Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return ns, c
}

func generation(t *testing.T, c *Conn) uint32 {
	t.Helper()
	g, err := c.Generation()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// intrude commits something else into the namespace, as another program
// would, and returns the generation after it.
func intrude(t *testing.T, ns string, c *Conn) uint32 {
	t.Helper()
	before := generation(t, c)
	testns.Nft(t, ns, "", "add", "table", "inet", "intruder")
	after := generation(t, c)
	if after == before {
		t.Fatalf("nft add table left the generation at %d", after)
	}
	return after
}

// requireStale checks that err is a refusal for a stale generation, of the
// usual shape, and that the refused batch changed neither the table nor the
// generation.
func requireStale(t *testing.T, err error, prefix, ns string, c *Conn, listing string, gen uint32) {
	t.Helper()
	t.Logf("refused: %v", err)
	if !errors.Is(err, ErrGenerationChanged) {
		t.Fatalf("got %v, want ErrGenerationChanged", err)
	}
	if !strings.HasPrefix(err.Error(), prefix) {
		t.Errorf("error %q does not start with %q", err, prefix)
	}
	if after := testns.ListTable(t, ns, "nftpolicy"); after != listing {
		t.Errorf("a refused batch changed the table:\n%s", cmp.Diff(listing, after))
	}
	if g := generation(t, c); g != gen {
		t.Errorf("generation after a refused batch = %d, want %d", g, gen)
	}
}

func TestKernelGeneration(t *testing.T) {
	ns, c := openTestNS(t)
	g0 := generation(t, c)
	if g0 == 0 {
		t.Fatal("Generation = 0, which the kernel never uses")
	}
	if g := generation(t, c); g != g0 {
		t.Errorf("Generation changed from %d to %d with nothing committed", g0, g)
	}
	stats, err := c.Apply(sampleTable())
	if err != nil {
		t.Fatal(err)
	}
	if stats.Generation <= g0 {
		t.Errorf("Apply created generation %d, not after %d", stats.Generation, g0)
	}
	if g := generation(t, c); g != stats.Generation {
		t.Errorf("Generation = %d after Apply reported %d", g, stats.Generation)
	}
	if g := intrude(t, ns, c); g <= stats.Generation {
		t.Errorf("generation after nft add table = %d, not after %d", g, stats.Generation)
	}
}

// TestKernelCommittedGenerationIsEchoed checks that the generation of a
// batch comes from the kernel's NEWGEN for that commit rather than from a
// read afterwards, also when the first message of the batch is one whose
// objects the kernel echoes too (set elements).
func TestKernelCommittedGenerationIsEchoed(t *testing.T) {
	_, c := openTestNS(t)
	if _, err := c.Apply(sampleTable()); err != nil {
		t.Fatal(err)
	}
	nl, tx, err := c.newBatchConn(0)
	if err != nil {
		t.Fatal(err)
	}
	set := &nftables.Set{Table: &nftables.Table{Family: nftables.TableFamilyINet, Name: "nftpolicy"}, Name: "plain-v4", KeyType: nftables.TypeIPAddr}
	var elems []nftables.SetElement
	for i := range 300 {
		elems = append(elems, nftables.SetElement{Key: []byte{10, 7, byte(i >> 8), byte(i)}})
	}
	if err := nl.SetAddElements(set, elems); err != nil {
		t.Fatal(err)
	}
	if err := nl.SetAddElements(set, []nftables.SetElement{{Key: []byte{10, 8, 0, 1}}}); err != nil {
		t.Fatal(err)
	}
	gen, err := tx.flush(nl)
	if err != nil {
		t.Fatal(err)
	}
	if gen == 0 {
		t.Fatal("no NEWGEN echoed for the commit")
	}
	if g := generation(t, c); g != gen {
		t.Errorf("echoed generation %d, Generation %d", gen, g)
	}
	st, err := c.ReadTable("nftpolicy")
	if err != nil {
		t.Fatal(err)
	}
	if st.Sets["plain-v4"] != 302 {
		t.Errorf("plain-v4 holds %d elements, want 302", st.Sets["plain-v4"])
	}
}

func TestKernelApplyAt(t *testing.T) {
	ns, c := openTestNS(t)
	table := sampleTable()
	g := generation(t, c)
	stats, err := c.ApplyAt(table, g)
	if err != nil {
		t.Fatalf("ApplyAt the current generation: %v", err)
	}
	if stats.Generation == g || stats.Generation != generation(t, c) {
		t.Errorf("ApplyAt at %d reported generation %d, Generation says %d", g, stats.Generation, generation(t, c))
	}
	listing := testns.ListTable(t, ns, "nftpolicy")

	changed := sampleTable()
	changed.Sets[0].Elements = changed.Sets[0].Elements[1:]
	stale := stats.Generation
	now := intrude(t, ns, c)
	_, err = c.ApplyAt(changed, stale)
	requireStale(t, err, "apply table inet nftpolicy: kernel refused the batch: ", ns, c, listing, now)
	if !errors.Is(err, unix.ERESTART) {
		t.Errorf("stale generation refused with %v, want ERESTART from the kernel", err)
	}

	// The error keeps the kernel's answer to a batch refused message by
	// message, and the kernel's generation is not mistaken for a refusal.
	broken := sampleTable()
	broken.Chains[1].Rules = append(broken.Chains[1].Rules, Rule{Exprs: []Expr{Verdict{Kind: Jump, Chain: "no-such-chain"}}})
	_, err = c.ApplyAt(broken, now)
	t.Logf("refused: %v", err)
	if err == nil || errors.Is(err, ErrGenerationChanged) || !errors.Is(err, unix.ENOENT) {
		t.Errorf("ApplyAt of a table jumping to a missing chain: %v, want ENOENT", err)
	}

	// Generation 0 is not checked.
	stats, err = c.ApplyAt(changed, 0)
	if err != nil {
		t.Fatalf("ApplyAt unchecked: %v", err)
	}
	if stats.Generation != generation(t, c) || stats.Generation == now {
		t.Errorf("ApplyAt unchecked reported generation %d, Generation says %d", stats.Generation, generation(t, c))
	}
	if testns.ListTable(t, ns, "nftpolicy") == listing {
		t.Error("ApplyAt unchecked did not change the table")
	}
}

func TestKernelUpdateAt(t *testing.T) {
	ns, c := openTestNS(t)
	cur := sampleTable()
	stats, err := c.Apply(cur)
	if err != nil {
		t.Fatal(err)
	}
	gen := stats.Generation

	// A delta at the current generation.
	next := clone(cur)
	setNamed(next, "plain-v4").Elements = append(setNamed(next, "plain-v4").Elements, Element{Addr: netip.MustParseAddr("10.9.9.10")})
	stats, err = c.UpdateAt(cur, next, gen)
	if err != nil {
		t.Fatalf("UpdateAt the current generation: %v", err)
	}
	if stats.Full || stats.ElementsAdded != 1 {
		t.Errorf("UpdateAt wrote %+v, want one added element", stats)
	}
	if stats.Generation == gen || stats.Generation != generation(t, c) {
		t.Errorf("UpdateAt at %d reported generation %d, Generation says %d", gen, stats.Generation, generation(t, c))
	}
	cur, gen = next, stats.Generation
	listing := testns.ListTable(t, ns, "nftpolicy")

	// The same delta, and a full replace, at a stale generation.
	now := intrude(t, ns, c)
	next = clone(cur)
	setNamed(next, "plain-v4").Elements = nil
	_, err = c.UpdateAt(cur, next, gen)
	requireStale(t, err, "update table inet nftpolicy: kernel refused the batch: ", ns, c, listing, now)
	full := clone(cur)
	h := *chainNamed(full, "filter-forward").Hook
	h.Priority = -20
	chainNamed(full, "filter-forward").Hook = &h
	if !Diff(cur, full).Full {
		t.Fatal("changing the base chain priority is not a full replace")
	}
	_, err = c.UpdateAt(cur, full, gen)
	requireStale(t, err, "apply table inet nftpolicy: kernel refused the batch: ", ns, c, listing, now)

	// Nothing to write: no batch and no read; the generation given back is
	// the one passed, stale or not, since the table is still what it was then.
	stats, err = c.UpdateAt(cur, cur, now)
	if err != nil || stats.Generation != now || stats.Messages != 0 {
		t.Errorf("UpdateAt with nothing to write: %+v, %v; want generation %d", stats, err, now)
	}
	if stats, err := c.UpdateAt(cur, cur, gen); err != nil || stats.Generation != gen {
		t.Errorf("UpdateAt with nothing to write at a stale generation: %+v, %v; want generation %d back", stats, err, gen)
	}
	if now2, err := c.Generation(); err != nil || now2 != now {
		t.Errorf("generation %d after writing nothing, want %d (%v)", now2, now, err)
	}

	// The full replace at the current generation.
	stats, err = c.UpdateAt(cur, full, now)
	if err != nil {
		t.Fatalf("UpdateAt full replace at the current generation: %v", err)
	}
	if !stats.Full || stats.Generation != generation(t, c) || stats.Generation == now {
		t.Errorf("UpdateAt full replace: %+v, Generation says %d", stats, generation(t, c))
	}
	cur, gen = full, stats.Generation

	// A second writer of our own commits in between: a different table
	// through Apply.
	other := &Table{Family: FamilyInet, Name: "other", Chains: []*Chain{{Name: "c"}}}
	if _, err := c.Apply(other); err != nil {
		t.Fatal(err)
	}
	now = generation(t, c)
	listing = testns.ListTable(t, ns, "nftpolicy")
	next = clone(cur)
	setNamed(next, "plain-v4").Elements = nil
	_, err = c.UpdateAt(cur, next, gen)
	requireStale(t, err, "update table inet nftpolicy: kernel refused the batch: ", ns, c, listing, now)

	// Generation 0 is not checked.
	if _, err := c.UpdateAt(cur, next, 0); err != nil {
		t.Fatalf("UpdateAt unchecked: %v", err)
	}
	if d, err := c.Drift(next); err != nil || d != "" {
		t.Errorf("Drift after UpdateAt unchecked = %q, %v; want none", d, err)
	}
}

// checkDrift holds what Drift says of table to wanted: "" no drift, else
// a part of its description; what names the step in failures.
func checkDrift(t *testing.T, c *Conn, table *Table, what, wanted string) {
	t.Helper()
	got, err := c.Drift(table)
	switch {
	case err != nil:
		t.Errorf("%s: %v", what, err)
	case wanted == "" && got != "":
		t.Errorf("%s: drift %q, want none", what, got)
	case wanted != "" && !strings.Contains(got, wanted):
		t.Errorf("%s: drift %q, want one with %q", what, got, wanted)
	}
}

// checkDriftAfter programs table, has nft run edit in the namespace ns
// ("" nothing; "-f -" load the table's own rendering) and checks what
// Drift then says (checkDrift).
func checkDriftAfter(t *testing.T, ns string, c *Conn, table *Table, what, edit, wanted string) {
	t.Helper()
	if _, err := c.Apply(table); err != nil {
		t.Fatal(err)
	}
	switch edit {
	case "":
	case "-f -":
		testns.Nft(t, ns, Render(table), "-f", "-")
	default:
		testns.Nft(t, ns, edit, "-f", "-")
	}
	checkDrift(t, c, table, what, wanted)
}
