package k8s

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"
	policyv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
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
	// the pods and namespaces of it that were quarantined
	// (Snapshot.Quarantined, Snapshot.QuarantinedNamespaces)
	quarantined map[objectKey]bool
	unsettled   map[objectKey]*UnsettledPod // the pods of it that were unsettled (Snapshot.Unsettled)
	held        [][]objectKey               // per load, in the order given to mergeOver: the keys that file held
}

// previousOf returns the state in effect in s, for mergeOver.
func previousOf(s *Snapshot) *previous {
	p := &previous{objs: objectsOf(s), quarantined: map[objectKey]bool{}, unsettled: map[objectKey]*UnsettledPod{}}
	for _, q := range s.Quarantined {
		p.quarantined[objectKey{"Pod", q.Namespace, q.Name}] = true
	}
	for _, ns := range s.QuarantinedNamespaces {
		p.quarantined[objectKey{"Namespace", "", ns}] = true
	}
	for i := range s.Unsettled {
		u := &s.Unsettled[i]
		p.unsettled[objectKey{"Pod", u.Namespace, u.Name}] = u
	}
	return p
}

// last returns the object in effect under key, or nil.
func (p *previous) last(key objectKey) runtime.Object {
	if p == nil {
		return nil
	}
	return p.objs[key]
}

// lastQuarantined reports whether the object in effect under key is a pod
// or namespace whose labels were not known: a kept stand-in stays
// quarantined.
func (p *previous) lastQuarantined(key objectKey) bool {
	return p != nil && p.quarantined[key]
}

// lastUnsettled returns where the pod in effect under key might be when
// its definitions disagreed on it (Snapshot.Unsettled), or nil: a kept
// stand-in stays where it was.
func (p *previous) lastUnsettled(key objectKey) *UnsettledPod {
	if p == nil {
		return nil
	}
	return p.unsettled[key]
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
//     allows nobody can vouch for. Only when every definition is rejected
//     does the version in prev win, as for a rejected edit (below);
//   - a Pod, Namespace or Node keeps the version in prev, the one in effect
//     before the definitions started to disagree: dropping a pod opens it
//     (it is no longer a target), and keeping one definition means trusting
//     labels or addresses that the other contradicts. With no version in
//     prev a Pod keeps only what its definitions agree on (agreedPod), or
//     when they disagree on where it is, is quarantined at every place
//     they give (unsettledPod); a Namespace keeps the labels its
//     definitions agree on, quarantined when they disagree
//     (agreedNamespace); a Node is left out (which fails closed: its
//     addresses are not allowed); and the error says which files to fix.
//
// An object whose only definitions are rejected (they do not decode, do
// not validate, or have the wrong apiVersion) keeps its version in prev, as
// the API server keeps an object when an update is rejected; dropping it
// would open its pods. With no version in prev (a fresh start after a
// crash or a rollout looks exactly like this, so it cannot be read as "the
// API server would reject the create") a NetworkPolicy, Pod or Namespace
// gets its stand-in (standIn), which fails closed, and a Node is left out.
//
// A Pod or Namespace kept as a stand-in that lacks a label of the object
// (podStandIn, agreedPod, unsettledPod, namespaceStandIn,
// agreedNamespace), or kept from prev where it was such a stand-in, is
// named in Snapshot.Quarantined or Snapshot.QuarantinedNamespaces, and a
// Pod placed by unsettledPod (or kept from prev where it was) in
// Snapshot.Unsettled. Each error says what is in effect in its object's
// place: KeptLastGood, StandIn, or neither (ObjectError.Lost).
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
	// use puts obj in the Snapshot under key; quarantined says that it is
	// a pod or namespace whose true labels are not known
	// (Snapshot.Quarantined, QuarantinedNamespaces), where, for a pod,
	// every place its differing definitions give (Snapshot.Unsettled).
	use := func(key objectKey, obj runtime.Object, quarantined bool, where *UnsettledPod) {
		// Once per key: two files may both keep an object they held.
		if obj == nil || used[key] {
			return
		}
		snap.add(obj)
		used[key] = true
		switch obj.(type) {
		case *corev1.Pod, *Pod:
			if quarantined || where != nil {
				snap.Quarantined = append(snap.Quarantined, types.NamespacedName{Namespace: key.namespace, Name: key.name})
			}
			if where != nil {
				snap.Unsettled = append(snap.Unsettled, *where)
			}
		case *corev1.Namespace:
			if quarantined {
				snap.QuarantinedNamespaces = append(snap.QuarantinedNamespaces, key.name)
			}
		}
	}
	// notes are what merge adds to the files' own errors, which are shared
	// with the watcher's state and never edited in place.
	notes := map[*ObjectError]note{}
	var dupErrs []*ObjectError
	for _, key := range order {
		defs := byKey[key]
		if len(defs) == 1 {
			d := defs[0]
			switch old := prev.last(key); {
			case d.obj != nil:
				use(key, d.obj, false, nil)
			case old != nil:
				use(key, old, prev.lastQuarantined(key), prev.lastUnsettled(key))
				notes[d.err] = note{text: "its last good version stays in effect (an update the API server would reject)", kept: true}
			case d.standin != nil:
				use(key, d.standin, d.quarantined, nil)
				notes[d.err] = note{text: "no earlier version is known, so " + standInOutcome(d.standin, d.quarantined), standIn: true}
			}
			continue
		}
		kind, outcome, lastGood, stoodIn := ErrDuplicate, "every definition is left out", false, false
		if identical(defs) {
			kind, outcome = ErrIdenticalDuplicate, "used once"
			use(key, defs[0].obj, false, nil)
		} else {
			var kept runtime.Object
			var where *UnsettledPod
			quarantined := false
			old := prev.last(key)
			// A policy's stand-in wins over its last good version unless
			// every definition is rejected, which is a rejected edit.
			if key.kind == "NetworkPolicy" && (old == nil || slices.ContainsFunc(defs, func(d *definition) bool { return d.obj != nil })) {
				if p := isolationOnly(defs); p != nil {
					kept, stoodIn = p, true
					outcome = "it isolates the pods either definition selects and allows nothing until one is removed"
				}
			}
			if key.kind == "ClusterNetworkPolicy" && (old == nil || slices.ContainsFunc(defs, func(d *definition) bool { return d.obj != nil })) {
				if p := denyOnly(defs); p != nil {
					kept, stoodIn = p, true
					outcome = "the Deny rules of every definition that validates stand in the Admin tier at the first priority, for the pods either subject selects (all pods when they differ), and nothing is accepted or passed, until one is removed"
				}
			}
			if kept == nil && old != nil {
				kept, lastGood, quarantined, where = old, true, prev.lastQuarantined(key), prev.lastUnsettled(key)
				outcome = "its last good version stays in effect until one is removed"
			}
			if kept == nil && key.kind == "Pod" {
				if p, q := agreedPod(defs); p != nil {
					kept, stoodIn, quarantined = p, true, q
					outcome = "no earlier version is known, so the pod stays at its addresses with only the labels every definition agrees on, until one is removed"
					if q {
						outcome = "no earlier version is known, so the pod stays at its addresses with only the labels every definition agrees on, quarantined as its true labels are not known: isolated for ingress and egress with nothing allowed, selected by no policy and named by no pod selector, until one is removed"
					}
				} else if p, w := unsettledPod(defs); p != nil {
					kept, stoodIn, quarantined, where = p, true, true, w
					outcome = fmt.Sprintf("no earlier version is known and the definitions disagree on where the pod is, so it is quarantined at every address they give (%s; one another pod holds stays that pod's) and on every node they name (%s): isolated for ingress and egress with nothing allowed, selected by no policy and named by no pod selector, until one is removed",
						strings.Join(w.IPs, ", "), strings.Join(w.Nodes, ", "))
				}
			}
			if kept == nil && key.kind == "Namespace" {
				if ns, q := agreedNamespace(key, defs); ns != nil {
					kept, stoodIn, quarantined = ns, true, q
					outcome = "no earlier version is known, so the namespace keeps the labels every definition agrees on, until one is removed"
					if q {
						outcome = "no earlier version is known, so the namespace keeps the labels every definition agrees on, " + nsQuarantineOutcome + ", until one is removed"
					}
				}
			}
			use(key, kept, quarantined, where)
			// A rejected definition's own error says what its duplicate
			// error says is in effect.
			for _, d := range defs {
				if d.err != nil && kept != nil {
					notes[d.err] = note{kept: lastGood, standIn: stoodIn}
				}
			}
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
				StandIn:      stoodIn,
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
			if n, ok := notes[e]; ok {
				c := *e
				if n.text != "" {
					c.Err = fmt.Errorf("%w; %s", e.Err, n.text)
				}
				c.KeptLastGood, c.StandIn = n.kept, n.standIn
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

// A note is what merge adds to a file's ObjectError: the text (none for a
// definition whose duplicate errors say it), and whether a last good
// version is kept (ObjectError.KeptLastGood) or a stand-in is in effect
// (ObjectError.StandIn).
type note struct {
	text          string
	kept, standIn bool
}

// keepUnaccounted keeps, when one of fl's rejected documents cannot be
// pinned to an object in prev, every object the file held before (held)
// that no load defines any more, and notes it on the first such document's
// error. It returns the keys kept. See mergeOver.
func keepUnaccounted(fl *fileLoad, prev *previous, held []objectKey, byKey map[objectKey][]*definition,
	defOf map[*ObjectError]*definition, notes map[*ObjectError]note, use func(objectKey, runtime.Object, bool, *UnsettledPod)) []objectKey {
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
		use(k, prev.last(k), prev.lastQuarantined(k), prev.lastUnsettled(k))
		if len(names) < maxKeptNamed {
			names = append(names, k.String())
		}
	}
	list := strings.Join(names, ", ")
	if more := len(orphans) - len(names); more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	text := "this document cannot be told apart from the objects the file held before, so those it no longer defines stay in effect: " + list
	prevNote := notes[trigger]
	if prevNote.text != "" {
		text = prevNote.text + "; " + text
	}
	notes[trigger] = note{text: text, kept: true, standIn: prevNote.standIn}
	return orphans
}

// String returns "Kind namespace/name", or "Kind name" for cluster-scoped
// kinds.
func (k objectKey) String() string { return objectName(k.kind, k.namespace, k.name) }

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
	for _, o := range s.ClusterPolicies {
		objs[objectKey{"ClusterNetworkPolicy", "", o.Name}] = o
	}
	return objs
}

// add appends an admitted object to its slice; nil is ignored.
func (s *Snapshot) add(obj runtime.Object) {
	switch o := obj.(type) {
	case *corev1.Namespace:
		s.Namespaces = append(s.Namespaces, o)
	case *corev1.Pod:
		s.Pods = append(s.Pods, NewPod(o))
	case *Pod:
		s.Pods = append(s.Pods, o) // kept from the previous snapshot
	case *corev1.Node:
		s.Nodes = append(s.Nodes, o)
	case *networkingv1.NetworkPolicy:
		s.Policies = append(s.Policies, o)
	case *policyv1beta1.ClusterNetworkPolicy:
		s.ClusterPolicies = append(s.ClusterPolicies, o)
	}
}

// isolationOnly returns the policy that stands for a duplicated
// NetworkPolicy: it isolates, for every policy type of a definition, the
// pods their podSelector picks (all pods of the namespace when the
// definitions select differently: one selector cannot express the union),
// and has no rules, so it allows nothing. A rejected definition counts
// with its stand-in (policyStandIn), or as the whole namespace in both
// directions when it has none; nil when no definition can name the policy.
func isolationOnly(defs []*definition) *networkingv1.NetworkPolicy {
	var each []*networkingv1.NetworkPolicy
	unreadable := false
	for _, d := range defs {
		if np, ok := d.obj.(*networkingv1.NetworkPolicy); ok {
			each = append(each, np)
		} else if np, ok := d.standin.(*networkingv1.NetworkPolicy); ok {
			each = append(each, np)
		} else {
			unreadable = true
		}
	}
	if len(each) == 0 {
		return nil
	}
	sel := each[0].Spec.PodSelector
	ingress, egress := unreadable, unreadable
	if unreadable {
		sel = metav1.LabelSelector{}
	}
	for _, np := range each {
		if !reflect.DeepEqual(np.Spec.PodSelector, sel) {
			sel = metav1.LabelSelector{}
		}
		for _, t := range np.Spec.PolicyTypes {
			ingress = ingress || t == networkingv1.PolicyTypeIngress
			egress = egress || t == networkingv1.PolicyTypeEgress
		}
	}
	var types []networkingv1.PolicyType
	if ingress {
		types = append(types, networkingv1.PolicyTypeIngress)
	}
	if egress {
		types = append(types, networkingv1.PolicyTypeEgress)
	}
	return isolating(each[0].Namespace, each[0].Name, sel, types)
}

// denyOnly returns the policy that stands for a ClusterNetworkPolicy
// defined more than once, differently: dropping it would drop its Deny
// rules, and either definition's Accept or Pass could open what the
// other's Deny closes. It holds the Deny rules of every definition, in
// the Admin tier (ahead of NetworkPolicy, as the strictest tier) at the
// lowest priority any gives; its subject is theirs when they agree, every
// pod when they do not (one subject cannot express the union). A
// definition that cannot be read adds nothing (what it denies is not
// known; no stand-in could say it), but does not take the others' Denies
// away. Nil when no definition can be read.
func denyOnly(defs []*definition) *policyv1beta1.ClusterNetworkPolicy {
	var each []*policyv1beta1.ClusterNetworkPolicy
	for _, d := range defs {
		if p, ok := d.obj.(*policyv1beta1.ClusterNetworkPolicy); ok {
			each = append(each, p)
		}
	}
	if len(each) == 0 {
		return nil
	}
	out := &policyv1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: each[0].Name}}
	out.SetGroupVersionKind(policyv1beta1.SchemeGroupVersion.WithKind("ClusterNetworkPolicy"))
	out.Spec.Tier = policyv1beta1.AdminTier
	out.Spec.Priority = each[0].Spec.Priority
	out.Spec.Subject = *each[0].Spec.Subject.DeepCopy()
	for _, p := range each {
		out.Spec.Priority = min(out.Spec.Priority, p.Spec.Priority)
		if !reflect.DeepEqual(p.Spec.Subject, out.Spec.Subject) {
			out.Spec.Subject = policyv1beta1.ClusterNetworkPolicySubject{Namespaces: &metav1.LabelSelector{}}
		}
		for _, r := range p.Spec.Ingress {
			if r.Action == policyv1beta1.ClusterNetworkPolicyRuleActionDeny {
				out.Spec.Ingress = append(out.Spec.Ingress, *r.DeepCopy())
			}
		}
		for _, r := range p.Spec.Egress {
			if r.Action == policyv1beta1.ClusterNetworkPolicyRuleActionDeny {
				out.Spec.Egress = append(out.Spec.Egress, *r.DeepCopy())
			}
		}
	}
	return out
}

// isolating returns a policy with no rules, which allows nothing, that
// isolates the pods sel selects for types.
func isolating(namespace, name string, sel metav1.LabelSelector, types []networkingv1.PolicyType) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		// Ingress and Egress stay nil: an isolated direction with no
		// rules allows nothing.
		Spec: networkingv1.NetworkPolicySpec{PodSelector: *sel.DeepCopy(), PolicyTypes: types},
	}
	np.SetGroupVersionKind(networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"))
	return np
}

// standIn returns what stands, when no last good version is kept, for a
// definition of key that was rejected, j being what can be read of its
// document: see policyStandIn, podStandIn and namespaceStandIn;
// quarantined says that it is a pod or namespace whose true labels are not
// known (Snapshot.Quarantined, QuarantinedNamespaces). It is nil for a
// Node, and when not even the stand-in can be admitted (an invalid name or
// namespace: no pod can be selected by it, and the Snapshot holds only
// valid objects).
func standIn(key objectKey, j []byte) (obj runtime.Object, quarantined bool) {
	switch key.kind {
	case "NetworkPolicy":
		if np := policyStandIn(key, j); np != nil {
			obj = np
		}
	case "Pod":
		if p, q := podStandIn(key, j); p != nil {
			obj, quarantined = p, q
		}
	case "Namespace":
		if ns, q := namespaceStandIn(key, j); ns != nil {
			obj, quarantined = ns, q
		}
	}
	return obj, quarantined
}

// namespaceStandIn returns the namespace that stands for a rejected
// Namespace document j when no last good version is kept: the namespace
// with only the labels that are valid and read as strings (and its name
// label, which Admit sets). Left out, the namespace would carry only its
// name label, and a namespace selector on the absence of a label (NotIn,
// DoesNotExist) would name its pods as peers where its true labels would
// not: a label "env: prod" next to an invalid one, and a rule allowing
// "env NotIn [prod]", let its pods in.
//
// quarantined is true when a label was left out, or the labels cannot be
// read at all: the stand-in then lacks a label the namespace has, so no
// namespace selector may name its pods but one that reads only the name
// label, which is known (Snapshot.QuarantinedNamespaces). Otherwise the
// stand-in has every label the document gives (a namespace rejected for an
// annotation, or a wrong apiVersion) and selectors read it as usual. Only
// the name matters to where a namespace's pods are, and it is known, so
// unlike a pod a namespace always gets a stand-in; it is nil only when the
// name is invalid.
func namespaceStandIn(key objectKey, j []byte) (ns *corev1.Namespace, quarantined bool) {
	top, ok := lenientField[map[string]json.RawMessage](map[string]json.RawMessage{"": j}, "")
	labels, all := trustedLabels(top)
	ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: key.name, Labels: labels}}
	if len(Admit(ns)) != 0 {
		return nil, false
	}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	return ns, !ok || !all
}

// trustedLabels returns the labels of the object top (a document read
// leniently) that are valid and read as strings; all is false when one is
// left out, or metadata or its labels cannot be read at all.
func trustedLabels(top map[string]json.RawMessage) (labels map[string]string, all bool) {
	md, okMD := lenientField[map[string]json.RawMessage](top, "metadata")
	rawLabels, okLabels := lenientField[map[string]json.RawMessage](md, "labels")
	all = okMD && okLabels
	for k, raw := range rawLabels {
		v, ok := lenientField[string](map[string]json.RawMessage{"": raw}, "")
		if !ok || len(validation.IsQualifiedName(k)) != 0 || len(validation.IsValidLabelValue(v)) != 0 {
			all = false
			continue
		}
		if labels == nil {
			labels = map[string]string{}
		}
		labels[k] = v
	}
	return labels, all
}

// agreedNamespace returns the namespace that stands for a Namespace
// defined more than once, differently, when no last good version is kept:
// the namespace with the labels every definition has alike. quarantined is
// true when they disagree on the labels, or a definition's labels are not
// all known (a quarantined stand-in, or none): see namespaceStandIn. Why
// not leave it out: see namespaceStandIn. It is nil only when the name is
// invalid.
func agreedNamespace(key objectKey, defs []*definition) (agreed *corev1.Namespace, quarantined bool) {
	var labels map[string]string
	first := true
	for _, d := range defs {
		ns, ok := d.obj.(*corev1.Namespace)
		if !ok {
			if ns, ok = d.standin.(*corev1.Namespace); !ok {
				quarantined = true
				continue
			}
			quarantined = quarantined || d.quarantined
		}
		if first {
			labels, first = maps.Clone(ns.Labels), false
			continue
		}
		if !maps.Equal(ns.Labels, labels) {
			quarantined = true
			maps.DeleteFunc(labels, func(k, v string) bool { w, ok := ns.Labels[k]; return !ok || w != v })
		}
	}
	agreed = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: key.name, Labels: labels}}
	if len(Admit(agreed)) != 0 {
		return nil, false
	}
	agreed.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	return agreed, quarantined
}

// policyStandIn returns the policy that stands for a rejected NetworkPolicy
// document j, as a differing duplicate gets one (isolationOnly): dropping
// it would open the pods it isolates, on a fresh start (a crash, a
// rollout, apply) as much as while running. It isolates what the
// document's podSelector selects if that reads as a valid selector, else
// every pod of the namespace, for the policyTypes it states if they read
// as valid (as defaulted when it states none), else both directions, and
// allows nothing.
func policyStandIn(key objectKey, j []byte) *networkingv1.NetworkPolicy {
	top, _ := lenientField[map[string]json.RawMessage](map[string]json.RawMessage{"": j}, "")
	spec, _ := lenientField[map[string]json.RawMessage](top, "spec")
	var sel metav1.LabelSelector // every pod of the namespace
	if s, ok := lenientField[metav1.LabelSelector](spec, "podSelector"); ok && len(validateSelector(&s, field.NewPath("spec", "podSelector"))) == 0 {
		sel = s
	}
	both := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	types, ok := lenientField[[]networkingv1.PolicyType](spec, "policyTypes")
	switch {
	case !ok || len(validatePolicyTypes(types, field.NewPath("spec", "policyTypes"))) != 0:
		types = both
	case len(types) == 0:
		// The API default: Ingress, and Egress if spec.egress has a rule
		// (or cannot be read).
		types = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		if egress, ok := lenientField[[]json.RawMessage](spec, "egress"); !ok || len(egress) != 0 {
			types = both
		}
	}
	np := isolating(key.namespace, key.name, sel, types)
	if len(Admit(np)) != 0 {
		return nil
	}
	return np
}

// podStandIn returns the pod that stands for a rejected Pod document j
// when no last good version is kept: the pod at its addresses and node
// with only the labels that are valid and read as strings, and no
// containers. Dropping it would open it (it would be no target, and its
// address no pod's) and isolated pods would lose nothing. A named port
// matches nothing on it.
//
// quarantined is true when a label was left out, or the labels cannot be
// read at all: the stand-in then lacks a label the pod has, and a
// selector on the absence of a label (NotIn, DoesNotExist) would select
// the stand-in as it would not the pod, granting it that policy's allows
// or making it that rule's peer. A quarantined pod is isolated with
// nothing allowed instead (Snapshot.Quarantined). Otherwise the stand-in
// has the labels the document gives, and policies select it by them.
//
// It is nil when its node, hostNetwork, phase or addresses cannot be read,
// or do not validate: a guess at those could turn a node's address into a
// pod's; and when the compiler would ignore the pod anyway (no address,
// hostNetwork, phase Succeeded or Failed).
func podStandIn(key objectKey, j []byte) (p *corev1.Pod, quarantined bool) {
	top, ok := lenientField[map[string]json.RawMessage](map[string]json.RawMessage{"": j}, "")
	if !ok {
		return nil, false
	}
	labels, all := trustedLabels(top)
	quarantined = !all
	spec, ok1 := lenientField[map[string]json.RawMessage](top, "spec")
	status, ok2 := lenientField[map[string]json.RawMessage](top, "status")
	nodeName, ok3 := lenientField[string](spec, "nodeName")
	hostNetwork, ok4 := lenientField[bool](spec, "hostNetwork")
	phase, ok5 := lenientField[corev1.PodPhase](status, "phase")
	podIP, ok6 := lenientField[string](status, "podIP")
	podIPs, ok7 := lenientField[[]corev1.PodIP](status, "podIPs")
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || !ok7 ||
		podIP == "" && len(podIPs) == 0 || hostNetwork || phase == corev1.PodSucceeded || phase == corev1.PodFailed {
		return nil, false
	}
	p = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.namespace, Name: key.name, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: nodeName, HostNetwork: hostNetwork},
		Status:     corev1.PodStatus{Phase: phase, PodIP: podIP, PodIPs: podIPs},
	}
	if len(Admit(p)) != 0 {
		return nil, false
	}
	p.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	return p, quarantined
}

// agreedPod returns the pod that stands for a Pod defined more than once,
// differently, when no last good version is kept: the pod at the
// addresses, node and phase every definition agrees on, with the labels
// every definition has alike, and the containers only if all agree (a
// named port otherwise matches nothing on it). A rejected definition
// counts with its stand-in (podStandIn). Why not leave it out: see
// podStandIn. It is nil when a definition has no stand-in or they
// disagree on anything but labels and containers: no one address can be
// trusted then, and unsettledPod places the pod instead. quarantined is
// true when the definitions disagree on the labels, or a stand-in among
// them is quarantined: the pod's true labels are not known (see
// podStandIn).
func agreedPod(defs []*definition) (agreed *corev1.Pod, quarantined bool) {
	var each []*corev1.Pod
	for _, d := range defs {
		p, ok := d.obj.(*corev1.Pod)
		if !ok {
			if p, ok = d.standin.(*corev1.Pod); !ok {
				return nil, false
			}
			quarantined = quarantined || d.quarantined
		}
		each = append(each, p)
	}
	if len(each) == 0 {
		return nil, false
	}
	first := each[0]
	labels := maps.Clone(first.Labels)
	containers, initContainers := first.Spec.Containers, first.Spec.InitContainers
	for _, p := range each[1:] {
		if p.Spec.NodeName != first.Spec.NodeName || p.Spec.HostNetwork != first.Spec.HostNetwork ||
			p.Status.Phase != first.Status.Phase || !reflect.DeepEqual(p.Status.PodIPs, first.Status.PodIPs) {
			return nil, false
		}
		for k, v := range labels {
			if w, ok := p.Labels[k]; !ok || w != v {
				delete(labels, k)
			}
		}
		if !reflect.DeepEqual(p.Spec.Containers, containers) || !reflect.DeepEqual(p.Spec.InitContainers, initContainers) {
			containers, initContainers = nil, nil
		}
	}
	for _, p := range each {
		if len(p.Labels) != len(labels) {
			quarantined = true // every label left is alike in all: a count tells
		}
	}
	if len(labels) == 0 {
		labels = nil
	}
	p := &corev1.Pod{
		TypeMeta:   first.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Namespace: first.Namespace, Name: first.Name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: first.Spec.NodeName, HostNetwork: first.Spec.HostNetwork,
			Containers: slices.Clone(containers), InitContainers: slices.Clone(initContainers)},
		Status: corev1.PodStatus{Phase: first.Status.Phase, PodIP: first.Status.PodIP, PodIPs: slices.Clone(first.Status.PodIPs)},
	}
	p.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	return p, quarantined
}

// unsettledPod returns the pod that stands for a Pod defined more than once
// when no last good version is kept and agreedPod finds no place every
// definition agrees on (they disagree on the addresses, node, phase or
// hostNetwork, or one has no stand-in), and where shows every place they
// give it (Snapshot.Unsettled); the pod is then quarantined.
//
// The pod certainly exists. Left out, it would be no target and its
// address no pod's, which opens it where policies isolated it; keeping one
// definition's place would trust what another contradicts. So it is
// quarantined (isolated both ways with nothing allowed, selected by
// nothing) at every address any definition gives, and taken to be on
// every node one of those definitions names: the compiler of a node that
// a definition names isolates it there, whatever the others say, and no
// other node does. An address that another pod holds stays that pod's
// (the compiler's one-pod-per-address rules rank a pod whose place is
// known above an unsettled one on the same node): a broken duplicate must
// not take a healthy pod's address, and with it its policies, away. A
// hostNetwork definition gives no address (its addresses are its node's,
// and quarantining a node's address would cut the node off from this
// node's pods), nor does a rejected one whose place cannot be read (no
// stand-in). A finished definition's addresses count: the pod may be
// running there as another says.
//
// The Pod itself is the first definition that gives an address, preferring
// one that has not finished, with the labels every definition has alike
// and no containers, so that it passes Admit and a reader that does not
// know Unsettled still sees a pod in one of its places. It is nil when no
// definition gives an address.
func unsettledPod(defs []*definition) (p *corev1.Pod, where *UnsettledPod) {
	var base *corev1.Pod
	var labels map[string]string
	first := true
	nodes, ips := map[string]bool{}, map[string]bool{}
	for _, d := range defs {
		q, ok := d.obj.(*corev1.Pod)
		if !ok {
			if q, ok = d.standin.(*corev1.Pod); !ok {
				continue
			}
		}
		if first {
			labels, first = maps.Clone(q.Labels), false
		} else {
			maps.DeleteFunc(labels, func(k, v string) bool { w, ok := q.Labels[k]; return !ok || w != v })
		}
		if q.Spec.HostNetwork || len(q.Status.PodIPs) == 0 {
			continue
		}
		if base == nil || isFinished(base) && !isFinished(q) {
			base = q
		}
		for _, ip := range q.Status.PodIPs {
			ips[ip.IP] = true
		}
		if q.Spec.NodeName != "" {
			nodes[q.Spec.NodeName] = true
		}
	}
	if base == nil {
		return nil, nil
	}
	if len(labels) == 0 {
		labels = nil
	}
	p = &corev1.Pod{
		TypeMeta:   base.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Namespace: base.Namespace, Name: base.Name, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: base.Spec.NodeName},
		Status:     corev1.PodStatus{Phase: base.Status.Phase, PodIP: base.Status.PodIP, PodIPs: slices.Clone(base.Status.PodIPs)},
	}
	p.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	where = &UnsettledPod{Namespace: base.Namespace, Name: base.Name, Nodes: slices.Sorted(maps.Keys(nodes))}
	// Admit made every address canonical: equal addresses are equal strings.
	where.IPs = slices.SortedFunc(maps.Keys(ips), func(a, b string) int {
		return netip.MustParseAddr(a).Compare(netip.MustParseAddr(b))
	})
	return p, where
}

// isFinished reports whether p is in phase Succeeded or Failed.
func isFinished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// nsQuarantineOutcome says what a quarantined namespace's stand-in does.
const nsQuarantineOutcome = "quarantined as its true labels are not known: no namespace selector names its pods as peers but one that reads only kubernetes.io/metadata.name (the empty one included), and its policies still select its pods"

// standInOutcome says what a stand-in of one rejected definition does;
// quarantined: see podStandIn.
func standInOutcome(obj runtime.Object, quarantined bool) string {
	switch o := obj.(type) {
	case *networkingv1.NetworkPolicy:
		what := "the pods its podSelector selects"
		if reflect.DeepEqual(o.Spec.PodSelector, metav1.LabelSelector{}) {
			what = "every pod of namespace " + o.Namespace
		}
		return fmt.Sprintf("a policy stands in for it that isolates %s for %v and allows nothing, until it is fixed", what, o.Spec.PolicyTypes)
	case *corev1.Pod:
		if quarantined {
			return "the pod stays at its addresses with only the labels that are valid, and no named ports, quarantined as its true labels are not known: isolated for ingress and egress with nothing allowed, selected by no policy and named by no pod selector, until it is fixed"
		}
		return "the pod stays at its addresses with only the labels that are valid, and no named ports, until it is fixed"
	case *corev1.Namespace:
		if quarantined {
			return "the namespace stays with only the labels that are valid, " + nsQuarantineOutcome + ", until it is fixed"
		}
		return "the namespace stays with the labels it gives, until it is fixed"
	}
	return "it is left out"
}

// lenientField decodes m[key] into a T, strictly (case-sensitive, no
// unknown or duplicate fields): ok is false when it is there but is not a
// valid T. Absent or null is the zero T, ok.
func lenientField[T any](m map[string]json.RawMessage, key string) (v T, ok bool) {
	raw, there := m[key]
	if !there {
		return v, true
	}
	strict, err := sigsjson.UnmarshalStrict(raw, &v, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil || len(strict) != 0 {
		var zero T
		return zero, false
	}
	return v, true
}
