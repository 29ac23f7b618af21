package enforcer

import (
	"net/netip"
	"testing"

	"github.com/mdlayher/netlink"
	ctnl "github.com/ti-mo/conntrack"
	"golang.org/x/sys/unix"

	"github.com/nftpolicy/nftpolicy/conntrack"
	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// A connection that started while our table was flushed (or dormant, or
// rewritten by someone else) is one the policy never judged. The drift
// repair puts the rules back; it must also end such connections, or they
// outlive the repair for as long as they keep sending.
func TestKernelRepairEndsConnectionsOpenedMeanwhile(t *testing.T) {
	s, ns := newTestSyncer(t)
	cl, err := conntrack.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	s.FollowConntrack(cl)
	if _, err := s.Sync(cluster(policy("x", "deny", denyIngress))); err != nil {
		t.Fatal(err)
	}

	testns.Nft(t, ns, "", "flush", "ruleset")
	// Meanwhile y/a → x/a (denied) and y/a → z/a (allowed) start.
	fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ct, err := ctnl.Dial(&netlink.Config{NetNS: fd})
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer ct.Close()
	ya, _ := podIPs("y", "a")
	xa, _ := podIPs("x", "a")
	za, _ := podIPs("z", "a")
	for _, dst := range []netip.Addr{xa, za} {
		f := ctnl.NewFlow(unix.IPPROTO_TCP, ctnl.StatusConfirmed|ctnl.StatusSeenReply|ctnl.StatusAssured, ya, dst, 40000, 80, 600, 0)
		if err := ct.Create(f); err != nil {
			t.Fatal(err)
		}
	}

	repaired, err := s.CheckDrift()
	if err != nil || !repaired {
		t.Fatalf("CheckDrift after a flush: repaired %v, %v", repaired, err)
	}
	flows, err := ct.Dump(nil)
	if err != nil {
		t.Fatal(err)
	}
	left := map[netip.Addr]bool{}
	for _, f := range flows {
		left[f.TupleOrig.IP.DestinationAddress] = true
	}
	if left[xa] {
		t.Error("y/a → x/a, started while the table was flushed and denied by it, survived the repair")
	}
	if !left[za] {
		t.Error("y/a → z/a, allowed, was ended by the repair")
	}
}
