//go:build linux

package enforcer

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"go.uber.org/zap"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/nftpolicy/nftpolicy/internal/netns"
	"github.com/nftpolicy/nftpolicy/internal/testns"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// Hostile review of the per-packet path cut (commits e28e50f..565cca0):
// the per-pod connection counters, judged against the connections the
// kernel really let through or dropped, not against the compiler's own
// idea of which rule counts what.

// pcRefusing is the production kernel (an *nft.Conn) whose writes can be
// refused, as the kernel refuses a batch (ENOMEM, a bad element, a
// verdict loop): the Syncer then keeps the table it had, which the design
// anticipates ("Readiness tells the truth ... a refused batch ... retries
// with backoff"). Everything else, RuleCounters included, is the real
// thing.
type pcRefusing struct {
	connKernel
	refuse bool
}

var errPCRefused = errors.New("pathcut test: the kernel refused the batch (injected)")

func (k *pcRefusing) WriteDeltaAt(d *nft.Delta, t *nft.Table, gen uint32) (nft.BatchStats, error) {
	if k.refuse {
		return nft.BatchStats{}, errPCRefused
	}
	return k.connKernel.WriteDeltaAt(d, t, gen)
}

func (k *pcRefusing) ApplyGuarded(t *nft.Table, check func(string, bool) error) (nft.BatchStats, error) {
	if k.refuse {
		return nft.BatchStats{}, errPCRefused
	}
	return k.connKernel.ApplyGuarded(t, check)
}

// pcCountWorld is one node with pods x/a (the server), x/b and x/c, and a
// Syncer with Counters on a kernel whose writes can be refused.
type pcCountWorld struct {
	cl    *netns.Cluster
	pods  map[string]*netns.Pod
	base  *k8s.Snapshot
	k     *pcRefusing
	s     *Syncer
	conn  *nft.Conn
	nodeN string
}

// pcNode is a cluster of one node, n1, with the pods named by keys
// ("ns/name") on it, and the snapshot its manifests load to; the cluster
// is closed when the test ends.
func pcNode(t *testing.T, opts netns.Options, keys ...string) (*netns.Cluster, *netns.Node, map[string]*netns.Pod, *k8s.Snapshot) {
	t.Helper()
	testns.RequireRoot(t, "ip", "nft")
	opts.Timeout = 400 * time.Millisecond
	cl, err := netns.NewCluster(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	node, err := cl.AddNode("n1")
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string]*netns.Pod{}
	for _, k := range keys {
		nsName, name, _ := strings.Cut(k, "/")
		p, err := cl.AddPod(node, nsName, name)
		if err != nil {
			t.Fatal(err)
		}
		pods[k] = p
	}
	base, objErrs, err := k8s.LoadFS(fstest.MapFS{"cluster.yaml": {Data: []byte(cl.Manifests())}})
	if err != nil || len(objErrs) > 0 {
		t.Fatal(err, objErrs)
	}
	return cl, node, pods, base
}

func newPCCountWorld(t *testing.T) *pcCountWorld {
	t.Helper()
	cl, node, pods, base := pcNode(t, netns.Options{Name: "nftpc", TCPPorts: []int{80}}, "x/a", "x/b", "x/c")
	w := &pcCountWorld{cl: cl, pods: pods, nodeN: node.Name(), base: base}
	var err error
	w.conn, err = nft.Open(node.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.conn.Close() })
	w.k = &pcRefusing{connKernel: connKernel{w.conn}}
	w.s = newSyncer(w.k, Options{Node: node.Name(), Counters: true}, PrioritySetting{Auto: true}, zap.NewNop())
	t.Cleanup(func() {
		w.s.StopWatchingCommits()
		w.s.Close()
	})
	return w
}

func (w *pcCountWorld) with(nps ...*networkingv1.NetworkPolicy) *k8s.Snapshot {
	s := *w.base
	s.Policies = nps
	return &s
}

// connect makes one TCP connection attempt from → to on port 80 (IPv4)
// and reports whether it got through: one NEW packet through the node
// (the probe's timeout is shorter than the first SYN retransmission).
func (w *pcCountWorld) connect(t *testing.T, from, to string) bool {
	t.Helper()
	return w.cl.Probe(w.pods[from], w.pods[to].IPv4(), netns.TCP, 80, 400*time.Millisecond)
}

// counted returns what CountConnections says x/a's ingress allowed and
// was denied.
func (w *pcCountWorld) counted(t *testing.T) (allowed, denied uint64) {
	t.Helper()
	c, err := w.s.CountConnections()
	if err != nil {
		t.Fatal(err)
	}
	k := CountKey{Namespace: "x", Pod: "a", Direction: "ingress"}
	denied = c[k]
	k.Allowed = true
	return c[k], denied
}

// TestHostilePathcutCountsRefusedEdit: a policy edit turns x/a's ingress
// from "b may connect" (a stage that accepts at once: counted as what
// reaches the stage less its self rules and drop) into "nothing"
// (ingress: [], an empty stage: an allowed return and a drop), or back,
// and the kernel refuses the batch. The kernel keeps enforcing the
// table it has; the metric must still count what that table really did
// with each connection.
//
// Before 565cca0 every flat pod chain counted in the same two rules
// (allowed return, drop), so a compiler one table ahead of the kernel
// read the kernel's counters with the same meaning. Since, the counted
// rules' meaning is positional and depends on the chain's shape; at
// 565cca0 CountConnections took the shape from the compiler's last
// compile, not from the table the kernel holds, and this failed (a
// denied connection counted as allowed, or two lost). It now reads with
// the rules of the table the kernel holds (keepCounted).
func TestHostilePathcutCountsRefusedEdit(t *testing.T) {
	w := newPCCountWorld(t)
	fromB := policy("x", "p", selecting("a"), ingressRule(peers(podPeer("b")), port(tcp, 80)))
	nothing := policy("x", "p", selecting("a"), types(networkingv1.PolicyTypeIngress))

	for _, tc := range []struct {
		name        string
		held, asked *networkingv1.NetworkPolicy
	}{
		{"kernel holds a stage, compiler an empty one", fromB, nothing},
		{"kernel holds an empty stage, compiler a stage", nothing, fromB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.k.refuse = false
			if _, err := w.s.Sync(w.with(tc.held)); err != nil {
				t.Fatal(err)
			}
			// Sanity: with the mapping and the kernel in step, the counts
			// follow the connections.
			a0, d0 := w.counted(t)
			gotB, gotC := w.connect(t, "x/b", "x/a"), w.connect(t, "x/c", "x/a")
			a1, d1 := w.counted(t)
			wantA, wantD := pcOutcomes(gotB, gotC)
			if a1-a0 != wantA || d1-d0 != wantD {
				t.Fatalf("in step: b→a %v, c→a %v; counted allowed +%d denied +%d, want +%d +%d", gotB, gotC, a1-a0, d1-d0, wantA, wantD)
			}

			w.k.refuse = true
			if _, err := w.s.Sync(w.with(tc.asked)); !errors.Is(err, errPCRefused) {
				t.Fatalf("the edit's sync: %v, want the injected refusal", err)
			}
			if d, err := w.conn.Drift(mustLast(t, w.s)); err != nil || d != "" {
				t.Logf("(the kernel holds the previous table: drift from the last good one %q %v)", d, err)
			}
			a2, d2 := w.counted(t)
			gotB, gotC = w.connect(t, "x/b", "x/a"), w.connect(t, "x/c", "x/a")
			a3, d3 := w.counted(t)
			wantA, wantD = pcOutcomes(gotB, gotC)
			if a3-a2 != wantA || d3-d2 != wantD {
				t.Errorf("batch refused, the kernel enforcing the previous table: b→a got through %v, c→a %v "+
					"(%d allowed, %d denied really); the metric counted allowed +%d, denied +%d",
					gotB, gotC, wantA, wantD, a3-a2, d3-d2)
			}
			// A successful retry puts mapping and kernel back in step.
			w.k.refuse = false
			if _, err := w.s.Sync(w.with(tc.asked)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func mustLast(t *testing.T, s *Syncer) *nft.Table {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastOK == nil {
		t.Fatal("no table programmed")
	}
	return s.lastOK
}

// pcOutcomes is what x/a's ingress counters should say of two probes:
// how many got through (allowed) and how many were dropped (denied).
func pcOutcomes(ok ...bool) (allowed, denied uint64) {
	for _, o := range ok {
		if o {
			allowed++
		} else {
			denied++
		}
	}
	return
}

// TestHostilePathcutCountsTiersAndHairpin: x/a's ingress is judged by an
// Admin tier in front of NetworkPolicy (Accept y on tcp/81, Deny y on
// tcp/80, Pass x) and by a NetworkPolicy allowing x/b on tcp/80; x/a
// also reaches itself through a Service (DNAT and masquerade on the node,
// as kube-proxy hairpins). Real connections, one NEW packet each, are
// held to what the per-pod counters say:
//
//   - what the Admin tier decides (y/d's) is no NetworkPolicy's: neither
//     the pod's allowed nor its denied count moves;
//   - what it passes is NetworkPolicy's: x/b on tcp/80 allowed +1, x/c on
//     tcp/80 and x/b on tcp/81 denied +1 each;
//   - the hairpin gets through by the self exemption, which no policy
//     allowed and no drop took: neither moves.
//
// It would catch the stage's counter sitting in front of the Admin tier
// (counting what the tier decided), a self rule or drop that takes
// nothing back (a denied or hairpinned connection counted allowed), or a
// self rule counted as denied.
func TestHostilePathcutCountsTiersAndHairpin(t *testing.T) {
	cl, node, pods, base := pcNode(t, netns.Options{Name: "nftpt", IPv4: true, TCPPorts: []int{80, 81}}, "x/a", "x/b", "x/c", "y/d")
	snap := *base
	snap.Policies = []*networkingv1.NetworkPolicy{policy("x", "a-in", selecting("a"), ingressRule(peers(podPeer("b")), port(tcp, 80)))}
	withCluster(&snap, admin("guard", 10, subjectPod("x", "a"),
		cnpIn(cnpAccept, from(fromNS("y")), tcpPort(81)),
		cnpIn(cnpDeny, from(fromNS("y")), tcpPort(80)),
		cnpIn(cnpPass, from(fromNS("x")))))

	// The Service: 10.96.0.10:80 → x/a:80, masqueraded as kube-proxy
	// does for a hairpin, so that the reply comes back through the node.
	vip := "10.96.0.10"
	a := pods["x/a"].IPv4()
	testns.Nft(t, node.NetnsName(), fmt.Sprintf(`table ip pathcutsvc {
	chain pre {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr %s tcp dport 80 dnat to %s:80
	}
	chain post {
		type nat hook postrouting priority srcnat; policy accept;
		ip saddr %s ip daddr %s ct status dnat masquerade
	}
}
`, vip, a, a, a), "-f", "-")

	conn, err := nft.Open(node.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s := newSyncer(connKernel{conn}, Options{Node: node.Name(), Counters: true}, PrioritySetting{Auto: true}, zap.NewNop())
	t.Cleanup(func() {
		s.StopWatchingCommits()
		s.Close()
	})
	if _, err := s.Sync(&snap); err != nil {
		t.Fatal(err)
	}
	listing := testns.ListTable(t, node.NetnsName(), "nftpolicy")
	if !strings.Contains(listing, "goto ingress-allow-") || !strings.Contains(listing, "jump admin-ingress-") {
		t.Fatalf("not an Admin tier in front of the cut path:\n%s", listing)
	}
	counted := func() (uint64, uint64) {
		c, err := s.CountConnections()
		if err != nil {
			t.Fatal(err)
		}
		k := CountKey{Namespace: "x", Pod: "a", Direction: "ingress"}
		d := c[k]
		k.Allowed = true
		return c[k], d
	}
	for _, tc := range []struct {
		name                  string
		from                  string
		dst                   netip.Addr
		port                  int
		through               bool
		wantAllowed, wantDeny uint64
	}{
		{"admin accepts y/d tcp/81", "y/d", a, 81, true, 0, 0},
		{"admin denies y/d tcp/80", "y/d", a, 80, false, 0, 0},
		{"passed, NetworkPolicy allows x/b tcp/80", "x/b", a, 80, true, 1, 0},
		{"passed, NetworkPolicy denies x/c tcp/80", "x/c", a, 80, false, 0, 1},
		{"passed, NetworkPolicy denies x/b tcp/81", "x/b", a, 81, false, 0, 1},
		{"x/a hairpinned through its Service", "x/a", netip.MustParseAddr(vip), 80, true, 0, 0},
	} {
		a0, d0 := counted()
		got := cl.Probe(pods[tc.from], tc.dst, netns.TCP, tc.port, 400*time.Millisecond)
		a1, d1 := counted()
		if got != tc.through {
			t.Errorf("%s: got through %v, want %v", tc.name, got, tc.through)
			continue
		}
		if a1-a0 != tc.wantAllowed || d1-d0 != tc.wantDeny {
			t.Errorf("%s: x/a ingress counted allowed +%d, denied +%d; want +%d, +%d", tc.name, a1-a0, d1-d0, tc.wantAllowed, tc.wantDeny)
		}
	}

	// Without the tier, the self rule comes after the stage and takes
	// back what the stage counted for the hairpin.
	snap.ClusterPolicies = nil
	res, err := s.Sync(&snap)
	if err != nil {
		t.Fatal(err)
	}
	var podChain string
	for _, ch := range res.Table.Chains {
		if strings.HasPrefix(ch.Name, "ingress-pod-") && strings.HasSuffix(ch.Name, "-x/a") {
			podChain = ch.Name
		}
	}
	selfPackets := func() uint64 {
		rc, err := conn.RuleCounters(res.Table.Name, []string{podChain})
		if err != nil {
			t.Fatal(err)
		}
		if len(rc.Rules) != 3 {
			t.Fatalf("%s counts in %d rules, want 3 (stage, self, drop): %+v", podChain, len(rc.Rules), rc.Rules)
		}
		return rc.Rules[1].Packets
	}
	for _, tc := range []struct {
		name                  string
		from                  string
		dst                   netip.Addr
		through, self         bool
		wantAllowed, wantDeny uint64
	}{
		{"no tier, x/b allowed", "x/b", a, true, false, 1, 0},
		{"no tier, x/c denied", "x/c", a, false, false, 0, 1},
		{"no tier, x/a hairpinned", "x/a", netip.MustParseAddr(vip), true, true, 0, 0},
		{"no tier, y/d denied", "y/d", a, false, false, 0, 1},
	} {
		a0, d0 := counted()
		s0 := selfPackets()
		got := cl.Probe(pods[tc.from], tc.dst, netns.TCP, 80, 400*time.Millisecond)
		a1, d1 := counted()
		if got != tc.through {
			t.Errorf("%s: got through %v, want %v", tc.name, got, tc.through)
			continue
		}
		if took := selfPackets() - s0; (took == 1) != tc.self {
			t.Errorf("%s: the self rule took %d packets", tc.name, took)
		}
		if a1-a0 != tc.wantAllowed || d1-d0 != tc.wantDeny {
			t.Errorf("%s: x/a ingress counted allowed +%d, denied +%d; want +%d, +%d", tc.name, a1-a0, d1-d0, tc.wantAllowed, tc.wantDeny)
		}
	}
}
