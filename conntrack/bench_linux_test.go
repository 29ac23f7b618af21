package conntrack_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	ctnl "github.com/ti-mo/conntrack"
	"golang.org/x/sys/unix"

	"github.com/nftpolicy/nftpolicy/conntrack"
	"github.com/nftpolicy/nftpolicy/enforcer"
	"github.com/nftpolicy/nftpolicy/internal/netns"
	"github.com/nftpolicy/nftpolicy/internal/testns"
	"github.com/nftpolicy/nftpolicy/nft"
)

// benchEntries is the size of the conntrack table the cleanup is measured
// against.
const benchEntries = 10_000

// benchCluster is node-1 with 100 pods of namespace x (10.1.0.1-100) and
// node-2 with 100 pods of namespace y (10.2.0.1-100); x's pods serve TCP
// 8080. Every x pod is isolated for ingress by the policy given.
func benchCluster(policy string) string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Node\nmetadata: {name: node-1}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: node-2}\n")
	for _, ns := range []string{"x", "y", "z"} {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: %q, labels: {ns: %q}}\n", ns, ns)
	}
	for i, ns := range []string{"x", "y"} {
		for p := 1; p <= 100; p++ {
			fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Pod\nmetadata: {namespace: %q, name: p%d, labels: {pod: p}}\n"+
				"spec: {nodeName: node-%d, containers: [{name: c}]}\n"+
				"status: {phase: Running, podIPs: [{ip: \"10.%d.0.%d\"}]}\n", ns, p, i+1, i+1, p)
		}
	}
	return b.String() + "---\n" + fmt.Sprintf(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: x, name: web}
spec:
  podSelector: {}
  policyTypes: [Ingress]
  ingress:
    - from: [{namespaceSelector: {matchLabels: {ns: %q}}}]
      ports: [{protocol: TCP, port: 8080}]
`, policy)
}

// fillConntrack creates n established TCP entries in the namespace, from
// the n/100 addresses 10.<src>.0.1… to the 100 addresses 10.<dst>.0.1…,
// port 8080, each (source, destination) pair once.
func fillConntrack(b *testing.B, conn *ctnl.Conn, n, src, dst int) {
	b.Helper()
	for i := range n {
		s := netip.AddrFrom4([4]byte{10, byte(src), byte(i / 100 / 200), byte(1 + i/100%200)})
		d := netip.AddrFrom4([4]byte{10, byte(dst), 0, byte(1 + i%100)})
		f := ctnl.NewFlow(unix.IPPROTO_TCP, ctnl.StatusConfirmed|ctnl.StatusSeenReply|ctnl.StatusAssured, s, d, 40000, 8080, 3600, 0)
		f.ProtoInfo.TCP = &ctnl.ProtoInfoTCP{State: 3} // ESTABLISHED
		if err := conn.Create(f); err != nil && !isExist(err) {
			b.Fatalf("create entry %d: %v", i, err)
		}
	}
}

func isExist(err error) bool { return errors.Is(err, unix.EEXIST) }

// BenchmarkKernelNarrowed10k measures Cleaner.Narrowed against 10k
// conntrack entries in a namespace holding the compiled table:
//
//   - untouched: no entry touches an isolated pod, so the prefilter skips
//     all of them: the cost is the dump (the baseline);
//   - kept: every entry goes to an isolated pod and is traced through
//     both tables, and both accept it (a change elsewhere);
//   - narrowed: every entry goes to an isolated pod that no longer admits
//     it: traced and deleted (the entries are made again, untimed).
//
// Each reports dump, trace and delete milliseconds per call, and the
// total's ratio to untouched's, measured in the same run.
func BenchmarkKernelNarrowed10k(b *testing.B) {
	ns := testns.New(b, "ctbench")
	path := "/run/netns/" + ns
	old := compile(b, "node-1", benchCluster("y"))
	same := compile(b, "node-1", benchCluster("y")) // the same content, another table
	tight := compile(b, "node-1", benchCluster("z"))
	nc, err := nft.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Apply(old); err != nil {
		b.Fatal(err)
	}
	conn := dialCT(b, path)
	defer conn.Close()
	cleaner, err := conntrack.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer cleaner.Close()

	var baseline time.Duration
	for _, bc := range []struct {
		name     string
		src, dst int // second octets of the entries' addresses
		new      *nft.Table
		refill   bool
	}{
		{"untouched", 3, 4, same, false},
		{"kept", 2, 1, same, false},
		{"narrowed", 2, 1, tight, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if err := conn.Flush(); err != nil {
				b.Fatal(err)
			}
			fillConntrack(b, conn, benchEntries, bc.src, bc.dst)
			var sum conntrack.Stats
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if bc.refill && i > 0 {
					b.StopTimer()
					fillConntrack(b, conn, benchEntries, bc.src, bc.dst)
					b.StartTimer()
				}
				st, err := cleaner.Narrowed(old, bc.new)
				if err != nil {
					b.Fatal(err)
				}
				if st.Dumped < benchEntries {
					b.Fatalf("dumped %d entries, want at least %d", st.Dumped, benchEntries)
				}
				sum.Dump += st.Dump
				sum.Trace += st.Trace
				sum.Delete += st.Delete
				sum.Total += st.Total
				sum.Candidates, sum.Deleted = st.Candidates, st.Deleted
			}
			b.StopTimer()
			per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
			b.ReportMetric(per(sum.Dump), "dump-ms")
			b.ReportMetric(per(sum.Trace), "trace-ms")
			b.ReportMetric(per(sum.Delete), "delete-ms")
			b.ReportMetric(float64(sum.Candidates), "traced")
			b.ReportMetric(float64(sum.Deleted), "deleted")
			if bc.name == "untouched" {
				baseline = sum.Total / time.Duration(b.N)
			} else if baseline > 0 {
				b.ReportMetric(float64(sum.Total/time.Duration(b.N))/float64(baseline), "x-untouched")
			}
		})
	}
}

// BenchmarkKernelTightenToFirstDrop measures, on the data plane, the time
// from the start of the write of a tightened table to the first packet of
// an established flow that the node drops, the flow probed without pause:
// a UDP datagram from x/a to x/b's echo server every interval. The write
// is nft Apply followed by Cleaner.Narrowed. Reported: apply-ms,
// cleanup-ms, and to-drop-ms, the send time of the first datagram that
// never came back (all later ones never did either) after the start of
// the write, over the iterations where the flow stopped; to-drop/apply,
// the ratio to what a new connection waits; and resurrected, the fraction
// of iterations where the flow did not stop: an echo in flight when the
// entry was deleted was picked up by conntrack as a new flow x/b → x/a,
// which the table allows, and the client's datagrams became its replies
// (see the package documentation, # Revoking). Each is measured with the
// cleanup deleting entries (tables without a revoke rule) and marking
// them revoked (tables compiled with enforcer.Options.Revoke).
func BenchmarkKernelTightenToFirstDrop(b *testing.B) {
	c := netns.NewTestCluster(b, netns.Options{Name: "ctbench", IPv4: true, TCPPorts: []int{}, UDPPorts: []int{udpPort}})
	node, err := c.AddNode("node-1")
	if err != nil {
		b.Fatal(err)
	}
	pods := map[string]*netns.Pod{}
	for _, key := range []string{"x/a", "x/b", "y/a"} {
		nsName, name, _ := strings.Cut(key, "/")
		if pods[key], err = c.AddPod(node, nsName, name); err != nil {
			b.Fatal(err)
		}
	}
	nc, err := nft.Open(node.NetnsPath())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	cleaner, err := conntrack.Open(node.NetnsPath())
	if err != nil {
		b.Fatal(err)
	}
	defer cleaner.Close()
	to := netip.AddrPortFrom(pods["x/b"].IPv4(), udpPort)

	for _, mode := range []string{"delete", "revoke"} {
		// delete: tables without a revoke rule, the cleanup deletes entries;
		// revoke: with enforcer.Options.Revoke, as the daemon compiles them.
		opts := enforcer.Options{Node: "node-1", Revoke: mode == "revoke"}
		old := compileWith(b, opts, c.Manifests(), fromXAndY)
		tight := compileWith(b, opts, c.Manifests(), fromY)
		for _, interval := range []time.Duration{200 * time.Microsecond, 10 * time.Millisecond} {
			b.Run(mode+"/every-"+interval.String(), func(b *testing.B) {
				var apply, clean, toDrop time.Duration
				var stopped, lost int
				for i := 0; i < b.N; i++ {
					if _, err := nc.Apply(old); err != nil {
						b.Fatal(err)
					}
					var conn net.Conn
					if err := netns.Do(pods["x/a"].NetnsPath(), func() (err error) {
						conn, err = net.Dial("udp", to.String())
						return err
					}); err != nil {
						b.Fatal(err)
					}
					p := startProbe(conn, interval)
					time.Sleep(100 * time.Millisecond) // the flow is established and echoing
					start := time.Now()
					if _, err := nc.Apply(tight); err != nil {
						b.Fatal(err)
					}
					applied := time.Now()
					if _, err := cleaner.Narrowed(old, tight); err != nil {
						b.Fatal(err)
					}
					cleaned := time.Now()
					time.Sleep(300 * time.Millisecond)
					sent, echoed := p.stop()
					conn.Close()
					apply += applied.Sub(start)
					clean += cleaned.Sub(applied)
					if first, l := firstDrop(sent, echoed, start); !first.IsZero() {
						stopped++
						toDrop += first.Sub(start)
						lost += l
					}
				}
				ms := func(d time.Duration, n int) float64 { return float64(d.Microseconds()) / 1000 / float64(max(n, 1)) }
				b.ReportMetric(ms(apply, b.N), "apply-ms")
				b.ReportMetric(ms(clean, b.N), "cleanup-ms")
				b.ReportMetric(ms(toDrop, stopped), "to-drop-ms")
				b.ReportMetric(ms(toDrop, stopped)/ms(apply, b.N), "to-drop/apply")
				b.ReportMetric(float64(b.N-stopped)/float64(b.N), "resurrected")
				b.ReportMetric(float64(lost)/float64(max(stopped, 1)), "lost-before-drop")
			})
		}
	}
}

type probe struct {
	conn   net.Conn
	stopc  chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	sent   []time.Time // by sequence number
	echoed map[uint32]bool
}

// startProbe sends a sequence number every interval and records which came
// back.
func startProbe(conn net.Conn, interval time.Duration) *probe {
	p := &probe{conn: conn, stopc: make(chan struct{}), echoed: map[uint32]bool{}}
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for seq := uint32(0); ; seq++ {
			select {
			case <-p.stopc:
				return
			case <-t.C:
			}
			p.mu.Lock()
			p.sent = append(p.sent, time.Now())
			p.mu.Unlock()
			conn.Write([]byte{byte(seq >> 24), byte(seq >> 16), byte(seq >> 8), byte(seq)})
		}
	}()
	go func() {
		defer p.wg.Done()
		buf := make([]byte, 16)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			if n == 4 {
				p.mu.Lock()
				p.echoed[uint32(buf[0])<<24|uint32(buf[1])<<16|uint32(buf[2])<<8|uint32(buf[3])] = true
				p.mu.Unlock()
			}
		}
	}()
	return p
}

func (p *probe) stop() ([]time.Time, map[uint32]bool) {
	close(p.stopc)
	time.Sleep(50 * time.Millisecond) // the last echoes arrive
	p.conn.SetReadDeadline(time.Now())
	p.wg.Wait()
	return p.sent, p.echoed
}

// firstDrop returns the send time of the first datagram after the last
// one that came back, and how many datagrams sent after start and before
// it did not come back (lost, not dropped by policy: 0 on a quiet machine).
// The zero time means the flow was never dropped after start.
func firstDrop(sent []time.Time, echoed map[uint32]bool, start time.Time) (time.Time, int) {
	last := -1
	for i := range sent {
		if echoed[uint32(i)] {
			last = i
		}
	}
	if last+1 >= len(sent) || sent[last+1].Before(start) {
		return time.Time{}, 0
	}
	lost := 0
	for i := 0; i < last; i++ {
		if sent[i].After(start) && !echoed[uint32(i)] {
			lost++
		}
	}
	return sent[last+1], lost
}

// BenchmarkKernelRecheck10k measures Cleaner.Recheck, the daemon's
// judgement of every flow at each drift check, against 10k conntrack
// entries in a namespace holding a table compiled with the revoke rule:
//
//   - untouched: no entry touches an isolated pod: the dump alone;
//   - traced: every entry goes to an isolated pod that admits it: dumped
//     and traced, nothing written (the common worst case);
//   - revived: every entry goes to an isolated pod that does not admit it
//     and carries no mark: traced and marked again (the entries are made
//     again, untimed).
func BenchmarkKernelRecheck10k(b *testing.B) {
	ns := testns.New(b, "ctbench")
	path := "/run/netns/" + ns
	opts := enforcer.Options{Node: "node-1", Revoke: true}
	admitY := compileWith(b, opts, benchCluster("y"))
	admitZ := compileWith(b, opts, benchCluster("z"))
	nc, err := nft.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	conn := dialCT(b, path)
	defer conn.Close()
	cleaner, err := conntrack.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer cleaner.Close()
	for _, bc := range []struct {
		name     string
		src, dst int
		table    *nft.Table
		refill   bool
	}{
		{"untouched", 3, 4, admitY, false},
		{"traced", 2, 1, admitY, false},
		{"revived", 2, 1, admitZ, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if _, err := nc.Apply(bc.table); err != nil {
				b.Fatal(err)
			}
			if err := conn.Flush(); err != nil {
				b.Fatal(err)
			}
			fillConntrack(b, conn, benchEntries, bc.src, bc.dst)
			var sum conntrack.Stats
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if bc.refill && i > 0 {
					b.StopTimer()
					if err := conn.Flush(); err != nil {
						b.Fatal(err)
					}
					fillConntrack(b, conn, benchEntries, bc.src, bc.dst)
					b.StartTimer()
				}
				st, err := cleaner.Recheck(bc.table)
				if err != nil {
					b.Fatal(err)
				}
				if st.Dumped < benchEntries {
					b.Fatalf("dumped %d entries, want at least %d", st.Dumped, benchEntries)
				}
				sum.Dump += st.Dump
				sum.Trace += st.Trace
				sum.Delete += st.Delete
				sum.Total += st.Total
				sum.Candidates, sum.Revived = st.Candidates, st.Revived
			}
			b.StopTimer()
			per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
			b.ReportMetric(per(sum.Dump), "dump-ms")
			b.ReportMetric(per(sum.Trace), "trace-ms")
			b.ReportMetric(per(sum.Delete), "mark-ms")
			b.ReportMetric(per(sum.Total), "total-ms")
			b.ReportMetric(float64(sum.Candidates), "traced")
			b.ReportMetric(float64(sum.Revived), "revived")
		})
	}
}
