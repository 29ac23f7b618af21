package netns

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fourPods builds two connected nodes with pods x/a, y/a on node1 and x/b, y/b
// on node2, and returns the pods in that order.
func fourPods(t *testing.T, opts Options, via Via) (*Cluster, []*Pod) {
	t.Helper()
	c := NewTestCluster(t, opts)
	n1, err := c.AddNode("node1")
	if err != nil {
		t.Fatal(err)
	}
	n2, err := c.AddNode("node2")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ConnectNodes(n1, n2, via); err != nil {
		t.Fatal(err)
	}
	var pods []*Pod
	for _, spec := range []struct {
		node     *Node
		ns, name string
	}{{n1, "x", "a"}, {n1, "y", "a"}, {n2, "x", "b"}, {n2, "y", "b"}} {
		p, err := c.AddPod(spec.node, spec.ns, spec.name)
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	return c, pods
}

// TestKernelDataPlane builds 2 nodes × 2 pods for every wiring and node link,
// checks full reachability without a ruleset, then that nft forward drops
// show up in the matrix, and that raw SCTP probes see the same.
func TestKernelDataPlane(t *testing.T) {
	for _, tc := range []struct {
		wiring Wiring
		via    Via
		exec   bool // probes through `nettool probe` processes
	}{
		{Routed, Link, false},
		{Bridged, Link, false},
		{Routed, VXLAN, false},
		{Bridged, VXLAN, true},
	} {
		name := tc.wiring.String() + "-" + tc.via.String()
		if tc.exec {
			name += "-exec"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			c, pods := fourPods(t, Options{Name: "nptest", Wiring: tc.wiring, ExecProbes: tc.exec}, tc.via)
			t.Logf("cluster %s built in %v", c.ID(), time.Since(start).Round(time.Millisecond))
			node1 := pods[0].Node()
			keys := Keys(pods)
			all := NewMatrix(keys, true)

			// No ruleset: everything reaches everything.
			for _, family := range []string{IPv4, IPv6} {
				for _, proto := range []string{TCP, UDP} {
					for _, port := range []int{80, 81} {
						checkMatrix(t, c.ProbeMatrix(pods, family, proto, port), all)
					}
				}
			}
			// Nodes reach their own pods and, through the node link, the others.
			for _, n := range c.Nodes() {
				for _, p := range pods {
					for _, a := range p.IPs() {
						if !c.ProbeFromNode(n, a, TCP, 80, time.Second) {
							t.Errorf("node %s -> pod %s (%s) tcp/80 failed", n.Name(), p.Key(), a)
						}
					}
				}
			}

			// Forward drops on node1: x/a unreachable on tcp/80 over IPv4 (from
			// the other pod of node1 too: through br_netfilter when bridged), y/a
			// unable to send udp/81 over IPv6, and SCTP to port 81 dropped. The
			// counter sees the SCTP INITs to port 80 that conntrack takes as new.
			xa, ya, xb := pods[0], pods[1], pods[2]
			ruleset := fmt.Sprintf(`table inet test {
	chain forward {
		type filter hook forward priority 0; policy accept;
		sctp dport 80 ct state new counter comment "sctp-new"
		ip daddr %s tcp dport 80 drop
		ip6 saddr %s udp dport 81 drop
		sctp dport 81 drop
	}
}
`, xa.IPv4(), ya.IPv6())
			if out, err := node1.ExecInput([]byte(ruleset), "nft", "-f", "-"); err != nil {
				t.Fatalf("install ruleset: %v\n%s", err, out)
			}

			// Blocked probes wait for their timeout, twice: run the checks
			// concurrently.
			parallel(
				func() {
					got := c.ProbeMatrix(pods, IPv4, TCP, 80)
					checkMatrix(t, got, NewMatrix(keys, true).Expect("*", "x/a", false).Expect("x/a", "x/a", true))
					diff := got.Diff(all)
					for _, line := range []string{
						"reachability tcp/80 ipv4: 3 of 16 cells differ",
						"y/a -> x/a: expected allowed, observed blocked",
						"x/b -> x/a: expected allowed, observed blocked",
						"y/b -> x/a: expected allowed, observed blocked",
					} {
						if !strings.Contains(diff, line) {
							t.Errorf("Diff against full reachability lacks %q:\n%s", line, diff)
						}
					}
					// Every blocked cell is retried once; a cell that passed on
					// retry (a flake, logged by checkMatrix) counts too.
					if got.Retries-got.Recovered != 3 {
						t.Errorf("Retries, Recovered = %d, %d; want 3 unrecovered retries, one per blocked cell", got.Retries, got.Recovered)
					}
				},
				func() {
					want := NewMatrix(keys, true).Expect("y/a", "*", false).Expect("y/a", "y/a", true)
					checkMatrix(t, c.ProbeMatrix(pods, IPv6, UDP, 81), want)
				},
				// The other family, protocol and port are untouched.
				func() { checkMatrix(t, c.ProbeMatrix(pods, IPv6, TCP, 80), all) },
				func() {
					// A probe that gets through where the expectation blocks
					// it is a leak: listed, never retried, and a Diff.
					blocked := NewMatrix(keys, true).Expect("*", "y/b", false).Expect("y/b", "y/b", true)
					got := c.ProbeMatrixExpect(pods, IPv4, UDP, 81, blocked)
					if len(got.Leaks) != 3 || got.Retries != 0 || !strings.Contains(got.Diff(blocked), "expected blocked, observed allowed: a leak") {
						t.Errorf("3 cells open where blocked was expected: leaks %q, %d retries, diff:\n%s", got.Leaks, got.Retries, got.Diff(blocked))
					}
				},
				func() { checkMatrix(t, c.ProbeMatrix(pods, IPv4, UDP, 81), all) },
				func() {
					// Node-to-pod traffic is output, not forward.
					if !c.ProbeFromNode(node1, xa.IPv4(), TCP, 80, time.Second) {
						t.Errorf("node1 -> x/a tcp/80 blocked by a forward rule")
					}
				},
				func() {
					// SCTP through node1's forward hook, both ways, both families.
					for _, pair := range [][2]*Pod{{xb, xa}, {xa, xb}} {
						for _, family := range []string{IPv4, IPv6} {
							if !c.ProbeSCTP(pair[0], pair[1].Addr(family), 80) {
								t.Errorf("sctp/80 %s %s -> %s not seen", family, pair[0].Key(), pair[1].Key())
							}
						}
					}
				},
				func() {
					if c.ProbeSCTP(xb, xa.IPv4(), 81) {
						t.Errorf("sctp/81 x/b -> x/a arrived through an sctp drop")
					}
				},
				func() {
					// Only pairs that stay off node1 get through.
					want := NewMatrix(keys, false).Expect("*/b", "*/b", true).
						Expect("x/a", "x/a", true).Expect("y/a", "y/a", true)
					checkMatrix(t, c.ProbeMatrix(pods, IPv6, SCTP, 81), want)
				},
			)
			// Conntrack took the INITs as new connections: their CRC32c is right
			// (a bad checksum makes nf_conntrack_proto_sctp call them invalid).
			if n := counter(t, node1, "sctp-new"); n != 4 {
				t.Errorf("ct state new sctp/80 packets on node1 = %d, want 4", n)
			}
		})
	}
}

// parallel runs fns concurrently and waits for all.
func parallel(fns ...func()) {
	var wg sync.WaitGroup
	for _, f := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	wg.Wait()
}

func checkMatrix(t *testing.T, got, want *Matrix) {
	t.Helper()
	if d := got.Diff(want); d != "" {
		t.Errorf("%s", d)
	}
	for _, e := range got.Errors {
		t.Errorf("probe error: %s", e)
	}
	t.Logf("%s/%d %s: %v, %d retries", got.Proto, got.Port, got.Family, got.Elapsed.Round(time.Millisecond), got.Retries)
	for _, f := range got.Flakes {
		t.Logf("%s %s/%d passed on retry: %s", got.Family, got.Proto, got.Port, f)
	}
}

var counterRE = regexp.MustCompile(`counter packets (\d+) bytes \d+ comment "([^"]*)"`)

// counter returns the packets of the rule with comment in table inet test.
func counter(t *testing.T, n *Node, comment string) int {
	t.Helper()
	out, err := n.Exec("nft", "list", "table", "inet", "test")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range counterRE.FindAllStringSubmatch(string(out), -1) {
		if m[2] == comment {
			v, _ := strconv.Atoi(m[1])
			return v
		}
	}
	t.Fatalf("no counter %q in\n%s", comment, out)
	return 0
}

// TestKernelSingleFamilyAndClose builds an IPv6-only bridged node with two
// pods and no peers, then checks that Close leaves nothing behind.
func TestKernelSingleFamilyAndClose(t *testing.T) {
	t.Parallel()
	RequireRoot(t)
	c, err := NewCluster(Options{Name: "nptest", Wiring: Bridged, IPv6: true, TCPPorts: []int{8080}, UDPPorts: []int{}})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			c.Close()
		}
	})
	n, err := c.AddNode("solo")
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.AddPod(n, "x", "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.AddPod(n, "x", "b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddPod(n, "x", "a"); err == nil {
		t.Error("AddPod accepted a duplicate pod")
	}
	if a.IPv4().IsValid() || a.IPv6() != netip.MustParseAddr("fd00:10:244:1::2") || b.IPv6() != netip.MustParseAddr("fd00:10:244:1::3") {
		t.Errorf("addresses %v, %v; want only fd00:10:244:1::2 and ::3", a.IPs(), b.IPs())
	}
	if got := c.PodByIP(b.IPv6()); got != b {
		t.Errorf("PodByIP(%s) = %v", b.IPv6(), got)
	}
	pods := []*Pod{a, b}
	checkMatrix(t, c.ProbeMatrix(pods, IPv6, TCP, 8080), NewMatrix(Keys(pods), true))
	if c.Probe(a, b.IPv6(), UDP, 8080, 300*time.Millisecond) {
		t.Error("udp/8080 answered although no UDP port is served")
	}
	if !c.ProbeFromNode(n, a.IPv6(), TCP, 8080, time.Second) {
		t.Error("node -> own pod tcp/8080 failed")
	}
	if out, err := n.Exec("sysctl", "-n", "net.bridge.bridge-nf-call-ip6tables"); err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Errorf("bridge-nf-call-ip6tables = %q, %v; want 1", out, err)
	}

	servers := c.servers
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	for _, s := range servers {
		if !s.proc.Exited() {
			t.Errorf("server %d still running after Close", s.proc.Cmd.Process.Pid)
		}
	}
	left, err := filepath.Glob("/run/netns/" + c.ID() + "-*")
	if err != nil || len(left) > 0 {
		t.Errorf("network namespaces left after Close: %v %v", left, err)
	}
	if _, err := c.AddNode("late"); err == nil {
		t.Error("AddNode after Close succeeded")
	}
}
