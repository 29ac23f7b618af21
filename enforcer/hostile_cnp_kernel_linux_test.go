//go:build linux

package enforcer

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/nftpolicy/nftpolicy/internal/testns"
	"github.com/nftpolicy/nftpolicy/nft"
)

// The hostile cluster-policy world (hostile_cnp_world_test.go) on the real
// kernel: a Syncer on an *nft.Conn in a throwaway network namespace
// programs every snapshot of a long random sequence, each as the delta
// batch the daemon writes (Compiler.Delta through WriteDeltaAt). After each
// sync the kernel must have accepted the batch, written it as a delta (the
// Syncer writes the whole table only after a failure), and hold exactly
// the compiled table (Conn.Drift). Every few steps the table is also
// loaded whole into a second namespace and both are listed with nft.
//
// The world's events are mixed with ones aimed at the order of a delta's
// deletes and adds: cluster policies renamed, duplicated, wiped and
// restored (tier groups replaced), subjects flipped, many adjacent and
// nested address ranges in one rule, pods readdressed inside those ranges,
// NetworkPolicies flipping whole namespaces between "only cluster tiers"
// and "isolated", namespaces emptied into others; several events are
// coalesced into one sync, as Run does in a burst.
//
// HOSTILE_KERNEL_SEEDS=from:count and HOSTILE_KERNEL_STEPS=n run longer;
// HOSTILE_KERNEL_EVENTS=n coalesces up to n events into a sync (3).

// hkKernel is the Syncer's kernel; misorder, for the test of the harness
// itself, writes a delta's chain deletions in a batch of their own before
// the rest, as a writer that deleted chains before the sets naming them
// would.
type hkKernel struct {
	kernel
	misorder bool
}

func (k *hkKernel) WriteDeltaAt(d *nft.Delta, new *nft.Table, gen uint32) (nft.BatchStats, error) {
	if k.misorder && !d.Full && len(d.DeleteChains) > 0 && len(d.DeleteSets) > 0 {
		first := &nft.Delta{DeleteChains: d.DeleteChains}
		if _, err := k.kernel.WriteDeltaAt(first, new, gen); err != nil {
			return nft.BatchStats{}, err
		}
		rest := *d
		rest.DeleteChains = nil
		return k.kernel.WriteDeltaAt(&rest, new, 0)
	}
	return k.kernel.WriteDeltaAt(d, new, gen)
}

type hkConfig struct {
	seed        uint64
	steps       int
	hash        func(string) [sha256.Size]byte // nil: real hashes
	misorder    bool
	oracleEvery int // load the table whole into another netns every n steps; 0 never
	maxEvents   int // events coalesced into one sync: 1..maxEvents
	large       int // pods of hkLargeWorld; 0 for newHWorld's
}

// hkDeltaSummary names what a delta writes, for a failure report.
func hkDeltaSummary(d *nft.Delta) string {
	if d.Full {
		return "full: " + d.Reason
	}
	var b strings.Builder
	for _, c := range d.AddChains {
		fmt.Fprintf(&b, "  add chain %s (%d rules)\n", c.Name, len(c.Rules))
	}
	for _, c := range d.RewriteChains {
		fmt.Fprintf(&b, "  rewrite chain %s (%d rules)\n", c.Name, len(c.Rules))
	}
	for _, s := range d.AddSets {
		fmt.Fprintf(&b, "  add set %s (%d elements)\n", s.Name, s.Len())
	}
	for _, u := range d.UpdateSets {
		fmt.Fprintf(&b, "  update set %s (%d -> %d elements, exact=%v, +%d -%d)\n", u.New.Name, u.Old.Len(), u.New.Len(), u.Exact, len(u.Added), len(u.Removed))
	}
	for _, n := range d.DeleteSets {
		fmt.Fprintf(&b, "  delete set %s\n", n)
	}
	for _, n := range d.DeleteChains {
		fmt.Fprintf(&b, "  delete chain %s\n", n)
	}
	return b.String()
}

// hkRun drives one world through cfg.steps syncs and returns the first
// failure, "" if none.
func hkRun(t *testing.T, cfg hkConfig) string {
	t.Helper()
	var stats struct {
		deltas, full, maxElems int
		sync, drift, oracle    time.Duration
	}
	defer func() {
		t.Logf("seed %d: %d delta batches (at most %d elements), %d whole tables the compiler asked for; sync %v, drift %v, oracle %v",
			cfg.seed, stats.deltas, stats.maxElems, stats.full, stats.sync, stats.drift, stats.oracle)
	}()
	testns.RequireRoot(t, "ip", "nft")
	ns := testns.New(t, "nfthk")
	conn, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	k := &hkKernel{kernel: connKernel{conn}, misorder: cfg.misorder}
	s := newSyncer(k, Options{Node: testNode}, PrioritySetting{Auto: true}, zap.NewNop())
	t.Cleanup(func() {
		s.StopWatchingCommits()
		s.Close()
	})
	if cfg.hash != nil {
		s.compiler.chainNames.sum = cfg.hash
		s.compiler.peerNames.sum = cfg.hash
	}
	var oracle *nft.Conn
	var oracleNS string
	if cfg.oracleEvery > 0 {
		oracleNS = testns.New(t, "nfthk")
		if oracle, err = nft.Open(oracleNS); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { oracle.Close() })
	}
	if cfg.maxEvents == 0 {
		cfg.maxEvents = 3
		if v := os.Getenv("HOSTILE_KERNEL_EVENTS"); v != "" {
			fmt.Sscanf(v, "%d", &cfg.maxEvents)
		}
	}

	w := newHWorld(cfg.seed)
	if cfg.large > 0 {
		w = hkLargeWorld(cfg.seed, cfg.large)
	}
	x := &hkExtra{w: w, saved: map[string]*cnpv1.ClusterNetworkPolicy{}}
	event := x.event
	if cfg.large > 0 {
		event = func() string { return x.largeEvent(cfg.large) }
	}
	var history []string
	var prev *nft.Table
	for step := 0; step < cfg.steps; step++ {
		var events []string
		for n := 1 + w.r.IntN(cfg.maxEvents); n > 0; n-- {
			events = append(events, event())
		}
		history = append(history, strings.Join(events, " + "))
		snap := w.snapshot()
		where := func() string {
			h := history
			if len(h) > 12 {
				h = h[len(h)-12:]
			}
			return fmt.Sprintf("seed %d step %d (%s); last events %q", cfg.seed, step, history[len(history)-1], h)
		}
		t0 := time.Now()
		res, err := s.Sync(snap)
		stats.sync += time.Since(t0)
		stats.maxElems = max(stats.maxElems, res.Batch.ElementsAdded, res.Batch.ElementsDeleted)
		if err != nil {
			return fmt.Sprintf("%s: the kernel refused the sync: %v\ndelta:\n%s\nprevious table:\n%s\ntable:\n%s",
				where(), err, hkDeltaSummary(s.compiler.Delta()), hkRender(prev), hkRender(res.Table))
		}
		if step > 0 && res.Batch.Full {
			// Only a delta the compiler itself calls Full (a set's name
			// passed to another key with another comment, which only
			// colliding hashes do) may be written whole.
			if d := s.compiler.Delta(); !d.Full || cfg.hash == nil {
				return fmt.Sprintf("%s: the Syncer wrote the whole table without a failure before it (delta: %s)",
					where(), hkDeltaSummary(d))
			}
			stats.full++
		} else if step > 0 && res.Batch.Messages > 0 {
			stats.deltas++
		}
		t0 = time.Now()
		drift, err := conn.Drift(res.Table)
		stats.drift += time.Since(t0)
		if err != nil || drift != "" {
			return fmt.Sprintf("%s: after the delta the kernel does not hold the compiled table: %q %v\ndelta:\n%s",
				where(), drift, err, hkDeltaSummary(s.compiler.Delta()))
		}
		if err := res.Table.Validate(); err != nil {
			return fmt.Sprintf("%s: compiled table invalid: %v", where(), err)
		}
		if oracle != nil && (step%cfg.oracleEvery == cfg.oracleEvery-1 || step == cfg.steps-1) {
			t0 := time.Now()
			if _, err := oracle.Apply(res.Table); err != nil {
				return fmt.Sprintf("%s: the whole table is refused: %v", where(), err)
			}
			got := hkBlocks(testns.ListTable(t, ns, res.Table.Name))
			want := hkBlocks(testns.ListTable(t, oracleNS, res.Table.Name))
			stats.oracle += time.Since(t0)
			if got != want {
				return fmt.Sprintf("%s: the table built by deltas lists otherwise than the same table written whole (-whole +deltas):\n%s",
					where(), gocmp.Diff(strings.Split(want, "\n"), strings.Split(got, "\n")))
			}
		}
		prev = res.Table
	}
	return ""
}

// hkBlocks is an nft listing with its chains, sets and maps sorted: nft
// lists them in the order they were created, which deltas change.
func hkBlocks(listing string) string {
	listing = testns.WithoutCounterValues(listing)
	var blocks []string
	var cur []string
	for _, line := range strings.Split(listing, "\n") {
		switch {
		case strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, "\t\t") && strings.HasSuffix(line, "{"):
			cur = []string{line}
		case line == "\t}" && cur != nil:
			blocks = append(blocks, strings.Join(append(cur, line), "\n"))
			cur = nil
		case cur != nil:
			cur = append(cur, line)
		case line != "":
			blocks = append(blocks, line)
		}
	}
	slices.Sort(blocks)
	return strings.Join(blocks, "\n")
}

func hkRender(t *nft.Table) string {
	if t == nil {
		return "(none)"
	}
	r := nft.Render(t)
	if len(r) > 20000 {
		r = r[:20000] + "\n... (cut)"
	}
	return r
}

// hkExtra adds events aimed at delta ordering to an hworld.
type hkExtra struct {
	w     *hworld
	saved map[string]*cnpv1.ClusterNetworkPolicy // wiped, to restore
}

var (
	hkNames = []string{"c0", "c1", "c2", "c3", "c4", "c5", "k0", "k1"}
	// Adjacent, nested and abutting ranges around the pods' addresses.
	hkCIDRs = []string{
		"10.0.1.0/30", "10.0.1.4/30", "10.0.1.8/29", "10.0.1.0/28", "10.0.1.16/28", "10.0.1.0/29",
		"10.0.1.12/30", "10.0.1.1/32", "10.0.1.2/32", "10.0.1.3/32", "10.0.1.4/32", "10.0.1.5/32",
		"10.0.1.6/31", "10.0.1.128/25", "10.0.1.0/25", "10.0.0.0/24", "10.0.2.0/24", "10.0.0.0/22",
		"10.0.2.0/31", "10.0.2.2/31", "10.0.2.4/30", "10.0.3.0/24", "0.0.0.0/1", "128.0.0.0/1",
		"fd00::1:0/126", "fd00::1:4/126", "fd00::1:8/125", "fd00::1:0/124", "fd00::1:1/128",
		"fd00::1:2/127", "fd00::1:3/128", "fd00::1:4/128", "fd00::/112", "fd00::1:0/112",
		"fd00::2:0/112", "fd00::2:0/127", "fd00::2:2/127", "::/1", "8000::/1",
	}
)

func (x *hkExtra) event() string {
	w := x.w
	switch w.r.IntN(20) {
	case 0, 1: // a cluster policy of many adjacent ranges
		name := w.pickS(hkNames...)
		w.cnps[name] = x.adjacentCNP(name)
		return "cnp ranges " + name
	case 2: // renamed: same content, another name (its groups replaced)
		old, ok := w.someCNP()
		if !ok {
			return "nothing"
		}
		name := w.pickS(hkNames...)
		p := w.cnps[old].DeepCopy()
		delete(w.cnps, old)
		p.Name = name
		w.cnps[name] = p
		return "cnp rename " + old + " to " + name
	case 3: // duplicated under another name
		old, ok := w.someCNP()
		if !ok {
			return "nothing"
		}
		name := w.pickS(hkNames...)
		p := w.cnps[old].DeepCopy()
		p.Name = name
		w.cnps[name] = p
		return "cnp copy " + old + " to " + name
	case 4: // every cluster policy gone, or back
		if len(x.saved) > 0 {
			maps.Copy(w.cnps, x.saved)
			clear(x.saved)
			return "cnps restored"
		}
		maps.Copy(x.saved, w.cnps)
		clear(w.cnps)
		return "cnps wiped"
	case 5: // a subject that selects every pod, or none
		name, ok := w.someCNP()
		if !ok {
			return "nothing"
		}
		p := w.cnps[name].DeepCopy()
		if w.r.IntN(2) == 0 {
			p.Spec.Subject = cnpv1.ClusterNetworkPolicySubject{Namespaces: nsLabels()}
		} else {
			p.Spec.Subject = cnpv1.ClusterNetworkPolicySubject{Namespaces: nsLabels("nowhere")}
		}
		w.cnps[name] = p
		return "cnp subject all/none " + name
	case 6, 7: // a pod readdressed inside the adjacent ranges
		ks := w.keys()
		if len(ks) == 0 {
			return "nothing"
		}
		k := ks[w.r.IntN(len(ks))]
		p := *w.pods[k]
		v4, v6 := fmt.Sprintf("10.0.%d.%d", 1+w.r.IntN(2), w.r.IntN(8)), fmt.Sprintf("fd00::%d:%x", 1+w.r.IntN(2), w.r.IntN(8))
		if w.addrTaken(v4, v6, k) {
			return "nothing"
		}
		switch w.r.IntN(3) {
		case 0:
			p.v4, p.v6 = v4, ""
		case 1:
			p.v4, p.v6 = "", v6
		default:
			p.v4, p.v6 = v4, v6
		}
		w.setPod(&p)
		return fmt.Sprintf("pod readdress %s %q %q", k, p.v4, p.v6)
	case 8, 9: // a namespace flips between cluster tiers only and isolated
		ns := w.pickS(hwNamespaces...)
		key := objKey{ns, "iso"}
		if _, ok := w.nps[key]; ok {
			delete(w.nps, key)
			return "np unisolate " + ns
		}
		if w.r.IntN(2) == 0 {
			w.nps[key] = policy(ns, "iso", denyIngress)
		} else {
			w.nps[key] = policy(ns, "iso", denyEgress)
		}
		return "np isolate " + ns
	case 10: // every pod of a namespace moves to another
		from, to := w.pickS(hwNamespaces...), w.pickS(hwNamespaces...)
		moved := 0
		for _, k := range w.keys() {
			if k.namespace != from || from == to {
				continue
			}
			p := *w.pods[k]
			p.ns = to
			p.labels = maps.Clone(p.labels)
			w.delPod(k)
			w.delPod(objKey{to, p.name})
			w.setPod(&p)
			moved++
		}
		return fmt.Sprintf("ns %s emptied into %s (%d pods)", from, to, moved)
	default:
		return w.step()
	}
}

func (x *hkExtra) adjacentCNP(name string) *cnpv1.ClusterNetworkPolicy {
	w := x.w
	tier := []cnpv1.Tier{cnpv1.AdminTier, cnpv1.BaselineTier}[w.r.IntN(2)]
	actions := []cnpv1.ClusterNetworkPolicyRuleAction{cnpAccept, cnpDeny, cnpPass}
	var tweaks []func(*cnpv1.ClusterNetworkPolicy)
	if w.r.IntN(3) == 0 {
		tweaks = append(tweaks, subjectNS())
	} else {
		tweaks = append(tweaks, subjectNS(w.pickS(hwNamespaces...), w.pickS(hwNamespaces...)))
	}
	for i := 1 + w.r.IntN(4); i > 0; i-- {
		var cidrs []string
		for j := 2 + w.r.IntN(7); j > 0; j-- {
			cidrs = append(cidrs, w.pickS(hkCIDRs...))
		}
		tweaks = append(tweaks, cnpOut(actions[w.r.IntN(3)], to(nets(cidrs...)), w.randomProtocols()...))
	}
	if w.r.IntN(2) == 0 {
		tweaks = append(tweaks, cnpIn(actions[w.r.IntN(3)], from(fromNS(w.pickS(hwNamespaces...))), w.randomProtocols()...))
	}
	return cnp(name, tier, int32(w.r.IntN(3)), tweaks...)
}

func hkEnvSeeds(from, n uint64, steps int) (uint64, uint64, int) {
	if v := os.Getenv("HOSTILE_KERNEL_SEEDS"); v != "" {
		fmt.Sscanf(v, "%d:%d", &from, &n)
	}
	if v := os.Getenv("HOSTILE_KERNEL_STEPS"); v != "" {
		fmt.Sscanf(v, "%d", &steps)
	}
	return from, n, steps
}

// TestHostileCNPKernelWorld: the world, with real hashes, sparse (pods on
// two nodes, three cluster policies) and dense (every pod local, eight).
func TestHostileCNPKernelWorld(t *testing.T) {
	from, n, steps := hkEnvSeeds(1, 3, 60)
	for _, dense := range []bool{false, true} {
		for seed := from; seed < from+n; seed++ {
			t.Run(fmt.Sprintf("dense=%v/seed=%d", dense, seed), func(t *testing.T) {
				if dense {
					t.Setenv("HOSTILE_DENSE", "1")
				}
				start := time.Now()
				if failure := hkRun(t, hkConfig{seed: seed, steps: steps, oracleEvery: 15}); failure != "" {
					t.Fatal(failure)
				}
				t.Logf("%d steps in %v", steps, time.Since(start))
			})
		}
	}
}

// TestHostileCNPKernelColliding: the same through Compilers whose chain
// and set names collide (every hash the same, or every short hash).
func TestHostileCNPKernelColliding(t *testing.T) {
	from, n, steps := hkEnvSeeds(1, 2, 50)
	for _, hashName := range []string{"constant", "short"} {
		for seed := from; seed < from+n; seed++ {
			t.Run(fmt.Sprintf("%s/seed=%d", hashName, seed), func(t *testing.T) {
				t.Setenv("HOSTILE_DENSE", "1")
				if failure := hkRun(t, hkConfig{seed: seed, steps: steps, hash: collidingHashes[hashName], oracleEvery: 25}); failure != "" {
					t.Fatal(failure)
				}
			})
		}
	}
}

// TestHostileCNPKernelCatchesMisorder is the harness's own test: a writer
// that deletes chains before the verdict maps whose elements go to them
// (the bug a benchmark once found) must be caught as a refused batch.
func TestHostileCNPKernelCatchesMisorder(t *testing.T) {
	t.Setenv("HOSTILE_DENSE", "1")
	for seed := uint64(1); seed <= 8; seed++ {
		failure := hkRun(t, hkConfig{seed: seed, steps: 60, misorder: true})
		if failure == "" {
			continue
		}
		if !strings.Contains(failure, "refused") {
			t.Fatalf("seed %d: a misordered writer failed otherwise than by a refused batch:\n%s", seed, failure)
		}
		first, _, _ := strings.Cut(failure, "\n")
		t.Logf("caught: %s", first)
		return
	}
	t.Fatal("a writer deleting chains before sets went through 8 seeds unnoticed")
}

// hkLargeWorld is an hworld of many pods on this node whose addresses are
// consecutive, so that a peer set holds them as a few long ranges that
// every pod event splits or joins, and a namespace-wide change moves more
// elements of one set than fit in one netlink message.
func hkLargeWorld(seed uint64, pods int) *hworld {
	w := newHWorld(seed)
	for _, k := range w.keys() {
		w.delPod(k)
	}
	for i := 0; i < pods; i++ {
		w.setPod(hkLargePod(w, hwNamespaces[i%len(hwNamespaces)], i, i))
	}
	for _, ns := range hwNamespaces {
		w.nsLabels[ns] = w.randomNSLabels(ns)
	}
	return w
}

// hkLargePod is pod p<i> of ns at the slot-th address of 10.1.0.0/16 and
// fd01::/112.
func hkLargePod(w *hworld, ns string, i, slot int) *hwPod {
	p := &hwPod{ns: ns, name: fmt.Sprintf("p%d", i), node: testNode,
		labels: map[string]string{"pod": w.pickS(hwPodNames...), "app": w.pickS("web", "db")},
		v4:     fmt.Sprintf("10.1.%d.%d", slot/256, slot%256), v6: fmt.Sprintf("fd01::%x", slot),
		ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 80, Protocol: tcp}}}
	switch w.r.IntN(8) {
	case 0:
		p.v4 = ""
	case 1:
		p.v6 = ""
	}
	return p
}

func (x *hkExtra) largeEvent(pods int) string {
	w := x.w
	switch w.r.IntN(10) {
	case 0, 1: // a run of pods gone, or back at their addresses
		first, n := w.r.IntN(pods), 1+w.r.IntN(40)
		gone := 0
		for i := first; i < min(first+n, pods); i++ {
			k := objKey{hwNamespaces[i%len(hwNamespaces)], fmt.Sprintf("p%d", i)}
			if _, ok := w.pods[k]; ok {
				w.delPod(k)
				gone++
			} else {
				w.setPod(hkLargePod(w, k.namespace, i, i))
			}
		}
		return fmt.Sprintf("pods p%d..p%d toggled (%d gone)", first, first+n-1, gone)
	case 2: // every other pod of a namespace relabelled: ranges cut to pieces
		ns := w.pickS(hwNamespaces...)
		app := w.pickS("web", "db")
		for i, k := range w.keys() {
			if k.namespace == ns && i%2 == 0 {
				p := *w.pods[k]
				p.labels = maps.Clone(p.labels)
				p.labels["app"] = app
				w.setPod(&p)
			}
		}
		return "ns " + ns + " every other pod app=" + app
	case 3: // a namespace flips between cluster tiers only and isolated
		ns := w.pickS(hwNamespaces...)
		key := objKey{ns, "iso"}
		if _, ok := w.nps[key]; ok {
			delete(w.nps, key)
			return "np unisolate " + ns
		}
		w.nps[key] = policy(ns, "iso", []func(*networkingv1.NetworkPolicy){denyIngress, denyEgress}[w.r.IntN(2)])
		return "np isolate " + ns
	case 4: // a namespace relabelled: every pod enters or leaves peer sets
		ns := w.pickS(hwNamespaces...)
		w.nsLabels[ns] = w.randomNSLabels(ns)
		return "ns set " + ns
	case 5: // every pod shifted by one address
		shift := 1 + w.r.IntN(2)
		for _, k := range w.keys() {
			p := *w.pods[k]
			var i int
			fmt.Sscanf(p.name, "p%d", &i)
			q := hkLargePod(w, p.ns, i, (i+shift)%pods)
			q.labels = p.labels
			if p.v4 == "" {
				q.v4 = ""
			}
			if p.v6 == "" {
				q.v6 = ""
			}
			w.setPod(q)
		}
		// a pod whose slot another still holds this round would share an
		// address; the compiler reports it and the table must still load.
		return fmt.Sprintf("every pod shifted by %d", shift)
	case 6: // a namespace's pods lose or regain a family
		ns := w.pickS(hwNamespaces...)
		drop4 := w.r.IntN(2) == 0
		for _, k := range w.keys() {
			if k.namespace != ns {
				continue
			}
			p := *w.pods[k]
			var i int
			fmt.Sscanf(p.name, "p%d", &i)
			q := hkLargePod(w, ns, i, i)
			q.labels = p.labels
			if drop4 && p.v4 != "" {
				q.v4 = ""
			} else if !drop4 && p.v6 != "" {
				q.v6 = ""
			}
			w.setPod(q)
		}
		return fmt.Sprintf("ns %s drops v4=%v", ns, drop4)
	default:
		return x.event()
	}
}

// TestHostileCNPKernelLarge: hundreds of pods at consecutive addresses,
// so that set updates cross netlink messages and ranges split and join.
func TestHostileCNPKernelLarge(t *testing.T) {
	from, n, steps := hkEnvSeeds(1, 2, 15)
	pods := 300
	if v := os.Getenv("HOSTILE_KERNEL_PODS"); v != "" {
		fmt.Sscanf(v, "%d", &pods)
	}
	for seed := from; seed < from+n; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Setenv("HOSTILE_DENSE", "1")
			start := time.Now()
			if failure := hkRun(t, hkConfig{seed: seed, steps: steps, oracleEvery: 7, large: pods}); failure != "" {
				t.Fatal(failure)
			}
			t.Logf("%d steps in %v", steps, time.Since(start))
		})
	}
}
