package nft

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// TestKernelChunkedSets: a set whose elements are in Chunks is written,
// listed, checked for drift and patched as the same set with Elements.
func TestKernelChunkedSets(t *testing.T) {
	var exact, ivl []Element
	a6, a4 := netip.MustParseAddr("fd00::"), netip.MustParseAddr("10.0.0.0")
	for range 1500 {
		a6 = a6.Next()
		exact = append(exact, Element{Addr: a6, Proto: ProtoTCP, Port: 80})
		a4 = a4.Next().Next() // gaps keep every address its own interval
		ivl = append(ivl, Element{Addr: a4})
	}
	table := func(exactChunks, ivlChunks [][]Element) *Table {
		return &Table{Family: FamilyInet, Name: "nftpolicy", Sets: []*Set{
			{Name: "np-v6", Key: KeyIPv6ProtoPort, Chunks: exactChunks},
			{Name: "peers-v4", Key: KeyIPv4, Interval: true, Chunks: ivlChunks},
		}}
	}
	chunkedTable := table(chunksOf(exact, 7, 1, 300), chunksOf(ivl, 255, 1, 512))
	flat := &Table{Family: FamilyInet, Name: "nftpolicy", Sets: []*Set{
		{Name: "np-v6", Key: KeyIPv6ProtoPort, Elements: exact},
		{Name: "peers-v4", Key: KeyIPv4, Interval: true, Elements: ivl},
	}}
	if Render(chunkedTable) != Render(flat) {
		t.Fatal("a chunked table renders otherwise than the same table with Elements")
	}
	if d := Diff(flat, chunkedTable); !d.Empty() {
		t.Fatalf("Diff(flat, chunked) = %s, want nothing", RenderDelta(d, chunkedTable))
	}
	// nft, given the text, loads what Apply writes.
	testns.AssertSameAsNft(t, "nftpolicy", applyIn(chunkedTable), Render(flat))

	ns, c := openTestNS(t)
	if _, err := c.Apply(chunkedTable); err != nil {
		t.Fatal(err)
	}
	if drift, err := c.Drift(flat); err != nil || drift != "" {
		t.Fatalf("Drift of the flat table after writing it chunked = %q, %v; want none", drift, err)
	}
	if drift, err := c.Drift(chunkedTable); err != nil || drift != "" {
		t.Fatalf("Drift of the chunked table = %q, %v; want none", drift, err)
	}

	// A patch that shares every chunk but one, as the compiler makes: one
	// element gone from the middle of the third chunk, one come after the
	// last. The delta holds those two only.
	chunks := slices.Clone(chunkedTable.Sets[0].Chunks)
	gone := chunks[2][10]
	chunks[2] = slices.Delete(slices.Clone(chunks[2]), 10, 11)
	came := Element{Addr: netip.MustParseAddr("fd00::ffff"), Proto: ProtoUDP, Port: 53}
	last := len(chunks) - 1
	chunks[last] = append(slices.Clone(chunks[last]), came)
	next := table(chunks, chunkedTable.Sets[1].Chunks)
	d := Diff(chunkedTable, next)
	if len(d.UpdateSets) != 1 {
		t.Fatalf("Diff = %s, want one set updated", RenderDelta(d, next))
	}
	if g, cm := d.UpdateSets[0].changes(); !slices.Equal(g, []Element{gone}) || !slices.Equal(cm, []Element{came}) {
		t.Fatalf("update -%v +%v, want -%v +%v", g, cm, gone, came)
	}
	if _, err := c.Update(chunkedTable, next); err != nil {
		t.Fatal(err)
	}
	want := slices.Concat(exact[:7+1+10], exact[7+1+11:], []Element{came})
	wantFlat := &Table{Family: FamilyInet, Name: "nftpolicy", Sets: []*Set{
		{Name: "np-v6", Key: KeyIPv6ProtoPort, Elements: want},
		{Name: "peers-v4", Key: KeyIPv4, Interval: true, Elements: ivl},
	}}
	if drift, err := c.Drift(wantFlat); err != nil || drift != "" {
		t.Fatalf("after the patch, drift from the expected set = %q, %v", drift, err)
	}
	if got := testns.Nft(t, ns, "", "list", "set", "inet", "nftpolicy", "np-v6"); !strings.Contains(got, "fd00::ffff . udp . 53") || strings.Contains(got, gone.Addr.String()+" . tcp . 80,") {
		t.Errorf("the kernel's np-v6 after the patch:\n%s", got)
	}
}
