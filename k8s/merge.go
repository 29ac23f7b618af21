package k8s

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// merge builds the Snapshot of a directory from its files' loads, in file
// name order, with no earlier state (LoadDir, and WatchDir's first load).
// See mergeOver.
func merge(loads []*fileLoad) (*Snapshot, []*ObjectError) {
	snap, objErrs, _ := mergeOver(loads, nil)
	return snap, objErrs
}

// A previous is what WatchDir had in effect before a change.
type previous struct {
	objs map[objectKey]runtime.Object // every object of the snapshot in effect
	held [][]objectKey                // per load, in the order given to mergeOver: the keys that file held
}

// last returns the object in effect under key, or nil.
func (p *previous) last(key objectKey) runtime.Object {
	if p == nil {
		return nil
	}
	return p.objs[key]
}

// maxKeptNamed bounds the objects an error lists by name.
const maxKeptNamed = 5

// mergeOver builds the Snapshot of a directory from its files' loads, in
// file name order, and returns every object error, the files' own and one
// per definition of a duplicated object, sorted by file, document and item,
// and for each load the keys of the objects it holds in the Snapshot (for
// the next call's prev). prev is the state in effect before, nil for none.
//
// An object defined more than once (same kind, namespace and name, in one
// file or in several) whose definitions are all valid and equal after
// defaulting (reflect.DeepEqual, so nil and empty lists stay apart) is
// used once: a copied file (cp pods.yaml pods-backup.yaml) changes nothing,
// and each definition gets a warning, ErrIdenticalDuplicate, naming the
// others. Otherwise it is an error at every definition, naming the others,
// and no definition wins: a rule such as "the first file wins" lets a file
// that sorts early shadow a policy without anyone noticing. What is kept
// instead is what fails closed:
//
//   - a NetworkPolicy is replaced by one that isolates and allows nothing
//     (see isolationOnly). Dropping it outright would un-isolate the pods
//     it selects, which opens them; keeping either definition would use
//     allows nobody can vouch for;
//   - a Pod, Namespace or Node keeps the version in prev, the one in effect
//     before the definitions started to disagree: dropping a pod opens it
//     (it is no longer a target), and keeping one definition means trusting
//     labels or addresses that the other contradicts. With no version in
//     prev it is left out, and the error says which files to fix.
//
// An object whose only definitions are rejected (they do not decode, do
// not validate, or have the wrong apiVersion) keeps its version in prev, as
// the API server keeps an object when an update is rejected; dropping it
// would open its pods. With no version in prev it is left out, as the API
// server rejects a create.
//
// A rejected document that cannot be pinned to an object of prev (its
// kind or name cannot be read, or names an object that did not exist: a
// typo in the kind, a rename to an invalid name) might be any object the
// file held. Its file then also keeps, from prev, every object it held
// that no file defines any more. That is the safest reading: nothing in
// effect vanishes because of a document nobody can read, while the
// file's valid documents still apply (keeping the whole file's last
// version, as for a file that does not parse, would also hold back its
// valid edits, tightening ones included). A deletion made in the same
// edit waits until the file is fixed; the error lists what is kept.
func mergeOver(loads []*fileLoad, prev *previous) (*Snapshot, []*ObjectError, [][]objectKey) {
	byKey := map[objectKey][]*definition{}
	var order []objectKey
	defOf := map[*ObjectError]*definition{}
	for _, fl := range loads {
		for i := range fl.defs {
			d := &fl.defs[i]
			if _, ok := byKey[d.key]; !ok {
				order = append(order, d.key)
			}
			byKey[d.key] = append(byKey[d.key], d)
			if d.err != nil {
				defOf[d.err] = d
			}
		}
	}
	var snap Snapshot
	used := map[objectKey]bool{}
	use := func(key objectKey, obj runtime.Object) {
		// Once per key: two files may both keep an object they held.
		if obj != nil && !used[key] {
			snap.add(obj)
			used[key] = true
		}
	}
	// notes are what merge adds to the files' own errors, which are shared
	// with the watcher's state and never edited in place.
	notes := map[*ObjectError]string{}
	var dupErrs []*ObjectError
	for _, key := range order {
		defs := byKey[key]
		if len(defs) == 1 {
			d := defs[0]
			if d.obj != nil {
				use(key, d.obj)
			} else if old := prev.last(key); old != nil {
				use(key, old)
				notes[d.err] = "its last good version stays in effect (an update the API server would reject)"
			}
			continue
		}
		kind, outcome, lastGood := ErrDuplicate, "every definition is left out", false
		if identical(defs) {
			kind, outcome = ErrIdenticalDuplicate, "used once"
			use(key, defs[0].obj)
		} else {
			var kept runtime.Object
			if key.kind == "NetworkPolicy" {
				if p := isolationOnly(defs); p != nil {
					kept = p
					outcome = "it isolates the pods either definition selects and allows nothing until one is removed"
				}
			}
			if old := prev.last(key); kept == nil && old != nil {
				kept, lastGood = old, true
				outcome = "its last good version stays in effect until one is removed"
			}
			use(key, kept)
		}
		for i, d := range defs {
			var others []string
			for j, o := range defs {
				if j != i {
					others = append(others, location(o.loc.file, o.loc.doc, o.loc.item))
				}
			}
			dupErrs = append(dupErrs, &ObjectError{
				File: d.loc.file, Doc: d.loc.doc, Item: d.loc.item,
				Kind: key.kind, Namespace: key.namespace, Name: key.name,
				Err:          fmt.Errorf("%w, also defined at %s; %s", kind, strings.Join(others, ", "), outcome),
				KeptLastGood: lastGood,
			})
		}
	}

	held := make([][]objectKey, len(loads))
	for i, fl := range loads {
		var kept []objectKey
		if prev != nil && i < len(prev.held) {
			kept = keepUnaccounted(fl, prev, prev.held[i], byKey, defOf, notes, use)
		}
		seen := map[objectKey]bool{}
		for _, d := range fl.defs {
			if used[d.key] && !seen[d.key] {
				seen[d.key] = true
				held[i] = append(held[i], d.key)
			}
		}
		held[i] = append(held[i], kept...)
	}

	var objErrs []*ObjectError
	for _, fl := range loads {
		for _, e := range fl.errs {
			if note, ok := notes[e]; ok {
				c := *e
				c.Err = fmt.Errorf("%w; %s", e.Err, note)
				c.KeptLastGood = true
				e = &c
			}
			objErrs = append(objErrs, e)
		}
	}
	objErrs = append(objErrs, dupErrs...)
	snap.Sort()
	slices.SortStableFunc(objErrs, func(a, b *ObjectError) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Doc, b.Doc), cmp.Compare(a.Item, b.Item))
	})
	return &snap, objErrs, held
}

// keepUnaccounted keeps, when one of fl's rejected documents cannot be
// pinned to an object in prev, every object the file held before (held)
// that no load defines any more, and notes it on the first such document's
// error. It returns the keys kept. See mergeOver.
func keepUnaccounted(fl *fileLoad, prev *previous, held []objectKey, byKey map[objectKey][]*definition,
	defOf map[*ObjectError]*definition, notes map[*ObjectError]string, use func(objectKey, runtime.Object)) []objectKey {
	var orphans []objectKey
	for _, k := range held {
		if len(byKey[k]) == 0 && prev.last(k) != nil {
			orphans = append(orphans, k)
		}
	}
	if len(orphans) == 0 {
		return nil
	}
	var trigger *ObjectError
	for _, e := range fl.errs {
		if d := defOf[e]; d != nil {
			// Named: it stands for an object of prev (kept on its own) or
			// is new, and a new name may be a rename of a held one.
			if prev.last(d.key) == nil {
				trigger = e
				break
			}
			continue
		}
		if errors.Is(e.Err, ErrUnsupportedKind) {
			// A kind nftpolicy does not read (a Service next to the
			// policies) is what it says, unless it carries the name of an
			// object the file held: "kind: Networkpolicy" is a typo.
			if !slices.ContainsFunc(orphans, func(k objectKey) bool {
				return k.name == e.Name && (e.Namespace == "" || e.Namespace == k.namespace)
			}) {
				continue
			}
		}
		trigger = e
		break
	}
	if trigger == nil {
		return nil
	}
	var names []string
	for _, k := range orphans {
		use(k, prev.last(k))
		if len(names) < maxKeptNamed {
			names = append(names, k.String())
		}
	}
	list := strings.Join(names, ", ")
	if more := len(orphans) - len(names); more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	note := "this document cannot be told apart from the objects the file held before, so those it no longer defines stay in effect: " + list
	if prevNote, ok := notes[trigger]; ok {
		note = prevNote + "; " + note
	}
	notes[trigger] = note
	return orphans
}

// String returns "Kind namespace/name", or "Kind name" for cluster-scoped
// kinds.
func (k objectKey) String() string {
	if k.namespace == "" {
		return k.kind + " " + k.name
	}
	return k.kind + " " + k.namespace + "/" + k.name
}

// identical reports whether every definition is valid and equal to the
// others after defaulting.
func identical(defs []*definition) bool {
	for _, d := range defs {
		if d.obj == nil || !reflect.DeepEqual(d.obj, defs[0].obj) {
			return false
		}
	}
	return true
}

// objectsOf indexes the objects of a snapshot by key.
func objectsOf(s *Snapshot) map[objectKey]runtime.Object {
	objs := map[objectKey]runtime.Object{}
	if s == nil {
		return objs
	}
	for _, o := range s.Namespaces {
		objs[objectKey{"Namespace", "", o.Name}] = o
	}
	for _, o := range s.Pods {
		objs[objectKey{"Pod", o.Namespace, o.Name}] = o
	}
	for _, o := range s.Nodes {
		objs[objectKey{"Node", "", o.Name}] = o
	}
	for _, o := range s.Policies {
		objs[objectKey{"NetworkPolicy", o.Namespace, o.Name}] = o
	}
	return objs
}

// add appends an admitted object to its slice; nil is ignored.
func (s *Snapshot) add(obj runtime.Object) {
	switch o := obj.(type) {
	case *corev1.Namespace:
		s.Namespaces = append(s.Namespaces, o)
	case *corev1.Pod:
		s.Pods = append(s.Pods, o)
	case *corev1.Node:
		s.Nodes = append(s.Nodes, o)
	case *networkingv1.NetworkPolicy:
		s.Policies = append(s.Policies, o)
	}
}

// isolationOnly returns the policy that stands for a duplicated
// NetworkPolicy: it isolates, for every policy type of a valid definition,
// the pods their podSelector picks (all pods of the namespace when the
// definitions select differently: one selector cannot express the union),
// and has no rules, so it allows nothing. It returns nil when no definition
// is valid: an invalid policy on its own is left out too.
func isolationOnly(defs []*definition) *networkingv1.NetworkPolicy {
	var valid []*networkingv1.NetworkPolicy
	for _, d := range defs {
		if np, ok := d.obj.(*networkingv1.NetworkPolicy); ok {
			valid = append(valid, np)
		}
	}
	if len(valid) == 0 {
		return nil
	}
	sel := valid[0].Spec.PodSelector
	var ingress, egress bool
	for _, np := range valid {
		if !reflect.DeepEqual(np.Spec.PodSelector, sel) {
			sel = metav1.LabelSelector{}
		}
		for _, t := range np.Spec.PolicyTypes {
			ingress = ingress || t == networkingv1.PolicyTypeIngress
			egress = egress || t == networkingv1.PolicyTypeEgress
		}
	}
	np := &networkingv1.NetworkPolicy{
		TypeMeta:   valid[0].TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Namespace: valid[0].Namespace, Name: valid[0].Name},
		Spec:       networkingv1.NetworkPolicySpec{PodSelector: *sel.DeepCopy()},
	}
	// Ingress and Egress stay nil: an isolated direction with no rules
	// allows nothing.
	if ingress {
		np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
	}
	if egress {
		np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
	}
	return np
}
