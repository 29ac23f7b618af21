package conntrack_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/nftpolicy/nftpolicy/conntrack"
	"github.com/nftpolicy/nftpolicy/enforcer"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// The compiler-level cluster: node-1 with pods x/a 10.0.1.1, x/b 10.0.1.2
// and y/a 10.0.2.1 (IPv6 fd00::1:1 and so on), serving TCP 8080 and UDP 80.
const (
	xa = "10.0.1.1"
	xb = "10.0.1.2"
	ya = "10.0.2.1"
)

func clusterYAML() string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Node\nmetadata: {name: node-1}\n")
	for _, ns := range []string{"x", "y"} {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: %q, labels: {ns: %q}}\n", ns, ns)
	}
	for _, p := range []struct{ ns, name, v4, v6 string }{
		{"x", "a", xa, "fd00::1:1"}, {"x", "b", xb, "fd00::1:2"}, {"y", "a", ya, "fd00::2:1"},
	} {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Pod
metadata: {namespace: %q, name: %q, labels: {pod: %q}}
spec:
  nodeName: node-1
  containers: [{name: c}]
status:
  phase: Running
  podIPs: [{ip: %q}, {ip: %q}]
`, p.ns, p.name, p.name, p.v4, p.v6)
	}
	return b.String()
}

// allowTo is a policy isolating x/b for ingress and allowing TCP 8080 and
// UDP 80 from the namespaces named.
func allowTo(name string, namespaces ...string) string {
	return fmt.Sprintf(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: x, name: %s}
spec:
  podSelector: {matchLabels: {pod: b}}
  policyTypes: [Ingress]
  ingress:
    - from: [{namespaceSelector: {matchExpressions: [{key: ns, operator: In, values: [%s]}]}}]
      ports: [{protocol: TCP, port: 8080}, {protocol: UDP, port: 80}]
`, name, `"`+strings.Join(namespaces, `", "`)+`"`)
}

// compile compiles cluster plus documents for node-1, as the daemon would.
func compile(t testing.TB, node, cluster string, docs ...string) *nft.Table {
	t.Helper()
	return compileWith(t, enforcer.Options{Node: node}, cluster, docs...)
}

// compileWith is compile with other options.
func compileWith(t testing.TB, opts enforcer.Options, cluster string, docs ...string) *nft.Table {
	t.Helper()
	fsys := fstest.MapFS{"cluster.yaml": {Data: []byte(cluster)}}
	for i, d := range docs {
		fsys[fmt.Sprintf("doc%d.yaml", i)] = &fstest.MapFile{Data: []byte(d)}
	}
	snap, objErrs, err := k8s.LoadFS(fsys)
	if err != nil || len(objErrs) > 0 {
		t.Fatalf("load: %v %v", err, objErrs)
	}
	table, problems := enforcer.Compile(snap, opts)
	if len(problems) > 0 {
		t.Fatalf("compile: %v", problems)
	}
	return table
}

func tcp(src, dst string, port uint16) conntrack.Flow {
	return conntrack.Flow{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), Proto: nft.ProtoTCP, Dport: port}
}

func TestFlowOfTakesTheForwardHooksView(t *testing.T) {
	a := netip.MustParseAddr
	for _, tc := range []struct {
		name        string
		orig, reply conntrack.Tuple
		want        conntrack.Flow
	}{{
		name:  "plain",
		orig:  conntrack.Tuple{Src: a(xa), Dst: a(xb), Proto: nft.ProtoTCP, Sport: 40000, Dport: 8080},
		reply: conntrack.Tuple{Src: a(xb), Dst: a(xa), Proto: nft.ProtoTCP, Sport: 8080, Dport: 40000},
		want:  conntrack.Flow{Src: a(xa), Dst: a(xb), Proto: nft.ProtoTCP, Dport: 8080},
	}, {
		// A Service: the client sent to 10.96.0.10:80, DNAT made it x/b:8080,
		// and masquerade rewrote the source on the way out.
		name:  "DNAT and SNAT",
		orig:  conntrack.Tuple{Src: a(xa), Dst: a("10.96.0.10"), Proto: nft.ProtoUDP, Sport: 40000, Dport: 80},
		reply: conntrack.Tuple{Src: a(xb), Dst: a("192.168.0.1"), Proto: nft.ProtoUDP, Sport: 8080, Dport: 1234},
		want:  conntrack.Flow{Src: a(xa), Dst: a(xb), Proto: nft.ProtoUDP, Dport: 8080, DNAT: true},
	}, {
		// A pod hairpinned to itself through a Service: translated.
		name:  "hairpin",
		orig:  conntrack.Tuple{Src: a(xa), Dst: a("10.96.0.10"), Proto: nft.ProtoTCP, Sport: 40000, Dport: 80},
		reply: conntrack.Tuple{Src: a(xa), Dst: a(xa), Proto: nft.ProtoTCP, Sport: 8080, Dport: 40000},
		want:  conntrack.Flow{Src: a(xa), Dst: a(xa), Proto: nft.ProtoTCP, Dport: 8080, DNAT: true},
	}, {
		name:  "ICMP echo: a type, no port",
		orig:  conntrack.Tuple{Src: a(xa), Dst: a(xb), Proto: nft.ProtoICMP, ICMPType: 8},
		reply: conntrack.Tuple{Src: a(xb), Dst: a(xa), Proto: nft.ProtoICMP, ICMPType: 0},
		want:  conntrack.Flow{Src: a(xa), Dst: a(xb), Proto: nft.ProtoICMP, ICMPType: 8},
	}, {
		name:  "ICMPv6 echo",
		orig:  conntrack.Tuple{Src: a("fd00::1:1"), Dst: a("fd00::1:2"), Proto: nft.ProtoICMPv6, ICMPType: 128},
		reply: conntrack.Tuple{Src: a("fd00::1:2"), Dst: a("fd00::1:1"), Proto: nft.ProtoICMPv6, ICMPType: 129},
		want:  conntrack.Flow{Src: a("fd00::1:1"), Dst: a("fd00::1:2"), Proto: nft.ProtoICMPv6, ICMPType: 128},
	}, {
		name:  "GRE: no port",
		orig:  conntrack.Tuple{Src: a(xa), Dst: a(xb), Proto: 47, Sport: 1, Dport: 2},
		reply: conntrack.Tuple{Src: a(xb), Dst: a(xa), Proto: 47, Sport: 2, Dport: 1},
		want:  conntrack.Flow{Src: a(xa), Dst: a(xb), Proto: 47},
	}} {
		if got := conntrack.FlowOf(tc.orig, tc.reply); got != tc.want {
			t.Errorf("%s: FlowOf = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestChangeNarrowsOnlyWhatLostPermission(t *testing.T) {
	cluster := clusterYAML()
	open := compile(t, "node-1", cluster)                           // nobody isolated
	both := compile(t, "node-1", cluster, allowTo("web", "x", "y")) // x/b from x and y
	onlyY := compile(t, "node-1", cluster, allowTo("web", "y"))     // x/b from y only

	for _, tc := range []struct {
		name     string
		old, new *nft.Table
		flow     conntrack.Flow
		want     bool
	}{
		{"tightened: x/a to x/b", both, onlyY, tcp(xa, xb, 8080), true},
		{"still allowed: y/a to x/b", both, onlyY, tcp(ya, xb, 8080), false},
		{"widened: x/a to x/b", onlyY, both, tcp(xa, xb, 8080), false},
		{"denied before and after: x/a to x/b port 9", both, onlyY, tcp(xa, xb, 9), false},
		{"untouched: x/b to x/a", both, onlyY, tcp(xb, xa, 8080), false},
		{"untouched: x/a to y/a", both, onlyY, tcp(xa, ya, 8080), false},
		{"isolation: x/a to x/b port 9", open, onlyY, tcp(xa, xb, 9), true},
		{"no table before: every drop", nil, onlyY, tcp(xa, xb, 8080), true},
		{"UDP tightened", both, onlyY, conntrack.Flow{Src: netip.MustParseAddr(xa), Dst: netip.MustParseAddr(xb), Proto: nft.ProtoUDP, Dport: 80}, true},
		{"ICMP: a rule with ports never allowed it", both, onlyY, conntrack.Flow{Src: netip.MustParseAddr(xa), Dst: netip.MustParseAddr(xb), Proto: nft.ProtoICMP, ICMPType: 8}, false},
		{"ICMP: isolation takes it", open, onlyY, conntrack.Flow{Src: netip.MustParseAddr(xa), Dst: netip.MustParseAddr(xb), Proto: nft.ProtoICMP, ICMPType: 8}, true},
		{"IPv6 tightened", both, onlyY, tcp("fd00::1:1", "fd00::1:2", 8080), true},
		// x/b to itself through a Service: exempt in both tables; with no
		// table before (a start, a repair) the arrival link is unknown, and
		// a forged one must not survive: it goes.
		{"hairpin kept across a change", both, onlyY, hairpin(xb, 8080), false},
		{"hairpin judged without proof of its link, no table before", nil, onlyY, hairpin(xb, 8080), true},
	} {
		got, err := conntrack.NewChange(tc.old, tc.new).Narrows(tc.flow)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got != tc.want {
			t.Errorf("%s: Narrows(%+v) = %v, want %v", tc.name, tc.flow, got, tc.want)
		}
	}
}

func TestChangePrefilter(t *testing.T) {
	cluster := clusterYAML()
	open := compile(t, "node-1", cluster)
	onlyY := compile(t, "node-1", cluster, allowTo("web", "y"))

	if !conntrack.NewChange(open, open).Nothing() {
		t.Error("the same table twice: Nothing is false")
	}
	if !conntrack.NewChange(nil, open).Nothing() {
		t.Error("no isolated pod before or after: Nothing is false")
	}
	ch := conntrack.NewChange(open, onlyY)
	if ch.Nothing() {
		t.Error("x/b became isolated: Nothing is true")
	}
	if v4, v6 := ch.Families(); !v4 || !v6 {
		t.Errorf("Families = %v, %v; want both (x/b is dual-stack)", v4, v6)
	}
	if ch.Concerns(tcp(xb, xa, 80)) {
		t.Error("x/b is isolated for ingress only, yet its own outgoing flow is traced")
	}
	if !ch.Concerns(tcp(ya, xb, 80)) {
		t.Error("a flow to x/b is not traced")
	}

	// --default-deny-unknown drops addresses of the pod CIDR that are no
	// known pod: the prefilter keeps them as ranges rather than giving up
	// and tracing every flow of the host.
	deny := enforcer.Options{Node: "node-1", DenyUnknown: true, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.1.0/24")}}
	uch := conntrack.NewChange(compileWith(t, deny, cluster), compileWith(t, deny, cluster, allowTo("web", "y")))
	if uch.Concerns(tcp(ya, "10.0.3.1", 80)) {
		t.Error("with --default-deny-unknown, a flow between pods no rule can drop is traced")
	}
	if !uch.Concerns(tcp(ya, "10.0.1.9", 80)) || !uch.Concerns(tcp("10.0.1.9", ya, 80)) {
		t.Error("a flow to or from an unknown address of the pod CIDR is not traced")
	}
	if !uch.Concerns(tcp(ya, xb, 80)) {
		t.Error("with --default-deny-unknown, a flow to isolated x/b is not traced")
	}

	// A hand-built base chain that drops by other means than a dispatch
	// map: no address can be ruled out.
	drop := &nft.Table{Family: nft.FamilyInet, Name: "t", Chains: []*nft.Chain{{
		Name: "filter-forward",
		Hook: &nft.Hook{Type: "filter", Hook: "forward", Policy: nft.Accept},
		Rules: []nft.Rule{{Exprs: []nft.Expr{
			nft.AddrEq{Field: nft.Daddr, Addr: netip.MustParseAddr("192.0.2.1")}, nft.Verdict{Kind: nft.Drop},
		}}},
	}}}
	ch = conntrack.NewChange(nil, drop)
	if ch.Nothing() || !ch.Concerns(tcp("198.51.100.1", "192.0.2.1", 80)) {
		t.Error("a drop rule outside the dispatch maps is not traced")
	}
	if got, err := ch.Narrows(tcp("198.51.100.1", "192.0.2.1", 80)); err != nil || !got {
		t.Errorf("Narrows = %v, %v; want true", got, err)
	}
}

// hairpin is a pod's connection to itself through a Service.
func hairpin(addr string, port uint16) conntrack.Flow {
	f := tcp(addr, addr, port)
	f.DNAT = true
	return f
}

// TestChangeRevokedBit: a table compiled with Options.Revoke names the bit
// the cleanup marks revoked flows with; its revoke rule never drops a
// first packet, so the prefilter still rules out what no map holds; and
// Allows says which marked flows the new table gives back.
func TestChangeRevokedBit(t *testing.T) {
	cluster := clusterYAML()
	revoke := func(mask uint32, docs ...string) *nft.Table {
		return compileWith(t, enforcer.Options{Node: "node-1", Revoke: true, MarkMask: mask}, cluster, docs...)
	}
	for _, tc := range []struct {
		mask, want uint32
	}{{0, 0x4}, {0x4, 0x4}, {0x00300000, 0x00200000}} {
		if got := conntrack.RevokedBit(revoke(tc.mask)); got != tc.want || got != enforcer.RevokedBit(tc.mask) {
			t.Errorf("mask 0x%x: RevokedBit = 0x%x, want 0x%x", tc.mask, got, tc.want)
		}
	}
	if got := conntrack.RevokedBit(compile(t, "node-1", cluster)); got != 0 {
		t.Errorf("without Options.Revoke: RevokedBit = 0x%x, want 0", got)
	}
	// A revoke rule after the established accept would come too late.
	late := revoke(0)
	fwd := *late.Chains[0]
	fwd.Rules = append(append([]nft.Rule{}, fwd.Rules[1:2]...), append([]nft.Rule{fwd.Rules[0]}, fwd.Rules[2:]...)...)
	if got := conntrack.RevokedBit(&nft.Table{Family: late.Family, Name: late.Name, Chains: []*nft.Chain{&fwd}, Sets: late.Sets}); got != 0 {
		t.Errorf("a revoke rule after the established accept: RevokedBit = 0x%x, want 0", got)
	}

	open, both, onlyY := revoke(0), revoke(0, allowTo("web", "x", "y")), revoke(0, allowTo("web", "y"))
	if !conntrack.NewChange(nil, open).Nothing() {
		t.Error("no isolated pod before or after, with the revoke rule: Nothing is false")
	}
	ch := conntrack.NewChange(both, onlyY)
	if ch.Revoked() != 0x4 || ch.Concerns(tcp(xa, ya, 8080)) {
		t.Errorf("Revoked = 0x%x, Concerns(x/a → y/a) = %v; want 0x4 and false", ch.Revoked(), ch.Concerns(tcp(xa, ya, 8080)))
	}
	for _, tc := range []struct {
		name     string
		old, new *nft.Table
		flow     conntrack.Flow
		want     bool
	}{
		{"widened: x/a to x/b", onlyY, both, tcp(xa, xb, 8080), true},
		{"still denied: x/a to x/b", onlyY, onlyY, tcp(xa, xb, 8080), false},
		{"isolation gone", onlyY, open, tcp(xa, xb, 8080), true},
		{"no table before, x/b not isolated", nil, open, tcp(xa, xb, 9), true},
		{"no table before, denied", nil, onlyY, tcp(xa, xb, 9), false},
	} {
		got, err := conntrack.NewChange(tc.old, tc.new).Allows(tc.flow)
		if err != nil || got != tc.want {
			t.Errorf("%s: Allows = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}

// TestChangeJudgesHairpinsAlike: a mark never stands for a judgement that
// depends on the link a hairpin came in on. With no table before, x/b's
// connection to itself through a Service is judged as coming in elsewhere
// and dropped; the cleanup hands it to the kernel (ByLink: deleted, its
// next packet judged with its link) instead of marking it. A marked
// hairpin (an earlier version marked them) is restored only if the table
// accepts it from any link: restoring it because its own link would be
// exempt, at a later change, let one forged while no table was there come
// back. A Recheck judges unmarked hairpins on their own link, as the
// kernel did when they started under the table.
func TestChangeJudgesHairpinsAlike(t *testing.T) {
	cluster := clusterYAML()
	opts := enforcer.Options{Node: "node-1", Revoke: true}
	both := compileWith(t, opts, cluster, allowTo("web", "x", "y"))
	onlyY := compileWith(t, opts, cluster, allowTo("web", "y"))
	self := compileWith(t, opts, cluster, allowTo("web", "x", "y"), `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: x, name: self}
spec:
  podSelector: {matchLabels: {pod: b}}
  policyTypes: [Ingress]
  ingress: [{from: [{podSelector: {matchLabels: {pod: b}}}]}]
`)
	hp := hairpin(xb, 8080)
	check := func(name string, got bool, err error, want bool) {
		t.Helper()
		if err != nil || got != want {
			t.Errorf("%s = %v, %v; want %v", name, got, err, want)
		}
	}
	start := conntrack.NewChange(nil, onlyY)
	got, err := start.Narrows(hp)
	check("start: Narrows(hairpin)", got, err, true)
	got, err = start.ByLink(hp)
	check("start: ByLink(hairpin)", got, err, true)
	got, err = start.ByLink(tcp(xa, xb, 8080))
	check("start: ByLink(x/a → x/b)", got, err, false)

	change := conntrack.NewChange(both, onlyY)
	got, err = change.Allows(hp)
	check("a later change: Allows(marked hairpin)", got, err, false)
	got, err = change.ByLink(hp)
	check("a later change: ByLink(marked hairpin)", got, err, true)
	got, err = change.Narrows(hp)
	check("a later change: Narrows(unmarked hairpin)", got, err, false)
	got, err = conntrack.NewChange(onlyY, self).Allows(hp)
	check("x/b admits itself: Allows(marked hairpin)", got, err, true)
	got, err = conntrack.NewChange(onlyY, self).ByLink(hp)
	check("x/b admits itself: ByLink(hairpin)", got, err, false)

	re := conntrack.Recheck(onlyY)
	got, err = re.Narrows(hp)
	check("recheck: Narrows(unmarked hairpin)", got, err, false)
	got, err = re.Narrows(tcp(xa, xb, 8080))
	check("recheck: Narrows(x/a → x/b)", got, err, true)
	got, err = re.Narrows(tcp(ya, xb, 8080))
	check("recheck: Narrows(y/a → x/b)", got, err, false)
	if re.Nothing() {
		t.Error("recheck of a table isolating x/b: Nothing is true")
	}
}
