package enforcer

import (
	"fmt"
	"maps"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/nftpolicy/nftpolicy/nft"
)

// The compiler's state after churn: every map and slice the Compiler
// reaches through its fields (and through pointers to structs it holds,
// not through the elements of maps and slices) has the length a fresh
// compiler's has for the same snapshot, and every reference count (a
// refCounted's users of each key) is the same: nothing left behind by
// pods, policies and addresses that came and went, which the table would
// not show until much later, or never.

// hcStateSkip are fields that are per call, or caches whose size is not
// state (rebuilt on demand).
var hcStateSkip = map[string]bool{
	"call": true, "prevTable": true, "lastTable": true, "patches": true,
	"chains.touched": true, "sets.touched": true, "chains.order": true, "sets.order": true,
	"every": true, "changedPeers": true, "nsList": true, "podList": true, "policyList": true,
	"clusterList": true, "nodeList": true, "dispatch": true, "ports": true, "wholeWrite": true,
	// flow ids keep retired keys for a while by design (flowlog.go)
	"flowIDs": true,
}

// compilerShape lists path → keys of each map (the count, for maps keyed
// by pointers), length of each slice, and reference counts of c's state.
func compilerShape(c *Compiler) map[string]string {
	out := map[string]string{}
	seen := map[uintptr]bool{}
	var walk func(v reflect.Value, path string, depth int)
	walk = func(v reflect.Value, path string, depth int) {
		if depth > 10 || hcStateSkip[strings.TrimPrefix(path, ".")] {
			return
		}
		switch v.Kind() {
		case reflect.Pointer:
			if v.IsNil() || v.Elem().Kind() != reflect.Struct || seen[v.Pointer()] {
				return
			}
			seen[v.Pointer()] = true
			walk(v.Elem(), path, depth+1)
		case reflect.Struct:
			for i := range v.NumField() {
				walk(v.Field(i), path+"."+v.Type().Field(i).Name, depth+1)
			}
		case reflect.Slice:
			out[path] = fmt.Sprint(v.Len())
		case reflect.Map:
			// Its keys, not only how many: an entry left behind in place
			// of one that should be there keeps the count. Keys that are
			// pointers differ between two compilers; their count is all.
			out[path] = fmt.Sprint(v.Len())
			if v.Type().Key().Kind() != reflect.Pointer {
				keys := make([]string, 0, v.Len())
				for _, k := range v.MapKeys() {
					keys = append(keys, fmt.Sprint(k))
				}
				sort.Strings(keys)
				out[path] = strings.Join(keys, " ")
			}
			// reference counts
			if vt := v.Type().Elem(); vt.Kind() == reflect.Pointer && vt.Elem().Kind() == reflect.Struct {
				if f, ok := vt.Elem().FieldByName("refs"); ok && f.Type.Kind() == reflect.Int {
					var refs []string
					iter := v.MapRange()
					for iter.Next() {
						refs = append(refs, fmt.Sprintf("%v=%d", iter.Key(), iter.Value().Elem().FieldByName("refs").Int()))
					}
					sort.Strings(refs)
					out[path+" refs"] = strings.Join(refs, " ")
				}
			}
		}
	}
	walk(reflect.ValueOf(c), "", 0)
	return out
}

func requireSameShape(t *testing.T, inc, fresh *Compiler, where string) {
	t.Helper()
	got, want := compilerShape(inc), compilerShape(fresh)
	var diffs []string
	for k, w := range want {
		if got[k] != w {
			diffs = append(diffs, fmt.Sprintf("%s: %.300s, a fresh compiler's %.300s", k, got[k], w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: %.300s, a fresh compiler has none", k, g))
		}
	}
	// The duplicate counts the patches keep (peer and named-port sets),
	// which the tables do not show until a giver goes.
	for e := range fresh.peers.values() {
		g, ok := inc.peers.get(e.key)
		if ok && e.parts == nil && g.dups != nil && !maps.Equal(g.dups, e.dups) {
			diffs = append(diffs, fmt.Sprintf("peer set %s counts duplicates %v, a fresh compiler's %v", e.key, g.dups, e.dups))
		}
	}
	for e := range fresh.portSets.values() {
		g, ok := inc.portSets.get(e.use)
		if ok && !maps.Equal(g.dups, e.dups) && (len(g.dups) > 0 || len(e.dups) > 0) {
			diffs = append(diffs, fmt.Sprintf("named-port set %v counts duplicates %v, a fresh compiler's %v", e.use, g.dups, e.dups))
		}
	}
	if len(diffs) > 0 {
		slices.Sort(diffs)
		t.Fatalf("%s: the compiler's state differs from a fresh compiler's:\n  %s", where, strings.Join(diffs, "\n  "))
	}
}

// TestHostileClaimsStateAfterChurn runs the claims world and compares the
// whole state with a fresh compiler's every few steps.
func TestHostileClaimsStateAfterChurn(t *testing.T) {
	for seed := uint64(101); seed <= 106; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			w := newHCWorld(seed)
			opts := Options{Node: testNode, DenyUnknown: seed%2 == 0}
			inc := NewCompiler(opts)
			for step := range 150 {
				event := w.step()
				snap := w.snapshot()
				inc.Compile(snap, DefaultPriority)
				if step%10 == 9 {
					fresh := NewCompiler(opts)
					fresh.Compile(snap, DefaultPriority)
					requireSameShape(t, inc, fresh, fmt.Sprintf("step %d (%s)", step, event))
				}
			}
		})
	}
}

// TestHostileClaimsHeapFlat: the live heap after a collection, with a
// fixed cluster churning (pods replaced on shared addresses, terminating,
// going and coming back, policies toggled), is no larger after many more
// events than after a few. Compared as a ratio, not a wall clock.
func TestHostileClaimsHeapFlat(t *testing.T) {
	w := newHCWorld(77)
	// A fixed cluster size: every name of every namespace, always there.
	for _, ns := range hcNamespaces {
		for _, n := range hcPodNames {
			p := w.randomPod(ns, n)
			w.put(p)
		}
	}
	inc := NewCompiler(Options{Node: testNode})
	next := 0
	churn := func(n int) {
		for range n {
			// A pod goes and one of a new name comes (as a Deployment's
			// do), on the shared addresses; or one is replaced by another
			// of the same name. The cluster keeps its size.
			old, _ := w.anyPod()
			if w.r.IntN(2) == 0 {
				delete(w.pods, objKey{old.ns, old.name})
				next++
				w.put(w.randomPod(w.pick(hcNamespaces...), fmt.Sprintf("p-%d", next)))
			} else {
				w.put(w.randomPod(old.ns, old.name))
			}
			if w.r.IntN(5) == 0 {
				n := hcPolicyNames[w.r.IntN(len(hcPolicyNames))]
				w.policies[n] = !w.policies[n]
			}
			inc.Compile(w.snapshot(), DefaultPriority)
		}
	}
	live := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	churn(300)
	size := len(w.pods)
	before := live()
	churn(3000)
	after := live()
	runtime.KeepAlive(inc)
	if len(w.pods) != size {
		t.Fatalf("the cluster grew from %d to %d pods", size, len(w.pods))
	}
	t.Logf("live heap after 300 events %d B, after 3300 %d B", before, after)
	// A leak of even 100 bytes an event is 300 KB here.
	if after > before+256<<10 {
		t.Fatalf("live heap grew from %d to %d B over 3000 events of a fixed cluster", before, after)
	}
	_ = nft.IPv4
}
