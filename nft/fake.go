package nft

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"go4.org/netipx"
)

// A Fake is nf_tables in memory, for tests that need a kernel but not
// root, on any platform, as knftables' Fake is for its users. It stands
// for one network namespace holding at most one inet table (ours), the
// ruleset generation, the base chains of other tables on the forward
// hook, owner beacons and commit monitors.
//
// Its methods are Conn's of the same name and do what Conn documents,
// without the netlink: a whole table replaces what the Fake holds, a
// delta is applied to it, and each batch is checked against the
// generation it names (ErrGenerationChanged) and against what the kernel
// would refuse where that is cheap to tell: a jump, goto or lookup naming
// a chain or set that is not there (ENOENT), a chain or set deleted while
// still referenced (EBUSY), an element deleted that is not there, a
// chain or set added twice (EEXIST). A refused batch changes nothing.
// Hold returns an io.Closer and Monitor a *FakeMonitor, where Conn has
// concrete types of the netlink side.
//
// The knobs play what others do to the kernel: Refuse refuses the next
// batches, Commit is another process committing to another table,
// Tamper and DeleteTable another process changing our table (drift, seen
// by the monitors as a foreign commit), AddForwardChain another table's
// forward chain, and DeleteNetns the namespace going away. Dump prints
// what the Fake holds.
//
// Its BatchStats count elements as the kernel does (an address each in a
// set held per address) but messages only roughly: one a set and one a
// side of an update, where the writer sends 512 elements a message.
//
// A Fake is safe for concurrent use.
type Fake struct {
	mu        sync.Mutex
	table     *Table // our table as the kernel holds it, the Fake's own copy; nil: none
	gen       uint32
	touched   map[uint32]bool // generations whose commit changed our table
	forward   []BaseChain     // other tables' base chains
	beacons   map[string]bool // tokens of the beacons held
	monitors  map[*FakeMonitor]bool
	refuse    int // batches still to refuse with refuseErr
	refuseErr error
	netnsErr  error
	batches   int // batches received, refused ones included
}

// NewFake returns an empty Fake: no table, generation 1.
func NewFake() *Fake {
	return &Fake{gen: 1, touched: map[uint32]bool{}, beacons: map[string]bool{}, monitors: map[*FakeMonitor]bool{}}
}

// Dump renders the table the Fake holds as Render does, "" when it holds
// none. As `nft list` does, it lists in an order of its own: sets and
// chains by name, elements sorted, so two tables of the same content dump
// the same.
func (f *Fake) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.table == nil {
		return ""
	}
	return Render(canonical(f.table))
}

// Batches returns the number of batches sent to the Fake, refused ones
// included. An empty delta sends none.
func (f *Fake) Batches() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.batches
}

// Refuse makes the kernel refuse the next n batches with err, changing
// nothing: ErrGenerationChanged plays a commit that slipped in before
// each, another error a batch the kernel does not take.
func (f *Fake) Refuse(n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse, f.refuseErr = n, err
}

// Commit plays another process committing to another table (kube-proxy,
// every second on a busy node): the generation moves, our table stays.
func (f *Fake) Commit() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gen++
}

// Tamper plays another process committing a change to our table (`nft
// flush map`, a rule replaced, a record restored from a backup): change
// modifies the table the Fake holds in place. The generation moves, and
// the monitors see a foreign commit to our table. There must be a table.
func (f *Fake) Tamper(change func(t *Table)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.table == nil {
		panic("nft.Fake.Tamper: there is no table")
	}
	change(f.table)
	f.foreignCommitLocked()
}

// DeleteTable plays another process deleting our table (`nft flush
// ruleset`), a foreign commit to it as Tamper is.
func (f *Fake) DeleteTable() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.table = nil
	f.foreignCommitLocked()
}

func (f *Fake) foreignCommitLocked() {
	f.gen++
	f.touched[f.gen] = true
	for m := range f.monitors {
		signal(m.foreign)
	}
}

// AddForwardChain plays another table's base chain registered on a hook
// (c.Hook): the generation moves, and, on the forward hook, the monitors
// signal it (Monitor.ForwardChains).
func (f *Fake) AddForwardChain(c BaseChain) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forward = append(f.forward, c)
	f.gen++
	if c.Hook == "forward" {
		for m := range f.monitors {
			signal(m.forward)
		}
	}
}

// DeleteNetns plays the namespace being deleted: CheckNetns reports
// ErrNetnsGone from then on.
func (f *Fake) DeleteNetns() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.netnsErr = fmt.Errorf("netns of the nft.Fake was deleted: %w", ErrNetnsGone)
}

// Generation returns the current ruleset generation.
func (f *Fake) Generation() (uint32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gen, nil
}

// CheckNetns reports ErrNetnsGone after DeleteNetns.
func (f *Fake) CheckNetns() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.netnsErr
}

// ApplyAt replaces the table with t, checked against gen (0: unchecked).
func (f *Fake) ApplyAt(t *Table, gen uint32) (BatchStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applyLocked(t, gen)
}

// ApplyGuarded is ApplyAt guarded by check, as Conn.ApplyGuarded: the
// generation and then the table's comment are read, check decides (its
// error cancels the batch and is returned as is), and the batch is
// checked against that generation. check runs without the Fake's lock, so
// it may call the Fake (Alive).
func (f *Fake) ApplyGuarded(t *Table, check func(comment string, exists bool) error) (BatchStats, error) {
	f.mu.Lock()
	gen := f.gen
	comment, exists := "", f.table != nil && f.table.Name == t.Name
	if exists {
		comment = f.table.Comment
	}
	f.mu.Unlock()
	if err := check(comment, exists); err != nil {
		return BatchStats{}, err
	}
	return f.ApplyAt(t, gen)
}

// WriteDeltaAt applies d, the delta to new, checked against gen (0:
// unchecked); a Full delta replaces the table, an empty one sends nothing
// and returns gen, as Conn.WriteDeltaAt.
func (f *Fake) WriteDeltaAt(d *Delta, new *Table, gen uint32) (BatchStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d.Full {
		return f.applyLocked(new, gen)
	}
	if d.Empty() {
		return BatchStats{Generation: gen}, nil
	}
	op := "update table inet " + new.Name
	if err := f.sendLocked(op, gen); err != nil {
		return BatchStats{}, err
	}
	if f.table == nil || f.table.Name != new.Name {
		return BatchStats{}, fmt.Errorf("%s: %w", op, syscall.ENOENT)
	}
	next, st, err := applyDelta(f.table, d)
	if err != nil {
		return BatchStats{}, fmt.Errorf("%s: %w", op, err)
	}
	if err := checkRefs(next, f.table); err != nil {
		return BatchStats{}, fmt.Errorf("%s: %w", op, err)
	}
	f.table = next
	f.ourCommitLocked()
	st.Generation = f.gen
	return st, nil
}

// applyLocked replaces the table with t, as Conn.ApplyAt. f.mu is held.
func (f *Fake) applyLocked(t *Table, gen uint32) (BatchStats, error) {
	op := fmt.Sprintf("apply table %s %s", t.Family, t.Name)
	if t.Family != FamilyInet {
		return BatchStats{}, fmt.Errorf("%s: only inet tables are supported", op)
	}
	if err := f.sendLocked(op, gen); err != nil {
		return BatchStats{}, err
	}
	if f.table != nil && f.table.Name != t.Name {
		return BatchStats{}, fmt.Errorf("%s: an nft.Fake holds one table, and holds %s", op, f.table.Name)
	}
	if err := checkRefs(t, nil); err != nil {
		return BatchStats{}, fmt.Errorf("%s: %w", op, err)
	}
	f.table = cloneTable(t)
	f.ourCommitLocked()
	st := BatchStats{Full: true, Messages: 3, ChainsWritten: len(t.Chains), Generation: f.gen}
	for _, s := range t.Sets {
		st.Messages++
		st.ElementsAdded += kernelLen(s, s.List())
	}
	for _, c := range t.Chains {
		st.Messages += 1 + len(c.Rules)
	}
	return st, nil
}

// sendLocked is a batch reaching the kernel: refused by the knob, or for
// a generation that is not the current one. f.mu is held.
func (f *Fake) sendLocked(op string, gen uint32) error {
	f.batches++
	if f.refuse > 0 {
		f.refuse--
		return fmt.Errorf("%s: %w", op, f.refuseErr)
	}
	if gen != 0 && gen != f.gen {
		return fmt.Errorf("%s: %w", op, ErrGenerationChanged)
	}
	return nil
}

func (f *Fake) ourCommitLocked() {
	f.gen++
	f.touched[f.gen] = true
}

// applyDelta returns old with d applied, as a new table, and what the
// batch held, or the first change the kernel would refuse.
func applyDelta(old *Table, d *Delta) (*Table, BatchStats, error) {
	t := cloneTable(old)
	var st BatchStats
	chain := func(name string) int {
		return slices.IndexFunc(t.Chains, func(c *Chain) bool { return c.Name == name })
	}
	set := func(name string) int { return slices.IndexFunc(t.Sets, func(s *Set) bool { return s.Name == name }) }
	for _, c := range d.AddChains {
		if chain(c.Name) >= 0 {
			return nil, st, fmt.Errorf("add chain %s: %w", c.Name, syscall.EEXIST)
		}
		t.Chains = append(t.Chains, cloneChain(c))
		st.Messages += 1 + len(c.Rules)
		st.ChainsWritten++
	}
	for _, s := range d.AddSets {
		if set(s.Name) >= 0 {
			return nil, st, fmt.Errorf("add set %s: %w", s.Name, syscall.EEXIST)
		}
		t.Sets = append(t.Sets, cloneSet(s))
		st.Messages++
		st.ElementsAdded += kernelLen(s, s.List())
	}
	for _, u := range d.UpdateSets {
		i := set(u.New.Name)
		if i < 0 {
			return nil, st, fmt.Errorf("set %s: %w", u.New.Name, syscall.ENOENT)
		}
		s := t.Sets[i]
		if s.PerAddress {
			// As the kernel holds it: an element an address.
			gone, came := u.kernelChanges()
			held, err := applyAddressChanges(s, gone, came)
			if err != nil {
				return nil, st, err
			}
			s.Elements = held
			st.Messages += min(len(gone), 1) + min(len(came), 1)
			st.ElementsDeleted += kernelLen(s, gone)
			st.ElementsAdded += kernelLen(s, came)
			continue
		}
		gone, came := u.changes()
		for _, e := range gone {
			j := slices.IndexFunc(s.Elements, func(x Element) bool { return x.normalize() == e.normalize() })
			if j < 0 {
				return nil, st, fmt.Errorf("set %s: delete element %s: %w", s.Name, renderElement(s, e), syscall.ENOENT)
			}
			s.Elements = slices.Delete(s.Elements, j, j+1)
		}
		for _, e := range came {
			if !slices.ContainsFunc(s.Elements, func(x Element) bool { return x.normalize() == e.normalize() }) {
				s.Elements = append(s.Elements, e)
			}
		}
		st.Messages += min(len(gone), 1) + min(len(came), 1)
		st.ElementsDeleted += len(gone)
		st.ElementsAdded += len(came)
	}
	for _, c := range d.RewriteChains {
		i := chain(c.Name)
		if i < 0 {
			return nil, st, fmt.Errorf("flush chain %s: %w", c.Name, syscall.ENOENT)
		}
		t.Chains[i] = cloneChain(c)
		st.Messages += 1 + len(c.Rules)
		st.ChainsWritten++
	}
	// In the writer's order, as the kernel checks it message by message:
	// the chains that go are flushed, then the sets go (busy while a rule
	// looks one up), then the chains (busy while a rule or a map element
	// goes to one).
	for _, name := range d.DeleteChains {
		i := chain(name)
		if i < 0 {
			return nil, st, fmt.Errorf("flush chain %s: %w", name, syscall.ENOENT)
		}
		c := cloneChain(t.Chains[i])
		c.Rules = nil
		t.Chains[i] = c
	}
	for _, name := range d.DeleteSets {
		i := set(name)
		if i < 0 {
			return nil, st, fmt.Errorf("delete set %s: %w", name, syscall.ENOENT)
		}
		if by := referrer(t, "set", name); by != "" {
			return nil, st, fmt.Errorf("delete set %s, still looked up by %s: %w", name, by, syscall.EBUSY)
		}
		t.Sets = slices.Delete(t.Sets, i, i+1)
		st.Messages++
	}
	for _, name := range d.DeleteChains {
		if by := referrer(t, "chain", name); by != "" {
			return nil, st, fmt.Errorf("delete chain %s, still gone to by %s: %w", name, by, syscall.EBUSY)
		}
		t.Chains = slices.Delete(t.Chains, chain(name), chain(name)+1)
		st.Messages += 2
	}
	return t, st, nil
}

// kernelLen is how many kernel elements elems of s are: an address each
// in a set held per address, else one each.
func kernelLen(s *Set, elems []Element) int {
	if !s.PerAddress {
		return len(elems)
	}
	n := 0
	for _, e := range elems {
		for range Addresses(e) {
			n++
		}
	}
	return n
}

// applyAddressChanges is s's ranges with the addresses of gone taken out
// and those of came put in, as the kernel's per-address elements change;
// deleting an address s does not hold is ENOENT, as in the kernel.
func applyAddressChanges(s *Set, gone, came []Element) ([]Element, error) {
	var b netipx.IPSetBuilder
	for _, e := range s.Elements {
		b.AddRange(addrRangeOf(e))
	}
	for _, e := range gone {
		// What this batch deleted already is not held any more: the
		// kernel refuses an address deleted twice.
		if held, _ := b.IPSet(); !held.ContainsRange(addrRangeOf(e)) {
			return nil, fmt.Errorf("set %s: delete element %s: %w", s.Name, renderAddrRange(e), syscall.ENOENT)
		}
		b.RemoveRange(addrRangeOf(e))
	}
	for _, e := range came {
		b.AddRange(addrRangeOf(e))
	}
	next, _ := b.IPSet()
	return elementsOf(next), nil
}

// referrer names what in t refers to the chain or set name (kind), or
// returns "": a rule, or for a chain also a verdict map's element.
func referrer(t *Table, kind, name string) string {
	for _, c := range t.Chains {
		for i, r := range c.Rules {
			for _, e := range r.Exprs {
				if k, n := exprRef(e); k == kind && n == name {
					return fmt.Sprintf("chain %s rule %d", c.Name, i)
				}
			}
		}
	}
	if kind == "chain" {
		for _, s := range t.Sets {
			for _, e := range s.All() {
				if k, n := exprRef(e.Verdict); s.Verdict && k == kind && n == name {
					return "an element of map " + s.Name
				}
			}
		}
	}
	return ""
}

// exprRef is what an expression names: ("chain", name) for a jump or
// goto, ("set", name) for a set or map lookup, else nothing.
func exprRef(e Expr) (kind, name string) {
	switch e := e.(type) {
	case Verdict:
		if e.Kind == Jump || e.Kind == Goto {
			return "chain", e.Chain
		}
	case AddrInSet:
		return "set", e.Set
	case AddrVmap:
		return "set", e.Map
	case AddrProtoPortInSet:
		return "set", e.Set
	case AddrProtoPortVmap:
		return "set", e.Map
	}
	return "", ""
}

// checkRefs refuses a table in which a rule or a verdict map element
// names a chain or set that is not there: ENOENT, or EBUSY when before,
// the table the batch started from, had it (deleted while referenced).
func checkRefs(t, before *Table) error {
	chains, sets := map[string]bool{}, map[string]bool{}
	for _, c := range t.Chains {
		chains[c.Name] = true
	}
	for _, s := range t.Sets {
		sets[s.Name] = true
	}
	missing := func(kind, name string, have map[string]bool) error {
		if have[name] {
			return nil
		}
		if before != nil && (kind == "chain" && slices.ContainsFunc(before.Chains, func(c *Chain) bool { return c.Name == name }) ||
			kind == "set" && slices.ContainsFunc(before.Sets, func(s *Set) bool { return s.Name == name })) {
			return fmt.Errorf("%s %s deleted while referenced: %w", kind, name, syscall.EBUSY)
		}
		return fmt.Errorf("no %s %s: %w", kind, name, syscall.ENOENT)
	}
	ref := func(e Expr) error {
		switch kind, name := exprRef(e); kind {
		case "chain":
			return missing(kind, name, chains)
		case "set":
			return missing(kind, name, sets)
		}
		return nil
	}
	for _, c := range t.Chains {
		for i, r := range c.Rules {
			for _, e := range r.Exprs {
				if err := ref(e); err != nil {
					return fmt.Errorf("chain %s rule %d (%s): %w", c.Name, i, RenderRule(r), err)
				}
			}
		}
	}
	for _, s := range t.Sets {
		if !s.Verdict {
			continue
		}
		for _, e := range s.All() {
			if err := ref(e.Verdict); err != nil {
				return fmt.Errorf("map %s element %s: %w", s.Name, renderElement(s, e), err)
			}
		}
	}
	return nil
}

// Drift compares the table the Fake holds with t by content, as
// Conn.Drift: everything but the table's comment (the owner record, read
// with TableComment) and the order of chains, sets and elements.
func (f *Fake) Drift(t *Table) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.table == nil || f.table.Name != t.Name {
		return "table inet " + t.Name + " is gone", nil
	}
	got, want := canonical(f.table), canonical(t)
	got.Comment, want.Comment = "", ""
	g, w := strings.Split(Render(got), "\n"), strings.Split(Render(want), "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d is %q, programmed %q", i+1, strings.TrimSpace(gl), strings.TrimSpace(wl)), nil
		}
	}
	return "", nil
}

// TableComment returns the comment of the table name; ErrNoTable if the
// Fake holds no table of that name.
func (f *Fake) TableComment(name string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.table == nil || f.table.Name != name {
		return "", fmt.Errorf("read table inet %s: %w", name, ErrNoTable)
	}
	return f.table.Comment, nil
}

// BaseChains returns the base chains on hook: those AddForwardChain
// added, and our table's.
func (f *Fake) BaseChains(hook string) ([]BaseChain, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []BaseChain
	for _, c := range f.forward {
		if c.Hook == hook {
			out = append(out, c)
		}
	}
	if f.table != nil {
		for _, c := range f.table.Chains {
			if c.Hook != nil && c.Hook.Hook == hook {
				out = append(out, BaseChain{Family: f.table.Family, Table: f.table.Name, Name: c.Name,
					Type: c.Hook.Type, Hook: c.Hook.Hook, Priority: c.Hook.Priority})
			}
		}
	}
	return out, nil
}

// Hold holds o's beacon until the returned Closer is closed: Alive(o) is
// true meanwhile.
func (f *Fake) Hold(o Owner) (io.Closer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.beacons[o.Token] {
		return nil, fmt.Errorf("owner beacon %s: %w", o.Token, syscall.EADDRINUSE)
	}
	f.beacons[o.Token] = true
	return fakeBeacon{f, o.Token}, nil
}

type fakeBeacon struct {
	f     *Fake
	token string
}

func (b fakeBeacon) Close() error {
	b.f.mu.Lock()
	defer b.f.mu.Unlock()
	delete(b.f.beacons, b.token)
	return nil
}

// Alive reports whether o's beacon is held.
func (f *Fake) Alive(o Owner) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.beacons[o.Token], nil
}

// A FakeMonitor is a Monitor of a Fake. It sees every commit at once: the
// Fake's knobs signal it as they commit.
type FakeMonitor struct {
	f       *Fake
	table   string
	start   uint32 // generations up to this one are unknown, as for Monitor
	foreign chan struct{}
	forward chan struct{}
}

// Monitor starts following the commits to the table named table.
func (f *Fake) Monitor(table string) (*FakeMonitor, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := &FakeMonitor{f: f, table: table, start: f.gen, foreign: make(chan struct{}, 1), forward: make(chan struct{}, 1)}
	f.monitors[m] = true
	return m, nil
}

// Untouched reports whether no commit after since, up to upto, changed
// the table, as Monitor.Untouched; it never needs to wait.
func (m *FakeMonitor) Untouched(since, upto uint32, wait time.Duration) bool {
	m.f.mu.Lock()
	defer m.f.mu.Unlock()
	if !m.f.monitors[m] || since < m.start || upto > m.f.gen {
		return false
	}
	for g := since + 1; g <= upto; g++ {
		if m.f.touched[g] {
			return false
		}
	}
	return true
}

// Foreign signals commits to the table by others (Tamper, DeleteTable).
func (m *FakeMonitor) Foreign() <-chan struct{} { return m.foreign }

// ForwardChains signals other tables' new forward chains (AddForwardChain).
func (m *FakeMonitor) ForwardChains() <-chan struct{} { return m.forward }

// Close stops the monitor.
func (m *FakeMonitor) Close() error {
	m.f.mu.Lock()
	defer m.f.mu.Unlock()
	delete(m.f.monitors, m)
	return nil
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func cloneTable(t *Table) *Table {
	c := *t
	c.Sets = make([]*Set, len(t.Sets))
	for i, s := range t.Sets {
		c.Sets[i] = cloneSet(s)
	}
	c.Chains = make([]*Chain, len(t.Chains))
	for i, ch := range t.Chains {
		c.Chains[i] = cloneChain(ch)
	}
	return &c
}

func cloneSet(s *Set) *Set {
	c := *s
	c.Elements, c.Chunks = slices.Clone(s.List()), nil // the fake's own, edited in place
	return &c
}

func cloneChain(ch *Chain) *Chain {
	c := *ch
	if ch.Hook != nil {
		h := *ch.Hook
		c.Hook = &h
	}
	c.Rules = make([]Rule, len(ch.Rules))
	for i, r := range ch.Rules {
		c.Rules[i] = Rule{Exprs: slices.Clone(r.Exprs), Comment: r.Comment}
	}
	return &c
}

// canonical returns a copy of t with its chains and sets sorted by name
// and its elements sorted: what is listed in the same order whatever the
// order things were added in.
func canonical(t *Table) *Table {
	c := cloneTable(t)
	slices.SortFunc(c.Chains, func(a, b *Chain) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(c.Sets, func(a, b *Set) int { return cmp.Compare(a.Name, b.Name) })
	for _, s := range c.Sets {
		slices.SortFunc(s.Elements, compareElements)
	}
	return c
}

func compareElements(a, b Element) int {
	a, b = a.normalize(), b.normalize()
	return cmp.Or(a.Addr.Compare(b.Addr), a.Last.Compare(b.Last), cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.ProtoLast, b.ProtoLast),
		cmp.Compare(a.Port, b.Port), cmp.Compare(a.PortLast, b.PortLast),
		cmp.Compare(a.Verdict.Kind, b.Verdict.Kind), cmp.Compare(a.Verdict.Chain, b.Verdict.Chain))
}
