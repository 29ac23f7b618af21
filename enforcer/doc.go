// Package enforcer compiles a cluster snapshot into the nftables table that
// enforces its NetworkPolicies on one node, and keeps the kernel in step.
//
// # The compiler
//
// Compile is a pure function from a k8s.Snapshot and Options to an nft.Table:
// no I/O, no clock, no globals. Everything hard about NetworkPolicy lives
// there and is tested with the packet tracer (nft.Trace) and golden files,
// without a kernel.
//
// Compile is a Compiler used once. The daemon keeps one Compiler, which
// remembers what it derived from the previous snapshot and recomputes only
// what the changed objects can touch; it returns the same table as Compile
// (checked after every step of random event sequences) and the delta from
// its previous table (Compiler.Delta), so an event costs what it changed,
// not what the cluster holds. Two pieces keep that true for peer sets,
// which thousands of policies share: an index (peerindex.go) names the
// peer lists a pod or namespace change can touch, by own namespace and by
// namespace selector, so an event does not ask every list; and a touched
// set is patched, not computed again from the pods: the addresses of the
// changed pods, or of the pods of a relabelled namespace, leave and join
// it in one pass over its ranges (editRanges), which also yields the
// exact change the writer sends.
//
// Every node plans every policy of the cluster, since a pod of any
// namespace may be its peer: its selector, its chains' names, the peer
// and named-port sets its rules use and what it cannot compile. Only a
// policy that selects a pod of this node is active, and only then are
// its chains' rules built (activate); most policies of a large cluster
// select no pod of a given node.
//
// # Layout
//
// One inet table holds IPv4 and IPv6. Its base chain filter-forward runs on
// the forward hook ahead of kube-proxy's (see ChoosePriority):
//
//   - `ct state established,related accept` first: policy is decided on the
//     first packet of a connection, so replies are never dropped and the
//     cost of policy is paid once per connection;
//   - then the sender's egress check, `ip saddr vmap @egress-pods-v4`, and the
//     receiver's ingress check, `ip daddr vmap @ingress-pods-v4`. Only pods of
//     this node that some policy isolates have an element: the rest miss the
//     map and fall through to accept.
//
// A pod chain (ingress-pod-<hash>-ns/pod) decides one direction for one
// pod. Its NetworkPolicy stage asks a bounded number of questions, however
// many policies select the pod (flat.go). In egress, a rule that allows
// sets our allow bit, and back in the pod chain the bit set means
// allowed: our bits are cleared and the packet goes on to the ingress
// check; otherwise it is dropped. Ingress is the forward chain's last
// check, so a rule that allows there accepts at once (acceptsAtOnce): it
// ends our chain as the return would have, and our bits, cleared when
// the pod chain began, stay clear. Policies selecting a pod are thus a
// union, and one direction's rules can never satisfy the other
// direction's check.
//
// # Per packet
//
// The rules of every policy selecting a pod are folded, per direction,
// into port fragments: disjoint ranges of one protocol's ports on which
// the same peers are allowed, each with the union of the peer lists of
// the rules covering it. What the kernel does for the first packet of a
// connection to an isolated pod, ingress (egress swaps the addresses):
//
//	filter-forward      ip daddr vmap @ingress-pods-v4         hash: the pod's chain
//	ingress-pod-…       jump ingress-ports
//	ingress-ports       ip daddr . meta l4proto . th dport     hash: the fragment of
//	                      vmap @ingress-ports-v4 (goto)         this pod, protocol, port
//	ingress-allow-<h>   ip saddr @peers-<h>-v4 accept           hash (pods alone) or
//	                                                            interval (ipBlocks)
//	ingress-pod-…       ip saddr @peers-<a>-v4 accept           the rules without ports
//	                    drop
//
// In egress the allowing rules set our bit and return instead, and the
// pod chain ends with `our bit? clear it, return` before its drop. The
// ports map's elements go to the fragment chain (goto), so its return
// lands in the pod chain at once. With Options.Counters, an ingress pod
// chain counts what reaches its stage and what its drop and self rules
// take back out; the difference is what it allowed (countedRule).
//
// Why each lookup is there:
//
//   - the ports map (`ingress-ports-v4`, `egress-ports-v4`, and -v6) is an
//     exact-match verdict map from the pod's own address . protocol . port
//     to the chain of its fragment: a hash lookup, which costs the same at
//     ten elements or a hundred thousand. Keying it by the pod's address
//     makes it one map for every pod of the node, and lets ingress named
//     ports resolve on each pod's own container ports. It is asked from
//     one chain per direction (ingress-ports, egress-ports) that pod
//     chains jump to, so that the kernel's loop check walks the map once
//     per commit, not once per pod chain (see portsChains). A fragment's ports
//     are its elements one by one, up to maxExpanded of them; a wider one
//     (a rule with a protocol and no port, an endPort range) is a rule of
//     the pod chain that jumps to the same kind of chain, one per wide
//     fragment, however many policies share it;
//   - the fragment chain (`ingress-allow-<hash>`) asks the union's peer set
//     of the packet's family: one lookup. Pods and fragments allowing the
//     same peers share it; its comment spells the union out. A peer set
//     of one family with no ipBlock of that family (pods and nodes alone,
//     the common case) is held per address (nft.Set.PerAddress): a hash
//     set, one element a pod. One with an ipBlock is an interval set,
//     which kernel 6.18 searches by halving an array of its ranges, with
//     a memcmp call at each step: about 200 ns a packet at a few thousand
//     ranges on the bench machine, the largest single cost of the path
//     before (hack/bench/pps, docs/performance.md). Which kind a set is
//     follows from its peer list alone, so it never changes under its
//     name. The price (docs/performance.md, "Round four"): a hash set's
//     kernel struct is twice an interval set's, which slows the kernel's
//     walk of its sets by name when the table is written whole, and a
//     list whose pods hold long runs of consecutive addresses costs an
//     element a pod where intervals cost two a run. A union whose ranges
//     are long on average is therefore an interval set, named for it
//     (peers-<hash>-v4-ranges: longRuns in sets.go);
//   - the peers of rules without ports (every protocol and port) are one
//     more union, asked in the pod chain;
//   - an egress rule on a named port is the one question that is not
//     folded: the port is the destination's, so it stays a rule of its
//     own (peer set, then the named-port set), one per distinct peer list
//     and name.
//
// A pod selected by 100 policies thus costs what a pod selected by one
// does (hack/bench/pps, "k=" variants); before, its chain jumped to every
// policy's chain, at about 80 ns each. Policy chains
// (ingress-<hash>-ns/name, one rule per rule peer family × port) stay in
// the table, for `nft list` and explain to read what each policy allows;
// pod chains jump to them only with Options.WalkPolicies, or in a
// namespace with flow logs, where each allowing rule is logged (and
// counted) in its policy's chain.
//
// A union no fragment had before (a policy edit that takes one peer list
// off a port others stay on) is new sets of thousands of intervals at 10k
// policies, which the event's batch would wait on. With
// Options.DeferUnions (on in `nftpolicy run`), the event's sync gives
// such a fragment chain one lookup per peer list, in sets the table holds
// already, and the next sync (Run schedules one of the same snapshot)
// merges the union and gives the chain its one lookup: `nft list` may show
// a fragment chain with a rule per peer list for that long (settle.go).
//
// Chains are static per policy and per pod; what churns is set content:
// peer sets (pod IPs, held per address, or with ipBlock cidr minus
// except, interval sets; one per distinct peer list or union of them,
// and family), named-port sets (address . protocol . port of the pods
// serving a port name, one set per name and protocol: this node's pods
// for ingress; for egress, the pods that the active rules on the port
// name in their own namespaces, or every pod while a rule's peers are
// anything else: namedports.go), the ports maps and the dispatch maps. An egress
// named-port set is in the table while any policy of the cluster uses
// it, whether or not it selects a pod here: a set of every pod must not
// come and go, 300k elements at 150k pods, with the one local pod that
// makes such a policy active.
//
// # Names
//
// Chains and peer sets are named after what they serve, with a hash to
// keep names short and stable (`ingress-1a2b3c4d-x/allow-web`,
// `peers-1a2b3c4d-v4`). A shortened hash is only a hint: a registry
// (nameRegistry) hands out every such name and knows which key holds it,
// and a key whose short name another key holds gets a longer hash. Two
// policies or peer lists never share a chain or a set, however their
// hashes collide.
//
// # Addresses claimed twice
//
// Each address speaks for one pod: it is one key of a dispatch map and a
// member of peer sets as one pod's labels say. When two pods report the
// same IP (an IP reused while a terminating pod's object lingers), a pod of
// this node wins it over a pod of another node, then the one that is not
// terminating, otherwise the newer one, otherwise the first by name; the other takes part with its other addresses only and is
// reported as a Problem naming both. A terminating pod keeps its address,
// isolated by its policies, until another pod claims it.
//
// # Quarantined pods
//
// A pod the snapshot names in Quarantined (k8s.Snapshot) is one whose true
// labels the source does not know: the manifests source kept a rejected
// Pod at its addresses with only the labels it could trust. A selector on
// the absence of a label (NotIn, DoesNotExist) would take it for a pod it
// is not, so no policy selects it and no pod selector names it as a peer,
// an empty one included; ipBlock peers still match its addresses, and a
// rule with no peers allows it as every address. On this node it has a
// pod chain per direction that jumps to no policy and drops all but the
// pod reaching itself: isolated for ingress and egress with nothing
// allowed. The fact travels as a field of the Snapshot rather than a
// label or annotation, so that no manifest (or API user) can set or
// clear it.
//
// A pod the snapshot names in Unsettled is a quarantined pod whose
// definitions disagree on where it is: it is taken to be at every address
// of its entry, and on this node when the entry names this node. Among
// pods of the same locality, a pod whose place is known wins an address
// over an unsettled one (see Addresses claimed twice in addresses.go).
//
// A namespace the snapshot names in QuarantinedNamespaces is one whose
// true labels the source does not know (a rejected Namespace). No
// namespace selector names its pods as peers, except one that reads only
// the kubernetes.io/metadata.name label (the empty selector included),
// which is its name whatever else it carries. Its policies still select
// its pods, and a podSelector peer alone still names them within it.
//
// # Cluster network policy
//
// ClusterNetworkPolicy (policy.networking.k8s.io v1beta1, cluster.go)
// adds two tiers around NetworkPolicy: the Admin tier is judged first,
// the Baseline tier only where no NetworkPolicy isolates the pod, and
// what no tier decides is allowed. A pod of this node that cluster
// policies select (their subject) gets a pod chain and a dispatch entry
// like an isolated pod, and its chain reads, per direction:
//
//	meta mark set meta mark & ~mask           our bits clear
//	<self> ... return                         a pod reaching itself: no policy judges it
//	jump admin-<dir>-<h>-v4                   the Admin tier
//	meta mark & bit == bit ... return         accepted there: go on to the next check
//	jump <policy chains>; bit? return; drop   NetworkPolicy, when one isolates the pod
//
// and where no NetworkPolicy isolates it, just
//
//	<self> ... return
//	goto tiers-<dir>-<h>-v4                   Admin, then Baseline; the end allows
//
// (or `goto baseline-<dir>-<h>-v4` with no Admin policy).
//
// A tier holds the rules of the policies selecting the pod in that tier
// and direction, in the order they are judged: priority, then name for
// equal priorities (the API leaves that order to us), then the order the
// rules are written. So the first rule that matches decides, and the
// verdicts need no mark bit beyond the allow bit: Deny drops; Pass
// returns, which skips the rest of the tier; an Admin Accept sets the
// allow bit and returns, and the pod chain returns at once, so
// NetworkPolicy and Baseline are skipped but the other direction's check
// still runs (an egress Accept does not override the destination's
// ingress policy); a Baseline Accept just returns. Pods selected by the
// same list of policies share the tier's chains, so a namespace-wide
// guardrail is one set of chains however many pods it selects, and a pod
// judged by no cluster policy pays nothing for them.
//
// A tier is laid out by the peer address (layoutGroup), so that a packet
// pays one lookup per tier however many rules and peers it has: the
// tier's chain of each family is one rule,
//
//	ip saddr vmap @admin-ingress-<h>-v4-classes
//
// an address interval map from every range some rule's peer holds to the
// chain of its class: the rules whose peer holds it, in order, without
// their peer match (protocol, port and verdict are left). Addresses no
// rule's peer holds miss, and the tier decides nothing for them. Classes
// follow the peer sets: a pod that comes or goes anywhere re-lays out the
// tiers whose peers name it (refreshCluster), in the same batch as the
// peer sets. A class chain's name hashes its rules, so it keeps its name
// while its rules stay.
//
// A pod of one family enters its family's tier chains without asking
// the family (its chain is only entered through its own addresses).
//
// Where no NetworkPolicy isolates a pod, the two tiers are all that
// judges it, and one lookup serves both: its chain is the self check and
// a `goto` to a pair (see pair in cluster.go), whose class chains hold the
// Admin rules of a piece of addresses and then go on to the Baseline
// class chain of the same piece. There an Admin Accept just returns (no
// stage follows it, so no bit is needed, nor a mark rule in the pod
// chain) and a Pass goes on to Baseline.
//
// Peers are the shared peer sets of NetworkPolicy (a namespaces peer reads
// as a namespaceSelector would, networks as ipBlocks, nodes as the
// status addresses of the Nodes they select); destinationNamedPort uses
// the named-port sets. What cannot be read fails closed, as the API asks:
// a peer or protocol entry with no field this version knows, or an action
// it does not, makes an Accept match nothing through it and a Deny or
// Pass deny all; domainNames, which we do not support, matches nothing.
// Each is a Problem naming the policy.
//
// A pod's connections to its own node never cross the forward hook, and
// NetworkPolicy always allows them; cluster policies judge them on the
// input hook (node.go).
//
// # Syncing
//
// The Syncer writes the first table whole, then each change as one delta
// batch (new and rewritten chains, added and removed elements) checked
// against the ruleset generation of its previous commit: if another
// process committed meanwhile, the kernel refuses the batch and the syncer
// reads the table back before it retries the delta or rewrites the table.
// Run is the one place changes are coalesced (Timing): a change after a
// quiet period is synced at once, changes within the window after a sync
// go into one batch when it ends; it checks for drift periodically. A
// sync that deferred unions (see "Per packet") is followed, after the
// shorter of Debounce and MaxDelay with no change pending, by a sync of
// the same snapshot that merges them; a change that comes first is
// synced as any other (its sync merges them), and the merge opens no
// window of its own.
//
// The Syncer writes through a small interface (kernel.go), which
// production fills with *nft.Conn and the root-free tests of Sync and Run
// with nft.Fake: that is where the retry, conflict, drift and repair paths
// are tested without a kernel; the kernel tests keep the real thing.
//
// Drift is any difference in content between our table in the kernel and
// the table last programmed (nft.Conn.Drift): table flags (`flags dormant`
// turns every chain off), a base chain's type, hook, priority and policy,
// any expression of any rule, any element of any set or map, verdicts
// included; a drift check rewrites the whole table and counts a repair.
// The commit monitor (nft.Monitor) tells which commits touched our table:
// a periodic check reads the table back only if one did, and a commit to
// it by another process (`nft flush ruleset`) makes Run check at once,
// one debounce later, rather than at the next tick. A new base chain of
// another table on the forward hook (nft.Monitor.ForwardChains) makes Run
// re-resolve the priority at once and, if it moved, write the table again.
//
// # One owner per table
//
// The table's comment records the Syncer that owns it (nft.Owner, shown
// by `nft list table`). A second daemon refuses (ErrOwned) while the owner
// runs, unless told to take over (Options.TakeOver); the owner then finds
// another record at its next write or drift check, stops writing, reports
// ErrTakenOver in Status, and takes the table back once the new owner is
// gone. An owner that died is told from a live one by a beacon the kernel
// drops with the process (see owner.go), so a restart claims the table
// without a flag, and the record of an owner that is not running (a
// restored backup, nft -f) is drift, repaired like any other. Two daemons
// started at once end as if started one after the other: the one that
// writes second gets ErrOwned from Run. Cleanup refuses to delete the
// table of a running owner unless forced. A deleted network namespace
// (nft.ErrNetnsGone) stops the Syncer for good and shows in Status within
// a second.
//
// # Marks
//
// nftpolicy owns the bits of a mask (DefaultMarkMask unless configured) and
// only ever writes the mark as `meta mark set meta mark & ~mask | bit`, so
// other components' bits pass unchanged. A pod chain starts by clearing our
// bits and clears them again before it returns, so no packet leaves our
// chains carrying them. CheckMarkMask refuses masks that overlap the bits
// of known co-residents (KnownMarkUsers).
//
// # Traffic that never reaches policy
//
// Traffic between a pod and its own node goes through the input and output
// hooks, never forward, so it is always allowed. A pod reaching itself
// stays in its own namespace, except when hairpinned through a Service: a
// pod chain returns for its own address after its policies (so allowed
// connections do not pay for the check) and before its drop.
package enforcer
