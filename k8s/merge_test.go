package k8s

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
)

// TestDuplicates: an object defined twice is an error at both places, and
// neither definition is used. A duplicated NetworkPolicy becomes one that
// only isolates, so that the duplicate fails closed.
func TestDuplicates(t *testing.T) {
	policy := func(name, selector, spec string) string {
		return "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {namespace: x, name: " + name + "}\nspec:\n  podSelector: " + selector + "\n" + spec
	}
	allowAll := "  ingress: [{}]\n"
	egressAll := "  policyTypes: [Egress]\n  egress: [{}]\n"
	for _, tc := range []struct {
		name     string
		files    map[string]string
		want     []string // policy names and shapes, "x/p {selector} shape"
		wantErrs []string
	}{
		{
			name: "same selector: isolated for both directions, nothing allowed",
			files: map[string]string{
				"a.yaml": policy("p", "{matchLabels: {pod: a}}", allowAll),
				"b.yaml": policy("p", "{matchLabels: {pod: a}}", egressAll),
			},
			want: []string{"x/p map[pod:a] types=[Ingress Egress] ingress=nil egress=nil"},
			wantErrs: []string{
				"a.yaml doc 0: NetworkPolicy x/p: duplicate object, also defined at b.yaml doc 0; it isolates",
				"b.yaml doc 0: NetworkPolicy x/p: duplicate object, also defined at a.yaml doc 0; it isolates",
			},
		},
		{
			name: "different selectors: the whole namespace is isolated",
			files: map[string]string{
				"a.yaml": policy("p", "{matchLabels: {pod: a}}", allowAll),
				"b.yaml": policy("p", "{matchLabels: {pod: b}}", allowAll),
			},
			want:     []string{"x/p map[] types=[Ingress] ingress=nil egress=nil"},
			wantErrs: []string{"a.yaml doc 0", "b.yaml doc 0"},
		},
		{
			name: "an invalid definition does not hide the valid one's isolation",
			files: map[string]string{
				"a.yaml": policy("p", "{matchLabels: {pod: a}}", "  policyTypes: [Sideways]\n"),
				"b.yaml": policy("p", "{matchLabels: {pod: a}}", allowAll),
			},
			want: []string{"x/p map[pod:a] types=[Ingress] ingress=nil egress=nil"},
			wantErrs: []string{
				`a.yaml doc 0: NetworkPolicy x/p: spec.policyTypes[0]: "Sideways" is not supported`,
				"a.yaml doc 0: NetworkPolicy x/p: duplicate object",
				"b.yaml doc 0: NetworkPolicy x/p: duplicate object",
			},
		},
		{
			name: "no valid definition: nothing, as for an invalid policy alone",
			files: map[string]string{
				"a.yaml": policy("p", "{matchLabels: {pod: a}}", "  policyTypes: [Sideways]\n---\n"+policy("p", "{}", "  policyTypes: [Up]\n")),
			},
			wantErrs: []string{"a.yaml doc 0: NetworkPolicy x/p: spec.policyTypes", "a.yaml doc 0: NetworkPolicy x/p: duplicate object, also defined at a.yaml doc 1; every definition is left out",
				"a.yaml doc 1: NetworkPolicy x/p: spec.policyTypes", "a.yaml doc 1: NetworkPolicy x/p: duplicate object"},
		},
		{
			name: "three definitions name the two others",
			files: map[string]string{
				"a.yaml": policy("p", "{}", ""), "b.yaml": policy("p", "{}", allowAll), "c.yaml": policy("p", "{}", ""),
			},
			want: []string{"x/p map[] types=[Ingress] ingress=nil egress=nil"},
			wantErrs: []string{
				"a.yaml doc 0: NetworkPolicy x/p: duplicate object, also defined at b.yaml doc 0, c.yaml doc 0;",
				"b.yaml doc 0: NetworkPolicy x/p: duplicate object, also defined at a.yaml doc 0, c.yaml doc 0;",
				"c.yaml doc 0: NetworkPolicy x/p: duplicate object, also defined at a.yaml doc 0, b.yaml doc 0;",
			},
		},
		{
			name: "identical definitions (a copied file) are one policy, as written",
			files: map[string]string{
				"a.yaml": policy("p", "{matchLabels: {pod: a}}", allowAll), "a-backup.yaml": policy("p", "{matchLabels: {pod: a}}", allowAll),
			},
			want: []string{"x/p map[pod:a] types=[Ingress] ingress=[{from=nil ports=nil}] egress=nil"},
			wantErrs: []string{
				"a-backup.yaml doc 0: NetworkPolicy x/p: identical duplicate object, also defined at a.yaml doc 0; used once",
				"a.yaml doc 0: NetworkPolicy x/p: identical duplicate object, also defined at a-backup.yaml doc 0; used once",
			},
		},
		{
			name: "nil and empty lists are not identical",
			files: map[string]string{
				"a.yaml": policy("p", "{}", "  ingress: [{from: []}]\n"), "b.yaml": policy("p", "{}", "  ingress: [{}]\n"),
			},
			want:     []string{"x/p map[] types=[Ingress] ingress=nil egress=nil"},
			wantErrs: []string{"a.yaml doc 0: NetworkPolicy x/p: duplicate object", "b.yaml doc 0: NetworkPolicy x/p: duplicate object"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for name, data := range tc.files {
				fsys[name] = &fstest.MapFile{Data: []byte(data)}
			}
			snap, objErrs, err := LoadFS(fsys)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, np := range snap.Policies {
				got = append(got, np.Namespace+"/"+np.Name+" "+fmtLabels(np.Spec.PodSelector.MatchLabels)+" "+policyShape(np))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("policies (-want +got):\n%s", diff)
			}
			errs := errorStrings(objErrs)
			if len(errs) != len(tc.wantErrs) {
				t.Fatalf("errors:\n%s\nwant %d", strings.Join(errs, "\n"), len(tc.wantErrs))
			}
			for i := range errs {
				if !strings.Contains(errs[i], tc.wantErrs[i]) {
					t.Errorf("error %d:\n%s\nwant it to contain:\n%s", i, errs[i], tc.wantErrs[i])
				}
			}
		})
	}
}

// TestErrorNamesWhatTheFileSays: a namespace or name that YAML 1.1 reads as
// a boolean or number names the object as written, not as "default".
func TestErrorNamesWhatTheFileSays(t *testing.T) {
	for _, tc := range []struct {
		name, file, want string
	}{
		{"namespace y", "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: y}\n", "a.yaml doc 0: Pod y/p: json: cannot unmarshal bool"},
		{"namespace Off", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: Off\n", "a.yaml doc 0: Pod Off/p: "},
		{"numeric name", "apiVersion: v1\nkind: Namespace\nmetadata: {name: 0x1F}\n", "a.yaml doc 0: Namespace 0x1F: json: cannot unmarshal number"},
		{"list item", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: networking.k8s.io/v1\n  kind: NetworkPolicy\n  metadata: {name: p, namespace: n}\n  spec: {podSelector: {}}\n",
			"a.yaml doc 0 item 0: NetworkPolicy n/p: json: cannot unmarshal bool"},
		{"invalid YAML too", "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: yes}\nspec: {nodeName: a, nodeName: b}\n", "a.yaml doc 0: Pod yes/p: invalid YAML"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, objErrs, err := LoadFS(fstest.MapFS{"a.yaml": {Data: []byte(tc.file)}})
			if err != nil {
				t.Fatal(err)
			}
			if len(objErrs) != 1 || !strings.Contains(objErrs[0].Error(), tc.want) {
				t.Errorf("errors %q, want one containing %q", errorStrings(objErrs), tc.want)
			}
		})
	}
}

// fmtLabels prints a selector's labels; the tests use at most one.
func fmtLabels(m map[string]string) string {
	var kv []string
	for k, v := range m {
		kv = append(kv, k+":"+v)
	}
	return "map[" + strings.Join(kv, " ") + "]"
}
