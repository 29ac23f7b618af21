// Package e2e is the data-plane suite: the behaviours of the upstream
// NetworkPolicy e2e suite (test/e2e/network/netpol in kubernetes/kubernetes)
// and the corners of the design brief, proven with real packets between
// network namespaces that real `nftpolicy run` daemons program. Its tests are
// named TestDataPlane*; they need root (netns.RequireRoot: they skip
// without it, and fail instead when $CI is set).
//
// # Cluster
//
// The upstream model: namespaces x, y, z labelled ns=<name>, each with pods
// a, b, c labelled pod=<name>, every pod serving TCP and UDP (echo) on ports
// 80 and 81 and declaring them as named container ports serve-80-tcp,
// serve-81-udp, serve-80-sctp, ... (netns.Cluster.Manifests). Every cluster
// is dual-stack and every check probes IPv4 and IPv6.
//
// One `nftpolicy run` per node follows one shared manifests directory
// (netns.Cluster.StartDaemons), so egress is enforced on the source node and
// ingress on the destination node. The directory holds cluster.yaml (nodes,
// namespaces, pods) and policies.yaml (the policies of the running case);
// each is replaced atomically and the suite waits until every daemon's
// /readyz generation has grown. It never sleeps to wait for programming.
//
// # Topologies
//
// Building a topology costs seconds and a case about two, so each topology
// is built once and runs many cases; a case starts from default labels and
// no policy, programmed and confirmed by the daemons.
//
//   - TestDataPlaneRoutedLink: every case, on two routed nodes joined by a
//     link; x/a, y/a, z/a on node1 and the other six on node2, so each case
//     exercises both traffic within a node and across nodes.
//   - TestDataPlaneBridgedVXLAN: the cases marked subset, on two bridged
//     nodes (br_netfilter) joined by VXLAN, same placement.
//   - TestDataPlaneBridgedOneNode: the subset with all nine pods on one
//     bridged node, where one daemon enforces both ends of every connection.
//
// TestDataPlaneCluster{RoutedLink,BridgedVXLAN,BridgedOneNode} (cnp_test.go)
// run the ClusterNetworkPolicy conformance suite of
// sigs.k8s.io/network-policy-api v0.3.0 on its own cluster (upstream's
// namespaces, pods, labels and ports; the policies of testdata/conformance),
// one subtest per upstream step, each checked against the full matrix of
// cnpOracle; TestCNPScenariosAgreeWithUpstream checks, without root, that
// the oracle agrees with every upstream assertion.
//
// TestDataPlaneBridgedIPv6NeighborDiscovery keeps the bug this suite found
// fixed: IPv6 neighbour discovery between bridged pods crosses the forward
// hook and must not be subject to policy.
//
// # Checks
//
// A check is a protocol, a port and the expected matrix (rows from, columns
// to; a pod always reaches itself). All matrices of a check, both families,
// are probed at once, every probe with a 500ms timeout; a cell is probed
// again only when it differs from the expectation
// (netns.Cluster.ProbeMatrixExpect), and a failure prints expected,
// observed and their difference. Cases with updates (edit or delete a
// policy, change pod or namespace labels) check the matrix after every
// update, and the suite refuses an update whose expected matrix does not
// change.
//
// # Churn under probing
//
// TestChurnEditsUnderProbing and TestChurnRestartsAndUpgradeUnderProbing
// (churn_test.go) keep probers running (netns.Prober: a stream of new
// connections over every pair of five pods, both families, TCP and UDP)
// while the policy changes under them: 1,000 random label and policy
// edits, each synced on its own; kill -9 and restart ten times, with edits
// made while no daemon runs; a move to a build of the previous table
// layout and back. Each probe is judged against the states that could
// have been in force while it ran (netns.Timeline), what a state allows
// coming from internal/reference: no probe may get through that all of
// them deny, none may be blocked that all of them allow. A failure prints
// the seed to replay it ($NFTPOLICY_CHURN_SEED).
//
// Only a blocked probe of an allowed cell is retried (packets can be
// lost). A probe that got through where policy denies it is a leak: never
// retried, it fails the test. Each topology logs a summary line: matrices,
// probes, retries, how many were blocked then passed, and leaks. SCTP is
// probed with raw INIT packets counted in the destination pod
// (netns.Cluster.ProbeSCTP).
package e2e
