package enforcer

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nftpolicy/nftpolicy/nft"
)

// Flow logs.
//
// With Options.FlowLog, the first packet of each connection that a policy
// of a logged namespace allows, or that an isolated pod of a logged
// namespace is denied, is logged to an nflog group, rate-limited in the
// kernel; the daemon reads the group (package flowlog) and writes a line
// per connection (FlowResolver names what the line says). A namespace is
// logged when FlowLog.All is set or its Namespace carries
// k8s.FlowLogAnnotation: "true". Only the rules of logged namespaces
// change, so only their connections pay for it.
//
// Logging must never change a verdict, and a `limit` that fails ends its
// rule: so the limit and the log are a rule of their own, ahead of the
// rule they log for.
//
//   - Before each rule of a policy chain that allows, the same match, with
//     our allow bit still clear, then the log (allowLogRule):
//
//     meta mark & 0x40 == 0 <match> limit rate 20/second burst 40 packets log prefix "nftpolicy:allow:<id>:<rule>" group 100
//
//     The bit is clear only until a rule allows: a pod chain jumps to
//     every policy selecting the pod, and the bit check makes the first
//     rule that allows log the connection, once, however many allow it.
//   - Before an isolated pod chain's final drop (denyLogRule):
//
//     limit rate 20/second burst 40 packets log prefix "nftpolicy:deny:<id>" group 100
//
// A connection between two pods of this node is judged twice (the
// sender's egress, the receiver's ingress) and logged once per direction
// decided in a logged namespace. A pod no policy isolates for a direction
// has no chain there: its connections in that direction are allowed by no
// policy, and nothing logs them (that would take a rule per pod on every
// connection's path).
//
// The limit is per rule: a busy rule logs at most Rate connections a
// second (after a burst of Burst), and other rules log on. What a limit
// holds back is not logged at all; the rule counters (Options.Counters)
// still count every connection.
//
// # Identifiers
//
// A prefix names its chain by an identifier, the first 8 hex digits of a
// hash of the chain's key (policy or pod, direction), handed out by a
// registry (nameRegistry) so that two keys never share one: a key whose
// 8 digits another key holds gets 16. The rule number is the index in
// spec.ingress or spec.egress (as Explain has it). An identifier outlives
// its chain for flowIDRetention, so that a line for a packet logged just
// before its policy went still names it, and no other key takes it
// meanwhile.

// A FlowLog configures flow logs.
type FlowLog struct {
	// Group is the nflog group logged packets go to; 0 turns flow logs
	// off, annotations included.
	Group uint16
	// All logs every namespace, annotated or not.
	All bool
	// Rate is how many connections a second each logging rule logs at
	// most, after a burst of Burst; zero for DefaultFlowLogRate and twice
	// the rate.
	Rate, Burst uint32
}

// DefaultFlowLogRate is the connections a second each rule logs at most.
const DefaultFlowLogRate = 20

// flowLogPrefix starts every prefix nftpolicy logs with.
const flowLogPrefix = "nftpolicy:"

// flowLogged reports whether connections of pods of namespace ns are
// logged.
func (c *Compiler) flowLogged(ns string) bool {
	return c.opts.FlowLog.Group != 0 && (c.opts.FlowLog.All || c.flowNS[ns])
}

// flowLimit is the limit of every logging rule.
func (c *Compiler) flowLimit() nft.Limit {
	rate := c.opts.FlowLog.Rate
	if rate == 0 {
		rate = DefaultFlowLogRate
	}
	burst := c.opts.FlowLog.Burst
	if burst == 0 {
		burst = 2 * rate
	}
	return nft.Limit{Rate: rate, Burst: burst}
}

// allowLogRule logs the first rule that allows a connection, in a rule of
// its own ahead of it: match is that rule's match.
//
//	meta mark & 0x00000040 == 0x00000000 <match> limit rate 20/second burst 40 packets log prefix "nftpolicy:allow:<id>:<rule>" group 100
func (c *Compiler) allowLogRule(match []nft.Expr, id string, rule int, comment string) nft.Rule {
	exprs := make([]nft.Expr, 0, len(match)+3)
	exprs = append(exprs, nft.MarkBitsClear{Bits: c.bit})
	exprs = append(exprs, match...)
	exprs = append(exprs, c.flowLimit(), nft.Log{Group: c.opts.FlowLog.Group, Prefix: fmt.Sprintf("%sallow:%s:%d", flowLogPrefix, id, rule)})
	return nft.Rule{Exprs: exprs, Comment: comment}
}

// denyLogRule logs what an isolated pod's chain is about to drop:
//
//	limit rate 20/second burst 40 packets log prefix "nftpolicy:deny:<id>" group 100
func (c *Compiler) denyLogRule(id string) nft.Rule {
	return nft.Rule{Exprs: []nft.Expr{c.flowLimit(), nft.Log{Group: c.opts.FlowLog.Group, Prefix: flowLogPrefix + "deny:" + id}}}
}

// flowIDs hands out the identifiers of logged chains, unique by
// construction (a nameRegistry), and keeps each for a while after its
// chain went: a retired key still holds its identifier in the registry
// until expire lets it go, or takes it back itself.
type flowIDs struct {
	reg     *nameRegistry
	retired map[string]uint64 // key -> the Compile call that retired it
}

func newFlowIDs() *flowIDs { return &flowIDs{reg: newNameRegistry(), retired: map[string]uint64{}} }

// acquire returns key's identifier, held until retire.
func (f *flowIDs) acquire(key string) string {
	id := f.reg.acquire(key, func(hash string) string { return hash })
	if _, ok := f.retired[key]; ok {
		// Back before it expired: the same identifier, held once.
		delete(f.retired, key)
		f.reg.release(key)
	}
	return id
}

// retire lets key go at call; its identifier stays its own until expire.
func (f *flowIDs) retire(key string, call uint64) { f.retired[key] = call }

// expire frees the identifiers retired at or before call.
func (f *flowIDs) expire(call uint64) {
	for key, at := range f.retired {
		if at <= call {
			delete(f.retired, key)
			f.reg.release(key)
		}
	}
}

// lookup returns the key holding id, in use or retired.
func (f *flowIDs) lookup(id string) (string, bool) {
	key, ok := f.reg.byName[id]
	return key, ok
}

// held counts the identifiers of chains in the table (not retired).
func (f *flowIDs) held() int { return len(f.reg.byName) - len(f.retired) }

// acquireFlowID returns the identifier of the chain of chainKey(prefix,
// namespace, name).
func (c *Compiler) acquireFlowID(prefix, namespace, name string) string {
	return c.flowIDs.acquire(chainKey(prefix, namespace, name))
}

func (c *Compiler) retireFlowID(prefix, namespace, name string) {
	c.flowIDs.retire(chainKey(prefix, namespace, name), c.call)
}

// refreshFlowLog rewrites the policies of namespaces whose flow logging
// was turned on or off (their chains gain or lose their log rules, as a
// changed spec would), and marks their pod chains for rebuilding.
func (c *Compiler) refreshFlowLog(ch *changes) {
	for ns := range ch.flowLogNS {
		ch.podChainNS[ns] = true
		for _, p := range c.policiesByNS[ns] {
			if p.flowLogged != c.flowLogged(ns) {
				np := p.np
				c.removePolicy(p, ch)
				c.addPolicy(np, ch)
			}
		}
	}
}

// flowIDRetention is how long an identifier names its chain after the
// chain went: longer than a logged packet waits to be read and merged.
const flowIDRetention = time.Minute

// A Flow is what a logged connection's prefix and addresses say, as
// FlowResolver resolves them.
type Flow struct {
	Verdict   string // "allow" or "deny"
	Direction string // "ingress" or "egress"
	// Policy ("namespace/name") and Rule (the index in its spec.ingress
	// or spec.egress) allowed the connection; for a deny, Policy is ""
	// and Rule -1.
	Policy string
	Rule   int
	// Pod is the pod whose check decided: the destination for ingress,
	// the source for egress ("namespace/name").
	Pod string
	// SrcPod and DstPod hold the addresses ("namespace/name"), "" for an
	// address that is no pod's.
	SrcPod, DstPod string
}

// A FlowResolver names what logged packets say, from the compiler's view
// of the table a Syncer last compiled. It is safe for concurrent use.
type FlowResolver struct {
	s *Syncer

	mu    sync.Mutex
	calls []callSeen // Compile calls seen by Expire, oldest first
}

type callSeen struct {
	call uint64
	at   time.Time
}

// NewFlowResolver returns a resolver for the tables s compiles.
func NewFlowResolver(s *Syncer) *FlowResolver { return &FlowResolver{s: s} }

// Logging reports whether the last table compiled logs anything: whether
// there is a group to read.
func (r *FlowResolver) Logging() bool {
	r.s.syncMu.Lock()
	defer r.s.syncMu.Unlock()
	return r.s.compiler.flowIDs.held() > 0
}

// Resolve names the prefix of a logged packet and its addresses. It
// reports false for a prefix that is not one nftpolicy writes, or whose
// identifier expired or was never handed out; SrcPod and DstPod are set
// either way.
func (r *FlowResolver) Resolve(prefix string, src, dst netip.Addr) (Flow, bool) {
	r.s.syncMu.Lock()
	defer r.s.syncMu.Unlock()
	c := r.s.compiler
	f := Flow{Rule: -1, SrcPod: c.endpoint(src).Pod, DstPod: c.endpoint(dst).Pod}
	rest, ok := strings.CutPrefix(prefix, flowLogPrefix)
	if !ok {
		return f, false
	}
	verdict, rest, _ := strings.Cut(rest, ":")
	id, rule := rest, ""
	if verdict == "allow" {
		if id, rule, ok = strings.Cut(rest, ":"); !ok {
			return f, false
		}
	}
	key, ok := c.flowIDs.lookup(id)
	if !ok {
		return f, false
	}
	kind, obj, _ := strings.Cut(key, "\x00") // see chainKey
	dir, isPod := strings.CutSuffix(kind, "-pod")
	switch {
	case verdict == "allow" && !isPod:
		n, err := strconv.Atoi(rule)
		if err != nil {
			return f, false
		}
		f.Policy, f.Rule = obj, n
		f.Pod = f.DstPod
		if dir == egress.name {
			f.Pod = f.SrcPod
		}
	case verdict == "deny" && isPod:
		f.Pod = obj
	default:
		return f, false
	}
	f.Verdict, f.Direction = verdict, dir
	return f, true
}

// Expire frees the identifiers of chains gone for flowIDRetention by now.
// Call it every second or so: the compiler knows no time, so Expire notes
// when it saw each Compile call.
func (r *FlowResolver) Expire(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.s.syncMu.Lock()
	defer r.s.syncMu.Unlock()
	c := r.s.compiler
	if n := len(r.calls); n == 0 || r.calls[n-1].call != c.call {
		r.calls = append(r.calls, callSeen{c.call, now})
	}
	// The newest call seen long enough ago: what was retired by then
	// went before the retention began.
	i := 0
	for i < len(r.calls) && now.Sub(r.calls[i].at) >= flowIDRetention {
		i++
	}
	if i == 0 {
		return
	}
	c.flowIDs.expire(r.calls[i-1].call)
	r.calls = r.calls[i:]
}
