package enforcer

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nftpolicy/nftpolicy/nft"
)

// Counting connections.
//
// With Options.Counters, every rule of a policy chain that allows (sets
// the allow bit) carries a rule counter, and so does every pod chain's
// final drop. Only the first packet of a connection reaches those rules
// (established traffic is accepted before), so they count connections:
// each policy that allows a connection counts it, since a pod chain jumps
// to every policy selecting the pod; a connection no policy allows is
// counted once, by the drop of its pod's chain. A rule counter is the
// cheapest count per packet nf_tables has (hack/bench/pps measures it).
//
// A rule counter starts at zero when its chain is written again (a policy
// changed) or the table is replaced (a repair, a restart), so the Syncer
// keeps, per rule, the value it last read and adds what grew to sums that
// only grow (ConnCounter). What a rewritten rule counted after the last
// read is lost: reading often (each scrape) keeps that small.

// A CountKey names what a counted chain counts, in one direction
// ("ingress" or "egress"): the connections the policy Namespace/Policy
// allowed, or, with Pod set instead, those of the isolated pod
// Namespace/Pod that no policy allowed.
//
// A ClusterNetworkPolicy's rule counts the connections it decided (Tier
// set, Namespace and Pod empty): every tier rule carries a counter, and
// the first packet of a connection meets at most one rule of a tier that
// decides it. A rule shared by several tier chains counts in all of them.
type CountKey struct {
	Namespace string
	Policy    string
	Pod       string
	Direction string
	// Allowed, with Pod: the connections the pod was allowed, counted by
	// a pod chain of the flat layout, which knows that some policy
	// allowed a connection but not which (see flat.go).
	Allowed bool
	// For a ClusterNetworkPolicy's rule: its tier ("admin", "baseline"),
	// index in spec.ingress or spec.egress, and action.
	Tier   string
	Rule   int
	Action string
}

// podChainDrop is the pod chain's final drop:
//
//	counter drop
//
// or `drop` without Options.Counters.
func (c *Compiler) podChainDrop() []nft.Expr {
	if c.opts.Counters {
		return []nft.Expr{nft.Counter{}, nft.Verdict{Kind: nft.Drop}}
	}
	return []nft.Expr{nft.Verdict{Kind: nft.Drop}}
}

// countedChains maps the name of every chain of the last table that
// counts to what it counts; nil without Options.Counters.
func (c *Compiler) countedChains() map[string]CountKey {
	if !c.opts.Counters {
		return nil
	}
	// Only where pod chains may walk do policy chains count: with
	// WalkPolicies, or in a namespace with flow logs. Else the policies
	// are not asked at all, as every sync keeps this map (keepCounted).
	walks := c.opts.WalkPolicies || (c.opts.FlowLog.Group != 0 && (c.opts.FlowLog.All || len(c.flowNS) > 0))
	out := make(map[string]CountKey, len(c.podChains))
	if walks {
		for _, p := range c.policies {
			if !p.active || c.flatLayout(p.key.namespace) {
				continue // no packet walks its chains: its pods' flat chains count
			}
			for _, d := range directions {
				if ch := p.chains[d.i]; ch != nil {
					out[ch.Name] = CountKey{Namespace: p.key.namespace, Policy: p.key.name, Direction: d.name}
				}
			}
		}
	}
	for k, pc := range c.podChains {
		if !pc.flat {
			out[pc.chain.Name] = CountKey{Namespace: k.pod.namespace, Pod: k.pod.name, Direction: k.dir}
		}
	}
	return out
}

// countedRules maps the name of every tier chain of the last table to
// what each of its rules counts, in chain order; nil without
// Options.Counters.
func (c *Compiler) countedRules() map[string][]countedRule {
	if !c.opts.Counters {
		return nil
	}
	out := make(map[string][]countedRule, len(c.groups))
	for _, pc := range c.podChains {
		if pc.flat { // see podChain
			out[pc.chain.Name] = pc.counts
		}
	}
	groups := slices.Collect(maps.Values(c.groups))
	for _, p := range c.pairs {
		groups = append(groups, p.clusterGroup)
	}
	for _, g := range groups {
		for name, refs := range g.refs {
			keys := make([]countedRule, len(refs))
			for i, r := range refs {
				keys[i] = countedRule{adds: CountKey{Policy: r.Policy, Direction: r.Direction, Tier: r.Tier, Rule: r.Rule, Action: r.Action}}
			}
			out[name] = keys
		}
	}
	return out
}

// isolatedPods counts the local pods isolated in at least one direction.
func (c *Compiler) isolatedPods() int {
	pods := map[objKey]bool{}
	for k := range c.podChains {
		pods[k.pod] = true
	}
	return len(pods)
}

// A countedRule is what one rule that counts counts: for adds, and
// against takes (a zero CountKey: none). A flat pod chain whose stage
// accepts at once (acceptsAtOnce) cannot count what it allows where it
// is allowed, in fragment chains that pods share; it counts what reaches
// its stage for the pod's allowed connections, and its self rules and its
// drop take what left it otherwise back out of them.
type countedRule struct{ adds, takes CountKey }

// A ConnCounter adds up the rule counters of counted chains, read one
// time after another, into sums that only grow while their chain is in
// the table. It is not safe for concurrent use.
type ConnCounter struct {
	last map[ruleID]uint64 // packets each rule had at the previous read
	// sums are what the rules counted for each key less what they
	// counted against it; totals what was last returned, which never
	// falls: a read sees one rule after another, so a packet may be
	// counted by the drop it reached and not yet by the stage it passed.
	sums   map[CountKey]int64
	totals map[CountKey]uint64
}

type ruleID struct{ table, rule uint64 }

// Add takes one read of the counters (rc) of the chains named in chains,
// and returns the sums so far of the keys of chains, each the packets its
// rules counted since this ConnCounter first saw them. A rule it has not
// seen (a new chain, a chain written again, a new table) counts from zero;
// the sum of a key whose chains are gone is forgotten, and starts from
// zero if it comes back.
func (cc *ConnCounter) Add(chains map[string]CountKey, rc *nft.RuleCounts) map[CountKey]uint64 {
	return cc.add(chains, nil, rc)
}

// add is Add with, beside chains that count as one, chains whose rules
// count each for its own key (rules: by chain, a key per counted rule in
// chain order).
func (cc *ConnCounter) add(chains map[string]CountKey, rules map[string][]countedRule, rc *nft.RuleCounts) map[CountKey]uint64 {
	if cc.totals == nil {
		cc.sums, cc.totals = map[CountKey]int64{}, map[CountKey]uint64{}
	}
	seen := make(map[ruleID]uint64, len(rc.Rules))
	index := map[string]int{} // the next counted rule of each chain of rules
	for _, r := range rc.Rules {
		key, ok := chains[r.Chain]
		counted := countedRule{adds: key}
		if keys, per := rules[r.Chain]; per {
			i := index[r.Chain]
			index[r.Chain]++
			if ok = i < len(keys); ok {
				counted = keys[i]
			}
		}
		if !ok {
			continue
		}
		id := ruleID{rc.Table, r.Handle}
		prev := cc.last[id]
		if r.Packets < prev {
			prev = 0 // not the rule seen before: count it whole
		}
		grew := int64(r.Packets - prev)
		if counted.adds != (CountKey{}) {
			cc.sums[counted.adds] += grew
		}
		if counted.takes != (CountKey{}) {
			cc.sums[counted.takes] -= grew
		}
		seen[id] = r.Packets
	}
	cc.last = seen
	current := make(map[CountKey]bool, len(chains))
	note := func(key CountKey) {
		if key == (CountKey{}) {
			return
		}
		current[key] = true
		if sum := cc.sums[key]; sum > 0 && uint64(sum) > cc.totals[key] {
			cc.totals[key] = uint64(sum)
		} else if _, ok := cc.totals[key]; !ok {
			cc.totals[key] = 0
		}
	}
	for _, key := range chains {
		note(key)
	}
	for _, keys := range rules {
		for _, r := range keys {
			note(r.adds)
			note(r.takes)
		}
	}
	for key := range cc.totals {
		if !current[key] {
			delete(cc.totals, key)
			delete(cc.sums, key)
		}
	}
	return maps.Clone(cc.totals)
}

// ruleCounterReader is what CountConnections needs of the kernel: an
// *nft.Conn (connKernel) has it; nft.Fake counts nothing.
type ruleCounterReader interface {
	RuleCounters(table string, chains []string) (*nft.RuleCounts, error)
}

// countedOf are what the chains and rules of one table count
// (Compiler.countedChains, Compiler.countedRules).
type countedOf struct {
	table  *nft.Table
	chains map[string]CountKey
	rules  map[string][]countedRule
}

// keepCounted keeps what the chains and rules of the table the kernel
// holds (last) count, if that is not kept yet, before the compiler moves
// on: a sync calls it first, so that a read after its write failed knows
// what the kernel's chains count. The compiler's state is last's while
// last is set (see Syncer.last). syncMu held.
func (s *Syncer) keepCounted() {
	s.mu.Lock()
	last := s.last
	s.mu.Unlock()
	if !s.opts.Counters || last == nil || s.counted.table == last {
		return
	}
	s.counted = countedOf{table: last, chains: s.compiler.countedChains(), rules: s.compiler.countedRules()}
}

// errNoCounters is CountConnections without Options.Counters.
var errNoCounters = errors.New("connection counters are off")

// CountConnections reads the rule counters of the counted chains of our
// table (Options.Counters) and returns, for each policy and isolated pod
// whose chain the last compiled table holds, the connections it allowed
// or was denied since this Syncer first saw its chain. It waits for a
// sync or a drift check under way.
func (s *Syncer) CountConnections() (map[CountKey]uint64, error) {
	if !s.opts.Counters {
		return nil, errNoCounters
	}
	r, ok := s.conn.(ruleCounterReader)
	if !ok {
		return nil, fmt.Errorf("cannot read counters from %T", s.conn)
	}
	// The counted rules say what each rule counts by its place in its
	// chain, and the counted chains which chains count, so both are read
	// against the table the kernel holds: the sync lock is held through
	// the read, and after a failed write (the kernel kept the table of
	// the last successful sync, whose chains may count otherwise than the
	// compiler's last: two hostile reviews' findings) those of that
	// table are used, as keepCounted kept them, or, if they were not
	// kept, nothing is read and the sums stay as they were.
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.mu.Lock()
	last, lastOK := s.last, s.lastOK
	s.mu.Unlock()
	switch {
	case last != nil:
		s.keepCounted()
	case lastOK != nil && s.counted.table == lastOK:
	default:
		s.countMu.Lock()
		defer s.countMu.Unlock()
		return maps.Clone(s.counts.totals), nil
	}
	chains, rules := s.counted.chains, s.counted.rules
	names := make([]string, 0, len(chains)+len(rules))
	for name := range chains {
		names = append(names, name)
	}
	for name := range rules {
		names = append(names, name)
	}
	rc, err := r.RuleCounters(s.opts.Table, names)
	if errors.Is(err, nft.ErrNoTable) {
		rc, err = &nft.RuleCounts{}, nil // nothing programmed (yet, or any more)
	}
	if err != nil {
		return nil, err
	}
	s.countMu.Lock()
	defer s.countMu.Unlock()
	return s.counts.add(chains, rules, rc), nil
}

// SyncStats are a Syncer's counts and the state of the table it last
// programmed, for metrics.
type SyncStats struct {
	Syncs       uint64 // successful syncs (Status's generation)
	FailedSyncs uint64
	// Refused counts the batches the kernel refused: a failed write that
	// is not a generation conflict (Conflicts) or an owner's refusal
	// (ErrOwned, ErrTakenOver).
	Refused   uint64
	Conflicts uint64
	ReadBacks uint64
	Repairs   uint64
	// Skipped counts the parts of snapshots the compiler left out
	// (Problem), each once when it appears.
	Skipped uint64
	// Table is the table of the last successful sync, at LastSuccess (nil
	// and zero before one); IsolatedPods counts the local pods it isolates.
	Table        *nft.Table
	LastSuccess  time.Time
	IsolatedPods int
}

// Stats returns the Syncer's counts so far.
func (s *Syncer) Stats() SyncStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SyncStats{
		Syncs: s.generation, FailedSyncs: s.failedSyncs, Refused: s.refused,
		Conflicts: s.conflicts, ReadBacks: s.readBacks, Repairs: s.repairs, Skipped: s.skipped,
		Table: s.lastOK, LastSuccess: s.lastSuccess, IsolatedPods: s.isolated,
	}
}

// OnSync makes the Syncer call f after every sync, with its result and
// error, outside its locks; f must not call Sync. Call it before Run.
func (s *Syncer) OnSync(f func(SyncResult, error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onSync = f
}

// countRefused counts a failed write as a refused batch, unless it is an
// owner's refusal.
func (s *Syncer) countRefused(err error) {
	if errors.Is(err, ErrOwned) || errors.Is(err, ErrTakenOver) || errors.Is(err, nft.ErrGenerationChanged) {
		return
	}
	s.mu.Lock()
	s.refused++
	s.mu.Unlock()
}
