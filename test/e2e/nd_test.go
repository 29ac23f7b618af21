package e2e

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftpolicy/nftpolicy/internal/netns"
)

// TestDataPlaneRoutedNeighbourDiscoveryIsJudged: x/a is isolated both ways
// and allowed nothing. It sends ICMPv6 messages of the neighbour discovery
// types (135, 136, 137) carrying data, hop limit 255, to y/a through the
// node: routed, they cross the forward hook with hop limit 254, and must be
// judged by policy like any other packet, not let through as neighbour
// discovery (the second adversarial pass carried data so). Real neighbour
// discovery keeps working: the node's probe of y/a below needs it, and
// TestDataPlaneBridgedIPv6NeighborDiscovery covers pods on one segment.
func TestDataPlaneRoutedNeighbourDiscoveryIsJudged(t *testing.T) {
	t.Parallel()
	s := newSmall(t, netns.Options{Name: "e2e-nd", Wiring: netns.Routed}, nil, "x/a", "y/a")
	s.apply(t, denyAllX)
	xa, ya := s.pods["x/a"], s.pods["y/a"]
	// y/a counts the ICMPv6 messages that reach it from x/a's address.
	seen := fmt.Sprintf("table inet seen {\n\tchain in {\n\t\ttype filter hook input priority filter;\n\t\tip6 saddr %s icmpv6 type 133-137 counter comment \"nd-from-xa\"\n\t}\n}\n", xa.IPv6())
	if out, err := ya.ExecInput([]byte(seen), "nft", "-f", "-"); err != nil {
		t.Fatalf("install the counter: %v\n%s", err, out)
	}
	for _, typ := range []byte{135, 136, 137} {
		if err := sendICMPv6(xa, ya.IPv6(), typ, []byte("EXFIL-secret-data")); err != nil {
			t.Fatal(err)
		}
	}
	// A datagram y/a's node sends it afterwards on the same last link:
	// once it is counted, every earlier packet has arrived or never will.
	if !s.c.ProbeFromNode(s.node, ya.IPv6(), netns.UDP, 80, probeTimeout) {
		t.Fatal("the node cannot reach y/a")
	}
	out, err := ya.Exec("nft", "list", "table", "inet", "seen")
	if err != nil {
		t.Fatalf("nft list: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`counter packets (\d+) bytes \d+ comment "nd-from-xa"`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no counter in:\n%s", out)
	}
	if n, _ := strconv.Atoi(string(m[1])); n != 0 {
		t.Errorf("%d ICMPv6 neighbour-discovery-typed messages from x/a, isolated for egress, reached y/a through the node; want 0", n)
	}
}

// sendICMPv6 sends, from pod from, one ICMPv6 message of type typ (code 0,
// four reserved bytes, then payload) to dst with hop limit 255, as
// neighbour discovery is sent. The kernel fills in the checksum.
func sendICMPv6(from *netns.Pod, dst netip.Addr, typ byte, payload []byte) error {
	return netns.Do(from.NetnsPath(), func() error {
		fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, 255); err != nil {
			return err
		}
		msg := append([]byte{typ, 0, 0, 0, 0, 0, 0, 0}, payload...)
		return unix.Sendto(fd, msg, 0, &unix.SockaddrInet6{Addr: dst.As16()})
	})
}
