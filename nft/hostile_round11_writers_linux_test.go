package nft

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Hostile review, round 11: three and more writers of the same table at
// once, in one process (each its own Conn, as separate daemons would
// be), mixing every kind of write.

// r11Sampler polls, with one netlink dump of the inet tables at a time
// (one answer, not two reads that the tables may change between),
// whether any table of ours is awake, and counts the samples where none
// is (promise 5).
type r11Sampler struct {
	stop    atomic.Bool
	done    sync.WaitGroup
	samples atomic.Int64
	gaps    atomic.Int64
	mu      sync.Mutex
	first   string
}

func r11StartSampler(t *testing.T, ns string) *r11Sampler {
	o, err := Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	nl, err := o.dial()
	if err != nil {
		t.Fatal(err)
	}
	s := &r11Sampler{}
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		defer o.Close()
		defer nl.Close()
		for !s.stop.Load() {
			tables, err := r11DumpTables(nl)
			if err != nil {
				continue
			}
			s.samples.Add(1)
			f1, ok1 := tables["nftpolicy"]
			f2, ok2 := tables[HandoverTable("nftpolicy")]
			if !(ok1 && f1&unix.NFT_TABLE_F_DORMANT == 0) && !(ok2 && f2&unix.NFT_TABLE_F_DORMANT == 0) {
				s.gaps.Add(1)
				s.mu.Lock()
				if s.first == "" {
					s.first = fmt.Sprintf("%s %v", r11Since(), tables)
				}
				s.mu.Unlock()
			}
		}
	}()
	return s
}

// r11DumpTables dumps the inet tables: name to flags.
func r11DumpTables(nl *netlink.Conn) (map[string]uint32, error) {
	msgs, err := nl.Execute(netlink.Message{
		Header: netlink.Header{Type: getTableType, Flags: netlink.Request | netlink.Dump},
		Data:   nfgenmsg(unix.NFPROTO_INET, 0),
	})
	if err != nil {
		return nil, err
	}
	out := map[string]uint32{}
	for _, m := range msgs {
		if m.Header.Type != newTableType || len(m.Data) < 4 {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return nil, err
		}
		ad.ByteOrder = binary.BigEndian
		var name string
		var flags uint32
		for ad.Next() {
			switch ad.Type() {
			case unix.NFTA_TABLE_NAME:
				name = ad.String()
			case unix.NFTA_TABLE_FLAGS:
				flags = ad.Uint32()
			}
		}
		if err := ad.Err(); err != nil {
			return nil, err
		}
		out[name] = flags
	}
	return out, nil
}

func (s *r11Sampler) finish() {
	if s.stop.Swap(true) {
		return
	}
	s.done.Wait()
}

// r11Writers runs writers Conns, each r11Loop, for d, while packets ask
// the table; it reports blocks, leaks, probe drops and gaps, and the
// errors by kind.
func r11Writers(t *testing.T, writers int, fill int, d time.Duration) {
	r11WritersKinds(t, writers, fill, d, 0xf)
}

func r11WritersKinds(t *testing.T, writers int, fill int, d time.Duration, kinds int) {
	ns, c := r11NS(t)
	if _, err := c.Apply(r11Table(fill, "start", false)); err != nil {
		t.Fatal(err)
	}
	var conns []*Conn
	for range writers {
		o, err := Open(ns)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		conns = append(conns, o)
	}
	var traceMu sync.Mutex
	var trace []string
	r11Epoch = time.Now()
	r11Trace = func(s string) {
		traceMu.Lock()
		trace = append(trace, s)
		traceMu.Unlock()
	}
	defer func() { r11Trace = nil }()
	v := r11StartCounter(t, ns)
	s := r11StartSampler(t, ns)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := map[string]int{}
	for w, o := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := r11LoopKinds(o, fmt.Sprint("w", w), fill, false, &stop, kinds)
			mu.Lock()
			for k, n := range e {
				errs[k] += n
			}
			mu.Unlock()
		}()
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	s.finish()
	v.finish()
	var lines []string
	notConflict := 0
	for k, n := range errs {
		lines = append(lines, fmt.Sprintf("%5d %s", n, k))
		if strings.Contains(k, "NOT A CONFLICT") {
			notConflict += n
		}
	}
	sort.Strings(lines)
	t.Logf("%d writers, %v: %s; %d of %d samples with no table of ours awake; errors:\n%s",
		writers, d, v, s.gaps.Load(), s.samples.Load(), strings.Join(lines, "\n"))
	if len(v.events) > 0 {
		// The writes in flight around the first event.
		first := v.events[0]
		t.Logf("first events: %v", v.events[:min(len(v.events), 6)])
		var at float64
		fmt.Sscanf(strings.TrimSpace(first), "%fms", &at)
		for _, line := range trace {
			var b, e float64
			fmt.Sscanf(strings.TrimSpace(line), "%fms-%fms", &b, &e)
			if b <= at+0.5 && e >= at-0.5 {
				t.Logf("in flight: %s", line)
			}
		}
	}
	if b, l, p := v.blocks.Load(), v.leaks.Load(), v.probeDrops.Load(); b != 0 || l != 0 || p != 0 {
		t.Errorf("with %d writers at once: %d blocks, %d leaks, %d probe drops (every state written judges alike)", writers, b, l, p)
	}
	if g := s.gaps.Load(); g != 0 {
		// Seen: 1 dump in ~150k showing only ours, dormant, with no
		// packet misjudged. A dump shows a table's flags as a batch in
		// flight set them, before its commit (or its abort): not proof
		// of a gap on the hooks, which the packets above are the test
		// of. Logged for the next look, not failed.
		t.Logf("%d samples found no table of ours awake (dumps, not packets); first:\n%s", g, s.first)
	}
	if notConflict != 0 {
		t.Errorf("%d errors from writes of good content, caused by the other writers, do not wrap ErrGenerationChanged", notConflict)
	}
	out := r9Tables(t, ns)
	if toks := r11Tokens(t, ns); len(toks) != 0 || strings.Contains(out, HandoverTable("nftpolicy")) {
		t.Logf("after the writers (not necessarily wrong: a write may stop half way only when killed): %s, tokens %v", out, toks)
	}
	final := r11Table(fill, "final", false)
	if _, err := c.ApplyGuarded(final, func(string, bool) error { return nil }); err != nil {
		t.Fatal(err)
	}
	r9AssertClean(t, ns, c, final, "after a final write")
	if toks := r11Tokens(t, ns); len(toks) != 0 {
		t.Errorf("after a final write, token sets: %v", toks)
	}
}

// Promises 1, 4 and 5 with three writers, then five, each mixing
// ApplyGuarded, Apply, ApplyAt and WriteDeltaAt (at the generation of
// its last write). Every state written judges alike.
//
// FAILS (timing-dependent: about one run in three for three writers,
// one in two for five), e.g.
//
//	3 writers, 8s: 1203543 sent: 16 blocks, 16 leaks ...
//	  1 Apply: (ok) written in one batch, not through the handover table
//	  in flight: 313.479ms-358.072ms w2 Apply handover=false err=<nil>
//	5 writers, 8s: 964791 sent: 0 blocks, 30 leaks ...
//
// Blocks and leaks together are a one-batch write of the interval table
// over a table in force (TestHostileRound11SecondBatchBetweenPlanReads);
// leaks alone are a moment with no table of ours in force (see
// TestHostileRound11ForeignHandoverSwappedDuringFinish for the write
// that tokens, and then puts ours to sleep under, a handover table it
// did not read).
func TestHostileRound11ThreeWriters(t *testing.T) { r11Writers(t, 3, 2000, 8*time.Second) }
func TestHostileRound11FiveWriters(t *testing.T)  { r11Writers(t, 5, 2000, 8*time.Second) }

// The daemon's way only: three writers of ApplyGuarded (and its deltas).
//
// FAILS (timing-dependent, one run in three or four): e.g. "3 writers,
// 8s: 767763 sent: 10 blocks, 10 leaks", in flight "w0 ApplyGuarded
// handover=false err=<nil>": the same one-batch write, forced in
// TestHostileRound11SecondBatchBetweenPlanReads.
func TestHostileRound11ThreeGuardedWriters(t *testing.T) {
	r11WritersKinds(t, 3, 2000, 8*time.Second, 1|8)
}

// Apply only (no generation, no guard).
//
// FAILS (two runs in three): e.g. "105 blocks, 26 leaks" with "6 Apply:
// (ok) written in one batch", "37 blocks, 23 leaks" with 3.
func TestHostileRound11ThreeApplyWriters(t *testing.T) {
	r11WritersKinds(t, 3, 2000, 8*time.Second, 2)
}
