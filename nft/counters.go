package nft

// Reading rule counters.
//
// A Counter in a rule counts in the kernel, per rule, in per-CPU memory:
// the cheapest count there is per packet (a named counter object costs an
// object reference more). Its values live as long as the rule: a chain
// written again, or a table replaced, starts its rules at zero, with new
// handles. Conn.RuleCounters reads them with each rule's handle and the
// table's, so a reader that keeps the last value it saw per (table
// handle, rule handle) can add up what each rule counted into sums that
// only grow (see enforcer.ConnCounter).

// A RuleCount is what the counters of one rule counted.
type RuleCount struct {
	Chain   string
	Handle  uint64 // the rule's handle: unique in its table while the table lives
	Packets uint64
	Bytes   uint64
}

// RuleCounts is one read of the rule counters of some chains of a table.
type RuleCounts struct {
	// Table is the table's handle: a table deleted and created again has
	// another, and its rule handles start again.
	Table uint64
	// Rules holds each rule with a counter, in chain order; a chain that
	// was not there has none.
	Rules []RuleCount
}
