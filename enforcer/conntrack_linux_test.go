package enforcer

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/mdlayher/netlink"
	ctnl "github.com/ti-mo/conntrack"
	"golang.org/x/sys/unix"

	"github.com/nftpolicy/nftpolicy/conntrack"
	"github.com/nftpolicy/nftpolicy/internal/testns"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
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

// A failed conntrack cleanup fails its sync, and the retry of the same
// snapshot, which writes nothing, must retry the cleanup rather than call
// conntrack up to date: the daemon stays unready until it succeeds.
func TestKernelFailedCleanupIsRetried(t *testing.T) {
	s, ns := newTestSyncer(t)
	cl, err := conntrack.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	s.FollowConntrack(cl)
	if _, err := s.Sync(cluster()); err != nil {
		t.Fatal(err)
	}
	cl.Close() // every cleanup fails from now on
	tight := cluster(policy("x", "deny", denyIngress))
	if _, err := s.Sync(tight); err == nil {
		t.Fatal("a sync whose cleanup failed succeeded")
	}
	if _, err := s.Sync(tight); err == nil {
		t.Error("the retry of the same snapshot succeeded: the narrowing was never cleaned")
	}
	if _, err := s.Status(); err == nil {
		t.Error("Status is nil while the cleanup keeps failing")
	}
}

// A drift check that fails (here its conntrack cleanup, after the repair)
// makes the daemon unready with the reason, not just a log line.
func TestKernelFailedDriftCheckIsNotReady(t *testing.T) {
	ns := testns.New(t, "nftpt")
	s := openSyncer(t, ns, Options{})
	cl, err := conntrack.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	s.FollowConntrack(cl)
	updates := make(chan *k8s.Snapshot, 1)
	updates <- ownerSnap
	runSyncer(t, s, updates)
	waitFor(t, "the first sync and the commit monitor", func() bool {
		gen, err := s.Status()
		return gen > 0 && err == nil && s.foreignCommits() != nil
	})
	cl.Close()
	testns.Nft(t, ns, "", "flush", "ruleset")
	waitFor(t, "not ready, saying the cleanup failed", func() bool {
		_, err := s.Status()
		return err != nil && strings.Contains(err.Error(), "conntrack")
	})
}

// With Options.Revoke the base chain starts with the drop of revoked
// connections, written over netlink exactly as nft writes its text (so
// `nft list` prints it cleanly), with the bit taken from the mask; the
// tracer lets a NEW packet (ct mark 0) past it, and an established one of a
// marked connection not.
func TestKernelRevokeRuleMatchesNft(t *testing.T) {
	for _, mask := range []uint32{0, 0x00300000} {
		snap := cluster(policy("x", "deny", denyIngress))
		table, problems := Compile(snap, Options{Node: testNode, MarkMask: mask, Revoke: true})
		if len(problems) > 0 {
			t.Fatal(problems)
		}
		want := fmt.Sprintf("ct mark & 0x%08x == 0x%08x drop", RevokedBit(mask), RevokedBit(mask))
		if first := nft.RenderRule(table.Chains[0].Rules[0]); !strings.HasPrefix(first, want) {
			t.Errorf("mask 0x%x: first rule of the base chain %q, want %q", mask, first, want)
		}
		listed := testns.AssertSameAsNft(t, table.Name, func(netns string) error {
			c, err := nft.Open(netns)
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Apply(table)
			return err
		}, nft.Render(table))
		if !strings.Contains(listed, want) {
			t.Errorf("nft list lacks %q:\n%s", want, listed)
		}
		ya, _ := podIPs("y", "a")
		za, _ := podIPs("z", "a")
		for _, tc := range []struct {
			name string
			p    nft.Packet
			want nft.VerdictKind
		}{
			{"new, allowed", nft.Packet{Src: ya, Dst: za, Proto: nft.ProtoTCP, Dport: 80}, nft.Accept},
			{"established", nft.Packet{Src: ya, Dst: za, Proto: nft.ProtoTCP, Dport: 80, Established: true}, nft.Accept},
			{"established, revoked", nft.Packet{Src: ya, Dst: za, Proto: nft.ProtoTCP, Dport: 80, Established: true, CtMark: RevokedBit(mask) | 0x1}, nft.Drop},
			{"established, another's bit", nft.Packet{Src: ya, Dst: za, Proto: nft.ProtoTCP, Dport: 80, Established: true, CtMark: 0x1}, nft.Accept},
		} {
			res, err := nft.Trace(table, table.Chains[0].Name, tc.p)
			if err != nil || res.Verdict != tc.want {
				t.Errorf("mask 0x%x, %s: %v, %v; want %s", mask, tc.name, res.Verdict, err, tc.want)
			}
		}
	}
	if table, _ := Compile(cluster(), Options{Node: testNode}); strings.Contains(nft.Render(table), "ct mark") {
		t.Errorf("without Options.Revoke (conntrack cleanup off) the table reads the conntrack mark:\n%s", nft.Render(table))
	}
}
