package e2e

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"testing"

	"github.com/nftpolicy/nftpolicy/internal/netns"
)

// TestDataPlaneForgedSourceStaysOut: x/a is isolated for ingress. y/a
// forges x/a's own address as its source, with a raw socket, and sends UDP
// to x/a directly and through x/a's Service (DNAT to x/a, as kube-proxy
// sets up): neither may arrive, in either family, though x/a reaches
// itself through the Service. The exemption for a pod reaching itself
// holds only for translated connections that came in on the pod's own
// link (routed wiring: one link per pod).
func TestDataPlaneForgedSourceStaysOut(t *testing.T) {
	t.Parallel()
	s := newSmall(t, netns.Options{Name: "e2e-fg"}, nil, "x/a", "y/a")
	s.apply(t, denyIngressX)
	c, n, xa, ya := s.c, s.node, s.pods["x/a"], s.pods["y/a"]
	const port = 5555
	services := map[string]netip.Addr{netns.IPv4: netip.MustParseAddr("10.96.0.10"), netns.IPv6: netip.MustParseAddr("fd00:96::10")}
	rules := fmt.Sprintf(`table inet svc {
	chain pre {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr %[1]s udp dport %[5]d dnat ip to %[2]s
		ip6 daddr %[3]s udp dport %[5]d dnat ip6 to %[4]s
	}
	chain post {
		type nat hook postrouting priority srcnat; policy accept;
		ip saddr %[2]s ip daddr %[2]s masquerade
		ip6 saddr %[4]s ip6 daddr %[4]s masquerade
	}
}
`, services[netns.IPv4], xa.IPv4(), services[netns.IPv6], xa.IPv6(), port)
	if out, err := n.ExecInput([]byte(rules), "nft", "-f", "-"); err != nil {
		t.Fatalf("install the Service: %v\n%s", err, out)
	}
	// x/a counts what reaches it on the port: the forged datagrams (source
	// port 40000) and the others.
	seen := fmt.Sprintf("table inet seen {\n\tchain in {\n\t\ttype filter hook input priority filter;\n\t\tudp dport %d udp sport 40000 counter comment \"forged\"\n\t\tudp dport %d udp sport != 40000 counter comment \"other\"\n\t}\n}\n", port, port)
	if out, err := xa.ExecInput([]byte(seen), "nft", "-f", "-"); err != nil {
		t.Fatalf("install the counter: %v\n%s", err, out)
	}
	for _, fam := range []string{netns.IPv4, netns.IPv6} {
		self := netip.AddrPortFrom(xa.Addr(fam), 40000)
		for _, dst := range []netip.Addr{xa.Addr(fam), services[fam]} {
			for range 3 {
				if err := c.SendForgedUDP(ya, self, netip.AddrPortFrom(dst, port)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// A datagram from the node, which policy never filters, after the
	// forged ones on the same last link: once it is counted, whatever
	// forged datagram got through is counted too.
	c.ProbeFromNode(n, xa.IPv4(), netns.UDP, port, probeTimeout)
	counted := regexp.MustCompile(`counter packets (\d+) bytes \d+ comment "(\w+)"`)
	var got map[string]int
	for range 100 {
		out, err := xa.Exec("nft", "list", "table", "inet", "seen")
		if err != nil {
			t.Fatal(err)
		}
		got = map[string]int{}
		for _, m := range counted.FindAllStringSubmatch(string(out), -1) {
			got[m[2]], _ = strconv.Atoi(m[1])
		}
		if got["other"] > 0 {
			break
		}
	}
	if got["other"] == 0 {
		t.Fatal("the node's datagram never reached x/a")
	}
	if got["forged"] != 0 {
		t.Errorf("x/a, isolated for ingress, received %d forged datagrams on udp/%d", got["forged"], port)
	}
}
