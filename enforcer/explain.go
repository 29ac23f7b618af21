package enforcer

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	policyv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/nftpolicy/nftpolicy/nft"
)

// An Explanation says why the first packet of a connection gets the
// verdict it gets on this node (`nftpolicy explain`): the verdict of the
// compiled table, whom the addresses belong to, and per direction judged
// here whether the pod is isolated, by which policies, and every rule of
// theirs that allows the connection. It is read from the table the daemon
// programs and its tracer (nft.Tracer), not from the policies, so it
// explains what the kernel does.
type Explanation struct {
	Verdict  nft.VerdictKind // Accept or Drop
	From, To Endpoint
	// Egress is the source pod's egress check, Ingress the destination
	// pod's ingress check; nil when that end is no pod of this node (the
	// check belongs to its own node, or to nobody).
	Egress, Ingress *Side
	// Path is each rule that decided on the way, "chain: rule", as
	// nft.TraceResult has it.
	Path []string
}

// An Endpoint is one end of the connection.
type Endpoint struct {
	Addr  netip.Addr
	Pod   string // "namespace/name"; "" when no pod taking part has Addr
	Local bool   // the pod is on this node
	// OwnNode: the address is this node's (its Node's status gives it).
	OwnNode bool
	// Node is the pod's node, when the caller knows it (the compiler
	// knows only whether it is this one).
	Node string
}

func (e Endpoint) String() string {
	switch {
	case e.OwnNode:
		return e.Addr.String() + " (this node)"
	case e.Pod == "":
		return e.Addr.String() + " (no pod: not selectable by policy, matched by ipBlock only)"
	case e.Local:
		return fmt.Sprintf("%s (pod %s, on this node)", e.Addr, e.Pod)
	case e.Node == "":
		return fmt.Sprintf("%s (pod %s, on another node)", e.Addr, e.Pod)
	}
	return fmt.Sprintf("%s (pod %s, on node %s)", e.Addr, e.Pod, e.Node)
}

// A Side is one direction's check of the pod at one end.
type Side struct {
	Direction string // "egress" or "ingress"
	Pod       string
	// Policies are the policies isolating the pod in this direction, in
	// the order its chain jumps to them; none means it is not isolated
	// and the direction allows everything.
	Policies []string
	// Allows is every rule of those policies that allows the connection.
	Allows []RuleRef
	// Self: allowed as the pod reaching itself (through a Service).
	Self bool
	// Quarantined: the pod's labels are not known (k8s.Snapshot.Quarantined),
	// so it is isolated with nothing allowed, whatever selects it.
	Quarantined bool

	// Admin and Baseline are the ClusterNetworkPolicies judging the pod
	// in this direction, tier by tier, in the order judged; AdminRule and
	// BaselineRule the first rule of each tier matching the connection
	// (nil: none does), whether or not the packet got that far.
	Admin, Baseline         []string
	AdminRule, BaselineRule *ClusterRuleRef

	// OwnNode: the connection goes to this node, which NetworkPolicy
	// always allows a pod; only cluster policies judge it.
	OwnNode bool
}

// Isolated reports whether a NetworkPolicy selects the pod for this
// direction, or it is quarantined.
func (s *Side) Isolated() bool { return len(s.Policies) > 0 || s.Quarantined }

// Allowed reports whether this direction lets the connection through.
func (s *Side) Allowed() bool {
	switch s.DecidedBy() {
	case "self", "default":
		return true
	case tierAdmin:
		return s.AdminRule.Action == string(policyv1beta1.ClusterNetworkPolicyRuleActionAccept)
	case tierBaseline:
		return s.BaselineRule.Action != string(policyv1beta1.ClusterNetworkPolicyRuleActionDeny)
	}
	return s.OwnNode || len(s.Allows) > 0
}

// DecidedBy names the stage that decided this direction: "self" (the pod
// reaching itself), "admin" (an Accept or Deny of the Admin tier),
// "networkpolicy" (NetworkPolicy, or quarantine), "baseline" (a rule of the
// Baseline tier) or "default" (nothing isolates it: allowed).
func (s *Side) DecidedBy() string {
	switch {
	case s.Self:
		return "self"
	case s.AdminRule != nil && s.AdminRule.Action != string(policyv1beta1.ClusterNetworkPolicyRuleActionPass):
		return tierAdmin
	case s.Isolated() && !(s.OwnNode && s.Quarantined):
		// To its own node a quarantined pod's true policies are not
		// known: the baseline may apply.
		return "networkpolicy"
	case s.BaselineRule != nil:
		return tierBaseline
	}
	return "default"
}

// A RuleRef is one rule of a policy: spec.ingress[Rule] or spec.egress[Rule].
type RuleRef struct {
	Policy    string // "namespace/name"
	Direction string
	Rule      int
}

func (r RuleRef) String() string { return fmt.Sprintf("%s %s[%d]", r.Policy, r.Direction, r.Rule) }

// Explain explains p, the first packet of a connection, through table,
// the table the last Compile returned.
//
// A connection to an address of this node crosses the input hook, not
// forward (see node.go): it is traced there, and only the source's egress
// is judged.
func (c *Compiler) Explain(table *nft.Table, p nft.Packet) (*Explanation, error) {
	tracer := nft.NewTracer(table)
	ownNode := c.ownNodeAddr(p.Dst)
	x := &Explanation{From: c.endpoint(p.Src), To: c.endpoint(p.Dst)}
	x.To.OwnNode = ownNode
	switch {
	case !ownNode:
		res, err := tracer.Trace(forwardChainName(), p)
		if err != nil {
			return nil, err
		}
		x.Verdict, x.Path = res.Verdict, res.Path
	case slices.ContainsFunc(table.Chains, func(ch *nft.Chain) bool { return ch.Name == inputChainName() }):
		res, err := tracer.Trace(inputChainName(), p)
		if err != nil {
			return nil, err
		}
		x.Verdict, x.Path = res.Verdict, res.Path
	default:
		x.Verdict = nft.Accept // no input chain: nothing judges it
	}
	byChain := map[string]*policyState{}
	for _, ps := range c.policies {
		if !ps.active {
			continue
		}
		for _, ch := range ps.chains {
			if ch != nil {
				byChain[ch.Name] = ps
			}
		}
	}
	side := func(end Endpoint, d direction) (*Side, error) {
		if !end.Local {
			return nil, nil
		}
		ns, name, _ := strings.Cut(end.Pod, "/")
		s := &Side{Direction: d.name, Pod: end.Pod}
		pc := c.podChains[podChainKey{objKey{ns, name}, d.name}]
		if pc == nil {
			return s, nil
		}
		s.Quarantined = pc.pod.quarantined
		// The tiers are read from the chain the packet takes: the pod's
		// chain for connections to its own node, where NetworkPolicy
		// does not decide, may enter the Baseline tier where the forward
		// one does not.
		tiersFrom := pc.chain
		if ownNode {
			tiersFrom = nil
			if nc := c.nodeChains[pc.pod.key]; nc != nil {
				tiersFrom = nc.chain
			}
		}
		for i, r := range chainRules(tiersFrom) {
			groups := c.tierGroups(r)
			if groups == nil {
				continue
			}
			ok, err := tracer.Matches(tiersFrom.Name, i, p)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue // the other family's chain
			}
			for _, g := range groups {
				ref, err := firstMatching(tracer, g, p)
				if err != nil {
					return nil, err
				}
				if g.tier == tierAdmin {
					s.Admin, s.AdminRule = g.memberNames(), ref
				} else {
					s.Baseline, s.BaselineRule = g.memberNames(), ref
				}
			}
		}
		// allows adds ps to the policies judging the pod, and each of its
		// rules that matches p to those allowing the connection: read
		// from its chain, which the table holds whichever layout the pod
		// chain uses (a flat one asks the union of them all at once).
		allows := func(ps *policyState) error {
			s.Policies = append(s.Policies, ps.key.String())
			chain := ps.chains[d.i]
			for j := range chain.Rules {
				ok, err := tracer.Matches(chain.Name, j, p)
				if err != nil {
					return err
				}
				ref := RuleRef{Policy: ps.key.String(), Direction: d.name, Rule: ps.ruleIndex[d.i][j]}
				if ok && !slices.Contains(s.Allows, ref) {
					s.Allows = append(s.Allows, ref)
				}
			}
			return nil
		}
		if pc.flat {
			for _, ps := range pc.policies {
				if err := allows(ps); err != nil {
					return nil, err
				}
			}
		}
		for i, r := range pc.chain.Rules {
			if c.tierGroups(r) != nil {
				continue
			}
			if v, ok := jumpTarget(r); ok && !pc.flat {
				ps := byChain[v]
				if ps == nil {
					return nil, fmt.Errorf("explain: chain %s of %s jumps to %s, which is no policy's", pc.chain.Name, end.Pod, v)
				}
				if err := allows(ps); err != nil {
					return nil, err
				}
				continue
			}
			if isSelfRule(r) {
				ok, err := tracer.Matches(pc.chain.Name, i, p)
				if err != nil {
					return nil, err
				}
				s.Self = s.Self || ok
			}
		}
		return s, nil
	}
	var err error
	if x.Egress, err = side(x.From, egress); err != nil {
		return nil, err
	}
	if ownNode {
		if x.Egress != nil {
			x.Egress.OwnNode = true
		}
		return x, nil
	}
	if x.Ingress, err = side(x.To, ingress); err != nil {
		return nil, err
	}
	return x, nil
}

func chainRules(ch *nft.Chain) []nft.Rule {
	if ch == nil {
		return nil
	}
	return ch.Rules
}

// ownNodeAddr reports whether a is an address of this node, as its Node's
// status gives them, and no pod's: a pod holding it (a careless manifest)
// is taken for the destination, as packets to a pod's address are
// forwarded to it.
func (c *Compiler) ownNodeAddr(a netip.Addr) bool {
	a = a.Unmap()
	return c.claims.winner(a) == nil && slices.Contains(c.nodes[c.opts.Node].addrs, a)
}

// endpoint resolves an address to the pod holding it, as the compiler
// gave addresses out (see addressClaims).
func (c *Compiler) endpoint(a netip.Addr) Endpoint {
	e := Endpoint{Addr: a}
	if cl := c.claims.winner(a.Unmap()); cl != nil {
		e.Pod, e.Local = cl.view.key.String(), cl.view.local
	}
	return e
}

// tierGroups are the groups whose tier chain a pod chain's rule jumps or
// goes to, if it is one (see clusterGroup.enter): one group, or the two of
// a pair.
func (c *Compiler) tierGroups(r nft.Rule) []*clusterGroup {
	n := len(r.Exprs)
	if n == 0 || n > 2 {
		return nil
	}
	if _, ok := r.Exprs[0].(nft.NfprotoEq); n == 2 && !ok {
		return nil
	}
	v, ok := r.Exprs[n-1].(nft.Verdict)
	if !ok || (v.Kind != nft.Jump && v.Kind != nft.Goto) {
		return nil
	}
	entered := func(g *clusterGroup) bool {
		return slices.ContainsFunc(g.chains, func(ch *nft.Chain) bool { return ch != nil && ch.Name == v.Chain })
	}
	for _, g := range c.groups {
		if entered(g) {
			return []*clusterGroup{g}
		}
	}
	for _, p := range c.pairs {
		if entered(p.clusterGroup) {
			if p.baseline == nil {
				return []*clusterGroup{p.admin}
			}
			return []*clusterGroup{p.admin, p.baseline}
		}
	}
	return nil
}

// firstMatching is the rule of a tier that decides p: the first of the
// chain of p's class (see layoutGroup) that matches it.
func firstMatching(tracer *nft.Tracer, g *clusterGroup, p nft.Packet) (*ClusterRuleRef, error) {
	peer := p.Src
	if g.dir == egress {
		peer = p.Dst
	}
	class := g.classOf(nft.FamilyOf(peer), peer)
	for j, ref := range g.refs[class] {
		ok, err := tracer.Matches(class, j, p)
		if err != nil {
			return nil, err
		}
		if ok {
			return &ref, nil
		}
	}
	return nil, nil
}

func (g *clusterGroup) memberNames() []string {
	out := make([]string, len(g.members))
	for i, m := range g.members {
		out[i] = m.groupName()
	}
	return out
}

// jumpTarget is the chain a pod chain's rule jumps to, if it is a jump.
func jumpTarget(r nft.Rule) (string, bool) {
	if len(r.Exprs) == 1 {
		if v, ok := r.Exprs[0].(nft.Verdict); ok && v.Kind == nft.Jump {
			return v.Chain, true
		}
	}
	return "", false
}

// isSelfRule reports whether a pod chain's rule is the one letting the pod
// reach itself (see Compiler.podChain).
func isSelfRule(r nft.Rule) bool {
	return slices.ContainsFunc(r.Exprs, func(e nft.Expr) bool { _, ok := e.(nft.CtStatusDNAT); return ok })
}

// writeTiers prints a side judged by ClusterNetworkPolicies: each stage
// in order, up to the one that decided.
func (s *Side) writeTiers(b *strings.Builder) {
	decided := s.DecidedBy()
	verdict := "dropped"
	if s.Allowed() {
		verdict = "allowed"
	}
	fmt.Fprintf(b, "%s: %s\n", s.Direction, s.Pod)
	if decided == "self" {
		fmt.Fprintf(b, "  %s: the pod reaching itself through a Service, which no policy judges\n", verdict)
		return
	}
	if len(s.Admin) > 0 {
		fmt.Fprintf(b, "  admin tier (%s): ", strings.Join(s.Admin, ", "))
		switch {
		case s.AdminRule == nil:
			fmt.Fprintf(b, "no rule matches\n")
		case decided == tierAdmin:
			fmt.Fprintf(b, "%s\n  %s by the admin tier\n", s.AdminRule, verdict)
			return
		default:
			fmt.Fprintf(b, "%s: on to NetworkPolicy\n", s.AdminRule)
		}
	}
	if decided == "networkpolicy" {
		switch {
		case s.Quarantined:
			fmt.Fprintf(b, "  quarantined: its labels are not known (a rejected manifest): nothing allowed\n")
		default:
			if s.OwnNode {
				fmt.Fprintf(b, "  NetworkPolicy: isolated by %s, which always allows the pod's own node\n", strings.Join(s.Policies, ", "))
				break
			}
			fmt.Fprintf(b, "  NetworkPolicy: isolated by %s\n", strings.Join(s.Policies, ", "))
			for _, r := range s.Allows {
				fmt.Fprintf(b, "    allowed by %s\n", r)
			}
		}
		fmt.Fprintf(b, "  %s by NetworkPolicy\n", verdict)
		return
	}
	fmt.Fprintf(b, "  NetworkPolicy: none isolates it\n")
	if len(s.Baseline) > 0 {
		fmt.Fprintf(b, "  baseline tier (%s): ", strings.Join(s.Baseline, ", "))
		if s.BaselineRule == nil {
			fmt.Fprintf(b, "no rule matches\n")
		} else {
			fmt.Fprintf(b, "%s\n", s.BaselineRule)
		}
	}
	if decided == tierBaseline {
		fmt.Fprintf(b, "  %s by the baseline tier\n", verdict)
		return
	}
	fmt.Fprintf(b, "  %s: the default\n", verdict)
}

// String is the explanation as `nftpolicy explain` prints it.
func (x *Explanation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "verdict: %s\n", x.Verdict)
	fmt.Fprintf(&b, "from:    %s\n", x.From)
	fmt.Fprintf(&b, "to:      %s\n", x.To)
	for _, s := range []struct {
		side *Side
		end  Endpoint
		name string
	}{{x.Egress, x.From, "egress"}, {x.Ingress, x.To, "ingress"}} {
		switch {
		case s.side == nil && s.end.Pod == "":
			fmt.Fprintf(&b, "%s: %s is no pod; nothing to check\n", s.name, s.end.Addr)
		case s.side == nil:
			fmt.Fprintf(&b, "%s: %s is not on this node; its own node checks %s\n", s.name, s.end.Pod, s.name)
		case len(s.side.Admin)+len(s.side.Baseline) > 0:
			s.side.writeTiers(&b)
		case s.side.OwnNode:
			fmt.Fprintf(&b, "%s: %s reaches its own node, which NetworkPolicy always allows and no cluster policy judges: allowed\n", s.name, s.side.Pod)
		case !s.side.Isolated():
			fmt.Fprintf(&b, "%s: %s is not isolated for %s (no policy selects it): allowed\n", s.name, s.side.Pod, s.name)
		case s.side.Quarantined:
			fmt.Fprintf(&b, "%s: %s is quarantined: its labels are not known (a rejected manifest), so it is isolated for %s with nothing allowed\n", s.name, s.side.Pod, s.name)
			if s.side.Self {
				fmt.Fprintf(&b, "  allowed: the pod reaching itself through a Service\n")
			} else {
				fmt.Fprintf(&b, "  dropped\n")
			}
		default:
			fmt.Fprintf(&b, "%s: %s is isolated for %s by %s\n", s.name, s.side.Pod, s.name, strings.Join(s.side.Policies, ", "))
			for _, r := range s.side.Allows {
				fmt.Fprintf(&b, "  allowed by %s\n", r)
			}
			if s.side.Self {
				fmt.Fprintf(&b, "  allowed: the pod reaching itself through a Service\n")
			}
			if !s.side.Allowed() {
				fmt.Fprintf(&b, "  no rule of these policies allows it: dropped\n")
			}
		}
	}
	if x.Verdict == nft.Drop && (x.Egress == nil || x.Egress.Allowed()) && (x.Ingress == nil || x.Ingress.Allowed()) {
		// Dropped ahead of the pod checks: an unknown address under
		// --default-deny-unknown, or a revoked connection.
		fmt.Fprintf(&b, "dropped ahead of the pod checks (an address of a pod CIDR that is no known pod, under --default-deny-unknown, or a revoked connection)\n")
	}
	if len(x.Path) > 0 {
		fmt.Fprintf(&b, "rules that decided:\n")
		for _, p := range x.Path {
			fmt.Fprintf(&b, "  %s\n", p)
		}
	}
	return b.String()
}
