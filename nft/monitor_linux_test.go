package nft

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// The Monitor tells a commit to another table from one to ours, and says
// it cannot tell for generations it has not seen.
func TestKernelMonitor(t *testing.T) {
	ns, c := openTestNS(t)
	m, err := c.Monitor("nftpolicy")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const wait = 2 * time.Second

	ours, err := c.Apply(sampleTable())
	if err != nil {
		t.Fatal(err)
	}
	gen := ours.Generation
	if !m.Untouched(gen, gen, wait) {
		t.Errorf("nothing committed after our own batch, but Untouched(%d, %d) is false", gen, gen)
	}

	testns.Nft(t, ns, "", "add", "table", "inet", "someone-else")
	testns.Nft(t, ns, "", "add", "table", "ip", "nftpolicy") // same name, another family
	now, err := c.Generation()
	if err != nil {
		t.Fatal(err)
	}
	if now != gen+2 {
		t.Fatalf("generation %d after two commits from %d", now, gen)
	}
	if !m.Untouched(gen, now, wait) {
		t.Errorf("only other tables changed in (%d, %d], but Untouched is false", gen, now)
	}

	testns.Nft(t, ns, "", "flush", "set", "inet", "nftpolicy", "peers-v4")
	flushed, _ := c.Generation()
	if m.Untouched(gen, flushed, wait) || m.Untouched(now, flushed, wait) {
		t.Errorf("our set was flushed at %d, but Untouched says nothing changed", flushed)
	}
	if !m.Untouched(flushed, flushed, wait) {
		t.Errorf("nothing after %d, but Untouched is false", flushed)
	}
	if m.Untouched(flushed, flushed+1, 50*time.Millisecond) {
		t.Errorf("generation %d was never committed, but Untouched answered for it", flushed+1)
	}
	// gen-1 is the generation the Monitor started at: what came before it
	// was not seen.
	if !m.Untouched(gen-1, gen-1, wait) || m.Untouched(gen-2, gen, wait) {
		t.Errorf("generations before the Monitor started must be unknown, and only those")
	}
}

// What a Monitor remembers is bounded: past maxRemembered touching
// generations it forgets the oldest, and says it cannot tell about them.
func TestMonitorForgetsOldGenerations(t *testing.T) {
	m := &Monitor{touched: map[uint32]bool{}}
	m.seen.L = &m.mu
	for g := uint32(1); g <= 3*maxRemembered; g++ {
		m.pending = true
		m.note(newGen(g))
	}
	if len(m.touched) > maxRemembered {
		t.Errorf("%d generations remembered, want at most %d", len(m.touched), maxRemembered)
	}
	latest := uint32(3 * maxRemembered)
	if m.Untouched(1, 2, 0) {
		t.Error("a forgotten generation was answered for")
	}
	if m.Untouched(latest-1, latest, 0) {
		t.Error("the last generation touched the table, but Untouched says not")
	}
	if !m.Untouched(latest, latest, 0) {
		t.Error("nothing after the last generation, but Untouched cannot tell")
	}
}

// newGen builds the NEWGEN notification of generation g.
func newGen(g uint32) netlink.Message {
	ae := netlink.NewAttributeEncoder()
	ae.ByteOrder = binary.BigEndian
	ae.Uint32(unix.NFTA_GEN_ID, g)
	b, _ := ae.Encode()
	return netlink.Message{Header: netlink.Header{Type: newGenType}, Data: append(nfgenmsg(unix.AF_UNSPEC, 0), b...)}
}
