package enforcer

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// lowerUnionRunLength makes unions of runs longer than n addresses on
// average interval sets for the rest of the test, so that the small test
// clusters change kind often.
func lowerUnionRunLength(t *testing.T, n int) {
	old := unionRunLength
	unionRunLength = n
	t.Cleanup(func() { unionRunLength = old })
}

// TestUnionKindFollowsRuns: the union of two namespaces' pods, which x/a
// allows on every port, is held per address while its ranges are short
// and as ranges, under another name, while they are long; each change of
// kind rewrites the pod chain asking it and takes the old set out, in a
// delta (never a whole write), and every step is what a fresh compile
// gives.
func TestUnionKindFollowsRuns(t *testing.T) {
	lowerUnionRunLength(t, 2)
	np := policy("x", "from-y-z", selecting("a"), ingressRule(peers(nsPeer("y"), nsPeer("z"))), ingressRule(peers(nsPodPeer("z", "c"))))
	// Two lists without ports: one union. y and z hold 10.0.2.1-3 and
	// 10.0.3.1-3, two ranges of three addresses: longer than 2 on average.
	without := func(ns, name string) func(*k8s.Snapshot) {
		return func(s *k8s.Snapshot) {
			s.Pods = slices.DeleteFunc(s.Pods, func(p *k8s.Pod) bool { return p.Namespace == ns && p.Name == name })
		}
	}
	steps := []struct {
		name   string
		change func(*k8s.Snapshot)
		ranges bool
	}{
		{"y and z whole", func(*k8s.Snapshot) {}, true},
		{"y/b goes: 3 ranges of 5 addresses", without("y", "b"), false},
		{"z/b goes too: 4 ranges of 4", without("z", "b"), false},
		{"back to whole", func(s *k8s.Snapshot) { *s = *cluster(np) }, true},
	}
	inc := NewCompiler(Options{Node: testNode})
	cur := cluster(np)
	var prev *nft.Table
	for i, st := range steps {
		next := *cur
		next.Pods = slices.Clone(cur.Pods)
		st.change(&next)
		next.Sort()
		cur = &next
		got, _ := inc.Compile(cur, DefaultPriority)
		if i > 0 {
			if d := inc.Delta(); d.Full {
				t.Fatalf("%s: a whole write (%s)", st.name, d.Reason)
			}
		}
		prev = checkCompiled(t, inc, Options{Node: testNode}, prev, got, nil, cur, DefaultPriority, st.name)
		var union *nft.Set
		for _, s := range got.Sets {
			if strings.HasPrefix(s.Comment, "peers "+unionPrefix) && nft.FamilyOf(setFirstAddr(s)) == nft.IPv4 {
				if union != nil {
					t.Fatalf("%s: two unions: %s and %s", st.name, union.Name, s.Name)
				}
				union = s
			}
		}
		if union == nil {
			t.Fatalf("%s: no union in the table", st.name)
		}
		if got := strings.HasSuffix(union.Name, "-ranges") && union.Interval && !union.PerAddress; got != st.ranges {
			t.Errorf("%s: union %s (interval %v, per address %v), want as ranges: %v", st.name, union.Name, union.Interval, union.PerAddress, st.ranges)
		}
		asked := false
		for _, c := range got.Chains {
			for _, r := range c.Rules {
				if strings.Contains(fmt.Sprint(r.Exprs), union.Name) {
					asked = true
				}
			}
		}
		if !asked {
			t.Errorf("%s: no rule asks %s", st.name, union.Name)
		}
	}
}

// setFirstAddr is the first address of s, or the zero address.
func setFirstAddr(s *nft.Set) (a netip.Addr) {
	for _, e := range s.All() {
		return e.Addr
	}
	return a
}

// TestIncrementalUnionsChangeKind runs the union worlds
// (hostile_unions_world_test.go) with unions held as ranges from runs of
// two addresses, so that they change kind (and name) as pods come and go:
// every step must still be a fresh compile's, with a Delta that says so.
func TestIncrementalUnionsChangeKind(t *testing.T) {
	lowerUnionRunLength(t, 1)
	flips := 0
	for seed := uint64(1); seed <= 10; seed++ {
		w := newUUWorld(seed, seed%2 == 0)
		opts := Options{Node: testNode}
		inc := NewCompiler(opts)
		var prev *nft.Table
		for step := 0; step < 120; step++ {
			event := w.batch(3)
			got := checkIncremental(t, inc, opts, prev, w.snapshot(), DefaultPriority, fmt.Sprintf("seed %d step %d (%q)", seed, step, event))
			if prev != nil {
				flips += kindChanges(prev, got)
			}
			prev = got
		}
	}
	t.Logf("%d unions changed kind", flips)
	if flips < 10 {
		t.Fatalf("only %d unions changed kind: the change of kind is not exercised", flips)
	}
}

// kindChanges counts the union sets of a held under one kind and b under
// the other.
func kindChanges(a, b *nft.Table) int {
	kind := func(t *nft.Table) map[string]bool {
		out := map[string]bool{}
		for _, s := range t.Sets {
			if strings.HasPrefix(s.Comment, "peers "+unionPrefix) {
				out[strings.TrimSuffix(s.Name, "-ranges")] = strings.HasSuffix(s.Name, "-ranges")
			}
		}
		return out
	}
	ka, kb := kind(a), kind(b)
	n := 0
	for name, ranges := range ka {
		if r, ok := kb[name]; ok && r != ranges {
			n++
		}
	}
	return n
}
