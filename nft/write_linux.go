package nft

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// elementsPerMessage bounds how many set elements go into one netlink
// message, and elementListBytes how many bytes of them. The element list
// is a nested attribute whose length field is 16 bits: 512 plain IPv6
// elements are ~16 KB, but a verdict map's element carries its chain's
// name, and 512 jumps to pod chains of 85-byte names are 70 KB. Before
// the byte bound, such a list's length wrapped and the kernel kept a
// fraction of the elements (hostile round 13: 632 of 2,000).
const (
	elementsPerMessage = 512
	elementListBytes   = 48 << 10
)

// Apply replaces the table with t in one netlink batch: the table is
// created if missing, deleted, and written anew, and the kernel commits the
// batch as one transaction. Packets see either the old table or the new one,
// and if the kernel refuses any message the old table stays as it was.
// It is ApplyAt without a generation check.
func (c *Conn) Apply(t *Table) (BatchStats, error) {
	return c.ApplyAt(t, 0)
}

// ApplyAt is Apply, checked against the ruleset generation gen (from
// Generation or a previous BatchStats.Generation): unless gen is 0, the
// kernel refuses the batch, changing nothing, if anyone has committed since
// gen, and the error is ErrGenerationChanged. The check and the commit are
// one step in the kernel. BatchStats.Generation is the generation the batch
// created.
func (c *Conn) ApplyAt(t *Table, gen uint32) (BatchStats, error) {
	return c.apply(t, gen, nil)
}

// Update moves the kernel from old, the table as last programmed through
// this package, to new, in one batch holding only what changed: new and
// deleted chains and sets, rewritten chains, and added and deleted set
// elements. When the change cannot be made in place (see Delta.Full), or old
// is nil, it replaces the whole table as Apply does. Like Apply, a refused
// batch changes nothing. It is UpdateAt without a generation check.
func (c *Conn) Update(old, new *Table) (BatchStats, error) {
	return c.UpdateAt(old, new, 0)
}

// UpdateAt is Update, checked against the ruleset generation gen as ApplyAt
// checks it, also when it falls back to replacing the whole table.
func (c *Conn) UpdateAt(old, new *Table, gen uint32) (BatchStats, error) {
	return c.WriteDeltaAt(Diff(old, new), new, gen)
}

// nextSetID numbers the sets our batches create. google/nftables numbers
// a set whose ID is 0 from a package-level counter that only each
// connection's own lock guards, so two writes at once (two Conns, or a
// Conn's writers) race on it (go test -race). The kernel finds a set
// created in the same batch by its ID; ours start far above the
// library's own count, so the two never meet in one batch.
var nextSetID atomic.Uint32

func init() { nextSetID.Store(1 << 31) }

// withSetID gives s an ID of ours unless it has one.
func withSetID(s *nftables.Set) *nftables.Set {
	for s.ID == 0 {
		s.ID = nextSetID.Add(1)
	}
	return s
}

// WriteDeltaAt writes d, the delta from the table the kernel holds to new,
// checked against the generation gen (0: unchecked). It is UpdateAt for a
// caller that knows the delta without diffing two whole tables (see
// enforcer.Compiler.Delta). A Full delta replaces the table as ApplyAt does.
//
// A delta into a dormant table (a whole write stopped half way: see
// HandoverTable) is refused: only a whole write puts the table back in
// force. The refusal wraps ErrGenerationChanged if the generation moved
// since gen (another writer's whole write in flight).
//
// An empty delta sends nothing and reads nothing: BatchStats.Generation is
// gen itself, since the kernel holds what it held at gen whatever others
// committed since; a stale gen is found by the next delta that writes.
//
// The interval sets the delta creates go first, filled, in a batch of
// their own checked against gen (see handover_linux.go: in the delta's
// batch, its rules would see them empty); the delta then goes checked
// against the generation that batch created. If the delta fails, the
// staged sets are deleted again.
func (c *Conn) WriteDeltaAt(d *Delta, new *Table, gen uint32) (BatchStats, error) {
	if d.Full {
		return c.ApplyAt(new, gen)
	}
	if d.Empty() {
		return BatchStats{Generation: gen}, nil
	}
	op := "update table inet " + new.Name
	// A dormant table judges nothing: a delta into it would return
	// success with nothing in force (left so by a whole write that
	// stopped half way, under its handover table, or by hand). The
	// caller's generation makes the read the state the delta meets.
	if st, err := c.tableState(new.Name); err != nil {
		return BatchStats{}, fmt.Errorf("%s: %w", op, err)
	} else if st.exists && !st.awake {
		err := fmt.Errorf("%s: the table is dormant (a whole write stopped half way, or it was set so by hand): only a whole write puts it back in force", op)
		if now, gerr := c.Generation(); gen != 0 && gerr == nil && now != gen {
			// Another writer's whole write, in flight: a conflict.
			err = fmt.Errorf("%w: %w", err, ErrGenerationChanged)
		}
		return BatchStats{}, err
	}
	staged, d := stagedSets(d)
	b, err := c.newWriter(new.Name, gen)
	if err != nil {
		return BatchStats{}, fmt.Errorf("%s: netlink: %w", op, err)
	}
	if err := b.writeDelta(d, new); err != nil {
		return BatchStats{}, fmt.Errorf("%s: %w", op, err)
	}
	if len(staged.sets) > 0 {
		// Encoded, the delta waits for its interval sets.
		st, err := c.stageSets(op, new.Name, staged, gen)
		if err != nil {
			return BatchStats{}, err
		}
		if gen != 0 {
			b.tx.gen = st.Generation
		}
		b.stats.ElementsAdded += st.ElementsAdded
		b.stats.Staged = len(staged.sets)
	}
	if err := b.flush(op); err != nil {
		if len(staged.sets) > 0 {
			// Nothing looks the staged sets up: take them away again, so
			// that the kernel holds the table last programmed.
			c.dropStaged(new.Name, staged)
		}
		return BatchStats{}, err
	}
	return b.stats, nil
}

// A writer queues one batch.
type writer struct {
	nl     *nftables.Conn
	tx     *batchTransport
	table  *nftables.Table
	chains map[string]*nftables.Chain
	sets   map[string]*nftables.Set
	stats  BatchStats
	// handedOver: stats.Messages when the library's messages were last
	// handed over to tx (queued).
	handedOver int
	// elemBuf encodes one set element message after another
	// (appendElemMessage), and ruleBuf one rule message after another
	// (appendRuleMessage), with commentBuf its comment: tx copies each
	// into the batch.
	elemBuf, ruleBuf, commentBuf []byte
}

func (c *Conn) newWriter(table string, gen uint32) (*writer, error) {
	nl, tx, err := c.newBatchConn(gen)
	if err != nil {
		return nil, err
	}
	return &writer{
		nl:     nl,
		tx:     tx,
		table:  &nftables.Table{Family: nftables.TableFamilyINet, Name: table},
		chains: map[string]*nftables.Chain{},
		sets:   map[string]*nftables.Set{},
	}, nil
}

// flush sends the batch and records the generation it created in the
// stats. op starts the error messages.
func (b *writer) flush(op string) error {
	gen, err := b.tx.flush(b.nl)
	if err != nil {
		return fmt.Errorf("%s: kernel refused the batch: %w", op, err)
	}
	if gen == 0 {
		// The kernel announces every generation it creates; a batch that
		// changes nothing creates none, and the current one is the answer.
		if gen, err = b.tx.c.Generation(); err != nil {
			return fmt.Errorf("%s: batch committed, but: %w", op, err)
		}
	}
	b.stats.Generation = gen
	return nil
}

// Delete removes the table, and its handover table if a whole write left
// one (see HandoverTable). A table that does not exist is not an error.
func (c *Conn) Delete(family Family, name string) error {
	if family != FamilyInet {
		return fmt.Errorf("delete table %s %s: only inet tables are supported", family, name)
	}
	return c.deleteTable(name, nil)
}

// deleteTable deletes the inet table name and our handover table of it,
// in one batch that guard, if set, checks; a handover table under that
// name that is not ours stays.
func (c *Conn) deleteTable(name string, guard func() (uint32, error)) error {
	op := "delete table inet " + name
	ho, err := c.handover(name)
	if err != nil && !errors.Is(err, ErrHandoverNotOurs) {
		return fmt.Errorf("%s: %w", op, err)
	}
	// Adding first makes the delete succeed whether or not the table
	// exists, in one transaction, as `nft add table; nft delete table`
	// would; the add carries no flags, which would wake a dormant table.
	// Our handover table goes by the handle read: one another program
	// made since refuses the batch.
	b, err := c.newWriter(name, 0)
	if err != nil {
		return fmt.Errorf("%s: netlink: %w", op, err)
	}
	b.tx.guard = guard
	if err := errors.Join(b.ensureTable(name), b.delTable(name)); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if ho.handle != 0 {
		if err := b.delTableHandle(ho.handle); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
	if err := b.flush(op); err != nil {
		if ho.handle != 0 {
			// Gone by that handle: another writer deleted or replaced it.
			return movedErr(err)
		}
		return err
	}
	return nil
}

// writeTable queues every chain, set and rule of t into a table that the
// batch has just (re)created.
func (b *writer) writeTable(t *Table) error {
	// Each set is validated as it is added; here, before anything is
	// queued, that each lookup's set has the key the lookup loads, which
	// the kernel does not check. A jump to a missing chain is left to the
	// kernel's ENOENT.
	if err := t.validateRefs(false); err != nil {
		return err
	}
	for _, ch := range t.Chains {
		if err := b.addChain(ch); err != nil {
			return err
		}
	}
	for _, s := range t.Sets {
		if err := b.addSet(s); err != nil {
			return fmt.Errorf("set %s: %w", s.Name, err)
		}
	}
	for _, ch := range t.Chains {
		if err := b.addRules(ch); err != nil {
			return err
		}
	}
	return nil
}

// writeDelta queues the change d, in an order the kernel accepts within one
// transaction: chains before the elements and rules that jump to them,
// element deletions and chain flushes before the chains and sets they
// referenced are deleted.
func (b *writer) writeDelta(d *Delta, new *Table) error {
	// Existing sets are named in lookups and element messages by name:
	// register those the delta names (thousands exist at 10k policies, and
	// an event names a handful).
	needed := map[string]bool{}
	for _, u := range d.UpdateSets {
		needed[u.New.Name] = true
	}
	for _, chains := range [][]*Chain{d.AddChains, d.RewriteChains} {
		for _, ch := range chains {
			for _, r := range ch.Rules {
				for _, e := range r.Exprs {
					switch e := e.(type) {
					case AddrInSet:
						needed[e.Set] = true
					case AddrVmap:
						needed[e.Map] = true
					case AddrProtoPortInSet:
						needed[e.Set] = true
					case AddrProtoPortVmap:
						needed[e.Map] = true
					}
				}
			}
		}
	}
	for _, s := range new.Sets {
		if needed[s.Name] {
			b.sets[s.Name] = &nftables.Set{Table: b.table, Name: s.Name, KeyType: keyDatatype(s.Key), IsMap: s.Verdict, Interval: s.Interval, Concatenation: s.protoPortMap()}
		}
	}
	for _, ch := range d.AddChains {
		if err := b.addChain(ch); err != nil {
			return err
		}
	}
	for _, s := range d.AddSets {
		if err := b.addSet(s); err != nil {
			return fmt.Errorf("set %s: %w", s.Name, err)
		}
	}
	for _, u := range d.UpdateSets {
		if err := b.updateElements(u); err != nil {
			return fmt.Errorf("set %s: %w", u.New.Name, err)
		}
	}
	for _, ch := range d.RewriteChains {
		nc := &nftables.Chain{Name: ch.Name, Table: b.table}
		b.chains[ch.Name] = nc
		b.nl.FlushChain(nc)
		b.stats.Messages++
		if err := b.addRules(ch); err != nil {
			return err
		}
	}
	for _, ch := range d.AddChains {
		if err := b.addRules(ch); err != nil {
			return err
		}
	}
	// Every chain that goes is flushed before any is deleted: a chain still
	// jumped to is busy (EBUSY) until the rule jumping to it is gone, and
	// the referrer may come later in the list (ingress-<hash> sorts before
	// ingress-pod-<hash>, which jumps to it). Flushing first drops every
	// reference within the batch, whatever the order.
	//
	// Sets go after the flush and before the chains: the flush drops the
	// rules that look a set up, and a verdict map that goes holds
	// elements that goto chains that go with it (a tier's class map and
	// class chains); deleting the map releases them, and the chains are
	// busy until it does.
	for _, name := range d.DeleteChains {
		b.nl.FlushChain(&nftables.Chain{Name: name, Table: b.table})
	}
	for _, name := range d.DeleteSets {
		b.nl.DelSet(&nftables.Set{Table: b.table, Name: name})
		b.stats.Messages++
	}
	for _, name := range d.DeleteChains {
		b.nl.DelChain(&nftables.Chain{Name: name, Table: b.table})
	}
	b.stats.Messages += 2 * len(d.DeleteChains)
	return nil
}

func (b *writer) addChain(ch *Chain) error {
	nc := &nftables.Chain{Name: ch.Name, Table: b.table}
	if h := ch.Hook; h != nil {
		hook, err := hookNum(h.Hook)
		if err != nil {
			return fmt.Errorf("chain %s: %w", ch.Name, err)
		}
		prio := nftables.ChainPriority(h.Priority)
		policy := nftables.ChainPolicyAccept
		if h.Policy == Drop {
			policy = nftables.ChainPolicyDrop
		}
		nc.Hooknum, nc.Priority, nc.Type, nc.Policy = hook, &prio, nftables.ChainType(h.Type), &policy
	}
	b.chains[ch.Name] = b.nl.AddChain(nc)
	b.stats.Messages++
	b.stats.ChainsWritten++
	return nil
}

func (b *writer) addRules(ch *Chain) error {
	if len(ch.Rules) == 0 {
		return nil
	}
	// The chain's message (the library's) goes first.
	if err := b.tx.handOver(b.nl); err != nil {
		return err
	}
	nc, ok := b.chains[ch.Name]
	if !ok {
		return fmt.Errorf("chain %s: rules queued before the chain", ch.Name)
	}
	for i, r := range ch.Rules {
		exprs, err := encodeRule(r, b.sets)
		if err != nil {
			return fmt.Errorf("chain %s rule %d (%s): %w", ch.Name, i, RenderRule(r), err)
		}
		var comment []byte
		if r.Comment != "" {
			comment = userdata.AppendString(b.commentBuf[:0], userdata.TypeComment, r.Comment)
			b.commentBuf = comment
		}
		if b.ruleBuf, err = appendRuleMessage(b.ruleBuf[:0], b.table, nc.Name, exprs, comment); err != nil {
			return fmt.Errorf("chain %s rule %d (%s): %w", ch.Name, i, RenderRule(r), err)
		}
		if err := b.tx.addOwn(netlink.Message{Header: netlink.Header{Type: ruleMessageType, Flags: ruleMessageFlags}, Data: b.ruleBuf}); err != nil {
			return err
		}
		b.tx.ruleAdded(ch.Name, i)
		b.stats.Messages++
	}
	b.handedOver = b.stats.Messages // nothing of the library's is left
	return nil
}

func (b *writer) addSet(s *Set) error {
	if err := s.Validate(); err != nil {
		return err
	}
	ns := b.librarySet(s)
	if err := b.nl.AddSet(withSetID(ns), nil); err != nil {
		return err
	}
	b.sets[s.Name] = ns
	b.stats.Messages++
	// Encoded a message's worth at a time: a named-port set of 150k pods
	// is 300k elements, and the encoded form of a whole set at once was
	// ~60 MB alive at the first sync's peak. (Validate checked every
	// element, so encoding fails only on what it cannot know.)
	var pending []nftables.SetElement // encoded, not yet queued
	if leadingEnd(s) {
		pending = append(pending, nftables.SetElement{Key: addrBytes(zeroAddr(s.Key.Family())), IntervalEnd: true})
	}
	for _, part := range s.parts() {
		for rest := part; len(rest) > 0; {
			n := min(len(rest), elementsPerMessage/2) // an interval is two elements
			var err error
			if pending, err = appendEncoded(pending, s, rest[:n]); err != nil {
				return err
			}
			rest = rest[n:]
			// Queue whole messages, keeping what is left for the next
			// round, and for the end (elements splits a message so as
			// not to part a start from its end; so may it here).
			full := len(pending) / elementsPerMessage * elementsPerMessage
			if full > 0 && full < len(pending) && pending[full].IntervalEnd {
				full++
			}
			if err := b.elements(ns, pending[:full], true); err != nil {
				return err
			}
			// elements has copied what it was given into the batch: the
			// buffer serves the next round (70 MB less garbage at the
			// first sync of 150k pods, where the collector runs at
			// GOGC=25).
			pending = pending[:copy(pending, pending[full:])]
		}
	}
	return b.elements(ns, pending, true)
}

// librarySet is s as google/nftables declares it, in the writer's table.
func (b *writer) librarySet(s *Set) *nftables.Set {
	ns := &nftables.Set{
		Table:        b.table,
		Name:         s.Name,
		Comment:      s.Comment,
		Interval:     s.Interval,
		KeyByteOrder: binaryutil.BigEndian,
		KeyType:      keyDatatype(s.Key),
		// An interval concatenation is flagged, and its fields' lengths
		// declared (NFTA_SET_DESC_CONCAT), as nft does: the kernel picks
		// its pipapo set by them. An exact one, set or verdict map, is
		// neither, as nft declares it (nft 1.0.6 --debug mnl), and the
		// kernel picks a hash set.
		Concatenation: s.protoPortMap(),
	}
	if s.Verdict {
		ns.IsMap = true
		ns.DataType = nftables.TypeVerdict
	}
	return ns
}

// updateElements queues the difference between the encoded elements of two
// versions of a set. Diffing the encoded form handles interval sets
// exactly: a range is a start and an end element, and the leading end
// element at the zero address comes and goes with the first range.
func (b *writer) updateElements(u SetUpdate) error {
	if !u.Exact {
		// An exact patch of a large set is trusted to keep it valid (the
		// incremental tests check it against the full set); anything else
		// is compared whole anyway, so it is checked whole.
		if err := u.New.Validate(); err != nil {
			return err
		}
	}
	gone, came := u.kernelChanges()
	del, add, err := elementDelta(u.Old, u.New, gone, came)
	if err != nil {
		return err
	}
	ns := b.sets[u.New.Name]
	if err := b.elements(ns, del, false); err != nil {
		return err
	}
	return b.elements(ns, add, true)
}

// elements queues additions (or deletions) in messages of at most
// elementsPerMessage elements, encoded by appendElemMessage straight into
// the batch (after the library's messages so far, which keeps the order).
func (b *writer) elements(ns *nftables.Set, elems []nftables.SetElement, add bool) error {
	// The library's header, deletions too (add drops its ack flag).
	typ := netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_DELSETELEM)
	if add {
		typ = netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWSETELEM)
	}
	const flags = netlink.Request | netlink.Create
	for len(elems) > 0 {
		n, size := 0, 0
		for n < len(elems) && n < elementsPerMessage {
			if !elementFieldsKnown(&elems[n]) {
				return fmt.Errorf("set %s: element %d sets a field the element encoder does not know", ns.Name, n)
			}
			size += encodedElemSize(&elems[n])
			if n > 0 && size > elementListBytes {
				break
			}
			n++
		}
		// Interval sets must not split a start from its end element (one
		// more stays far under the 64 KiB of the attribute).
		if ns.Interval && n < len(elems) && elems[n].IntervalEnd {
			n++
		}
		if err := b.tx.handOver(b.nl); err != nil {
			return err
		}
		var err error
		if b.elemBuf, err = appendElemMessage(b.elemBuf[:0], ns, elems[:n]); err != nil {
			return err
		}
		if err := b.tx.addOwn(netlink.Message{Header: netlink.Header{Type: typ, Flags: flags}, Data: b.elemBuf}); err != nil {
			return err
		}
		if add {
			b.stats.ElementsAdded += n
		} else {
			b.stats.ElementsDeleted += n
		}
		b.stats.Messages++
		b.handedOver = b.stats.Messages // nothing of the library's is left
		elems = elems[n:]
	}
	return nil
}

// handOverEvery is how many messages the library may hold before queued
// hands them over to the transport: a few hundred kB of them.
const handOverEvery = 256

// queued is called after each message queued in loops: every
// handOverEvery messages, it hands the library's messages over to the
// batch (batchTransport.keep), which holds them encoded, so that the
// batch is not held twice.
func (b *writer) queued() error {
	if b.stats.Messages-b.handedOver < handOverEvery {
		return nil
	}
	b.handedOver = b.stats.Messages
	return b.tx.handOver(b.nl)
}
