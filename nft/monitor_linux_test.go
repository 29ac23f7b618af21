package nft

import (
	"testing"
	"time"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// The Monitor tells a commit to another table from one to ours, and says
// it cannot tell for generations it has not seen.
func TestKernelMonitor(t *testing.T) {
	ns := testns.New(t, "nftpt")
	c, err := Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
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
