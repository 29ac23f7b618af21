package conntrack_test

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	ctnl "github.com/ti-mo/conntrack"

	"github.com/nftpolicy/nftpolicy/conntrack"
	"github.com/nftpolicy/nftpolicy/enforcer"
	"github.com/nftpolicy/nftpolicy/internal/netns"
)

// connmarkSave is the common connmark-save pattern: another table copies
// the packet mark into the conntrack mark at every packet, ahead of our
// forward chain, and so clears the revoked bit of every entry it sees.
const connmarkSave = "table ip other { chain pre { type filter hook prerouting priority mangle; ct mark set meta mark; }; }"

// TestKernelRecheckRevokesRevivedFlows: a revoked connection whose mark
// another table cleared passes again; Recheck, which the daemon runs at
// every drift check, finds it passing though the table denies it and
// revokes it again, leaving alone what the table allows.
func TestKernelRecheckRevokesRevivedFlows(t *testing.T) {
	d := newDataPlane(t)
	opts := enforcer.Options{Node: "node-1", Revoke: true}
	wide := compileWith(t, opts, d.c.Manifests(), fromXAndY)
	tight := compileWith(t, opts, d.c.Manifests(), fromY)
	d.apply(t, wide)
	xb := d.addr("x/b", netns.IPv4)
	revoked := []*flow{d.dial(t, "x/a", "tcp", xb), d.dial(t, "x/a", "udp", xb)}
	kept := []*flow{d.dial(t, "y/a", "tcp", xb)}
	for _, f := range append(append([]*flow{}, revoked...), kept...) {
		f.mustPass(t, "under the wide table")
	}
	cleaner, err := conntrack.Open(d.node.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	defer cleaner.Close()
	d.apply(t, tight)
	if _, err := cleaner.Narrowed(wide, tight); err != nil {
		t.Fatal(err)
	}
	allStop(t, revoked, "after the tightening")

	if out, err := d.node.ExecInput([]byte(connmarkSave), "nft", "-f", "-"); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
	for _, f := range revoked {
		f.mustPass(t, "with another table clearing the conntrack mark (revived)")
		f.drain()
	}
	if out, err := d.node.Exec("nft", "delete", "table", "ip", "other"); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
	st, err := cleaner.Recheck(tight)
	if err != nil {
		t.Fatalf("Recheck: %v", err)
	}
	t.Logf("recheck: %+v", st)
	if st.Revived != len(revoked) || st.Revoked != len(revoked) {
		t.Errorf("Recheck revived %d, revoked %d; want %d each", st.Revived, st.Revoked, len(revoked))
	}
	allStop(t, revoked, "after the recheck")
	for _, f := range kept {
		f.mustPass(t, "after the recheck")
	}
	// A second pass finds nothing new.
	if st, err := cleaner.Recheck(tight); err != nil || st.Revived != 0 || st.Marked != len(revoked) {
		t.Errorf("second Recheck = %+v, %v; want nothing revived, %d marked", st, err, len(revoked))
	}
}

// TestKernelHairpinsAreHandedToTheKernel: x/b, isolated for ingress and
// not admitting itself, reaches itself through a Service (DNAT, then
// masquerade, as kube-proxy does). A start (no table before) cannot tell
// it from a forged one, which it must not let pass: it deletes the entry,
// so the kernel judges the next packet on the link it came in, and the
// genuine connection goes on rather than being marked dead. A later
// recheck leaves it alone. A marked hairpin (as an earlier version marked
// them) is not restored at a later change, which would let a forged one
// back: it is handed to the kernel the same way.
func TestKernelHairpinsAreHandedToTheKernel(t *testing.T) {
	d := newDataPlane(t)
	xb := d.addr("x/b", netns.IPv4)
	const vip = "10.96.0.10"
	if out, err := d.node.ExecInput([]byte(fmt.Sprintf(`table ip svc {
	chain pre {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr %[1]s tcp dport 80 dnat to %[2]s:%[3]d
	}
	chain post {
		type nat hook postrouting priority srcnat; policy accept;
		ip saddr %[2]s ip daddr %[2]s masquerade
	}
}
`, vip, xb, echoPort)), "nft", "-f", "-"); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
	opts := enforcer.Options{Node: "node-1", Revoke: true}
	wide := compileWith(t, opts, d.c.Manifests(), fromXAndY)
	tight := compileWith(t, opts, d.c.Manifests(), fromY)
	d.apply(t, wide)
	svc := netip.AddrPortFrom(netip.MustParseAddr(vip), 80)
	denied := dialFrom(t, d.pods["x/a"].NetnsPath(), "tcp", svc, "tcp x/a -> service")
	hp := dialFrom(t, d.pods["x/b"].NetnsPath(), "tcp", svc, "tcp x/b -> service -> x/b")
	denied.mustPass(t, "under the wide table")
	hp.mustPass(t, "under the wide table")
	d.apply(t, tight)
	hp.mustPass(t, "under the tight table, before any cleanup")

	cleaner, err := conntrack.Open(d.node.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	defer cleaner.Close()
	st, err := cleaner.Narrowed(nil, tight) // a start
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("start: %+v", st)
	if st.Hairpins != 1 || st.Revoked != 1 {
		t.Errorf("start: %d hairpins handed to the kernel and %d flows revoked, want 1 and 1 (x/a's)", st.Hairpins, st.Revoked)
	}
	allStop(t, []*flow{denied}, "after the start's cleanup")
	hp.mustPass(t, "after the start's cleanup")

	st, err = cleaner.Recheck(tight)
	if err != nil {
		t.Fatal(err)
	}
	if st.Revived != 0 || st.Hairpins != 0 {
		t.Errorf("recheck: %+v; want no flow revived, no hairpin handed", st)
	}
	hp.mustPass(t, "after a recheck")

	// The hairpin's entry marked revoked, as an earlier version left it.
	bit := enforcer.RevokedBit(enforcer.DefaultMarkMask)
	conn := dialCT(t, d.node.NetnsPath())
	defer conn.Close()
	marked := 0
	for _, e := range dumpCT(t, d.node.NetnsPath()) {
		o := e.TupleOrig
		if o.IP.SourceAddress.Unmap() == xb && o.IP.DestinationAddress.Unmap() == svc.Addr() {
			if err := conn.Update(ctnl.Flow{TupleOrig: e.TupleOrig, TupleReply: e.TupleReply, Zone: e.Zone, Mark: e.Mark | bit}); err != nil {
				t.Fatal(err)
			}
			marked++
		}
	}
	if marked != 1 {
		t.Fatalf("found %d entries of the hairpin, want 1", marked)
	}
	st, err = cleaner.Narrowed(wide, tight) // a later change
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("change: %+v", st)
	if st.Restored != 0 || st.Hairpins != 1 {
		t.Errorf("a later change restored %d marked entries and handed %d hairpins to the kernel, want 0 and 1", st.Restored, st.Hairpins)
	}
	hp.mustPass(t, "after the later change")
	allStop(t, []*flow{denied}, "after the later change")
}

// TestIntegrationRestartWithoutCleanupKeepsRevokedFlowsDead: a daemon with
// --conntrack-cleanup revokes x/a's connections; restarted with
// --conntrack-cleanup=false, its table has no rule dropping revoked
// connections, so it deletes the entries that carry the bit before it
// writes: their next packet is judged as new, and dropped. Left marked,
// they passed as established.
func TestIntegrationRestartWithoutCleanupKeepsRevokedFlowsDead(t *testing.T) {
	d := newDataPlane(t)
	dir := t.TempDir()
	for file, content := range map[string]string{"cluster.yaml": d.c.Manifests(), "policies.yaml": fromXAndY} {
		if err := netns.WriteFileAtomic(filepath.Join(dir, file), []byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	daemons := netns.StartTestDaemons(t, d.c, dir, netns.DaemonOptions{})
	xb := d.addr("x/b", netns.IPv4)
	revoked := []*flow{d.dial(t, "x/a", "tcp", xb), d.dial(t, "x/a", "udp", xb)}
	kept := d.dial(t, "y/a", "tcp", xb)
	for _, f := range append(append([]*flow{}, revoked...), kept) {
		f.mustPass(t, "under the wide policy")
	}
	if err := daemons.WriteFile("policies.yaml", fromY); err != nil {
		t.Fatal(err)
	}
	allStop(t, revoked, "after the tightening")
	daemons.Stop()

	again := netns.StartTestDaemons(t, d.c, dir, netns.DaemonOptions{Args: []string{"--conntrack-cleanup=false"}})
	defer func() {
		if t.Failed() {
			t.Logf("first daemon:\n%s\nsecond daemon:\n%s", daemons.Logs(d.node), again.Logs(d.node))
		}
	}()
	allStop(t, revoked, "after a restart with --conntrack-cleanup=false")
	kept.mustPass(t, "after the restart")
	bit := enforcer.RevokedBit(enforcer.DefaultMarkMask)
	for _, e := range dumpCT(t, d.node.NetnsPath()) {
		if e.Mark&bit != 0 {
			t.Errorf("entry %s still carries the revoked bit (0x%08x)", e.TupleOrig, e.Mark)
		}
	}
}

// TestIntegrationRunRevokesRevivedFlowsAgain is the adversarial pass's
// repro: a revoked connection revived by another table's connmark save
// (`ct mark set meta mark`) is revoked again by the daemon's drift check
// once that table is gone, without any change of policy.
func TestIntegrationRunRevokesRevivedFlowsAgain(t *testing.T) {
	d := newDataPlane(t)
	dir := t.TempDir()
	for file, content := range map[string]string{"cluster.yaml": d.c.Manifests(), "policies.yaml": fromXAndY} {
		if err := netns.WriteFileAtomic(filepath.Join(dir, file), []byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	daemons := netns.StartTestDaemons(t, d.c, dir, netns.DaemonOptions{Args: []string{"--drift-check", "1s", "--log-level", "debug"}})
	defer func() {
		if t.Failed() {
			t.Logf("daemon log:\n%s", daemons.Logs(d.node))
		}
	}()
	xb := d.addr("x/b", netns.IPv4)
	revoked := []*flow{d.dial(t, "x/a", "tcp", xb), d.dial(t, "x/a", "udp", xb)}
	kept := d.dial(t, "y/a", "tcp", xb)
	for _, f := range append(append([]*flow{}, revoked...), kept) {
		f.mustPass(t, "under the wide policy")
	}
	if err := daemons.WriteFile("policies.yaml", fromY); err != nil {
		t.Fatal(err)
	}
	allStop(t, revoked, "after the tightening")
	if out, err := d.node.ExecInput([]byte(connmarkSave), "nft", "-f", "-"); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
	for _, f := range revoked {
		f.mustPass(t, "with another table clearing the conntrack mark (revived)")
		f.drain()
	}
	if out, err := d.node.Exec("nft", "delete", "table", "ip", "other"); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
	// The next drift check, within a second, marks them revoked again.
	bit := enforcer.RevokedBit(enforcer.DefaultMarkMask)
	deadline := time.Now().Add(5 * time.Second)
	for {
		marked := 0
		for _, e := range dumpCT(t, d.node.NetnsPath()) {
			if e.TupleOrig.IP.SourceAddress.Unmap() == d.addr("x/a", netns.IPv4) && e.Mark&bit != 0 {
				marked++
			}
		}
		if marked == len(revoked) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d revived connections marked revoked again 5 s after the other table went, want all within a drift check (1 s)", marked, len(revoked))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, f := range revoked {
		f.drain()
	}
	allStop(t, revoked, "after the drift check")
	kept.mustPass(t, "after the drift check")
}

// drain reads what the flow's socket still holds (echoes of exchanges
// that were held up and came back together), so that a later exchange
// reads only what gets through after it.
func (f *flow) drain() {
	buf := make([]byte, 4096)
	for {
		f.conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := f.conn.Read(buf); err != nil {
			return
		}
	}
}
