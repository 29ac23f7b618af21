package enforcer

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"go4.org/netipx"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

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
	// Priority of the forward base chain, already resolved (see ChoosePriority).
	Priority int32
	// MarkMask holds the packet-mark bits nftpolicy may use; DefaultMarkMask
	// when zero.
	MarkMask uint32
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
	name       string // "ingress", "egress"
	policyType networkingv1.PolicyType
	peerField  nft.AddrField // where the peer's address is
	podField   nft.AddrField // where the selected pod's address is
}

var (
	ingress = direction{"ingress", networkingv1.PolicyTypeIngress, nft.Saddr, nft.Daddr}
	egress  = direction{"egress", networkingv1.PolicyTypeEgress, nft.Daddr, nft.Saddr}
)

var families = []nft.IPFamily{nft.IPv4, nft.IPv6}

// Compile turns a snapshot into the table that enforces it on opts.Node. It
// is a pure function: same snapshot and options, same table, byte for byte
// once rendered.
//
// The layout (see doc.go for the why):
//
//	filter-forward           ct state established,related accept
//	                         ip saddr vmap @egress-pods-v4  → jump egress-pod-…
//	                         ip daddr vmap @ingress-pods-v4 → jump ingress-pod-…
//	ingress-pod-<h>-ns/pod   jump ingress-<h>-ns/policy …; allowed? return; drop
//	ingress-<h>-ns/policy    one rule per peer family × port: set our allow bit, return
func Compile(snap *k8s.Snapshot, opts Options) (*nft.Table, []Problem) {
	if opts.Table == "" {
		opts.Table = DefaultTable
	}
	if opts.MarkMask == 0 {
		opts.MarkMask = DefaultMarkMask
	}
	c := &compiler{opts: opts, bit: allowBit(opts.MarkMask), emitted: map[string]bool{}}
	c.index(snap)

	table := &nft.Table{Family: nft.FamilyInet, Name: opts.Table}
	dispatch := map[string]*nft.Set{}
	for _, d := range []direction{egress, ingress} {
		for _, f := range families {
			s := &nft.Set{
				Name:    podsMapName(d, f),
				Comment: fmt.Sprintf("%s address of each pod on this node isolated for %s -> its %s chain", familyName(f), d.name, d.name),
				Key:     addrKey(f),
				Verdict: true,
			}
			dispatch[s.Name] = s
			table.Sets = append(table.Sets, s)
		}
	}
	table.Chains = append(table.Chains, c.forwardChain())

	// Per-policy chains, in policy order, and the policies selecting each pod.
	selecting := map[*pod]map[string][]string{} // pod → direction → policy chains
	for _, p := range c.policies {
		for _, d := range []direction{ingress, egress} {
			if !p.types[d.policyType] {
				continue
			}
			chain, sets := c.policyChain(p, d)
			table.Chains = append(table.Chains, chain)
			table.Sets = append(table.Sets, sets...)
			for _, t := range p.targets {
				if selecting[t] == nil {
					selecting[t] = map[string][]string{}
				}
				selecting[t][d.name] = append(selecting[t][d.name], chain.Name)
			}
		}
	}

	// Per-pod chains for isolated local pods, and their dispatch elements.
	for _, pd := range c.local {
		for _, d := range []direction{ingress, egress} {
			chains := selecting[pd][d.name]
			if len(chains) == 0 {
				continue
			}
			chain := c.podChain(pd, d, chains)
			table.Chains = append(table.Chains, chain)
			for _, ip := range pd.ips {
				m := dispatch[podsMapName(d, nft.FamilyOf(ip))]
				m.Elements = append(m.Elements, nft.Element{Addr: ip, Verdict: nft.Verdict{Kind: nft.Jump, Chain: chain.Name}})
			}
		}
	}
	for _, m := range dispatch {
		slices.SortFunc(m.Elements, func(a, b nft.Element) int { return a.Addr.Compare(b.Addr) })
	}
	return table, c.problems
}

type compiler struct {
	opts     Options
	bit      uint32
	problems []Problem

	nsLabels map[string]labels.Set
	pods     []*pod            // every pod that can be a peer, sorted by namespace/name
	byNS     map[string][]*pod // the same pods by namespace
	nsNames  []string          // every namespace with pods, sorted
	local    []*pod            // the pods of this node that can be targets
	policies []*compiledPolicy

	// peerCache memoizes peer sets and their ranges by what the peers say
	// (peerKey): policies across a cluster repeat the same peers ("from the
	// monitoring namespace"), and computing a set walks many pods.
	peerCache map[string]*cachedPeers
	emitted   map[string]bool // names of the shared sets already in the table
}

// cachedPeers is a computed peer set, the names and elements of its nft sets
// per family, shared read-only by every rule with the same peers.
type cachedPeers struct {
	key      string // peerKey
	set      *netipx.IPSet
	pods     []*pod // named by selector peers
	ipBlocks bool   // some peer is an ipBlock
	err      error
	names    map[nft.IPFamily]string
	elements map[nft.IPFamily][]nft.Element
}

// A pod is what the compiler needs of a Pod that takes part in policy.
type pod struct {
	namespace, name string
	labels          labels.Set
	ips             []netip.Addr
	ports           []corev1.ContainerPort
}

// A compiledPolicy is a NetworkPolicy with its selectors parsed and defaults applied.
type compiledPolicy struct {
	np      *networkingv1.NetworkPolicy
	types   map[networkingv1.PolicyType]bool
	targets []*pod
}

func (p *pod) key() string { return p.namespace + "/" + p.name }

func (c *compiler) problem(object string, err error) {
	c.problems = append(c.problems, Problem{Object: object, Err: err})
}

func (c *compiler) index(snap *k8s.Snapshot) {
	c.nsLabels = map[string]labels.Set{}
	for _, ns := range snap.Namespaces {
		set := labels.Set{}
		for k, v := range ns.Labels {
			set[k] = v
		}
		// The API server always sets this label; manifests may not.
		set[corev1.LabelMetadataName] = ns.Name
		c.nsLabels[ns.Name] = set
	}
	for _, p := range snap.Pods {
		pd, ok := c.podOf(p)
		if !ok {
			continue
		}
		c.pods = append(c.pods, pd)
		if p.Spec.NodeName == c.opts.Node {
			c.local = append(c.local, pd)
		}
	}
	byKey := func(a, b *pod) int { return cmp.Compare(a.key(), b.key()) }
	slices.SortFunc(c.pods, byKey)
	slices.SortFunc(c.local, byKey)
	c.byNS = map[string][]*pod{}
	for _, pd := range c.pods {
		if len(c.byNS[pd.namespace]) == 0 {
			c.nsNames = append(c.nsNames, pd.namespace)
		}
		c.byNS[pd.namespace] = append(c.byNS[pd.namespace], pd)
	}

	for _, np := range snap.Policies {
		if p := c.policyOf(np); p != nil {
			c.policies = append(c.policies, p)
		}
	}
	slices.SortFunc(c.policies, func(a, b *compiledPolicy) int {
		return cmp.Or(cmp.Compare(a.np.Namespace, b.np.Namespace), cmp.Compare(a.np.Name, b.np.Name))
	})
}

// podOf returns the policy view of a pod, or false for a pod that takes no
// part in policy: host-network pods (their IPs are the node's), pods that
// have finished, and pods without an IP yet.
func (c *compiler) podOf(p *corev1.Pod) (*pod, bool) {
	if p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return nil, false
	}
	pd := &pod{namespace: p.Namespace, name: p.Name, labels: labels.Set(p.Labels)}
	seen := map[netip.Addr]bool{}
	add := func(s string) {
		if s == "" {
			return
		}
		ip, err := netip.ParseAddr(s)
		if err != nil {
			c.problem("Pod "+pd.key(), fmt.Errorf("pod IP %q: %w", s, err))
			return
		}
		ip = ip.Unmap()
		if !seen[ip] {
			seen[ip] = true
			pd.ips = append(pd.ips, ip)
		}
	}
	add(p.Status.PodIP)
	for _, ip := range p.Status.PodIPs {
		add(ip.IP)
	}
	if len(pd.ips) == 0 {
		return nil, false
	}
	slices.SortFunc(pd.ips, netip.Addr.Compare)
	for _, ctr := range p.Spec.Containers {
		pd.ports = append(pd.ports, ctr.Ports...)
	}
	// Sidecars (init containers that keep running) serve ports too.
	for _, ctr := range p.Spec.InitContainers {
		if ctr.RestartPolicy != nil && *ctr.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			pd.ports = append(pd.ports, ctr.Ports...)
		}
	}
	return pd, true
}

func (c *compiler) policyOf(np *networkingv1.NetworkPolicy) *compiledPolicy {
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		c.problem(policyObject(np), fmt.Errorf("spec.podSelector: %w", err))
		return nil
	}
	p := &compiledPolicy{np: np, types: policyTypes(np)}
	for _, pd := range c.local {
		if pd.namespace == np.Namespace && sel.Matches(pd.labels) {
			p.targets = append(p.targets, pd)
		}
	}
	if len(p.targets) == 0 {
		return nil // selects nothing on this node: nothing to program
	}
	return p
}

// policyTypes is the set of directions a policy isolates. Sources default
// policyTypes already; the compiler applies the same defaulting again so a
// snapshot built by hand (tests, future sources) means the same thing.
func policyTypes(np *networkingv1.NetworkPolicy) map[networkingv1.PolicyType]bool {
	types := map[networkingv1.PolicyType]bool{}
	for _, t := range k8s.PolicyTypes(&np.Spec) {
		types[t] = true
	}
	return types
}

func policyObject(np *networkingv1.NetworkPolicy) string {
	return "NetworkPolicy " + np.Namespace + "/" + np.Name
}

// ICMPv6 neighbour discovery types (RFC 4861): router solicitation and
// advertisement, neighbour solicitation and advertisement, redirect.
const (
	icmpv6RouterSolicit = 133
	icmpv6Redirect      = 137
)

// forwardChain is the base chain: established traffic first, then the
// egress check of the sending pod, then the ingress check of the receiver.
func (c *compiler) forwardChain() *nft.Chain {
	ch := &nft.Chain{
		Name: "filter-forward",
		Hook: &nft.Hook{Type: "filter", Hook: "forward", Priority: c.opts.Priority, Policy: nft.Accept},
		Rules: []nft.Rule{{
			Exprs:   []nft.Expr{nft.CtStateEstablishedRelated{}, nft.Verdict{Kind: nft.Accept}},
			Comment: "policy is decided once per connection, on its first packet",
		}, {
			// Neighbour discovery is IPv6's ARP. Conntrack does not track
			// it, and on a bridge with br_netfilter it crosses the forward
			// hook between pods, so without this a pod isolated for ingress
			// could not be resolved by its own allowed peers.
			Exprs:   []nft.Expr{nft.ICMPv6TypeRange{First: icmpv6RouterSolicit, Last: icmpv6Redirect}, nft.Verdict{Kind: nft.Accept}},
			Comment: "IPv6 neighbour discovery is not subject to policy, as ARP is not",
		}},
	}
	for _, d := range []direction{egress, ingress} {
		for _, f := range families {
			ch.Rules = append(ch.Rules, nft.Rule{Exprs: []nft.Expr{
				nft.AddrVmap{Family: f, Field: d.podField, Map: podsMapName(d, f)},
			}})
		}
	}
	return ch
}

// podChain decides one direction for one isolated pod: allowed if any
// selecting policy's chain set our allow bit.
func (c *compiler) podChain(pd *pod, d direction, policyChains []string) *nft.Chain {
	ch := &nft.Chain{Name: chainName(d.name+"-pod", pd.namespace, pd.name)}
	ch.Rules = append(ch.Rules, nft.Rule{
		Exprs:   []nft.Expr{nft.SetMark{Clear: c.opts.MarkMask}},
		Comment: "only our policy chains may set our bits",
	})
	for _, ip := range pd.ips {
		ch.Rules = append(ch.Rules, nft.Rule{
			Exprs:   []nft.Expr{nft.AddrEq{Field: d.peerField, Addr: ip}, nft.Verdict{Kind: nft.Return}},
			Comment: "a pod may always reach itself",
		})
	}
	for _, pc := range policyChains {
		ch.Rules = append(ch.Rules, nft.Rule{Exprs: []nft.Expr{nft.Verdict{Kind: nft.Jump, Chain: pc}}})
	}
	ch.Rules = append(ch.Rules,
		nft.Rule{
			Exprs:   []nft.Expr{nft.MarkBitsSet{Bits: c.bit}, nft.SetMark{Clear: c.opts.MarkMask}, nft.Verdict{Kind: nft.Return}},
			Comment: "allowed: clear our bits and go on",
		},
		nft.Rule{
			Exprs:   []nft.Expr{nft.Verdict{Kind: nft.Drop}},
			Comment: truncateComment(fmt.Sprintf("%s: no %s rule allows", pd.key(), d.name)),
		})
	return ch
}

// policyChain compiles one direction of one policy. Every rule that matches
// sets our allow bit and returns to the pod chain.
func (c *compiler) policyChain(p *compiledPolicy, d direction) (*nft.Chain, []*nft.Set) {
	np := p.np
	ch := &nft.Chain{Name: chainName(d.name, np.Namespace, np.Name)}
	var sets []*nft.Set
	allow := []nft.Expr{nft.SetMark{Clear: c.opts.MarkMask, Set: c.bit}, nft.Verdict{Kind: nft.Return}}

	type ruleSpec struct {
		peers []networkingv1.NetworkPolicyPeer
		ports []networkingv1.NetworkPolicyPort
	}
	var specs []ruleSpec
	if d == ingress {
		for _, r := range np.Spec.Ingress {
			specs = append(specs, ruleSpec{r.From, r.Ports})
		}
	} else {
		for _, r := range np.Spec.Egress {
			specs = append(specs, ruleSpec{r.To, r.Ports})
		}
	}

	for i, r := range specs {
		where := fmt.Sprintf("%s[%d]", d.name, i)
		comment := truncateComment(fmt.Sprintf("%s/%s %s", np.Namespace, np.Name, where))
		cached := c.peers(np.Namespace, r.peers)
		peers, err := cached.set, cached.err
		if err != nil {
			c.problem(policyObject(np), fmt.Errorf("spec.%s: %w (rule ignored: it allows nothing)", where, err))
			continue
		}
		// A rule with peers matches them through a set per family that exists
		// even when empty today: the chain stays the same as pods come and
		// go. Rules with the same peers share one set (see peers), so a pod
		// that changes labels changes one set, not one per policy naming it.
		matchPeer := func(f nft.IPFamily) []nft.Expr {
			if peers == nil {
				return nil
			}
			name := cached.names[f]
			if !c.emitted[name] {
				c.emitted[name] = true
				sets = append(sets, &nft.Set{
					Name:     name,
					Comment:  truncateComment("peers " + cached.key),
					Key:      addrKey(f),
					Interval: true,
					Elements: cached.elements[f],
				})
			}
			return []nft.Expr{nft.AddrInSet{Family: f, Field: d.peerField, Set: name}}
		}

		ports := r.ports
		if len(ports) == 0 {
			ports = []networkingv1.NetworkPolicyPort{{}} // all protocols, all ports
		}
		for j, port := range ports {
			proto, ok := protoOf(port.Protocol, len(r.ports) > 0)
			if !ok {
				c.problem(policyObject(np), fmt.Errorf("spec.%s.ports[%d]: unsupported protocol %q (port ignored)", where, j, *port.Protocol))
				continue
			}
			if port.Port != nil && port.Port.Type == intstr.String {
				// Named port: resolved per destination pod. For ingress the
				// destinations are the policy's targets, so the set is the
				// policy's own; for egress they are the peers, so rules with
				// the same peers and port share it.
				for _, f := range families {
					name := fmt.Sprintf("%s-r%d-p%d-%s", ch.Name, i, j, familySuffix(f))
					setComment := fmt.Sprintf("%s port %s/%s", comment, port.Port.StrVal, proto)
					if d == egress {
						key := "port " + port.Port.StrVal + "/" + proto.String() + " of peers " + cached.key
						if peers == nil {
							key = "port " + port.Port.StrVal + "/" + proto.String() + " of every pod"
						}
						name, setComment = sharedName("port", key, f), key
					}
					if !c.emitted[name] {
						c.emitted[name] = true
						sets = append(sets, &nft.Set{
							Name:     name,
							Comment:  truncateComment(setComment),
							Key:      protoPortKey(f),
							Elements: c.namedPortElements(p, d, cached, f, port.Port.StrVal, proto),
						})
					}
					exprs := []nft.Expr{}
					if d == ingress {
						exprs = append(exprs, matchPeer(f)...)
					}
					exprs = append(exprs, nft.AddrProtoPortInSet{Family: f, Field: nft.Daddr, Set: name})
					ch.Rules = append(ch.Rules, nft.Rule{Exprs: append(exprs, allow...), Comment: comment})
				}
				continue
			}
			var portExprs []nft.Expr
			if proto != 0 {
				portExprs = append(portExprs, nft.L4ProtoEq{Proto: proto})
			}
			if port.Port != nil {
				first := uint16(port.Port.IntVal)
				last := first
				if port.EndPort != nil {
					last = uint16(*port.EndPort)
				}
				portExprs = append(portExprs, nft.DportRange{First: first, Last: last})
			}
			if peers == nil {
				ch.Rules = append(ch.Rules, nft.Rule{Exprs: append(portExprs, allow...), Comment: comment})
				continue
			}
			for _, f := range families {
				exprs := append(matchPeer(f), portExprs...)
				ch.Rules = append(ch.Rules, nft.Rule{Exprs: append(exprs, allow...), Comment: comment})
			}
		}
	}
	return ch, sets
}

// peers returns the memoized peer set of a rule's peers.
func (c *compiler) peers(policyNS string, peers []networkingv1.NetworkPolicyPeer) *cachedPeers {
	key := peerKey(policyNS, peers)
	if cp, ok := c.peerCache[key]; ok {
		return cp
	}
	set, pods, ipBlocks, err := c.peerSet(policyNS, peers)
	cp := &cachedPeers{key: key, set: set, pods: pods, ipBlocks: ipBlocks, err: err, names: map[nft.IPFamily]string{}, elements: map[nft.IPFamily][]nft.Element{}}
	if set != nil {
		for _, f := range families {
			cp.names[f] = sharedName("peers", key, f)
			cp.elements[f] = rangesOf(set, f)
		}
	}
	if c.peerCache == nil {
		c.peerCache = map[string]*cachedPeers{}
	}
	c.peerCache[key] = cp
	return cp
}

// sharedName names a set shared by every rule that uses the same key:
// `peers-<hash8>-v4`. The hash keeps the name short and stable; the set's
// comment spells the key out.
func sharedName(prefix, key string, f nft.IPFamily) string {
	sum := sha256.Sum256([]byte(key))
	return prefix + "-" + hex.EncodeToString(sum[:4]) + "-" + familySuffix(f)
}

// peerKey identifies what a list of peers selects. A pod selector without a
// namespace selector means the policy's own namespace, so that namespace is
// part of the key; otherwise peers read the same anywhere.
func peerKey(policyNS string, peers []networkingv1.NetworkPolicyPeer) string {
	var b strings.Builder
	for _, p := range peers {
		switch {
		case p.IPBlock != nil:
			fmt.Fprintf(&b, "ip:%s", p.IPBlock.CIDR)
			if len(p.IPBlock.Except) > 0 {
				fmt.Fprintf(&b, " except %s", strings.Join(p.IPBlock.Except, ","))
			}
			b.WriteString(";")
		default:
			ns := "own:" + policyNS
			if p.NamespaceSelector != nil {
				ns = "ns:" + metav1.FormatLabelSelector(p.NamespaceSelector)
			}
			pods := "all"
			if p.PodSelector != nil {
				pods = metav1.FormatLabelSelector(p.PodSelector)
			}
			fmt.Fprintf(&b, "%s|pod:%s;", ns, pods)
		}
	}
	return b.String()
}

// peerSet is the union of the addresses a rule's peers allow, or nil when
// the rule has no peers and so allows every address. Each ipBlock peer is
// its cidr minus its own excepts before the union: one peer's except never
// removes what another peer allows.
//
// It also returns the pods the selector peers name, and whether any peer is
// an ipBlock (whose pods are found only by address).
func (c *compiler) peerSet(policyNS string, peers []networkingv1.NetworkPolicyPeer) (*netipx.IPSet, []*pod, bool, error) {
	if len(peers) == 0 {
		return nil, nil, false, nil
	}
	var (
		all      netipx.IPSetBuilder
		selected []*pod
		ipBlocks bool
	)
	for k, peer := range peers {
		if peer.IPBlock != nil {
			block, err := ipBlockSet(peer.IPBlock)
			if err != nil {
				return nil, nil, false, fmt.Errorf("from/to[%d].ipBlock: %w", k, err)
			}
			all.AddSet(block)
			ipBlocks = true
			continue
		}
		pods, err := c.selectPeers(policyNS, peer)
		if err != nil {
			return nil, nil, false, fmt.Errorf("from/to[%d]: %w", k, err)
		}
		selected = append(selected, pods...)
		for _, pd := range pods {
			for _, ip := range pd.ips {
				all.Add(ip)
			}
		}
	}
	set, err := all.IPSet()
	return set, selected, ipBlocks, err
}

func ipBlockSet(b *networkingv1.IPBlock) (*netipx.IPSet, error) {
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return nil, fmt.Errorf("cidr %q: %w", b.CIDR, err)
	}
	var s netipx.IPSetBuilder
	s.AddPrefix(cidr.Masked())
	for _, e := range b.Except {
		ex, err := netip.ParsePrefix(e)
		if err != nil {
			return nil, fmt.Errorf("except %q: %w", e, err)
		}
		s.RemovePrefix(ex.Masked())
	}
	return s.IPSet()
}

// selectPeers returns the pods a selector peer names: podSelector alone
// means the policy's namespace, namespaceSelector alone means every pod of
// the matching namespaces, and both together must both match.
func (c *compiler) selectPeers(policyNS string, peer networkingv1.NetworkPolicyPeer) ([]*pod, error) {
	podSel := labels.Everything()
	if peer.PodSelector != nil {
		s, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
		if err != nil {
			return nil, fmt.Errorf("podSelector: %w", err)
		}
		podSel = s
	}
	var nsSel labels.Selector
	if peer.NamespaceSelector != nil {
		s, err := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
		if err != nil {
			return nil, fmt.Errorf("namespaceSelector: %w", err)
		}
		nsSel = s
	}
	namespaces := []string{policyNS}
	if nsSel != nil {
		namespaces = nil
		for _, ns := range c.nsNames {
			if nsSel.Matches(c.namespaceLabels(ns)) {
				namespaces = append(namespaces, ns)
			}
		}
	}
	var out []*pod
	for _, ns := range namespaces {
		for _, pd := range c.byNS[ns] {
			if podSel.Matches(pd.labels) {
				out = append(out, pd)
			}
		}
	}
	return out, nil
}

// namespaceLabels of a namespace the snapshot has no object for is just the
// name label the API server would have given it.
func (c *compiler) namespaceLabels(ns string) labels.Set {
	if l, ok := c.nsLabels[ns]; ok {
		return l
	}
	return labels.Set{corev1.LabelMetadataName: ns}
}

// namedPortElements resolves a named port against the pods that can be the
// destination: the policy's targets for ingress; for egress, every pod whose
// address the rule's peers allow (all pods when the rule has no peers). A
// pod that does not serve the name with this protocol contributes nothing,
// so the rule never widens to other ports.
func (c *compiler) namedPortElements(p *compiledPolicy, d direction, peers *cachedPeers, f nft.IPFamily, name string, proto nft.Proto) []nft.Element {
	isEgress := d.policyType == networkingv1.PolicyTypeEgress
	candidates := p.targets
	filter := false // by address, for ipBlock peers
	switch {
	case !isEgress:
	case peers.set == nil:
		candidates = c.pods
	case peers.ipBlocks:
		candidates, filter = c.pods, true
	default:
		candidates = peers.pods
	}
	var out []nft.Element
	for _, pd := range candidates {
		for _, cp := range pd.ports {
			if cp.Name != name || protoName(cp.Protocol) != proto {
				continue
			}
			for _, ip := range pd.ips {
				if nft.FamilyOf(ip) != f || (filter && !peers.set.Contains(ip)) {
					continue
				}
				out = append(out, nft.Element{Addr: ip, Proto: proto, Port: uint16(cp.ContainerPort)})
			}
		}
	}
	slices.SortFunc(out, func(a, b nft.Element) int {
		return cmp.Or(a.Addr.Compare(b.Addr), cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.Port, b.Port))
	})
	return slices.CompactFunc(out, func(a, b nft.Element) bool { return a == b })
}

// protoOf maps a policy port's protocol to nft. A port entry always has a
// protocol (TCP when unset, the API default); ok is false for an unknown one.
// hasPorts is false for the synthetic entry of a rule with no ports, which
// matches every protocol (proto 0).
func protoOf(p *corev1.Protocol, hasPorts bool) (nft.Proto, bool) {
	if !hasPorts {
		return 0, true
	}
	if p == nil {
		return nft.ProtoTCP, true
	}
	proto := protoName(*p)
	return proto, proto != 0
}

func protoName(p corev1.Protocol) nft.Proto {
	switch p {
	case corev1.ProtocolTCP, "":
		return nft.ProtoTCP
	case corev1.ProtocolUDP:
		return nft.ProtoUDP
	case corev1.ProtocolSCTP:
		return nft.ProtoSCTP
	}
	return 0
}

func rangesOf(s *netipx.IPSet, f nft.IPFamily) []nft.Element {
	var out []nft.Element
	for _, r := range s.Ranges() {
		if nft.FamilyOf(r.From()) != f {
			continue
		}
		e := nft.Element{Addr: r.From()}
		if r.To() != r.From() {
			e.Last = r.To()
		}
		out = append(out, e)
	}
	return out
}

func podsMapName(d direction, f nft.IPFamily) string {
	return d.name + "-pods-" + familySuffix(f)
}

func familyName(f nft.IPFamily) string {
	if f == nft.IPv6 {
		return "IPv6"
	}
	return "IPv4"
}

func familySuffix(f nft.IPFamily) string {
	if f == nft.IPv6 {
		return "v6"
	}
	return "v4"
}

func addrKey(f nft.IPFamily) nft.KeyType {
	if f == nft.IPv6 {
		return nft.KeyIPv6
	}
	return nft.KeyIPv4
}

func protoPortKey(f nft.IPFamily) nft.KeyType {
	if f == nft.IPv6 {
		return nft.KeyIPv6ProtoPort
	}
	return nft.KeyIPv4ProtoPort
}

// maxReadable bounds the namespace/name part of chain and set names. The
// kernel allows 256 bytes; the hash keeps truncated names unique and the
// same from one sync to the next.
const maxReadable = 64

// chainName is `<prefix>-<hash8>-<namespace>/<name>`, e.g.
// `ingress-1a2b3c4d-x/allow-web`.
func chainName(prefix, namespace, name string) string {
	readable := namespace + "/" + name
	sum := sha256.Sum256([]byte(prefix + "\x00" + readable))
	if len(readable) > maxReadable {
		readable = readable[:maxReadable]
	}
	return prefix + "-" + hex.EncodeToString(sum[:4]) + "-" + readable
}

// maxComment is the longest comment nft keeps (NFT_USERDATA_MAXLEN is 256,
// nft's own limit is 128).
const maxComment = 128

func truncateComment(s string) string {
	if len(s) > maxComment {
		return s[:maxComment]
	}
	return s
}
