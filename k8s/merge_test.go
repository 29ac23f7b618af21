package k8s

import (
	"errors"
	"fmt"
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
			// The invalid one's policyTypes cannot be read: both
			// directions are isolated.
			name: "an invalid definition does not hide the valid one's isolation, nor its own",
			files: map[string]string{
				"a.yaml": policy("p", "{matchLabels: {pod: a}}", "  policyTypes: [Sideways]\n"),
				"b.yaml": policy("p", "{matchLabels: {pod: a}}", allowAll),
			},
			want: []string{"x/p map[pod:a] types=[Ingress Egress] ingress=nil egress=nil"},
			wantErrs: []string{
				`a.yaml doc 0: NetworkPolicy x/p: spec.policyTypes[0]: "Sideways" is not supported`,
				"a.yaml doc 0: NetworkPolicy x/p: duplicate object",
				"b.yaml doc 0: NetworkPolicy x/p: duplicate object",
			},
		},
		{
			name: "no valid definition: isolated all the same, as an invalid policy alone is",
			files: map[string]string{
				"a.yaml": policy("p", "{matchLabels: {pod: a}}", "  policyTypes: [Sideways]\n---\n"+policy("p", "{}", "  policyTypes: [Up]\n")),
			},
			want: []string{"x/p map[] types=[Ingress Egress] ingress=nil egress=nil"},
			wantErrs: []string{"a.yaml doc 0: NetworkPolicy x/p: spec.policyTypes", "a.yaml doc 0: NetworkPolicy x/p: duplicate object, also defined at a.yaml doc 1; it isolates",
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

// TestRejectedStandIns: with no last good version to keep (a fresh start:
// a crash, a rollout, apply), a rejected NetworkPolicy stands in as one that
// isolates and allows nothing, and a rejected or differently duplicated Pod
// stays at its addresses with only the labels that can be trusted. Either
// is still an error naming the file, document and object.
func TestRejectedStandIns(t *testing.T) {
	policy := func(name, spec string) string {
		return "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {namespace: x, name: " + name + "}\nspec:\n" + spec
	}
	pod := func(name, labels, rest string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata:\n  namespace: x\n  name: " + name + "\n  labels: " + labels +
			"\nspec: {nodeName: node-1" + rest + "}\nstatus: {phase: Running, podIP: 10.244.1.2}\n"
	}
	for _, tc := range []struct {
		name, file string
		want       string // shape of the snapshot, "" for nothing
		wantErr    string // in the only error
	}{
		{"a port out of range", policy("a-in", "  podSelector: {matchLabels: {pod: b}}\n  ingress: [{ports: [{port: 70000}]}]\n"),
			"NetworkPolicy x/a-in isolates map[pod:b] [Ingress]",
			"a.yaml doc 0: NetworkPolicy x/a-in: spec.ingress[0].ports[0].port: 70000 must be between 1 and 65535, inclusive; no earlier version is known, so a policy stands in for it that isolates the pods its podSelector selects for [Ingress] and allows nothing"},
		{"no policyTypes, an egress rule", policy("p", "  podSelector: {matchLabels: {pod: b}}\n  egress: [{ports: [{port: 0}]}]\n"),
			"NetworkPolicy x/p isolates map[pod:b] [Ingress Egress]", "NetworkPolicy x/p: spec.egress[0].ports[0].port"},
		{"policyTypes stated", policy("p", "  podSelector: {matchLabels: {pod: b}}\n  policyTypes: [Egress]\n  egress: [{to: [{ipBlock: {cidr: 10.0.0.0/33}}]}]\n"),
			"NetworkPolicy x/p isolates map[pod:b] [Egress]", "NetworkPolicy x/p: spec.egress[0].to[0].ipBlock.cidr"},
		{"policyTypes unreadable: both", policy("p", "  podSelector: {matchLabels: {pod: b}}\n  policyTypes: [Ingres]\n"),
			"NetworkPolicy x/p isolates map[pod:b] [Ingress Egress]", `spec.policyTypes[0]: "Ingres" is not supported`},
		{"podSelector unreadable: the whole namespace", policy("p", "  podSelector: {matchExpressions: [{key: pod, operator: Within, values: [b]}]}\n  policyTypes: [Ingress]\n"),
			"NetworkPolicy x/p isolates map[] [Ingress]", "isolates every pod of namespace x for [Ingress]"},
		{"an unknown field", policy("p", "  podSelector: {matchLabels: {pod: b}}\n  ingress: [{fromm: []}]\n"),
			"NetworkPolicy x/p isolates map[pod:b] [Ingress]", `unknown field "spec.ingress[0].fromm"`},
		{"a wrong apiVersion", strings.Replace(policy("p", "  podSelector: {matchLabels: {pod: b}}\n  ingress: [{}]\n"), "networking.k8s.io/v1", "extensions/v1beta1", 1),
			"NetworkPolicy x/p isolates map[pod:b] [Ingress]", `apiVersion "extensions/v1beta1" is not supported`},
		{"a duplicate YAML key", policy("p", "  podSelector: {matchLabels: {pod: b}}\n  ingress: [{}]\n  ingress: []\n"),
			"NetworkPolicy x/p isolates map[pod:b] [Ingress]", "invalid YAML"},
		{"an invalid name: left out", policy("Bad_Name", "  podSelector: {}\n  ingress: [{ports: [{port: 70000}]}]\n"),
			"", "NetworkPolicy x/Bad_Name: metadata.name"},
		{"a pod with an invalid label keeps the valid ones", pod("b", `{pod: b, "bad key!": v, version: 2}`, ""),
			"Pod x/b map[pod:b] ports=0", "Pod x/b: json: cannot unmarshal number"},
		{"a pod with an invalid container port", pod("b", "{pod: b}", ", containers: [{name: c, ports: [{name: http, containerPort: 0}]}]"),
			"Pod x/b map[pod:b] ports=0", "Pod x/b: spec.containers[0].ports[0].containerPort: is required; no earlier version is known, so the pod stays at its addresses"},
		{"a pod whose hostNetwork cannot be read: left out", pod("b", "{pod: b, bad: 'yes!'}", ", hostNetwork: 'yes'"),
			"", "Pod x/b: "},
		{"a pod whose address is invalid: left out", strings.Replace(pod("b", "{pod: b, bad: 'yes!'}", ""), "10.244.1.2", "10.244.1.256", 1),
			"", "Pod x/b: "},
		{"a hostNetwork pod: left out", pod("b", "{pod: b, bad: 'yes!'}", ", hostNetwork: true"),
			"", "Pod x/b: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap, objErrs, err := LoadFS(fstest.MapFS{"a.yaml": {Data: []byte(tc.file)}})
			if err != nil {
				t.Fatal(err)
			}
			if got := standInShape(snap); got != tc.want {
				t.Errorf("objects %q, want %q", got, tc.want)
			}
			if len(objErrs) != 1 || !strings.Contains(objErrs[0].Error(), tc.wantErr) || objErrs[0].Warning() || objErrs[0].KeptLastGood {
				t.Errorf("errors %q, want one error (not a warning, not kept last good) containing %q", errorStrings(objErrs), tc.wantErr)
			}
		})
	}
}

// TestDuplicatePodStandIn: a pod defined twice, differently, with no last
// good version, keeps the labels both definitions agree on; if they
// disagree on its address, node or phase, it is unsettled: quarantined at
// every place they give (TestUnsettledPod).
func TestDuplicatePodStandIn(t *testing.T) {
	pod := func(labels, ip, rest string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata: {namespace: x, name: b, labels: " + labels + "}\n" +
			"spec: {nodeName: node-1, containers: [{name: c, ports: [{name: http, containerPort: 80}" + rest + "]}]}\nstatus: {phase: Running, podIP: " + ip + "}\n"
	}
	for _, tc := range []struct {
		name, a, b string
		want       string
	}{
		{"labels differ", pod("{app: web, v: '1'}", "10.244.1.2", ""), pod("{app: web, v: '2'}", "10.244.1.2", ""), "Pod x/b map[app:web]"},
		{"containers differ too", pod("{app: web, v: '1'}", "10.244.1.2", ""), pod("{app: web}", "10.244.1.2", ", {containerPort: 81}"), "Pod x/b map[app:web] ports=0"},
		{"one is invalid", pod("{app: web, v: '1'}", "10.244.1.2", ""), pod("{app: web, 'bad key!': v}", "10.244.1.2", ""), "Pod x/b map[app:web] ports=0"},
		{"addresses differ", pod("{app: web}", "10.244.1.2", ""), pod("{app: web}", "10.244.1.3", ""), "Pod x/b map[app:web] ports=0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap, objErrs, err := LoadFS(fstest.MapFS{"a.yaml": {Data: []byte(tc.a)}, "b.yaml": {Data: []byte(tc.b)}})
			if err != nil {
				t.Fatal(err)
			}
			if got := standInShape(snap); got != tc.want {
				t.Errorf("objects %q, want %q", got, tc.want)
			}
			dups := 0
			for _, e := range objErrs {
				if errors.Is(e, ErrDuplicate) && !e.Warning() {
					dups++
				}
			}
			if dups != 2 {
				t.Errorf("errors %q, want a duplicate error at both", errorStrings(objErrs))
			}
		})
	}
}

// standInShape renders pods (labels, and "ports=0" when they have none) and
// rule-less policies (what they isolate).
func standInShape(s *Snapshot) string {
	var out []string
	for _, o := range s.Pods {
		c := ""
		if len(o.Spec.Ports) == 0 {
			c = " ports=0"
		}
		if o.Status.PodIPs[0].IP == "10.244.1.2" && len(o.Status.PodIPs) == 1 && o.Spec.NodeName == "node-1" {
			out = append(out, fmt.Sprintf("Pod %s/%s %v%s", o.Namespace, o.Name, o.Labels, c))
		} else {
			out = append(out, fmt.Sprintf("Pod %s/%s at %v on %q", o.Namespace, o.Name, o.Status.PodIPs, o.Spec.NodeName))
		}
	}
	for _, o := range s.Policies {
		if o.Spec.Ingress != nil || o.Spec.Egress != nil {
			out = append(out, "NetworkPolicy "+o.Namespace+"/"+o.Name+" with rules")
			continue
		}
		out = append(out, fmt.Sprintf("NetworkPolicy %s/%s isolates %v %v", o.Namespace, o.Name, o.Spec.PodSelector.MatchLabels, o.Spec.PolicyTypes))
	}
	return strings.Join(out, ", ")
}
