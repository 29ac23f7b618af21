package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nftpolicy/nftpolicy/internal/netns/internal/probe"
)

// Probe reports whether from reaches to on proto ("tcp", "udp" or "sctp") and
// port within timeout: a TCP handshake completes, a UDP datagram comes back
// echoed, an SCTP INIT arrives in the destination pod (see ProbeSCTP; to must
// then be a pod address of this cluster).
func (c *Cluster) Probe(from *Pod, to netip.Addr, proto string, port int, timeout time.Duration) bool {
	ok, _, _ := c.probe(from.netns, to, proto, port, timeout)
	return ok
}

// ProbeFromNode is Probe from the node's own network namespace (host network).
// Traffic from a node to its own pods is always allowed by NetworkPolicy.
func (c *Cluster) ProbeFromNode(from *Node, to netip.Addr, proto string, port int, timeout time.Duration) bool {
	ok, _, _ := c.probe(from.netns, to, proto, port, timeout)
	return ok
}

// ProbeSCTP reports whether an SCTP INIT from pod from to port of pod address
// to arrives in the destination pod within Options.Timeout.
//
// This kernel has no SCTP sockets, so a hand-built INIT goes out through a raw
// IP socket (protocol 132) from a source port the harness picks, and the
// harness watches for it with an nft counter in the destination pod's own
// namespace (package documentation, # Probes): before the probe the counter for
// (source port, port) does not exist, after it counts the packet.
func (c *Cluster) ProbeSCTP(from *Pod, to netip.Addr, port int) bool {
	ok, _, _ := c.probe(from.netns, to, SCTP, port, c.opts.Timeout)
	return ok
}

// probe returns whether the probe got through, why not if it did not, and an
// error when the harness itself failed (then the bool is false and means
// nothing).
func (c *Cluster) probe(ns string, to netip.Addr, proto string, port int, timeout time.Duration) (ok bool, why string, err error) {
	to = to.Unmap()
	if !to.IsValid() {
		return false, "", errors.New("invalid destination address")
	}
	if port < 1 || port > 65535 {
		return false, "", fmt.Errorf("bad port %d", port)
	}
	switch proto {
	case TCP, UDP:
		return c.probeSocket(ns, to, proto, port, timeout)
	case SCTP:
		ok, err := c.probeSCTP(ns, to, port, timeout)
		if !ok && err == nil {
			why = "INIT not seen at " + to.String()
		}
		return ok, why, err
	}
	panic(fmt.Sprintf("netns: unknown protocol %q (want tcp, udp or sctp)", proto))
}

// probeSocket probes with a TCP handshake or a UDP echo from namespace ns.
func (c *Cluster) probeSocket(ns string, to netip.Addr, proto string, port int, timeout time.Duration) (bool, string, error) {
	dst := netip.AddrPortFrom(to, uint16(port))
	if c.opts.ExecProbes {
		return c.execProbe(ns, dst, proto, timeout, "")
	}
	var perr error
	err := inNetns(netnsPath(ns), func() {
		if proto == TCP {
			perr = probe.TCP(dst, timeout)
		} else {
			perr = probe.UDP(dst, timeout)
		}
	})
	if err != nil {
		return false, "", err
	}
	if perr != nil {
		return false, perr.Error(), nil
	}
	return true, "", nil
}

// execProbe runs `nettool probe` in ns; it exits 0 when connected (or, for
// SCTP, when the INIT was sent), 1 when not, 2 on a usage or local error.
func (c *Cluster) execProbe(ns string, dst netip.AddrPort, proto string, timeout time.Duration, sport string) (bool, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+10*time.Second)
	defer cancel()
	args := []string{"probe", "--proto", proto, "--addr", dst.Addr().String(),
		"--port", strconv.Itoa(int(dst.Port())), "--timeout", timeout.String()}
	if sport != "" {
		args = append(args, "--sport", sport)
	}
	out, err := output(c.tool.command(ctx, ns, args...), nil)
	if err == nil {
		return true, "", nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 && bytes.HasPrefix(out, []byte("failed: ")) {
		return false, strings.TrimSpace(strings.TrimPrefix(string(out), "failed: ")), nil
	}
	return false, "", err
}

// The SCTP watch table of a pod. The set has one element per (source port,
// destination port) seen, each with its own counter, so concurrent probes to
// one pod never read each other's packets. Elements time out so the set stays
// small however long a suite runs; source ports are handed out round-robin
// from 28232 values, far more than are used in sctpSeenTimeout.
const (
	sctpSeenTimeout = "3m"
	sctpPortBase    = 32768
	sctpPortCount   = 28232 // 32768..60999, Linux's default ephemeral range
)

var probeTable = `table inet probe {
	set sctp_seen {
		type inet_service . inet_service
		flags dynamic,timeout
		timeout ` + sctpSeenTimeout + `
		counter
		comment "sctp sport . dport of every SCTP packet delivered here (internal/netns ProbeSCTP)"
	}
	chain input {
		type filter hook input priority filter; policy accept;
		meta l4proto sctp counter update @sctp_seen { sctp sport . sctp dport }
	}
}
`

func (c *Cluster) probeSCTP(ns string, to netip.Addr, port int, timeout time.Duration) (bool, error) {
	dst := c.PodByIP(to)
	if dst == nil {
		return false, fmt.Errorf("sctp probe: %s is not a pod of this cluster", to)
	}
	if err := dst.ensureProbeTable(); err != nil {
		return false, err
	}
	sport := sctpPortBase + int(c.sport.Add(1)%sctpPortCount)
	elem := fmt.Sprintf("{ %d . %d }", sport, port)

	if err := c.sendSCTPInit(ns, netip.AddrPortFrom(to, uint16(port)), sport); err != nil {
		return false, err
	}
	// Packets between namespaces on one machine arrive within microseconds or
	// not at all, so the first look nearly always decides an allowed probe;
	// a blocked one waits out the timeout. Each look is an nft process, so
	// back off quickly (about 8 looks a second) to leave the CPU to others.
	deadline := time.Now().Add(timeout)
	wait := 10 * time.Millisecond
	for {
		seen, err := dst.sctpSeen(elem)
		if err != nil || seen {
			return seen, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false, nil
		}
		time.Sleep(min(wait, left))
		wait = min(2*wait, 400*time.Millisecond)
	}
}

func (c *Cluster) sendSCTPInit(ns string, dst netip.AddrPort, sport int) error {
	if c.opts.ExecProbes {
		_, _, err := c.execProbe(ns, dst, SCTP, c.opts.Timeout, strconv.Itoa(sport))
		return err
	}
	var perr error
	if err := inNetns(netnsPath(ns), func() { perr = probe.SendSCTPInit(dst, uint16(sport)) }); err != nil {
		return err
	}
	return perr
}

func (p *Pod) ensureProbeTable() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.probeTable {
		return nil
	}
	if _, err := execIn(p.netns, []byte(probeTable), "nft", "-f", "-"); err != nil {
		return fmt.Errorf("install SCTP probe table in %s: %w", p.Key(), err)
	}
	p.probeTable = true
	return nil
}

// sctpSeen reports whether the element exists; `nft get element` fails with
// ENOENT ("No such file or directory") when it does not.
func (p *Pod) sctpSeen(elem string) (bool, error) {
	_, err := execIn(p.netns, nil, "nft", "get", "element", "inet", "probe", "sctp_seen", elem)
	if err == nil {
		return true, nil
	}
	if strings.Contains(err.Error(), "No such file or directory") {
		return false, nil
	}
	return false, err
}

// ProbeMatrix probes every pod to every pod (itself included) over family
// (IPv4 or IPv6), proto and port, at most Options.Concurrency probes at once,
// each with Options.Timeout. A failed probe is retried once; Matrix.Retries
// counts the retries and Matrix.Recovered those that then got through.
func (c *Cluster) ProbeMatrix(pods []*Pod, family, proto string, port int) *Matrix {
	return c.probeMatrix(pods, family, proto, port, nil)
}

// ProbeMatrixExpect is ProbeMatrix for a test that knows what to expect
// (want: same pods, same order). Only a probe that was blocked where want
// allows it is retried, once, because packets can be lost: Matrix.Retries
// counts those retries, Matrix.Recovered the ones that then got through,
// and Matrix.Flakes lists them. A probe that got through where want blocks
// it is a leak and is never retried: it may come from a conntrack entry
// left over from an earlier step or from a moment inside an update, and
// either way the matrix records it as allowed and lists it in
// Matrix.Leaks, so the test fails on it.
func (c *Cluster) ProbeMatrixExpect(pods []*Pod, family, proto string, port int, want *Matrix) *Matrix {
	if !slices.Equal(Keys(pods), want.keys) {
		panic(fmt.Sprintf("netns: expectation over %v, probing %v", want.keys, Keys(pods)))
	}
	return c.probeMatrix(pods, family, proto, port, want)
}

// probeMatrix probes pods to pods; a probe is retried once when it was
// blocked and want (nil: every cell) allows it. A probe that got through
// where want blocks it is a leak: recorded, never retried.
func (c *Cluster) probeMatrix(pods []*Pod, family, proto string, port int, want *Matrix) *Matrix {
	if family != IPv4 && family != IPv6 {
		panic(fmt.Sprintf("netns: unknown family %q (want %q or %q)", family, IPv4, IPv6))
	}
	if proto != TCP && proto != UDP && proto != SCTP {
		panic(fmt.Sprintf("netns: unknown protocol %q (want tcp, udp or sctp)", proto))
	}
	start := time.Now()
	m := NewMatrix(Keys(pods), false)
	m.Family, m.Proto, m.Port = family, proto, port

	var (
		wg        sync.WaitGroup
		mu        sync.Mutex // m.Set and m.Errors
		retries   atomic.Int64
		recovered atomic.Int64
		sem       = make(chan struct{}, c.opts.Concurrency)
	)
	for _, from := range pods {
		for _, to := range pods {
			expected := want == nil || want.Get(from.Key(), to.Key())
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				addr := to.Addr(family)
				ok, why, err := c.probe(from.netns, addr, proto, port, c.opts.Timeout)
				if ok && !expected && err == nil {
					mu.Lock()
					m.Leaks = append(m.Leaks, fmt.Sprintf("%s -> %s: got through on the first probe where it must be blocked (not retried)", from.Key(), to.Key()))
					mu.Unlock()
				}
				if !ok && expected && err == nil {
					retries.Add(1)
					first := why
					ok, why, err = c.probe(from.netns, addr, proto, port, c.opts.Timeout)
					if ok && err == nil {
						recovered.Add(1)
						mu.Lock()
						m.Flakes = append(m.Flakes, fmt.Sprintf("%s -> %s: %s", from.Key(), to.Key(), first))
						mu.Unlock()
					} else if !ok && why != first {
						why = first + "; retry: " + why
					}
				}
				mu.Lock()
				defer mu.Unlock()
				m.Set(from.Key(), to.Key(), ok)
				if !ok && why != "" {
					m.setReason(from.Key(), to.Key(), why)
				}
				if err != nil {
					m.Errors = append(m.Errors, fmt.Sprintf("%s -> %s: %v", from.Key(), to.Key(), err))
				}
			}()
		}
	}
	wg.Wait()
	slices.Sort(m.Errors)
	slices.Sort(m.Flakes)
	slices.Sort(m.Leaks)
	m.Retries, m.Recovered = int(retries.Load()), int(recovered.Load())
	m.Elapsed = time.Since(start)
	return m
}

// SendForgedUDP sends one UDP datagram from pod from with the source address
// and port src (any address: a forgery, as a pod with CAP_NET_RAW can) to
// dst. Whether it arrived is for the test to watch, e.g. with an nft counter
// in the destination's namespace.
func (c *Cluster) SendForgedUDP(from *Pod, src, dst netip.AddrPort) error {
	var perr error
	if err := inNetns(netnsPath(from.netns), func() { perr = probe.SendForgedUDP(src, dst, []byte("forged")) }); err != nil {
		return err
	}
	return perr
}
