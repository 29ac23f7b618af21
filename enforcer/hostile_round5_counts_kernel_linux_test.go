//go:build linux

package enforcer

import (
	"errors"
	"testing"

	"go.uber.org/zap"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/nftpolicy/nftpolicy/internal/netns"
	"github.com/nftpolicy/nftpolicy/nft"
)

// Hostile review, round 5: per-pod connection counters judged against
// real packets across refused syncs, retries and policy edits.

func newR5World(t *testing.T, name string, opts Options) *pcCountWorld {
	t.Helper()
	cl, node, pods, base := pcNode(t, netns.Options{Name: name, TCPPorts: []int{80}}, "x/a", "x/b", "x/c")
	w := &pcCountWorld{cl: cl, pods: pods, nodeN: node.Name(), base: base}
	var err error
	w.conn, err = nft.Open(node.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.conn.Close() })
	w.k = &pcRefusing{connKernel: connKernel{w.conn}}
	opts.Node, opts.Counters = node.Name(), true
	w.s = newSyncer(w.k, opts, PrioritySetting{Auto: true}, zap.NewNop())
	t.Cleanup(func() {
		w.s.StopWatchingCommits()
		w.s.Close()
	})
	return w
}

// r5Check reads the counters, checks that no key of prev fell or went
// missing, and returns the new read.
func r5Check(t *testing.T, w *pcCountWorld, step string, prev map[CountKey]uint64) map[CountKey]uint64 {
	t.Helper()
	c, err := w.s.CountConnections()
	if err != nil {
		t.Fatalf("%s: %v", step, err)
	}
	for k, v := range prev {
		if n, ok := c[k]; !ok || n < v {
			t.Errorf("%s: %+v fell from %d to %d (present %v)", step, k, v, n, ok)
		}
	}
	return c
}

var (
	r5Denied  = CountKey{Namespace: "x", Pod: "a", Direction: "ingress"}
	r5Allowed = CountKey{Namespace: "x", Pod: "a", Direction: "ingress", Allowed: true}
)

// TestHostileRound5WalkRefusedUnisolate: with --walk-policies (or a
// flow-logged namespace) x/a is isolated by p (b may connect); a sync
// that deletes p is refused, so the kernel keeps dropping c→a. The
// denied counter must keep counting those drops and never fall.
func TestHostileRound5WalkRefusedUnisolate(t *testing.T) {
	for _, layout := range []struct {
		name string
		opts Options
	}{{"walk", Options{WalkPolicies: true}}, {"flat", Options{}}} {
		t.Run(layout.name, func(t *testing.T) {
			w := newR5World(t, "r5u"+layout.name[:1], layout.opts)
			fromB := policy("x", "p", selecting("a"), ingressRule(peers(podPeer("b")), port(tcp, 80)))
			if _, err := w.s.Sync(w.with(fromB)); err != nil {
				t.Fatal(err)
			}
			if w.connect(t, "x/c", "x/a") {
				t.Fatal("c→a got through under p")
			}
			c0 := r5Check(t, w, "in step", nil)
			if c0[r5Denied] != 1 {
				t.Fatalf("in step: denied %d, want 1 (%v)", c0[r5Denied], c0)
			}
			w.k.refuse = true
			if _, err := w.s.Sync(w.with()); !errors.Is(err, errPCRefused) {
				t.Fatalf("refused sync: %v", err)
			}
			c1 := r5Check(t, w, "after the refused sync deleting p", c0)
			if w.connect(t, "x/c", "x/a") {
				t.Fatal("the kernel kept p's table, but c→a got through")
			}
			c2 := r5Check(t, w, "after a denied c→a under the kept table", c1)
			if c2[r5Denied] != c0[r5Denied]+1 {
				t.Errorf("the kernel dropped c→a (2 in all); the denied metric says %d (present %v), want %d", c2[r5Denied], hasKey(c2, r5Denied), c0[r5Denied]+1)
			}
			// Retried, with p back: the counters must carry on.
			w.k.refuse = false
			if _, err := w.s.Sync(w.with(fromB)); err != nil {
				t.Fatal(err)
			}
			c3 := r5Check(t, w, "after the retry", c2)
			if w.connect(t, "x/c", "x/a") {
				t.Fatal("c→a got through under p")
			}
			c4 := r5Check(t, w, "after the retry and one more denial", c3)
			if c4[r5Denied] != c0[r5Denied]+2 {
				t.Errorf("three denials in all; metric says %d", c4[r5Denied])
			}
		})
	}
}

func hasKey(c map[CountKey]uint64, k CountKey) bool { _, ok := c[k]; return ok }

// TestHostileRound5NothingAndBack: p goes from "b may connect" to
// "nothing allowed" (ingress: []) and back, each edit once refused and
// then retried, with connections in every state. Allowed and denied must
// follow the kernel and never fall.
func TestHostileRound5NothingAndBack(t *testing.T) {
	for _, layout := range []struct {
		name string
		opts Options
	}{{"walk", Options{WalkPolicies: true}}, {"flat", Options{}}} {
		t.Run(layout.name, func(t *testing.T) {
			w := newR5World(t, "r5n"+layout.name[:1], layout.opts)
			fromB := policy("x", "p", selecting("a"), ingressRule(peers(podPeer("b")), port(tcp, 80)))
			nothing := policy("x", "p", selecting("a"), types(networkingv1.PolicyTypeIngress))
			var prev map[CountKey]uint64
			var wantA, wantD uint64
			probe := func(step string) {
				t.Helper()
				gb, gc := w.connect(t, "x/b", "x/a"), w.connect(t, "x/c", "x/a")
				a, d := pcOutcomes(gb, gc)
				wantA += a
				wantD += d
				c := r5Check(t, w, step, prev)
				if layout.name == "flat" && c[r5Allowed] != wantA {
					t.Errorf("%s: allowed %d, kernel allowed %d in all", step, c[r5Allowed], wantA)
				}
				if c[r5Denied] != wantD {
					t.Errorf("%s: denied %d, kernel denied %d in all", step, c[r5Denied], wantD)
				}
				prev = c
			}
			sync := func(step string, p *networkingv1.NetworkPolicy, refuse bool) {
				t.Helper()
				w.k.refuse = refuse
				_, err := w.s.Sync(w.with(p))
				if refuse != (err != nil) {
					t.Fatalf("%s: %v", step, err)
				}
				prev = r5Check(t, w, step+" (read after)", prev)
				probe(step)
			}
			sync("fromB", fromB, false)
			sync("nothing refused", nothing, true)
			sync("nothing retried", nothing, false)
			sync("fromB refused", fromB, true)
			sync("fromB retried", fromB, false)
			sync("nothing", nothing, false)
			sync("fromB again", fromB, false)
			if _, err := w.s.CheckDrift(); err != nil {
				t.Fatal(err)
			}
			testRepair(t, w)
			probe("after a repair")
		})
	}
}

// testRepair flushes the table's chains behind the Syncer's back and
// lets CheckDrift rewrite it.
func testRepair(t *testing.T, w *pcCountWorld) {
	t.Helper()
	if err := w.conn.Delete(nft.FamilyInet, w.s.opts.Table); err != nil {
		t.Skipf("cannot delete the table to force a repair: %v", err)
	}
	if repaired, err := w.s.CheckDrift(); err != nil || !repaired {
		t.Fatalf("repair: %v %v", repaired, err)
	}
}
