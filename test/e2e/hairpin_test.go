package e2e

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/nftpolicy/nftpolicy/internal/netns"
)

// TestDataPlaneHairpinThroughService: a pod isolated for ingress still
// reaches itself through a Service address (DNAT back to itself, then
// masquerade, as kube-proxy does for hairpin traffic), while another pod
// going to the same Service address is dropped. The self exemption holds
// for translated connections only, so a packet that merely forges the
// pod's own address as its source gets no exemption (see
// enforcer.TestCompileSelfTraffic).
func TestDataPlaneHairpinThroughService(t *testing.T) {
	t.Parallel()
	s := newSmall(t, netns.Options{Name: "e2e-hp", IPv4: true}, nil, "x/a", "y/a")
	s.apply(t, denyIngressX)
	c, n, xa, ya := s.c, s.node, s.pods["x/a"], s.pods["y/a"]
	// The Service 10.96.0.10:80 has one endpoint, x/a:80.
	service := fmt.Sprintf(`table ip svc {
	chain pre {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr 10.96.0.10 tcp dport 80 dnat to %[1]s:80
	}
	chain post {
		type nat hook postrouting priority srcnat; policy accept;
		ip saddr %[1]s ip daddr %[1]s masquerade
	}
}
`, xa.IPv4())
	if out, err := n.ExecInput([]byte(service), "nft", "-f", "-"); err != nil {
		t.Fatalf("install the Service: %v\n%s", err, out)
	}
	svc := netip.MustParseAddr("10.96.0.10")
	if !c.Probe(xa, svc, netns.TCP, 80, time.Second) && !c.Probe(xa, svc, netns.TCP, 80, time.Second) {
		t.Error("x/a, isolated for ingress, cannot reach itself through its Service")
	}
	if c.Probe(ya, svc, netns.TCP, 80, probeTimeout) {
		t.Error("y/a reaches x/a, isolated for ingress, through the Service")
	}
	if c.Probe(ya, xa.IPv4(), netns.TCP, 80, probeTimeout) {
		t.Error("y/a reaches x/a, isolated for ingress")
	}
}
