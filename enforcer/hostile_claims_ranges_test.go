package enforcer

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftpolicy/nftpolicy/nft"
)

// TestHostileClaimsDenseRanges: pods on consecutive addresses at both ends
// of both address spaces, named by peer lists that select them by label
// (so that only pod events happen and every peer set is patched, never
// rebuilt): labels flip, pods step to a neighbouring address, two pods
// (one named by a peer list, one not; one here, one elsewhere) share an
// address, pods go and come. Every step the patched sets must be a fresh
// compile's, each exact patch the true difference, and the Fake must take
// the delta.
func TestHostileClaimsDenseRanges(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			fake := nft.NewFake()
			runDenseRanges(t, seed, 150, func(d *nft.Delta, got *nft.Table, where string) {
				if d == nil {
					if _, err := fake.ApplyAt(got, 0); err != nil {
						t.Fatal(err)
					}
					return
				}
				if _, err := fake.WriteDeltaAt(d, got, 0); err != nil {
					t.Fatalf("%s: the Fake refuses the delta: %v\n%s", where, err, nft.RenderDelta(d, got))
				}
				if drift, err := fake.Drift(got); err != nil || drift != "" {
					t.Fatalf("%s: after the delta the Fake drifts: %q, %v", where, drift, err)
				}
			})
		})
	}
}

// runDenseRanges drives the dense world for steps and checks each step
// against a fresh compile; program writes each table (d nil: the first,
// whole) where the caller keeps it.
func runDenseRanges(t *testing.T, seed uint64, steps int, program func(d *nft.Delta, got *nft.Table, where string)) {
	bases := []netip.Addr{
		netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("255.255.255.224"),
		netip.MustParseAddr("::"), netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffe0"),
	}
	addr := func(r *rand.Rand) string {
		b := bases[r.IntN(len(bases))]
		for range r.IntN(32) {
			b = b.Next()
		}
		return b.String()
	}
	web := func(app string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	}
	pols := []*networkingv1.NetworkPolicy{
		policy("x", "in", ingressRule(peers(networkingv1.NetworkPolicyPeer{PodSelector: web("web"), NamespaceSelector: &metav1.LabelSelector{}},
			ipBlock("0.0.0.16/28"), ipBlock("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fff0/124")), port(tcp, 80)),
			ingressRule(peers(networkingv1.NetworkPolicyPeer{PodSelector: web("db"), NamespaceSelector: &metav1.LabelSelector{}}), port(tcp, 80))),
		policy("y", "out", egressRule(peers(networkingv1.NetworkPolicyPeer{PodSelector: web("db"), NamespaceSelector: &metav1.LabelSelector{}})),
			types(networkingv1.PolicyTypeEgress)),
	}
	{
		{
			w := newHCWorld(seed)
			r := w.r
			w.pods = map[objKey]*hcPod{}
			for _, n := range hcPolicyNames {
				w.policies[n] = false
			}
			w.cnp = false
			for i := range 60 {
				p := w.randomPod(w.pick("x", "y"), fmt.Sprintf("p%d", i))
				p.quarantined, p.unsettled = false, nil
				p.ips = []string{addr(r)}
				w.put(p)
			}
			opts := Options{Node: testNode}
			inc := NewCompiler(opts)
			var prev *nft.Table
			exact := 0
			for step := range steps {
				var evs []string
				for range 1 + r.IntN(4) {
					p, _ := w.anyPod()
					q := w.clone(p)
					switch r.IntN(6) {
					case 0:
						q.app = w.pick("web", "db", "none")
					case 1: // a neighbour's address, or its own again
						a := netip.MustParseAddr(q.ips[0])
						if r.IntN(2) == 0 && a.Next().IsValid() {
							a = a.Next()
						} else if a.Prev().IsValid() {
							a = a.Prev()
						}
						q.ips = []string{a.String()}
					case 2: // another pod's address
						o, _ := w.anyPod()
						q.ips = slices.Clone(o.ips)
					case 3:
						q.node = w.pick(testNode, hcNode2)
					case 4:
						delete(w.pods, objKey{q.ns, q.name})
						q = w.randomPod(w.pick("x", "y"), fmt.Sprintf("n%d-%d", step, len(evs)))
						q.quarantined, q.unsettled = false, nil
						q.ips = []string{addr(r)}
					default:
						q.terminating = !q.terminating
					}
					w.put(q)
					evs = append(evs, q.ns+"/"+q.name)
				}
				snap := w.snapshot()
				snap.Policies = pols
				where := fmt.Sprintf("seed %d step %d (%s)", seed, step, strings.Join(evs, ", "))
				got, problems := inc.Compile(snap, DefaultPriority)
				checkCompiled(t, inc, opts, prev, got, problems, snap, DefaultPriority, where)
				if prev == nil {
					program(nil, got, where)
				} else {
					d := inc.Delta()
					for _, u := range d.UpdateSets {
						if u.Exact && strings.HasPrefix(u.New.Name, "peers-") {
							exact++
						}
					}
					program(d, got, where)
				}
				prev = got
			}
			if exact < steps/3 {
				t.Fatalf("only %d exact peer-set patches: the test no longer patches", exact)
			}
		}
	}
}
