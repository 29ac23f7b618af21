package doctor

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/nftpolicy/nftpolicy/internal/testns"
	"github.com/nftpolicy/nftpolicy/nft"
)

func checkIn(t *testing.T, ns string) (*Report, string) {
	t.Helper()
	c, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := Check(c, Options{Netns: ns})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return r, b.String()
}

// TestKernelDoctorCtMarkWrites checks the doctor sees the conntrack mark
// writes nft encodes (`ct set mark with reg 1`, which google/nftables
// v0.3.0 reads back as a load), with their bits: each replaces the whole
// conntrack mark, our revoked bit (0x4, in the default mask) included.
func TestKernelDoctorCtMarkWrites(t *testing.T) {
	testns.RequireRoot(t, "ip", "nft")
	ns := testns.New(t, "nftpt")
	testns.Nft(t, ns, "", "add", "table", "inet", "t")
	testns.Nft(t, ns, "", "add", "chain", "inet", "t", "c", "{ type filter hook forward priority -5; }")
	for _, rule := range []string{"ct mark set meta mark", "ct mark set meta mark & 0x4", "ct mark set 0x10"} {
		testns.Nft(t, ns, "", append([]string{"add", "rule", "inet", "t", "c"}, strings.Fields(rule)...)...)
	}
	r, text := checkIn(t, ns)
	if len(r.Marks.Tables) != 1 {
		t.Fatalf("marks: %+v", r.Marks.Tables)
	}
	tm := r.Marks.Tables[0]
	if tm.Table != "t" || tm.CtWrite != 0xffffffff || tm.MetaRead != 0xffffffff || tm.Overlap != 0x4 {
		t.Errorf("table marks: %+v", tm)
	}
	var writes []string
	for _, u := range tm.Uses {
		if u.Access == "write" {
			writes = append(writes, u.Mark+" "+u.Bits.String()+" "+u.Value.String())
		}
	}
	want := []string{"ct mark 0xffffffff 0x00000000", "ct mark 0xffffffff 0x00000000", "ct mark 0xffffffff 0x00000010"}
	if !slices.Equal(writes, want) {
		t.Errorf("writes %q, want %q", writes, want)
	}
	if !slices.Contains(warningKinds(r), WarnMarkOverlap) {
		t.Errorf("no %s warning: %+v", WarnMarkOverlap, r.Warnings)
	}
	if !strings.Contains(text, "  ct mark write:   0xffffffff\n") {
		t.Errorf("text:\n%s", text)
	}
}

func warningKinds(r *Report) []string {
	var kinds []string
	for _, w := range r.Warnings {
		kinds = append(kinds, w.Kind)
	}
	return kinds
}

// TestKernelDoctorForgedNames creates, over netlink (nft's parser would
// refuse them), tables and chains whose names try to forge the text
// report in a namespace without our table, and checks the report quotes
// them.
func TestKernelDoctorForgedNames(t *testing.T) {
	testns.RequireRoot(t, "ip")
	ns := testns.New(t, "nftpt")
	fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	nl, err := nftables.New(nftables.WithNetNSFd(fd))
	if err != nil {
		t.Fatal(err)
	}
	prio := nftables.ChainPriority(-5)
	for _, tc := range []struct {
		family nftables.TableFamily
		table  string
		chain  string
	}{
		{nftables.TableFamilyIPv4, forgedTable, forgedChain},
		{nftables.TableFamilyINet, forgedHeader, forgedOurs},
	} {
		tb := nl.AddTable(&nftables.Table{Family: tc.family, Name: tc.table})
		nl.AddChain(&nftables.Chain{Table: tb, Name: tc.chain, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookForward, Priority: &prio})
	}
	if err := nl.Flush(); err != nil {
		t.Fatal(err)
	}
	r, text := checkIn(t, ns)
	checkUnforged(t, text)
	var names []string
	for _, h := range r.Hooks {
		for _, c := range h.Chains {
			names = append(names, c.Table+" "+c.Chain)
		}
	}
	if len(names) != 2 || r.Ours.Present {
		t.Errorf("chains %q, ours %+v: the names did not reach the kernel as written", names, r.Ours)
	}
	for _, want := range []string{`ip "x\n\n[our table]\npresent: yes\n`, ` "c\x1b[2J": type filter`, `inet "[our table]" "filter-forward: type filter, policy accept, nftpolicy [ours]\n`} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in:\n%s", want, text)
		}
	}
}
