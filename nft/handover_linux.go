package nft

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Interval sets switch after the rules.
//
// A commit flips the ruleset generation first: from then on packets run
// the new rules, and see the hash sets' new elements (each element carries
// the generations it is active in). Only then does the kernel walk the
// transaction and call each changed set's commit operation. An interval
// set (rbtree, single field: since the binary search array of Linux 6.19,
// in 6.18 stable as well) and a concatenation with intervals (pipapo)
// build the lookup structure packets read in that operation. Until it
// runs, a packet that the new rules send to such a set finds the set as
// the last commit left it: empty, for a set the batch creates.
//
// Measured here (6.18.44): a table replaced whole, 20 times, with an
// interval set of 30k ranges, and a UDP sender asking it all along. The
// allow rule `ip daddr != @s drop` dropped 14.5k packets it accepts
// before and after, and the deny rule `ip daddr @s drop` let 14.5k
// through. Hash sets: none. So a batch that creates an interval set and
// the rules that look it up is not atomic: for microseconds to
// milliseconds (the commit walks every element of the batch) the rules
// see it empty, which blocks what they allow by it and lets through what
// they deny by it.
//
// Two writes avoid it:
//   - A whole table replaced while the old one is in force goes through a
//     handover table (HandoverTable), in four batches (see apply): the
//     new state is written into the handover table, dormant (no base
//     chain of a dormant table is on a hook, but its sets are
//     committed); the handover table is woken and ours made dormant; the
//     new state is written into ours, dormant; ours is woken and the
//     handover table deleted. Waking a table
//     puts its base chains on their hooks right away, before the commit,
//     with the rules and sets an earlier batch committed: from the moment
//     it is on the hooks, it is the whole new state. While the batch that
//     wakes it runs, the old state is still there too, and a packet must
//     pass both, which denies nothing both allow and allows nothing either
//     denies. Nothing is ever left without a complete table in force:
//     the two batches that wake a table are checked against the
//     generation of the batch that filled it, so that what they wake is
//     what it wrote.
//   - A delta that creates interval sets creates them, filled, in a batch
//     of their own first, which no rule looks up yet (see stageSets).
//
// What stays: the elements of an interval set that a delta changes, in
// place, show the rules of the new generation their old content until
// that set's commit runs, each set on its own, within the same commit.

// tableFlagsOf reads the flags of the inet table name; exists is false if
// there is none.
func (c *Conn) tableFlagsOf(name string) (flags uint32, exists bool, err error) {
	info, err := c.tableInfo(name)
	if errors.Is(err, ErrNoTable) {
		return 0, false, nil
	}
	return info.flags, err == nil, err
}

// live reports whether the inet table name exists and is not dormant: its
// base chains see packets.
func (c *Conn) live(name string) (bool, error) {
	flags, exists, err := c.tableFlagsOf(name)
	return exists && flags&unix.NFT_TABLE_F_DORMANT == 0, err
}

// handoverComment is the comment of every handover table we write: a
// table under that name without it is another program's, which a write
// neither takes for a half-done write of ours nor deletes.
const handoverComment = "nftpolicy: the new state, in force while the table it is named after is replaced"

// handover reads the handover table of the inet table name: its flags,
// and whether it exists. An error wraps ErrHandoverNotOurs if it exists
// without our comment.
func (c *Conn) handover(name string) (flags uint32, exists bool, err error) {
	h := HandoverTable(name)
	info, err := c.tableInfo(h)
	if errors.Is(err, ErrNoTable) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	if info.comment != handoverComment {
		return 0, true, fmt.Errorf("table inet %s, comment %q: %w: nftpolicy writes table inet %s whole through it, and leaves alone what it did not make (delete it if nothing uses it)",
			h, info.comment, ErrHandoverNotOurs, name)
	}
	return info.flags, true, nil
}

// handoverGuard is guard followed by a new read of the handover table of
// name, which refuses the batch if another program made one since apply
// looked: read after the guard's generation, it is what the batch meets.
// Without a guard, the batch is checked against a generation read before
// apply looked, or not at all, and it is nil.
func (c *Conn) handoverGuard(name string, guard func() (uint32, error)) func() (uint32, error) {
	if guard == nil {
		return nil
	}
	return func() (uint32, error) {
		gen, err := guard()
		if err != nil {
			return 0, err
		}
		if _, _, err := c.handover(name); err != nil {
			return 0, err
		}
		return gen, nil
	}
}

// A replaceStep is one batch of a whole-table write, in this order.
type replaceStep struct {
	wake    string // a table woken ("": none)
	sleep   string // a table made dormant ("": none)
	name    string // a table recreated with the content ("": none)
	dormant bool   // name is created dormant
	comment []byte // name's NFTA_TABLE_USERDATA attribute (nil: none)
	drop    string // a table deleted if it exists ("": none)
}

// apply writes t whole. With no interval set in t, or none of our tables
// in force to protect, it is one batch. Otherwise it goes through the
// handover table (see the top of this file), in four batches:
//
//  1. the new state into the handover table, dormant: checked against
//     gen, or the guard;
//  2. the handover table woken, ours made dormant: two messages, checked
//     against the generation the first created, so that the table it
//     wakes is the one the first wrote (if not, it is refused, the old
//     state stays in force, and the handover table is taken away);
//  3. the new state into ours, dormant: the guard runs again, or, with a
//     gen, it is checked against the second's generation;
//  4. ours woken, the handover table deleted: checked against the third's
//     generation, so that what it wakes is what the third wrote.
//
// A write that stopped after the second leaves the handover table in
// force and ours dormant: the next one does the last two. One refused at
// the third or fourth returns the error with the new state in force (the
// daemon's retry finishes it). The stats are those of the batch that
// wrote our table, with the generation of the last.
//
// A handover table that is not ours (see handoverComment) refuses the
// write, with an error wrapping ErrHandoverNotOurs.
func (c *Conn) apply(t *Table, gen uint32, guard func() (uint32, error)) (BatchStats, error) {
	op := fmt.Sprintf("apply table %s %s", t.Family, t.Name)
	if t.Family != FamilyInet {
		return BatchStats{}, fmt.Errorf("%s: only inet tables are supported", op)
	}
	comment, err := tableUserdataAttr(t.Comment)
	if err != nil {
		return BatchStats{}, fmt.Errorf("%s: %w", op, err)
	}
	handover := HandoverTable(t.Name)
	hoFlags, hoExists, err := c.handover(t.Name)
	if err != nil {
		return BatchStats{}, fmt.Errorf("%s: %w", op, err)
	}
	guard = c.handoverGuard(t.Name, guard)
	ours := replaceStep{name: t.Name, comment: comment}
	if hoExists {
		ours.drop = handover
	}
	if !t.hasIntervalSet() {
		return c.replace(op, t, ours, gen, guard)
	}
	oursLive, err := c.live(t.Name)
	if err != nil {
		return BatchStats{}, fmt.Errorf("%s: %w", op, err)
	}
	switch {
	case hoExists && hoFlags&unix.NFT_TABLE_F_DORMANT == 0 && !oursLive:
		// An earlier write stopped after its second batch.
		return c.finishHandover(op, t, comment, gen, guard)
	case !oursLive:
		return c.replace(op, t, ours, gen, guard)
	}
	marker, err := tableUserdataAttr(handoverComment)
	if err != nil {
		return BatchStats{}, fmt.Errorf("%s: %w", op, err)
	}
	first, err := c.replace(op, t, replaceStep{name: handover, dormant: true, comment: marker}, gen, guard)
	if err != nil {
		return BatchStats{}, fmt.Errorf("%w (writing table inet %s, dormant)", err, handover)
	}
	c.between(1)
	second, err := c.replace(op, nil, replaceStep{wake: handover, sleep: t.Name}, first.Generation, nil)
	if err != nil {
		c.dropHandover(t.Name)
		return BatchStats{}, fmt.Errorf("%w (waking table inet %s: the old state stays in force)", err, handover)
	}
	c.between(2)
	if gen != 0 {
		gen = second.Generation
	}
	stats, err := c.finishHandover(op, t, comment, gen, guard)
	if errors.Is(err, errOursNotWritten) {
		c.undoHandover(t.Name)
		return BatchStats{}, fmt.Errorf("%w; the old state is back in force", err)
	}
	return stats, err
}

// errOursNotWritten marks a finishHandover refused before it wrote our
// table, which still holds the old state, dormant.
var errOursNotWritten = errors.New("our table still holds the old state")

// finishHandover does the last two batches of a write through the
// handover table, which is in force with the new state, over ours,
// dormant: t into ours, dormant, checked against gen or the guard; then
// ours woken and the handover table deleted, checked against the
// generation of the first.
func (c *Conn) finishHandover(op string, t *Table, comment []byte, gen uint32, guard func() (uint32, error)) (BatchStats, error) {
	handover := HandoverTable(t.Name)
	stats, err := c.replace(op, t, replaceStep{name: t.Name, dormant: true, comment: comment}, gen, guard)
	if err != nil {
		return BatchStats{}, fmt.Errorf("%w (writing it dormant, under table inet %s: %w)", err, handover, errOursNotWritten)
	}
	c.between(3)
	last, err := c.replace(op, nil, replaceStep{wake: t.Name, drop: handover}, stats.Generation, nil)
	if err != nil {
		return BatchStats{}, fmt.Errorf("%w (waking it; the new state is in force through table inet %s)", err, handover)
	}
	stats.Generation = last.Generation
	stats.Handover = true
	return stats, nil
}

func (c *Conn) between(n int) {
	if c.betweenBatches != nil {
		c.betweenBatches(n)
	}
}

// dropHandover deletes the handover table of name if it is ours and
// dormant, checked against the generation read before it is looked at;
// a failure is ignored. It is for a write refused at its second batch,
// whose first left the new state there.
func (c *Conn) dropHandover(name string) {
	gen, err := c.Generation()
	if err != nil {
		return
	}
	flags, exists, err := c.handover(name)
	if err != nil || !exists || flags&unix.NFT_TABLE_F_DORMANT == 0 {
		return
	}
	c.replace("drop the handover table", nil, replaceStep{drop: HandoverTable(name)}, gen, nil)
}

// undoHandover undoes the second batch of a write through the handover
// table whose third was refused: ours, dormant with the old state, is
// woken and the handover table deleted, checked against the generation
// read before both are looked at; a failure is ignored (the new state
// stays in force through the handover table, and the next whole write
// finishes it).
func (c *Conn) undoHandover(name string) {
	gen, err := c.Generation()
	if err != nil {
		return
	}
	hoFlags, hoExists, err := c.handover(name)
	if err != nil || !hoExists || hoFlags&unix.NFT_TABLE_F_DORMANT != 0 {
		return
	}
	flags, exists, err := c.tableFlagsOf(name)
	if err != nil || !exists || flags&unix.NFT_TABLE_F_DORMANT == 0 {
		return
	}
	c.replace("undo the handover", nil, replaceStep{wake: name, drop: HandoverTable(name)}, gen, nil)
}

// replace sends one batch of a whole-table write: step, with t's content
// in step.name.
func (c *Conn) replace(op string, t *Table, step replaceStep, gen uint32, guard func() (uint32, error)) (BatchStats, error) {
	b, err := c.newWriter(step.name, gen)
	if err != nil {
		return BatchStats{}, fmt.Errorf("%s: netlink: %w", op, err)
	}
	b.tx.guard = guard
	b.stats.Full = true
	if err := b.writeStep(t, step); err != nil {
		return BatchStats{}, fmt.Errorf("%s: %w", op, err)
	}
	if err := b.flush(op); err != nil {
		return BatchStats{}, err
	}
	return b.stats, nil
}

func (b *writer) writeStep(t *Table, step replaceStep) error {
	if step.wake != "" {
		if err := b.addTable(step.wake, 0, nil); err != nil {
			return err
		}
	}
	if step.sleep != "" {
		if err := b.addTable(step.sleep, unix.NFT_TABLE_F_DORMANT, nil); err != nil {
			return err
		}
	}
	if step.name != "" {
		// Adding first makes the delete succeed whether or not the
		// table exists; the kernel keeps an existing table's comment,
		// and takes the new one only from the table it creates.
		var flags uint32
		if step.dormant {
			flags = unix.NFT_TABLE_F_DORMANT
		}
		err := errors.Join(b.ensureTable(step.name), b.delTable(step.name), b.addTable(step.name, flags, step.comment))
		if err != nil {
			return err
		}
		if err := b.writeTable(t); err != nil {
			return err
		}
	}
	if step.drop != "" {
		return errors.Join(b.ensureTable(step.drop), b.delTable(step.drop))
	}
	return nil
}

// ensureTable queues a NEWTABLE message with no flags: it creates the
// inet table name if there is none, and leaves an existing one as it is
// (the kernel changes a table's flags only when the message has them:
// an existing dormant table is not woken).
func (b *writer) ensureTable(name string) error {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.NFTA_TABLE_NAME, name)
	return b.tableMessage(newTableType, netlink.Create, ae, nil)
}

// addTable queues a NEWTABLE message: it creates the inet table name
// with flags and the user data attribute comment, or, if it exists, sets
// its flags (waking a dormant one). The library's Table has neither user
// data nor flags, so the message is encoded here, after the messages the
// library holds, which keep their order.
func (b *writer) addTable(name string, flags uint32, comment []byte) error {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.NFTA_TABLE_NAME, name)
	ae.ByteOrder = binary.BigEndian
	ae.Uint32(unix.NFTA_TABLE_FLAGS, flags)
	return b.tableMessage(newTableType, netlink.Create, ae, comment)
}

// delTable queues the deletion of the inet table name.
func (b *writer) delTable(name string) error {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.NFTA_TABLE_NAME, name)
	return b.tableMessage(delTableType, 0, ae, nil)
}

func (b *writer) tableMessage(typ netlink.HeaderType, flags netlink.HeaderFlags, ae *netlink.AttributeEncoder, extra []byte) error {
	attrs, err := ae.Encode()
	if err != nil {
		return err
	}
	if err := b.tx.handOver(b.nl); err != nil {
		return err
	}
	data := append(nfgenmsg(unix.NFPROTO_INET, 0), attrs...)
	b.tx.add(netlink.Message{Header: netlink.Header{Type: typ, Flags: netlink.Request | flags}, Data: append(data, extra...)})
	b.stats.Messages++
	return nil
}

// hasIntervalSet reports whether a set of t has intervals: one whose
// lookups switch after the rules (see the top of this file).
func (t *Table) hasIntervalSet() bool {
	for _, s := range t.Sets {
		if s.Interval {
			return true
		}
	}
	return false
}

// A staging holds what a delta creates ahead of it: its interval sets,
// and, empty, the new chains their verdicts jump to (nothing reaches
// them but those sets, which nothing looks up yet).
type staging struct {
	sets   []*Set
	chains []string
}

// stagedSets splits the interval sets d creates off d: they are written
// ahead of it, in a batch of their own (stageSets), so that they are
// filled by the time the rules of d look them up. The chains stay in d,
// which fills them.
func stagedSets(d *Delta) (staging, *Delta) {
	var st staging
	var rest []*Set
	for _, s := range d.AddSets {
		if s.Interval {
			st.sets = append(st.sets, s)
		} else {
			rest = append(rest, s)
		}
	}
	if len(st.sets) == 0 {
		return st, d
	}
	targets := map[string]bool{}
	for _, s := range st.sets {
		if s.Verdict {
			for _, e := range s.All() {
				if e.Verdict.Chain != "" {
					targets[e.Verdict.Chain] = true
				}
			}
		}
	}
	for _, ch := range d.AddChains {
		if targets[ch.Name] && ch.Hook == nil {
			st.chains = append(st.chains, ch.Name)
		}
	}
	out := *d
	out.AddSets = rest
	return st, &out
}

// stageSets creates st in the inet table name, sets with their elements,
// in one batch checked against gen: nothing looks the sets up yet, so the
// batch changes no verdict. Each set is created anew even if a staging
// whose delta then failed left it behind, so that it holds exactly its
// elements.
func (c *Conn) stageSets(op, table string, st staging, gen uint32) (BatchStats, error) {
	b, err := c.newWriter(table, gen)
	if err != nil {
		return BatchStats{}, fmt.Errorf("%s: netlink: %w", op, err)
	}
	for _, name := range st.chains {
		if err := b.addChain(&Chain{Name: name}); err != nil {
			return BatchStats{}, err
		}
	}
	for _, s := range st.sets {
		// Adding first makes the delete succeed whether or not the set
		// exists.
		stale := &nftables.Set{Table: b.table, Name: s.Name, KeyType: keyDatatype(s.Key), IsMap: s.Verdict,
			Interval: s.Interval, Concatenation: s.protoPortMap(), KeyByteOrder: binaryutil.BigEndian}
		if s.Verdict {
			stale.DataType = nftables.TypeVerdict
		}
		if err := b.nl.AddSet(stale, nil); err != nil {
			return BatchStats{}, fmt.Errorf("%s: set %s: %w", op, s.Name, err)
		}
		b.nl.DelSet(stale)
		b.stats.Messages += 2
		if err := b.addSet(s); err != nil {
			return BatchStats{}, fmt.Errorf("%s: set %s: %w", op, s.Name, err)
		}
	}
	if err := b.flush(op + " (its new interval sets, ahead of it)"); err != nil {
		return BatchStats{}, err
	}
	return b.stats, nil
}

// dropStaged deletes what stageSets created in the inet table name,
// unchecked, and ignores a failure: it is for a delta that the kernel
// refused after its staging; left behind, a drift check counts it.
func (c *Conn) dropStaged(table string, st staging) {
	b, err := c.newWriter(table, 0)
	if err != nil {
		return
	}
	for _, s := range st.sets {
		b.nl.DelSet(&nftables.Set{Table: b.table, Name: s.Name})
		b.stats.Messages++
	}
	for _, name := range st.chains {
		b.nl.DelChain(&nftables.Chain{Table: b.table, Name: name})
		b.stats.Messages++
	}
	b.flush("drop staged sets")
}
