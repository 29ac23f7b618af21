package conntrack_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftpolicy/nftpolicy/conntrack"
	"github.com/nftpolicy/nftpolicy/enforcer"
	"github.com/nftpolicy/nftpolicy/internal/netns"
	"github.com/nftpolicy/nftpolicy/nft"
)

// Revocation with servers that talk first: x/b runs a TCP server and a UDP
// server on pushPort, each able to send to a client before the client
// says anything. x/a and y/a are their clients. A policy admits pushPort
// into x/b from the namespaces named; x/a and y/a are isolated by nothing,
// so x/b → x/a, the server talking to its client, is always allowed: only
// the server's ingress ever narrows.

const pushPort = 8081

// pushPolicy admits TCP and UDP pushPort into x/b from the namespaces named.
func pushPolicy(namespaces ...string) string {
	return fmt.Sprintf(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: x, name: push}
spec:
  podSelector: {matchLabels: {pod: b}}
  policyTypes: [Ingress]
  ingress:
    - from: [{namespaceSelector: {matchExpressions: [{key: ns, operator: In, values: [%s]}]}}]
      ports: [{protocol: TCP, port: %d}, {protocol: UDP, port: %d}]
`, `"`+strings.Join(namespaces, `", "`)+`"`, pushPort, pushPort)
}

// pushServers are x/b's servers. Each client gets a duplex: what its
// server sends it and what it sends its server, each direction checked on
// its own.
type pushServers struct {
	ln net.Listener
	pc net.PacketConn

	mu    sync.Mutex
	inbox map[netip.AddrPort]chan []byte // UDP datagrams by client
}

func startPushServers(t *testing.T, path string) *pushServers {
	t.Helper()
	s := &pushServers{inbox: map[netip.AddrPort]chan []byte{}}
	err := netns.Do(path, func() (err error) {
		lc := net.ListenConfig{KeepAlive: -1}
		if s.ln, err = lc.Listen(context.Background(), "tcp", fmt.Sprintf(":%d", pushPort)); err != nil {
			return err
		}
		s.pc, err = lc.ListenPacket(context.Background(), "udp", fmt.Sprintf(":%d", pushPort))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { s.ln.Close(); s.pc.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 1500)
		for {
			n, from, err := s.pc.ReadFrom(buf)
			if err != nil {
				return
			}
			select {
			case s.udpInbox(addrPortOf(from)) <- append([]byte(nil), buf[:n]...):
			default: // nobody reads: the test is over with this client
			}
		}
	}()
	return s
}

func (s *pushServers) udpInbox(a netip.AddrPort) chan []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inbox[a] == nil {
		s.inbox[a] = make(chan []byte, 64)
	}
	return s.inbox[a]
}

func addrPortOf(a net.Addr) netip.AddrPort {
	ap := netip.MustParseAddrPort(a.String())
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// A duplex is one client's connection to a push server.
type duplex struct {
	name   string
	client net.Conn
	// toClient sends from the server; fromClient waits for what the
	// client sent, reporting whether anything arrived.
	toClient   func([]byte) error
	fromClient func(timeout time.Duration) bool
	n          int
}

// dial connects a client in the pod to x/b's server at addr, the server
// side included (a UDP client says hello, so that the server knows it).
func (s *pushServers) dial(t *testing.T, pod *netns.Pod, proto string, addr netip.Addr) *duplex {
	t.Helper()
	to := netip.AddrPortFrom(addr, pushPort)
	d := &duplex{name: fmt.Sprintf("%s %s -> %s", proto, pod.Key(), to)}
	if err := netns.Do(pod.NetnsPath(), func() (err error) {
		d.client, err = (&net.Dialer{Timeout: passTimeout, KeepAlive: -1}).Dial(proto, to.String())
		return err
	}); err != nil {
		t.Fatalf("dial %s: %v", d.name, err)
	}
	t.Cleanup(func() { d.client.Close() })
	if proto == "tcp" {
		conn, err := s.ln.Accept() // the only connection in the backlog
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		d.toClient = func(b []byte) error { _, err := conn.Write(b); return err }
		d.fromClient = func(timeout time.Duration) bool {
			conn.SetReadDeadline(time.Now().Add(timeout))
			n, _ := conn.Read(make([]byte, 4096))
			return n > 0
		}
		return d
	}
	client := addrPortOf(d.client.LocalAddr())
	inbox := s.udpInbox(client)
	udpAddr := net.UDPAddrFromAddrPort(client)
	d.toClient = func(b []byte) error { _, err := s.pc.WriteTo(b, udpAddr); return err }
	d.fromClient = func(timeout time.Duration) bool {
		select {
		case <-inbox:
			return true
		case <-time.After(timeout):
			return false
		}
	}
	if _, err := d.client.Write([]byte("hello")); err != nil || !d.fromClient(passTimeout) {
		t.Fatalf("%s: the server never heard the client's hello (%v)", d.name, err)
	}
	return d
}

// serverFirst is one round in which the server talks first: it sends, the
// client waits for that, then the client sends and the server waits. It
// reports what got through each way. The client answers whether or not
// it heard the server: a client that just sends is the other way back.
func (d *duplex) serverFirst(timeout time.Duration) (toClient, toServer bool) {
	d.n++
	token := []byte(fmt.Sprintf("push-%06d", d.n))
	if d.toClient(token) == nil {
		d.client.SetReadDeadline(time.Now().Add(timeout))
		n, _ := d.client.Read(make([]byte, 4096))
		toClient = n > 0
	}
	if _, err := d.client.Write([]byte(fmt.Sprintf("more-%06d", d.n))); err == nil {
		toServer = d.fromClient(timeout)
	}
	return toClient, toServer
}

// mustTalk fails the test unless a server-first round gets through both
// ways within the timeout, given once more: packets can be lost, but they
// cannot be invented.
func (d *duplex) mustTalk(t *testing.T, when string, timeout time.Duration) {
	t.Helper()
	for range 2 {
		if c, s := d.serverFirst(timeout); c && s {
			return
		}
	}
	t.Errorf("%s: %s does not get through both ways, want it to", when, d.name)
}

// mustStayDead fails the test if anything of any of the duplexes gets
// through, either way, over two server-first rounds each, run at once.
func mustStayDead(t *testing.T, ds []*duplex, when string) {
	t.Helper()
	var wg sync.WaitGroup
	leaks := make([]string, len(ds))
	for i, d := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 1; round <= 2; round++ {
				c, s := d.serverFirst(blockTimeout)
				if c || s {
					leaks[i] = fmt.Sprintf("round %d: server -> client %v, client -> server %v", round, c, s)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i, d := range ds {
		if leaks[i] != "" {
			t.Errorf("%s: %s gets through (%s), want it blocked both ways", when, d.name, leaks[i])
		}
	}
}

// TestKernelRevokedFlowsStayRevokedWhenTheServerSendsFirst is the gap that
// deleting entries left: once the policy no longer admits x/a into x/b,
// x/b's next packet to x/a is the first the node sees of the connection.
// With the entry deleted, conntrack made a new one from it, x/b → x/a,
// which the policy allows, and x/a's packets were replies (with the
// cleanup deleting instead of marking, this test fails so). With the entry marked revoked and
// the table dropping marked connections, every packet of the connection
// drops, whichever end sends, for TCP over IPv4 and IPv6 and for UDP,
// while y/a's connections to the same servers go on untouched through
// the same change. When the policy admits x/a again, the marks are
// cleared: the revoked connections, which their ends kept open, carry on,
// as would any connection the policy allows, and a new one is made.
func TestKernelRevokedFlowsStayRevokedWhenTheServerSendsFirst(t *testing.T) {
	d := newDataPlane(t)
	opts := enforcer.Options{Node: "node-1", Revoke: true}
	wide := compileWith(t, opts, d.c.Manifests(), pushPolicy("x", "y"))
	tight := compileWith(t, opts, d.c.Manifests(), pushPolicy("y"))
	bit := enforcer.RevokedBit(enforcer.DefaultMarkMask)
	if got := conntrack.RevokedBit(tight); got != bit {
		t.Fatalf("the compiled table drops revoked connections by bit 0x%x, want 0x%x:\n%s", got, bit, nft.Render(tight))
	}
	d.apply(t, wide)
	srv := startPushServers(t, d.pods["x/b"].NetnsPath())
	xb4, xb6 := d.addr("x/b", netns.IPv4), d.addr("x/b", netns.IPv6)
	xa, ya := d.pods["x/a"], d.pods["y/a"]
	revoked := []*duplex{srv.dial(t, xa, "tcp", xb4), srv.dial(t, xa, "udp", xb4), srv.dial(t, xa, "tcp", xb6)}
	kept := []*duplex{srv.dial(t, ya, "tcp", xb4), srv.dial(t, ya, "udp", xb6)}
	// Another component keeps bits of its own in the conntrack mark: they
	// are set on every entry once (the rule is gone before the change, so
	// that only the cleanup could change them), and must stay as they are.
	const foreign = 0x00050000
	if out, err := d.node.ExecInput([]byte(fmt.Sprintf(
		"table inet other { chain pre { type filter hook prerouting priority 0; ct mark set ct mark or 0x%08x; }; }", foreign)), "nft", "-f", "-"); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
	for _, f := range append(append([]*duplex{}, revoked...), kept...) {
		f.mustTalk(t, "under the wide policy", passTimeout)
	}
	if out, err := d.node.Exec("nft", "delete", "table", "inet", "other"); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
	keptIDs := ctEntries(t, d.node.NetnsPath())

	cleaner, err := conntrack.Open(d.node.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	defer cleaner.Close()
	d.apply(t, tight)
	st, err := cleaner.Narrowed(wide, tight)
	if err != nil {
		t.Fatalf("Narrowed: %v", err)
	}
	t.Logf("tightened: %+v", st)
	if st.Revoked != len(revoked) || st.Deleted != 0 {
		t.Errorf("revoked %d and deleted %d entries, want %d revoked, none deleted", st.Revoked, st.Deleted, len(revoked))
	}

	mustStayDead(t, revoked, "after the tightening, the server sending first")
	for _, f := range kept {
		f.mustTalk(t, "after the tightening", passTimeout)
	}
	// Each revoked connection has kept its one entry, client → server and
	// marked; none was made the other way round. The kept ones have the
	// entries they had.
	entries := dumpCT(t, d.node.NetnsPath())
	for _, f := range revoked {
		client, server := addrPortOf(f.client.LocalAddr()), addrPortOf(f.client.RemoteAddr())
		var found bool
		for _, e := range entries {
			o := e.TupleOrig
			src, dst := netip.AddrPortFrom(o.IP.SourceAddress.Unmap(), o.Proto.SourcePort), netip.AddrPortFrom(o.IP.DestinationAddress.Unmap(), o.Proto.DestinationPort)
			switch {
			case src == client && dst == server:
				found = true
				if e.Mark != foreign|bit {
					t.Errorf("%s: entry mark 0x%08x, want 0x%08x: the revoked bit and the other component's bits", f.name, e.Mark, foreign|bit)
				}
			case src == server && dst == client:
				t.Errorf("%s: an entry the other way round, %s -> %s: the server's packet started a connection", f.name, src, dst)
			}
		}
		if !found {
			t.Errorf("%s: its entry is gone", f.name)
		}
	}
	after := ctEntries(t, d.node.NetnsPath())
	for _, f := range kept {
		if k := keyOfConn(f.client); after[k] != keptIDs[k] || after[k] == 0 {
			t.Errorf("%s: entry %s was id %d, now %d", f.name, k, keptIDs[k], after[k])
		}
	}
	// The policy denies x/a → x/b for new connections as well.
	var fresh net.Conn
	if err := netns.Do(xa.NetnsPath(), func() (err error) {
		fresh, err = (&net.Dialer{Timeout: blockTimeout}).Dial("tcp", netip.AddrPortFrom(xb4, pushPort).String())
		return err
	}); err == nil {
		fresh.Close()
		t.Error("a new connection x/a -> x/b is made under the tight policy")
	}

	// The policy admits x/a again: its connections are given back. TCP
	// retransmits what was dropped with an exponential backoff, so the
	// first round after may wait for the next retransmission.
	d.apply(t, wide)
	st, err = cleaner.Narrowed(tight, wide)
	if err != nil {
		t.Fatalf("Narrowed: %v", err)
	}
	t.Logf("widened: %+v", st)
	if st.Restored != len(revoked) || st.Marked != len(revoked) {
		t.Errorf("restored %d of %d marked entries, want %d", st.Restored, st.Marked, len(revoked))
	}
	for _, f := range revoked {
		f.mustTalk(t, "after the widening", 30*time.Second)
	}
	for _, f := range kept {
		f.mustTalk(t, "after the widening", passTimeout)
	}
	srv.dial(t, xa, "tcp", xb4).mustTalk(t, "a new connection after the widening", passTimeout)
	marks := map[string]uint32{}
	for _, e := range dumpCT(t, d.node.NetnsPath()) {
		o := e.TupleOrig
		marks[ctKey(o.IP.SourceAddress, o.IP.DestinationAddress, o.Proto.Protocol, o.Proto.DestinationPort)+fmt.Sprint(" ", o.Proto.SourcePort)] = e.Mark
		if e.Mark&bit != 0 {
			t.Errorf("entry %s is still marked revoked after the widening (0x%08x)", o, e.Mark)
		}
	}
	for _, f := range revoked {
		k := keyOfConn(f.client) + fmt.Sprint(" ", addrPortOf(f.client.LocalAddr()).Port())
		if m, ok := marks[k]; !ok || m != foreign {
			t.Errorf("%s: entry mark 0x%08x (present %v) after the widening, want the other component's 0x%08x alone", f.name, m, ok, foreign)
		}
	}
}

// keyOfConn is the conntrack key of a client socket as ctEntries keys it.
func keyOfConn(c net.Conn) string {
	l, r := addrPortOf(c.LocalAddr()), addrPortOf(c.RemoteAddr())
	proto := uint8(unix.IPPROTO_TCP)
	if c.LocalAddr().Network() == "udp" {
		proto = unix.IPPROTO_UDP
	}
	return ctKey(l.Addr(), r.Addr(), proto, r.Port())
}
