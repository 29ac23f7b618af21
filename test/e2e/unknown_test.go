package e2e

import (
	"testing"
	"time"

	"github.com/nftpolicy/nftpolicy/internal/netns"
)

// TestDataPlaneDenyUnknown: with --default-deny-unknown, a pod that has
// its address on this node but is not in the manifests yet is closed both
// ways; it is reachable as soon as the sync that makes it known is done;
// and an address outside the pod CIDRs given is never affected (here the
// IPv6 CIDR is not given, so IPv6 is left alone).
func TestDataPlaneDenyUnknown(t *testing.T) {
	t.Parallel()
	s := newSmall(t, netns.Options{Name: "e2e-unk"}, func(n *netns.Node) []string {
		return []string{"--default-deny-unknown", "--pod-cidr", n.PodCIDRv4().String()}
	}, "y/a")
	c, ya := s.c, s.pods["y/a"]
	// x/b starts after the daemon read the manifests: its address is in
	// node1's pod CIDR, and no manifest names it.
	xb := s.addPod(t, "x/b")
	if c.Probe(ya, xb.IPv4(), netns.TCP, 80, probeTimeout) {
		t.Error("ipv4 y/a -> x/b (unknown) got through")
	}
	if c.Probe(xb, ya.IPv4(), netns.TCP, 80, probeTimeout) {
		t.Error("ipv4 x/b (unknown) -> y/a got through")
	}
	if !c.Probe(ya, xb.IPv6(), netns.TCP, 80, time.Second) || !c.Probe(xb, ya.IPv6(), netns.UDP, 81, time.Second) {
		t.Error("ipv6 to or from x/b blocked, though no IPv6 pod CIDR was given")
	}
	if !c.Probe(ya, ya.IPv4(), netns.TCP, 80, time.Second) {
		t.Error("y/a, a known pod, cannot reach itself")
	}

	start := time.Now()
	if err := s.d.WriteFile(clusterFile, c.Manifests()); err != nil {
		t.Fatal(err)
	}
	known := time.Since(start)
	// The first probe after the sync must pass: one sync makes it known.
	if !c.Probe(ya, xb.IPv4(), netns.TCP, 80, time.Second) || !c.Probe(xb, ya.IPv4(), netns.UDP, 81, time.Second) {
		t.Error("x/b, now in the manifests and selected by no policy, is still closed")
	}
	t.Logf("x/b reachable %v after its manifest was written (the wait for the directory to be stable and the sync)", known.Round(time.Millisecond))
}
