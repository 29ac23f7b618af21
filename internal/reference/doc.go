// Package reference is the reference evaluator of the compiler's fuzzing
// and of the churn tests under probing: NetworkPolicy read straight from the API documentation (the doc comments of
// k8s.io/api/networking/v1 and
// https://kubernetes.io/docs/concepts/services-networking/network-policies/),
// one connection at a time, with no table, set or chain in sight. It must
// not call the compiler: its worth is that it is written independently.
// It reads the snapshot as the API server would hand it out, so it applies
// the API defaults itself (a port without protocol is TCP, policyTypes from
// the rules, the kubernetes.io/metadata.name label on every namespace).
//
// Besides the API, it follows the node's part in the design (DESIGN.md):
// ingress and egress are enforced for the pods of this node only, peers
// come from the whole cluster; a pod may always reach itself; pods in phase
// Succeeded or Failed, without an IP, or on the host network take no part
// (their addresses are ordinary addresses).
package reference
