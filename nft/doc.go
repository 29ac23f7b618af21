// Package nft is nftpolicy's small typed model of an nftables table, its
// renderer to `nft -f` text and its netlink applier and reader.
//
// # Model
//
// A Table holds Sets (named sets and verdict maps) and Chains of Rules. A
// Rule is a list of Exprs; each concrete Expr type documents the one line of
// nft text it stands for, so the compiler reads like the ruleset it builds.
// Only what nftpolicy needs is modelled: address, address-range and
// address . protocol . port sets, verdict maps keyed by address or by
// address . protocol . port (one lookup, AddrProtoPortVmap, in place of a
// chain of first-match rules: exact values in a hash, whatever its size,
// or ranges, no two of which may overlap, see Set.Validate), protocol and
// port matches, masked mark tests and writes, and verdicts.
// Table.Validate checks a whole table: its sets, and that every jump and
// lookup names a chain or set of the right kind.
//
// # Rendering
//
// Render prints a Table as deterministic `nft -f` text. It is what
// `nftpolicy dump` shows and what golden tests compare.
//
// # Applying
//
// Conn.Apply writes a whole table, encoded exactly as nft encodes the
// same text (checked by the kernel tests, which list both with `nft list
// table` and diff them). The kernel commits a batch as one transaction,
// and a refused batch leaves the old table in place; but the interval
// sets a batch creates are filled only after its rules are in force
// (handover_linux.go), so a whole table that replaces one in force goes
// through a dormant handover table (HandoverTable) in four batches, and
// packets see the old table or the new one, never a mix. The daemon writes a
// whole table with Conn.ApplyGuarded, which reads the table's owner record
// (see Owner) right before the batch goes and lets the caller refuse it.
//
// Conn.WriteDeltaAt writes only a Delta (see Diff and
// enforcer.Compiler.Delta): added, rewritten and deleted chains and sets,
// added and removed elements; Conn.Update diffs two tables first. The *At
// forms carry the ruleset generation the caller last verified, and the
// kernel refuses the batch (ErrGenerationChanged) if anyone committed since.
// Batches go as nft sends them, without an ack or echo per message; the
// generation the kernel echoes for the batch confirms the commit and is
// returned in BatchStats.
//
// # Reading back
//
// Conn.Drift reads our table back (Conn.ReadTable summarizes the same
// read) and compares it with the table last programmed by content: the
// table's flags, each base chain's type, hook, priority and policy, every
// rule expression by expression, every set's key and flags and every
// element with its verdict. Both sides are reduced to one canonical form
// of their netlink attributes first, so what the kernel echoes in its own
// way (attribute order, nest flags, set ids, defaults) is no difference,
// and anything else is. The Monitor follows every commit to the namespace:
// it tells whether commits since a generation touched our table
// (Untouched), and signals those by other processes (Foreign).
//
// # Fake
//
// Fake is nf_tables in memory, for tests without root: it applies whole
// tables and deltas to its own copy, refuses what the kernel would (a
// jump or lookup to a missing chain or set, a chain still referenced),
// checks generations, and can be told to refuse batches, commit elsewhere,
// tamper with the table or lose the namespace. Dump renders what it holds.
//
// The netlink side is Linux only; elsewhere Open returns ErrUnsupported.
package nft
