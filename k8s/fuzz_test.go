package k8s

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	policyv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
	"sigs.k8s.io/yaml"
)

// FuzzLoadFile feeds arbitrary bytes to loadFile, the function under LoadDir
// and the directory watcher that turns one manifest file into objects and
// object errors: as a YAML file, or as a JSON file when isJSON is set. The
// properties checked for every input:
//
//   - loadFile never panics, and neither does merge of what it loaded;
//   - every document, and every item of a List document, gives either an
//     admitted object or an ObjectError at its location: never both,
//     never neither (a mistake is never dropped silently);
//   - every admitted object is what Admit makes of it: admitting it again
//     changes nothing and finds nothing wrong (defaulted, valid,
//     normalized), its type meta is set and its key is its namespace/name;
//   - a NetworkPolicy keeps nil and empty lists apart exactly as the
//     document wrote them (ingress, egress, from, to, ports);
//   - every object merge puts into the Snapshot passes Admit unchanged,
//     including the isolate-only stand-in for a duplicated policy, and
//     every ClusterNetworkPolicy;
//   - Quarantined names pods of the Snapshot, QuarantinedNamespaces its
//     namespaces, and Unsettled quarantined pods, each at one address or
//     more that parse.
//
// The seed corpus is testdata/fuzz/FuzzLoadFile plus the files below;
// `go test` runs them as ordinary tests. Run longer with `make fuzz`.
func FuzzLoadFile(f *testing.F) {
	for _, seed := range []string{
		"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n  labels: {ns: x}\n",
		"apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: deny, namespace: x}\nspec:\n  podSelector: {}\n  ingress: []\n  egress:\n  - to: []\n    ports: [{port: serve-80, protocol: UDP}, {port: 80, endPort: 90}]\n",
		"apiVersion: v1\nkind: PodList\nitems:\n- metadata: {name: a, namespace: x}\n  status: {podIP: 10.0.0.1}\n- null\n- kind: Node\n",
		"---\n# only a comment\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: \"y\", name: z}\n",
		"apiVersion: v1\nkind: Namespace\nmetadata: {name: w, labels: {env: prod, bad: \"x \"}}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: w}\n",
		"kind: Pod\napiVersion: v1\nmetadata: {name: a, namespace: x}\nspec: {nodeName: n1}\nstatus: {podIP: 10.0.0.1}\n---\nkind: Pod\napiVersion: v1\nmetadata: {name: a, namespace: x}\nspec: {nodeName: n2}\nstatus: {podIP: 10.0.0.2}\n",
		"apiVersion: policy.networking.k8s.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: c}\nspec:\n  tier: Admin\n  priority: 5\n  subject: {pods: {namespaceSelector: {}, podSelector: {matchLabels: {a: b}}}}\n  ingress: [{action: Deny, from: [{namespaces: {}}], protocols: [{tcp: {destinationPort: {range: {start: 80, end: 90}}}}, {destinationNamedPort: http}]}]\n  egress: [{name: out, action: Pass, to: [{networks: ['2001:DB8::/32', 10.0.0.0/8]}, {nodes: {}}, {domainNames: ['*.example.com']}], protocols: [{udp: {destinationPort: {number: 53}}}]}]\n---\napiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\nmetadata: {name: c}\nspec: {tier: Baseline, subject: {}, egress: [{action: Accept, to: [{}], protocols: [{tcp: {destinationPort: {number: 0}}}]}]}\n",
	} {
		f.Add([]byte(seed), false)
	}
	f.Add([]byte(`{"apiVersion":"v1","kind":"Node","metadata":{"name":"n"},"spec":{"podCIDRs":["10.0.0.1/24"]}} {"kind":`), true)

	f.Fuzz(func(t *testing.T, data []byte, isJSON bool) {
		name := "fuzz.yaml"
		if isJSON {
			name = "fuzz.json"
		}
		fl := loadFile(name, data)
		checkFileLoad(t, name, data, fl)

		snap, objErrs := merge([]*fileLoad{fl})
		if len(objErrs) < len(fl.errs) {
			t.Errorf("merge lost object errors: %d of the file's %d remain", len(objErrs), len(fl.errs))
		}
		var objs []runtime.Object
		for _, o := range snap.Namespaces {
			objs = append(objs, o)
		}
		for _, o := range snap.Pods {
			objs = append(objs, o)
		}
		for _, o := range snap.Nodes {
			objs = append(objs, o)
		}
		for _, o := range snap.Policies {
			objs = append(objs, o)
		}
		for _, o := range snap.ClusterPolicies {
			objs = append(objs, o)
		}
		for _, o := range objs {
			checkAdmitted(t, "snapshot", o)
		}
		checkQuarantine(t, snap)
	})
}

// checkQuarantine checks that what a Snapshot quarantines is in it.
func checkQuarantine(t *testing.T, snap *Snapshot) {
	t.Helper()
	pods, nss := map[types.NamespacedName]bool{}, map[string]bool{}
	for _, p := range snap.Pods {
		pods[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = true
	}
	for _, ns := range snap.Namespaces {
		nss[ns.Name] = true
	}
	quarantined := map[types.NamespacedName]bool{}
	for _, q := range snap.Quarantined {
		quarantined[q] = true
		if !pods[q] {
			t.Errorf("Quarantined names %s, which is no pod of the Snapshot", q)
		}
	}
	for _, ns := range snap.QuarantinedNamespaces {
		if !nss[ns] {
			t.Errorf("QuarantinedNamespaces names %s, which is no namespace of the Snapshot", ns)
		}
	}
	for _, u := range snap.Unsettled {
		if !quarantined[types.NamespacedName{Namespace: u.Namespace, Name: u.Name}] {
			t.Errorf("Unsettled %s/%s is not quarantined", u.Namespace, u.Name)
		}
		if len(u.IPs) == 0 {
			t.Errorf("Unsettled %s/%s has no address", u.Namespace, u.Name)
		}
		for _, ip := range u.IPs {
			if a, err := netip.ParseAddr(ip); err != nil || a.String() != ip {
				t.Errorf("Unsettled %s/%s: address %q is not canonical (%v)", u.Namespace, u.Name, ip, err)
			}
		}
	}
}

// A fuzzDoc is one document of a manifest file as counted independently of
// the loader: its JSON, or nil when it cannot be parsed.
type fuzzDoc struct{ json []byte }

// fuzzDocuments lists the documents of a file that the loader must account
// for: every document of a YAML stream except empty ones (only whitespace,
// comments or null), and every non-null value of a JSON stream up to and
// including the first that does not parse.
func fuzzDocuments(name string, data []byte) []fuzzDoc {
	data = bytes.TrimPrefix(data, utf8BOM)
	var docs []fuzzDoc
	if name == "fuzz.json" {
		dec := json.NewDecoder(bytes.NewReader(data))
		for {
			var raw json.RawMessage
			err := dec.Decode(&raw)
			if errors.Is(err, io.EOF) {
				return docs
			}
			if err != nil {
				return append(docs, fuzzDoc{})
			}
			if !isNull(raw) {
				docs = append(docs, fuzzDoc{raw})
			}
		}
	}
	for _, d := range splitYAML(data) {
		j, err := yaml.YAMLToJSONStrict(d.data)
		if err != nil {
			if lenient, lerr := yaml.YAMLToJSON(d.data); lerr == nil && isNull(lenient) {
				continue
			}
			docs = append(docs, fuzzDoc{})
			continue
		}
		if !isNull(j) {
			docs = append(docs, fuzzDoc{j})
		}
	}
	return docs
}

// checkFileLoad checks that every document and List item of the file has an
// admitted object or an error, and each admitted object on its own.
func checkFileLoad(t *testing.T, name string, data []byte, fl *fileLoad) {
	t.Helper()
	docs := fuzzDocuments(name, data)
	type at struct{ doc, item int }
	objects := map[at]runtime.Object{}
	errs := map[at]int{}
	for _, e := range fl.errs {
		if e.File != name || e.Err == nil || e.Doc < 0 || e.Doc >= len(docs) || e.Item < -1 {
			t.Errorf("object error out of place (file has %d documents): %#v", len(docs), e)
		}
		errs[at{e.Doc, e.Item}]++
	}
	for _, d := range fl.defs {
		if d.loc.file != name || d.loc.doc < 0 || d.loc.doc >= len(docs) {
			t.Errorf("definition out of place (file has %d documents): %+v", len(docs), d)
		}
		if d.obj == nil {
			continue
		}
		where := location(d.loc.file, d.loc.doc, d.loc.item)
		k := at{d.loc.doc, d.loc.item}
		if objects[k] != nil {
			t.Errorf("%s: two objects", where)
		}
		objects[k] = d.obj
		checkAdmitted(t, where, d.obj)
		m, ok := d.obj.(interface {
			GetNamespace() string
			GetName() string
		})
		if !ok || d.key != (objectKey{d.obj.GetObjectKind().GroupVersionKind().Kind, m.GetNamespace(), m.GetName()}) {
			t.Errorf("%s: key %+v does not name the object %T %v", where, d.key, d.obj, m)
		}
	}
	// one is the outcome of one document or item: an object or errors.
	one := func(k at, what string) {
		switch obj, n := objects[k], errs[k]; {
		case obj != nil && n > 0:
			t.Errorf("%s %d item %d: both an object and %d errors", what, k.doc, k.item, n)
		case obj == nil && n == 0:
			t.Errorf("%s %d item %d: neither an object nor an error (dropped silently)", what, k.doc, k.item)
		}
	}
	for i, d := range docs {
		if d.json == nil {
			one(at{i, -1}, "unparseable document")
			continue
		}
		var m map[string]any
		if json.Unmarshal(d.json, &m) != nil || m == nil {
			one(at{i, -1}, "document")
			continue
		}
		kind, _ := m["kind"].(string)
		if _, isList := listElem(kind); !isList || errs[at{i, -1}] > 0 {
			one(at{i, -1}, "document")
			if obj := objects[at{i, -1}]; obj != nil {
				checkNilVersusEmpty(t, fmt.Sprintf("document %d", i), m, obj)
			}
			continue
		}
		items, _ := m["items"].([]any)
		for j, item := range items {
			one(at{i, j}, "list document")
			if obj := objects[at{i, j}]; obj != nil {
				im, _ := item.(map[string]any)
				checkNilVersusEmpty(t, fmt.Sprintf("document %d item %d", i, j), im, obj)
			}
		}
	}
}

// checkAdmitted checks what the package promises of an object it hands out:
// Admit finds it valid and already defaulted and normalized, and the
// defaults the compiler relies on are there.
func checkAdmitted(t *testing.T, where string, obj runtime.Object) {
	t.Helper()
	again := obj.DeepCopyObject()
	if errs := Admit(again); len(errs) != 0 {
		t.Errorf("%s: admitted %T is invalid when admitted again: %v", where, obj, FieldErrors(errs))
		return
	}
	if !reflect.DeepEqual(again, obj) {
		t.Errorf("%s: admitting the admitted %T again changes it:\nbefore %#v\nafter  %#v", where, obj, obj, again)
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	info, ok := kinds[gvk.Kind]
	if !ok || gvk.GroupVersion().String() != info.apiVersion {
		t.Errorf("%s: type meta %v is not a kind the loader reads", where, gvk)
	}
	switch o := obj.(type) {
	case *corev1.Namespace:
		if o.Labels[corev1.LabelMetadataName] != o.Name || o.Namespace != "" {
			t.Errorf("%s: namespace %q has labels %v, namespace %q", where, o.Name, o.Labels, o.Namespace)
		}
	case *Pod:
		if o.Namespace == "" {
			t.Errorf("%s: pod %s: namespace not defaulted", where, o.Name)
		}
	case *policyv1beta1.ClusterNetworkPolicy:
		if o.Namespace != "" || o.Status.Conditions != nil {
			t.Errorf("%s: cluster policy %s: namespace %q or status %v", where, o.Name, o.Namespace, o.Status)
		}
	case *networkingv1.NetworkPolicy:
		if o.Namespace == "" || len(o.Spec.PolicyTypes) == 0 {
			t.Errorf("%s: policy %s/%s: namespace or policyTypes not defaulted", where, o.Namespace, o.Name)
		}
		for _, r := range o.Spec.Ingress {
			checkPortsDefaulted(t, where, r.Ports)
		}
		for _, r := range o.Spec.Egress {
			checkPortsDefaulted(t, where, r.Ports)
		}
	}
}

func checkPortsDefaulted(t *testing.T, where string, ports []networkingv1.NetworkPolicyPort) {
	t.Helper()
	for _, p := range ports {
		if p.Protocol == nil {
			t.Errorf("%s: a policy port without a protocol", where)
		}
	}
}

// checkNilVersusEmpty compares the lists of an admitted NetworkPolicy with
// the JSON it was decoded from: an absent or null list must be nil, a
// written one ([] included) non-nil and as long.
func checkNilVersusEmpty(t *testing.T, where string, doc map[string]any, obj runtime.Object) {
	t.Helper()
	np, ok := obj.(*networkingv1.NetworkPolicy)
	if !ok {
		return
	}
	spec, _ := doc["spec"].(map[string]any)
	same := func(path string, m map[string]any, key string, isNil bool, n int) {
		raw, written := m[key].([]any)
		switch {
		case written && (isNil || len(raw) != n):
			t.Errorf("%s: %s is %d long in the document, nil=%v len=%d in the policy", where, path, len(raw), isNil, n)
		case !written && !isNil:
			t.Errorf("%s: %s is absent or null in the document, non-nil (len %d) in the policy", where, path, n)
		}
	}
	rules := func(dir, peersKey string, isNil bool, n int, peers func(int) ([]networkingv1.NetworkPolicyPeer, []networkingv1.NetworkPolicyPort)) {
		same("spec."+dir, spec, dir, isNil, n)
		raw, _ := spec[dir].([]any)
		for i := 0; i < n && i < len(raw); i++ {
			r, _ := raw[i].(map[string]any)
			ps, ports := peers(i)
			same(fmt.Sprintf("spec.%s[%d].%s", dir, i, peersKey), r, peersKey, ps == nil, len(ps))
			same(fmt.Sprintf("spec.%s[%d].ports", dir, i), r, "ports", ports == nil, len(ports))
		}
	}
	in, eg := np.Spec.Ingress, np.Spec.Egress
	rules("ingress", "from", in == nil, len(in), func(i int) ([]networkingv1.NetworkPolicyPeer, []networkingv1.NetworkPolicyPort) {
		return in[i].From, in[i].Ports
	})
	rules("egress", "to", eg == nil, len(eg), func(i int) ([]networkingv1.NetworkPolicyPeer, []networkingv1.NetworkPolicyPort) {
		return eg[i].To, eg[i].Ports
	})
}
