package nft

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
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
//     each later batch first deletes a token (an empty set) that an
//     earlier batch of the same write put in the table it relies on, so
//     the kernel refuses it unless that table is still the one this
//     write made.
//   - A delta that creates interval sets creates them, filled, in a batch
//     of their own first, which no rule looks up yet (see stageSets).
//
// What stays: the elements of an interval set that a delta changes, in
// place, show the rules of the new generation their old content until
// that set's commit runs, each set on its own, within the same commit.

// handoverComment is the comment of every handover table we write: a
// table under that name without it is another program's, which a write
// neither takes for a half-done write of ours nor deletes.
const handoverComment = "nftpolicy: the new state, in force while the table it is named after is replaced"

// A tableState is what a write reads of one table before it plans.
type tableState struct {
	exists, awake bool
	handle        uint64
}

func (s tableState) String() string {
	switch {
	case !s.exists:
		return "absent"
	case s.awake:
		return "in force"
	}
	return "dormant"
}

func stateOf(info tableInfo) tableState {
	return tableState{exists: true, awake: info.flags&unix.NFT_TABLE_F_DORMANT == 0, handle: info.handle}
}

// tableState reads the inet table name.
func (c *Conn) tableState(name string) (tableState, error) {
	info, err := c.tableInfo(name)
	if errors.Is(err, ErrNoTable) {
		return tableState{}, nil
	}
	if err != nil {
		return tableState{}, err
	}
	return stateOf(info), nil
}

// handover reads the handover table of the inet table name. An error
// wraps ErrHandoverNotOurs if it exists without our comment.
func (c *Conn) handover(name string) (tableState, error) {
	h := HandoverTable(name)
	info, err := c.tableInfo(h)
	if errors.Is(err, ErrNoTable) {
		return tableState{}, nil
	}
	if err != nil {
		return tableState{}, err
	}
	if info.comment != handoverComment {
		return tableState{exists: true}, fmt.Errorf("table inet %s, comment %q: %w: nftpolicy writes table inet %s whole through it, and leaves alone what it did not make (delete it if nothing uses it)",
			h, info.comment, ErrHandoverNotOurs, name)
	}
	return stateOf(info), nil
}

// handoverGuard is guard followed by a new read of the handover table of
// name, which refuses the batch if another program made one since apply
// looked: read after the guard's generation, it is what the batch meets.
// Without a guard it is nil: the batches that touch the handover table
// name it by its handle, or create it only where there is none.
func (c *Conn) handoverGuard(name string, guard func() (uint32, error)) func() (uint32, error) {
	if guard == nil {
		return nil
	}
	return func() (uint32, error) {
		gen, err := guard()
		if err != nil {
			return 0, err
		}
		if _, err := c.handover(name); err != nil {
			return 0, err
		}
		return gen, nil
	}
}

// A setRef names a set of an inet table.
type setRef struct{ table, set string }

// A replaceStep is one batch of a whole-table write, in this order.
type replaceStep struct {
	// assert: sets deleted first. Each is a token that an earlier batch
	// of the same write created (see tokens): if one is not there, the
	// table holding it is not the one that batch wrote, and the kernel
	// refuses the whole batch (ENOENT). Unlike a generation, a token is
	// indifferent to what other programs commit elsewhere.
	assert []setRef
	// addTokens: sets created first, each in its table (refused if the
	// table is gone).
	addTokens []setRef
	wake      string // a table woken ("": none)
	sleep     string // a table made dormant ("": none)
	name      string // a table recreated with the content ("": none)
	// exclusive: name is created only if there is none (refused if one
	// exists); otherwise an existing one is replaced.
	exclusive bool
	dormant   bool     // name is created dormant
	comment   []byte   // name's NFTA_TABLE_USERDATA attribute (nil: none)
	tokens    []string // empty sets created in name, for later batches to assert
	drop      string   // a table deleted if it exists ("": none)
	// dropHandle, if set, deletes the table of that handle instead:
	// refused if it is gone. A write names the handover table it read
	// by its handle, or asserts a token of the one it made.
	dropHandle uint64
}

// apply writes t whole. With no interval set in t, or neither of our
// tables there (created only if that is still so), it is one batch. Otherwise it goes through the
// handover table (see the top of this file), in four batches:
//
//  1. the new state into the handover table, dormant, with tokens (empty
//     sets) for the later batches: checked against gen, or the guard;
//     the table is created only if there is none (a handover table left
//     by an earlier write, or another writer's, is deleted by its handle
//     in the same batch, and ours woken with it);
//  2. the handover table woken, ours made dormant;
//  3. the new state into ours, dormant, with a token;
//  4. ours woken, the handover table deleted.
//
// Each of the last three first deletes a token of the table it relies on
// (replaceStep.assert): the kernel refuses it unless that table is still
// the one this write made, whatever other programs commit elsewhere (a
// generation would refuse it for any commit at all). Only batch 4 and
// settle delete a handover table in force, and both wake ours in the same
// batch: so a token still there also means the handover table is still
// in force. A refused batch is followed by settle, which puts whatever
// ours holds back in force and deletes our handover table; the error
// says what is in force then, and wraps ErrGenerationChanged when the
// cause is another writer. A write that stopped after the second batch
// leaves the handover table in force and ours dormant: the next write
// does the last two. The stats are those of the batch that wrote our
// table, with the generation of the last.
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
	if err := t.checkWhole(); err != nil {
		return BatchStats{}, fmt.Errorf("%s: %w", op, err)
	}
	handover := HandoverTable(t.Name)
	ours, ho, err := c.ourTables(t.Name)
	if err != nil {
		return BatchStats{}, fmt.Errorf("%s: %w", op, err)
	}
	first := c.handoverGuard(t.Name, guard)
	c.between(0)
	if !t.hasIntervalSet() {
		return c.replace(op, t, replaceStep{name: t.Name, comment: comment, dropHandle: ho.handle}, gen, first)
	}
	planned := func() bool {
		o, h, err := c.ourTables(t.Name)
		return err == nil && o == ours && h == ho
	}
	switch {
	case ho.awake && !ours.awake:
		// An earlier write stopped after its second batch: tokens
		// into the handover table in force (refused if it is gone),
		// then its last two batches.
		nonce, err := tokenNonce()
		if err != nil {
			return BatchStats{}, fmt.Errorf("%s: %w", op, err)
		}
		toks := []setRef{{handover, "handover-" + nonce + "-3"}, {handover, "handover-" + nonce + "-4"}}
		if _, err := c.replace(op, nil, replaceStep{addTokens: toks}, gen, first); err != nil {
			return BatchStats{}, moved(fmt.Errorf("%w (finishing the write through table inet %s)", err, handover), planned)
		}
		// The tokens went to the table of that name: if it is not the
		// one read (another program's now), the write stops here, and
		// the last batch names it by its handle in any case.
		if h, err := c.handover(t.Name); err != nil || h != ho {
			// Take the tokens back out of whatever table holds them.
			c.replace(op, nil, replaceStep{assert: toks}, 0, nil)
			return BatchStats{}, fmt.Errorf("%s: table inet %s changed while the write finished it (%v): %w", op, handover, err, ErrGenerationChanged)
		}
		return c.finishHandover(op, t, comment, toks, ho.handle)
	case !ours.exists && !ho.exists:
		// Nothing of ours: created only if it is still not there.
		// (Two reads are no snapshot: a table that merely looked
		// dormant may be in force again by now, so anything else
		// goes through the handover table.)
		step := replaceStep{name: t.Name, exclusive: true, comment: comment}
		st, err := c.replace(op, t, step, gen, first)
		if err != nil {
			return BatchStats{}, moved(err, planned)
		}
		return st, nil
	}
	nonce, err := tokenNonce()
	if err != nil {
		return BatchStats{}, fmt.Errorf("%s: %w", op, err)
	}
	tok := func(batch int) string { return fmt.Sprintf("handover-%s-%d", nonce, batch) }
	marker, err := tableUserdataAttr(handoverComment)
	if err != nil {
		return BatchStats{}, fmt.Errorf("%s: %w", op, err)
	}
	step := replaceStep{name: handover, exclusive: true, dormant: true, comment: marker,
		tokens: []string{tok(2), tok(3), tok(4)}}
	if ho.exists {
		// Left by a write that stopped after its first batch, or
		// another writer's that may wake it at any moment: deleted by
		// its handle, and ours woken in the same batch, whatever that
		// writer did to it meanwhile.
		step.wake, step.dropHandle = t.Name, ho.handle
	}
	if _, err := c.replace(op, t, step, gen, first); err != nil {
		return BatchStats{}, moved(fmt.Errorf("%w (writing table inet %s, dormant)", err, handover), planned)
	}
	c.between(1)
	step = replaceStep{assert: []setRef{{handover, tok(2)}}, wake: handover, sleep: t.Name}
	if _, err := c.replace(op, nil, step, 0, nil); err != nil {
		return BatchStats{}, c.settle(t.Name, movedErr(fmt.Errorf("%w (waking table inet %s)", err, handover)))
	}
	c.between(2)
	return c.finishHandover(op, t, comment, []setRef{{handover, tok(3)}, {handover, tok(4)}}, 0)
}

// ourTables reads our table name and our handover table of it.
func (c *Conn) ourTables(name string) (ours, ho tableState, err error) {
	if ho, err = c.handover(name); err != nil {
		return
	}
	ours, err = c.tableState(name)
	return
}

// moved wraps err, a refused batch, in ErrGenerationChanged if another
// writer moved the tables: a table the batch creates only where there is
// none was there (EEXIST; a table with two chains of one name gets it
// too, and is retried as a conflict, to the same refusal), or one it
// names by handle is gone and the tables are no longer as planned
// (ENOENT is also what a jump to a missing chain gets).
func moved(err error, planned func() bool) error {
	if errors.Is(err, ErrGenerationChanged) || (!errors.Is(err, unix.EEXIST) && planned()) {
		return err
	}
	return movedErr(err)
}

// movedErr wraps err, a batch refused because a token or a table it named
// was gone (or one it would create was there), in ErrGenerationChanged:
// another writer moved the tables; read again and retry.
func movedErr(err error) error {
	if errors.Is(err, ErrGenerationChanged) || !(errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EEXIST)) {
		return err
	}
	return fmt.Errorf("%w: %w (another writer changed the tables between the batches of this write)", err, ErrGenerationChanged)
}

// finishHandover does the last two batches of a write through the
// handover table, which is in force with the new state, over ours,
// dormant: t into ours, dormant, and ours woken with the handover table
// deleted. hoTokens are two tokens of the handover table: the first for
// the batch that writes ours, the second for the last. hoHandle, when it
// finishes a write that stopped (not 0), is the handover table's handle,
// by which the last batch deletes it; and a refused batch that writes
// ours then leaves both tables as they were (settle would put back the
// state that write replaced).
func (c *Conn) finishHandover(op string, t *Table, comment []byte, hoTokens []setRef, hoHandle uint64) (BatchStats, error) {
	nonce, err := tokenNonce()
	if err != nil {
		return BatchStats{}, c.settle(t.Name, fmt.Errorf("%s: %w", op, err))
	}
	tok := "handover-" + nonce
	step := replaceStep{assert: hoTokens[:1], name: t.Name, dormant: true, comment: comment, tokens: []string{tok}}
	stats, err := c.replace(op, t, step, 0, nil)
	if err != nil && hoHandle != 0 {
		return BatchStats{}, movedErr(fmt.Errorf("%w (writing it dormant, under table inet %s, which stays in force)", err, HandoverTable(t.Name)))
	}
	if err != nil {
		return BatchStats{}, c.settle(t.Name, movedErr(fmt.Errorf("%w (writing it dormant, under table inet %s)", err, HandoverTable(t.Name))))
	}
	c.between(3)
	last := replaceStep{assert: []setRef{{t.Name, tok}, hoTokens[1]}, wake: t.Name, drop: HandoverTable(t.Name), dropHandle: hoHandle}
	end, err := c.replace(op, nil, last, 0, nil)
	if err != nil {
		// Ours holds the new state as long as its token is there:
		// then the write lands all the same.
		if end, _, err = c.wakeOurs(t.Name, tok); err != nil {
			return BatchStats{}, c.settle(t.Name, movedErr(fmt.Errorf("%w (waking it)", err)))
		}
	}
	stats.Generation = end.Generation
	stats.Handover = true
	return stats, nil
}

// tokenNonce returns a name part no other write uses.
func tokenNonce() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

func (c *Conn) between(n int) {
	if c.betweenBatches != nil {
		c.betweenBatches(n)
	}
}

// settleAttempts bounds how often settle reads again when another writer
// changed the tables between its read and its batch.
const settleAttempts = 10

// settle puts whatever our table holds in force and deletes our handover
// table (wakeOurs), after err, a refused batch of a write through the
// handover table. It returns err, with what is in force afterwards.
func (c *Conn) settle(name string, err error) error {
	_, now, failed := c.wakeOurs(name, "")
	if failed != nil {
		now = fmt.Sprintf("%s (settling them failed: %v)", now, failed)
	}
	return fmt.Errorf("%w; now %s", err, now)
}

// wakeOurs wakes our table and deletes our handover table, in one batch:
// ours is named by its token tok, an empty set in it (refused if it is
// gone), or, with no tok, by one made and deleted in the batch (refused
// only if ours is gone: then the handover table stays, in force); the
// handover table by the handle read (refused if it is another now). A
// refusal reads again, up to settleAttempts times. now says what is in
// force afterwards.
func (c *Conn) wakeOurs(name, tok string) (end BatchStats, now string, err error) {
	for range settleAttempts {
		var ours, ho tableState
		if ours, ho, err = c.ourTables(name); err != nil {
			return BatchStats{}, now, err
		}
		now = fmt.Sprintf("table inet %s is %s, table inet %s %s", name, ours, HandoverTable(name), ho)
		step := replaceStep{wake: name, dropHandle: ho.handle}
		if tok == "" {
			if !ours.exists || (ours.awake && !ho.exists) {
				return BatchStats{}, now, nil
			}
			var nonce string
			if nonce, err = tokenNonce(); err != nil {
				return BatchStats{}, now, err
			}
			step.addTokens = []setRef{{name, "settle-" + nonce}}
			step.assert = step.addTokens
		} else {
			step.assert = []setRef{{name, tok}}
		}
		end, err = c.replace("settle table inet "+name, nil, step, 0, nil)
		if err == nil {
			return end, fmt.Sprintf("table inet %s is in force, table inet %s absent", name, HandoverTable(name)), nil
		}
		if !errors.Is(err, unix.ENOENT) {
			return BatchStats{}, now, err
		}
	}
	return BatchStats{}, now, err
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
	for _, a := range step.addTokens {
		set := &nftables.Set{Table: &nftables.Table{Family: nftables.TableFamilyINet, Name: a.table}, Name: a.set, KeyType: nftables.TypeIPAddr}
		if err := b.nl.AddSet(withSetID(set), nil); err != nil {
			return fmt.Errorf("token %s: %w", a.set, err)
		}
		b.stats.Messages++
	}
	for _, a := range step.assert {
		b.nl.DelSet(&nftables.Set{Table: &nftables.Table{Family: nftables.TableFamilyINet, Name: a.table}, Name: a.set})
		b.stats.Messages++
	}
	if step.wake != "" {
		if err := b.addTable(step.wake, 0, nil, 0); err != nil {
			return err
		}
	}
	if step.sleep != "" {
		if err := b.addTable(step.sleep, unix.NFT_TABLE_F_DORMANT, nil, 0); err != nil {
			return err
		}
	}
	// The drop goes before the content: a write's first batch deletes
	// the handover table it found, and creates its own.
	var err error
	switch {
	case step.dropHandle != 0:
		err = b.delTableHandle(step.dropHandle)
	case step.drop != "":
		err = errors.Join(b.ensureTable(step.drop), b.delTable(step.drop))
	}
	if err != nil {
		return err
	}
	if step.name != "" {
		var flags uint32
		if step.dormant {
			flags = unix.NFT_TABLE_F_DORMANT
		}
		switch {
		case step.exclusive:
			err = b.addTable(step.name, flags, step.comment, netlink.Excl)
		default:
			// Adding first makes the delete succeed whether or not
			// the table exists; the kernel keeps an existing table's
			// comment, and takes the new one only from the table it
			// creates.
			err = errors.Join(b.ensureTable(step.name), b.delTable(step.name), b.addTable(step.name, flags, step.comment, 0))
		}
		if err != nil {
			return err
		}
		if err := b.writeTable(t); err != nil {
			return err
		}
		for _, tok := range step.tokens {
			if err := b.nl.AddSet(withSetID(&nftables.Set{Table: b.table, Name: tok, KeyType: nftables.TypeIPAddr}), nil); err != nil {
				return fmt.Errorf("token %s: %w", tok, err)
			}
			b.stats.Messages++
		}
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
// its flags (waking a dormant one), unless excl (netlink.Excl) refuses
// the batch then. The library's Table has neither user data nor flags,
// so the message is encoded here, after the messages the library holds,
// which keep their order.
func (b *writer) addTable(name string, flags uint32, comment []byte, excl netlink.HeaderFlags) error {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.NFTA_TABLE_NAME, name)
	ae.ByteOrder = binary.BigEndian
	ae.Uint32(unix.NFTA_TABLE_FLAGS, flags)
	return b.tableMessage(newTableType, netlink.Create|excl, ae, comment)
}

// delTable queues the deletion of the inet table name.
func (b *writer) delTable(name string) error {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.NFTA_TABLE_NAME, name)
	return b.tableMessage(delTableType, 0, ae, nil)
}

// delTableHandle queues the deletion of the inet table of that handle:
// the kernel refuses the batch if it is gone, even if another table has
// its name now.
func (b *writer) delTableHandle(handle uint64) error {
	ae := netlink.NewAttributeEncoder()
	ae.ByteOrder = binary.BigEndian
	ae.Uint64(nftaTableHandle, handle)
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

// checkWhole checks, before a whole write sends anything, what the kernel
// would refuse of t's names, which a write in several batches would only
// learn half way: two chains or two sets of one name (wrapping EEXIST),
// a jump to a chain not in t (wrapping ENOENT, the kernel's answer), and
// a name too long for its handover table.
func (t *Table) checkWhole() error {
	if n := len(HandoverTable(t.Name)); n > maxTableName {
		return fmt.Errorf("table name of %d bytes: its handover table's would be %d, more than %d", len(t.Name), n, maxTableName)
	}
	chains := make(map[string]bool, len(t.Chains))
	for _, ch := range t.Chains {
		if chains[ch.Name] {
			return fmt.Errorf("chain %s twice: %w", ch.Name, unix.EEXIST)
		}
		chains[ch.Name] = true
	}
	sets := make(map[string]bool, len(t.Sets))
	for _, s := range t.Sets {
		if sets[s.Name] {
			return fmt.Errorf("set %s twice: %w", s.Name, unix.EEXIST)
		}
		sets[s.Name] = true
	}
	if err := t.validateRefs(true); err != nil {
		return fmt.Errorf("%w: %w", err, unix.ENOENT)
	}
	return nil
}

// maxTableName is the longest table name the kernel takes
// (NFT_TABLE_MAXNAMELEN, with its NUL).
const maxTableName = 255

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
		if err := b.nl.AddSet(withSetID(stale), nil); err != nil {
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
