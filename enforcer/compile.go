package enforcer

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"

	policyv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// DefaultTable is the name of the one table nftpolicy owns.
const DefaultTable = "nftpolicy"

// Options are the node-specific inputs of the compiler.
type Options struct {
	// Node is the name of this node: only its pods are policy targets.
	Node string
	// Table names our inet table; DefaultTable when empty.
	Table string
	// MarkMask holds the packet-mark bits nftpolicy may use; DefaultMarkMask
	// when zero.
	MarkMask uint32
	// TakeOver lets a Syncer write over a table whose owner record names
	// another nftpolicy that is still running (see Syncer.Claim), which
	// then stops writing. The compiler ignores it.
	TakeOver bool
	// DenyUnknown drops forwarded traffic from or to an address of this
	// node's pod CIDRs that is no known pod of this node (see unknown.go).
	DenyUnknown bool
	// PodCIDRs are this node's pod CIDRs for DenyUnknown; when empty, the
	// Node object's spec.podCIDRs.
	PodCIDRs []netip.Prefix
	// Revoke drops, ahead of the established accept, every packet of a
	// connection whose conntrack mark carries RevokedBit(MarkMask): the
	// conntrack cleanup marks so the connections a change no longer allows
	// (see revokeRule). Set it when, and only when, that cleanup runs.
	Revoke bool
	// Counters puts a rule counter on every rule that allows a connection
	// and on every pod chain's final drop, so that the connections each
	// isolated pod was allowed and denied can be read from the kernel (see
	// ConnCounter); where pod chains walk their policies (WalkPolicies, or
	// a namespace with flow logs), those each policy allowed too.
	Counters bool
	// WalkPolicies makes every pod chain jump to the chain of each policy
	// selecting its pod, the layout before the flat stage (flat.go): a
	// NEW packet then costs about 80 ns more per policy selecting the pod,
	// for counts per policy. Namespaces with flow logs always walk.
	WalkPolicies bool
	// FlowLog logs the first packet of connections of logged namespaces
	// to an nflog group (see flowlog.go); the zero value logs nothing.
	FlowLog FlowLog
	// DeferUnions lets an incremental compile leave a large new union of
	// peer lists for the next compile to merge, asking its parts one by
	// one meanwhile (see settle.go): an event's batch then carries no new
	// union sets. SyncResult.Deferred says when a compile did.
	DeferUnions bool
}

// A Problem is part of the snapshot the compiler could not use. The rest is
// compiled; what a problem drops is always an allow, never an isolation, so
// a broken rule fails closed.
type Problem struct {
	Object string // "NetworkPolicy x/name", "Pod x/a"
	Err    error
}

func (p Problem) Error() string { return p.Object + ": " + p.Err.Error() }

// A direction is ingress or egress, with the packet fields each looks at.
type direction struct {
	i          int    // 0 ingress, 1 egress: its index in per-direction arrays
	name       string // "ingress", "egress"
	policyType networkingv1.PolicyType
	peerField  nft.AddrField // where the peer's address is
	podField   nft.AddrField // where the selected pod's address is
}

var (
	ingress = direction{0, "ingress", networkingv1.PolicyTypeIngress, nft.Saddr, nft.Daddr}
	egress  = direction{1, "egress", networkingv1.PolicyTypeEgress, nft.Daddr, nft.Saddr}
)

// directions in the order chains of one policy or pod are listed.
var directions = []direction{ingress, egress}

var families = []nft.IPFamily{nft.IPv4, nft.IPv6}

// Compile turns a snapshot into the table that enforces it on opts.Node. It
// is a pure function: same snapshot and options, same table, byte for byte
// once rendered. The forward chain is at DefaultPriority; a caller that
// resolved another (ResolvePriority) uses a Compiler, which takes it at
// each Compile. It is a Compiler used once; the daemon keeps a Compiler so
// that an event costs what it changes, not what the cluster holds.
//
// The layout (see doc.go for the why):
//
//	filter-forward           ct state established,related accept
//	                         ip saddr vmap @egress-pods-v4  → jump egress-pod-…
//	                         ip daddr vmap @ingress-pods-v4 → jump ingress-pod-…
//	ingress-pod-<h>-ns/pod   ip daddr . meta l4proto . th dport vmap @ingress-ports-v4 → jump ingress-allow-…
//	                         allowed? return; drop
//	ingress-allow-<h>        ip saddr @peers-<h>-v4: set our allow bit, return
//	ingress-<h>-ns/policy    one rule per peer family × port (walked with WalkPolicies)
func Compile(snap *k8s.Snapshot, opts Options) (*nft.Table, []Problem) {
	return NewCompiler(opts).Compile(snap, DefaultPriority)
}

// A Compiler compiles one snapshot after another for one node. It keeps
// what it derived from the last snapshot (the pods each selector names, each
// policy's chains, every set's elements) and, given the next snapshot,
// recomputes only what the objects that changed can touch:
//
//   - a policy whose spec changed gets new chains;
//   - a pod or namespace that changed recomputes the peer sets whose
//     selectors could name it, and the named-port sets that follow them;
//   - a pod of this node that changed re-selects the targets of the
//     policies of its namespace, and rebuilds that namespace's pod chains.
//
// What did not change is the very object of the previous table, so nft.Diff
// passes over it by pointer. The result is always the table the function
// Compile returns for the same snapshot (TestIncrementalMatchesFull checks
// it after random event sequences).
//
// Objects are compared by pointer first (walkChanges), then by the fields
// policy reads, so a source that hands out the same object for what did
// not change (the informer source does) costs a pointer comparison per
// object.
//
// A Compiler is not safe for concurrent use. The tables it returns are
// immutable: later calls never modify them.
type Compiler struct {
	opts Options
	bit  uint32
	call uint64 // Compile calls so far: the number of the current one

	// peerAddrs is computePeers' scratch list of addresses, kept from one
	// call to the next.
	peerAddrs []netip.Addr

	// The snapshot lists last walked (see walkChanges).
	nsList     []*corev1.Namespace
	podList    []*k8s.Pod
	policyList []*networkingv1.NetworkPolicy

	namespaces map[string]labels.Set // with the name label the API server always sets
	flowNS     map[string]bool       // namespaces annotated for flow logs (k8s.FlowLogged)
	// claimsByPod: the pods that take part in policy, each with every
	// address it reports and the view it takes part with (the addresses
	// it wins).
	claimsByPod   map[objKey]*claim
	claims        addressClaims // claimsByPod by address
	podProblems   map[objKey][]Problem
	addrProblems  map[objKey][]Problem         // addresses lost to another pod
	quarantined   map[objKey]bool              // the last snapshot's Quarantined
	unsettled     map[objKey]*k8s.UnsettledPod // the last snapshot's Unsettled
	quarantinedNS map[string]bool              // the last snapshot's QuarantinedNamespaces
	byNS          map[string][]*pod            // participating pods by namespace, sorted by name
	nsNames       []string                     // namespaces with participating pods, sorted
	localByNS     map[string][]*pod            // this node's participating pods by namespace, sorted
	every         []*pod                       // every participating pod, sorted; nil when stale

	policies       map[objKey]*policyState
	policiesByNS   map[string][]*policyState // sorted by name
	policyProblems map[objKey]*policyState   // those with problems

	// ClusterNetworkPolicies (see cluster.go): the list last walked, each
	// by name, the tier chains by key, and the groups each pod of this
	// node is judged by, per direction. Nodes, for node peers.
	clusterList []*policyv1beta1.ClusterNetworkPolicy
	cluster     map[string]*clusterPolicyState
	groups      map[string]*clusterGroup
	pairs       map[string]*pair // by pairKey
	podTiers    map[podChainKey]podTiers
	nodeList    []*corev1.Node
	nodes       map[string]nodeView

	// Sets shared by the rules of active policies: peer sets by peerKey,
	// named-port sets by their use.
	peers    refCounted[string, *peerSets]
	peerIdx  peerIndex // the lists in peers an event may touch (peerindex.go)
	portSets refCounted[portUse, *portSets]
	// namedParts are the egress named-port sets each peer list is a part
	// of, by the list's key (namedports.go).
	namedParts map[string]map[*portSets]bool
	// changedPeers are the keys of the peer sets whose elements changed
	// since refreshCluster last laid out the tier groups reading them.
	changedPeers map[string]bool
	// renamed are the keys of the unions whose sets changed kind, and so
	// name, in this compile (longRuns): what asks them is rewritten.
	renamed map[string]bool
	// allowChains are the fragment chains of flat pod chains, by
	// allowChainKey (see flat.go).
	allowChains refCounted[string, *allowChain]
	// deferred are the fragment chains asking their union's parts one by
	// one, by allowChainKey (see settle.go).
	deferred map[string]*allowChain
	// wholeWrite: the Syncer writes this compile's table whole, so it
	// defers no union (set before each Compile).
	wholeWrite bool

	podChains map[podChainKey]*podChain // isolated local pods, by pod and direction
	// nodeChains: local pods' chains for connections to this node (see node.go)
	nodeChains map[objKey]*podChain
	dispatch   []*nft.Set   // the dispatch maps of the last table (dispatchMaps)
	ports      []*nft.Chain // portsChains, the same in every table

	// What the next table lists beyond the base chain and the dispatch
	// maps: policy and pod chains, and every other set.
	chains tableObjects[*nft.Chain]
	sets   tableObjects[*nft.Set]
	// patches are exact element changes made by the current or last
	// Compile call, keyed by the set they apply to, for sets too large to
	// compare whole on every event.
	patches map[*nft.Set]nft.SetUpdate
	// Names of policy and pod chains and of peer sets, held from the plan
	// of what uses them (a policy's chains and rules, a pod chain) until it
	// goes, unique by construction (see nameRegistry).
	chainNames, peerNames *nameRegistry
	// Identifiers of logged chains in log prefixes (see flowlog.go).
	flowIDs *flowIDs

	// With DenyUnknown: the pod CIDRs the unknown sets were built from,
	// the sets by family, and why there are none.
	unknownCIDRs    []netip.Prefix
	unknownSets     map[nft.IPFamily]*nft.Set
	unknownProblems []Problem

	prevTable, lastTable *nft.Table // returned by the last two calls, for Delta
}

type objKey struct{ namespace, name string }

func (k objKey) String() string { return k.namespace + "/" + k.name }

type podChainKey struct {
	pod objKey
	dir string
}

type podChain struct {
	pod    *pod
	chain  *nft.Chain
	flowID string // its identifier in log prefixes; "" when not logged
	// policies select the pod in this direction, by name.
	policies []*policyState
	// flat: the chain asks the flat stage (flat.go) rather than jumping
	// to the policies' chains; it holds use and gives the ports maps
	// elems.
	flat  bool
	use   *flatUse
	elems []nft.Element
	// counts: with Options.Counters, what each rule of a flat chain that
	// counts counts, in chain order (countedRules).
	counts []countedRule
	// pair: the chain enters the Admin and Baseline tiers together (no
	// NetworkPolicy isolates the pod), through this pair it holds.
	pair *pair
}

// NewCompiler returns a Compiler for opts. The priority of the forward
// chain is given to each Compile, as the daemon re-resolves it.
func NewCompiler(opts Options) *Compiler {
	if opts.Table == "" {
		opts.Table = DefaultTable
	}
	if opts.MarkMask == 0 {
		opts.MarkMask = DefaultMarkMask
	}
	return &Compiler{
		opts:           opts,
		bit:            allowBit(opts.MarkMask),
		namespaces:     map[string]labels.Set{},
		flowNS:         map[string]bool{},
		podProblems:    map[objKey][]Problem{},
		claimsByPod:    map[objKey]*claim{},
		claims:         newAddressClaims(),
		addrProblems:   map[objKey][]Problem{},
		byNS:           map[string][]*pod{},
		localByNS:      map[string][]*pod{},
		policies:       map[objKey]*policyState{},
		policiesByNS:   map[string][]*policyState{},
		policyProblems: map[objKey]*policyState{},
		cluster:        map[string]*clusterPolicyState{},
		groups:         map[string]*clusterGroup{},
		changedPeers:   map[string]bool{},
		renamed:        map[string]bool{},
		pairs:          map[string]*pair{},
		podTiers:       map[podChainKey]podTiers{},
		nodes:          map[string]nodeView{},
		podChains:      map[podChainKey]*podChain{},
		deferred:       map[string]*allowChain{},
		nodeChains:     map[objKey]*podChain{},
		chainNames:     newNameRegistry(),
		peerNames:      newNameRegistry(),
		flowIDs:        newFlowIDs(),
	}
}

// changes collects what one Compile call found changed, for the steps that
// follow to decide what to recompute.
type changes struct {
	namespaces []nsChange
	pods       map[string][]podChange // by namespace
	targetsNS  map[string]bool        // namespaces whose policies must re-select targets
	podChainNS map[string]bool        // namespaces whose pod chains must be rebuilt
	policies   []*policyState         // added or changed: targets to select
	goneLocal  []objKey               // pods no longer local and taking part: drop their chains
	dispatch   bool                   // some pod chain appeared, went or changed address
	flowLogNS  map[string]bool        // namespaces whose flow logging was turned on or off
	localPods  bool                   // a pod of this node appeared, went or changed
	cluster    bool                   // a ClusterNetworkPolicy appeared, went or changed its spec
	nodes      bool                   // a Node's labels or addresses changed (node peers)
}

// Compile compiles snap, reusing what it computed for the previous one. The
// table is the forward base chain at priority, then everything snap asks
// for, as the function Compile would build it.
func (c *Compiler) Compile(snap *k8s.Snapshot, priority int32) (*nft.Table, []Problem) {
	c.call++
	c.chains.startCall()
	c.sets.startCall()
	c.patches = map[*nft.Set]nft.SetUpdate{}
	ch := &changes{
		pods:       map[string][]podChange{},
		targetsNS:  map[string]bool{},
		podChainNS: map[string]bool{},
		flowLogNS:  map[string]bool{},
	}
	c.syncNamespaces(snap.Namespaces, snap.QuarantinedNamespaces, ch)
	c.syncPods(snap.Pods, snap.Quarantined, snap.Unsettled, ch)
	c.syncPolicies(snap.Policies, ch)
	c.syncClusterPolicies(snap.ClusterPolicies, ch)
	c.syncNodes(snap.Nodes, ch)
	c.refreshFlowLog(ch)
	c.refreshPeers(ch)
	c.refreshTargets(ch)
	c.refreshCluster(ch)
	c.refreshPortSets(ch)
	c.refreshPodChains(ch)
	c.settleDeferred()
	c.refreshUnknown(snap.Nodes, ch)
	t := c.assemble(priority, ch)
	c.prevTable, c.lastTable = c.lastTable, t
	return t, c.problems()
}

// assemble lists the table: base chain and dispatch maps first, then the
// registered chains and sets in their stable order.
func (c *Compiler) assemble(priority int32, ch *changes) *nft.Table {
	if c.dispatch == nil || ch.dispatch {
		c.dispatch = c.dispatchMaps()
	}
	t := &nft.Table{
		Family: nft.FamilyInet,
		Name:   c.opts.Table,
		Chains: make([]*nft.Chain, 0, 4+c.chains.len()),
		Sets:   make([]*nft.Set, 0, len(c.dispatch)+c.sets.len()),
	}
	t.Chains = append(t.Chains, c.forwardChain(priority))
	if in := c.inputChain(); in != nil {
		t.Chains = append(t.Chains, in)
	}
	if c.ports == nil {
		c.ports = portsChains()
	}
	t.Chains = append(t.Chains, c.ports...)
	t.Chains = c.chains.appendSorted(t.Chains)
	t.Sets = c.sets.appendSorted(append(t.Sets, c.dispatch...))
	return t
}

// chainSortKey orders the chains after the base chain: policy chains (kind
// 1) by policy, then pod chains (kind 2) by pod, ingress before egress.
func chainSortKey(kind int, key objKey, d direction) string {
	dir := 0
	if d == egress {
		dir = 1
	}
	return fmt.Sprintf("%d\x00%s\x00%s\x00%d", kind, key.namespace, key.name, dir)
}

// putChain registers ch for the next tables (replacing the chain of the
// same name), ordered by sortKey (see chainSortKey).
func (c *Compiler) putChain(sortKey string, ch *nft.Chain) { c.chains.put(ch.Name, sortKey, ch) }

func (c *Compiler) dropChain(name string) { c.chains.drop(name) }

// putSet registers s for the next tables, replacing the set of the same
// name; sets are listed by name.
func (c *Compiler) putSet(s *nft.Set) { c.sets.put(s.Name, s.Name, s) }

func (c *Compiler) dropSet(name string) { c.sets.drop(name) }

// problems lists what the snapshot holds that could not be compiled: pods
// first, then policies, each in namespace/name order.
func (c *Compiler) problems() []Problem {
	var out []Problem
	podKeys := slices.Collect(maps.Keys(c.podProblems))
	for k := range c.addrProblems {
		if _, ok := c.podProblems[k]; !ok {
			podKeys = append(podKeys, k)
		}
	}
	slices.SortFunc(podKeys, compareKeys)
	for _, k := range podKeys {
		out = append(out, c.podProblems[k]...)
		out = append(out, c.addrProblems[k]...)
	}
	out = append(out, c.unknownProblems...)
	for _, k := range slices.SortedFunc(maps.Keys(c.policyProblems), compareKeys) {
		out = append(out, c.policyProblems[k].problems()...)
	}
	return append(out, c.clusterProblems()...)
}

func compareKeys(a, b objKey) int {
	return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.name, b.name))
}

// ICMPv6 neighbour discovery types (RFC 4861): router solicitation and
// advertisement, neighbour solicitation and advertisement, redirect.
const (
	icmpv6RouterSolicit = 133
	icmpv6Redirect      = 137
	// ndHopLimit is the hop limit neighbour discovery is sent with (RFC
	// 4861 § 7.1.1: a receiver discards any other). Routing decrements it
	// before the forward hook, so a routed "neighbour discovery" message,
	// which no real one is, arrives with less and is judged by policy: a
	// pod cannot carry data past isolation in types 133-137 to another
	// node or subnet. On a shared bridge a pod can still send its
	// neighbours on it crafted ones, as it can ARP.
	ndHopLimit = 255
)

// forwardChain is the base chain: established traffic first, then the
// egress check of the sending pod, then the ingress check of the receiver.
func (c *Compiler) forwardChain(priority int32) *nft.Chain {
	ch := &nft.Chain{
		Name: forwardChainName(),
		Hook: &nft.Hook{Type: "filter", Hook: "forward", Priority: priority, Policy: nft.Accept},
		Rules: []nft.Rule{{
			Exprs:   []nft.Expr{nft.CtStateEstablishedRelated{}, nft.Verdict{Kind: nft.Accept}},
			Comment: "policy is decided once per connection, on its first packet",
		}, {
			// Neighbour discovery is IPv6's ARP. Conntrack does not track
			// it, and on a bridge with br_netfilter it crosses the forward
			// hook between pods, so without this a pod isolated for ingress
			// could not be resolved by its own allowed peers.
			Exprs:   []nft.Expr{nft.ICMPv6TypeRange{First: icmpv6RouterSolicit, Last: icmpv6Redirect, HopLimit: ndHopLimit}, nft.Verdict{Kind: nft.Accept}},
			Comment: "IPv6 neighbour discovery is not subject to policy, as ARP is not",
		}},
	}
	if c.opts.Revoke {
		ch.Rules = slices.Insert(ch.Rules, 0, c.revokeRule())
	}
	ch.Rules = append(ch.Rules, c.unknownRules()...)
	for _, d := range []direction{egress, ingress} {
		for _, f := range families {
			ch.Rules = append(ch.Rules, nft.Rule{Exprs: []nft.Expr{
				nft.AddrVmap{Family: f, Field: d.podField, Map: podsMapName(d, f)},
			}})
		}
	}
	return ch
}

// dispatchMaps are the four maps from an isolated local pod's address to
// its pod chain, one per direction and family.
func (c *Compiler) dispatchMaps() []*nft.Set {
	maps := map[string]*nft.Set{}
	var out []*nft.Set
	for _, d := range []direction{egress, ingress} {
		for _, f := range families {
			s := &nft.Set{
				Name:    podsMapName(d, f),
				Comment: fmt.Sprintf("%s address of each pod on this node isolated for %s -> its %s chain", familyName(f), d.name, d.name),
				Key:     addrKey(f),
				Verdict: true,
			}
			maps[s.Name] = s
			out = append(out, s)
		}
	}
	var ports []*nft.Set
	for _, d := range []direction{egress, ingress} {
		for _, f := range families {
			s := &nft.Set{
				Name:    portsMapName(d, f),
				Comment: fmt.Sprintf("%s address . protocol . port of each pod on this node isolated for %s -> the chain of the peers allowed there", familyName(f), d.name),
				Key:     protoPortKey(f),
				Verdict: true,
			}
			maps[s.Name] = s
			ports = append(ports, s)
		}
	}
	for k, pc := range c.podChains {
		for _, ip := range pc.pod.ips {
			m := maps[podsMapName(dirNamed(k.dir), nft.FamilyOf(ip))]
			m.Elements = append(m.Elements, nft.Element{Addr: ip, Verdict: nft.Verdict{Kind: nft.Jump, Chain: pc.chain.Name}})
		}
		for _, e := range pc.elems {
			m := maps[portsMapName(dirNamed(k.dir), nft.FamilyOf(e.Addr))]
			m.Elements = append(m.Elements, e)
		}
	}
	for _, m := range out {
		slices.SortFunc(m.Elements, func(a, b nft.Element) int { return a.Addr.Compare(b.Addr) })
	}
	for _, m := range ports {
		slices.SortFunc(m.Elements, compareElements)
	}
	return append(append(out, ports...), c.nodeMaps()...)
}

func dirNamed(name string) direction {
	if name == egress.name {
		return egress
	}
	return ingress
}

// refreshPodChains rebuilds the pod chains of the namespaces where a local
// pod or a policy changed, and drops those of pods no longer isolated.
func (c *Compiler) refreshPodChains(ch *changes) {
	for _, key := range ch.goneLocal {
		if pc, ok := c.nodeChains[key]; ok {
			c.dropNodeChain(key, pc)
			ch.dispatch = true
		}
		for _, d := range directions {
			k := podChainKey{key, d.name}
			if pc, ok := c.podChains[k]; ok {
				c.dropPodChain(k, pc)
				ch.dispatch = true
			}
		}
	}
	for ns := range ch.podChainNS {
		for _, pd := range c.localByNS[ns] {
			for _, d := range directions {
				c.refreshPodChain(pd, d, ch)
			}
		}
	}
}

// refreshPodChain brings the chain of a local pod for d in step with the
// policies selecting it: none when none does, and for a quarantined pod
// (whose labels are not known) one that jumps to no policy, so that it is
// isolated with nothing allowed whatever selects it.
func (c *Compiler) refreshPodChain(pd *pod, d direction, ch *changes) {
	var selecting []string
	var policies []*policyState
	for _, p := range c.policiesByNS[pd.key.namespace] {
		if p.active && p.types[d.i] && p.selects(pd) {
			selecting = append(selecting, p.chains[d.i].Name)
			policies = append(policies, p)
		}
	}
	k := podChainKey{pd.key, d.name}
	old := c.podChains[k]
	tiers := c.podTiers[k]
	if d == egress {
		c.refreshNodeChain(pd, tiers, len(selecting) > 0, ch)
	}
	if len(selecting) == 0 && !pd.quarantined && tiers == (podTiers{}) {
		if old != nil {
			c.dropPodChain(k, old)
			ch.dispatch = true
		}
		return
	}
	var name, flowID string
	if old != nil {
		name, flowID = old.chain.Name, old.flowID
	} else {
		name = c.acquireChainName(d.name+"-pod", pd.key.namespace, pd.key.name)
	}
	switch logged := c.flowLogged(pd.key.namespace); {
	case logged && flowID == "":
		flowID = c.acquireFlowID(d.name+"-pod", pd.key.namespace, pd.key.name)
	case !logged && flowID != "":
		c.retireFlowID(d.name+"-pod", pd.key.namespace, pd.key.name)
		flowID = ""
	}
	next := &podChain{pod: pd, flowID: flowID, policies: policies, flat: c.flatLayout(pd.key.namespace) && len(policies) > 0}
	if tiersAlone(selecting, pd, tiers) && tiers.admin != nil {
		next.pair = c.acquirePair(tiers)
	}
	var stage []nft.Rule
	if next.flat {
		// What the new chain holds is acquired before the old one lets go,
		// so that a fragment chain or peer set both use stays put.
		next.use = &flatUse{}
		stage, next.elems = c.flatRules(pd, d, planFlat(pd, d, policies), policies, next.use)
	}
	next.chain, next.counts = c.podChain(name, pd, d, selecting, stage, next.flat, tiers, next.pair, flowID)
	if old != nil {
		old.release(c)
	}
	if old != nil && old.pod == pd && slices.EqualFunc(old.chain.Rules, next.chain.Rules, nft.Rule.Equal) && slices.Equal(old.elems, next.elems) {
		old.policies, old.use, old.pair, old.counts = next.policies, next.use, next.pair, next.counts
		return
	}
	if old == nil || !slices.Equal(old.pod.ips, pd.ips) || !slices.Equal(old.elems, next.elems) {
		ch.dispatch = true
	}
	c.podChains[k] = next
	c.putChain(chainSortKey(2, pd.key, d), next.chain)
}

// flatLayout reports whether the pod chains of namespace ns use the flat
// stage: unless the options ask every pod chain to walk its policies, or
// the namespace's flow logs need each policy's rules walked to say which
// allowed (see flowlog.go).
func (c *Compiler) flatLayout(ns string) bool {
	return !c.opts.WalkPolicies && !c.flowLogged(ns)
}

// release lets go of what a flat pod chain holds.
func (pc *podChain) release(c *Compiler) {
	if pc.pair != nil {
		c.releasePair(pc.pair)
		pc.pair = nil
	}
	if pc.use == nil {
		return
	}
	for _, k := range pc.use.allows {
		c.releaseAllowChain(k)
	}
	for _, k := range pc.use.peerKeys {
		c.releaseUnion(k)
	}
	pc.use = nil
}

// tiersAlone reports whether cluster policies alone judge pd in a
// direction: some tier does, no NetworkPolicy isolates it, and it is not
// quarantined (which isolates it with nothing allowed).
func tiersAlone(policyChains []string, pd *pod, tiers podTiers) bool {
	return len(policyChains) == 0 && !pd.quarantined && tiers != (podTiers{})
}

// clearBitsRule starts every pod chain: our bits are set by our policy
// and tier chains alone.
func (c *Compiler) clearBitsRule() nft.Rule {
	return nft.Rule{Exprs: []nft.Expr{nft.SetMark{Clear: c.opts.MarkMask}}, Comment: "only our policy chains may set our bits"}
}

// allowedReturn is a pod chain's "allowed": our bit set by a chain it
// jumped to, cleared before the packet goes on.
func (c *Compiler) allowedReturn() []nft.Expr {
	return []nft.Expr{nft.MarkBitsSet{Bits: c.bit}, nft.SetMark{Clear: c.opts.MarkMask}, nft.Verdict{Kind: nft.Return}}
}

// adminTierRules enter a pod's Admin tier chains, if it has them, and
// return at once for what they accepted (see clusterRules).
func (c *Compiler) adminTierRules(pd *pod, tiers podTiers) []nft.Rule {
	if tiers.admin == nil {
		return nil
	}
	out := tiers.admin.enter(nft.Jump, "the admin tier first", pd)
	if tiers.admin.accepts {
		out = append(out, nft.Rule{Exprs: c.allowedReturn(), Comment: "accepted by the admin tier: clear our bits and go on"})
	}
	return out
}

// baselineTierRules end a pod chain where no NetworkPolicy isolates the
// pod: the Baseline tier decides, and its end allows.
func baselineTierRules(pd *pod, tiers podTiers) []nft.Rule {
	if tiers.baseline == nil {
		return nil
	}
	return tiers.baseline.enter(nft.Goto, "no NetworkPolicy isolates the pod: the baseline tier decides, else allowed", pd)
}

// selfRules let a pod reach itself, through a Service (see podChain),
// each with a counter when counted.
func (c *Compiler) selfRules(pd *pod, d direction, counted bool) []nft.Rule {
	if c.unsettled[pd.key] != nil {
		return nil
	}
	var out []nft.Rule
	for _, ip := range pd.ips {
		exprs := []nft.Expr{nft.AddrEq{Field: d.peerField, Addr: ip}, nft.ReversePath{}, nft.CtStatusDNAT{}, nft.Verdict{Kind: nft.Return}}
		if counted {
			exprs = slices.Insert(exprs, 3, nft.Expr(nft.Counter{}))
		}
		out = append(out, nft.Rule{Exprs: exprs, Comment: "a pod may always reach itself (through a Service)"})
	}
	return out
}

// dropPodChain takes the chain of a pod no longer isolated in one direction
// out of the table, with its name.
func (c *Compiler) dropPodChain(k podChainKey, pc *podChain) {
	pc.release(c)
	delete(c.podChains, k)
	c.dropChain(pc.chain.Name)
	c.releaseChainName(k.dir+"-pod", k.pod.namespace, k.pod.name)
	if pc.flowID != "" {
		c.retireFlowID(k.dir+"-pod", k.pod.namespace, k.pod.name)
	}
}

// podChain decides one direction for one isolated pod: allowed if any
// selecting policy's chain set our allow bit. A quarantined pod's chain
// has no policy to jump to: only the pod reaching itself is allowed.
// With a flowID, what it drops is logged first (denyLogRule).
//
// For a subject of ClusterNetworkPolicies (tiers), the Admin tier's chain
// comes first and an Accept there returns at once; the NetworkPolicy stage
// follows as above when a policy isolates the pod, and otherwise the
// Baseline tier's chain, whose end is the default: allowed.
//
// In the flat layout (flat), the NetworkPolicy stage is stage (flatRules)
// in place of the jumps, and the allowed return counts what it allows.
//
// A flat stage that accepts at once (acceptsAtOnce) leaves no bit to
// read: the chain has no allowed return, and what it allowed is counted
// as what reached the stage less what left it otherwise, its self rules
// and its drop (counts, see countedRule).
func (c *Compiler) podChain(name string, pd *pod, d direction, policyChains []string, stage []nft.Rule, flat bool, tiers podTiers, pair *pair, flowID string) (*nft.Chain, []countedRule) {
	// An empty stage (nothing allowed) keeps the allowed return, which
	// never matches: with Counters, the pod's allowed count is its counter.
	atOnce := flat && acceptsAtOnce(d) && len(stage) > 0
	countAtOnce := atOnce && c.opts.Counters
	var counts []countedRule
	denied := CountKey{Namespace: pd.key.namespace, Pod: pd.key.name, Direction: d.name}
	allowed := denied
	allowed.Allowed = true
	selfRules := c.selfRules(pd, d, countAtOnce && tiers == (podTiers{}))
	if tiersAlone(policyChains, pd, tiers) {
		// The tiers alone: the pair of them, or the Baseline tier alone.
		// Neither sets our bit, so there is none to clear.
		ch := &nft.Chain{Name: name, Rules: selfRules}
		if pair != nil {
			ch.Rules = append(ch.Rules, pair.enter(nft.Goto, "no NetworkPolicy isolates the pod: the admin, then the baseline tier decides, else allowed", pd)...)
		} else {
			ch.Rules = append(ch.Rules, baselineTierRules(pd, tiers)...)
		}
		return ch, nil
	}
	ch := &nft.Chain{Name: name, Rules: []nft.Rule{c.clearBitsRule()}}
	if tiers != (podTiers{}) {
		// A pod reaching itself is not subject to ClusterNetworkPolicy,
		// whose Deny rules drop in its chains: the check comes first.
		ch.Rules = append(ch.Rules, selfRules...)
		selfRules = nil
	}
	ch.Rules = append(ch.Rules, c.adminTierRules(pd, tiers)...)
	switch {
	case atOnce:
		if countAtOnce {
			// What reaches the stage, counted by its first rule.
			first := stage[0]
			first.Exprs = append([]nft.Expr{nft.Counter{}}, first.Exprs...)
			stage = append([]nft.Rule{first}, stage[1:]...)
			counts = append(counts, countedRule{adds: allowed})
			for range selfRules {
				counts = append(counts, countedRule{takes: allowed})
			}
		}
		ch.Rules = append(ch.Rules, stage...)
	case flat:
		ch.Rules = append(ch.Rules, stage...)
		allowedExprs := c.allowedReturn()
		if c.opts.Counters {
			allowedExprs = append([]nft.Expr{allowedExprs[0], nft.Counter{}}, allowedExprs[1:]...)
			counts = append(counts, countedRule{adds: allowed})
		}
		ch.Rules = append(ch.Rules, nft.Rule{Exprs: allowedExprs, Comment: "allowed: clear our bits and go on"})
	case len(policyChains) > 0:
		for _, pc := range policyChains {
			ch.Rules = append(ch.Rules, nft.Rule{Exprs: []nft.Expr{nft.Verdict{Kind: nft.Jump, Chain: pc}}})
		}
		ch.Rules = append(ch.Rules, nft.Rule{
			Exprs:   c.allowedReturn(),
			Comment: "allowed: clear our bits and go on",
		})
	}
	// Self traffic is checked last: only what no policy allowed pays for
	// it, not every allowed connection. Our bit is clear here. A pod's
	// packets to itself cross the forward hook only when hairpinned through
	// a Service, so only a translated connection counts: another pod could
	// otherwise forge the source address of an isolated pod and be let in
	// as the pod itself (the adversarial pass did, over IPv6). A hairpinned
	// packet also comes in on the pod's own link, which its source routes
	// back through; one forged by another pod and sent to the pod's
	// Service does not, where each pod has a link of its own (routed
	// wiring; on a shared bridge every pod's link is the bridge). A pod
	// whose definitions disagree on its addresses (unsettled) has none it
	// is known to be: its "addresses" may be two things, and letting each
	// reach the other as itself opened what its quarantine closes (the
	// third adversarial pass, through a Service), so it gets no exemption.
	ch.Rules = append(ch.Rules, selfRules...)
	drop := fmt.Sprintf("%s: no %s rule allows", pd.key, d.name)
	if pd.quarantined {
		drop = fmt.Sprintf("%s: quarantined, its labels are not known: nothing allowed", pd.key)
	}
	if flowID != "" {
		ch.Rules = append(ch.Rules, c.denyLogRule(flowID))
	}
	ch.Rules = append(ch.Rules, nft.Rule{
		Exprs:   c.podChainDrop(),
		Comment: truncateComment(drop),
	})
	switch {
	case countAtOnce:
		counts = append(counts, countedRule{adds: denied, takes: allowed})
	case flat && c.opts.Counters:
		counts = append(counts, countedRule{adds: denied})
	}
	return ch, counts
}
