package k8s

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata")

// names lists a snapshot's objects in its order, as "Kind namespace/name".
func names(s *Snapshot) []string {
	var out []string
	for _, o := range s.Namespaces {
		out = append(out, "Namespace "+o.Name)
	}
	for _, o := range s.Pods {
		out = append(out, "Pod "+o.Namespace+"/"+o.Name)
	}
	for _, o := range s.Nodes {
		out = append(out, "Node "+o.Name)
	}
	for _, o := range s.Policies {
		out = append(out, "NetworkPolicy "+o.Namespace+"/"+o.Name)
	}
	return out
}

func errorStrings(errs []*ObjectError) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

// TestLoadDirGood loads a directory with every supported layout (a
// multi-document file with comments and empty documents, a v1 List, a JSON
// typed list, files that must be ignored) and compares the whole snapshot
// with a golden file: regenerate it with `go test ./k8s/ -update` and review
// the diff.
func TestLoadDirGood(t *testing.T) {
	snap, objErrs, err := LoadDir("testdata/good")
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	if len(objErrs) != 0 {
		t.Fatalf("LoadDir: unexpected object errors:\n%s", strings.Join(errorStrings(objErrs), "\n"))
	}

	want := []string{
		"Namespace x", "Namespace y", "Namespace z",
		"Pod default/web", "Pod x/a", "Pod x/b", "Pod y/a",
		"Node node-1", "Node node-2",
		"NetworkPolicy x/allow-from-y", "NetworkPolicy x/deny-all", "NetworkPolicy y/ipblock", "NetworkPolicy z/egress-range",
	}
	if diff := cmp.Diff(want, names(snap)); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}

	got, err := yaml.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	const golden = "testdata/good.snapshot.yaml"
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wantYAML, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(wantYAML), string(got)); diff != "" {
		t.Errorf("snapshot differs from %s (-want +got):\n%s", golden, diff)
	}
}

// TestLoadDirGoodSemantics spells out the defaulting and nil-versus-empty
// facts of the good directory that the golden file only shows.
func TestLoadDirGoodSemantics(t *testing.T) {
	snap, _, err := LoadDir("testdata/good")
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	ns := func(name string) map[string]string {
		for _, o := range snap.Namespaces {
			if o.Name == name {
				return o.Labels
			}
		}
		t.Fatalf("no namespace %s", name)
		return nil
	}
	pod := func(nsName string) string {
		for _, o := range snap.Pods {
			if o.Namespace+"/"+o.Name == nsName {
				ips := []string{}
				for _, ip := range o.Status.PodIPs {
					ips = append(ips, ip.IP)
				}
				return strings.Join(ips, ",")
			}
		}
		t.Fatalf("no pod %s", nsName)
		return ""
	}
	policy := func(nsName string) string {
		for _, o := range snap.Policies {
			if o.Namespace+"/"+o.Name == nsName {
				return policyShape(o)
			}
		}
		t.Fatalf("no policy %s", nsName)
		return ""
	}
	tests := []struct {
		name, got, want string
	}{
		{"namespace label is set", ns("x")["kubernetes.io/metadata.name"], "x"},
		{"namespace label overwrites a spoofed one", ns("y")["kubernetes.io/metadata.name"], "y"},
		{"podIPs defaulted from podIP", pod("x/b"), "10.244.1.11"},
		{"podIPs canonical", pod("y/a"), "fd00:10:244:2::a"},
		{"dual-stack pod", pod("x/a"), "10.244.1.10,fd00:10:244:1::a"},
		{"pod without IP", pod("default/web"), ""},
		{"absent ingress stays nil", policy("x/deny-all"), "types=[Ingress] ingress=nil egress=nil"},
		{"ports defaulted to TCP", policy("x/allow-from-y"), "types=[Ingress] ingress=[{from=[selectors] ports=[TCP/80 UDP/serve-80-udp]}] egress=nil"},
		{"cidr masked", policy("y/ipblock"), "types=[Ingress] ingress=[{from=[10.0.0.0/24-10.0.0.128/25 2001:db8::/32-2001:db8:ff::/48] ports=nil}] egress=nil"},
		{"empty ingress and empty to stay empty", policy("z/egress-range"), "types=[Ingress Egress] ingress=[] egress=[{to=[] ports=[SCTP/8000-8080]}]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
}

// TestLoadBroken loads each file of the broken corpus on its own. Each holds
// one mistake and at least one valid object: the mistake must be reported,
// exactly once and with the expected text, and the valid objects must
// survive it. A rejected NetworkPolicy whose namespace and name are valid
// survives as the stand-in that isolates and allows nothing
// (TestRejectedStandIns).
func TestLoadBroken(t *testing.T) {
	tests := []struct {
		file string
		want string
		more []string // further errors, in order, for mistakes that are reported at several places
		keep []string
	}{
		{
			file: "bad-cidr.yaml",
			want: `bad-cidr.yaml doc 1: NetworkPolicy x/bad: spec.ingress[0].from[0].ipBlock.cidr: "10.0.0.0/33" must be a valid CIDR`,
			keep: []string{"NetworkPolicy x/bad", "NetworkPolicy x/ok-bad-cidr"},
		},
		{
			file: "except-outside-cidr.yaml",
			want: `except-outside-cidr.yaml doc 2: NetworkPolicy x/bad: spec.ingress[0].from[1].ipBlock.except[0]: "10.1.0.0/16" is not inside cidr "10.0.0.0/16"`,
			keep: []string{"Namespace ok-except-outside", "NetworkPolicy x/bad", "NetworkPolicy x/ok-except-outside"},
		},
		{
			file: "except-other-family.yaml",
			want: `except-other-family.yaml doc 1: NetworkPolicy x/bad: spec.egress[0].to[0].ipBlock.except[0]: "fd00::/64" is not of the same IP family as cidr "10.0.0.0/8"`,
			keep: []string{"NetworkPolicy x/bad", "NetworkPolicy x/ok-except-family"},
		},
		{
			file: "bad-selector-operator.yaml",
			want: `bad-selector-operator.yaml doc 1: NetworkPolicy x/bad: spec.podSelector.matchExpressions[0].operator: "Within" is invalid: not a valid selector operator`,
			keep: []string{"NetworkPolicy x/bad", "NetworkPolicy x/ok-bad-operator"},
		},
		{
			file: "in-without-values.yaml",
			want: "in-without-values.yaml doc 1: NetworkPolicy x/bad: spec.ingress[0].from[0].namespaceSelector.matchExpressions[0].values: is required: must be specified when `operator` is 'In' or 'NotIn'",
			keep: []string{"NetworkPolicy x/bad", "NetworkPolicy x/ok-in-no-values"},
		},
		{
			file: "endport-named-port.yaml",
			want: `endport-named-port.yaml doc 1: NetworkPolicy x/bad: spec.ingress[0].ports[0].endPort: may not be specified when port is a named port ("http")`,
			keep: []string{"NetworkPolicy x/bad", "NetworkPolicy x/ok-endport-named"},
		},
		{
			file: "endport-below-port.yaml",
			want: `endport-below-port.yaml doc 1: NetworkPolicy x/bad: spec.egress[0].ports[0].endPort: 80 must be greater than or equal to port 8080`,
			keep: []string{"NetworkPolicy x/bad", "NetworkPolicy x/ok-endport-below"},
		},
		{
			file: "port-zero.yaml",
			want: `port-zero.yaml doc 1: NetworkPolicy x/bad: spec.ingress[0].ports[0].port: 0 must be between 1 and 65535, inclusive`,
			keep: []string{"NetworkPolicy x/bad", "NetworkPolicy x/ok-port-zero"},
		},
		{
			file: "port-too-large.yaml",
			want: `port-too-large.yaml doc 1: NetworkPolicy x/bad: spec.ingress[0].ports[0].port: 70000 must be between 1 and 65535, inclusive`,
			keep: []string{"NetworkPolicy x/bad", "NetworkPolicy x/ok-port-large"},
		},
		{
			file: "bad-protocol.yaml",
			want: `bad-protocol.yaml doc 1: NetworkPolicy x/bad: spec.ingress[0].ports[0].protocol: "ICMP" is not supported (supported values: "TCP", "UDP", "SCTP")`,
			keep: []string{"NetworkPolicy x/bad", "NetworkPolicy x/ok-bad-protocol"},
		},
		{
			file: "bad-policytype.yaml",
			want: `bad-policytype.yaml doc 1: NetworkPolicy x/bad: spec.policyTypes[1]: "Both" is not supported (supported values: "Ingress", "Egress")`,
			keep: []string{"NetworkPolicy x/bad", "NetworkPolicy x/ok-bad-policytype"},
		},
		{
			file: "duplicate-policytype.yaml",
			want: `duplicate-policytype.yaml doc 1: NetworkPolicy x/bad: spec.policyTypes[1]: "Egress" is a duplicate`,
			keep: []string{"NetworkPolicy x/bad", "NetworkPolicy x/ok-dup-policytype"},
		},
		{
			file: "unknown-field.yaml",
			want: `unknown-field.yaml doc 1: NetworkPolicy x/bad: unknown field "spec.ingress[0].fromm"`,
			keep: []string{"NetworkPolicy x/bad", "NetworkPolicy x/ok-unknown-field"},
		},
		{
			file: "wrong-case-field.yaml",
			want: `wrong-case-field.yaml doc 1: NetworkPolicy x/bad: unknown field "spec.PodSelector"`,
			keep: []string{"NetworkPolicy x/bad", "NetworkPolicy x/ok-wrong-case"},
		},
		{
			file: "ipblock-and-podselector.yaml",
			want: `ipblock-and-podselector.yaml doc 1: NetworkPolicy x/bad: spec.ingress[0].from[0]: may not combine ipBlock with podSelector or namespaceSelector`,
			keep: []string{"NetworkPolicy x/bad", "NetworkPolicy x/ok-ipblock-pod"},
		},
		{
			file: "duplicate-object.yaml",
			want: `duplicate-object.yaml doc 0: NetworkPolicy x/same: duplicate object, also defined at duplicate-object.yaml doc 2; it isolates`,
			more: []string{`duplicate-object.yaml doc 2: NetworkPolicy x/same: duplicate object, also defined at duplicate-object.yaml doc 0; it isolates`},
			// x/same stays as a policy that only isolates (TestDuplicates).
			keep: []string{"NetworkPolicy x/ok-duplicate", "NetworkPolicy x/same"},
		},
		{
			file: "bad-pod-ip.yaml",
			want: `bad-pod-ip.yaml doc 1: Pod x/bad: status.podIPs[0].ip: "10.0.0.256" must be a valid IP address`,
			keep: []string{"Pod x/ok-bad-pod-ip"},
		},
		{
			file: "two-ipv4-podips.yaml",
			want: `two-ipv4-podips.yaml doc 1: Pod x/bad: status.podIPs[1].ip: "10.0.0.8" must not be a second IPv4 address`,
			keep: []string{"Pod x/ok-two-ipv4"},
		},
		{
			file: "unparseable-yaml.yaml",
			// The line is the file's, not the document's.
			want: `unparseable-yaml.yaml doc 1: invalid YAML: yaml: line 16: did not find expected node content`,
			keep: []string{"NetworkPolicy x/ok-unparseable"},
		},
		{
			file: "unsupported-kind.yaml",
			want: `unsupported-kind.yaml doc 1: Service x/web: unsupported kind Service`,
			keep: []string{"NetworkPolicy x/ok-unsupported-kind"},
		},
		{
			file: "invalid-name.yaml",
			want: `invalid-name.yaml doc 1: NetworkPolicy x/Bad_Name: metadata.name: "Bad_Name" is invalid: a lowercase RFC 1123 subdomain must consist of`,
			keep: []string{"NetworkPolicy x/ok-bad-name"},
		},
		{
			file: "bad-list-item.yaml",
			want: `bad-list-item.yaml doc 0 item 1: Namespace bad: metadata.labels: "not a valid value!" is invalid: a valid label must be`,
			// The rejected Namespace stays, quarantined (the stand-in).
			keep: []string{"Namespace bad", "Namespace ok-list-item"},
		},
		{
			file: "bad-json.json",
			want: `bad-json.json doc 1: Node bad: status.addresses[0].address: "node-1.example" must be a valid IP address`,
			keep: []string{"Namespace ok-bad-json"},
		},
		{
			file: "yaml-boolean.yaml",
			want: `yaml-boolean.yaml doc 1: NetworkPolicy x/allow-from-y: json: cannot unmarshal bool into Go struct field LabelSelector.spec.ingress.from.namespaceSelector.matchLabels of type string (an unquoted y, yes, on, n, no or off is a YAML boolean: quote it)`,
			keep: []string{"Namespace ok-yaml-boolean", "NetworkPolicy x/allow-from-y"},
		},
	}

	files, err := filepath.Glob("testdata/broken/*")
	if err != nil {
		t.Fatal(err)
	}
	tested := map[string]bool{}
	for _, tt := range tests {
		tested[tt.file] = true
	}
	for _, f := range files {
		if !tested[filepath.Base(f)] {
			t.Errorf("%s has no test case", f)
		}
	}

	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata/broken", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			snap, objErrs, err := LoadFS(fstest.MapFS{tt.file: {Data: data}})
			if err != nil {
				t.Fatalf("LoadFS: %v", err)
			}
			got := errorStrings(objErrs)
			want := append([]string{tt.want}, tt.more...)
			ok := len(got) == len(want)
			for i := 0; ok && i < len(got); i++ {
				ok = strings.Contains(got[i], want[i])
			}
			if !ok {
				t.Errorf("errors:\n%s\nwant exactly these, in order, containing:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if diff := cmp.Diff(tt.keep, names(snap)); diff != "" {
				t.Errorf("surviving objects (-want +got):\n%s", diff)
			}
		})
	}

	// The whole corpus at once: never fatal, every valid object survives.
	snap, objErrs, err := LoadDir("testdata/broken")
	if err != nil {
		t.Fatalf("LoadDir(testdata/broken): %v", err)
	}
	if len(objErrs) < len(tests) {
		t.Errorf("LoadDir(testdata/broken): %d errors, want at least %d", len(objErrs), len(tests))
	}
	got := map[string]bool{}
	for _, n := range names(snap) {
		got[n] = true
	}
	for _, tt := range tests {
		for _, k := range tt.keep {
			if !got[k] {
				t.Errorf("LoadDir(testdata/broken) lost %s", k)
			}
		}
	}
}

// TestLoadFS covers layouts and cross-document rules with small inline
// directories.
func TestLoadFS(t *testing.T) {
	ns := func(name string) string {
		return "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + name + "\n"
	}
	pod := func(namespace, name string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\n  namespace: " + namespace + "\n"
	}
	tests := []struct {
		name     string
		files    map[string]string
		want     []string
		wantErrs []string
	}{
		{
			name: "sorted by namespace and name, not by file",
			files: map[string]string{
				"a.yaml": pod("z", "a") + "---\n" + pod("x", "b"),
				"b.yaml": pod("x", "a") + "---\n" + ns("b") + "---\n" + ns("a"),
			},
			want: []string{"Namespace a", "Namespace b", "Pod x/a", "Pod x/b", "Pod z/a"},
		},
		{
			name: "duplicate across files: neither file wins, both are named",
			files: map[string]string{
				"a.yaml": ns("x"),
				"b.yml":  ns("x") + "  labels: {team: b}\n",
			},
			// No definition wins: the namespace stays with the labels both
			// agree on, quarantined.
			want: []string{"Namespace x"},
			wantErrs: []string{
				"a.yaml doc 0: Namespace x: duplicate object, also defined at b.yml doc 0; no earlier version is known, so the namespace keeps the labels every definition agrees on, quarantined",
				"b.yml doc 0: Namespace x: duplicate object, also defined at a.yaml doc 0; no earlier version is known, so the namespace keeps the labels every definition agrees on, quarantined",
			},
		},
		{
			name: "identical duplicate across files (a copied file): used once, both are named",
			files: map[string]string{
				"a.yaml": ns("x"),
				"b.yml":  ns("x"),
			},
			want: []string{"Namespace x"},
			wantErrs: []string{
				"a.yaml doc 0: Namespace x: identical duplicate object, also defined at b.yml doc 0; used once",
				"b.yml doc 0: Namespace x: identical duplicate object, also defined at a.yaml doc 0; used once",
			},
		},
		{
			name: "duplicate of an invalid object is still a duplicate",
			files: map[string]string{
				"a.yaml": pod("x", "p") + "spec:\n  nodeName: Bad_Node\n---\n" + pod("x", "p"),
			},
			wantErrs: []string{
				`a.yaml doc 0: Pod x/p: spec.nodeName: "Bad_Node" is invalid`,
				"a.yaml doc 0: Pod x/p: duplicate object, also defined at a.yaml doc 1",
				"a.yaml doc 1: Pod x/p: duplicate object, also defined at a.yaml doc 0",
			},
		},
		{
			name: "same name in another namespace or of another kind is no duplicate",
			files: map[string]string{
				"a.yaml": pod("x", "p") + "---\n" + pod("w", "p") + "---\n" + ns("p"),
			},
			want: []string{"Namespace p", "Pod w/p", "Pod x/p"},
		},
		{
			name: "empty namespace is the default namespace for duplicates too, and equal after defaulting",
			files: map[string]string{
				"a.yaml": "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n---\n" + pod("default", "p"),
			},
			want:     []string{"Pod default/p"},
			wantErrs: []string{"a.yaml doc 0: Pod default/p: identical duplicate object", "a.yaml doc 1: Pod default/p: identical duplicate object"},
		},
		{
			name: "namespace on a cluster-scoped object is dropped",
			files: map[string]string{
				"a.yaml": "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n  namespace: x\n",
			},
			want: []string{"Node n1"},
		},
		{
			name: "JSON stream, syntax error ends the file",
			files: map[string]string{
				"a.json": `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a"}}` + "\n" +
					`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"b"}}` + "\n" +
					`{"apiVersion": oops}` + "\n" +
					`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"c"}}`,
			},
			want:     []string{"Namespace a", "Namespace b"},
			wantErrs: []string{"a.json doc 2: invalid JSON, rest of file skipped: at byte 142: invalid character 'o'"},
		},
		{
			name: "typed list: items need no kind but may not be another kind",
			files: map[string]string{
				"a.yaml": "apiVersion: v1\nkind: PodList\nitems:\n- metadata: {name: a, namespace: x}\n- apiVersion: v1\n  kind: Namespace\n  metadata: {name: b}\n",
			},
			want:     []string{"Pod x/a"},
			wantErrs: []string{"a.yaml doc 0 item 1: Namespace b: item of a PodList must be a Pod"},
		},
		{
			name: "list: item without kind, nested list, wrong apiVersion",
			files: map[string]string{
				"a.yaml": "apiVersion: v1\nkind: List\nitems:\n- metadata: {name: a}\n- apiVersion: v1\n  kind: List\n  items: []\n- apiVersion: extensions/v1beta1\n  kind: NetworkPolicy\n  metadata: {name: c, namespace: x}\n",
			},
			// The NetworkPolicy of the wrong apiVersion is rejected, and
			// stands in as a policy that isolates and allows nothing.
			want: []string{"NetworkPolicy x/c"},
			wantErrs: []string{
				"a.yaml doc 0 item 0: object a: kind is required",
				"a.yaml doc 0 item 1: List: a list inside a list is not supported",
				`a.yaml doc 0 item 2: NetworkPolicy x/c: apiVersion "extensions/v1beta1" is not supported for NetworkPolicy, want "networking.k8s.io/v1"`,
			},
		},
		{
			name: "unknown field in a list wrapper",
			files: map[string]string{
				"a.yaml": "apiVersion: v1\nkind: List\nitemz: []\n",
			},
			wantErrs: []string{`a.yaml doc 0: List: unknown field "itemz"`},
		},
		{
			name: "duplicate YAML key still names the object",
			files: map[string]string{
				"a.yaml": "# first line\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  name: b\n  labels: {l: '1', l: '2'}\n",
			},
			wantErrs: []string{`a.yaml doc 0: Pod default/b: invalid YAML: yaml: unmarshal errors: line 7: key "name" already set in map line 8: key "l" already set in map`},
		},
		{
			name: "unquoted number where a string belongs",
			files: map[string]string{
				"a.yaml": "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n  labels: {version: 2}\n",
			},
			want:     []string{"Namespace a"}, // quarantined, without the label
			wantErrs: []string{"a.yaml doc 0: Namespace a: json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string (quote a number meant as a string)"},
		},
		{
			name: "a document that is not a mapping",
			files: map[string]string{
				"a.yaml": "- just\n- a list\n---\n" + ns("a"),
			},
			want:     []string{"Namespace a"},
			wantErrs: []string{"a.yaml doc 0: document is not a Kubernetes object (a YAML or JSON mapping)"},
		},
		{
			name: "empty documents and files are not counted",
			files: map[string]string{
				"a.yaml": "---\n# nothing\n---\n---\n" + ns("a") + "---\n\n---\n" + pod("x", "Bad"),
				"b.yaml": "",
			},
			want:     []string{"Namespace a"},
			wantErrs: []string{`a.yaml doc 1: Pod x/Bad: metadata.name: "Bad" is invalid`},
		},
		{
			name: "byte order mark and CRLF line ends",
			files: map[string]string{
				"a.yaml": "\ufeff" + strings.ReplaceAll(ns("a")+"---\n"+ns("b"), "\n", "\r\n"),
			},
			want: []string{"Namespace a", "Namespace b"},
		},
		{
			name: "ignored names",
			files: map[string]string{
				"notes.txt":       "not yaml",
				"a.yaml.bak":      "not yaml",
				".hidden.yaml":    "not yaml: [",
				"..data/a.yaml":   ns("inside"),
				"sub/b.yaml":      ns("inside"),
				"UPPER.YAML":      ns("upper"),
				"real.yml":        ns("real"),
				"also-real.json":  `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"json"}}`,
				"empty-list.yaml": "apiVersion: v1\nkind: List\nitems: []\n",
			},
			want: []string{"Namespace json", "Namespace real"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for name, data := range tt.files {
				fsys[name] = &fstest.MapFile{Data: []byte(data)}
			}
			snap, objErrs, err := LoadFS(fsys)
			if err != nil {
				t.Fatalf("LoadFS: %v", err)
			}
			if diff := cmp.Diff(tt.want, names(snap)); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
			got := errorStrings(objErrs)
			if len(got) != len(tt.wantErrs) {
				t.Fatalf("errors:\n%s\nwant %d", strings.Join(got, "\n"), len(tt.wantErrs))
			}
			for i := range got {
				if !strings.Contains(got[i], tt.wantErrs[i]) {
					t.Errorf("error %d:\n%s\nwant it to contain:\n%s", i, got[i], tt.wantErrs[i])
				}
			}
		})
	}
}

// TestNilVersusEmpty checks that decoding keeps an absent (or null) list
// nil and an empty list empty, and that defaulting leaves both alone: for
// the compiler an empty ingress list allows nothing while an empty from list
// allows everyone.
func TestNilVersusEmpty(t *testing.T) {
	tests := []struct {
		name string
		spec string
		want string
	}{
		{"no ingress", "podSelector: {}", "types=[Ingress] ingress=nil egress=nil"},
		{"null ingress", "podSelector: {}\n  ingress:", "types=[Ingress] ingress=nil egress=nil"},
		{"empty ingress", "podSelector: {}\n  ingress: []", "types=[Ingress] ingress=[] egress=nil"},
		{"rule without from", "podSelector: {}\n  ingress:\n  - {}", "types=[Ingress] ingress=[{from=nil ports=nil}] egress=nil"},
		{"rule with null from", "podSelector: {}\n  ingress:\n  - from:", "types=[Ingress] ingress=[{from=nil ports=nil}] egress=nil"},
		{"rule with empty from", "podSelector: {}\n  ingress:\n  - from: []", "types=[Ingress] ingress=[{from=[] ports=nil}] egress=nil"},
		{"rule with empty ports", "podSelector: {}\n  ingress:\n  - ports: []", "types=[Ingress] ingress=[{from=nil ports=[]}] egress=nil"},
		{"empty egress does not add Egress", "podSelector: {}\n  egress: []", "types=[Ingress] ingress=nil egress=[]"},
		{"egress rule without to", "podSelector: {}\n  egress:\n  - {}", "types=[Ingress Egress] ingress=nil egress=[{to=nil ports=nil}]"},
		{"egress rule with empty to", "podSelector: {}\n  egress:\n  - to: []", "types=[Ingress Egress] ingress=nil egress=[{to=[] ports=nil}]"},
		{"explicit Egress only", "podSelector: {}\n  policyTypes: [Egress]", "types=[Egress] ingress=nil egress=nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: p\n  namespace: x\nspec:\n  " + tt.spec + "\n"
			snap, objErrs, err := LoadFS(fstest.MapFS{"p.yaml": {Data: []byte(doc)}})
			if err != nil || len(objErrs) != 0 {
				t.Fatalf("LoadFS: %v %v", err, errorStrings(objErrs))
			}
			if got := policyShape(snap.Policies[0]); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestObjectError(t *testing.T) {
	snap, objErrs, err := LoadFS(fstest.MapFS{
		"a.yaml": {Data: []byte("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n---\n" +
			"apiVersion: v1\nkind: Namespace\nmetadata: {name: m}\n---\n" +
			"apiVersion: v1\nkind: Namespace\nmetadata: {name: m, labels: {a: b}}\n---\n" +
			"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, ports: [{containerPort: 0}]}]}\n")},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Namespace m is defined twice, differently: quarantined. The pod has
	// no address: no stand-in.
	if got := fmt.Sprint(names(snap)); got != "[Namespace m]" {
		t.Errorf("objects: %v, want [Namespace m] (defined twice: quarantined)", got)
	}
	if got := fmt.Sprint(snap.QuarantinedNamespaces); got != "[m]" {
		t.Errorf("quarantined namespaces: %v, want [m]", got)
	}
	if len(objErrs) != 4 {
		t.Fatalf("errors: %v, want 4", errorStrings(objErrs))
	}
	unsupported, dup, invalid := objErrs[0], objErrs[2], objErrs[3]

	if !errors.Is(unsupported, ErrUnsupportedKind) || errors.Is(unsupported, ErrDuplicate) {
		t.Errorf("%v: want ErrUnsupportedKind only", unsupported)
	}
	if !errors.Is(dup, ErrDuplicate) || errors.Is(dup, ErrUnsupportedKind) {
		t.Errorf("%v: want ErrDuplicate only", dup)
	}
	var fe *field.Error
	if !errors.As(invalid, &fe) || fe.Field != "spec.containers[0].ports[0].containerPort" || fe.Type != field.ErrorTypeRequired {
		t.Errorf("%v: want a *field.Error Required at spec.containers[0].ports[0].containerPort, got %#v", invalid, fe)
	}
	want := ObjectError{File: "a.yaml", Doc: 3, Item: -1, Kind: "Pod", Namespace: "default", Name: "p"}
	got := *invalid
	got.Err = nil
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ObjectError fields (-want +got):\n%s", diff)
	}
	if got, want := invalid.Location(), "a.yaml doc 3"; got != want {
		t.Errorf("Location() = %q, want %q", got, want)
	}
	if got, want := invalid.Object(), "Pod default/p"; got != want {
		t.Errorf("Object() = %q, want %q", got, want)
	}
}

func TestLoadDirUnreadable(t *testing.T) {
	_, _, err := LoadDir("testdata/does-not-exist")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("LoadDir of a missing directory: %v, want fs.ErrNotExist", err)
	}
	if err == nil || !strings.Contains(err.Error(), "testdata/does-not-exist") {
		t.Errorf("LoadDir of a missing directory: %v, want the path in the message", err)
	}

	// A link is followed; a manifest name that is not a regular file (a
	// dangling link, a link to a directory, a directory, a FIFO) cannot
	// be read, and a half-read directory must not pass for a complete one.
	// Directories and links with dot names (a ConfigMap's ..data) are not
	// manifests.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("d", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.yaml", filepath.Join(dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	snap, objErrs, err := LoadDir(dir)
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	// link.yaml is a second definition of a: followed, and an identical
	// duplicate, used once.
	if diff := cmp.Diff([]string{"Namespace a"}, names(snap)); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
	if len(objErrs) != 2 || !errors.Is(objErrs[0], ErrIdenticalDuplicate) || !objErrs[0].Warning() || objErrs[1].File != "link.yaml" {
		t.Errorf("errors: %v, want a duplicate in a.yaml and in link.yaml", errorStrings(objErrs))
	}

	for _, tc := range []struct {
		name, entry string
		make        func(path string) error
		want        string
	}{
		{"a link to a directory", "dir.yaml", func(p string) error { return os.Symlink("d", p) }, "not a regular file (a directory)"},
		{"a directory", "dir.yml", func(p string) error { return os.Mkdir(p, 0o755) }, "not a regular file (a directory)"},
		{"a FIFO", "fifo.json", func(p string) error { return unix.Mkfifo(p, 0o644) }, "not a regular file (a FIFO)"},
		{"a link to a FIFO", "fifo-link.yaml", func(p string) error {
			if err := unix.Mkfifo(filepath.Join(dir, ".fifo"), 0o644); err != nil {
				return err
			}
			return os.Symlink(".fifo", p)
		}, "not a regular file (a FIFO)"},
		{"a dangling link", "dangling.yaml", func(p string) error { return os.Symlink("missing", p) }, "no such file or directory"},
	} {
		path := filepath.Join(dir, tc.entry)
		if err := tc.make(path); err != nil {
			t.Fatal(err)
		}
		if _, _, err := LoadDir(dir); err == nil || !strings.Contains(err.Error(), path+": "+tc.want) {
			t.Errorf("LoadDir with %s: %v, want an error naming %s: %s", tc.name, err, path, tc.want)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSplitYAML(t *testing.T) {
	type doc struct {
		Data string
		Line int
	}
	tests := []struct {
		name string
		in   string
		want []doc
	}{
		{"one document", "a: 1\n", []doc{{"a: 1\n", 1}}},
		{"no final newline", "a: 1", []doc{{"a: 1", 1}}},
		{"leading separator", "---\na: 1\n", []doc{{"", 1}, {"a: 1\n", 2}}},
		{"two documents", "a: 1\n---\nb: 2\n", []doc{{"a: 1\n", 1}, {"b: 2\n", 3}}},
		{"trailing separator", "a: 1\n---\n", []doc{{"a: 1\n", 1}, {"", 3}}},
		{"separator with comment and blanks", "a: 1\n---  # next\t\nb: 2\n", []doc{{"a: 1\n", 1}, {"b: 2\n", 3}}},
		{"CRLF", "a: 1\r\n---\r\nb: 2\r\n", []doc{{"a: 1\r\n", 1}, {"b: 2\r\n", 3}}},
		{"not separators", "a: |\n  ---\n---- x\n--- b\n", []doc{{"a: |\n  ---\n---- x\n--- b\n", 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []doc
			for _, d := range splitYAML([]byte(tt.in)) {
				got = append(got, doc{string(d.data), d.line})
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("splitYAML(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}
