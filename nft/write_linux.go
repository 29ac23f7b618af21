package nft

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// elementsPerMessage bounds how many set elements go into one netlink
// message. The element list is a nested attribute whose length field is 16
// bits, so one message must stay well under 64 KiB: a v6 concatenated
// element with its attributes is about 60 bytes.
const elementsPerMessage = 512

// A Conn is a handle on nf_tables in one network namespace.
//
// Every operation builds its own google/nftables connection: messages queue
// inside that object until Flush, so a batch abandoned halfway (an encoding
// error) is dropped with it and can never leak into the next batch. Batches
// reach the kernel through a batchTransport of their own (see transport_linux.go),
// which adds the generation check and reads back the generation committed.
// The netlink socket under them is kept from one batch to the next, drained
// in between; one whose socket failed is closed. A Conn may be used from
// several goroutines; Close releases the socket.
type Conn struct {
	nsFd int    // -1 when operating in the caller's own namespace
	path string // of the namespace nsFd holds, for CheckNetns

	mu     sync.Mutex
	idle   *netlink.Conn // socket of the last batch, for the next one
	closed bool

	ports ownPorts // of the batch sockets, to tell our commits (see Monitor.Foreign)
}

// newBatch returns a fresh google/nftables connection with an empty message
// queue, in this Conn's namespace, for reading. Batches that write use
// newBatchConn.
func (c *Conn) newBatch() (*nftables.Conn, error) {
	opts := []nftables.ConnOption{nftables.WithSockOptions(largeBuffers)}
	if c.nsFd >= 0 {
		opts = append(opts, nftables.WithNetNSFd(c.nsFd))
	}
	return nftables.New(opts...)
}

// Socket buffer sizes for a batch. A batch goes to the kernel in a single
// sendmsg, which netlink refuses (EMSGSIZE) when it exceeds the socket's send
// buffer, and the kernel queues one ack per message, which overflows a small
// receive buffer (ENOBUFS). nft itself raises both with the *FORCE options,
// which need CAP_NET_ADMIN, as writing nf_tables does anyway. These are
// limits, not allocations: the kernel only uses what a batch needs.
const (
	sendBufferBytes    = 512 << 20
	receiveBufferBytes = 64 << 20
)

func largeBuffers(conn *netlink.Conn) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sendBufferBytes); serr != nil {
			return
		}
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, receiveBufferBytes)
	})
	if err != nil {
		return err
	}
	return serr
}

// Open connects to nf_tables in the network namespace netns: "" for the
// current one, a name under /run/netns (as `ip netns add` makes), or a path
// to a namespace file such as /proc/PID/ns/net.
func Open(netns string) (*Conn, error) {
	if netns == "" {
		return &Conn{nsFd: -1}, nil
	}
	path := netns
	if !strings.Contains(netns, "/") {
		path = "/run/netns/" + netns
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", path, err)
	}
	return &Conn{nsFd: fd, path: path}, nil
}

// Close releases the namespace handle.
func (c *Conn) Close() error {
	c.mu.Lock()
	idle := c.idle
	c.idle, c.closed = nil, true
	c.mu.Unlock()
	if idle != nil {
		idle.Close()
	}
	if c.nsFd >= 0 {
		return unix.Close(c.nsFd)
	}
	return nil
}

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

// apply is ApplyAt; a guard, if any, gives the generation to check
// against right before the batch is sent, or cancels it (see
// ApplyGuarded). The table's comment goes into each message creating it.
func (c *Conn) apply(t *Table, gen uint32, guard func() (uint32, error)) (BatchStats, error) {
	if t.Family != FamilyInet {
		return BatchStats{}, fmt.Errorf("apply table %s %s: only inet tables are supported", t.Family, t.Name)
	}
	b, err := c.newWriter(t.Name, gen)
	if err != nil {
		return BatchStats{}, fmt.Errorf("apply table %s %s: netlink: %w", t.Family, t.Name, err)
	}
	b.tx.guard = guard
	if b.tx.tableUserdata, err = tableUserdataAttr(t.Comment); err != nil {
		return BatchStats{}, fmt.Errorf("apply table %s %s: %w", t.Family, t.Name, err)
	}
	b.stats.Full = true
	b.nl.AddTable(b.table)
	b.nl.DelTable(b.table)
	b.nl.AddTable(b.table)
	b.stats.Messages += 3
	if err := b.writeTable(t); err != nil {
		return BatchStats{}, fmt.Errorf("apply table %s %s: %w", t.Family, t.Name, err)
	}
	if err := b.flush(fmt.Sprintf("apply table %s %s", t.Family, t.Name)); err != nil {
		return BatchStats{}, err
	}
	return b.stats, nil
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

// WriteDeltaAt writes d, the delta from the table the kernel holds to new,
// checked against the generation gen (0: unchecked). It is UpdateAt for a
// caller that knows the delta without diffing two whole tables (see
// enforcer.Compiler.Delta). A Full delta replaces the table as ApplyAt does.
//
// An empty delta sends nothing and reads nothing: BatchStats.Generation is
// gen itself, since the kernel holds what it held at gen whatever others
// committed since; a stale gen is found by the next delta that writes.
func (c *Conn) WriteDeltaAt(d *Delta, new *Table, gen uint32) (BatchStats, error) {
	if d.Full {
		return c.ApplyAt(new, gen)
	}
	if d.Empty() {
		return BatchStats{Generation: gen}, nil
	}
	b, err := c.newWriter(new.Name, gen)
	if err != nil {
		return BatchStats{}, fmt.Errorf("update table inet %s: netlink: %w", new.Name, err)
	}
	if err := b.writeDelta(d, new); err != nil {
		return BatchStats{}, fmt.Errorf("update table inet %s: %w", new.Name, err)
	}
	if err := b.flush("update table inet " + new.Name); err != nil {
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

// Delete removes the table. A table that does not exist is not an error.
func (c *Conn) Delete(family Family, name string) error {
	if family != FamilyInet {
		return fmt.Errorf("delete table %s %s: only inet tables are supported", family, name)
	}
	nl, tx, err := c.newBatchConn(0)
	if err != nil {
		return fmt.Errorf("delete table %s %s: netlink: %w", family, name, err)
	}
	table := &nftables.Table{Family: nftables.TableFamilyINet, Name: name}
	// Adding first makes the delete succeed whether or not the table exists,
	// in one transaction, as `nft add table; nft delete table` would.
	nl.AddTable(table)
	nl.DelTable(table)
	if _, err := tx.flush(nl); err != nil {
		return fmt.Errorf("delete table %s %s: %w", family, name, err)
	}
	return nil
}

// writeTable queues every chain, set and rule of t into a table that the
// batch has just (re)created.
func (b *writer) writeTable(t *Table) error {
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
					}
				}
			}
		}
	}
	for _, s := range new.Sets {
		if needed[s.Name] {
			b.sets[s.Name] = &nftables.Set{Table: b.table, Name: s.Name, KeyType: keyDatatype(s.Key), IsMap: s.Verdict, Interval: s.Interval}
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
	for _, name := range d.DeleteChains {
		b.nl.FlushChain(&nftables.Chain{Name: name, Table: b.table})
	}
	for _, name := range d.DeleteChains {
		b.nl.DelChain(&nftables.Chain{Name: name, Table: b.table})
	}
	b.stats.Messages += 2 * len(d.DeleteChains)
	for _, name := range d.DeleteSets {
		b.nl.DelSet(&nftables.Set{Table: b.table, Name: name})
		b.stats.Messages++
	}
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
	for i, r := range ch.Rules {
		exprs, err := encodeRule(r, b.sets)
		if err != nil {
			return fmt.Errorf("chain %s rule %d (%s): %w", ch.Name, i, RenderRule(r), err)
		}
		nr := &nftables.Rule{Table: b.table, Chain: b.chains[ch.Name], Exprs: exprs}
		if r.Comment != "" {
			nr.UserData = userdata.AppendString(nil, userdata.TypeComment, r.Comment)
		}
		b.nl.AddRule(nr)
		b.stats.Messages++
	}
	return nil
}

func hookNum(name string) (*nftables.ChainHook, error) {
	switch name {
	case "forward":
		return nftables.ChainHookForward, nil
	case "input":
		return nftables.ChainHookInput, nil
	case "output":
		return nftables.ChainHookOutput, nil
	case "prerouting":
		return nftables.ChainHookPrerouting, nil
	case "postrouting":
		return nftables.ChainHookPostrouting, nil
	}
	return nil, fmt.Errorf("unknown hook %q", name)
}

var (
	typeIPv4ProtoPort = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)
	typeIPv6ProtoPort = nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeInetProto, nftables.TypeInetService)
)

func keyDatatype(k KeyType) nftables.SetDatatype {
	switch k {
	case KeyIPv6:
		return nftables.TypeIP6Addr
	case KeyIPv4ProtoPort:
		return typeIPv4ProtoPort
	case KeyIPv6ProtoPort:
		return typeIPv6ProtoPort
	}
	return nftables.TypeIPAddr
}

func (b *writer) addSet(s *Set) error {
	if err := s.Validate(); err != nil {
		return err
	}
	ns := &nftables.Set{
		Table:        b.table,
		Name:         s.Name,
		Comment:      s.Comment,
		Interval:     s.Interval,
		KeyByteOrder: binaryutil.BigEndian,
		KeyType:      keyDatatype(s.Key),
	}
	if s.Verdict {
		ns.IsMap = true
		ns.DataType = nftables.TypeVerdict
	}
	elems, err := encodeElements(s)
	if err != nil {
		return err
	}
	if err := b.nl.AddSet(ns, nil); err != nil {
		return err
	}
	b.sets[s.Name] = ns
	b.stats.Messages++
	return b.elements(ns, elems, true)
}

// updateElements queues the difference between the encoded elements of two
// versions of a set. Diffing the encoded form handles interval sets
// exactly: a range is a start and an end element, and the leading end
// element at the zero address comes and goes with the first range.
func (b *writer) updateElements(u SetUpdate) error {
	gone, came := u.Removed, u.Added
	if !u.Exact {
		// An exact patch of a large set is trusted to keep it valid (the
		// incremental tests check it against the full set); anything else
		// is compared whole anyway, so it is checked whole.
		if err := u.New.Validate(); err != nil {
			return err
		}
		gone, came = diffElements(u.Old, u.New)
	}
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

// diffElements returns the elements old has and new has not, and the
// reverse. It compares model elements: its cost follows the size of the
// sets, but it never encodes what stays.
func diffElements(old, new *Set) (gone, came []Element) {
	had := make(map[Element]bool, len(old.Elements))
	for _, e := range old.Elements {
		had[e] = true
	}
	has := make(map[Element]bool, len(new.Elements))
	for _, e := range new.Elements {
		has[e] = true
	}
	for _, e := range old.Elements {
		if !has[e] {
			gone = append(gone, e)
		}
	}
	for _, e := range new.Elements {
		if !had[e] {
			came = append(came, e)
		}
	}
	return gone, came
}

// elementDelta encodes the elements gone from and come to a set between
// old and new: what to delete from it and add to it.
//
// Intervals are replaced whole: a range that grows or splits is deleted and
// its new ranges added, both start and end elements, in the same batch. A
// finer diff of the encoded boundaries (adding an end element inside a live
// range) is refused by the kernel's overlap check with EEXIST.
func elementDelta(old, new *Set, gone, came []Element) (del, add []nftables.SetElement, err error) {
	if del, err = encodeList(old, gone); err != nil {
		return nil, nil, err
	}
	if add, err = encodeList(new, came); err != nil {
		return nil, nil, err
	}
	if new.Interval {
		zero := nftables.SetElement{Key: addrBytes(zeroAddr(new.Key.Family())), IntervalEnd: true}
		switch before, after := leadingEnd(old), leadingEnd(new); {
		case before && !after:
			del = append([]nftables.SetElement{zero}, del...)
		case after && !before:
			add = append([]nftables.SetElement{zero}, add...)
		}
	}
	return del, add, nil
}

// elements queues additions (or deletions) in messages of at most
// elementsPerMessage elements.
func (b *writer) elements(ns *nftables.Set, elems []nftables.SetElement, add bool) error {
	for len(elems) > 0 {
		n := min(len(elems), elementsPerMessage)
		// Interval sets must not split a start from its end element.
		if ns.Interval && n < len(elems) && elems[n].IntervalEnd {
			n++
		}
		var err error
		if add {
			err = b.nl.SetAddElements(ns, elems[:n])
			b.stats.ElementsAdded += n
		} else {
			err = b.nl.SetDeleteElements(ns, elems[:n])
			b.stats.ElementsDeleted += n
		}
		if err != nil {
			return err
		}
		b.stats.Messages++
		elems = elems[n:]
	}
	return nil
}

// encodeElements turns model elements into netlink set elements. Interval
// sets are encoded the way nft encodes them: each range is a start element
// and an end element one past its last address, plus a leading end element
// at the zero address when the first range does not start there.
func encodeElements(s *Set) ([]nftables.SetElement, error) {
	out, err := encodeList(s, s.Elements)
	if err != nil || !leadingEnd(s) {
		return out, err
	}
	zero := nftables.SetElement{Key: addrBytes(zeroAddr(s.Key.Family())), IntervalEnd: true}
	return append([]nftables.SetElement{zero}, out...), nil
}

// leadingEnd reports whether an interval set's encoding starts with an end
// element at the zero address, as nft writes it when the first range does
// not start there: the kernel's interval tree needs the gap before the
// first range closed.
func leadingEnd(s *Set) bool {
	return s.Interval && len(s.Elements) > 0 && addrRangeOf(s.Elements[0]).From() != zeroAddr(s.Key.Family())
}

// encodeList encodes elements of s (all of them or a part) without the
// leading end element of an interval set.
func encodeList(s *Set, elems []Element) ([]nftables.SetElement, error) {
	out := make([]nftables.SetElement, 0, len(elems))
	fam := s.Key.Family()
	for i, e := range elems {
		if !e.Addr.IsValid() || FamilyOf(e.Addr) != fam {
			return nil, fmt.Errorf("element %d: address %v is not %s", i, e.Addr, fam.Keyword())
		}
		switch {
		case s.Verdict:
			kind, err := verdictKind(e.Verdict.Kind)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
			out = append(out, nftables.SetElement{Key: addrBytes(e.Addr), VerdictData: &expr.Verdict{Kind: kind, Chain: e.Verdict.Chain}})
		case s.Key.Concat():
			key := append(addrBytes(e.Addr), byte(e.Proto), 0, 0, 0, byte(e.Port>>8), byte(e.Port), 0, 0)
			out = append(out, nftables.SetElement{Key: key})
		case s.Interval:
			r := addrRangeOf(e)
			out = append(out, nftables.SetElement{Key: addrBytes(r.From())})
			if next := r.To().Next(); next.IsValid() {
				out = append(out, nftables.SetElement{Key: addrBytes(next), IntervalEnd: true})
			}
		default:
			out = append(out, nftables.SetElement{Key: addrBytes(e.Addr)})
		}
	}
	return out, nil
}

func zeroAddr(f IPFamily) netip.Addr {
	if f == IPv6 {
		return netip.IPv6Unspecified()
	}
	return netip.IPv4Unspecified()
}

func addrBytes(a netip.Addr) []byte {
	if a.Is4() || a.Is4In6() {
		b := a.Unmap().As4()
		return b[:]
	}
	b := a.As16()
	return b[:]
}

func verdictKind(k VerdictKind) (expr.VerdictKind, error) {
	switch k {
	case Accept:
		return expr.VerdictAccept, nil
	case Drop:
		return expr.VerdictDrop, nil
	case Return:
		return expr.VerdictReturn, nil
	case Jump:
		return expr.VerdictJump, nil
	case Goto:
		return expr.VerdictGoto, nil
	}
	return 0, fmt.Errorf("unknown verdict %q", k)
}

// Register numbers as nft allocates them. nft addresses the first operand as
// the 16-byte register 1; the following operands of a concatenation go into
// the next 4-byte registers (NFT_REG32_00 is 8), except that an operand
// starting on a 16-byte boundary is again named by its 16-byte register.
const (
	reg1        = 1
	reg32Offset = 8
)

// concatRegister is the register nft uses for the operand at byte offset off
// of a concatenation that starts in register 1.
func concatRegister(off uint32) uint32 {
	if off%16 == 0 {
		return reg1 + off/16
	}
	return reg32Offset + off/4
}

func encodeRule(r Rule, sets map[string]*nftables.Set) ([]expr.Any, error) {
	var out []expr.Any
	lookupSet := func(name string) (*nftables.Set, error) {
		s, ok := sets[name]
		if !ok {
			return nil, fmt.Errorf("set %q is not in the table", name)
		}
		return s, nil
	}
	for _, e := range r.Exprs {
		switch e := e.(type) {
		case CtStateEstablishedRelated:
			out = append(out,
				&expr.Ct{Register: reg1, Key: expr.CtKeySTATE},
				&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
					Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
					Xor:  binaryutil.NativeEndian.PutUint32(0)},
				&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: binaryutil.NativeEndian.PutUint32(0)},
			)
		case CtStatusDNAT:
			// IPS_DST_NAT (include/uapi/linux/netfilter/nf_conntrack_common.h).
			const ipsDstNAT = 1 << 5
			out = append(out,
				&expr.Ct{Register: reg1, Key: expr.CtKeySTATUS},
				&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
					Mask: binaryutil.NativeEndian.PutUint32(ipsDstNAT),
					Xor:  binaryutil.NativeEndian.PutUint32(0)},
				&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: binaryutil.NativeEndian.PutUint32(0)},
			)
		case ReversePath:
			// With F_PRESENT the lookup leaves 1 in the register when a
			// route exists; nft compares the whole 32-bit register (a
			// shorter compare lists as `exists/8`).
			out = append(out,
				&expr.Fib{Register: reg1, FlagSADDR: true, FlagIIF: true, ResultOIF: true, FlagPRESENT: true},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binaryutil.NativeEndian.PutUint32(1)},
			)
		case AddrEq:
			f := FamilyOf(e.Addr)
			out = append(out, matchNfproto(f)...)
			out = append(out, loadAddr(f, e.Field, reg1),
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: addrBytes(e.Addr)})
		case AddrInSet:
			s, err := lookupSet(e.Set)
			if err != nil {
				return nil, err
			}
			out = append(out, matchNfproto(e.Family)...)
			out = append(out, loadAddr(e.Family, e.Field, reg1),
				&expr.Lookup{SourceRegister: reg1, SetName: s.Name, SetID: s.ID})
		case AddrVmap:
			s, err := lookupSet(e.Map)
			if err != nil {
				return nil, err
			}
			out = append(out, matchNfproto(e.Family)...)
			out = append(out, loadAddr(e.Family, e.Field, reg1),
				&expr.Lookup{SourceRegister: reg1, DestRegister: 0, IsDestRegSet: true, SetName: s.Name, SetID: s.ID})
		case L4ProtoEq:
			out = append(out,
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{byte(e.Proto)}})
		case DportRange:
			out = append(out, &expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2})
			if e.First == e.Last {
				out = append(out, &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binaryutil.BigEndian.PutUint16(e.First)})
			} else {
				out = append(out,
					&expr.Cmp{Op: expr.CmpOpGte, Register: reg1, Data: binaryutil.BigEndian.PutUint16(e.First)},
					&expr.Cmp{Op: expr.CmpOpLte, Register: reg1, Data: binaryutil.BigEndian.PutUint16(e.Last)})
			}
		case AddrProtoPortInSet:
			s, err := lookupSet(e.Set)
			if err != nil {
				return nil, err
			}
			addrLen := uint32(4)
			if e.Family == IPv6 {
				addrLen = 16
			}
			out = append(out, matchNfproto(e.Family)...)
			out = append(out,
				loadAddr(e.Family, e.Field, reg1),
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: concatRegister(addrLen)},
				&expr.Payload{DestRegister: concatRegister(addrLen + 4), Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Lookup{SourceRegister: reg1, SetName: s.Name, SetID: s.ID})
		case ICMPv6TypeRange:
			out = append(out, matchNfproto(IPv6)...)
			out = append(out,
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{byte(ProtoICMPv6)}},
				&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1})
			if e.First == e.Last {
				out = append(out, &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{e.First}})
			} else {
				out = append(out,
					&expr.Cmp{Op: expr.CmpOpGte, Register: reg1, Data: []byte{e.First}},
					&expr.Cmp{Op: expr.CmpOpLte, Register: reg1, Data: []byte{e.Last}})
			}
		case MarkBitsSet:
			out = append(out,
				&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
				&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
					Mask: binaryutil.NativeEndian.PutUint32(e.Bits), Xor: binaryutil.NativeEndian.PutUint32(0)},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binaryutil.NativeEndian.PutUint32(e.Bits)})
		case SetMark:
			out = append(out,
				&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
				&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
					Mask: binaryutil.NativeEndian.PutUint32(^(e.Clear | e.Set)), Xor: binaryutil.NativeEndian.PutUint32(e.Set)},
				&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1})
		case Verdict:
			kind, err := verdictKind(e.Kind)
			if err != nil {
				return nil, err
			}
			out = append(out, &expr.Verdict{Kind: kind, Chain: e.Chain})
		default:
			return nil, fmt.Errorf("cannot encode %T", e)
		}
	}
	return out, nil
}

// matchNfproto is the implicit `meta nfproto ipv4` nft puts before any
// ip/ip6 payload match in an inet table.
func matchNfproto(f IPFamily) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{byte(f)}},
	}
}

func loadAddr(f IPFamily, field AddrField, reg uint32) *expr.Payload {
	off, n := uint32(12), uint32(4) // IPv4 saddr
	switch {
	case f == IPv4 && field == Daddr:
		off = 16
	case f == IPv6 && field == Saddr:
		off, n = 8, 16
	case f == IPv6 && field == Daddr:
		off, n = 24, 16
	}
	return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}
}

// BaseChains lists every base chain on the given hook in this namespace, in
// the families that see routed IP traffic (ip, ip6, inet).
func (c *Conn) BaseChains(hook string) ([]BaseChain, error) {
	want, err := hookNum(hook)
	if err != nil {
		return nil, err
	}
	nl, err := c.newBatch()
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	chains, err := nl.ListChains()
	if err != nil {
		return nil, fmt.Errorf("list chains: %w", err)
	}
	var out []BaseChain
	for _, ch := range chains {
		if ch.Hooknum == nil || ch.Priority == nil || *ch.Hooknum != *want {
			continue
		}
		fam, ok := familyName(ch.Table.Family)
		if !ok {
			continue
		}
		out = append(out, BaseChain{Family: fam, Table: ch.Table.Name, Name: ch.Name, Type: string(ch.Type), Hook: hook, Priority: int32(*ch.Priority)})
	}
	return out, nil
}

func familyName(f nftables.TableFamily) (Family, bool) {
	switch f {
	case nftables.TableFamilyINet:
		return FamilyInet, true
	case nftables.TableFamilyIPv4:
		return FamilyIPv4, true
	case nftables.TableFamilyIPv6:
		return FamilyIPv6, true
	}
	return "", false
}
