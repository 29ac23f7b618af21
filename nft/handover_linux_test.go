package nft

import (
	"errors"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// Addresses the interval-set table below judges: allowed is accepted by
// a lookup of the set, denied dropped by one, both on the output hook.
var (
	allowedAddr = netip.MustParseAddr("10.9.0.1")
	deniedAddr  = netip.MustParseAddr("10.9.0.2")
)

// intervalTable is a table whose output chain lets a packet to allowedAddr
// through only if the interval set s holds it, and drops one to
// deniedAddr only if s holds it; s also holds fill other ranges, for the
// kernel's commit to take a while over it.
func intervalTable(fill int, comment string) *Table {
	s := &Set{Name: "s", Key: KeyIPv4, Interval: true,
		Elements: []Element{{Addr: allowedAddr}, {Addr: deniedAddr}}}
	for i := range fill {
		a := netip.AddrFrom4([4]byte{11, byte(i >> 8), byte(i), 0})
		s.Elements = append(s.Elements, Element{Addr: a, Last: netip.AddrFrom4([4]byte{11, byte(i >> 8), byte(i), 3})})
	}
	return &Table{Family: FamilyInet, Name: "nftpolicy", Comment: comment, Sets: []*Set{s}, Chains: []*Chain{{
		Name: "out",
		Hook: &Hook{Type: "filter", Hook: "output", Priority: 0, Policy: Accept},
		Rules: []Rule{
			{Exprs: []Expr{AddrEq{Field: Daddr, Addr: deniedAddr}, AddrInSet{Family: IPv4, Field: Daddr, Set: "s"}, Verdict{Kind: Drop}}},
			{Exprs: []Expr{AddrEq{Field: Daddr, Addr: allowedAddr}, AddrInSet{Family: IPv4, Field: Daddr, Set: "s"}, Verdict{Kind: Accept}}},
			{Exprs: []Expr{AddrEq{Field: Daddr, Addr: allowedAddr}, Verdict{Kind: Drop}}},
		},
	}}}
}

// udpSocketIn opens a UDP socket in the named network namespace.
func udpSocketIn(t *testing.T, ns string) int {
	t.Helper()
	fd, err := func() (int, error) {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			return -1, err
		}
		defer self.Close()
		target, err := os.Open("/run/netns/" + ns)
		if err != nil {
			runtime.UnlockOSThread()
			return -1, err
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			return -1, err
		}
		fd, serr := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			// The thread stays locked, so the runtime ends it with the
			// goroutine rather than reuse it in the wrong namespace.
			return -1, errors.Join(serr, err)
		}
		runtime.UnlockOSThread()
		return fd, serr
	}()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// A verdictCounter sends to both addresses without pause and counts what
// the table should never do: refuse a packet to allowedAddr (a block), or
// let one to deniedAddr go (a leak).
type verdictCounter struct {
	stop          atomic.Bool
	done          sync.WaitGroup
	sent          atomic.Int64
	blocks, leaks atomic.Int64
}

func startVerdictCounter(t *testing.T, ns string) *verdictCounter {
	fd := udpSocketIn(t, ns)
	v := &verdictCounter{}
	v.done.Add(1)
	go func() {
		defer v.done.Done()
		to := func(a netip.Addr) *unix.SockaddrInet4 { return &unix.SockaddrInet4{Port: 9, Addr: a.As4()} }
		allowed, denied := to(allowedAddr), to(deniedAddr)
		for !v.stop.Load() {
			if err := unix.Sendto(fd, []byte("x"), 0, allowed); err != nil {
				v.blocks.Add(1)
			}
			if err := unix.Sendto(fd, []byte("x"), 0, denied); err == nil {
				v.leaks.Add(1)
			}
			v.sent.Add(2)
		}
	}()
	return v
}

func (v *verdictCounter) finish() {
	v.stop.Store(true)
	v.done.Wait()
}

// A table replaced whole, again and again, while packets ask its interval
// set: none may be judged without the set, which the kernel's commit
// fills only after the new rules are in force (see handover_linux.go).
// Replaced in one batch, this dropped thousands of packets the table
// accepts before and after, and let as many through that it drops.
func TestKernelWholeWriteIsAtomicForIntervalSets(t *testing.T) {
	ns, c := openTestNS(t)
	for _, a := range []netip.Addr{allowedAddr, deniedAddr} {
		testns.Exec(t, ns, "", "ip", "addr", "add", a.String()+"/32", "dev", "lo")
	}
	testns.Exec(t, ns, "", "ip", "link", "set", "lo", "up")
	if _, err := c.Apply(intervalTable(20000, "first")); err != nil {
		t.Fatal(err)
	}
	v := startVerdictCounter(t, ns)
	const writes = 10
	for i := range writes {
		// ApplyGuarded as the daemon writes, and Apply as apply does.
		table := intervalTable(20000, "again")
		var st BatchStats
		var err error
		if i%2 == 0 {
			st, err = c.ApplyGuarded(table, func(string, bool) error { return nil })
		} else {
			st, err = c.Apply(table)
		}
		if err != nil {
			v.finish()
			t.Fatal(err)
		}
		if !st.Handover {
			t.Errorf("write %d of a table in force with an interval set did not go through the handover table", i)
		}
	}
	v.finish()
	t.Logf("%d packets sent over %d whole writes", v.sent.Load(), writes)
	if v.sent.Load() == 0 {
		t.Fatal("no packet was sent")
	}
	if b, l := v.blocks.Load(), v.leaks.Load(); b != 0 || l != 0 {
		t.Errorf("while the table was replaced, %d packets it allows were dropped and %d it drops got through", b, l)
	}
	// What is left is our table, awake, with its comment, and no
	// handover table.
	if out := testns.Nft(t, ns, "", "list", "tables"); strings.Contains(out, HandoverTable("nftpolicy")) {
		t.Errorf("the handover table is left:\n%s", out)
	}
	comment, err := c.TableComment("nftpolicy")
	if err != nil || comment != "again" {
		t.Errorf("table comment %q, %v; want %q", comment, err, "again")
	}
	if d, err := c.Drift(intervalTable(20000, "again")); d != "" || err != nil {
		t.Errorf("after the writes: drift %q, %v", d, err)
	}
}

// A whole write that stopped half way leaves the handover table: awake
// with ours dormant (stopped before its last batch), or dormant (stopped
// before its second). The next whole write ends both without a gap, and
// Delete takes the handover table with ours.
func TestKernelWholeWriteRecoversAHalfDoneHandover(t *testing.T) {
	ns, c := openTestNS(t)
	for _, a := range []netip.Addr{allowedAddr, deniedAddr} {
		testns.Exec(t, ns, "", "ip", "addr", "add", a.String()+"/32", "dev", "lo")
	}
	testns.Exec(t, ns, "", "ip", "link", "set", "lo", "up")
	table := intervalTable(5000, "ours")
	if _, err := c.Apply(table); err != nil {
		t.Fatal(err)
	}
	handover := HandoverTable("nftpolicy")
	marker, err := tableUserdataAttr(handoverComment)
	if err != nil {
		t.Fatal(err)
	}
	dormantHandover := replaceStep{name: handover, dormant: true, comment: marker}
	step := func(s replaceStep) {
		t.Helper()
		if _, err := c.replace("test step", table, s, 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	flags := func(name string) (uint32, bool) {
		t.Helper()
		f, ok, err := c.tableFlagsOf(name)
		if err != nil {
			t.Fatal(err)
		}
		return f, ok
	}
	settled := func(what string) {
		t.Helper()
		if f, ok := flags("nftpolicy"); !ok || f != 0 {
			t.Errorf("%s: our table exists %v, flags %#x; want it awake", what, ok, f)
		}
		if _, ok := flags(handover); ok {
			t.Errorf("%s: the handover table is left", what)
		}
		if d, err := c.Drift(table); d != "" || err != nil {
			t.Errorf("%s: drift %q, %v", what, d, err)
		}
	}

	// Stopped before the last batch: the handover table in force, ours
	// dormant under it.
	step(dormantHandover)
	step(replaceStep{wake: handover, sleep: "nftpolicy"})
	if f, _ := flags("nftpolicy"); f&unix.NFT_TABLE_F_DORMANT == 0 {
		t.Fatalf("set-up: our table is not dormant (flags %#x)", f)
	}
	v := startVerdictCounter(t, ns)
	st, err := c.ApplyGuarded(table, func(string, bool) error { return nil })
	v.finish()
	if err != nil {
		t.Fatal(err)
	}
	if !st.Handover {
		t.Error("the write over an awake handover table did not go through it")
	}
	if b, l := v.blocks.Load(), v.leaks.Load(); b != 0 || l != 0 || v.sent.Load() == 0 {
		t.Errorf("recovering: %d of %d packets blocked, %d leaked", b, v.sent.Load(), l)
	}
	settled("after a write over an awake handover table")

	// Stopped before the second batch: a dormant handover table.
	step(dormantHandover)
	if _, err := c.Apply(table); err != nil {
		t.Fatal(err)
	}
	settled("after a write over a dormant handover table")

	// A table with no interval set is written in one batch, which takes a
	// dormant handover table away too.
	step(dormantHandover)
	plain := intervalTable(0, "plain")
	plain.Sets[0].Interval, plain.Sets[0].PerAddress = false, true
	if st, err := c.Apply(plain); err != nil || st.Handover {
		t.Fatalf("a table without interval sets: handover %v, %v; want one batch", st.Handover, err)
	}
	if _, ok := flags(handover); ok {
		t.Error("a one-batch write left the handover table")
	}

	// Delete takes both.
	step(dormantHandover)
	if err := c.Delete(FamilyInet, "nftpolicy"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"nftpolicy", handover} {
		if _, ok := flags(name); ok {
			t.Errorf("Delete left table %s", name)
		}
	}
	// With no table in force, a write is one batch: there is nothing to
	// protect.
	if st, err := c.Apply(table); err != nil || st.Handover {
		t.Errorf("a write with no table in force: handover %v, %v; want one batch", st.Handover, err)
	}
}

// withSetName is t with its set, and every lookup of it, renamed.
func withSetName(t *Table, name string) *Table {
	s := *t.Sets[0]
	s.Name = name
	out := *t
	out.Sets = []*Set{&s}
	ch := *t.Chains[0]
	ch.Rules = nil
	for _, r := range t.Chains[0].Rules {
		var exprs []Expr
		for _, e := range r.Exprs {
			if in, ok := e.(AddrInSet); ok {
				in.Set = name
				e = in
			}
			exprs = append(exprs, e)
		}
		ch.Rules = append(ch.Rules, Rule{Exprs: exprs})
	}
	out.Chains = []*Chain{&ch}
	return &out
}

// A delta that moves the rules to a new interval set, and back, while
// packets ask it: the new set must be filled before the rules look it up.
// In the delta's own batch, it was not, with as many blocks and leaks as
// a whole write.
func TestKernelDeltaCreatingAnIntervalSetIsAtomic(t *testing.T) {
	ns, c := openTestNS(t)
	for _, a := range []netip.Addr{allowedAddr, deniedAddr} {
		testns.Exec(t, ns, "", "ip", "addr", "add", a.String()+"/32", "dev", "lo")
	}
	testns.Exec(t, ns, "", "ip", "link", "set", "lo", "up")
	tables := []*Table{intervalTable(20000, ""), withSetName(intervalTable(20000, ""), "s2")}
	st, err := c.Apply(tables[0])
	if err != nil {
		t.Fatal(err)
	}
	gen := st.Generation
	v := startVerdictCounter(t, ns)
	const writes = 10
	for i := range writes {
		old, new := tables[i%2], tables[(i+1)%2]
		st, err := c.WriteDeltaAt(Diff(old, new), new, gen)
		if err != nil {
			v.finish()
			t.Fatal(err)
		}
		if st.Staged != 1 {
			t.Errorf("write %d staged %d sets, want 1", i, st.Staged)
		}
		gen = st.Generation
	}
	v.finish()
	t.Logf("%d packets sent over %d deltas", v.sent.Load(), writes)
	if b, l := v.blocks.Load(), v.leaks.Load(); b != 0 || l != 0 || v.sent.Load() == 0 {
		t.Errorf("while the rules moved between interval sets, %d of %d packets they allow were dropped and %d they drop got through", b, v.sent.Load(), l)
	}
	if d, err := c.Drift(tables[writes%2]); d != "" || err != nil {
		t.Errorf("after the deltas: drift %q, %v", d, err)
	}

	// A delta the kernel refuses after its sets were staged (a jump to a
	// chain that does not exist) leaves no staged set behind.
	old := tables[writes%2]
	broken := withSetName(old, "s3")
	// With an interval verdict map, staged with the new chain it jumps to.
	broken.Sets = append(broken.Sets, &Set{Name: "m", Key: KeyIPv4, Interval: true, Verdict: true,
		Elements: []Element{{Addr: deniedAddr, Verdict: Verdict{Kind: Jump, Chain: "leaf"}}}})
	broken.Chains = append(broken.Chains, &Chain{Name: "leaf", Rules: []Rule{{Exprs: []Expr{Verdict{Kind: Drop}}}}})
	broken.Chains[0].Rules = append(broken.Chains[0].Rules,
		Rule{Exprs: []Expr{AddrVmap{Family: IPv4, Field: Daddr, Map: "m"}}},
		Rule{Exprs: []Expr{Verdict{Kind: Jump, Chain: "no-such-chain"}}})
	if _, err := c.WriteDeltaAt(Diff(old, broken), broken, gen); err == nil || errors.Is(err, ErrGenerationChanged) {
		t.Fatalf("a delta jumping to a missing chain: %v, want the kernel's refusal", err)
	}
	if d, err := c.Drift(old); d != "" || err != nil {
		t.Errorf("after a refused delta: drift %q, %v", d, err)
	}
	// One at a stale generation stages nothing.
	new := tables[(writes+1)%2]
	if _, err := c.WriteDeltaAt(Diff(old, new), new, gen-1); !errors.Is(err, ErrGenerationChanged) {
		t.Fatalf("a delta at a stale generation: %v, want ErrGenerationChanged", err)
	}
	if d, err := c.Drift(old); d != "" || err != nil {
		t.Errorf("after a delta at a stale generation: drift %q, %v", d, err)
	}
	if gen, err = c.Generation(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteDeltaAt(Diff(old, new), new, gen); err != nil {
		t.Fatal(err)
	}
	if d, err := c.Drift(new); d != "" || err != nil {
		t.Errorf("after the retry: drift %q, %v", d, err)
	}
}

// tableFlagsOf, for tests, reads the flags of the inet table name; exists is false if
// there is none.
func (c *Conn) tableFlagsOf(name string) (flags uint32, exists bool, err error) {
	info, err := c.tableInfo(name)
	if errors.Is(err, ErrNoTable) {
		return 0, false, nil
	}
	return info.flags, err == nil, err
}

// live, for tests, reports whether the inet table name exists and is not dormant: its
// base chains see packets.
func (c *Conn) live(name string) (bool, error) {
	flags, exists, err := c.tableFlagsOf(name)
	return exists && flags&unix.NFT_TABLE_F_DORMANT == 0, err
}
