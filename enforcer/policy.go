package enforcer

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// A policyState is one NetworkPolicy as compiled: its chains and the sets
// they use follow from the spec alone, so they are built once per spec; its
// targets follow from this node's pods.
type policyState struct {
	key objKey
	np  *networkingv1.NetworkPolicy

	sel         labels.Selector // nil when spec.podSelector does not parse
	selProblems []Problem
	// By direction (direction.i), arrays rather than maps: a small map
	// costs a few hundred bytes, and there are four per policy (12 MB at
	// 10k policies).
	types [2]bool // the directions it isolates
	// chains: one for each direction it isolates, else nil; with its
	// rules while active (in the table), its name alone while not.
	chains [2]*nft.Chain
	// flowIDs: with flowLogged, the identifier of each chain's log rules.
	flowIDs [2]string
	// ruleIndex: the index in spec.ingress or spec.egress of the rule
	// each chain rule compiles (see Explain).
	ruleIndex [2][]int
	// flat: its rules' port entries as the flat layout folds them (see
	// flat.go).
	flat [2][]flatRule

	ruleProblems []Problem   // rules or ports left out; reported while active
	peerUses     []peerUse   // shared peer sets its rules match against
	portUses     []portUse   // named-port sets its rules match against
	namedPeers   []namedPeer // its egress rules on named ports, with their peers

	targets []*pod // this node's pods it selects, sorted by name
	active  bool   // it selects a pod here: its chains and sets are in the table
	// flowLogged: its namespace was logged when it was planned, and its
	// chains log what they allow (see flowlog.go).
	flowLogged bool
}

// A peerUse names the shared peer set a rule matches.
type peerUse struct {
	key    string
	parsed *parsedPeers
}

// A portUse names the set of a named port: address . protocol . port of
// the pods serving that name with that protocol which can be the
// destination of a rule in that direction: this node's pods for ingress
// (the destination is a selected pod), peers for egress (which pods:
// namedports.go).
type portUse struct {
	name    string
	proto   nft.Proto
	ingress bool
}

// servedBy reports whether container port cp is u's name with u's
// protocol.
func (u portUse) servedBy(cp corev1.ContainerPort) bool {
	return cp.Name == u.name && protoName(cp.Protocol) == u.proto
}

func (p *policyState) problems() []Problem {
	if !p.active {
		return p.selProblems
	}
	return append(slices.Clip(p.selProblems), p.ruleProblems...)
}

// selects reports whether pd, as currently known, is one of p's targets.
func (p *policyState) selects(pd *pod) bool {
	i, ok := slices.BinarySearchFunc(p.targets, pd.key.name, podByName)
	return ok && p.targets[i] == pd
}

func policyObject(np *networkingv1.NetworkPolicy) string {
	return "NetworkPolicy " + np.Namespace + "/" + np.Name
}

// policyTypes is the set of directions a policy isolates. Sources default
// policyTypes already; the compiler applies the same defaulting again so a
// snapshot built by hand (tests, future sources) means the same thing.
func policyTypes(np *networkingv1.NetworkPolicy) [2]bool {
	var types [2]bool
	for _, t := range k8s.PolicyTypes(&np.Spec) {
		for _, d := range directions {
			if t == d.policyType {
				types[d.i] = true
			}
		}
	}
	return types
}

func (c *Compiler) syncPolicies(nps []*networkingv1.NetworkPolicy, ch *changes) {
	key := func(np *networkingv1.NetworkPolicy) objKey { return objKey{np.Namespace, np.Name} }
	c.policyList = walkChanges(c.policyList, nps, key, func(k objKey, _, np *networkingv1.NetworkPolicy) {
		p := c.policies[k]
		if p != nil && np != nil && equality.Semantic.DeepEqual(p.np.Spec, np.Spec) {
			p.np = np // a new version with the same spec: metadata only
			return
		}
		if p != nil {
			c.removePolicy(p, ch)
		}
		if np != nil {
			c.addPolicy(np, ch)
		}
	})
}

// addPolicy plans np and records it, for its targets to be selected.
func (c *Compiler) addPolicy(np *networkingv1.NetworkPolicy, ch *changes) {
	k := objKey{np.Namespace, np.Name}
	p := c.planPolicy(np)
	// An egress named-port set may hold every pod of the cluster serving
	// the name (300k elements at 150k pods: namedports.go says when): it
	// is held while a policy of the
	// cluster uses it, active here or not, so that it does not go with
	// the one pod of this node that keeps such a policy active and come
	// back whole, built and written again, when that pod does (61 MB and
	// 300k elements for one pod event). An ingress one holds this node's
	// pods alone, and follows activation (activate).
	for _, u := range p.portUses {
		if !u.ingress {
			c.acquirePortSets(u)
		}
	}
	c.holdNamedPorts(p.namedPeers)
	c.policies[k] = p
	byName := c.policiesByNS[k.namespace]
	i, _ := slices.BinarySearchFunc(byName, k.name, policyByName)
	c.policiesByNS[k.namespace] = slices.Insert(byName, i, p)
	if len(p.selProblems)+len(p.ruleProblems) > 0 {
		c.policyProblems[k] = p
	}
	ch.policies = append(ch.policies, p)
}

func policyByName(p *policyState, name string) int {
	switch {
	case p.key.name < name:
		return -1
	case p.key.name > name:
		return 1
	}
	return 0
}

func (c *Compiler) removePolicy(p *policyState, ch *changes) {
	if p.active {
		c.deactivate(p)
	}
	c.letGoNamedPorts(p.namedPeers)
	for _, u := range p.portUses {
		if !u.ingress {
			c.releasePortSets(u)
		}
	}
	// The names its chains and rules hold (see planPolicy) go with it.
	for _, d := range directions {
		if p.chains[d.i] != nil {
			c.releaseChainName(d.name, p.key.namespace, p.key.name)
			if p.flowLogged {
				c.retireFlowID(d.name, p.key.namespace, p.key.name)
			}
		}
	}
	for _, u := range p.peerUses {
		c.releasePeersName(u.key)
	}
	delete(c.policies, p.key)
	delete(c.policyProblems, p.key)
	byName := c.policiesByNS[p.key.namespace]
	if i, ok := slices.BinarySearchFunc(byName, p.key.name, policyByName); ok {
		byName = slices.Delete(byName, i, i+1)
	}
	if len(byName) == 0 {
		delete(c.policiesByNS, p.key.namespace)
	} else {
		c.policiesByNS[p.key.namespace] = byName
	}
	ch.podChainNS[p.key.namespace] = true
}

// refreshTargets re-selects the targets of new and changed policies and of
// every policy in a namespace where a pod of this node changed, and brings
// their chains and sets into or out of the table.
func (c *Compiler) refreshTargets(ch *changes) {
	for ns := range ch.targetsNS {
		for _, p := range c.policiesByNS[ns] {
			c.selectTargets(p, ch)
		}
	}
	for _, p := range ch.policies {
		if !ch.targetsNS[p.key.namespace] && c.policies[p.key] == p {
			c.selectTargets(p, ch)
		}
	}
}

func (c *Compiler) selectTargets(p *policyState, ch *changes) {
	var targets []*pod
	if p.sel != nil {
		for _, pd := range c.localByNS[p.key.namespace] {
			if pd.matchedBy(p.sel) {
				targets = append(targets, pd)
			}
		}
	}
	changed := !slices.Equal(targets, p.targets)
	p.targets = targets
	active := len(targets) > 0
	switch {
	case active && !p.active:
		c.activate(p)
	case !active && p.active:
		c.deactivate(p)
	case !changed:
		return
	}
	ch.podChainNS[p.key.namespace] = true
}

// activate puts p's chains and sets into the table.
func (c *Compiler) activate(p *policyState) {
	p.active = true
	for _, d := range directions {
		if p.chains[d.i] != nil {
			p.chains[d.i] = c.withRules(p, d)
			c.putChain(chainSortKey(1, p.key, d), p.chains[d.i])
		}
	}
	for _, u := range p.peerUses {
		c.acquirePeers(u.key, u.parsed)
	}
	for _, u := range p.portUses {
		if u.ingress { // egress ones follow the policy itself (addPolicy)
			c.acquirePortSets(u)
		}
	}
	c.addNamedParts(p.namedPeers)
}

// deactivate takes p's chains and sets out of the table.
func (c *Compiler) deactivate(p *policyState) {
	p.active = false
	for _, d := range directions {
		if p.chains[d.i] != nil {
			c.dropChain(p.chains[d.i].Name)
			p.chains[d.i] = withoutRules(p, d)
		}
	}
	c.removeNamedParts(p.namedPeers)
	for _, u := range p.peerUses {
		c.releasePeers(u.key)
	}
	for _, u := range p.portUses {
		if u.ingress {
			c.releasePortSets(u)
		}
	}
}

// planPolicy builds what follows from a policy's spec: its selector, the
// names of its chains, the sets its rules use, and what cannot be
// compiled. The chains' rules are built when the policy becomes active
// (activate): most policies of a large cluster select no pod of a given
// node, and their rules were most of the compiler's policy state (36 of
// 40 MB at 10k policies, 150k pods and 30 pods a node).
func (c *Compiler) planPolicy(np *networkingv1.NetworkPolicy) *policyState {
	p := &policyState{key: objKey{np.Namespace, np.Name}, np: np, types: policyTypes(np)}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		p.selProblems = []Problem{{Object: policyObject(np), Err: fmt.Errorf("spec.podSelector: %w", err)}}
		return p
	}
	p.sel = sel
	p.flowLogged = c.flowLogged(np.Namespace)
	for _, d := range directions {
		if p.types[d.i] {
			p.chains[d.i] = &nft.Chain{Name: c.acquireChainName(d.name, np.Namespace, np.Name)}
			if p.flowLogged {
				p.flowIDs[d.i] = c.acquireFlowID(d.name, np.Namespace, np.Name)
			}
			c.policyRules(p, d, true)
		}
	}
	return p
}

// withRules returns p's chain for d with its rules, for the table.
func (c *Compiler) withRules(p *policyState, d direction) *nft.Chain {
	return &nft.Chain{Name: p.chains[d.i].Name, Rules: c.policyRules(p, d, false)}
}

// withoutRules returns p's chain for d without its rules (its name alone),
// for a policy out of the table. Like every part of a table, a chain is
// never edited once made: the previous table may hold the one with rules.
func withoutRules(p *policyState, d direction) *nft.Chain {
	return &nft.Chain{Name: p.chains[d.i].Name}
}

// policyRules compiles one direction of one policy. Every rule that
// matches sets our allow bit and returns to the pod chain.
//
// It walks the spec twice in a policy's life, the same way each time.
// With plan (planPolicy, once per spec), it records what the rules need
// whether the policy is active or not, and builds no rule: the peer and
// named-port sets they use, the flat layout's entries, the spec rule of
// each chain rule (ruleIndex) and the rules and ports it leaves out.
// Without (activate), it only builds the rules, from the names plan
// acquired.
func (c *Compiler) policyRules(p *policyState, d direction, plan bool) []nft.Rule {
	np := p.np
	allow := []nft.Expr{nft.SetMark{Clear: c.opts.MarkMask, Set: c.bit}, nft.Verdict{Kind: nft.Return}}
	if c.opts.Counters {
		allow = append([]nft.Expr{nft.Counter{}}, allow...) // see countedChains
	}
	flowID := p.flowIDs[d.i] // with flow logs, each allowing rule is logged first (allowLogRule)
	problem := func(err error) {
		if plan {
			p.ruleProblems = append(p.ruleProblems, Problem{Object: policyObject(np), Err: err})
		}
	}

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

	var rules []nft.Rule
	var index []int // the spec rule of each chain rule
	for i, r := range specs {
		where := fmt.Sprintf("%s[%d]", d.name, i)
		var comment string
		if !plan {
			comment = truncateComment(fmt.Sprintf("%s/%s %s", np.Namespace, np.Name, where))
		}
		// add adds a chain rule matching exprs (plan: counts it).
		add := func(exprs func() []nft.Expr) {
			index = append(index, i)
			if flowID != "" {
				index = append(index, i)
			}
			if plan {
				return
			}
			match := exprs()
			if flowID != "" {
				rules = append(rules, c.allowLogRule(match, flowID, i, comment))
			}
			rules = append(rules, nft.Rule{Exprs: append(slices.Clip(match), allow...), Comment: comment})
		}
		parsed, err := parsePeers(np.Namespace, r.peers)
		if err != nil {
			problem(fmt.Errorf("spec.%s: %w (rule ignored: it allows nothing)", where, err))
			continue
		}
		var key string
		if parsed != nil {
			key = peerKey(np.Namespace, r.peers)
		}
		// A rule with peers matches them through a set per family that exists
		// even when empty today: the chain stays the same as pods come and
		// go. Rules with the same peers share one set (see peerSets), so a pod
		// that changes labels changes one set, not one per policy naming it.
		usedPeers := false
		usePeers := func() {
			if parsed == nil || usedPeers || !plan {
				return
			}
			usedPeers = true
			p.peerUses = append(p.peerUses, peerUse{key: key, parsed: parsed})
			c.acquirePeersName(key)
		}
		matchPeer := func(f nft.IPFamily) []nft.Expr {
			if parsed == nil {
				return nil
			}
			return []nft.Expr{nft.AddrInSet{Family: f, Field: d.peerField, Set: c.peersSetName(key, f)}}
		}

		ports := r.ports
		if len(ports) == 0 {
			ports = []networkingv1.NetworkPolicyPort{{}} // all protocols, all ports
		}
		for j, port := range ports {
			proto, ok := protoOf(port.Protocol, len(r.ports) > 0)
			if !ok {
				problem(fmt.Errorf("spec.%s.ports[%d]: unsupported protocol %q (port ignored)", where, j, *port.Protocol))
				continue
			}
			if port.Port != nil && port.Port.Type == intstr.String {
				// Named port: resolved per destination pod. The set holds
				// the pods serving the name with this protocol that can be
				// destinations, which is exact for both directions: for
				// ingress the destination is the selected pod whose chain
				// we are in, for egress it is a peer, which the peer set
				// checks.
				if msgs := validation.IsValidPortName(port.Port.StrVal); len(msgs) > 0 {
					problem(fmt.Errorf("spec.%s.ports[%d]: port %q: %s (port ignored)", where, j, port.Port.StrVal, strings.Join(msgs, "; ")))
					continue
				}
				use := portUse{name: port.Port.StrVal, proto: proto, ingress: d == ingress}
				if plan {
					p.portUses = append(p.portUses, use)
					if d == egress {
						p.namedPeers = append(p.namedPeers, namedPeerOf(use, key, parsed))
					}
					p.flat[d.i] = append(p.flat[d.i], flatRule{key: key, parsed: parsed, proto: proto, named: use.name})
				}
				usePeers()
				for _, f := range families {
					add(func() []nft.Expr {
						return append(matchPeer(f), nft.AddrProtoPortInSet{Family: f, Field: nft.Daddr, Set: namedPortSetName(use, f)})
					})
				}
				continue
			}
			fr := flatRule{key: key, parsed: parsed, proto: proto, last: 65535}
			if port.Port != nil {
				fr.first = uint16(port.Port.IntVal)
				fr.last = fr.first
				if port.EndPort != nil {
					fr.last = uint16(*port.EndPort)
				}
			}
			if plan {
				p.flat[d.i] = append(p.flat[d.i], fr)
			}
			var portExprs []nft.Expr
			if proto != 0 {
				portExprs = append(portExprs, nft.L4ProtoEq{Proto: proto})
			}
			if port.Port != nil {
				portExprs = append(portExprs, nft.DportRange{First: fr.first, Last: fr.last})
			}
			if parsed == nil {
				add(func() []nft.Expr { return portExprs })
				continue
			}
			usePeers()
			for _, f := range families {
				add(func() []nft.Expr { return append(matchPeer(f), portExprs...) })
			}
		}
	}
	if plan {
		p.ruleIndex[d.i] = index
	}
	return rules
}
