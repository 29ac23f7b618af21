package flowlog

import (
	"net/netip"
	"os/exec"
	"testing"
	"time"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// Packets a rule logs to a group arrive, with the rule's prefix and their
// 5-tuple, at the Reader bound to that group in the namespace; packets
// logged to another group or not logged do not.
func TestKernelReaderReadsLoggedPackets(t *testing.T) {
	ns := testns.New(t, "nftfl")
	testns.Exec(t, ns, "", "ip", "link", "set", "lo", "up")
	testns.Nft(t, ns, `table inet fltest {
	chain out {
		type filter hook output priority 0; policy accept;
		udp dport 9999 log group 7 prefix "allow:abc"
		udp dport 9998 log group 8 prefix "other"
		tcp dport 9997 log group 7 prefix "deny:def"
	}
}
`, "-f", "-")
	r, err := Open("/run/netns/"+ns, 7)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	send := func(script string) {
		t.Helper()
		if out, err := exec.Command("ip", "netns", "exec", ns, "bash", "-c", script).CombinedOutput(); err != nil {
			t.Logf("%s: %v %s", script, err, out) // a refused TCP connect is expected
		}
	}
	send("echo hi > /dev/udp/127.0.0.1/9998; echo hi > /dev/udp/127.0.0.1/9999")
	send("echo hi > /dev/tcp/::1/9997")

	want := map[string]Tuple{
		"allow:abc": {Src: netip.MustParseAddr("127.0.0.1"), Dst: netip.MustParseAddr("127.0.0.1"), Proto: 17, Dport: 9999},
		"deny:def":  {Src: netip.MustParseAddr("::1"), Dst: netip.MustParseAddr("::1"), Proto: 6, Dport: 9997},
	}
	got := map[string]Tuple{}
	records := make(chan []Record)
	errs := make(chan error, 1)
	go func() {
		for {
			rs, err := r.Read()
			if err != nil {
				errs <- err
				return
			}
			records <- rs
		}
	}()
	timeout := time.After(10 * time.Second) // a safety net: the kernel hands them over within 10ms
	for len(got) < len(want) {
		select {
		case rs := <-records:
			for _, rec := range rs {
				if _, dup := got[rec.Prefix]; dup {
					continue // a TCP SYN retransmitted
				}
				rec.Tuple.Sport = 0 // ephemeral
				got[rec.Prefix] = rec.Tuple
			}
		case err := <-errs:
			t.Fatal(err)
		case <-timeout:
			t.Fatalf("logged packets not read: got %v, want %v", got, want)
		}
	}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("prefix %q: tuple %v, want %v", p, got[p], w)
		}
	}
	if _, ok := got["other"]; ok {
		t.Error("a packet logged to group 8 was read from group 7")
	}
}

// A second reader of a group in the same namespace is refused.
func TestKernelReaderGroupIsExclusive(t *testing.T) {
	ns := testns.New(t, "nftfl")
	r, err := Open("/run/netns/"+ns, 7)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r2, err := Open("/run/netns/"+ns, 7); err == nil {
		r2.Close()
		t.Error("a second reader bound group 7")
	}
}
