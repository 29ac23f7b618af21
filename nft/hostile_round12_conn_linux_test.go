package nft

import (
	"errors"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// Hostile round 12: one Conn shared by many goroutines, with its reads
// (Generation, the table's state before a delta) on the batch socket since
// 14d0d19. The promise under attack: every call returns a correct answer or
// an error, no call takes another's reply, nothing hangs, sockets stay
// bounded, a refusal leaves the Conn usable, and Close while calls are in
// flight ends them.

// r12Sockets counts the sockets this process holds.
func r12Sockets(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// r12Witness reads the generation of ns on a socket of its own, for
// bounds on what the Conn under attack answers.
type r12Witness struct {
	mu sync.Mutex
	nl *netlink.Conn
}

func r12NewWitness(t *testing.T, ns string) *r12Witness {
	t.Helper()
	fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	nl, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: fd})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nl.Close() })
	return &r12Witness{nl: nl}
}

func (w *r12Witness) gen() (uint32, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return ReadGeneration(w.nl)
}

// r12CrossTalk: error texts that can only come from a reply taken by the
// wrong call, or a reply of the wrong kind.
var r12CrossTalk = []string{"mismatched sequence", "mismatched PID", "sent no generation", "sent no table", "short NEWGEN", "without a generation id", "not a batch", "messages after the send"}

func r12CheckErr(t *testing.T, what string, err error) {
	if err == nil {
		return
	}
	for _, s := range r12CrossTalk {
		if strings.Contains(err.Error(), s) {
			t.Errorf("%s: an error only a reply meant for another call explains: %v", what, err)
		}
	}
}

// r12Ghost is a delta the kernel refuses (ENOENT): it deletes a set that
// does not exist.
func r12Ghost() *Delta { return &Delta{DeleteSets: []string{"ghost-r12"}} }

func r12Tables() (a, b *Table) {
	a, b = sampleTable(), changedSample()
	a.Comment, b.Comment = "r12-a", "r12-b"
	return a, b
}

// TestHostileRound12RefusedThenRead: a batch the kernel refuses, then at
// once each read on the same socket, many times: every read answers what
// the kernel holds, and the Conn still writes.
func TestHostileRound12RefusedThenRead(t *testing.T) {
	ns, c := openTestNS(t)
	w := r12NewWitness(t, ns)
	a, _ := r12Tables()
	st, err := c.Apply(a)
	if err != nil {
		t.Fatal(err)
	}
	gen := st.Generation
	for i := range 50 {
		_, err := c.WriteDeltaAt(r12Ghost(), a, 0)
		if err == nil || !errors.Is(err, unix.ENOENT) {
			t.Fatalf("round %d: a delta deleting a missing set: %v, want ENOENT", i, err)
		}
		r12CheckErr(t, "refused delta", err)
		g, err := c.Generation()
		if err != nil {
			t.Fatalf("round %d: Generation after a refusal: %v", i, err)
		}
		if wg, _ := w.gen(); g != wg || g != gen {
			t.Fatalf("round %d: Generation %d after a refusal; the kernel is at %d, last commit %d", i, g, wg, gen)
		}
		if cm, err := c.TableComment(a.Name); err != nil || cm != "r12-a" {
			t.Fatalf("round %d: TableComment after a refusal = %q, %v", i, cm, err)
		}
		// A stale generation refused, then a delta that does land.
		if i%5 == 4 {
			_, err := c.WriteDeltaAt(r12Ghost(), a, gen-1)
			if !errors.Is(err, ErrGenerationChanged) {
				t.Fatalf("round %d: stale delta: %v", i, err)
			}
			b := changedSample()
			b.Comment = a.Comment
			st, err := c.WriteDeltaAt(Diff(a, b), b, gen)
			if err != nil {
				t.Fatalf("round %d: delta after refusals: %v", i, err)
			}
			st2, err := c.WriteDeltaAt(Diff(b, a), a, st.Generation)
			if err != nil {
				t.Fatalf("round %d: delta back: %v", i, err)
			}
			gen = st2.Generation
		}
	}
	if d, err := c.Drift(a); d != "" || err != nil {
		t.Errorf("drift after the rounds: %q, %v", d, err)
	}
}

// TestHostileRound12MixedCallsOneConn: goroutines mix Generation,
// WriteDeltaAt, Apply, ApplyGuarded, Drift, ReadTable, TableComment and
// refused deltas on one Conn, with a Monitor on it, while `nft delete
// table` removes the table now and then. Every Generation lies between
// what a witness socket read before and after it; every comment read is
// one some writer wrote; nothing hangs; the sockets left are bounded.
// (Under -race it also reports the library's set-id race: see
// TestHostileRound12ConcurrentWritesNoDataRace.)
func TestHostileRound12MixedCallsOneConn(t *testing.T) {
	ns, c := openTestNS(t)
	w := r12NewWitness(t, ns)
	a, b := r12Tables()
	if _, err := c.Apply(a); err != nil {
		t.Fatal(err)
	}
	m, err := c.Monitor(a.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	base := r12Sockets(t)

	var stop atomic.Bool
	var wg sync.WaitGroup
	var calls, errs atomic.Int64
	errKinds := sync.Map{}
	note := func(what string, err error) {
		calls.Add(1)
		if err != nil {
			errs.Add(1)
			r12CheckErr(t, what, err)
			k := err.Error()
			if len(k) > 90 {
				k = k[:90]
			}
			errKinds.Store(what+": "+k, true)
		}
	}
	run := func(f func(i int)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				f(i)
			}
		}()
	}
	// Readers of the generation, bounded by the witness.
	for range 2 {
		run(func(int) {
			lo, err := w.gen()
			if err != nil {
				t.Error(err)
				return
			}
			g, err := c.Generation()
			note("Generation", err)
			hi, _ := w.gen()
			if err == nil && (g < lo || g > hi) {
				t.Errorf("Generation = %d, outside [%d, %d] read around it", g, lo, hi)
			}
		})
	}
	// Readers of the table.
	run(func(i int) {
		switch i % 3 {
		case 0:
			cm, err := c.TableComment(a.Name)
			if errors.Is(err, ErrNoTable) {
				err = nil
				cm = "r12-a"
			}
			note("TableComment", err)
			// "": a handover write's step that wakes or puts to sleep
			// our table creates it, without a comment, when another
			// program deleted it under the write (the write's last
			// batch then writes it whole); not a reply to another call.
			if err == nil && cm != "r12-a" && cm != "r12-b" && cm != "" {
				t.Errorf("TableComment = %q, which nobody wrote", cm)
			}
		case 1:
			st, err := c.ReadTable(a.Name)
			if errors.Is(err, ErrNoTable) {
				err = nil
			}
			note("ReadTable", err)
			if err == nil && st != nil {
				for name := range st.Sets {
					if !slices.ContainsFunc(append(slices.Clone(a.Sets), b.Sets...), func(s *Set) bool { return s.Name == name }) &&
						!strings.HasPrefix(name, "handover-") {
						t.Errorf("ReadTable found set %q, which no writer wrote", name)
					}
				}
			}
		case 2:
			_, err := c.Drift(a)
			note("Drift", err)
		}
	})
	// Delta writers, checked against the generation they read.
	run(func(i int) {
		old, new := a, b
		if i%2 == 1 {
			old, new = b, a
		}
		g, err := c.Generation()
		note("Generation", err)
		_, err = c.WriteDeltaAt(Diff(old, new), new, g)
		note("WriteDeltaAt", err)
		_, err = c.WriteDeltaAt(r12Ghost(), new, 0)
		if err == nil {
			t.Errorf("a delta deleting a missing set succeeded")
		}
		note("WriteDeltaAt(refused)", err)
		if _, err := c.TableComment(a.Name); err != nil && !errors.Is(err, ErrNoTable) {
			note("TableComment after refusal", err)
		}
	})
	// Whole writers.
	run(func(i int) {
		var err error
		switch i % 3 {
		case 0:
			_, err = c.Apply(a)
		case 1:
			_, err = c.ApplyGuarded(b, func(comment string, exists bool) error { return nil })
		case 2:
			var g uint32
			if g, err = c.Generation(); err == nil {
				_, err = c.ApplyAt(a, g)
			}
		}
		note("Apply", err)
	})
	// Another program deletes the table now and then.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			time.Sleep(150 * time.Millisecond)
			execOutput("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", a.Name)
		}
	}()

	time.Sleep(3 * time.Second)
	stop.Store(true)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		buf := make([]byte, 1<<20)
		t.Fatalf("calls still running 30 s after the stop:\n%s", buf[:runtime.Stack(buf, true)])
	}
	t.Logf("%d calls, %d errors", calls.Load(), errs.Load())
	if t.Failed() {
		errKinds.Range(func(k, _ any) bool { t.Logf("error seen: %s", k); return true })
	}
	if calls.Load() < 50 {
		t.Errorf("only %d calls in 3 s: the attack did not run", calls.Load())
	}
	// The Conn still works, and holds no more than its idle socket.
	if _, err := c.Apply(a); err != nil {
		t.Fatalf("Apply after the storm: %v", err)
	}
	if d, err := c.Drift(a); d != "" || err != nil {
		t.Errorf("drift after the storm: %q, %v", d, err)
	}
	if n := r12Sockets(t); n > base+1 {
		t.Errorf("%d sockets after the storm, %d before: more than the one idle batch socket stayed open", n, base)
	}
}

// TestHostileRound12CloseWhileReading: Close while reads are in flight on
// the Conn: every call returns (none hangs), none answers from another
// namespace than the Conn's (a call after Close fails with ErrClosed),
// and once all have returned, the closed Conn holds no socket.
func TestHostileRound12CloseWhileReading(t *testing.T) {
	ns, c := openTestNS(t)
	w := r12NewWitness(t, ns)
	a, _ := r12Tables()
	if _, err := c.Apply(a); err != nil {
		t.Fatal(err)
	}
	c.Generation() // the idle socket exists
	base := r12Sockets(t)
	var wg sync.WaitGroup
	var stop atomic.Bool
	var after atomic.Int64
	var closed atomic.Bool
	var elsewhere atomic.Int64
	for k := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				wasClosed := closed.Load()
				lo, _ := w.gen()
				switch (i + k) % 3 {
				case 0:
					g, err := c.Generation()
					hi, _ := w.gen()
					if err == nil && (g < lo || g > hi) {
						if wasClosed {
							elsewhere.Add(1) // another namespace's answer
						} else {
							t.Errorf("Generation = %d, outside [%d, %d] of the Conn's namespace", g, lo, hi)
						}
					}
				case 1:
					cm, err := c.TableComment(a.Name)
					if err == nil && cm != "r12-a" {
						if wasClosed {
							elsewhere.Add(1)
						} else {
							t.Errorf("TableComment = %q", cm)
						}
					}
				case 2:
					c.ReadTable(a.Name)
				}
				if wasClosed {
					after.Add(1)
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	closed.Store(true)
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		buf := make([]byte, 1<<20)
		t.Fatalf("calls still running 20 s after Close:\n%s", buf[:runtime.Stack(buf, true)])
	}
	t.Logf("%d calls after Close", after.Load())
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("%d calls after Close answered from another namespace than the Conn's", n)
	}
	if n := r12Sockets(t); n > base-1 {
		t.Errorf("%d sockets after Close and every call returned, %d before (with the idle one): the closed Conn keeps sockets", n, base)
	}
}

// r12ReuseFd makes fd, which the caller just closed, a handle on
// namespace ns, as any open elsewhere in the process may (the kernel
// hands out the lowest free descriptor): first by opening ns as a Conn
// would, else by dup3 onto the free number.
func r12ReuseFd(t *testing.T, fd int, ns string) *Conn {
	t.Helper()
	o, err := Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	if o.nsFd == fd {
		return o
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
		t.Skipf("descriptor %d was taken by something else (%v)", fd, err)
	}
	if err := unix.Dup3(o.nsFd, fd, unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	unix.Close(o.nsFd)
	o.nsFd = fd
	return o
}

// TestHostileRound12ClosedConnStaysClosed: a call on a Conn after Close
// must fail. Close closes the namespace handle but keeps its number in
// nsFd and lets later calls dial with it; once anything else in the
// process opens a file and gets that number (the lowest free one, so the
// very next open), the closed Conn works in whatever namespace that file
// is. Here the next open is another namespace's handle, and an Apply on
// the closed Conn writes our table into that other namespace.
func TestHostileRound12ClosedConnStaysClosed(t *testing.T) {
	nsA := testns.New(t, "r12a")
	nsB := testns.New(t, "r12b")
	c, err := Open(nsA)
	if err != nil {
		t.Fatal(err)
	}
	fd := c.nsFd
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	r12ReuseFd(t, fd, nsB)

	a, _ := r12Tables()
	_, aerr := c.Apply(a)
	g, gerr := c.Generation()
	inB := strings.Contains(testns.Nft(t, nsB, "", "list", "tables"), "table inet nftpolicy")
	inA := strings.Contains(testns.Nft(t, nsA, "", "list", "tables"), "table inet nftpolicy")
	if aerr == nil || inB {
		t.Errorf("Apply on a closed Conn: err %v; table written into namespace %s, which the Conn was never opened on: %v (into its own %s: %v)",
			aerr, nsB, inB, nsA, inA)
	}
	if gerr == nil {
		t.Errorf("Generation on a closed Conn answered %d, read in namespace %s", g, nsB)
	}
}

// TestHostileRound12DoubleClose: a second Close of a Conn must not close
// a descriptor it no longer owns. Close closes nsFd again by number; if
// that number was reused (here by another Conn's namespace handle), the
// other Conn loses its namespace: its next socket is made wherever the
// descriptor number points by then.
func TestHostileRound12DoubleClose(t *testing.T) {
	nsA := testns.New(t, "r12a")
	nsB := testns.New(t, "r12b")
	wB := r12NewWitness(t, nsB)
	testns.Nft(t, nsB, "", "add", "table", "inet", "r12-b-only")
	c, err := Open(nsA)
	if err != nil {
		t.Fatal(err)
	}
	fd := c.nsFd
	c.Close()
	other := r12ReuseFd(t, fd, nsB)
	if _, err := other.Generation(); err != nil {
		t.Fatalf("the other Conn before the second Close: %v", err)
	}
	err = c.Close()
	want, _ := wB.gen()
	g, gerr := other.Generation()
	// ReadTable opens a socket of its own (the idle batch socket was made
	// before the second Close, in the right namespace).
	_, terr := other.ReadTable("r12-b-only")
	nerr := other.CheckNetns()
	if gerr != nil || g != want || terr != nil || nerr != nil {
		t.Errorf("the second Close of a closed Conn (returned %v) closed descriptor %d, another Conn's handle on %s; that Conn now reads generation %d, %v (%s is at %d), its table: %v, CheckNetns: %v",
			err, fd, nsB, g, gerr, nsB, want, terr, nerr)
	}
}

// TestHostileRound12ClosedConnReadsCallersNamespace: after Close, a call
// on the Conn dials with the closed descriptor number. mdlayher/socket
// first opens the calling thread's own namespace to come back to, which
// takes the lowest free descriptor, that same number, and then enters
// "the Conn's namespace" through it: the socket is made in the caller's
// own namespace. Only reads are made here, so the host is not written;
// a write (Apply) would go the same way.
func TestHostileRound12ClosedConnReadsCallersNamespace(t *testing.T) {
	ns := testns.New(t, "r12c")
	w := r12NewWitness(t, ns)
	// Generations of its own, apart from the caller's namespace's.
	testns.Nft(t, ns, "add table inet r12-only\nadd table inet r12-x\n", "-f", "-")
	for range 3 {
		testns.Nft(t, ns, "", "delete", "table", "inet", "r12-x")
		testns.Nft(t, ns, "", "add", "table", "inet", "r12-x")
	}
	host, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	c, err := Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	fd := c.nsFd
	c.Close()
	for i := 3; i < fd; i++ {
		if _, err := unix.FcntlInt(uintptr(i), unix.F_GETFD, 0); errors.Is(err, unix.EBADF) {
			t.Skipf("descriptor %d is free below the Conn's %d: the next open does not take the Conn's number", i, fd)
		}
	}
	h0, _ := ReadGeneration(host)
	g, gerr := c.Generation()
	h1, _ := ReadGeneration(host)
	own, _ := w.gen()
	_, terr := c.TableComment("r12-only")
	t.Logf("after Close: Generation %d, %v; TableComment of a table only the Conn's namespace has: %v", g, gerr, terr)
	switch {
	case gerr == nil && g >= h0 && g <= h1 && g != own:
		t.Errorf("Generation on a closed Conn answered %d, the generation of the caller's own namespace (%d..%d), not an error (the Conn's namespace %s is at %d)",
			g, h0, h1, ns, own)
	case gerr == nil:
		t.Errorf("Generation on a closed Conn answered %d (its namespace is at %d, the caller's at %d..%d), not an error", g, own, h0, h1)
	}
}

// TestHostileRound12OwnCommitsStayOwn: reads run on the batch socket since
// 14d0d19, so a read that overlaps a batch (or another read) dials a
// second socket, whose port joins the Conn's ring of 16 own ports. Here
// the socket parked for the next batch is the one taken first and given
// back first, sixteen times, each time with another call's socket open
// alongside: the ring then no longer holds the parked socket's port,
// though every later batch goes out on it. The Monitor must still not
// signal our own commits as another program's.
func TestHostileRound12OwnCommitsStayOwn(t *testing.T) {
	_, c := openTestNS(t)
	a, b := r12Tables()
	if _, err := c.Apply(a); err != nil {
		t.Fatal(err)
	}
	m, err := c.Monitor(a.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// hold runs a read on the Conn that keeps its socket until release is
	// closed, and says when it holds it.
	hold := func(release <-chan struct{}) (held, done chan struct{}) {
		held, done = make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			c.onBatchSocket("hold", func(*netlink.Conn) error {
				close(held)
				<-release
				return nil
			})
		}()
		return held, done
	}
	for range maxOwnPorts {
		first, second := make(chan struct{}), make(chan struct{})
		h1, d1 := hold(first) // takes the parked socket
		<-h1
		h2, d2 := hold(second) // dials another
		<-h2
		close(first) // the parked socket goes back first and stays parked
		<-d1
		close(second) // the other is closed
		<-d2
	}
	settle := func() {
		gen, err := c.Generation()
		if err != nil {
			t.Fatal(err)
		}
		m.Untouched(gen, gen, 2*time.Second)
	}
	settle()
	select {
	case <-m.Foreign():
	default:
	}
	signalled := 0
	old, new := a, b
	for range 3 {
		if _, err := c.WriteDeltaAt(Diff(old, new), new, 0); err != nil {
			t.Fatal(err)
		}
		old, new = new, old
		settle()
		select {
		case <-m.Foreign():
			signalled++
		default:
		}
	}
	if signalled != 0 {
		t.Errorf("%d of our own 3 deltas were signalled as another program's commit: the port of the socket they went out on fell out of the Conn's ring of %d while the socket stayed in use",
			signalled, maxOwnPorts)
	}
}

// TestHostileRound12ConcurrentWritesNoDataRace: whole writes on two Conns
// at once (two namespaces, nothing shared but the process). Every write
// builds its own google/nftables connection, but the library numbers new
// sets from a package variable (set.go: allocSetID++ under the
// connection's own mutex only), so concurrent writes race on it. Run
// with -race: go test -race ./nft -run TestHostileRound12ConcurrentWritesNoDataRace.
// (The lookups name their set too, and the kernel finds a set by name
// first, so a duplicated id has not been seen to misbind anything.)
func TestHostileRound12ConcurrentWritesNoDataRace(t *testing.T) {
	_, c1 := openTestNS(t)
	_, c2 := openTestNS(t)
	var wg sync.WaitGroup
	for _, c := range []*Conn{c1, c2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if _, err := c.Apply(sampleTable()); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, c := range []*Conn{c1, c2} {
		if d, err := c.Drift(sampleTable()); d != "" || err != nil {
			t.Errorf("drift after concurrent writes: %q, %v", d, err)
		}
	}
}
