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
		return 0, fmt.Errorf("no forward priority is ahead of %s %s chain %s (priority %d)",
			first.Family, first.Table, first.Name, first.Priority)
	}
	return int32(p), nil
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
