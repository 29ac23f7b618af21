package k8s

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

func TestWatchDirReportsContentChanges(t *testing.T) {
	dir := t.TempDir()
	ns := func(name string) string {
		return "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + name + "\n"
	}
	// Written whole and renamed into place, as editors and ConfigMap
	// updates do: the poller must never see a half-written file (it once
	// caught os.WriteFile's truncation and read an empty directory).
	write := func(content string) {
		tmp := filepath.Join(dir, ".ns.yaml.tmp")
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "ns.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	write(ns("a"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	updates := WatchDir(ctx, dir, 10*time.Millisecond, time.Hour)

	next := func() DirUpdate {
		t.Helper()
		select {
		case u := <-updates:
			return u
		case <-time.After(5 * time.Second):
			t.Fatal("no update within 5s")
		}
		return DirUpdate{}
	}
	if u := next(); u.Err != nil || len(u.Snapshot.Namespaces) != 1 || u.Snapshot.Namespaces[0].Name != "a" {
		t.Fatalf("first update = %+v", u)
	}
	write(ns("a")) // same bytes, new mtime: no reload
	write(ns("b"))
	if u := next(); u.Err != nil || len(u.Snapshot.Namespaces) != 1 || u.Snapshot.Namespaces[0].Name != "b" {
		t.Fatalf("update after change = %+v", u)
	}
	select {
	case u := <-updates:
		t.Fatalf("unexpected update without a change: %+v", u)
	case <-time.After(100 * time.Millisecond):
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	// RemoveAll empties the directory before removing it: a poll in
	// between may report the empty directory first.
	u := next()
	if u.Err == nil && u.Snapshot != nil && len(u.Snapshot.Namespaces) == 0 {
		u = next()
	}
	if u.Err == nil {
		t.Fatalf("removed directory reported no error: %+v", u)
	}
	cancel()
	for range updates { // the channel closes when the context ends
	}
}

// A watchDir drives a dirWatcher one poll at a time, so that tests say
// which poll sees what without any clock.
type watchDir struct {
	t   *testing.T
	dir string
	w   *dirWatcher
}

func newWatchDir(t *testing.T) *watchDir {
	dir := t.TempDir()
	return &watchDir{t: t, dir: dir, w: newDirWatcher(dir, time.Second)}
}

// write replaces name in place, not atomically, as a slow writer would.
func (d *watchDir) write(name, content string) {
	d.t.Helper()
	if err := os.WriteFile(filepath.Join(d.dir, name), []byte(content), 0o644); err != nil {
		d.t.Fatal(err)
	}
}

// poll polls once and returns the update sent, or nil.
func (d *watchDir) poll() *DirUpdate {
	u, ok := d.w.tick()
	if !ok {
		return nil
	}
	return &u
}

// settle polls until an update is sent (at most three polls) and returns it.
func (d *watchDir) settle() DirUpdate {
	d.t.Helper()
	for range 3 {
		if u := d.poll(); u != nil {
			return *u
		}
	}
	d.t.Fatal("no update after three polls of an unchanging directory")
	return DirUpdate{}
}

func nsDoc(name string) string {
	return "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + name + "\n"
}

// allowFromY is a policy whose from list, cut short after "from:", reads as
// null: every peer.
const allowFromY = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: x, name: allow-from-y}
spec:
  podSelector: {}
  ingress:
  - from:
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: "y"}}
`

// A change is loaded only once two polls in a row read the same content: a
// file caught half-written (here, a from list cut short, which allows every
// peer) is never loaded.
func TestWatchDirLoadsOnlyStableContent(t *testing.T) {
	d := newWatchDir(t)
	d.write("ns.yaml", nsDoc("x"))
	if u := d.poll(); u != nil {
		t.Fatalf("first poll loaded before a second one confirmed the content: %+v", u)
	}
	if u := d.poll(); u == nil || u.Err != nil || len(u.Snapshot.Namespaces) != 1 {
		t.Fatalf("second poll of the same content: %+v, want it loaded", u)
	}

	half := allowFromY[:strings.Index(allowFromY, "from:")+len("from:")] + "\n"
	d.write("policy.yaml", half)
	if u := d.poll(); u != nil {
		t.Fatalf("half-written file loaded at once: %+v", u.Snapshot.Policies)
	}
	d.write("policy.yaml", allowFromY)
	if u := d.poll(); u != nil {
		t.Fatalf("content that changed since the previous poll loaded: %+v", u.Snapshot.Policies)
	}
	u := d.poll()
	if u == nil || u.Err != nil || len(u.Snapshot.Policies) != 1 || u.Snapshot.Policies[0].Spec.Ingress[0].From == nil {
		t.Fatalf("completed policy: %+v, want it loaded with its from list", u)
	}
	if u := d.poll(); u != nil {
		t.Fatalf("update without a change: %+v", u)
	}
}

// Each file keeps its own last good state: a file that stops parsing or
// cannot be read keeps the objects it had, Err names it, and the other
// files keep updating. A removed file drops its objects.
func TestWatchDirKeepsLastGoodPerFile(t *testing.T) {
	d := newWatchDir(t)
	d.write("a.yaml", nsDoc("a"))
	d.write("b.yaml", nsDoc("b1"))
	namesOf := func(u DirUpdate) string { return strings.Join(names(u.Snapshot), ",") }
	if u := d.settle(); u.Err != nil || namesOf(u) != "Namespace a,Namespace b1" {
		t.Fatalf("start: %v, %v", namesOf(u), u.Err)
	}

	for _, tc := range []struct {
		name    string
		change  func()
		want    string // objects
		wantErr string // in Err, "" for none
	}{
		{"a stops parsing", func() { d.write("a.yaml", nsDoc("a2")+"  labels: {x: [\n") },
			"Namespace a,Namespace b1", filepath.Join(d.dir, "a.yaml") + " doc 0: invalid YAML"},
		{"b still updates", func() { d.write("b.yaml", nsDoc("b2")) },
			"Namespace a,Namespace b2", "a.yaml doc 0: invalid YAML"},
		{"a parses again", func() { d.write("a.yaml", nsDoc("a3")) },
			"Namespace a3,Namespace b2", ""},
		{"a becomes a dangling link", func() {
			os.Remove(filepath.Join(d.dir, "a.yaml"))
			os.Symlink("missing.yaml", filepath.Join(d.dir, "a.yaml"))
		}, "Namespace a3,Namespace b2", filepath.Join(d.dir, "a.yaml") + ": no such file or directory"},
		{"a link loop next to it", func() { os.Symlink("loop.yaml", filepath.Join(d.dir, "loop.yaml")) },
			"Namespace a3,Namespace b2", filepath.Join(d.dir, "loop.yaml") + ": too many levels of symbolic links"},
		{"b still updates past both", func() { d.write("b.yaml", nsDoc("b3")) },
			"Namespace a3,Namespace b3", "loop.yaml"},
		{"removed files drop their objects", func() {
			os.Remove(filepath.Join(d.dir, "a.yaml"))
			os.Remove(filepath.Join(d.dir, "loop.yaml"))
		}, "Namespace b3", ""},
		{"a new file that never parsed gives what it can", func() { d.write("c.yaml", nsDoc("c")+"---\n"+"kind: [\n") },
			"Namespace b3,Namespace c", ""},
		{"the directory is removed: everything is kept", func() { os.RemoveAll(d.dir) },
			"Namespace b3,Namespace c", d.dir + ": no such file or directory; keeping every object"},
		{"recreated empty: holds nothing", func() { os.Mkdir(d.dir, 0o755) }, "", ""},
	} {
		tc.change()
		u := d.settle()
		if got := namesOf(u); got != tc.want {
			t.Errorf("%s: objects %q, want %q", tc.name, got, tc.want)
		}
		switch {
		case tc.wantErr == "" && u.Err != nil:
			t.Errorf("%s: Err %v, want none", tc.name, u.Err)
		case tc.wantErr != "" && (u.Err == nil || !strings.Contains(u.Err.Error(), tc.wantErr)):
			t.Errorf("%s: Err %v, want %q", tc.name, u.Err, tc.wantErr)
		}
	}
}

// An error is sent again while it lasts, after 1, 2, 4, ... polls, and an
// unchanged snapshot is the same pointer.
func TestWatchDirRepeatsErrorsWithBackoff(t *testing.T) {
	d := newWatchDir(t)
	d.w.maxWait = 4
	d.write("a.yaml", nsDoc("a"))
	first := d.settle()
	if err := os.Symlink("missing", filepath.Join(d.dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	u := d.settle()
	if u.Err == nil || u.Snapshot != first.Snapshot {
		t.Fatalf("dangling link: Err %v, same snapshot %v", u.Err, u.Snapshot == first.Snapshot)
	}
	var sentAt []int
	for i := 1; i <= 16; i++ {
		if u := d.poll(); u != nil {
			if u.Err == nil || u.Snapshot != first.Snapshot {
				t.Fatalf("repeat: %+v", u)
			}
			sentAt = append(sentAt, i)
		}
	}
	if diff := cmp.Diff([]int{1, 3, 7, 11, 15}, sentAt); diff != "" {
		t.Errorf("polls that repeated the error (-want +got):\n%s", diff)
	}
	os.Remove(filepath.Join(d.dir, "b.yaml"))
	if u := d.settle(); u.Err != nil {
		t.Errorf("after the link is removed: %v", u.Err)
	}
	if u := d.poll(); u != nil {
		t.Errorf("no error and no change, but an update: %+v", u)
	}
}

func TestWatchDirRefusesNonPositiveInterval(t *testing.T) {
	for _, interval := range []time.Duration{0, -time.Second} {
		for _, args := range [][2]time.Duration{{interval, time.Second}, {time.Second, interval}} {
			var got []DirUpdate
			for u := range WatchDir(context.Background(), t.TempDir(), args[0], args[1]) {
				got = append(got, u)
			}
			if len(got) != 1 || got[0].Err == nil || !strings.Contains(got[0].Err.Error(), "not positive") {
				t.Errorf("interval, rescan %v: %+v, want one update with an error", args, got)
			}
		}
	}
}

// wPod and wPolicy write the objects of the rejected-edit tests: pod x/b
// carries the labels given, policy x/<name> isolates pod b and allows the
// port given.
func wPod(name, labels string) string {
	return "apiVersion: v1\nkind: Pod\nmetadata:\n  namespace: x\n  name: " + name + "\n  labels: " + labels +
		"\nspec: {nodeName: node-1}\nstatus: {phase: Running, podIP: 10.244.1.2}\n"
}

func wPolicy(apiVersion, kind, name, port string) string {
	return "apiVersion: " + apiVersion + "\nkind: " + kind + "\nmetadata: {namespace: x, name: " + name + "}\n" +
		"spec:\n  podSelector: {matchLabels: {pod: b}}\n  ingress: [{ports: [{port: " + port + "}]}]\n"
}

// shape renders what the rejected-edit tests look at: pod labels (and IPs,
// when they are not wPod's) and the port a policy allows, or, for a
// stand-in with no rules, what it isolates.
func shape(s *Snapshot) string {
	var out []string
	for _, o := range s.Pods {
		ips := ""
		if ip := o.Status.PodIPs[0].IP; ip != "10.244.1.2" {
			ips = " " + ip
		}
		out = append(out, fmt.Sprintf("Pod %s/%s %v%s", o.Namespace, o.Name, o.Labels, ips))
	}
	for _, o := range s.Policies {
		if len(o.Spec.Ingress) == 0 && len(o.Spec.Egress) == 0 {
			out = append(out, fmt.Sprintf("NetworkPolicy %s/%s isolates %v %v", o.Namespace, o.Name, o.Spec.PodSelector.MatchLabels, o.Spec.PolicyTypes))
			continue
		}
		out = append(out, fmt.Sprintf("NetworkPolicy %s/%s port %s", o.Namespace, o.Name, o.Spec.Ingress[0].Ports[0].Port))
	}
	return strings.Join(out, ", ")
}

// A rejected edit of an object keeps the object's last good version, as
// the API server keeps an object whose update it rejects: dropping it
// would open its pods. A document that cannot be pinned to an object keeps
// what its file held; a new invalid object is left out; valid edits,
// deletions and kinds nftpolicy does not read still apply.
func TestWatchDirKeepsLastGoodObject(t *testing.T) {
	const v1 = "networking.k8s.io/v1"
	good := wPolicy(v1, "NetworkPolicy", "p1", "80") + "---\n" + wPolicy(v1, "NetworkPolicy", "p2", "80")
	d := newWatchDir(t)
	d.write("pods.yaml", wPod("b", "{pod: b}"))
	d.write("policies.yaml", good)
	start := "Pod x/b map[pod:b], NetworkPolicy x/p1 port 80, NetworkPolicy x/p2 port 80"
	start2 := strings.Replace(start, "pod:b]", "pod:b2]", 1)
	if u := d.settle(); u.Err != nil || len(u.Errors) != 0 || shape(u.Snapshot) != start {
		t.Fatalf("start: %s, %v %v", shape(u.Snapshot), u.Err, errorStrings(u.Errors))
	}
	for _, tc := range []struct {
		name     string
		file     string
		content  string
		want     string
		wantErrs []string // each in an error that is not a warning, kept last good when it says "stays in effect"
	}{
		{"invalid label on the pod", "pods.yaml", wPod("b", `{pod: b2, "bad key!": v}`),
			start, []string{"pods.yaml doc 0: Pod x/b: metadata.labels", "stays in effect"}},
		{"pod fixed", "pods.yaml", wPod("b", "{pod: b2}"),
			"Pod x/b map[pod:b2], NetworkPolicy x/p1 port 80, NetworkPolicy x/p2 port 80", nil},
		{"port out of range", "policies.yaml", wPolicy(v1, "NetworkPolicy", "p1", "80") + "---\n" + wPolicy(v1, "NetworkPolicy", "p2", "70000"),
			start2, []string{"policies.yaml doc 1: NetworkPolicy x/p2: spec.ingress[0].ports[0].port: 70000", "its last good version stays in effect"}},
		{"a second rejected edit keeps the same version", "policies.yaml", wPolicy(v1, "NetworkPolicy", "p1", "80") + "---\n" + wPolicy(v1, "NetworkPolicy", "p2", "0"),
			start2, []string{"NetworkPolicy x/p2: spec.ingress[0].ports[0].port: 0", "stays in effect"}},
		{"valid edits next to it apply", "policies.yaml", wPolicy(v1, "NetworkPolicy", "p1", "81") + "---\n" + wPolicy(v1, "NetworkPolicy", "p2", "0"),
			"Pod x/b map[pod:b2], NetworkPolicy x/p1 port 81, NetworkPolicy x/p2 port 80", []string{"NetworkPolicy x/p2: ", "stays in effect"}},
		{"apiVersion v1beta1", "policies.yaml", wPolicy(v1, "NetworkPolicy", "p1", "80") + "---\n" + wPolicy("networking.k8s.io/v1beta1", "NetworkPolicy", "p2", "90"),
			start2, []string{`policies.yaml doc 1: NetworkPolicy x/p2: apiVersion "networking.k8s.io/v1beta1" is not supported`, "stays in effect"}},
		{"a kind typo", "policies.yaml", wPolicy(v1, "NetworkPolicy", "p1", "80") + "---\n" + wPolicy(v1, "Networkpolicy", "p2", "90"),
			"Pod x/b map[pod:b2], NetworkPolicy x/p1 port 80, NetworkPolicy x/p2 port 80", []string{"policies.yaml doc 1: Networkpolicy x/p2: unknown kind Networkpolicy", "stay in effect: NetworkPolicy x/p2"}},
		{"no name", "policies.yaml", wPolicy(v1, "NetworkPolicy", "p1", "80") + "---\n" + strings.Replace(wPolicy(v1, "NetworkPolicy", "p2", "90"), "name: p2", "labels: {}", 1),
			"Pod x/b map[pod:b2], NetworkPolicy x/p1 port 80, NetworkPolicy x/p2 port 80", []string{"policies.yaml doc 1: NetworkPolicy", "stay in effect: NetworkPolicy x/p2"}},
		{"renamed to an invalid name", "policies.yaml", wPolicy(v1, "NetworkPolicy", "p1", "80") + "---\n" + wPolicy(v1, "NetworkPolicy", "P2", "90"),
			"Pod x/b map[pod:b2], NetworkPolicy x/p1 port 80, NetworkPolicy x/p2 port 80", []string{"policies.yaml doc 1: NetworkPolicy x/P2: metadata.name", "stay in effect: NetworkPolicy x/p2"}},
		{"fixed with a change", "policies.yaml", wPolicy(v1, "NetworkPolicy", "p1", "80") + "---\n" + wPolicy(v1, "NetworkPolicy", "p2", "91"),
			"Pod x/b map[pod:b2], NetworkPolicy x/p1 port 80, NetworkPolicy x/p2 port 91", nil},
		{"a new invalid policy isolates and allows nothing", "policies.yaml", wPolicy(v1, "NetworkPolicy", "p1", "80") + "---\n" + wPolicy(v1, "NetworkPolicy", "p2", "91") + "---\n" + wPolicy(v1, "NetworkPolicy", "p3", "70000"),
			"Pod x/b map[pod:b2], NetworkPolicy x/p1 port 80, NetworkPolicy x/p2 port 91, NetworkPolicy x/p3 isolates map[pod:b] [Ingress]",
			[]string{"policies.yaml doc 2: NetworkPolicy x/p3: spec.ingress[0].ports[0].port: 70000", "a policy stands in for it that isolates the pods its podSelector selects for [Ingress] and allows nothing"}},
		{"a deletion next to a kind nftpolicy does not read applies", "policies.yaml", wPolicy(v1, "NetworkPolicy", "p1", "80") + "---\napiVersion: v1\nkind: Service\nmetadata: {namespace: x, name: s}\n",
			"Pod x/b map[pod:b2], NetworkPolicy x/p1 port 80", nil},
	} {
		d.write(tc.file, tc.content)
		u := d.settle()
		if got := shape(u.Snapshot); got != tc.want {
			t.Errorf("%s: objects\n%s\nwant\n%s", tc.name, got, tc.want)
		}
		var errs []string
		kept := false
		for _, e := range u.Errors {
			if !e.Warning() {
				errs = append(errs, e.Error())
				kept = kept || e.KeptLastGood
			}
		}
		all := strings.Join(errs, "\n")
		if len(tc.wantErrs) == 0 && len(errs) != 0 {
			t.Errorf("%s: errors %s, want none", tc.name, all)
		}
		for _, w := range tc.wantErrs {
			if !strings.Contains(all, w) {
				t.Errorf("%s: errors %q, want one containing %q", tc.name, all, w)
			}
		}
		wantKept := slices.ContainsFunc(tc.wantErrs, func(w string) bool {
			return strings.Contains(w, "stays in effect") || strings.Contains(w, "stay in effect")
		})
		if kept != wantKept {
			t.Errorf("%s: KeptLastGood %v, want %v", tc.name, kept, wantKept)
		}
	}
}

// A copied file is one object per duplicate, with a warning; definitions
// that come to differ keep the object's last good version, and a new pod
// whose definitions differ keeps only the labels they agree on.
func TestWatchDirDuplicates(t *testing.T) {
	d := newWatchDir(t)
	pods := wPod("a", "{pod: a}") + "---\n" + wPod("b", "{pod: b}")
	d.write("pods.yaml", pods)
	d.settle()
	for _, tc := range []struct {
		name        string
		content     string // of pods-backup.yaml
		want        string
		wantErrs    []string
		warningOnly bool
	}{
		{"cp pods.yaml pods-backup.yaml", pods, "Pod x/a map[pod:a], Pod x/b map[pod:b]",
			[]string{"pods-backup.yaml doc 1: Pod x/b: identical duplicate object, also defined at pods.yaml doc 1; used once"}, true},
		{"the copies differ", wPod("a", "{pod: a}") + "---\n" + wPod("b", "{pod: other}"), "Pod x/a map[pod:a], Pod x/b map[pod:b]",
			[]string{"pods.yaml doc 1: Pod x/b: duplicate object, also defined at pods-backup.yaml doc 1; its last good version stays in effect"}, false},
		{"a new pod defined twice, differently", wPod("a", "{pod: a}") + "---\n" + wPod("b", "{pod: b}") + "---\n" + wPod("c", "{pod: c, v: '1'}") + "---\n" + wPod("c", "{pod: c, v: '2'}"),
			"Pod x/a map[pod:a], Pod x/b map[pod:b], Pod x/c map[pod:c]", []string{"pods-backup.yaml doc 2: Pod x/c: duplicate object, also defined at pods-backup.yaml doc 3; no earlier version is known, so the pod stays at its addresses with only the labels every definition agrees on"}, false},
	} {
		d.write("pods-backup.yaml", tc.content)
		u := d.settle()
		if got := shape(u.Snapshot); got != tc.want {
			t.Errorf("%s: objects\n%s\nwant\n%s", tc.name, got, tc.want)
		}
		all := strings.Join(errorStrings(u.Errors), "\n")
		for _, w := range tc.wantErrs {
			if !strings.Contains(all, w) {
				t.Errorf("%s: errors\n%s\nwant one containing %q", tc.name, all, w)
			}
		}
		warningOnly := true
		for _, e := range u.Errors {
			warningOnly = warningOnly && e.Warning()
		}
		if warningOnly != tc.warningOnly {
			t.Errorf("%s: only warnings %v, want %v", tc.name, warningOnly, tc.warningOnly)
		}
	}
}

// A restart (a crash, a rollout) while the files hold a rejected edit or a
// differing duplicate has no last good version to keep: the policy stands
// in as one that isolates and allows nothing, and the pod keeps the labels
// its definitions agree on, rather than the pod x/b being opened. Both are
// still errors.
func TestWatchDirRestartFailsClosed(t *testing.T) {
	const v1 = "networking.k8s.io/v1"
	d := newWatchDir(t)
	d.write("pods.yaml", wPod("b", "{pod: b}"))
	d.write("policies.yaml", wPolicy(v1, "NetworkPolicy", "b-in", "80"))
	if u := d.settle(); shape(u.Snapshot) != "Pod x/b map[pod:b], NetworkPolicy x/b-in port 80" {
		t.Fatalf("start: %s", shape(u.Snapshot))
	}
	d.write("policies.yaml", wPolicy(v1, "NetworkPolicy", "b-in", "70000"))
	d.write("pods-backup.yaml", wPod("b", "{pod: b, v: '2'}"))
	if u := d.settle(); shape(u.Snapshot) != "Pod x/b map[pod:b], NetworkPolicy x/b-in port 80" {
		t.Fatalf("running, after the broken edits: %s, want the last good versions", shape(u.Snapshot))
	}

	d.w = newDirWatcher(d.dir, time.Second) // kill -9, start again
	u := d.settle()
	if got, want := shape(u.Snapshot), "Pod x/b map[pod:b], NetworkPolicy x/b-in isolates map[pod:b] [Ingress]"; got != want {
		t.Errorf("after a restart: %s, want %s", got, want)
	}
	all := strings.Join(errorStrings(u.Errors), "\n")
	for _, w := range []string{
		"policies.yaml doc 0: NetworkPolicy x/b-in: spec.ingress[0].ports[0].port: 70000 must be between 1 and 65535, inclusive; no earlier version is known, so a policy stands in",
		"pods.yaml doc 0: Pod x/b: duplicate object, also defined at pods-backup.yaml doc 0; no earlier version is known, so the pod stays at its addresses with only the labels every definition agrees on",
	} {
		if !strings.Contains(all, w) {
			t.Errorf("errors after a restart:\n%s\nwant one containing %q", all, w)
		}
	}
	for _, e := range u.Errors {
		if e.Warning() {
			t.Errorf("%v is a warning: readiness would not tell", e)
		}
	}
}

// An entry whose name makes it a manifest but that is not a regular file
// (a link retargeted to a directory or a FIFO, a directory or a FIFO of
// that name) is an error naming its path, and the file's last good objects
// stay; it is never read as a removed file. The ConfigMap layout, a
// ..data link to a timestamped directory, still swaps cleanly.
func TestWatchDirNotRegularFile(t *testing.T) {
	d := newWatchDir(t)
	at := func(name string) string { return filepath.Join(d.dir, name) }
	swap := func(link, target string) {
		t.Helper()
		if err := os.Symlink(target, at(".tmp-link")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(at(".tmp-link"), at(link)); err != nil {
			t.Fatal(err)
		}
	}
	mustDo := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// ConfigMap layout: bdeny.yaml -> ..data/bdeny.yaml, ..data -> ..ts1.
	mustDo(os.Mkdir(at("..ts1"), 0o755))
	mustDo(os.WriteFile(at("..ts1/bdeny.yaml"), []byte(wPolicy("networking.k8s.io/v1", "NetworkPolicy", "b-deny", "80")), 0o644))
	swap("..data", "..ts1")
	swap("bdeny.yaml", "..data/bdeny.yaml")
	d.write("pods.yaml", wPod("b", "{pod: b}"))
	const start = "Pod x/b map[pod:b], NetworkPolicy x/b-deny port 80"
	if u := d.settle(); u.Err != nil || shape(u.Snapshot) != start {
		t.Fatalf("start: %s, %v", shape(u.Snapshot), u.Err)
	}
	mustDo(os.Mkdir(at("..ts2"), 0o755))
	mustDo(os.WriteFile(at("..ts2/bdeny.yaml"), []byte(wPolicy("networking.k8s.io/v1", "NetworkPolicy", "b-deny", "81")), 0o644))
	swap("..data", "..ts2")
	mustDo(os.RemoveAll(at("..ts1")))
	if u := d.settle(); u.Err != nil || shape(u.Snapshot) != strings.Replace(start, "80", "81", 1) {
		t.Fatalf("ConfigMap update: %s, %v", shape(u.Snapshot), u.Err)
	}
	const kept = "Pod x/b map[pod:b], NetworkPolicy x/b-deny port 81"
	mustDo(os.Mkdir(at("d"), 0o755))
	mustDo(unix.Mkfifo(at(".fifo"), 0o644))
	for _, tc := range []struct {
		name   string
		change func()
		want   string
	}{
		{"a link to a directory", func() { swap("bdeny.yaml", "d") }, "not a regular file (a directory)"},
		{"a link to a FIFO", func() { swap("bdeny.yaml", ".fifo") }, "not a regular file (a FIFO)"},
		{"a directory", func() { mustDo(os.Remove(at("bdeny.yaml"))); mustDo(os.Mkdir(at("bdeny.yaml"), 0o755)) }, "not a regular file (a directory)"},
		{"a FIFO", func() { mustDo(os.Remove(at("bdeny.yaml"))); mustDo(unix.Mkfifo(at("bdeny.yaml"), 0o644)) }, "not a regular file (a FIFO)"},
	} {
		tc.change()
		u := d.settle()
		if got := shape(u.Snapshot); got != kept {
			t.Errorf("%s: objects %s, want %s", tc.name, got, kept)
		}
		if want := at("bdeny.yaml") + ": " + tc.want + "; keeping the objects it held before"; u.Err == nil || !strings.Contains(u.Err.Error(), want) {
			t.Errorf("%s: Err %v, want it to contain %q", tc.name, u.Err, want)
		}
	}

	// On a fresh start there is nothing to keep, but it is still an error.
	d.w = newDirWatcher(d.dir, time.Second)
	u := d.settle()
	if got := shape(u.Snapshot); got != "Pod x/b map[pod:b]" {
		t.Errorf("fresh start: objects %s", got)
	}
	if want := at("bdeny.yaml") + ": not a regular file (a FIFO)"; u.Err == nil || !strings.Contains(u.Err.Error(), want) {
		t.Errorf("fresh start: Err %v, want it to contain %q", u.Err, want)
	}

	mustDo(os.Remove(at("bdeny.yaml")))
	swap("bdeny.yaml", "..data/bdeny.yaml")
	if u := d.settle(); u.Err != nil || shape(u.Snapshot) != kept {
		t.Errorf("link restored: %s, %v", shape(u.Snapshot), u.Err)
	}
}
