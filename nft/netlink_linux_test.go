package nft

import (
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// requireRoot fails in CI (where kernel tests must run) and skips elsewhere.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("kernel tests need root, and CI must run them")
	}
	t.Skip("kernel tests need root")
}

// newNetns creates a throwaway network namespace, removed when the test ends.
func newNetns(t *testing.T) string {
	t.Helper()
	requireRoot(t)
	b := make([]byte, 4)
	rand.Read(b)
	name := "nftpt-" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	return name
}

func nftIn(t *testing.T, netns, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", netns, "nft"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nft %v in %s: %v\n%s", args, netns, err, out)
	}
	return string(out)
}

// sampleTable uses every expression and set kind of the model.
func sampleTable() *Table {
	a := netip.MustParseAddr
	return &Table{
		Family: FamilyInet,
		Name:   "nftpolicy",
		Sets: []*Set{
			{Name: "peers-v4", Comment: "x/allow ingress[0] peers", Key: KeyIPv4, Interval: true, Elements: []Element{
				{Addr: a("10.0.0.0"), Last: a("10.0.0.255")},
				{Addr: a("10.1.0.1")},
				{Addr: a("10.2.0.0"), Last: a("10.2.0.6")},
				{Addr: a("10.255.255.255"), Last: a("255.255.255.255")},
			}},
			{Name: "peers-v6", Key: KeyIPv6, Interval: true, Elements: []Element{
				{Addr: a("::"), Last: a("fd00::ffff")},
			}},
			{Name: "plain-v4", Key: KeyIPv4, Elements: []Element{{Addr: a("10.9.9.9")}}},
			{Name: "np-v4", Key: KeyIPv4ProtoPort, Elements: []Element{{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 8080}}},
			{Name: "np-v6", Key: KeyIPv6ProtoPort, Elements: []Element{{Addr: a("fd00::1"), Proto: ProtoUDP, Port: 53}}},
			{Name: "pods-v4", Key: KeyIPv4, Verdict: true, Elements: []Element{{Addr: a("10.0.0.1"), Verdict: Verdict{Kind: Jump, Chain: "pod-x/a"}}}},
			{Name: "pods-v6", Key: KeyIPv6, Verdict: true},
		},
		Chains: []*Chain{
			{Name: "filter-forward", Hook: &Hook{Type: "filter", Hook: "forward", Priority: -1, Policy: Accept}, Rules: []Rule{
				{Exprs: []Expr{CtStateEstablishedRelated{}, Verdict{Kind: Accept}}},
				{Exprs: []Expr{AddrVmap{Family: IPv4, Field: Daddr, Map: "pods-v4"}}},
				{Exprs: []Expr{AddrVmap{Family: IPv6, Field: Saddr, Map: "pods-v6"}}},
			}},
			{Name: "pod-x/a", Rules: []Rule{
				{Exprs: []Expr{AddrEq{Field: Saddr, Addr: a("10.0.0.1")}, Verdict{Kind: Return}}},
				{Exprs: []Expr{AddrEq{Field: Daddr, Addr: a("fd00::1")}, Verdict{Kind: Return}}},
				{Exprs: []Expr{Verdict{Kind: Jump, Chain: "np-x/allow"}}},
				{Exprs: []Expr{MarkBitsSet{Bits: 0x40}, SetMark{Clear: 0x40}, Verdict{Kind: Return}}},
				{Exprs: []Expr{Verdict{Kind: Drop}}, Comment: "x/a: no policy allows"},
			}},
			{Name: "np-x/allow", Rules: []Rule{
				{Exprs: []Expr{AddrInSet{Family: IPv4, Field: Saddr, Set: "peers-v4"}, L4ProtoEq{ProtoTCP}, DportRange{80, 80}, SetMark{Clear: 0xc0, Set: 0x40}, Verdict{Kind: Return}}, Comment: "x/allow ingress[0]"},
				{Exprs: []Expr{AddrInSet{Family: IPv6, Field: Saddr, Set: "peers-v6"}, L4ProtoEq{ProtoSCTP}, DportRange{80, 90}, SetMark{Clear: 0x40, Set: 0x40}, Verdict{Kind: Return}}},
				{Exprs: []Expr{AddrInSet{Family: IPv4, Field: Daddr, Set: "plain-v4"}, Verdict{Kind: Goto, Chain: "leaf"}}},
				{Exprs: []Expr{AddrProtoPortInSet{Family: IPv4, Field: Daddr, Set: "np-v4"}, SetMark{Clear: 0x40, Set: 0x40}, Verdict{Kind: Return}}},
				{Exprs: []Expr{AddrProtoPortInSet{Family: IPv6, Field: Daddr, Set: "np-v6"}, Verdict{Kind: Return}}},
				{Exprs: []Expr{L4ProtoEq{ProtoUDP}, Verdict{Kind: Return}}},
			}},
			{Name: "leaf"},
		},
	}
}

// assertSameAsNft is the oracle of the kernel tests: the table written over
// netlink must list exactly as the rendered text loaded by nft itself, and
// list cleanly.
func assertSameAsNft(t *testing.T, table *Table) string {
	t.Helper()
	ours, theirs := newNetns(t), newNetns(t)
	c, err := Open(ours)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Apply(table); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	nftIn(t, theirs, Render(table), "-f", "-")
	got := nftIn(t, ours, "", "list", "table", "inet", table.Name)
	want := nftIn(t, theirs, "", "list", "table", "inet", table.Name)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("netlink table differs from nft -f of the rendered text (-nft +netlink):\n%s", d)
	}
	for _, bad := range []string{"unknown", "unsupported", "[invalid"} {
		if strings.Contains(got, bad) {
			t.Errorf("nft list prints %q:\n%s", bad, got)
		}
	}
	return got
}

func TestKernelApplyMatchesNft(t *testing.T) {
	assertSameAsNft(t, sampleTable())
}

func TestKernelApplyReplacesAtomically(t *testing.T) {
	ns := newNetns(t)
	c, err := Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Apply(sampleTable()); err != nil {
		t.Fatal(err)
	}
	before := nftIn(t, ns, "", "list", "table", "inet", "nftpolicy")

	// A rule naming a chain that does not exist makes the kernel refuse the
	// batch (ENOENT); the table programmed before must survive untouched.
	broken := sampleTable()
	broken.Chains[1].Rules = append(broken.Chains[1].Rules, Rule{Exprs: []Expr{Verdict{Kind: Jump, Chain: "no-such-chain"}}})
	if err := c.Apply(broken); err == nil {
		t.Fatal("Apply of a table jumping to a missing chain succeeded")
	}
	// An encoding error (a set the rule names is missing) never reaches the kernel.
	broken = sampleTable()
	broken.Sets = broken.Sets[1:]
	if err := c.Apply(broken); err == nil || !strings.Contains(err.Error(), "peers-v4") {
		t.Fatalf("Apply with a missing set: got %v, want an error naming the set", err)
	}
	if after := nftIn(t, ns, "", "list", "table", "inet", "nftpolicy"); after != before {
		t.Errorf("a refused batch changed the table:\n%s", cmp.Diff(before, after))
	}

	st, err := c.ReadTable("nftpolicy")
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Chains["pod-x/a"]; len(got) != 5 || got[4] != "x/a: no policy allows" {
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
	ns := newNetns(t)
	c, err := Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Apply(table); err != nil {
		t.Fatal(err)
	}
	st, err := c.ReadTable("nftpolicy")
	if err != nil {
		t.Fatal(err)
	}
	if st.Sets["big-v6"] != 3000 {
		t.Errorf("big-v6 holds %d elements, want 3000", st.Sets["big-v6"])
	}
}
