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
//
// # ClusterNetworkPolicy
//
// ClusterNetworkPolicies (policy.networking.k8s.io v1beta1, the doc comments
// of sigs.k8s.io/network-policy-api/apis/v1beta1 and its api-overview) are
// read the same way, per direction at a pod of this node: the Admin tier,
// then NetworkPolicy, then the Baseline tier, then the default (allow); see
// Decide. Where the API leaves a choice, the reference takes the one the
// project documents: policies of one tier and priority are taken by name;
// a peer or protocols entry with no field set (a field of a newer CRD)
// fails closed, matching nothing in an Accept rule and everything in a Deny
// or Pass rule; an empty from/to list matches nothing; domainNames peers
// match nothing; a pod reaching itself through a Service is judged by no
// policy.
//
// # Quarantine
//
// A pod the snapshot names in Quarantined is isolated both ways with
// nothing allowed but reaching itself, whatever any policy says; no policy
// selects it and no selector names it as a peer (address peers still
// match its addresses). A namespace the snapshot names in
// QuarantinedNamespaces is selected by no namespace selector, as subject or
// as peer, but one that reads only the kubernetes.io/metadata.name label.
// The reference does not model Snapshot.Unsettled.
package reference
