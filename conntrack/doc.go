// Package conntrack makes established connections follow a policy change:
// after a write that takes permission away, it revokes the conntrack
// entries of the connections the new table would no longer let start, and
// after a write that gives it back, it restores them.
//
// # Why
//
// nftpolicy decides policy on a connection's first packet only: its base
// chain accepts `ct state established,related` before any policy work. A
// connection open before a policy tightened would therefore keep flowing
// for as long as conntrack remembers it (Calico #6399 and #2759, weave
// #2618).
//
// # Revoking
//
// A table compiled with the enforcer's Options.Revoke (the daemon's
// --conntrack-cleanup, on by default) drops every packet of a connection
// whose conntrack mark carries one bit, ahead of its established accept
// (`ct mark & 0x00000004 == 0x00000004 drop`, see RevokedBit). The cleanup
// revokes a flow by setting that bit in its entry's mark, in one masked
// ctnetlink update that leaves the mark's other bits, other components',
// as they are (CTA_MARK with CTA_MARK_MASK; checked on Linux 6.18, a
// kernel that ignored the mask would write the whole mark). The entry
// stays, so every later packet of the connection, from either end, is one
// of its packets, and drops. When a later change allows the flow again,
// the bit is cleared and the connection carries on, as any connection
// the policy allows; a flow the new table still drops keeps it.
//
// Deleting the entry instead, as the cleanup does for a table without that
// rule, makes the flow's next packet NEW, whichever end sends it. From the
// client it is judged and dropped; but from the server (a reply in flight,
// a server that talks first), conntrack starts the connection over in the
// reverse orientation, server to client (TCP picked up mid-stream with
// nf_conntrack_tcp_loose, on by default; any UDP datagram), which the
// policy usually allows, and the client's packets are then its replies.
// TestKernelRevokedFlowsStayRevokedWhenTheServerSendsFirst shows the mark
// holds; with deletion in its place, it fails.
//
// A marked entry lives as long as conntrack keeps the connection: packets
// the chain drops still refresh its timeout, since conntrack sees them
// first. That is the point (an entry gone is the gap again) and its cost,
// one entry per revoked connection, which existed anyway; ends that give
// up stop refreshing it. Once conntrack has forgotten an idle connection,
// a packet from the server is a new connection server to client, judged
// as such: as without nftpolicy's cleanup, and as for any stateful
// filter. See enforcer's revokeRule for the rest of the reasoning.
//
// # What is revoked
//
// Only what the change touched: a flow is revoked when the table before the
// write (old) accepted its first packet and the table after it (new) drops
// it, both decided by nft.Trace over the typed tables. Flows both tables
// accept, flows both drop, and flows the change opened are left alone,
// except that a flow marked revoked is restored as soon as new accepts it.
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
// A pod's connection to itself through a Service (a hairpin) is exempt
// from its policy only when it came in on the pod's own link, which a
// conntrack entry does not record. When there is no table before (a
// start, or a repair after the table was flushed or dormant, when anything
// could start), such a flow is judged as if it came in elsewhere; if the
// table accepts it only from its own link (Change.ByLink), its entry is
// deleted, not marked: the kernel judges its next packet with the link it
// came in on, so a genuine one goes on (or resets and reconnects if the
// masquerade picks another port) and a forged one is dropped. Deleting a
// hairpin leaves no gap from the server's end: its packets go to the
// node's address or stay in the pod, never through the forward hook. A
// mark never stands for a judgement that depends on the link: a marked
// flow is restored only if the new table accepts it from any link, and a
// marked hairpin accepted only from its own link is deleted likewise.
// Restoring it because its own link is exempt let a hairpin forged while
// no table was there come back at the next change.
//
// # Rechecking
//
// A change looks only at what it narrowed, so a revoked connection whose
// mark someone else cleared (another table's `ct mark set meta mark`, the
// connmark-save pattern, which runs before our chain; an entry made
// through ctnetlink or by conntrackd) would pass for good. Cleaner.Recheck
// judges every flow again by the table programmed all along, and revokes
// the unmarked ones it drops (Stats.Revived); unmarked hairpins are judged
// on their own link, as the kernel judged them under that table. The
// daemon runs it at every drift check (--drift-check, 30 s), so a revived
// flow is revoked again within one period plus one pass once nothing
// clears its mark any more; while a rule clears it at every packet, no
// mark can hold, and each check warns.
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
// A Recheck has no table before to narrow the prefilter by: it dumps
// every entry and traces those to or from an isolated pod. At 10k entries:
// about 105 ms when no entry touches an isolated pod (the dump), 320 ms
// when every entry is traced and kept, 550 ms when every one is marked
// again (go test -count=1 -run '^$' -bench BenchmarkKernelRecheck10k
// -benchtime 20x ./conntrack/, same machine): under 1% of a core at the
// daemon's 30 s period, syncs waiting for it at most that long.
//
// Otherwise a call dumps conntrack, which walks the kernel's whole hash
// table, shared by every namespace of the host: about 5 ms with 262144
// buckets and one entry, 70-100 ms at 10k entries. Tracing costs about 5 µs
// per traced flow and table, deleting or marking 20-40 µs per entry (one request and
// ack each). Measured on the project's 2-core machine, kernel 6.18, under
// load from other work: go test -count=1 -run '^$' -bench BenchmarkKernel
// -benchtime 20x ./conntrack/ (BenchmarkKernelNarrowed10k).
//
// # Limits
//
// With a table that has no revoke rule, a deleted flow comes back when
// its server sends first (# Revoking). An entry a helper expected from a
// revoked connection inherits its mark when it is made and is never
// restored (entries with a master are skipped); it ends with its
// connection. Marks outside what the table before the write drops can
// exist only after a start or a failed call: Narrowed then looks at every
// marked entry, whatever the prefilter says.
//
// # Use
//
//	c, err := conntrack.Open(netns) // the daemon's network namespace
//	defer c.Close()
//	stats, err := c.Narrowed(old, new) // after each successful write
//	stats, err = c.Recheck(new)         // now and then, between writes
//	n, err := c.DeleteMarked(bit)       // a table without the revoke rule, after one with it
//
// old is the table programmed before the write, nil when unknown (the
// first write, or after a failure): every flow new drops is then revoked,
// which is what an unknown old table that allowed everything would need.
//
// Conntrack is Linux only; elsewhere Open returns ErrUnsupported. The
// decision itself (Change) works everywhere.
package conntrack
