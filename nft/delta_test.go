package nft

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), got); d != "" {
		t.Errorf("%s (-want +got):\n%s", path, d)
	}
}

// changedSample is sampleTable after a change that exercises every part
// of a delta: a chain added, two rewritten, one deleted; a set added, one
// deleted, and elements added to and removed from an interval set, a
// verdict map and a concatenated set.
func changedSample() *Table {
	a := netip.MustParseAddr
	t := clone(sampleTable())
	t.Sets = append(t.Sets, &Set{Name: "peers-y-v6", Comment: "y/new ingress[0] peers", Key: KeyIPv6, Interval: true, Elements: []Element{
		{Addr: a("fd00::"), Last: a("fd00::ff")},
	}})
	peers := setNamed(t, "peers-v4")
	peers.Elements = []Element{
		{Addr: a("10.0.0.0"), Last: a("10.0.0.255")},
		{Addr: a("10.2.0.0"), Last: a("10.2.0.6")},
		{Addr: a("10.3.0.0"), Last: a("10.3.255.255")},
		{Addr: a("10.255.255.255"), Last: a("255.255.255.255")},
	}
	pods := setNamed(t, "pods-v4")
	pods.Elements = append(pods.Elements, Element{Addr: a("10.0.0.2"), Verdict: Verdict{Kind: Goto, Chain: "np-y/new"}})
	setNamed(t, "np-v6").Elements = []Element{{Addr: a("fd00::2"), Proto: ProtoTCP, Port: 443}}
	t.Sets = slicesDelete(t.Sets, "plain-v4")
	// An element's port range grows over the old one (deleted before the
	// new one is added, or the kernel would find them overlapping), one
	// goes, one comes, and verdicts to leaf, which goes, turn elsewhere.
	setNamed(t, "ports-v4").Elements = []Element{
		{Addr: a("10.0.0.0"), Last: a("10.0.0.255"), Proto: ProtoTCP, Port: 80, PortLast: 90, Verdict: Verdict{Kind: Drop}},
		{Addr: a("10.0.1.5"), Proto: ProtoUDP, Port: 53, Verdict: Verdict{Kind: Accept}},
		{Addr: a("10.0.3.1"), Proto: ProtoICMP, Port: 0, PortLast: 65535, Verdict: Verdict{Kind: Goto, Chain: "np-y/new"}},
		{Addr: a("10.0.4.0"), Last: a("10.0.4.255"), Proto: ProtoTCP, Port: 22, Verdict: Verdict{Kind: Continue}},
		{Addr: a("10.1.0.0"), Last: a("10.1.255.255"), Proto: 0, ProtoLast: 255, Port: 0, PortLast: 65535, Verdict: Verdict{Kind: Jump, Chain: "pod-x/a"}},
		{Addr: a("10.2.0.0"), Last: a("10.2.0.255"), Proto: ProtoTCP, ProtoLast: ProtoUDP, Port: 0, PortLast: 65535, Verdict: Verdict{Kind: Drop}},
	}
	setNamed(t, "ports-v6").Elements[2].Verdict = Verdict{Kind: Goto, Chain: "np-y/new"}
	// An exact map: a verdict changes, a port changes (one key out,
	// another in), one goes, one comes, and those to leaf turn elsewhere.
	setNamed(t, "svc-v4").Elements = []Element{
		{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 80, Verdict: Verdict{Kind: Drop}},
		{Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 8081, Verdict: Verdict{Kind: Drop}},
		{Addr: a("10.0.0.1"), Proto: ProtoUDP, Port: 53, Verdict: Verdict{Kind: Jump, Chain: "np-y/new"}},
		{Addr: a("10.0.0.2"), Proto: ProtoSCTP, Port: 443, Verdict: Verdict{Kind: Goto, Chain: "np-y/new"}},
		{Addr: a("10.0.0.4"), Proto: ProtoTCP, Port: 1, Verdict: Verdict{Kind: Return}},
		{Addr: a("10.0.0.5"), Proto: ProtoTCP, Port: 65535, Verdict: Verdict{Kind: Continue}},
		{Addr: a("10.0.0.6"), Proto: ProtoUDP, Port: 5353, Verdict: Verdict{Kind: Accept}},
	}
	setNamed(t, "svc-v6").Elements = []Element{
		{Addr: a("fd00::1"), Proto: ProtoTCP, Port: 80, Verdict: Verdict{Kind: Accept}},
		{Addr: a("fd00::1"), Proto: ProtoUDP, Port: 53, Verdict: Verdict{Kind: Goto, Chain: "np-y/new"}},
	}

	t.Chains = append(t.Chains[:len(t.Chains)-1], &Chain{Name: "np-y/new", Rules: []Rule{
		{Exprs: []Expr{AddrInSet{Family: IPv6, Field: Saddr, Set: "peers-y-v6"}, L4ProtoEq{ProtoTCP}, Verdict{Kind: Accept}}, Comment: "y/new ingress[0]"},
		{Exprs: []Expr{Verdict{Kind: Drop}}},
	}}) // leaf goes
	allow := chainNamed(t, "np-x/allow")
	allow.Rules[2] = Rule{Exprs: []Expr{Verdict{Kind: Jump, Chain: "np-y/new"}}}
	pod := chainNamed(t, "pod-x/a")
	pod.Rules = pod.Rules[1:]
	return t
}

func slicesDelete(sets []*Set, name string) []*Set {
	var out []*Set
	for _, s := range sets {
		if s.Name != name {
			out = append(out, s)
		}
	}
	return out
}

// TestRenderDelta: the text form of a delta, against golden files. The
// kernel test TestKernelRenderDeltaIsWhatIsSent checks that the same text
// loaded with nft does what the delta does.
func TestRenderDelta(t *testing.T) {
	hookMoved := clone(sampleTable())
	base := *hookMoved.Chains[0]
	hook := *base.Hook
	hook.Priority = -5
	base.Hook = &hook
	hookMoved.Chains[0] = &base

	for _, tc := range []struct {
		golden   string
		old, new *Table
	}{
		{"delta-full.nft", nil, sampleTable()},
		{"delta-change.nft", sampleTable(), changedSample()},
		{"delta-change-back.nft", changedSample(), sampleTable()},
		{"delta-hook.nft", sampleTable(), hookMoved},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			golden(t, tc.golden, RenderDelta(Diff(tc.old, tc.new), tc.new))
		})
	}
	if got := RenderDelta(Diff(sampleTable(), sampleTable()), sampleTable()); got != "" {
		t.Errorf("an empty delta renders as %q, want nothing", got)
	}
}

// TestRenderDeltaExact: an exact set update prints the elements it
// carries, in its order, without comparing the two sets.
func TestRenderDeltaExact(t *testing.T) {
	a := netip.MustParseAddr
	old := &Set{Name: "s", Key: KeyIPv4, Elements: []Element{{Addr: a("10.0.0.1")}, {Addr: a("10.0.0.2")}}}
	new := &Set{Name: "s", Key: KeyIPv4, Elements: []Element{{Addr: a("10.0.0.2")}, {Addr: a("10.0.0.3")}, {Addr: a("10.0.0.4")}}}
	d := &Delta{UpdateSets: []SetUpdate{{Old: old, New: new, Exact: true,
		Removed: []Element{{Addr: a("10.0.0.1")}},
		Added:   []Element{{Addr: a("10.0.0.4")}, {Addr: a("10.0.0.3")}},
	}}}
	want := "delete element inet t s { 10.0.0.1 }\n" +
		"add element inet t s { 10.0.0.4, 10.0.0.3 }\n"
	if got := RenderDelta(d, &Table{Family: FamilyInet, Name: "t"}); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
