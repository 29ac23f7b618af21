package k8s

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// quarantinePod is pod x/b on node-1 at 10.244.1.2 with the labels given
// (YAML flow mapping) and the rest of its spec.
func quarantinePod(labels, rest string) string {
	return "apiVersion: v1\nkind: Pod\nmetadata:\n  namespace: x\n  name: b\n  labels: " + labels +
		"\nspec: {nodeName: node-1" + rest + "}\nstatus: {phase: Running, podIP: 10.244.1.2}\n"
}

// A rejected pod whose stand-in lacks a label the document gives (invalid,
// unreadable) or whose duplicates disagree on labels is quarantined: its
// true labels are not known. One whose stand-in keeps every label is not.
// Either way its error says a stand-in is in effect (StandIn) and is not
// Lost; an error that leaves an object out with nothing in its place is.
func TestQuarantinedStandIns(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		// quarantined is Snapshot.Quarantined rendered; lost the errors
		// (Location) that are Lost.
		quarantined, lost string
	}{
		{"an invalid label value", map[string]string{"a.yaml": quarantinePod(`{pod: "b "}`, "")}, "[x/b]", ""},
		{"an invalid label key", map[string]string{"a.yaml": quarantinePod(`{pod: b, "bad key!": v}`, "")}, "[x/b]", ""},
		{"a label that is not a string", map[string]string{"a.yaml": quarantinePod(`{pod: b, version: 2}`, "")}, "[x/b]", ""},
		{"labels that are not a mapping", map[string]string{"a.yaml": quarantinePod(`[pod, b]`, "")}, "[x/b]", ""},
		{"valid labels, an invalid port", map[string]string{"a.yaml": quarantinePod(`{pod: b}`, ", containers: [{name: c, ports: [{containerPort: 0}]}]")}, "[]", ""},
		{"duplicates that disagree on labels", map[string]string{
			"a.yaml": quarantinePod(`{pod: b, v: "1"}`, ""), "b.yaml": quarantinePod(`{pod: b, v: "2"}`, ""),
		}, "[x/b]", ""},
		{"duplicates that agree on labels, not on containers", map[string]string{
			"a.yaml": quarantinePod(`{pod: b}`, ""), "b.yaml": quarantinePod(`{pod: b}`, ", containers: [{name: c}]"),
		}, "[]", ""},
		{"a duplicate with a quarantined stand-in", map[string]string{
			"a.yaml": quarantinePod(`{pod: b}`, ""), "b.yaml": quarantinePod(`{pod: "b "}`, ""),
		}, "[x/b]", ""},
		{"duplicates that disagree on the address: unsettled", map[string]string{
			"a.yaml": quarantinePod(`{pod: b}`, ""), "b.yaml": strings.Replace(quarantinePod(`{pod: b}`, ""), "10.244.1.2", "10.244.1.3", 1),
		}, "[x/b]", ""},
		{"a kind typo", map[string]string{"a.yaml": strings.Replace(quarantinePod(`{pod: b}`, ""), "kind: Pod", "kind: Podd", 1)}, "[]", "a.yaml doc 0"},
		{"a rejected namespace (quarantined: TestQuarantinedNamespaces)", map[string]string{"a.yaml": "apiVersion: v1\nkind: Namespace\nmetadata: {name: x, labels: {team: 'a b'}}\n"}, "[]", ""},
		{"a pod whose address cannot be read", map[string]string{"a.yaml": strings.Replace(quarantinePod(`{pod: "b "}`, ""), "10.244.1.2", "10.244.1.256", 1)}, "[]", "a.yaml doc 0"},
		{"a document that does not parse", map[string]string{"a.yaml": "kind: Pod\n  metadata: [\n"}, "[]", "a.yaml doc 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for name, content := range tc.files {
				fsys[name] = &fstest.MapFile{Data: []byte(content)}
			}
			snap, objErrs, err := LoadFS(fsys)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(quarantinedNames(snap)); got != tc.quarantined {
				t.Errorf("quarantined %s, want %s; errors:\n%s", got, tc.quarantined, strings.Join(errorStrings(objErrs), "\n"))
			}
			var lost []string
			for _, e := range objErrs {
				if e.Warning() {
					t.Errorf("%v is a warning", e)
				}
				if e.Lost() {
					lost = append(lost, e.Location())
				} else if !e.StandIn && !e.KeptLastGood {
					t.Errorf("%v: neither Lost, StandIn nor KeptLastGood", e)
				}
			}
			if got := strings.Join(lost, ", "); got != tc.lost {
				t.Errorf("lost %q, want %q; errors:\n%s", got, tc.lost, strings.Join(errorStrings(objErrs), "\n"))
			}
			if strings.Contains(tc.quarantined, "x/b") {
				if all := strings.Join(errorStrings(objErrs), "\n"); !strings.Contains(all, "quarantined as its true labels are not known") &&
					!strings.Contains(all, "disagree on where the pod is, so it is quarantined") {
					t.Errorf("no error says the pod is quarantined:\n%s", all)
				}
			}
		})
	}
}

func quarantinedNames(s *Snapshot) []string {
	out := []string{}
	for _, q := range s.Quarantined {
		out = append(out, q.String())
	}
	return out
}

// A quarantined stand-in kept as the last good version of a pod whose next
// edit is rejected too stays quarantined; a valid edit releases it, and a
// later rejected edit keeps the valid version, not quarantined.
func TestWatchDirKeepsQuarantine(t *testing.T) {
	d := newWatchDir(t)
	d.write("pods.yaml", quarantinePod(`{pod: "b "}`, ""))
	u := d.settle()
	if got := quarantinedNames(u.Snapshot); fmt.Sprint(got) != "[x/b]" {
		t.Fatalf("first load: quarantined %v, want [x/b]", got)
	}
	for _, step := range []struct {
		name, content, want string
	}{
		{"another rejected edit", quarantinePod(`{pod: b}`, ", containers: [{name: c, ports: [{containerPort: 0}]}]"), "[x/b]"},
		{"a valid edit", quarantinePod(`{pod: b}`, ""), "[]"},
		{"a rejected edit of the valid pod", quarantinePod(`{pod: "b "}`, ""), "[]"},
	} {
		d.write("pods.yaml", step.content)
		u := d.settle()
		if got := quarantinedNames(u.Snapshot); fmt.Sprint(got) != step.want {
			t.Errorf("%s: quarantined %v, want %s; errors:\n%s", step.name, got, step.want, strings.Join(errorStrings(u.Errors), "\n"))
		}
	}

	// kill -9, start again: no last good version, quarantined again.
	d.w = newDirWatcher(d.dir, time.Second)
	if got := quarantinedNames(d.settle().Snapshot); fmt.Sprint(got) != "[x/b]" {
		t.Errorf("after a restart: quarantined %v, want [x/b]", got)
	}
}

// Sort orders Quarantined too.
func TestSnapshotSortsQuarantined(t *testing.T) {
	s := &Snapshot{Quarantined: []types.NamespacedName{{Namespace: "y", Name: "a"}, {Namespace: "x", Name: "b"}, {Namespace: "x", Name: "a"}}}
	s.Sort()
	if got := fmt.Sprint(quarantinedNames(s)); got != "[x/a x/b y/a]" {
		t.Errorf("sorted: %s", got)
	}
}
