package netns

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A ProbeTarget is one connection a Prober opens again and again: from a
// pod to a pod address, a protocol and a port.
type ProbeTarget struct {
	From   *Pod
	To     *Pod
	Family string // IPv4 or IPv6
	Proto  string // TCP or UDP
	Port   int
}

// Dst is the address probed.
func (t ProbeTarget) Dst() netip.Addr { return t.To.Addr(t.Family) }

func (t ProbeTarget) String() string {
	return fmt.Sprintf("%s→%s %s %s/%d", t.From.Key(), t.To.Key(), t.Family, t.Proto, t.Port)
}

// A ProbeRecord is one probe of a Prober: a new connection (a TCP
// handshake, a UDP echo from a new socket) to Targets[Target], when it
// started and ended, and whether it got through.
type ProbeRecord struct {
	Target     int
	Start, End time.Time
	OK         bool
	Why        string // why not, when not
	// LeaksOnly: from a prober whose timeout is too short to tell a
	// blocked connection from a slow one (StartLeakProber); only a probe
	// that got through is judged.
	LeaksOnly bool
}

// A Prober sends a stream of new connections over its targets until Stop:
// each worker takes the next target round-robin, probes it, records the
// result, and goes on. Every probe is a new connection (a new source port),
// so each is judged by the ruleset as it is when its first packet crosses
// the node, never by a conntrack entry of an earlier one.
type Prober struct {
	c         *Cluster
	targets   []ProbeTarget
	timeout   time.Duration
	leaksOnly bool
	next      atomic.Uint64
	stop      chan struct{}
	wg        sync.WaitGroup

	mu      sync.Mutex
	records []ProbeRecord
	err     error // the first harness error: the probe means nothing
}

// StartProber starts workers goroutines probing targets, each probe
// bounded by timeout. A blocked TCP probe costs the whole timeout; keep it
// under the kernel's first SYN retransmission (1s) for one packet per probe,
// or above it and let the check's windows cover the retransmission.
func (c *Cluster) StartProber(targets []ProbeTarget, workers int, timeout time.Duration) *Prober {
	return c.startProber(targets, workers, timeout, false)
}

// StartLeakProber is StartProber with a timeout too short to call a probe
// blocked (tens of milliseconds): its blocked probes are not judged, and
// it starts many more probes than a prober that waits out every blocked
// one, so a gap of a few milliseconds in enforcement meets some.
func (c *Cluster) StartLeakProber(targets []ProbeTarget, workers int, timeout time.Duration) *Prober {
	return c.startProber(targets, workers, timeout, true)
}

func (c *Cluster) startProber(targets []ProbeTarget, workers int, timeout time.Duration, leaksOnly bool) *Prober {
	p := &Prober{c: c, targets: slices.Clone(targets), timeout: timeout, leaksOnly: leaksOnly, stop: make(chan struct{})}
	for range workers {
		p.wg.Add(1)
		go p.work()
	}
	return p
}

func (p *Prober) work() {
	defer p.wg.Done()
	for {
		select {
		case <-p.stop:
			return
		default:
		}
		i := int(p.next.Add(1)-1) % len(p.targets)
		t := p.targets[i]
		start := time.Now()
		ok, why, err := p.c.probeSocket(t.From.netns, t.Dst(), t.Proto, t.Port, p.timeout)
		end := time.Now()
		p.mu.Lock()
		if err != nil {
			if p.err == nil {
				p.err = fmt.Errorf("probe %s: %w", t, err)
			}
		} else {
			p.records = append(p.records, ProbeRecord{Target: i, Start: start, End: end, OK: ok, Why: why, LeaksOnly: p.leaksOnly})
		}
		p.mu.Unlock()
	}
}

// Count is the number of probes recorded so far.
func (p *Prober) Count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.records)
}

// Stop waits for the probes in flight and returns every record, or the
// first harness error (a probe that could not be run at all).
func (p *Prober) Stop() ([]ProbeRecord, error) {
	close(p.stop)
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.records, p.err
}

// Targets are the prober's targets, indexed by ProbeRecord.Target.
func (p *Prober) Targets() []ProbeTarget { return p.targets }

// A Timeline is the states a cluster's policy went through while a Prober
// ran, each with what it allows per target and when it could have been in
// force. A change begins (Begin: a file written, a daemon killed, a Sync
// called) and settles (Settle: every daemon synced, Sync returned); the
// kernel moves from the state before to the state after at one moment in
// between, or at several moments if the change were not atomic, which is
// what the check finds. State i may be in force from the beginning of its
// change until the next change settles.
type Timeline struct {
	mu     sync.Mutex
	states []timedState
	open   bool // a change has begun and not settled
}

type timedState struct {
	allowed []bool // per target; nil: unknown, anything goes
	begin   time.Time
	settled time.Time // the next state's settle bounds this one's end
}

// NewTimeline starts a timeline in the state that allows allowed[i] for
// target i, in force from the start.
func NewTimeline(allowed []bool) *Timeline {
	return &Timeline{states: []timedState{{allowed: slices.Clone(allowed)}}}
}

// Begin marks that a change to a new state begins now.
func (tl *Timeline) Begin() {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.open {
		panic("netns: Timeline.Begin with a change not settled")
	}
	tl.open = true
	tl.states = append(tl.states, timedState{begin: time.Now()})
}

// Settle marks that the change begun last is in force now, and gives what
// the new state allows.
func (tl *Timeline) Settle(allowed []bool) {
	now := time.Now()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if !tl.open {
		panic("netns: Timeline.Settle without Begin")
	}
	tl.open = false
	s := &tl.states[len(tl.states)-1]
	s.allowed = slices.Clone(allowed) // nil stays nil: see SettleUnknown
	s.settled = now
}

// SettleUnknown is Settle for a state nobody can predict: our table
// tampered with by someone else, until the daemon repairs it (Begin, then
// Settle with what the repaired table allows, once the repair is seen).
// Any verdict is right while it may be in force.
func (tl *Timeline) SettleUnknown() {
	tl.Settle(nil)
}

// Len is the number of states, the first included.
func (tl *Timeline) Len() int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return len(tl.states)
}

// A WrongVerdict is a probe whose result no state in force during it
// explains: it got through though every such state denies it (a leak), or
// was blocked though every such state allows it.
type WrongVerdict struct {
	Record ProbeRecord
	Target ProbeTarget
	States []int // the states that could have been in force
}

func (w WrongVerdict) String() string {
	what := "allowed, though every state in force denies it (a leak)"
	if !w.Record.OK {
		what = fmt.Sprintf("blocked (%s), though every state in force allows it", w.Record.Why)
	}
	return fmt.Sprintf("%s at %s+%v: %s; states %v", w.Target, w.Record.Start.Format("15:04:05.000"),
		w.Record.End.Sub(w.Record.Start).Round(time.Millisecond), what, w.States)
}

// Check judges every record: the states that could have been in force
// during the probe are those whose window (see Timeline) meets the probe's
// [Start, End]; when all of them deny a target, a probe of it must be
// blocked, when all allow it, it must get through, and when they differ
// either is right. It returns the wrong verdicts, and how many records met
// more than one state (probes across a change).
func (tl *Timeline) Check(targets []ProbeTarget, records []ProbeRecord) (wrong []WrongVerdict, across int) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.open {
		panic("netns: Timeline.Check with a change not settled")
	}
	for _, r := range records {
		var states []int
		allow, deny := false, false
		// Windows are ordered: state i is [begin_i, settled_{i+1}].
		first, _ := slices.BinarySearchFunc(tl.states, r.Start, func(s timedState, t time.Time) int {
			return s.begin.Compare(t)
		})
		// The last state to begin before the probe, and the one before
		// it while that change had not settled, may be in force too.
		first = max(0, first-2)
		for i := first; i < len(tl.states); i++ {
			s := tl.states[i]
			if i > 0 && s.begin.After(r.End) {
				break
			}
			if i+1 < len(tl.states) && tl.states[i+1].settled.Before(r.Start) {
				continue
			}
			states = append(states, i)
			if s.allowed == nil {
				allow, deny = true, true
			} else if s.allowed[r.Target] {
				allow = true
			} else {
				deny = true
			}
		}
		if len(states) > 1 {
			across++
		}
		if (r.OK && !allow) || (!r.OK && !deny && !r.LeaksOnly) {
			wrong = append(wrong, WrongVerdict{Record: r, Target: targets[r.Target], States: states})
		}
	}
	return wrong, across
}

// Summary counts records: probes, how many got through and were blocked,
// and how many came from a leak prober.
func Summary(records []ProbeRecord) string {
	var ok, leaksOnly int
	for _, r := range records {
		if r.OK {
			ok++
		}
		if r.LeaksOnly {
			leaksOnly++
		}
	}
	return fmt.Sprintf("%d probes (%d got through, %d blocked; %d with the leak prober's short timeout)", len(records), ok, len(records)-ok, leaksOnly)
}

// FormatWrong lists at most max wrong verdicts, one a line.
func FormatWrong(wrong []WrongVerdict, max int) string {
	var b strings.Builder
	for i, w := range wrong {
		if i == max {
			fmt.Fprintf(&b, "  ... and %d more\n", len(wrong)-max)
			break
		}
		b.WriteString("  " + w.String() + "\n")
	}
	return b.String()
}
