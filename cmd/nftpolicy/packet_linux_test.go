package main

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nftpolicy/nftpolicy/internal/netns"
)

// The packet tests of the core: real sockets between pod namespaces, routed
// through a node namespace that nftpolicy programs with `apply`. The full
// upstream matrix lives in the data-plane suite; these check the three
// semantics the design keeps.

const probeTimeout = 700 * time.Millisecond

// packetCluster is one routed node with pods x/a, x/b and y/a, and a
// manifests directory holding them.
func packetCluster(t *testing.T) (c *netns.Cluster, node *netns.Node, dir string) {
	t.Helper()
	c = netns.NewTestCluster(t, netns.Options{Name: "nptest", Timeout: probeTimeout})
	node, err := c.AddNode("node-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"x/a", "x/b", "y/a"} {
		ns, name, _ := strings.Cut(key, "/")
		if _, err := c.AddPod(node, ns, name); err != nil {
			t.Fatal(err)
		}
	}
	dir = t.TempDir()
	writeFile(t, filepath.Join(dir, "cluster.yaml"), c.Manifests())
	return c, node, dir
}

func applyTo(t *testing.T, node *netns.Node, dir string, extra ...string) {
	t.Helper()
	args := append([]string{"apply", "--manifests", dir, "--node", "node-1", "--netns", node.NetnsName()}, extra...)
	if code, _, stderr := nftpolicy(t, args...); code != 0 {
		t.Fatalf("apply exited %d: %s", code, stderr)
	}
}

const (
	denyIngressX = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: x, name: deny-ingress}
spec:
  podSelector: {}
  policyTypes: [Ingress]
`
	allowYToXA80 = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: x, name: allow-y-80}
spec:
  podSelector: {matchLabels: {pod: a}}
  ingress:
    - from: [{namespaceSelector: {matchLabels: {ns: "y"}}}]
      ports: [{protocol: TCP, port: 80}]
`
)

type packetProbe struct {
	from, to string
	family   string
	proto    string
	port     int
	want     bool
}

func checkProbes(t *testing.T, c *netns.Cluster, probes []packetProbe) {
	t.Helper()
	for _, p := range probes {
		to := c.Pod(p.to).Addr(p.family)
		if got := c.Probe(c.Pod(p.from), to, p.proto, p.port, probeTimeout); got != p.want {
			t.Errorf("%s %s→%s %s/%d: connected=%v, want %v", p.family, p.from, p.to, p.proto, p.port, got, p.want)
		}
	}
}

func TestIntegrationPacketsDefaultDenyThenAllow(t *testing.T) {
	c, node, dir := packetCluster(t)
	checkProbes(t, c, []packetProbe{
		{"y/a", "x/a", netns.IPv4, netns.TCP, 80, true},
	})

	writeFile(t, filepath.Join(dir, "deny.yaml"), denyIngressX)
	applyTo(t, node, dir)
	checkProbes(t, c, []packetProbe{
		{"y/a", "x/a", netns.IPv4, netns.TCP, 80, false},
		{"y/a", "x/a", netns.IPv6, netns.TCP, 80, false},
		{"y/a", "x/a", netns.IPv4, netns.UDP, 80, false},
		{"x/b", "x/a", netns.IPv4, netns.TCP, 80, false},
		{"x/a", "y/a", netns.IPv4, netns.TCP, 80, true},
	})

	writeFile(t, filepath.Join(dir, "allow.yaml"), allowYToXA80)
	applyTo(t, node, dir)
	checkProbes(t, c, []packetProbe{
		{"y/a", "x/a", netns.IPv4, netns.TCP, 80, true},
		{"y/a", "x/a", netns.IPv6, netns.TCP, 80, true},
		{"y/a", "x/a", netns.IPv4, netns.TCP, 81, false},
		{"y/a", "x/a", netns.IPv4, netns.UDP, 80, false},
		{"x/b", "x/a", netns.IPv4, netns.TCP, 80, false},
		{"y/a", "x/b", netns.IPv4, netns.TCP, 80, false},
	})
}

// With x/a isolated for ingress and y/a not isolated at all, x/a → y/a must
// work end to end: the replies from y/a to x/a are established traffic and
// never meet x/a's ingress policy.
func TestIntegrationPacketsRepliesPass(t *testing.T) {
	c, node, dir := packetCluster(t)
	writeFile(t, filepath.Join(dir, "deny.yaml"), denyIngressX)
	applyTo(t, node, dir)
	checkProbes(t, c, []packetProbe{
		{"x/a", "y/a", netns.IPv4, netns.TCP, 80, true},
		{"x/a", "y/a", netns.IPv6, netns.TCP, 81, true},
		{"x/a", "y/a", netns.IPv4, netns.UDP, 80, true}, // the echo is the reply
		{"x/a", "y/a", netns.IPv6, netns.UDP, 81, true},
		{"y/a", "x/a", netns.IPv4, netns.TCP, 80, false},
	})
}

// counterPackets reads the packets of the counter on the rule whose comment is
// comment, from an nft listing.
func counterPackets(t *testing.T, listing, comment string) int {
	t.Helper()
	re := regexp.MustCompile(`counter packets (\d+) bytes \d+ [^\n]*comment "` + regexp.QuoteMeta(comment) + `"`)
	m := re.FindStringSubmatch(listing)
	if m == nil {
		t.Fatalf("no counter with comment %q in:\n%s", comment, listing)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// Another component marks every packet 0x4000 (kube-proxy's masquerade bit)
// before our chain; a chain after ours must see exactly 0x4000 on packets
// our policy allowed, and never one of our bits.
func TestIntegrationPacketsMarksPassThrough(t *testing.T) {
	c, node, dir := packetCluster(t)
	writeFile(t, filepath.Join(dir, "deny.yaml"), denyIngressX)
	writeFile(t, filepath.Join(dir, "allow.yaml"), allowYToXA80)
	other := `table ip other {
	chain premark {
		type filter hook prerouting priority mangle; policy accept;
		ip daddr ` + c.Pod("x/a").Addr(netns.IPv4).String() + ` meta mark set meta mark | 0x00004000
	}
	chain inspect {
		type filter hook postrouting priority srcnat + 10; policy accept;
		ip daddr ` + c.Pod("x/a").Addr(netns.IPv4).String() + ` meta mark 0x00004000 counter comment "exactly 0x4000"
		ip daddr ` + c.Pod("x/a").Addr(netns.IPv4).String() + ` meta mark != 0x00004000 counter comment "anything else"
	}
}
`
	if out, err := node.ExecInput([]byte(other), "nft", "-f", "-"); err != nil {
		t.Fatalf("nft -f: %v\n%s", err, out)
	}
	applyTo(t, node, dir)
	checkProbes(t, c, []packetProbe{
		{"y/a", "x/a", netns.IPv4, netns.TCP, 80, true},
		{"y/a", "x/a", netns.IPv4, netns.TCP, 81, false},
	})
	out, err := node.Exec("nft", "list", "table", "ip", "other")
	if err != nil {
		t.Fatalf("nft list: %v\n%s", err, out)
	}
	listing := string(out)
	if n := counterPackets(t, listing, "exactly 0x4000"); n < 3 {
		t.Errorf("only %d packets reached the inspecting chain with mark 0x4000; want the allowed connection's packets", n)
	}
	if n := counterPackets(t, listing, "anything else"); n != 0 {
		t.Errorf("%d packets left our chain with a mark other than 0x4000:\n%s", n, listing)
	}
}

// An older kube-proxy accepts everything in a forward chain at -110. auto
// must place our chain ahead of it, and a denied flow must still be dropped.
func TestIntegrationPacketsAheadOfOldKubeProxy(t *testing.T) {
	c, node, dir := packetCluster(t)
	kubeProxy := `table ip kube-proxy {
	chain filter-forward {
		type filter hook forward priority -110; policy accept;
		ct state new counter accept comment "seen by kube-proxy"
	}
}
`
	if out, err := node.ExecInput([]byte(kubeProxy), "nft", "-f", "-"); err != nil {
		t.Fatalf("nft -f: %v\n%s", err, out)
	}
	writeFile(t, filepath.Join(dir, "deny.yaml"), denyIngressX)
	applyTo(t, node, dir)
	out, err := node.Exec("nft", "list", "chain", "inet", "nftpolicy", "filter-forward")
	if err != nil {
		t.Fatalf("nft list: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "priority -111;") {
		t.Errorf("auto priority is not just ahead of kube-proxy's -110:\n%s", out)
	}
	checkProbes(t, c, []packetProbe{
		{"y/a", "x/a", netns.IPv4, netns.TCP, 80, false},
		{"x/a", "y/a", netns.IPv4, netns.TCP, 80, true},
	})
	out, _ = node.Exec("nft", "list", "table", "ip", "kube-proxy")
	if n := counterPackets(t, string(out), "seen by kube-proxy"); n == 0 {
		t.Errorf("the kube-proxy chain saw no packet: the test did not exercise it")
	}
}
