// Package netns builds throwaway Kubernetes-like data planes out of Linux
// network namespaces and probes them with real packets. Kernel tests of the
// enforcer, the upstream-netpol-style data-plane suite and `make demo` use it.
//
// It needs root, iproute2 (ip, bridge), nftables (nft) and sysctl. Every
// command it runs targets a network namespace it created; nothing is sent on
// or configured in the caller's own namespace. Tests call RequireRoot
// (testns.RequireRoot with Tools), or use NewTestCluster, which also closes
// the cluster when the test ends.
//
//	c := netns.NewTestCluster(t, netns.Options{Wiring: netns.Bridged})
//	n1, _ := c.AddNode("node1")
//	n2, _ := c.AddNode("node2")
//	_ = c.ConnectNodes(n1, n2, netns.VXLAN)
//	a, _ := c.AddPod(n1, "x", "a")
//	b, _ := c.AddPod(n2, "y", "b")
//	pods := []*netns.Pod{a, b}
//	want := netns.NewMatrix(netns.Keys(pods), true).Expect("*", "y/b", false).Expect("y/b", "y/b", true)
//	if d := c.ProbeMatrix(pods, netns.IPv4, netns.TCP, 80).Diff(want); d != "" {
//		t.Error(d)
//	}
//
// # Topology
//
// A Cluster owns every network namespace it creates, named
// "<Options.Name>-<6 random hex>-…" so that parallel runs never collide
// (Cluster.ID is the common prefix), and Close stops its processes and
// deletes all of them, which removes their links:
//
//   - "<id>-underlay": the network between nodes, bridge sw0 (MTU 1600, so
//     that VXLAN fits under a 1500-byte pod MTU).
//   - "<id>-n-<node>": a node. eth0 is its port on the underlay (the node
//     address lives there); IPv4 and IPv6 forwarding are on, rp_filter off.
//   - "<id>-p-<namespace>.<pod>": a pod. eth0 is one end of a veth whose other
//     end, vpod<i> (Pod.HostVeth), is in the node. Every pod runs
//     `nettool serve` (cmd/nettool) with TCP servers and UDP echo servers on
//     Options.TCPPorts and Options.UDPPorts (default 80 and 81), one
//     dual-stack socket per port; AddPod returns once they listen.
//
// Wiring Routed (Calico style): the pod has its /32 and /128 on eth0 and
// default routes via 169.254.1.1 (onlink) and fe80::1, addresses that every
// host-side veth carries; the node has a host route per pod, with the node
// address as the source of node-to-pod traffic.
//
// Wiring Bridged (kubenet style): the host-side veths are ports of bridge br0
// (fixed MAC, no STP, no multicast snooping), which holds the gateway
// addresses .1 and ::1 of the pod subnet; pods have /24 and /64 addresses and
// default routes via the gateway. net.bridge.bridge-nf-call-iptables and
// -ip6tables are 1 in the node, so traffic between two pods of one node goes
// through the node's inet forward hook as routed traffic does.
//
// Nodes do not route to each other's pods until ConnectNodes: via Link each
// node routes the peer's pod subnets via the peer's underlay address; via
// VXLAN each node gets vxlan0 (VNI 1, UDP 4789, over IPv4 when the cluster
// has it), a flood entry per peer, and routes via the peer's vxlan0 address.
// A node always reaches its own pods, connected or not. ServeOnNode runs
// the same servers in a node's own namespace, as a hostNetwork pod would.
//
// Duplicate address detection is off (accept_dad=0) in every namespace before
// its links exist: tentative IPv6 addresses make the first second of probes
// fail at random, and there are no duplicates to detect.
//
// # Address plan
//
// N is the node's index (Node.Index: 1 for the first node added, up to 254),
// k a pod's host number on its node (2 for the first pod, up to 254). In
// IPv6 addresses N and k are written in hex. None of these addresses exists
// outside the cluster's namespaces.
//
//	pod subnet of node N       10.244.N.0/24          fd00:10:244:N::/64
//	pod k on node N            10.244.N.k             fd00:10:244:N::k
//	node N (underlay, eth0)    192.168.255.N/24       fd00:ffff::N/64
//	node N vxlan0 (VXLAN)      192.168.254.N/24       fd00:fffe::N/64
//	pod gateway, Routed        169.254.1.1            fe80::1             (every host-side veth)
//	pod gateway, Bridged       10.244.N.1 (br0)       fd00:10:244:N::1
//
// Node-to-pod traffic comes from the node address when Routed, from the br0
// gateway address when Bridged (the node's address on the pod's subnet).
// Options.IPv4 and Options.IPv6 select the families (both when neither is
// set); a disabled family gets no addresses and no routes at all.
//
// # Probes
//
// Probe and ProbeFromNode report whether a connection gets through: a TCP
// handshake completes, or a UDP datagram comes back from the echo server. By
// default they run in-process, on an OS thread switched into the source
// namespace (setns) that is thrown away afterwards; with Options.ExecProbes
// each runs as `ip netns exec <ns> nettool probe …` instead, same code.
//
// This kernel has no SCTP sockets. ProbeSCTP (and Probe or ProbeMatrix with
// "sctp") sends one hand-built INIT (common header with verification tag 0
// and an INIT chunk, CRC32c checksum, so conntrack takes it as new) through a
// raw IP socket (protocol 132) from the source namespace, from a source port
// the harness hands out round-robin. The destination pod gets, once, a table
// of its own,
//
//	table inet probe {
//		set sctp_seen { type inet_service . inet_service; flags dynamic,timeout; timeout 3m; counter; }
//		chain input {
//			type filter hook input priority filter; policy accept;
//			meta l4proto sctp counter update @sctp_seen { sctp sport . sctp dport }
//		}
//	}
//
// and the probe got through when the counter element (source port . port)
// appears there (`nft get element`), polled until Options.Timeout. Keying
// the counter by source port rather than one `sctp dport N counter` compared
// before and after lets concurrent probes to one pod not see each other's
// packets.
//
// ProbeMatrix probes every pod to every pod, itself included, at most
// Options.Concurrency (32) probes at once, each with Options.Timeout (1s), and
// retries a failed probe once: Matrix.Retries counts retries and
// Matrix.Recovered retries that then got through, which should stay 0 on a
// healthy machine. ProbeMatrixExpect, given the expected matrix, retries
// only blocked probes the expectation allows (packets can be lost); a probe
// that got through where the expectation blocks it is a leak, never
// retried, and listed in Matrix.Leaks (printed "LEAK:"). Harness failures (as opposed to
// blocked traffic) land in Matrix.Errors. A Matrix (rows from, columns to,
// keys "namespace/pod") is also the expectation: NewMatrix, Set, Expect with
// "ns/pod" patterns, Equal, and Diff, which prints expected, observed and
// the differing cells, in the manner of the upstream netpol e2e
// reachability tables.
//
// # Enforcing
//
// Manifests renders the cluster as nftpolicy's manifests source reads it: a
// Node per node, a Namespace per pod namespace (labels ns=<name>), a running
// Pod per pod (labels pod=<name>, spec.nodeName, status.podIPs, and named
// container ports serve-<port>-<tcp|udp|sctp>). SetNamespaceLabels and
// SetPodLabels change the labels it writes, ResetLabels restores them;
// SetNodeLabels labels nodes; Options.ContainerPorts replaces the declared
// ports (e.g. the conformance pods' named ports web and dns).
//
// StartDaemons (StartTestDaemons in tests) runs one `nftpolicy run --node N
// --netns <node netns>` per node on one manifests directory
// (testbin.StartDaemon: a --health-addr on a port chosen free), with the
// binary of testbin.Path ($NFTPOLICY_BIN, or built once per process).
// Daemons.WriteFile and RemoveFile change the
// directory atomically (WriteFileAtomic: hidden temporary file, rename) and
// return once every daemon's /readyz "synced generation N" has grown; Change
// does the same around any single-step change. Close stops the daemons
// before it removes the namespaces.
package netns
