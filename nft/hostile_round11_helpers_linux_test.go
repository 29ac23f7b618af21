package nft

import (
	"bufio"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// Hostile review, round 11: helpers. A third address, r11Probe, is judged
// by the interval set too: dropped when the set holds it, let through when
// it does not. Tables that differ only in whether they hold it tell which
// state is in force.

var r11Probe = netip.MustParseAddr("10.9.0.3")

// r11NS is r9NS with r11Probe on lo as well.
func r11NS(t *testing.T) (string, *Conn) {
	t.Helper()
	ns, c := r9NS(t)
	testns.Exec(t, ns, "", "ip", "addr", "add", r11Probe.String()+"/32", "dev", "lo")
	return ns, c
}

// r11Table is intervalTable with one more rule in front: a packet to
// r11Probe is dropped if the set s holds it; probeIn puts it there.
func r11Table(fill int, comment string, probeIn bool) *Table {
	t := intervalTable(fill, comment)
	if probeIn {
		// Sorted: after allowedAddr and deniedAddr, before 11.0.0.0/8.
		els := append([]Element(nil), t.Sets[0].Elements[:2]...)
		els = append(els, Element{Addr: r11Probe})
		s := *t.Sets[0]
		s.Elements = append(els, t.Sets[0].Elements[2:]...)
		t.Sets = []*Set{&s}
	}
	ch := *t.Chains[0]
	ch.Rules = append([]Rule{{Exprs: []Expr{AddrEq{Field: Daddr, Addr: r11Probe}, AddrInSet{Family: IPv4, Field: Daddr, Set: "s"}, Verdict{Kind: Drop}}}}, ch.Rules...)
	t.Chains = []*Chain{&ch}
	return t
}

// r11Send reports whether a UDP datagram to a leaves (false: the output
// hook dropped it, EPERM).
func r11Send(fd int, a netip.Addr) bool {
	return unix.Sendto(fd, []byte("x"), 0, &unix.SockaddrInet4{Port: 9, Addr: a.As4()}) == nil
}

// A r11Counter is startVerdictCounter with the probe: it counts blocks
// (allowedAddr refused), leaks (deniedAddr let through) and probe drops
// (r11Probe refused), each against what every state of the test gives.
type r11Counter struct {
	stop                      atomic.Bool
	done                      sync.WaitGroup
	sent                      atomic.Int64
	blocks, leaks, probeDrops atomic.Int64
	probePasses               atomic.Int64
	// events: when blocks, leaks and probe drops happened (the first
	// few), for a trace.
	mu     sync.Mutex
	events []string
}

func (v *r11Counter) event(what string) {
	v.mu.Lock()
	if len(v.events) < 40 {
		v.events = append(v.events, fmt.Sprintf("%s %s", r11Since(), what))
	}
	v.mu.Unlock()
}

// r11Epoch is when the current trace started.
var r11Epoch = time.Now()

func r11Since() string {
	return fmt.Sprintf("%9.3fms", float64(time.Since(r11Epoch).Microseconds())/1000)
}

// r11Trace, if set, records what the writers of r11Loop do.
var r11Trace func(string)

func r11StartCounter(t *testing.T, ns string) *r11Counter {
	return r11StartCounterPaced(t, ns, 0)
}

// r11StartCounterPaced is r11StartCounter pausing pace between rounds
// (0: none), to leave a CPU to the writers.
func r11StartCounterPaced(t *testing.T, ns string, pace time.Duration) *r11Counter {
	fd := udpSocketIn(t, ns)
	v := &r11Counter{}
	v.done.Add(1)
	go func() {
		defer v.done.Done()
		for !v.stop.Load() {
			if !r11Send(fd, allowedAddr) {
				v.blocks.Add(1)
				v.event("block")
			}
			if r11Send(fd, deniedAddr) {
				v.leaks.Add(1)
				v.event("leak")
			}
			if r11Send(fd, r11Probe) {
				v.probePasses.Add(1)
			} else {
				v.probeDrops.Add(1)
				v.event("probe drop")
			}
			v.sent.Add(3)
			if pace > 0 {
				time.Sleep(pace)
			}
		}
	}()
	return v
}

func (v *r11Counter) finish() {
	if v.stop.Swap(true) {
		return
	}
	v.done.Wait()
}

func (v *r11Counter) String() string {
	return fmt.Sprintf("%d sent: %d blocks, %d leaks, probe dropped %d / passed %d",
		v.sent.Load(), v.blocks.Load(), v.leaks.Load(), v.probeDrops.Load(), v.probePasses.Load())
}

// r11State describes our two tables: awake or dormant or absent.
func r11State(t *testing.T, c *Conn) string {
	t.Helper()
	o, err1 := c.tableState("nftpolicy")
	h, err2 := c.handover("nftpolicy")
	return fmt.Sprintf("ours %s, handover %s (%v %v)", o, h, err1, err2)
}

// r11Tokens lists the token sets (handover-*, settle-*) found in our
// table and in the handover table.
func r11Tokens(t *testing.T, ns string) []string {
	t.Helper()
	var out []string
	re := regexp.MustCompile(`set ((handover|settle)-[0-9a-f]+(-[0-9]+)?)`)
	for _, name := range []string{"nftpolicy", HandoverTable("nftpolicy")} {
		cmd := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "inet", name)
		b, err := cmd.CombinedOutput()
		if err != nil {
			continue
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			out = append(out, name+"/"+m[1])
		}
	}
	return out
}

// Child processes: a writer the parent kills with SIGKILL.

const (
	r11ChildNS    = "NFTPOLICY_R11_CHILD_NS"
	r11ChildMode  = "NFTPOLICY_R11_CHILD_MODE"
	r11ChildStop  = "NFTPOLICY_R11_CHILD_STOP"
	r11ChildProbe = "NFTPOLICY_R11_CHILD_PROBE"
	r11ChildFill  = "NFTPOLICY_R11_CHILD_FILL"
	r11ChildID    = "NFTPOLICY_R11_CHILD_ID"
)

// TestHostileRound11Child is the writer the tests of round 11 kill: run
// on its own it does nothing. Modes:
//
//   - "stop": one ApplyGuarded of r11Table(fill, "child", probe) that
//     stops for good after batch stop (1 to 3), having printed
//     "stopped N"; the parent kills it there, as SIGKILL would land.
//   - "loop": writes until killed, mixing ApplyGuarded, Apply, ApplyAt
//     at a fresh generation and WriteDeltaAt that moves the rules to a
//     new interval set and back.
func TestHostileRound11Child(t *testing.T) {
	ns := os.Getenv(r11ChildNS)
	if ns == "" {
		t.Skip("run by the round 11 kill tests")
	}
	c, err := Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	fill, _ := strconv.Atoi(os.Getenv(r11ChildFill))
	probe := os.Getenv(r11ChildProbe) == "1"
	switch os.Getenv(r11ChildMode) {
	case "stop":
		stop, _ := strconv.Atoi(os.Getenv(r11ChildStop))
		c.betweenBatches = func(n int) {
			if n == stop {
				fmt.Printf("stopped %d\n", n)
				os.Stdout.Sync()
				select {}
			}
		}
		_, err := c.ApplyGuarded(r11Table(fill, "child", probe), func(string, bool) error { return nil })
		fmt.Printf("finished %v\n", err)
		os.Stdout.Sync()
		select {}
	case "loop":
		me := os.Getenv(r11ChildID)
		fmt.Println("ready")
		os.Stdout.Sync()
		r11Loop(c, me, fill, probe, nil)
	}
}

// r11Loop writes, until stop (nil: forever), the same verdicts in every
// way a writer can: ApplyGuarded, Apply, ApplyAt at a fresh generation,
// and WriteDeltaAt moving the rules between the interval sets s and s2,
// at the generation of this writer's last write (as the daemon does: a
// conflict makes it forget, and write whole next). It returns the
// errors, by kind.
func r11Loop(c *Conn, me string, fill int, probe bool, stop *atomic.Bool) map[string]int {
	return r11LoopKinds(c, me, fill, probe, stop, 0xf)
}

// r11LoopKinds is r11Loop with only some kinds of write: a bit mask of
// ApplyGuarded (1), Apply (2), ApplyAt (4), WriteDeltaAt (8).
func r11LoopKinds(c *Conn, me string, fill int, probe bool, stop *atomic.Bool, kinds int) map[string]int {
	errs := map[string]int{}
	a := r11Table(fill, me, probe)
	b := withSetName(a, "s2")
	var last *Table
	var lastGen uint32
	for i := 0; stop == nil || !stop.Load(); i++ {
		if kinds&(1<<(i%4)) == 0 {
			continue
		}
		var err error
		var st BatchStats
		var wrote *Table
		kind := ""
		began := r11Since()
		switch {
		case i%4 == 3 && last == nil:
			continue
		case i%4 == 3:
			kind = "WriteDeltaAt"
			wrote = a
			if last == a {
				wrote = b
			}
			st, err = c.WriteDeltaAt(Diff(last, wrote), wrote, lastGen)
		case i%4 == 0:
			kind, wrote = "ApplyGuarded", a
			st, err = c.ApplyGuarded(a, func(string, bool) error { return nil })
		case i%4 == 1:
			kind, wrote = "Apply", b
			st, err = c.Apply(b)
		default:
			kind, wrote = "ApplyAt", a
			var gen uint32
			if gen, err = c.Generation(); err == nil {
				st, err = c.ApplyAt(a, gen)
			}
		}
		if r11Trace != nil {
			r11Trace(fmt.Sprintf("%s-%s %s %s handover=%v err=%v", began, r11Since(), me, kind, st.Handover, err))
		}
		if err != nil {
			errs[kind+": "+r11ErrKind(err)]++
			last, lastGen = nil, 0
			continue
		}
		if kind != "WriteDeltaAt" && !st.Handover {
			// An interval table written in one batch: apply found no
			// table of ours in force.
			errs[kind+": (ok) written in one batch, not through the handover table"]++
		}
		last, lastGen = wrote, st.Generation
	}
	return errs
}

// r11ErrKind classifies an error: a conflict (wraps
// ErrGenerationChanged), or not, with the kernel's words.
func r11ErrKind(err error) string {
	if errors.Is(err, ErrGenerationChanged) {
		return "conflict"
	}
	msg := err.Error()
	if i := strings.Index(msg, "netlink receive: "); i >= 0 {
		msg = msg[i:]
		if j := strings.Index(msg, "\n"); j >= 0 {
			msg = msg[:j]
		}
	}
	if len(msg) > 160 {
		msg = msg[:160]
	}
	return "NOT A CONFLICT: " + msg
}

// r11StopChild starts a "stop" child and waits until it stopped after
// batch stop, then kills it with SIGKILL.
func r11StopChild(t *testing.T, ns string, stop, fill int, probe bool) {
	t.Helper()
	p := "0"
	if probe {
		p = "1"
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHostileRound11Child$", "-test.count=1")
	cmd.Env = append(os.Environ(), r11ChildNS+"="+ns, r11ChildMode+"=stop", r11ChildStop+"="+strconv.Itoa(stop),
		r11ChildFill+"="+strconv.Itoa(fill), r11ChildProbe+"="+p)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if strings.HasPrefix(s.Text(), "stopped") || strings.HasPrefix(s.Text(), "finished") {
				line <- s.Text()
				return
			}
		}
		line <- "eof"
	}()
	var got string
	select {
	case got = <-line:
	case <-time.After(20 * time.Second):
		got = "timeout"
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if got != fmt.Sprintf("stopped %d", stop) {
		t.Fatalf("child: %q, want it stopped after batch %d", got, stop)
	}
}

// r11StartLoopChild starts a "loop" child and waits until it is ready.
func r11StartLoopChild(t *testing.T, ns, id string, fill int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHostileRound11Child$", "-test.count=1")
	cmd.Env = append(os.Environ(), r11ChildNS+"="+ns, r11ChildMode+"=loop", r11ChildID+"="+id,
		r11ChildFill+"="+strconv.Itoa(fill), r11ChildProbe+"=0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := out.Read(buf); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal(err)
	}
	return cmd
}

func execOutput(name string, args ...string) (string, error) {
	b, err := exec.Command(name, args...).CombinedOutput()
	return string(b), err
}

// spin waits d without sleeping (a sleep is too coarse for microseconds).
func spin(d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
	}
}
