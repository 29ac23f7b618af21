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
// # Cost
//
// Tracing is cheap next to the dump, and most entries need no trace at
// all: when a table's forward base chains can only drop through their
// verdict maps keyed by address (the enforcer's dispatch maps
// ingress-pods-v4 and the like, one element per isolated local pod), a flow
// whose addresses are no key of either table's maps gets accept from both,
// and is skipped. When neither table has such an address, nothing can have
// narrowed and nothing is read from the kernel. Verdicts are cached per
// (source, destination, protocol, port) within one call. A table whose base
// chain can drop by other means (a hand-built one) is traced for every flow.
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
