package nft

import "errors"

// A BaseChain is a base chain found in the kernel, of any table and family.
type BaseChain struct {
	Family   Family
	Table    string
	Name     string
	Type     string
	Hook     string
	Priority int32
}

// ErrNoTable reports that the table asked for does not exist.
var ErrNoTable = errors.New("table does not exist")

// ErrClosed: the Conn was closed; it opens nothing after Close, so that
// it can never act in another namespace (its handle's descriptor number
// may be another file's by then).
var ErrClosed = errors.New("the nftables connection is closed")

// ErrGenerationChanged reports a batch the kernel refused because the ruleset
// generation was no longer the one the caller expected: someone else
// committed. Nothing of the batch was applied. Test for it with errors.Is.
var ErrGenerationChanged = errors.New("ruleset generation changed")

// ErrHandoverNotOurs reports a whole write refused because a table that
// another program made holds the name of our handover table
// (HandoverTable). Nothing was applied.
var ErrHandoverNotOurs = errors.New("the handover table's name is taken by a table nftpolicy did not make")

// A TableState is what the reader finds of one of our tables in the kernel:
// its chains with the comments of their rules, and its sets with their
// elements. Rule expressions are not decoded; `nft list` is the tool for
// reading them.
type TableState struct {
	Chains map[string][]string // chain name → rule comments, in order
	Sets   map[string]int      // set name → number of elements (interval sets count start and end elements)
}

// BatchStats counts what one batch held.
type BatchStats struct {
	Full bool // the whole table was replaced
	// Handover: the whole table was replaced through the handover table
	// (see HandoverTable), in four batches; the other counts are those of
	// the batch that wrote our table.
	Handover bool
	// Staged counts the interval sets a delta created in a batch of their
	// own, ahead of the rules that look them up (see Conn.WriteDeltaAt);
	// ElementsAdded counts their elements.
	Staged          int
	Messages        int // netlink messages in the batch, without begin and end
	ChainsWritten   int // chains added or rewritten
	ElementsAdded   int // encoded set elements (an interval is two)
	ElementsDeleted int
	// Generation is the ruleset generation the batch created, as the kernel
	// announced it for this very commit; for a batch that changed nothing,
	// the current generation (for an empty delta, which sends no batch, the
	// one passed in). Pass it to the next WriteDeltaAt (or ApplyAt), which
	// the kernel refuses if anyone committed in between.
	Generation uint32
}

// HandoverTable is the name of the inet table that carries the new state
// while the inet table name is replaced whole (see Conn.Apply): it exists
// only during such a write, or after one that stopped half way, which the
// next whole write of name, or its deletion, clears.
func HandoverTable(name string) string { return name + "-handover" }

// OursOrHandover reports whether a base chain is one of the inet table
// name's, or of its handover table's.
func OursOrHandover(c BaseChain, name string) bool {
	return c.Family == FamilyInet && (c.Table == name || c.Table == HandoverTable(name))
}
