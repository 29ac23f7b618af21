package enforcer

import (
	"fmt"
	"sort"

	"github.com/nftpolicy/nftpolicy/nft"
)

// Priority bounds for the forward base chain. Conntrack runs at -200; a
// filter chain ahead of it would see packets without conntrack state, and
// `ct state established,related accept` would never match.
const (
	conntrackPriority = -200
	// DefaultPriority is used when no other table has a filter chain on the
	// forward hook: ahead of the standard filter priority (0), where kube-proxy
	// 1.31+ and iptables-nft put theirs, with room for others between.
	DefaultPriority int32 = -5
)

// ChoosePriority picks the priority of our forward chain from the base chains
// already on the forward hook in other tables: strictly ahead of every filter
// chain, never equal to any chain's priority (equal priorities run in
// registration order), and above conntrack.
func ChoosePriority(others []nft.BaseChain, ourTable string) (int32, error) {
	taken := map[int32]bool{}
	p := DefaultPriority
	var first *nft.BaseChain
	for i, c := range others {
		if c.Family == nft.FamilyInet && c.Table == ourTable {
			continue
		}
		taken[c.Priority] = true
		if c.Type == "filter" && c.Priority <= p {
			p = c.Priority - 1
			first = &others[i]
		}
	}
	for taken[p] {
		p--
	}
	if p <= conntrackPriority {
		if first == nil {
			return 0, fmt.Errorf("every forward priority between conntrack (%d) and %d is taken", conntrackPriority, DefaultPriority)
		}
		return 0, fmt.Errorf("no forward priority is both ahead of %s %s chain %s (priority %d) and after conntrack (%d)",
			first.Family, first.Table, first.Name, first.Priority, conntrackPriority)
	}
	return p, nil
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
	if p <= conntrackPriority {
		warnings = append(warnings, fmt.Sprintf("priority %d runs before conntrack (%d): established flows are not recognised", p, conntrackPriority))
	}
	return warnings
}
