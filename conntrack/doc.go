// Package conntrack makes established connections follow a policy change:
// after a write that takes permission away, it deletes the conntrack
// entries of the connections the new table would no longer let start.
//
// # Why
//
// nftpolicy decides policy on a connection's first packet only: its base
// chain accepts `ct state established,related` before any policy work. A
// connection open before a policy tightened would therefore keep flowing
// for as long as conntrack remembers it (Calico #6399 and #2759, weave
// #2618). Deleting its entry makes the next packet of the flow NEW again
// (conntrack picks a TCP connection up mid-stream, nf_conntrack_tcp_loose
// is on by default), so the policy chain sees it and drops it.
//
// # What is deleted
//
// Only what the change touched: a flow is deleted when the table before the
// write (old) accepted its first packet and the table after it (new) drops
// it, both decided by nft.Trace over the typed tables. Flows both tables
// accept, flows both drop, and flows the change opened are left alone.
//
// The first packet is the one the forward hook saw, which is after DNAT and
// before SNAT: source is the original tuple's source, destination the reply
// tuple's source (the real destination once a Service address is
// translated), destination port the reply tuple's source port, protocol
// the tuple's. ICMP flows carry the original ICMP type (an echo request)
// and no port, as nft.Trace expects.
//
// Not every entry is a forwarded flow. Conntrack in the node's namespace
// also tracks the node's own connections to and from pods, which pass the
// input and output hooks, never forward, and so are never subject to policy
// (enforcer/doc.go); a flow whose source or real destination is an address
// of the namespace itself is left alone. So are flows a conntrack helper
// expected (they have a master tuple): their first packet was related, not
// new, and the policy never judged it.
//
// A pod's connection to itself through a Service is exempt from its
// policy only when it came in on the pod's own link, which a conntrack
// entry does not record. When there is no table before (a start, or a
// repair after the table was flushed or dormant, when anything could
// start), such a flow is judged as if it came in elsewhere: a forged one
// is cut, a genuine one is ended once and reconnects.
//
// # Cost
//
// Most entries need no trace: when a table's forward base chains can only
// drop through verdict maps keyed by address (the enforcer's dispatch maps
// ingress-pods-v4 and the like, one element per isolated local pod), a flow
// whose addresses are no key of either table's maps is accepted by both,
// and skipped. When neither table has such an address, or both are the
// same table, nothing can have narrowed and nothing is read from the
// kernel (microseconds). A table whose base chain can drop by other means
// (a hand-built one) is traced for every flow. Verdicts are cached per
// (source, destination, protocol, port) within one call, and each table is
// indexed once for tracing (nft.Tracer).
//
// Otherwise a call dumps conntrack, which walks the kernel's whole hash
// table, shared by every namespace of the host: about 5 ms with 262144
// buckets and one entry, 70-100 ms at 10k entries. Tracing costs about 5 µs
// per traced flow and table, deleting 20-40 µs per entry (one request and
// ack each). Measured on the project's 2-core machine, kernel 6.18, under
// load from other work: go test -count=1 -run '^$' -bench BenchmarkKernel
// -benchtime 20x ./conntrack/ (BenchmarkKernelNarrowed10k).
//
// # Limits
//
// Deleting an entry makes the flow's next packet NEW, whichever end sends
// it. If that is the server's (a reply still in flight at the delete, or a
// server that talks first), conntrack picks the connection up in the
// reverse orientation, server to client, which the policy usually allows;
// the client's packets are then replies, established, and the flow is
// back. TestKernelServerFirstAfterCleanup (skipped unless
// NFTPOLICY_KNOWN_GAPS is set) shows it for TCP, and
// BenchmarkKernelTightenToFirstDrop counts how often a continuous UDP
// flow comes back. Closing that needs the ruleset: for instance a revoked
// bit in the conntrack mark, set over ctnetlink instead of deleting (a
// masked CTA_MARK/CTA_MARK_MASK update) and dropped ahead of the
// established accept.
//
// # Use
//
//	c, err := conntrack.Open(netns) // the daemon's network namespace
//	defer c.Close()
//	stats, err := c.Narrowed(old, new) // after each successful write
//
// old is the table programmed before the write, nil when unknown (the
// first write, or after a failure): every flow new drops is then deleted,
// which is what an unknown old table that allowed everything would need.
//
// Conntrack is Linux only; elsewhere Open returns ErrUnsupported. The
// decision itself (Change) works everywhere.
package conntrack
