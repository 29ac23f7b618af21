package enforcer

import (
	"crypto/sha256"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// flowLogged returns snap with the namespaces named annotated for flow logs.
func flowLogged(snap *k8s.Snapshot, names ...string) *k8s.Snapshot {
	out := *snap
	out.Namespaces = slices.Clone(snap.Namespaces)
	for i, ns := range out.Namespaces {
		if slices.Contains(names, ns.Name) {
			ns = ns.DeepCopy()
			ns.Annotations = map[string]string{k8s.FlowLogAnnotation: "true"}
			out.Namespaces[i] = ns
		}
	}
	return &out
}

var flowOpts = Options{Node: testNode, Counters: true, FlowLog: FlowLog{Group: 100}}

// flowSnap: x/allow-y lets namespace y reach x/a on TCP 80 and 81 (rule 1),
// x/deny isolates every pod of x for ingress; z/deny isolates z's pods.
func flowSnap() *k8s.Snapshot {
	return cluster(
		policy("x", "allow-y", selecting("a"), ingressRule(peers(podPeer("zzz"))), ingressRule(peers(nsPeer("y")), port(tcp, 80), port(tcp, 81))),
		policy("x", "deny", denyIngress),
		policy("z", "deny", denyIngress),
	)
}

var prefixRe = regexp.MustCompile(`log prefix "([^"]+)" group 100`)

// prefixes lists the log prefixes of chain, in order.
func prefixes(t *testing.T, table *nft.Table, chainPrefix string) []string {
	t.Helper()
	var out []string
	for _, ch := range table.Chains {
		if !strings.HasPrefix(ch.Name, chainPrefix) {
			continue
		}
		for _, r := range ch.Rules {
			if m := prefixRe.FindStringSubmatch(nft.RenderRule(r)); m != nil {
				out = append(out, m[1])
			}
		}
	}
	return out
}

// Only the chains of an annotated namespace log: each allowing rule of its
// policies is preceded by its log rule (the same match, our bit clear, a
// limit), and each of its isolated pods' chains logs before its drop. A
// namespace without the annotation logs nothing; --flow-log logs all.
func TestFlowLogRules(t *testing.T) {
	table, problems := Compile(flowLogged(flowSnap(), "x"), flowOpts)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	allow := chainNamed(t, table, "ingress-", "x/allow-y")
	var rendered []string
	for _, r := range allow.Rules {
		rendered = append(rendered, nft.RenderRule(r))
	}
	id := regexp.MustCompile(`nftpolicy:allow:([0-9a-f]{8}):`).FindStringSubmatch(strings.Join(rendered, "\n"))
	if id == nil {
		t.Fatalf("no allow log rule in:\n%s", strings.Join(rendered, "\n"))
	}
	want := []string{
		// Rule 0's peers (no pod) come through a set; rule 1's too.
		`meta mark & 0x00000004 == 0x00000000 ip saddr @PEERS0-v4 limit rate 20/second burst 40 packets log prefix "nftpolicy:allow:ID:0" group 100 comment "x/allow-y ingress[0]"`,
		`ip saddr @PEERS0-v4 counter meta mark set meta mark & 0xfffffffb | 0x00000004 return comment "x/allow-y ingress[0]"`,
	}
	peers0 := regexp.MustCompile(`@(peers-[0-9a-f]+)-v4`).FindStringSubmatch(rendered[0])
	if peers0 == nil {
		t.Fatalf("no peer set in %q", rendered[0])
	}
	for i, w := range want {
		w = strings.NewReplacer("ID", id[1], "PEERS0", peers0[1]).Replace(w)
		if rendered[i] != w {
			t.Errorf("rule %d:\n got %s\nwant %s", i, rendered[i], w)
		}
	}
	// Every allowing rule has its log rule right before it, with its index.
	for i, r := range allow.Rules {
		if i%2 == 0 {
			if !strings.Contains(rendered[i], "log prefix") || allow.Rules[i+1].Comment != r.Comment {
				t.Errorf("rule %d is no log rule for the next one: %s", i, rendered[i])
			}
		} else if strings.Contains(rendered[i], "log prefix") {
			t.Errorf("rule %d logs where it should allow: %s", i, rendered[i])
		}
	}
	if n := len(prefixes(t, table, "ingress-pod-")); n != 3 {
		t.Errorf("%d pod chains of x log their drop, want 3 (x/a, x/b, x/c)", n)
	}
	pod := chainNamed(t, table, "ingress-pod-", "x/a")
	last := pod.Rules[len(pod.Rules)-2:]
	if got := nft.RenderRule(last[0]); !regexp.MustCompile(`^limit rate 20/second burst 40 packets log prefix "nftpolicy:deny:[0-9a-f]{8}" group 100$`).MatchString(got) {
		t.Errorf("the rule before x/a's drop is %q, want its deny log", got)
	}
	if got := nft.RenderRule(last[1]); !strings.HasPrefix(got, "counter drop") {
		t.Errorf("x/a's chain ends with %q, want its drop", got)
	}
	for _, name := range []string{"z/deny", "z/a"} {
		for _, ch := range table.Chains {
			if strings.HasSuffix(ch.Name, name) && len(prefixes(t, table, ch.Name)) > 0 {
				t.Errorf("chain %s of namespace z, not annotated, logs", ch.Name)
			}
		}
	}

	all := flowOpts
	all.FlowLog.All = true
	table, _ = Compile(flowSnap(), all)
	if n := len(prefixes(t, table, "ingress-pod-")); n != 6 {
		t.Errorf("--flow-log: %d pod chains log, want 6 (x and z)", n)
	}
	off := flowOpts
	off.FlowLog.Group = 0
	table, _ = Compile(flowLogged(flowSnap(), "x", "z"), off)
	if p := prefixes(t, table, ""); len(p) > 0 {
		t.Errorf("group 0 (flow logs off), annotated namespaces log: %q", p)
	}
}

func chainNamed(t *testing.T, table *nft.Table, prefix, suffix string) *nft.Chain {
	t.Helper()
	for _, ch := range table.Chains {
		if strings.HasPrefix(ch.Name, prefix) && strings.HasSuffix(ch.Name, "-"+suffix) {
			return ch
		}
	}
	t.Fatalf("no chain %s…%s", prefix, suffix)
	return nil
}

// Logging never changes a verdict: every connection between the test
// pods gets the same verdict with flow logs on everywhere as without.
func TestFlowLogKeepsVerdicts(t *testing.T) {
	snap := flowLogged(flowSnap(), "x", "y", "z")
	plain, _ := Compile(snap, Options{Node: testNode, Counters: true})
	logged, _ := Compile(snap, flowOpts)
	if nft.Render(plain) == nft.Render(logged) {
		t.Fatal("the test compiled no log rule")
	}
	want := verdicts(t, plain, snap)
	if d := cmp.Diff(want, verdicts(t, logged, snap)); d != "" {
		t.Errorf("verdicts with flow logs differ (-without +with):\n%s", d)
	}
	// Nor does a flood that exhausts every limit.
	if d := cmp.Diff(verdictsOverLimit(t, plain, snap), verdictsOverLimit(t, logged, snap)); d != "" {
		t.Errorf("verdicts with flow logs over their limits differ (-without +with):\n%s", d)
	}
}

// verdictsOverLimit lists, as verdicts does, the connections between the
// pods of snap that table allows with every limit exhausted.
func verdictsOverLimit(t *testing.T, table *nft.Table, snap *k8s.Snapshot) []string {
	t.Helper()
	var ips []netip.Addr
	for _, p := range snap.Pods {
		for _, ip := range p.Status.PodIPs {
			ips = append(ips, netip.MustParseAddr(ip.IP))
		}
	}
	var out []string
	for _, src := range ips {
		for _, dst := range ips {
			if src.Is4() != dst.Is4() {
				continue
			}
			for _, port := range []uint16{80, 81, 8000} {
				pkt := nft.Packet{Src: src, Dst: dst, Proto: nft.ProtoTCP, Dport: port, Mark: otherMark, DNAT: src == dst, OverLimit: true}
				if traceAllowed(t, table, pkt) {
					out = append(out, fmt.Sprint(src, " ", dst, " ", port))
				}
			}
		}
	}
	return out
}

// Turning a namespace's annotation on and off gives, incrementally, the
// table a full compile gives.
func TestFlowLogToggleIncremental(t *testing.T) {
	c := NewCompiler(flowOpts)
	for i, snap := range []*k8s.Snapshot{flowSnap(), flowLogged(flowSnap(), "x"), flowLogged(flowSnap(), "z"), flowSnap(), flowLogged(flowSnap(), "x", "z")} {
		got, _ := c.Compile(snap, DefaultPriority)
		want, _ := Compile(snap, flowOpts)
		if d := cmp.Diff(nft.Render(want), nft.Render(got)); d != "" {
			t.Fatalf("step %d: incremental differs from full (-full +incremental):\n%s", i, d)
		}
	}
}

func newFlowSyncer(t *testing.T, opts Options) *Syncer {
	t.Helper()
	s := newSyncer(fakeKernel{nft.NewFake()}, opts, PrioritySetting{Auto: true}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	t.Cleanup(func() {
		s.StopWatchingCommits()
		s.Close()
	})
	return s
}

// The resolver names each prefix of the table: the policy, its rule index
// and direction for an allow, the isolated pod for a deny, and the pods
// of both addresses. A prefix whose chain went still resolves until it
// expires; one nftpolicy never wrote does not.
func TestFlowResolver(t *testing.T) {
	s := newFlowSyncer(t, flowOpts)
	snap := flowLogged(flowSnap(), "x")
	res, err := s.Sync(snap)
	if err != nil {
		t.Fatal(err)
	}
	r := NewFlowResolver(s)
	if !r.Logging() {
		t.Error("Logging() is false with a logged namespace")
	}
	ya, _ := podIPs("y", "a")
	xa, _ := podIPs("x", "a")
	allowPrefix := prefixes(t, res.Table, "ingress-")[2] // x/allow-y ingress[1], first port
	denyPrefix := prefixes(t, res.Table, "ingress-pod-")[0]
	check := func(when, prefix string, want Flow, wantOK bool) {
		t.Helper()
		got, ok := r.Resolve(prefix, ya, xa)
		if ok != wantOK || got != want {
			t.Errorf("%s: Resolve(%q) = %+v, %v; want %+v, %v", when, prefix, got, ok, want, wantOK)
		}
	}
	allowed := Flow{Verdict: "allow", Direction: "ingress", Policy: "x/allow-y", Rule: 1, Pod: "x/a", SrcPod: "y/a", DstPod: "x/a"}
	denied := Flow{Verdict: "deny", Direction: "ingress", Rule: -1, Pod: "x/a", SrcPod: "y/a", DstPod: "x/a"}
	unknown := Flow{Rule: -1, SrcPod: "y/a", DstPod: "x/a"}
	check("synced", allowPrefix, allowed, true)
	check("synced", denyPrefix, denied, true)
	check("synced", "nftpolicy:allow:00000000:1", unknown, false)
	check("synced", "someone else's", unknown, false)
	check("synced", strings.Replace(denyPrefix, "deny", "allow", 1)+":0", unknown, false)

	// The annotation goes: the chains stop logging, the identifiers stay
	// for the packets already logged, then expire.
	t0 := time.Now()
	r.Expire(t0)
	if _, err := s.Sync(flowSnap()); err != nil {
		t.Fatal(err)
	}
	if r.Logging() {
		t.Error("Logging() is true with no logged namespace")
	}
	r.Expire(t0.Add(time.Second))
	check("just after the annotation went", allowPrefix, allowed, true)
	check("just after the annotation went", denyPrefix, denied, true)
	r.Expire(t0.Add(flowIDRetention + 2*time.Second))
	check("after the retention", allowPrefix, unknown, false)
	check("after the retention", denyPrefix, unknown, false)
}

// Identifiers are unique by construction: keys whose short hashes
// collide get longer ones, and a retired identifier is no other key's
// until it expires.
func TestFlowIDsUnique(t *testing.T) {
	f := newFlowIDs()
	f.reg.sum = func(string) [sha256.Size]byte { return [sha256.Size]byte{1, 2, 3, 4} } // every key collides
	a := f.acquire("a")
	f.retire("a", 1)
	b := f.acquire("b")
	if a == b {
		t.Fatalf("b took a's retired identifier %s", a)
	}
	if key, _ := f.lookup(a); key != "a" {
		t.Errorf("retired %s names %q, want a", a, key)
	}
	if again := f.acquire("a"); again != a {
		t.Errorf("a came back as %s, want %s", again, a)
	}
	f.expire(5)
	if key, _ := f.lookup(a); key != "a" {
		t.Errorf("a, back in use, expired: %s names %q", a, key)
	}
	f.retire("a", 6)
	f.expire(6)
	if key, ok := f.lookup(a); ok {
		t.Errorf("expired %s still names %q", a, key)
	}
	if key, _ := f.lookup(b); key != "b" {
		t.Errorf("%s names %q, want b", b, key)
	}
}

// A connection two policies allow is logged once, by the first: the log
// rule of every later one finds our bit set.
func TestFlowLogOncePerConnection(t *testing.T) {
	snap := flowLogged(cluster(
		policy("x", "p1", selecting("a"), ingressRule(peers(nsPeer("y")), port(tcp, 80))),
		policy("x", "p2", selecting("a"), ingressRule(peers(nsPeer("y")))),
	), "x")
	table, _ := Compile(snap, flowOpts)
	ya, _ := podIPs("y", "a")
	xa, _ := podIPs("x", "a")
	res, err := nft.Trace(table, forwardChainName(), nft.Packet{Src: ya, Dst: xa, Proto: nft.ProtoTCP, Dport: 80})
	if err != nil || res.Verdict != nft.Accept {
		t.Fatalf("trace: %+v, %v", res, err)
	}
	// Count the log rules a packet of this connection satisfies, in the
	// order the pod chain evaluates them, with the mark as it is there.
	tr := nft.NewTracer(table)
	var logged []string
	mark := uint32(0)
	for _, name := range []string{"x/p1", "x/p2"} {
		ch := chainNamed(t, table, "ingress-", name)
		for i, r := range ch.Rules {
			ok, err := tr.Matches(ch.Name, i, nft.Packet{Src: ya, Dst: xa, Proto: nft.ProtoTCP, Dport: 80, Mark: mark})
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				continue
			}
			if strings.Contains(nft.RenderRule(r), "log prefix") {
				logged = append(logged, name)
				continue
			}
			mark = allowBit(DefaultMarkMask) // allowed: the bit is set, the chain returns
			break
		}
	}
	if !slices.Equal(logged, []string{"x/p1"}) {
		t.Errorf("logged by %q, want by x/p1 only", logged)
	}
}
