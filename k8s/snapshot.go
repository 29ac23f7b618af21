package k8s

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
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
	Pods       []*corev1.Pod
	Nodes      []*corev1.Node
	Policies   []*networkingv1.NetworkPolicy
}
