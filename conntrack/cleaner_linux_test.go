package conntrack_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	ctnl "github.com/ti-mo/conntrack"
	"golang.org/x/sys/unix"

	"github.com/nftpolicy/nftpolicy/conntrack"
	"github.com/nftpolicy/nftpolicy/internal/netns"
	"github.com/nftpolicy/nftpolicy/nft"
)

// The data-plane tests: one routed node (hack/netns) with pods x/a, x/b and
// y/a. Every pod runs nettool (UDP echo on 80) and a TCP echo server of
// this file on 8080 whose connections live as long as the client keeps
// them. Tables are compiled from the cluster's manifests plus a policy and
// applied with nft.Open(node).Apply, as the daemon does.

const (
	echoPort = 8080
	udpPort  = 80
	// passTimeout bounds an exchange that must get through: generous, so a
	// slow machine fails no test. blockTimeout is how long an exchange that
	// must not get through is given to come back anyway.
	passTimeout  = 5 * time.Second
	blockTimeout = 2 * time.Second
)

type dataPlane struct {
	c    *netns.Cluster
	node *netns.Node
	pods map[string]*netns.Pod
	nft  *nft.Conn
}

func newDataPlane(t *testing.T) *dataPlane {
	t.Helper()
	c := netns.NewTestCluster(t, netns.Options{Name: "ctclean", TCPPorts: []int{}, UDPPorts: []int{udpPort}})
	node, err := c.AddNode("node-1")
	if err != nil {
		t.Fatal(err)
	}
	d := &dataPlane{c: c, node: node, pods: map[string]*netns.Pod{}}
	for _, key := range []string{"x/a", "x/b", "y/a"} {
		ns, name, _ := strings.Cut(key, "/")
		p, err := c.AddPod(node, ns, name)
		if err != nil {
			t.Fatal(err)
		}
		d.pods[key] = p
		serveEcho(t, p.NetnsPath())
	}
	if d.nft, err = nft.Open(node.NetnsPath()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.nft.Close() })
	return d
}

// table compiles the cluster plus the policies for node-1.
func (d *dataPlane) table(t *testing.T, policies ...string) *nft.Table {
	t.Helper()
	return compile(t, "node-1", d.c.Manifests(), policies...)
}

func (d *dataPlane) apply(t *testing.T, table *nft.Table) {
	t.Helper()
	if _, err := d.nft.Apply(table); err != nil {
		t.Fatalf("apply: %v", err)
	}
}

func (d *dataPlane) addr(key, family string) netip.Addr { return d.pods[key].Addr(family) }

// serveEcho runs a dual-stack TCP echo server on echoPort in the namespace
// until the test ends. Keepalives are off on both ends of every test
// connection: a probe the server sends on its own would be a packet of the
// flow that the test did not ask for.
func serveEcho(t *testing.T, path string) {
	t.Helper()
	var ln net.Listener
	err := netns.Do(path, func() (err error) {
		ln, err = (&net.ListenConfig{KeepAlive: -1}).Listen(context.Background(), "tcp", fmt.Sprintf(":%d", echoPort))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); io.Copy(c, c) }()
		}
	}()
}

// A flow is one client socket in a pod: a TCP connection to echoPort or a
// connected UDP socket to udpPort, each exchange a token sent and echoed.
type flow struct {
	name  string
	conn  net.Conn
	n     int
	stale bool
}

func (d *dataPlane) dial(t *testing.T, from, proto string, to netip.Addr) *flow {
	t.Helper()
	port := echoPort
	if proto == "udp" {
		port = udpPort
	}
	return dialFrom(t, d.pods[from].NetnsPath(), proto, netip.AddrPortFrom(to, uint16(port)), fmt.Sprintf("%s %s -> %s", proto, from, to))
}

func dialFrom(t *testing.T, path, proto string, to netip.AddrPort, name string) *flow {
	t.Helper()
	var conn net.Conn
	err := netns.Do(path, func() (err error) {
		conn, err = (&net.Dialer{Timeout: passTimeout, KeepAlive: -1}).Dial(proto, to.String())
		return err
	})
	if err != nil {
		t.Fatalf("dial %s: %v", name, err)
	}
	t.Cleanup(func() { conn.Close() })
	return &flow{name: name, conn: conn}
}

// exchange sends a token and reports whether anything came back within
// timeout: the token, or what an earlier exchange was still waiting for.
func (f *flow) exchange(timeout time.Duration) bool {
	f.n++
	token := []byte(fmt.Sprintf("token-%06d", f.n))
	f.conn.SetDeadline(time.Now().Add(timeout))
	if _, err := f.conn.Write(token); err != nil {
		return false
	}
	buf := make([]byte, len(token))
	n, err := io.ReadFull(f.conn, buf)
	if n > 0 && !bytes.Equal(buf, token) {
		f.stale = true // a late echo of an earlier token: it got through too
	}
	return n > 0 && (err == nil || f.stale)
}

// mustPass fails the test unless the flow exchanges a token. Only a
// blocked exchange is retried, once: packets can be lost, but they cannot
// be invented.
func (f *flow) mustPass(t *testing.T, when string) {
	t.Helper()
	if !f.exchange(passTimeout) && !f.exchange(passTimeout) {
		t.Errorf("%s: %s is blocked, want it to pass", when, f.name)
	}
}

// allStop fails the test if the next exchange of any of the flows, or the
// one after it, gets through. The flows are probed at once.
func allStop(t *testing.T, flows []*flow, when string) {
	t.Helper()
	var wg sync.WaitGroup
	passed := make([]int, len(flows))
	for i, f := range flows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 2 {
				if f.exchange(blockTimeout) {
					passed[i] = j + 1
					return
				}
			}
		}()
	}
	wg.Wait()
	for i, f := range flows {
		if passed[i] > 0 {
			t.Errorf("%s: %s passes (exchange %d after the change), want it blocked", when, f.name, passed[i])
		}
	}
}

// ctEntries lists the conntrack entries of the node by original tuple
// (source, destination, protocol, destination port) → ID.
func ctEntries(t *testing.T, path string) map[string]uint32 {
	t.Helper()
	flows := dumpCT(t, path)
	out := map[string]uint32{}
	for _, f := range flows {
		out[ctKey(f.TupleOrig.IP.SourceAddress, f.TupleOrig.IP.DestinationAddress, f.TupleOrig.Proto.Protocol, f.TupleOrig.Proto.DestinationPort)] = f.ID
	}
	return out
}

func dumpCT(t testing.TB, path string) []ctnl.Flow {
	t.Helper()
	conn := dialCT(t, path)
	defer conn.Close()
	flows, err := conn.Dump(nil)
	if err != nil {
		t.Fatalf("conntrack dump: %v", err)
	}
	return flows
}

func dialCT(t testing.TB, path string) *ctnl.Conn {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	conn, err := ctnl.Dial(&netlink.Config{NetNS: fd})
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

func ctKey(src, dst netip.Addr, proto uint8, dport uint16) string {
	return fmt.Sprintf("%s %s %d %d", src.Unmap(), dst.Unmap(), proto, dport)
}

// The policies: x/b admits TCP 8080 and UDP 80 from the namespaces named;
// fromNodes also admits TCP 8080 from the underlay, the nodes' addresses,
// so that the old table accepts what the node itself sends x/b and the new
// one (fromY alone) does not: the cleaner must know such a flow never
// crosses the forward hook.
var (
	fromXAndY = allowTo("web", "x", "y")
	fromY     = allowTo("web", "y")
	fromNodes = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: x, name: nodes}
spec:
  podSelector: {matchLabels: {pod: b}}
  policyTypes: [Ingress]
  ingress:
    - from: [{ipBlock: {cidr: 192.168.255.0/24}}, {ipBlock: {cidr: "fd00:ffff::/64"}}]
      ports: [{protocol: TCP, port: 8080}]
`
)

// TestKernelNarrowedFlowsStop: connections open under a table that allows
// them stop on their next packet once the table no longer does and the
// cleaner ran; a connection the new table still allows goes on, on the
// same socket and the same conntrack entry; connections the change does
// not touch keep their entries.
func TestKernelNarrowedFlowsStop(t *testing.T) {
	d := newDataPlane(t)
	old, tight := d.table(t, fromXAndY, fromNodes), d.table(t, fromY)
	d.apply(t, old)

	xb4, xb6 := d.addr("x/b", netns.IPv4), d.addr("x/b", netns.IPv6)
	narrowed := []*flow{
		d.dial(t, "x/a", "tcp", xb4),
		d.dial(t, "x/a", "udp", xb4),
		d.dial(t, "x/a", "tcp", xb6),
	}
	kept := []*flow{
		d.dial(t, "y/a", "tcp", xb4),                       // still allowed
		d.dial(t, "y/a", "udp", xb6),                       // still allowed
		d.dial(t, "x/a", "tcp", d.addr("y/a", netns.IPv4)), // y/a is isolated by neither table
		d.dial(t, "x/b", "udp", d.addr("x/a", netns.IPv4)), // x/b is isolated for ingress only
		// The node's own connection to x/b passes output and input, never
		// forward: the new table would drop it there, and it must stay.
		dialFrom(t, d.node.NetnsPath(), "tcp", netip.AddrPortFrom(xb4, echoPort), "tcp node-1 -> x/b"),
	}
	for _, f := range append(append([]*flow{}, narrowed...), kept...) {
		f.mustPass(t, "under the allowing table")
	}
	before := ctEntries(t, d.node.NetnsPath())

	cleaner, err := conntrack.Open(d.node.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	defer cleaner.Close()
	d.apply(t, tight)
	st, err := cleaner.Narrowed(old, tight)
	if err != nil {
		t.Fatalf("Narrowed: %v", err)
	}
	t.Logf("stats: %+v", st)
	if st.Deleted != len(narrowed) || st.Narrowed != len(narrowed) {
		t.Errorf("deleted %d of %d narrowed entries, want %d", st.Deleted, st.Narrowed, len(narrowed))
	}
	if st.Local == 0 {
		t.Errorf("the node's own connection was not recognised as local: %+v", st)
	}

	after := ctEntries(t, d.node.NetnsPath())
	for _, f := range kept {
		k := keyOf(f)
		if before[k] == 0 {
			t.Errorf("no conntrack entry %s for %s before the change", k, f.name)
		} else if after[k] != before[k] {
			t.Errorf("%s: conntrack entry %s was id %d, now %d: the cleaner deleted a flow it must leave alone", f.name, k, before[k], after[k])
		}
	}
	for _, f := range narrowed {
		if id := after[keyOf(f)]; id != 0 {
			t.Errorf("%s: conntrack entry %s still there (id %d)", f.name, keyOf(f), id)
		}
	}
	allStop(t, narrowed, "after the tightening and the cleanup")
	for _, f := range kept {
		f.mustPass(t, "after the tightening and the cleanup")
	}
}

// TestKernelTighteningAloneKeepsFlows is the bug the cleaner fixes, kept as
// the baseline of the test above: without the cleanup, a connection the
// new table denies keeps flowing as established.
func TestKernelTighteningAloneKeepsFlows(t *testing.T) {
	d := newDataPlane(t)
	old, tight := d.table(t, fromXAndY), d.table(t, fromY)
	d.apply(t, old)
	xb := d.addr("x/b", netns.IPv4)
	tcpFlow, udpFlow := d.dial(t, "x/a", "tcp", xb), d.dial(t, "x/a", "udp", xb)
	tcpFlow.mustPass(t, "under the allowing table")
	udpFlow.mustPass(t, "under the allowing table")
	d.apply(t, tight)
	// The table does deny them: a new connection is blocked...
	if fresh := d.dial(t, "x/a", "udp", xb); fresh.exchange(blockTimeout) {
		t.Fatal("a new UDP flow from x/a to x/b passes the tightened table")
	}
	// ...while the established ones go on.
	tcpFlow.mustPass(t, "after the tightening, without cleanup")
	udpFlow.mustPass(t, "after the tightening, without cleanup")
}

// TestKernelNarrowedThroughDNAT: a client reaching x/b through a Service
// address (DNAT in the node) is judged by the real destination and port,
// as the forward hook saw them, and stopped.
func TestKernelNarrowedThroughDNAT(t *testing.T) {
	d := newDataPlane(t)
	xb := d.addr("x/b", netns.IPv4)
	const vip = "10.96.0.10"
	// kube-proxy's part: the Service 10.96.0.10 TCP 80 → x/b:8080, UDP 53 → x/b:80.
	if out, err := d.node.ExecInput([]byte(fmt.Sprintf(`table ip svc {
	chain dstnat {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr %[1]s tcp dport 80 dnat to %[2]s:%[3]d
		ip daddr %[1]s udp dport 53 dnat to %[2]s:%[4]d
	}
}
`, vip, xb, echoPort, udpPort)), "nft", "-f", "-"); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
	old, tight := d.table(t, fromXAndY), d.table(t, fromY)
	d.apply(t, old)
	svc := netip.MustParseAddr(vip)
	tcpFlow := dialFrom(t, d.pods["x/a"].NetnsPath(), "tcp", netip.AddrPortFrom(svc, 80), "tcp x/a -> service 80")
	udpFlow := dialFrom(t, d.pods["x/a"].NetnsPath(), "udp", netip.AddrPortFrom(svc, 53), "udp x/a -> service 53")
	keptFlow := dialFrom(t, d.pods["y/a"].NetnsPath(), "tcp", netip.AddrPortFrom(svc, 80), "tcp y/a -> service 80")
	for _, f := range []*flow{tcpFlow, udpFlow, keptFlow} {
		f.mustPass(t, "under the allowing table")
	}

	cleaner, err := conntrack.Open(d.node.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	defer cleaner.Close()
	d.apply(t, tight)
	st, err := cleaner.Narrowed(old, tight)
	if err != nil {
		t.Fatalf("Narrowed: %v", err)
	}
	t.Logf("stats: %+v", st)
	if st.Deleted != 2 {
		t.Errorf("deleted %d entries, want 2", st.Deleted)
	}
	allStop(t, []*flow{tcpFlow, udpFlow}, "after the tightening and the cleanup")
	keptFlow.mustPass(t, "after the tightening and the cleanup")
}

// TestKernelNarrowedLeavesWhatOnlyLooksDenied: entries the change did not
// narrow stay, even where the new table denies them: denied before too, or
// in the namespace's own traffic. They are made with ctnetlink directly,
// no packets needed.
func TestKernelNarrowedLeavesWhatOnlyLooksDenied(t *testing.T) {
	d := newDataPlane(t)
	old, tight := d.table(t, fromXAndY, fromNodes), d.table(t, fromY)
	d.apply(t, old)
	xa, xb := d.addr("x/a", netns.IPv4), d.addr("x/b", netns.IPv4)
	entries := []struct {
		name       string
		src, dst   netip.Addr
		proto      uint8
		dport      uint16
		wantDelete bool
	}{
		{"narrowed", xa, xb, unix.IPPROTO_TCP, echoPort, true},
		{"denied by both: another port", xa, xb, unix.IPPROTO_TCP, 9, false},
		{"the node's own address", d.node.IPv4(), xb, unix.IPPROTO_TCP, echoPort, false},
		{"ICMP the rule never allowed", xa, xb, unix.IPPROTO_ICMP, 0, false},
		{"x/b's own egress", xb, xa, unix.IPPROTO_TCP, echoPort, false},
	}
	conn := dialCT(t, d.node.NetnsPath())
	defer conn.Close()
	for i, e := range entries {
		f := ctnl.NewFlow(e.proto, ctnl.StatusConfirmed|ctnl.StatusSeenReply|ctnl.StatusAssured, e.src, e.dst, uint16(40000+i), e.dport, 600, 0)
		if e.proto == unix.IPPROTO_ICMP {
			f.TupleOrig.Proto = ctnl.ProtoTuple{Protocol: e.proto, ICMPv4: true, ICMPType: 8, ICMPID: 7}
			f.TupleReply.Proto = ctnl.ProtoTuple{Protocol: e.proto, ICMPv4: true, ICMPType: 0, ICMPID: 7}
		}
		if e.proto == unix.IPPROTO_TCP {
			f.ProtoInfo.TCP = &ctnl.ProtoInfoTCP{State: 3} // ESTABLISHED
		}
		if err := conn.Create(f); err != nil {
			t.Fatalf("create %s: %v", e.name, err)
		}
	}
	cleaner, err := conntrack.Open(d.node.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	defer cleaner.Close()
	d.apply(t, tight)
	st, err := cleaner.Narrowed(old, tight)
	if err != nil {
		t.Fatalf("Narrowed: %v", err)
	}
	t.Logf("stats: %+v", st)
	after := ctEntries(t, d.node.NetnsPath())
	for _, e := range entries {
		k := ctKey(e.src, e.dst, e.proto, e.dport)
		if _, present := after[k]; present == e.wantDelete {
			t.Errorf("%s (%s): present after cleanup = %v, want %v", e.name, k, present, !e.wantDelete)
		}
	}
}

// TestKernelNarrowedNothingToDo: with no pod isolated before or after, the
// cleaner reads nothing.
func TestKernelNarrowedNothingToDo(t *testing.T) {
	d := newDataPlane(t)
	open := d.table(t)
	d.apply(t, open)
	cleaner, err := conntrack.Open(d.node.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	defer cleaner.Close()
	st, err := cleaner.Narrowed(nil, open)
	if err != nil || st.Dumped != 0 {
		t.Errorf("Narrowed = %+v, %v; want nothing read", st, err)
	}
	if err := cleaner.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := cleaner.Narrowed(nil, d.table(t, fromY)); err == nil {
		t.Error("Narrowed on a closed cleaner: no error")
	}
}

func TestKernelOpenMissingNetns(t *testing.T) {
	netns.RequireRoot(t)
	_, err := conntrack.Open("/run/netns/does-not-exist-ctclean")
	if !errors.Is(err, unix.ENOENT) {
		t.Errorf("Open of a missing netns: %v, want ENOENT", err)
	}
}

// keyOf is the conntrack key of a client socket's flow as ctEntries keys it.
func keyOf(f *flow) string {
	l := netip.MustParseAddrPort(f.conn.LocalAddr().String())
	r := netip.MustParseAddrPort(f.conn.RemoteAddr().String())
	proto := uint8(unix.IPPROTO_TCP)
	if f.conn.LocalAddr().Network() == "udp" {
		proto = unix.IPPROTO_UDP
	}
	return ctKey(l.Addr(), r.Addr(), proto, r.Port())
}
