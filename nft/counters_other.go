//go:build !linux

package nft

// RuleCounters fails off Linux.
func (c *Conn) RuleCounters(table string, chains []string) (*RuleCounts, error) {
	return nil, ErrUnsupported
}
