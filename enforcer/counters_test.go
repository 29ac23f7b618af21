package enforcer

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nftpolicy/nftpolicy/nft"
)

var countersSnap = cluster(
	policy("x", "deny", denyIngress),
	policy("x", "allow-y", ingressRule(peers(nsPeer("y")), port(tcp, 80))),
	policy("y", "egress", egressRule(peers(podPeer("a")))),
)

// With Counters, where pod chains walk their policies, the rules that
// allow (set our allow bit) and the pod chains' final drops count, and
// nothing else changes: without its counters the table is the one
// compiled without them.
func TestCompileCountersWalked(t *testing.T) {
	snap := countersSnap
	plain, _ := Compile(snap, Options{Node: testNode, WalkPolicies: true})
	counted, _ := Compile(snap, Options{Node: testNode, Counters: true, WalkPolicies: true})
	chains := NewCompiler(Options{Node: testNode, Counters: true, WalkPolicies: true})
	chains.Compile(snap, 0)
	keys := chains.countedChains()

	allows, drops := 0, 0
	for _, ch := range counted.Chains {
		for i, r := range ch.Rules {
			counts := slices.Contains(r.Exprs, nft.Expr(nft.Counter{}))
			allow := slices.ContainsFunc(r.Exprs, func(e nft.Expr) bool { m, ok := e.(nft.SetMark); return ok && m.Set != 0 })
			last := i == len(ch.Rules)-1 && slices.Contains(r.Exprs, nft.Expr(nft.Verdict{Kind: nft.Drop}))
			if counts != (allow || last) {
				t.Errorf("chain %s rule %d (%s): counter %v, want one exactly on allows and final drops", ch.Name, i, nft.RenderRule(r), counts)
			}
			if !counts {
				continue
			}
			key, ok := keys[ch.Name]
			switch {
			case !ok:
				t.Errorf("chain %s counts but is not a counted chain", ch.Name)
			case allow:
				allows++
				if key.Policy == "" || key.Pod != "" {
					t.Errorf("chain %s allows, counted as %+v", ch.Name, key)
				}
			default:
				drops++
				if key.Pod == "" || key.Policy != "" {
					t.Errorf("chain %s drops, counted as %+v", ch.Name, key)
				}
			}
			ch.Rules[i].Exprs = slices.DeleteFunc(slices.Clone(r.Exprs), func(e nft.Expr) bool { return e == nft.Expr(nft.Counter{}) })
		}
	}
	podChains := 0
	for _, k := range keys {
		if k.Pod != "" {
			podChains++
		}
	}
	if allows == 0 || drops == 0 || drops != podChains {
		t.Errorf("%d allowing rules and %d drops count; want some, and one per pod chain (%d)", allows, drops, podChains)
	}
	if want := (CountKey{Namespace: "x", Policy: "allow-y", Direction: "ingress"}); !slices.Contains(valuesOf(keys), want) {
		t.Errorf("no counted chain for %+v in %v", want, keys)
	}
	if d := cmp.Diff(nft.Render(plain), nft.Render(counted)); d != "" {
		t.Errorf("without its counters the table differs from the one compiled without (-plain +counted):\n%s", d)
	}
}

// With Counters in the flat layout, a pod chain counts what it allowed
// and what it denied, and nothing else counts. An egress chain counts its
// allowed return and its final drop. An ingress chain, whose stage
// accepts at once, counts what reaches its stage (its first rule) for
// the pod's allowed connections, and its self rules and its drop against
// them, the drop also for the denied ones. Policy chains, which no packet
// walks there, keep their counters (a chain is the same whichever layout
// its namespace uses) but are not counted chains. Without its counters
// the table is the one compiled without.
func TestCompileCountersFlat(t *testing.T) {
	plain, _ := Compile(countersSnap, Options{Node: testNode})
	counted, _ := Compile(countersSnap, Options{Node: testNode, Counters: true})
	c := NewCompiler(Options{Node: testNode, Counters: true})
	c.Compile(countersSnap, 0)
	if chains := c.countedChains(); len(chains) != 0 {
		t.Errorf("counted chains %v in the flat layout; want none", chains)
	}
	rules := c.countedRules()
	podChains, atOnce := map[string]int{}, 0
	for _, ch := range counted.Chains {
		var counts []int
		for i, r := range ch.Rules {
			if slices.Contains(r.Exprs, nft.Expr(nft.Counter{})) {
				counts = append(counts, i)
			}
			ch.Rules[i].Exprs = slices.DeleteFunc(slices.Clone(r.Exprs), func(e nft.Expr) bool { return e == nft.Expr(nft.Counter{}) })
		}
		keys, ok := rules[ch.Name]
		if !ok {
			if len(counts) > 0 && !isPolicyChain(c, ch.Name) {
				t.Errorf("chain %s counts in rules %v but is not counted", ch.Name, counts)
			}
			continue
		}
		n := len(ch.Rules)
		if len(counts) == 0 || len(counts) != len(keys) || counts[len(counts)-1] != n-1 || !slices.Contains(ch.Rules[n-1].Exprs, nft.Expr(nft.Verdict{Kind: nft.Drop})) {
			t.Errorf("chain %s counts in rules %v as %+v; want a key a counted rule, the last its final drop", ch.Name, counts, keys)
			continue
		}
		denied := keys[len(keys)-1].adds
		allowed := denied
		allowed.Allowed = true
		if denied.Pod == "" || denied.Allowed {
			t.Errorf("chain %s: its drop counts for %+v; want the pod denied", ch.Name, denied)
		}
		switch dir := denied.Direction; dir {
		case "egress":
			podChains[dir]++
			if len(counts) != 2 || !slices.Contains(ch.Rules[counts[0]].Exprs, nft.Expr(nft.MarkBitsSet{Bits: c.bit})) ||
				keys[0] != (countedRule{adds: allowed}) || keys[1] != (countedRule{adds: denied}) {
				t.Errorf("egress chain %s counts in rules %v as %+v; want its allowed return, then its drop", ch.Name, counts, keys)
			}
		case "ingress":
			podChains[dir]++
			if slices.Contains(ch.Rules[counts[0]].Exprs, nft.Expr(nft.MarkBitsSet{Bits: c.bit})) { // nothing allows: no stage
				if len(keys) != 2 || keys[0] != (countedRule{adds: allowed}) || keys[1] != (countedRule{adds: denied}) {
					t.Errorf("ingress chain %s with nothing allowed counts %+v; want its allowed return, then its drop", ch.Name, keys)
				}
				break
			}
			if counts[0] != 1 || keys[0] != (countedRule{adds: allowed}) {
				t.Errorf("ingress chain %s counts %+v in rules %v; want the stage's first rule (1, after the clear) for the allowed", ch.Name, keys, counts)
			}
			for i, idx := range counts[1 : len(counts)-1] {
				if !slices.Contains(ch.Rules[idx].Exprs, nft.Expr(nft.CtStatusDNAT{})) || keys[1+i] != (countedRule{takes: allowed}) {
					t.Errorf("ingress chain %s counts rule %d (%s) as %+v; want only self rules between, against the allowed", ch.Name, idx, nft.RenderRule(ch.Rules[idx]), keys[1+i])
				}
			}
			if keys[len(keys)-1] != (countedRule{adds: denied, takes: allowed}) {
				t.Errorf("ingress chain %s: its drop counts as %+v; want for the denied, against the allowed", ch.Name, keys[len(keys)-1])
			}
			for _, r := range ch.Rules {
				if slices.Contains(r.Exprs, nft.Expr(nft.MarkBitsSet{Bits: c.bit})) {
					t.Errorf("ingress chain %s reads our bit (%s), which its stage never sets", ch.Name, nft.RenderRule(r))
				}
			}
			atOnce++
		default:
			t.Errorf("chain %s counts for direction %q", ch.Name, dir)
		}
	}
	if podChains["ingress"] == 0 || podChains["egress"] == 0 || atOnce == 0 {
		t.Errorf("flat pod chains that count, by direction: %v, %d of them ingress with a stage; want some of each", podChains, atOnce)
	}
	if d := cmp.Diff(nft.Render(plain), nft.Render(counted)); d != "" {
		t.Errorf("without its counters the table differs from the one compiled without (-plain +counted):\n%s", d)
	}
}

func isPolicyChain(c *Compiler, name string) bool {
	for _, p := range c.policies {
		for _, ch := range p.chains {
			if ch != nil && ch.Name == name {
				return true
			}
		}
	}
	return false
}

func valuesOf(m map[string]CountKey) []CountKey {
	var out []CountKey
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// ConnCounter adds what each rule counted since it last saw it; a rule it
// has not seen (a chain written again, a table replaced) counts from zero,
// and a key whose chains are gone is forgotten.
func TestConnCounter(t *testing.T) {
	allow := CountKey{Namespace: "x", Policy: "p", Direction: "ingress"}
	deny := CountKey{Namespace: "x", Pod: "a", Direction: "ingress"}
	chains := map[string]CountKey{"ingress-1-x/p": allow, "ingress-pod-2-x/a": deny}
	var cc ConnCounter
	steps := []struct {
		name   string
		chains map[string]CountKey
		read   nft.RuleCounts
		want   map[CountKey]uint64
	}{
		{"first read", chains, nft.RuleCounts{Table: 1, Rules: []nft.RuleCount{
			{Chain: "ingress-1-x/p", Handle: 10, Packets: 2},
			{Chain: "ingress-1-x/p", Handle: 11, Packets: 1},
			{Chain: "ingress-pod-2-x/a", Handle: 20, Packets: 4},
			{Chain: "not-counted", Handle: 30, Packets: 9},
		}}, map[CountKey]uint64{allow: 3, deny: 4}},
		{"grown", chains, nft.RuleCounts{Table: 1, Rules: []nft.RuleCount{
			{Chain: "ingress-1-x/p", Handle: 10, Packets: 5},
			{Chain: "ingress-1-x/p", Handle: 11, Packets: 1},
			{Chain: "ingress-pod-2-x/a", Handle: 20, Packets: 4},
		}}, map[CountKey]uint64{allow: 6, deny: 4}},
		{"policy chain written again", chains, nft.RuleCounts{Table: 1, Rules: []nft.RuleCount{
			{Chain: "ingress-1-x/p", Handle: 12, Packets: 1},
			{Chain: "ingress-pod-2-x/a", Handle: 20, Packets: 5},
		}}, map[CountKey]uint64{allow: 7, deny: 5}},
		{"table replaced, handles again", chains, nft.RuleCounts{Table: 2, Rules: []nft.RuleCount{
			{Chain: "ingress-1-x/p", Handle: 12, Packets: 2},
			{Chain: "ingress-pod-2-x/a", Handle: 20, Packets: 0},
		}}, map[CountKey]uint64{allow: 9, deny: 5}},
		{"pod gone", map[string]CountKey{"ingress-1-x/p": allow}, nft.RuleCounts{Table: 2, Rules: []nft.RuleCount{
			{Chain: "ingress-1-x/p", Handle: 12, Packets: 2},
		}}, map[CountKey]uint64{allow: 9}},
		{"pod back", chains, nft.RuleCounts{Table: 2, Rules: []nft.RuleCount{
			{Chain: "ingress-1-x/p", Handle: 12, Packets: 2},
			{Chain: "ingress-pod-2-x/a", Handle: 40, Packets: 1},
		}}, map[CountKey]uint64{allow: 9, deny: 1}},
	}
	for _, st := range steps {
		got := cc.Add(st.chains, &st.read)
		if d := cmp.Diff(st.want, got); d != "" {
			t.Errorf("%s: sums (-want +got):\n%s", st.name, d)
		}
	}
}

// A refused batch is counted, with the failed sync; a generation conflict
// is not a refusal. Every sync is reported to OnSync, timed when it
// compiled.
func TestSyncStats(t *testing.T) {
	s, f := newFakeSyncer(t)
	var results []error
	s.OnSync(func(res SyncResult, err error) {
		if res.Table == nil || res.CompileTime <= 0 {
			t.Errorf("sync reported without a table or a compile time: %+v", res)
		}
		results = append(results, err)
	})
	if _, err := s.Sync(fakeSnapA); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Syncs != 1 || st.FailedSyncs != 0 || st.Refused != 0 || st.Table == nil || st.LastSuccess.IsZero() || st.IsolatedPods != 3 {
		t.Errorf("after one sync: %+v; want 1 sync, its table and time, 3 isolated pods", st)
	}
	boom := errors.New("boom")
	f.Refuse(1, boom)
	if _, err := s.Sync(fakeSnapB); !errors.Is(err, boom) {
		t.Fatalf("refused sync: %v, want boom", err)
	}
	if st2 := s.Stats(); st2.Refused != 1 || st2.FailedSyncs != 1 || st2.Syncs != 1 || st2.LastSuccess != st.LastSuccess {
		t.Errorf("after a refused batch: %+v; want 1 refused, 1 failed, the last success unchanged", st2)
	}
	f.Commit() // another process commits: the next delta conflicts
	if _, err := s.Sync(fakeSnapB); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sync(fakeSnapC); err != nil {
		t.Fatal(err)
	}
	if st3 := s.Stats(); st3.Refused != 1 || st3.Syncs != 3 {
		t.Errorf("after two more syncs: %+v; want still 1 refused, 3 syncs", st3)
	}
	if len(results) != 4 || !errors.Is(results[1], boom) {
		t.Errorf("OnSync saw %v; want 4 syncs, the second refused", results)
	}
}

// A flat ingress chain counts what reaches its stage for the allowed and
// takes its drop (and self rules) back out (countedRule): the allowed sum
// is the difference, never falls though a read sees the drop's counter
// after the stage's (a packet between the two is in one and not yet in
// the other), and a chain written again counts from zero, as Add's rules.
func TestConnCounterTakesBack(t *testing.T) {
	denied := CountKey{Namespace: "x", Pod: "a", Direction: "ingress"}
	allowed := denied
	allowed.Allowed = true
	rules := map[string][]countedRule{"ingress-pod-x/a": {{adds: allowed}, {takes: allowed}, {adds: denied, takes: allowed}}}
	read := func(stage, self, drop uint64, handle uint64) *nft.RuleCounts {
		return &nft.RuleCounts{Table: 1, Rules: []nft.RuleCount{
			{Chain: "ingress-pod-x/a", Handle: handle, Packets: stage},
			{Chain: "ingress-pod-x/a", Handle: handle + 1, Packets: self},
			{Chain: "ingress-pod-x/a", Handle: handle + 2, Packets: drop},
		}}
	}
	var cc ConnCounter
	for _, step := range []struct {
		name                  string
		rc                    *nft.RuleCounts
		wantAllowed, wantDeny uint64
	}{
		{"first read", read(7, 1, 2, 10), 4, 2},
		{"drops seen before their stage", read(8, 1, 5, 10), 4, 5},
		{"the stage catches up", read(12, 1, 5, 10), 6, 5},
		{"the chain written again", read(3, 0, 1, 20), 8, 6},
	} {
		got := cc.add(nil, rules, step.rc)
		if got[allowed] != step.wantAllowed || got[denied] != step.wantDeny || len(got) != 2 {
			t.Errorf("%s: %v; want allowed %d, denied %d", step.name, got, step.wantAllowed, step.wantDeny)
		}
	}
}
