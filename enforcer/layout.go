package enforcer

// Layout is the version of the table layout this build writes: the names,
// types and keys of the base chain, maps and sets, the order of the base
// chain's rules and the meaning of the mark bits. It goes into the table's
// owner record (nft.Owner.Layout), so `nft list table inet nftpolicy` and
// the log say which layout the kernel holds.
//
// A daemon never updates a table it did not write in this run by delta:
// its first write after start (and any take-over or repair) replaces the
// whole table (nft.Conn.Apply: the table deleted and created again with
// every chain, set and rule; over a table in force with interval sets,
// through a dormant handover table, see nft.HandoverTable). So moving
// from any layout to this one, older or newer, leaves no moment without
// a complete table in force, and each packet sees the old table or the
// new one, never neither or half.
// Raise Layout with any change of the above; nothing else needs to.
//
// Records without a version (Layout 0) were written before versions were
// recorded; the layout they describe predates the self-exemption rule that
// needs fib and the DNAT status (version 2). Version 3 starts the base
// chain with the drop of connections the conntrack cleanup marked revoked
// (Options.Revoke, a bit of the conntrack mark: see revokeRule). Version
// 4 may carry a rule counter on each rule that allows a connection and on
// each pod chain's final drop (Options.Counters, see counters.go).
// Version 5 may log, in the chains of logged namespaces, each allowing
// rule and each pod chain's drop in a rule of its own ahead of it, with a
// limit (Options.FlowLog, see flowlog.go). Version 6 lets neighbour
// discovery through only with hop limit 255, as it is sent: a routed
// packet of those ICMPv6 types is judged by policy. Version 7 judges
// ClusterNetworkPolicy: tier chains, and, while a pod of this node is an
// egress subject, a base chain on the input hook for its connections to
// the node (see node.go). Version 8 judges NetworkPolicy with the flat
// stage (flat.go): the ingress-ports and egress-ports maps and the
// fragment chains (ingress-allow-…, egress-allow-…) in place of jumps to
// every selecting policy's chain, and a counter on a pod chain's allowed
// return. Version 9 lays each cluster tier out by the peer address: a
// tier chain is one lookup in an address interval map (…-classes) to a
// class chain of the rules whose peer may hold it, and the pod chain of
// a pod no NetworkPolicy isolates goes to a pair of its two tiers
// (tiers-…) with no mark rule (see "Cluster network policy" in doc.go).
// Version 10 asks the ports maps from one chain per direction
// (ingress-ports, egress-ports) that flat pod chains jump to, in place of
// a lookup in every pod chain (see portsChains).
const Layout = 10

// previousLayout is set, at link time only, by the tests of an upgrade
// under probing (test/e2e), which need two builds whose layouts differ:
//
//	go build -ldflags "-X github.com/nftpolicy/nftpolicy/enforcer.previousLayout=yes"
//
// Such a build records Layout-1 and names its base chain differently, so
// that it and this layout share no hook: a move between them that were not
// one transaction would leave a moment with no filter, or with two. It is
// a stand-in for an older release, not the real one. Never set it in a
// release build.
var previousLayout string

// layoutVersion is the layout this binary writes.
func layoutVersion() int {
	if previousLayout != "" {
		return Layout - 1
	}
	return Layout
}

// forwardChainName is the name of the base chain on the forward hook.
func forwardChainName() string {
	if previousLayout != "" {
		return "forward"
	}
	return "filter-forward"
}
