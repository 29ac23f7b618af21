//go:build linux

package enforcer

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nftpolicy/nftpolicy/internal/scale"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// The named-port sets on the kernel: the tables of the hostile named-port
// world (hostile_portsets_world_test.go), and a scale.Cluster emptied and
// refilled, are programmed into a throwaway network namespace as the
// daemon programs them (the first whole, then each Compiler.Delta through
// WriteDeltaAt). The kernel must accept every batch, hold exactly the
// compiled table afterwards (Conn.Drift), and `nft list set` of each
// named-port set must show exactly the set's elements.

// hpKernelElements lists the elements of set name in table nftpolicy of
// netns, as `nft -j list set` gives them, each "addr . proto . port".
func hpKernelElements(t *testing.T, netns, name string) []string {
	t.Helper()
	var got []string
	for _, raw := range kernelSetElements(t, netns, name) {
		var e struct {
			Concat []any `json:"concat"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatalf("set %s: element %s: %v", name, raw, err)
		}
		if len(e.Concat) != 3 {
			t.Fatalf("set %s: element %s is not address . protocol . port", name, raw)
		}
		got = append(got, fmt.Sprintf("%v . %v . %v", e.Concat[0], e.Concat[1], e.Concat[2]))
	}
	slices.Sort(got)
	return got
}

func hpModelElements(s *nft.Set) []string {
	var out []string
	for _, e := range s.All() {
		out = append(out, fmt.Sprintf("%s . %s . %d", e.Addr, strings.ToLower(e.Proto.String()), e.Port))
	}
	slices.Sort(out)
	return out
}

// hpRequireKernelPortSets lists every named-port set of table in netns and
// compares it with the model.
func hpRequireKernelPortSets(t *testing.T, netns string, table *nft.Table, where string) {
	t.Helper()
	for _, s := range table.Sets {
		if !isPortSet(s) {
			continue
		}
		got, want := hpKernelElements(t, netns, s.Name), hpModelElements(s)
		if !slices.Equal(got, want) {
			extra, missing := hpStringDiff(got, want)
			t.Fatalf("%s: nft list set %s shows %d elements, the table %d: extra %.10v, missing %.10v", where, s.Name, len(got), len(want), extra, missing)
		}
	}
}

func hpStringDiff(got, want []string) (extra, missing []string) {
	g, w := map[string]bool{}, map[string]bool{}
	for _, s := range got {
		g[s] = true
	}
	for _, s := range want {
		w[s] = true
	}
	for _, s := range got {
		if !w[s] {
			extra = append(extra, s)
		}
	}
	for _, s := range want {
		if !g[s] {
			missing = append(missing, s)
		}
	}
	return extra, missing
}

// hpProgram writes got over conn as the daemon does (the first table
// whole, then the Compiler's delta) and fails unless the kernel takes it
// and holds got afterwards.
func hpProgram(t *testing.T, conn *nft.Conn, inc *Compiler, prev, got *nft.Table, where string) {
	t.Helper()
	var err error
	if prev == nil {
		_, err = conn.Apply(got)
	} else {
		d := inc.Delta()
		_, err = conn.WriteDeltaAt(d, got, 0)
		if err != nil {
			t.Fatalf("%s: the kernel refuses the delta: %v\n%.3000s", where, err, nft.RenderDelta(d, got))
		}
	}
	if err != nil {
		t.Fatalf("%s: the kernel refuses the table: %v", where, err)
	}
	if drift, err := conn.Drift(got); err != nil || drift != "" {
		t.Fatalf("%s: the kernel drifts from the table: %q, %v", where, drift, err)
	}
}

func TestHostilePortSetsKernelWorld(t *testing.T) {
	ns, conn := openKernelNS(t, "hpnp")
	w := newHPWorld(7, 1500)
	inc := NewCompiler(Options{Node: testNode})
	var prev *nft.Table
	largest := 0
	for step := range 40 {
		event := "initial"
		if step > 0 {
			event = w.step()
		}
		where := fmt.Sprintf("step %d (%s)", step, event)
		got, _ := inc.Compile(w.snapshot(), DefaultPriority)
		hpProgram(t, conn, inc, prev, got, where)
		if step%8 == 0 || step == 39 {
			hpRequireKernelPortSets(t, ns, got, where)
		}
		for _, s := range got.Sets {
			if isPortSet(s) {
				largest = max(largest, s.Len())
			}
		}
		prev = got
	}
	if largest < 2*chunkSize {
		t.Fatalf("the largest named-port set held %d elements: too few to span chunks", largest)
	}
}

// TestHostilePortSetsKernelEmptyAndRefill: a cluster of 6k pods, whose
// egress named-port sets hold 6k elements a family (a dozen chunks), loses every element
// in one event while its policies stay (this node's pods stop serving the
// names, every other pod goes: every element deleted, in many messages,
// the sets kept), gets them back in the next (every element added into
// empty sets), then half of them, interleaved, and pods at the very ends
// of both address spaces.
func TestHostilePortSetsKernelEmptyAndRefill(t *testing.T) {
	ns, conn := openKernelNS(t, "hpnp")
	full := scale.Cluster(15, 400, 3, 15, testNode, false)
	// One more egress policy, so that http is an egress named-port set too.
	full.Policies = append(full.Policies, hpEgressPolicy("ns-0", "egress-http", scale.NamedPort(tcp, "http")))
	full.Sort()
	// This node's pods, serving no port: they keep the policies active,
	// and with them the named-port sets.
	var quiet, half []*k8s.Pod
	for i, p := range full.Pods {
		if p.Spec.NodeName == testNode {
			q := *p
			q.Spec.Ports = nil
			quiet = append(quiet, &q)
		} else if i%2 == 0 {
			half = append(half, p)
		}
	}
	edges := []*k8s.Pod{
		hpEdgePod("ns-1", "edge-low", "0.0.0.0", "::"),
		hpEdgePod("ns-1", "edge-high", "255.255.255.255", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
	}
	with := func(pods ...[]*k8s.Pod) *k8s.Snapshot {
		s := *full
		s.Pods = slices.Concat(pods...)
		s.Sort()
		return &s
	}
	steps := []struct {
		name string
		snap *k8s.Snapshot
		list bool
	}{
		{"full", full, false},
		{"every element gone", with(quiet), true},
		{"every pod back", full, false},
		{"half of them", with(quiet, half), false},
		{"half and the ends", with(quiet, half, edges), true},
		{"every pod back and the ends", with(full.Pods, edges), false},
		{"only the ends", with(quiet, edges), true},
		{"every element gone", with(quiet), true},
		{"every pod back", full, true},
	}
	inc := NewCompiler(Options{Node: testNode})
	var prev *nft.Table
	largest := 0
	for i, st := range steps {
		where := fmt.Sprintf("step %d (%s)", i, st.name)
		got, _ := inc.Compile(st.snap, DefaultPriority)
		want, _ := NewCompiler(Options{Node: testNode}).Compile(st.snap, DefaultPriority)
		requirePortSetsAsFresh(t, got, want, where)
		hpProgram(t, conn, inc, prev, got, where)
		if st.list {
			hpRequireKernelPortSets(t, ns, got, where)
		}
		sets := 0
		for _, s := range got.Sets {
			if isPortSet(s) {
				sets++
				largest = max(largest, s.Len())
			}
		}
		if sets < 4 {
			t.Fatalf("%s: %d named-port sets, want the 4 of egress http and dns", where, sets)
		}
		prev = got
	}
	if largest < 6000 {
		t.Fatalf("the largest named-port set held %d elements, want 6000", largest)
	}
}

func hpEdgePod(ns, name string, ips ...string) *k8s.Pod {
	return hpPod(ns, name, "node-other", []corev1.ContainerPort{
		{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
		{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
	}, ips...)
}
