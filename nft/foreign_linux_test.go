package nft

import (
	"testing"
	"time"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// Monitor.Foreign signals a commit to our table from anyone but our own
// Conn, and nothing else: not our batches, not other tables.
func TestKernelMonitorForeign(t *testing.T) {
	ns, c := openTestNS(t)
	if _, err := c.Apply(sampleTable()); err != nil {
		t.Fatal(err)
	}
	m, err := c.Monitor("nftpolicy")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// settle waits until the Monitor has read every commit so far.
	settle := func() {
		t.Helper()
		gen, err := c.Generation()
		if err != nil {
			t.Fatal(err)
		}
		m.Untouched(gen, gen, 2*time.Second)
	}
	signalled := func() bool {
		settle()
		select {
		case <-m.Foreign():
			return true
		default:
			return false
		}
	}

	old := sampleTable()
	next := clone(old)
	setNamed(next, "plain-v4").Elements = nil
	if _, err := c.Update(old, next); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Apply(old); err != nil {
		t.Fatal(err)
	}
	if signalled() {
		t.Error("our own delta and apply were signalled as foreign")
	}
	testns.Nft(t, ns, "", "add table inet someone-else")
	testns.Nft(t, ns, "", "add table ip nftpolicy") // same name, another family
	if signalled() {
		t.Error("commits to other tables were signalled")
	}
	for _, cmd := range []string{
		"add table inet nftpolicy { flags dormant; }",
		"flush ruleset",
	} {
		testns.Nft(t, ns, "", cmd)
		if !signalled() {
			t.Errorf("%s: not signalled", cmd)
		}
	}
	// Signals coalesce: two commits, one signal waiting.
	if _, err := c.Apply(old); err != nil {
		t.Fatal(err)
	}
	testns.Nft(t, ns, "", "delete element inet nftpolicy plain-v4 { 10.9.9.9 }")
	testns.Nft(t, ns, "", "delete table inet nftpolicy")
	if !signalled() || signalled() {
		t.Error("two foreign commits: want exactly one signal waiting")
	}
}
