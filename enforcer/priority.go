package enforcer

import (
	"fmt"
	"math"
	"sort"

	"github.com/nftpolicy/nftpolicy/nft"
)

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
// already on the forward hook in other tables: strictly ahead of every filter
// chain, and never equal to any chain's priority (equal priorities run in
// registration order, which is undefined in practice).
func ChoosePriority(others []nft.BaseChain, ourTable string) (int32, error) {
	taken := map[int64]bool{}
	p := int64(DefaultPriority)
	var first *nft.BaseChain
	for i, c := range others {
		if c.Family == nft.FamilyInet && c.Table == ourTable {
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
		if c.Family == nft.FamilyInet && c.Table == ourTable {
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
