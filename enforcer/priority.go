package enforcer

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"go.uber.org/zap"

	"github.com/nftpolicy/nftpolicy/nft"
)

// A PrioritySetting is the --priority flag: Auto, or a fixed Value. It is
// how the priority is configured; ResolvePriority, and nothing else, turns
// it into the number of our forward chain.
type PrioritySetting struct {
	Auto  bool
	Value int32
}

// ResolvePriority resolves a priority setting against the base chains now
// on the forward hook (those of table excepted), read through chains,
// logging a warning for an explicit value that is not ahead of them. With
// nil chains (dump, which never touches the kernel) it resolves as if no
// other chain were on the hook: Auto is DefaultPriority.
//
// It is the one place a setting is resolved: by a Syncer (see
// Syncer.forwardPriority), by apply and by dump.
func ResolvePriority(chains interface {
	BaseChains(hook string) ([]nft.BaseChain, error)
}, setting PrioritySetting, table string, log *zap.Logger) (int32, error) {
	var others []nft.BaseChain
	if chains != nil {
		var err error
		if others, err = chains.BaseChains("forward"); err != nil {
			return 0, fmt.Errorf("read forward chains: %w", err)
		}
	}
	if setting.Auto {
		p, err := ChoosePriority(others, table)
		var notAhead *NotAheadError
		if errors.As(err, &notAhead) {
			log.Warn("cannot run ahead of every forward chain; policy is still enforced", zap.String("warning", err.Error()))
			return p, nil
		}
		return p, err
	}
	for _, w := range CheckPriority(setting.Value, others, table) {
		log.Warn("explicit priority is not ahead of every forward chain", zap.String("warning", w))
	}
	return setting.Value, nil
}

// forwardPriority returns the priority of our forward chain, and the one
// it replaces: the one last resolved while it is current, otherwise
// (fresh, the first sync, the first after a drift check or after a failed
// resolution) ResolvePriority's now. Reading every chain of the netns to
// place ours costs as much as the rest of a small sync at 10k chains, so
// it is not done on every event. syncMu is held.
func (s *Syncer) forwardPriority(fresh bool) (prio, was int32, err error) {
	s.mu.Lock()
	prio, resolved := s.prio, s.prioResolved
	s.mu.Unlock()
	if resolved && !fresh {
		return prio, prio, nil
	}
	p, err := ResolvePriority(s.conn, s.priority, s.opts.Table, s.log)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		// Resolved again next time rather than keep a slot that may no
		// longer be ahead of everyone.
		s.prioResolved = false
		return 0, s.prio, err
	}
	was = s.prio
	s.prio, s.prioResolved = p, true
	return p, was, nil
}

// DefaultPriority is used when no other table has a filter chain on the
// forward hook: ahead of the standard filter priority (0), where kube-proxy
// 1.31+ and iptables-nft put theirs, with room for others between.
//
// There is no lower bound but the int32 range. Conntrack runs on the
// prerouting and output hooks (at priority -200 there), so every packet
// that reaches the forward hook already has its conntrack state, and `ct
// state established,related accept` works at any forward priority, -300
// included.
const DefaultPriority int32 = -5

// ChoosePriority picks the priority of our forward chain from the base chains
// already on the forward hook in other tables (our handover table, see
// nft.HandoverTable, is ours): strictly ahead of every filter
// chain, and never equal to any chain's priority (equal priorities run in
// registration order, which is undefined in practice).
func ChoosePriority(others []nft.BaseChain, ourTable string) (int32, error) {
	taken := map[int64]bool{}
	p := int64(DefaultPriority)
	var first *nft.BaseChain
	for i, c := range others {
		if nft.OursOrHandover(c, ourTable) {
			continue
		}
		taken[int64(c.Priority)] = true
		if c.Type == "filter" && int64(c.Priority) <= p {
			p = int64(c.Priority) - 1
			first = &others[i]
		}
	}
	for taken[p] {
		p--
	}
	if p < math.MinInt32 {
		// The lowest free priority then: right after the chains at the
		// bottom of the range, ahead of the rest.
		fallback := int64(math.MinInt32)
		for taken[fallback] {
			fallback++
		}
		return int32(fallback), &NotAheadError{Priority: int32(fallback), Chain: *first}
	}
	return int32(p), nil
}

// A NotAheadError reports that no free priority is ahead of Chain (another
// component took the very lowest ones). Priority is the lowest free one,
// which still enforces policy: in nftables an accept ends only its own base
// chain and a drop is final everywhere, so a chain that runs before ours
// can neither let past our drop nor be let past by our accept. Running
// ahead is about running before other components' marks and rejects, not
// about enforcement, so the daemon goes on at Priority and warns rather
// than stop following the cluster.
type NotAheadError struct {
	Priority int32
	Chain    nft.BaseChain
}

func (e *NotAheadError) Error() string {
	return fmt.Sprintf("no forward priority is ahead of %s %s chain %s (priority %d); using %d, right after it",
		e.Chain.Family, e.Chain.Table, e.Chain.Name, e.Chain.Priority, e.Priority)
}

// CheckPriority returns a warning for each other chain on the forward hook
// that an explicitly chosen priority does not run strictly ahead of, or
// shares a priority with.
func CheckPriority(p int32, others []nft.BaseChain, ourTable string) []string {
	var warnings []string
	sorted := append([]nft.BaseChain(nil), others...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Priority < sorted[j].Priority })
	for _, c := range sorted {
		if nft.OursOrHandover(c, ourTable) {
			continue
		}
		switch {
		case c.Priority == p:
			warnings = append(warnings, fmt.Sprintf("priority %d equals that of %s %s chain %s: their order is undefined", p, c.Family, c.Table, c.Name))
		case c.Type == "filter" && c.Priority < p:
			warnings = append(warnings, fmt.Sprintf("priority %d runs after %s %s chain %s (priority %d), whose accept may bypass policy", p, c.Family, c.Table, c.Name, c.Priority))
		}
	}
	return warnings
}
