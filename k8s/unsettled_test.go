package k8s

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

// namespaceY is Namespace y with the metadata fields given (YAML flow mapping
// entries after the name).
func namespaceY(meta string) string {
	return "apiVersion: v1\nkind: Namespace\nmetadata: {name: \"y\"" + meta + "}\n"
}

// A rejected Namespace, or one defined twice differently, with no last
// good version, stays with the labels that can be trusted; it is
// quarantined (Snapshot.QuarantinedNamespaces) when that leaves a label
// out, as the adversarial pass's env: prod plus an invalid label: left
// out, a namespace selector "env NotIn [prod]" named its pods.
func TestQuarantinedNamespaces(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		// labels of Namespace y ("" when it is left out), the
		// quarantined namespaces, and the errors that are Lost.
		labels, quarantined, lost string
	}{
		{"an invalid label value", map[string]string{"a.yaml": namespaceY(`, labels: {env: prod, bad: "x "}`)},
			"map[env:prod kubernetes.io/metadata.name:y]", "[y]", ""},
		{"a label that is not a string", map[string]string{"a.yaml": namespaceY(`, labels: {env: prod, version: 2}`)},
			"map[env:prod kubernetes.io/metadata.name:y]", "[y]", ""},
		{"labels that are not a mapping", map[string]string{"a.yaml": namespaceY(`, labels: [env, prod]`)},
			"map[kubernetes.io/metadata.name:y]", "[y]", ""},
		{"an invalid annotation: every label is known", map[string]string{"a.yaml": namespaceY(`, labels: {env: prod}, annotations: {"bad key!": v}`)},
			"map[env:prod kubernetes.io/metadata.name:y]", "[]", ""},
		{"a wrong apiVersion: every label is known", map[string]string{"a.yaml": strings.Replace(namespaceY(`, labels: {env: prod}`), "v1", "v2", 1)},
			"map[env:prod kubernetes.io/metadata.name:y]", "[]", ""},
		{"duplicates that disagree on a label", map[string]string{"a.yaml": namespaceY(`, labels: {env: prod, team: a}`), "b.yaml": namespaceY(`, labels: {env: prod, team: b}`)},
			"map[env:prod kubernetes.io/metadata.name:y]", "[y]", ""},
		{"duplicates that disagree on an annotation only", map[string]string{"a.yaml": namespaceY(`, labels: {env: prod}, annotations: {a: "1"}`), "b.yaml": namespaceY(`, labels: {env: prod}`)},
			"map[env:prod kubernetes.io/metadata.name:y]", "[]", ""},
		{"a duplicate that is rejected", map[string]string{"a.yaml": namespaceY(`, labels: {env: prod}`), "b.yaml": namespaceY(`, labels: {env: prod, bad: "x "}`)},
			"map[env:prod kubernetes.io/metadata.name:y]", "[y]", ""},
		{"an invalid name: left out", map[string]string{"a.yaml": "apiVersion: v1\nkind: Namespace\nmetadata: {name: Y_, labels: {bad: \"x \"}}\n"},
			"", "[]", "a.yaml doc 0"},
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
			all := strings.Join(errorStrings(objErrs), "\n")
			labels := ""
			for _, ns := range snap.Namespaces {
				checkAdmitted(t, "snapshot", ns)
				if ns.Name == "y" {
					labels = fmt.Sprint(ns.Labels)
				}
			}
			if labels != tc.labels {
				t.Errorf("Namespace y labels %q, want %q; errors:\n%s", labels, tc.labels, all)
			}
			if got := fmt.Sprint(append([]string{}, snap.QuarantinedNamespaces...)); got != tc.quarantined {
				t.Errorf("quarantined namespaces %s, want %s; errors:\n%s", got, tc.quarantined, all)
			}
			var lost []string
			for _, e := range objErrs {
				if e.Warning() {
					t.Errorf("%v is a warning", e)
				}
				if e.Lost() {
					lost = append(lost, e.Location())
				}
			}
			if got := strings.Join(lost, ", "); got != tc.lost {
				t.Errorf("lost %q, want %q; errors:\n%s", got, tc.lost, all)
			}
			if tc.quarantined == "[y]" && !strings.Contains(all, "no namespace selector names its pods as peers") {
				t.Errorf("no error says the namespace is quarantined:\n%s", all)
			}
		})
	}
}

// unsettledPodDoc is pod x/b with the given node, address and phase,
// hostNetwork when host.
func unsettledPodDoc(node, ip, phase string, host bool) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {namespace: x, name: b, labels: {pod: b}}\n"+
		"spec: {nodeName: %s, hostNetwork: %v}\nstatus: {phase: %s, podIP: %q}\n", node, host, phase, ip)
}

func unsettledNames(s *Snapshot) string {
	var out []string
	for _, u := range s.Unsettled {
		out = append(out, fmt.Sprintf("%s/%s on %v at %v", u.Namespace, u.Name, u.Nodes, u.IPs))
	}
	return strings.Join(out, ", ")
}

// A Pod defined twice, differently, whose definitions disagree on where it
// is, with no last good version, is unsettled: quarantined at every
// address any definition gives, on every node they name (the compiler
// decides which is this one), rather than left out, which opened it.
func TestUnsettledPod(t *testing.T) {
	for _, tc := range []struct {
		name, a, b string
		// unsettled is Snapshot.Unsettled rendered, pod the Pod of the
		// Snapshot ("node ip phase"), lost the Lost errors.
		unsettled, pod, lost string
	}{
		{"addresses differ",
			unsettledPodDoc("node-1", "10.244.1.3", "Running", false), unsettledPodDoc("node-1", "10.244.1.2", "Running", false),
			"x/b on [node-1] at [10.244.1.2 10.244.1.3]", "node-1 10.244.1.3 Running", ""},
		{"nodes differ",
			unsettledPodDoc("node-1", "10.244.1.2", "Running", false), unsettledPodDoc("node-2", "10.244.1.2", "Running", false),
			"x/b on [node-1 node-2] at [10.244.1.2]", "node-1 10.244.1.2 Running", ""},
		{"families differ",
			unsettledPodDoc("node-1", "fd00::1:2", "Running", false), unsettledPodDoc("node-1", "10.244.1.2", "Running", false),
			"x/b on [node-1] at [10.244.1.2 fd00::1:2]", "node-1 fd00::1:2 Running", ""},
		{"phases differ: a finished definition's address counts, the running one is the Pod",
			unsettledPodDoc("node-1", "10.244.1.3", "Succeeded", false), unsettledPodDoc("node-2", "10.244.1.2", "Running", false),
			"x/b on [node-1 node-2] at [10.244.1.2 10.244.1.3]", "node-2 10.244.1.2 Running", ""},
		{"a hostNetwork definition gives no address and no node",
			unsettledPodDoc("node-1", "192.168.0.1", "Running", true), unsettledPodDoc("node-2", "10.244.2.2", "Running", false),
			"x/b on [node-2] at [10.244.2.2]", "node-2 10.244.2.2 Running", ""},
		{"a rejected definition whose address cannot be read gives none",
			unsettledPodDoc("node-1", "10.244.1.256", "Running", false), unsettledPodDoc("node-1", "10.244.1.2", "Running", false),
			"x/b on [node-1] at [10.244.1.2]", "node-1 10.244.1.2 Running", ""},
		{"no definition gives a pod address: left out, as the compiler would ignore it",
			unsettledPodDoc("node-1", "192.168.0.1", "Running", true), unsettledPodDoc("node-2", "192.168.0.2", "Running", true),
			"", "", "a.yaml doc 0, b.yaml doc 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap, objErrs, err := LoadFS(fstest.MapFS{"a.yaml": {Data: []byte(tc.a)}, "b.yaml": {Data: []byte(tc.b)}})
			if err != nil {
				t.Fatal(err)
			}
			all := strings.Join(errorStrings(objErrs), "\n")
			if got := unsettledNames(snap); got != tc.unsettled {
				t.Errorf("unsettled %q, want %q; errors:\n%s", got, tc.unsettled, all)
			}
			pod := ""
			for _, p := range snap.Pods {
				checkAdmitted(t, "snapshot", p)
				pod = fmt.Sprintf("%s %s %s", p.Spec.NodeName, p.Status.PodIPs[0].IP, p.Status.Phase)
				if len(p.Spec.Ports) != 0 {
					t.Errorf("the unsettled pod has ports: %v", p.Spec.Ports)
				}
			}
			if pod != tc.pod {
				t.Errorf("pod %q, want %q", pod, tc.pod)
			}
			wantQ := "[]"
			if tc.unsettled != "" {
				wantQ = "[x/b]"
				if !strings.Contains(all, "disagree on where the pod is, so it is quarantined at every address they give") {
					t.Errorf("no error says the pod is quarantined where its definitions place it:\n%s", all)
				}
			}
			if got := fmt.Sprint(quarantinedNames(snap)); got != wantQ {
				t.Errorf("quarantined %s, want %s", got, wantQ)
			}
			var lost []string
			for _, e := range objErrs {
				if e.Lost() {
					lost = append(lost, e.Location())
				}
			}
			if got := strings.Join(lost, ", "); got != tc.lost {
				t.Errorf("lost %q, want %q; errors:\n%s", got, tc.lost, all)
			}
		})
	}
}

// Under WatchDir, a quarantined namespace and an unsettled pod kept as the
// last good version of an object whose next edit is rejected stay so; a
// valid edit releases them; and a restart with the broken files brings
// them back.
func TestWatchDirKeepsUnsettledAndQuarantinedNamespace(t *testing.T) {
	d := newWatchDir(t)
	d.write("ns.yaml", namespaceY(`, labels: {env: prod, bad: "x "}`))
	d.write("a.yaml", unsettledPodDoc("node-1", "10.244.1.2", "Running", false))
	d.write("b.yaml", unsettledPodDoc("node-2", "10.244.2.2", "Running", false))
	check := func(step string, u DirUpdate, unsettled, namespaces string) {
		t.Helper()
		if got := unsettledNames(u.Snapshot); got != unsettled {
			t.Errorf("%s: unsettled %q, want %q; errors:\n%s", step, got, unsettled, strings.Join(errorStrings(u.Errors), "\n"))
		}
		if got := fmt.Sprint(append([]string{}, u.Snapshot.QuarantinedNamespaces...)); got != namespaces {
			t.Errorf("%s: quarantined namespaces %s, want %s", step, got, namespaces)
		}
	}
	both := "x/b on [node-1 node-2] at [10.244.1.2 10.244.2.2]"
	check("first load", d.settle(), both, "[y]")

	// Rejected edits of both: the stand-ins in effect stay, as they were.
	d.write("ns.yaml", namespaceY(`, labels: {env: prod, bad: "y "}`))
	d.write("b.yaml", strings.Replace(unsettledPodDoc("node-3", "10.244.3.2", "Running", false), "pod: b", `pod: "b "`, 1))
	check("rejected edits", d.settle(), both, "[y]")

	// kill -9, start again: no last good version, the same stand-ins.
	d.w = newDirWatcher(d.dir, time.Second)
	check("after a restart", d.settle(), "x/b on [node-1 node-3] at [10.244.1.2 10.244.3.2]", "[y]")

	// Fixed.
	d.write("ns.yaml", namespaceY(`, labels: {env: prod}`))
	d.write("b.yaml", unsettledPodDoc("node-1", "10.244.1.2", "Running", false))
	check("fixed", d.settle(), "", "[]")
}
