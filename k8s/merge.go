package k8s

import (
	"cmp"
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
// name order, and returns every object error: the files' own and one per
// definition of a duplicated object, sorted by file, document and item.
//
// An object defined more than once (same kind, namespace and name, in one
// file or in several) is an error at every definition, naming the others.
// No definition wins: a rule such as "the first file wins" lets a file that
// sorts early shadow a policy without anyone noticing. What is kept instead
// is what fails closed:
//
//   - a NetworkPolicy is replaced by one that isolates and allows nothing
//     (see isolationOnly). Dropping it outright would un-isolate the pods
//     it selects, which opens them; keeping either definition would use
//     allows nobody can vouch for;
//   - a Pod, Namespace or Node is left out. No choice is safe for these in
//     every case (a left-out pod is no longer a peer, which removes allows,
//     but is no longer a target either; a left-out namespace keeps only its
//     kubernetes.io/metadata.name label for selectors), but keeping one
//     definition means trusting labels or addresses that the other
//     definition contradicts, and the error says which files to fix.
func merge(loads []*fileLoad) (*Snapshot, []*ObjectError) {
	byKey := map[objectKey][]*definition{}
	var order []objectKey
	var objErrs []*ObjectError
	for _, fl := range loads {
		objErrs = append(objErrs, fl.errs...)
		for i := range fl.defs {
			d := &fl.defs[i]
			if _, ok := byKey[d.key]; !ok {
				order = append(order, d.key)
			}
			byKey[d.key] = append(byKey[d.key], d)
		}
	}
	var snap Snapshot
	for _, key := range order {
		defs := byKey[key]
		if len(defs) == 1 {
			snap.add(defs[0].obj)
			continue
		}
		var kept runtime.Object
		outcome := "every definition is left out"
		if key.kind == "NetworkPolicy" {
			if p := isolationOnly(defs); p != nil {
				kept = p
				outcome = "it isolates the pods either definition selects and allows nothing until one is removed"
			}
		}
		snap.add(kept)
		for i, d := range defs {
			var others []string
			for j, o := range defs {
				if j != i {
					others = append(others, location(o.loc.file, o.loc.doc, o.loc.item))
				}
			}
			objErrs = append(objErrs, &ObjectError{
				File: d.loc.file, Doc: d.loc.doc, Item: d.loc.item,
				Kind: key.kind, Namespace: key.namespace, Name: key.name,
				Err: fmt.Errorf("%w, also defined at %s; %s", ErrDuplicate, strings.Join(others, ", "), outcome),
			})
		}
	}
	snap.Sort()
	slices.SortStableFunc(objErrs, func(a, b *ObjectError) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Doc, b.Doc), cmp.Compare(a.Item, b.Item))
	})
	return &snap, objErrs
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
