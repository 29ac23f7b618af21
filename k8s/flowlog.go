package k8s

import corev1 "k8s.io/api/core/v1"

// FlowLogAnnotation on a Namespace, set to "true", turns flow logs on for
// the pods of that namespace (as Antrea's and OVN-Kubernetes' namespace
// annotations do): the first packet of each connection a policy of the
// namespace allows, or an isolated pod's default deny drops, is logged
// (see the enforcer's flowlog.go). Any other value, or none, leaves them
// off, unless the daemon logs every namespace (--flow-log). Sources keep
// this annotation of a Namespace and drop the others.
const FlowLogAnnotation = "nftpolicy.io/flow-log"

// FlowLogged reports whether ns asks for flow logs.
func FlowLogged(ns *corev1.Namespace) bool {
	return ns != nil && ns.Annotations[FlowLogAnnotation] == "true"
}
