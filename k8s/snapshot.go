package k8s

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	policyv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
)

// A Snapshot is the cluster state the enforcer compiles: every namespace,
// pod, node and NetworkPolicy a source knows about, already defaulted and
// validated the way the API server would have done it.
//
// Each slice is sorted by namespace, then name, so that equal cluster
// states give equal Snapshots.
//
// A Snapshot is immutable once a source hands it out: the enforcer reads it
// from another goroutine and keeps it as "last compiled", so a source that
// learns something new builds a new Snapshot instead of editing this one.
type Snapshot struct {
	Namespaces []*corev1.Namespace
	Pods       []*Pod // records of the pods (see Pod)
	Nodes      []*corev1.Node
	Policies   []*networkingv1.NetworkPolicy

	// ClusterPolicies are the ClusterNetworkPolicies (policy.networking.k8s.io,
	// cluster scoped: sorted by name), validated as the CRD's schema and CEL
	// rules demand. Sources hand out v1beta1 objects whatever version they
	// read (v1alpha2 has the same schema).
	ClusterPolicies []*policyv1beta1.ClusterNetworkPolicy `json:",omitempty"`

	// Quarantined names the pods of Pods whose true labels are not known:
	// the manifests source keeps a rejected Pod with only the labels it
	// can trust (a stand-in), and names it here when that drops a label
	// (one invalid or unreadable, or one its duplicates disagree on). A
	// selector that reads what labels are absent (NotIn, DoesNotExist)
	// would take the stand-in for a pod it is not, so the compiler
	// isolates a quarantined pod in both directions with nothing allowed,
	// lets no policy select it and no pod selector name it as a peer
	// (ipBlock peers still match its addresses). Sorted by namespace and
	// name; nil when there are none. It is a field of the Snapshot, not a
	// label or annotation of the pod, so that no manifest can set or clear
	// it: only the source decides what it could not read.
	Quarantined []types.NamespacedName `json:",omitempty"`

	// Unsettled says where the pods of Quarantined might be whose
	// definitions disagree on where they are (their addresses, node,
	// phase or hostNetwork) and no earlier version is known: the pod
	// certainly exists, but not where, and left out it would be no target
	// and its address no pod's, which opens it. The compiler takes such a
	// pod as being at every address of the entry (where another pod that
	// is not unsettled holds one, that pod keeps it: one pod per address)
	// and as on this node when the entry names this node. The Pod of Pods
	// is in one of those places, for readers that do not know this field.
	// Sorted by namespace and name; nil when there are none.
	Unsettled []UnsettledPod `json:",omitempty"`

	// QuarantinedNamespaces names the namespaces of Namespaces whose true
	// labels are not known: the manifests source keeps a rejected
	// Namespace (or one defined twice, differently) with only the labels
	// it can trust, and names it here when that drops a label. Left out,
	// or with a label missing, the namespace would look as if it lacked
	// the label, and a namespace selector on the absence of a label
	// (NotIn, DoesNotExist) would name its pods as peers where its true
	// labels would not. So the compiler lets no namespace selector name
	// its pods as peers, except one that reads only the
	// kubernetes.io/metadata.name label (the empty selector included),
	// which is always the namespace's name. Policies of the namespace
	// still select its pods by their own labels. Sorted; nil when there
	// are none. Like Quarantined, a field of the Snapshot and not a label
	// or annotation, so that no manifest can set or clear it.
	QuarantinedNamespaces []string `json:",omitempty"`
}

// An UnsettledPod is every place the definitions of one Pod give it, when
// they disagree (see Snapshot.Unsettled).
type UnsettledPod struct {
	Namespace, Name string
	// Nodes are the nodes of the definitions that give an address, sorted
	// and without repeats.
	Nodes []string
	// IPs are the addresses every definition gives that is not a
	// hostNetwork pod's (whose addresses are its node's), canonical,
	// sorted and without repeats.
	IPs []string
}

// Sort orders every slice by namespace and name, as the Snapshot contract
// asks, for builders of snapshots (sources, tests, benchmarks). It sorts in
// place: call it before handing the Snapshot out.
func (s *Snapshot) Sort() {
	sortByName(s.Namespaces)
	sortByName(s.Pods)
	sortByName(s.Nodes)
	sortByName(s.Policies)
	sortByName(s.ClusterPolicies)
	slices.SortFunc(s.Quarantined, func(a, b types.NamespacedName) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	slices.SortFunc(s.Unsettled, func(a, b UnsettledPod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	slices.Sort(s.QuarantinedNamespaces)
}

// sortByName sorts objects by namespace, then name, as a Snapshot's lists
// are.
func sortByName[T metav1.Object](objs []T) {
	slices.SortFunc(objs, func(a, b T) int {
		return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetName(), b.GetName()))
	})
}
