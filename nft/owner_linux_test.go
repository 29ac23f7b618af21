package nft

import (
	"bufio"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

func TestOwnerRecordRoundTrip(t *testing.T) {
	o := NewOwner(time.Date(2026, 11, 30, 20, 43, 38, 0, time.UTC))
	o.Host = "node-1.example" // the test's own host name is anyone's
	got, ok := ParseOwner(o.Comment())
	if !ok || !got.Same(o) || !got.Since.Equal(o.Since) {
		t.Errorf("ParseOwner(%q) = %+v, %v; want %+v", o.Comment(), got, ok, o)
	}
	if !strings.HasPrefix(o.Comment(), "nftpolicy owner=node-1.example/") || !strings.HasSuffix(o.Comment(), " since=2026-11-30T20:43:38Z") {
		t.Errorf("record %q", o.Comment())
	}
	// With a layout version, as a daemon writes it; without, as one from
	// before layouts were recorded did (Layout 0).
	o.Layout = 2
	if got, ok := ParseOwner(o.Comment()); !ok || !got.Same(o) || got.Layout != 2 || !strings.HasSuffix(o.Comment(), " since=2026-11-30T20:43:38Z layout=2") {
		t.Errorf("ParseOwner(%q) = %+v, %v; want layout 2", o.Comment(), got, ok)
	}
	if got, ok := ParseOwner("nftpolicy owner=h/1/ab since=2026-11-30T20:43:38Z"); !ok || got.Layout != 0 {
		t.Errorf("a record without layout = %+v, %v; want layout 0", got, ok)
	}
	for _, bad := range []string{"", "written by hand", "nftpolicy owner=x since=2026-11-30T20:43:38Z", "nftpolicy owner=a/b/c since=yesterday",
		"nftpolicy owner=h/1/ab since=2026-11-30T20:43:38Z layout=", "nftpolicy owner=h/1/ab since=2026-11-30T20:43:38Z layout=0", "nftpolicy owner=h/1/ab since=2026-11-30T20:43:38Z layout=x"} {
		if o, ok := ParseOwner(bad); ok {
			t.Errorf("ParseOwner(%q) = %+v, want not a record", bad, o)
		}
	}
}

// The owner record is the table's comment, encoded as nft encodes one: the
// table lists exactly as nft's own load of the rendered text, comment
// included, and reads back. It stays through a delta and goes only with a
// whole-table write.
func TestKernelOwnerRecord(t *testing.T) {
	table := sampleTable()
	owner := NewOwner(time.Now())
	table.Comment = owner.Comment()
	listing := testns.AssertSameAsNft(t, table.Name, func(netns string) error {
		c, err := Open(netns)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.ApplyGuarded(table, func(comment string, exists bool) error {
			if exists {
				t.Errorf("a fresh namespace holds table %s, comment %q", table.Name, comment)
			}
			return nil
		})
		return err
	}, Render(table))
	if !strings.Contains(listing, `comment "`+owner.Comment()+`"`) {
		t.Errorf("nft list does not show the owner record:\n%s", listing)
	}

	ns, c := openTestNS(t)
	if _, err := c.TableComment(table.Name); !errors.Is(err, ErrNoTable) {
		t.Errorf("comment of a missing table: %v, want ErrNoTable", err)
	}
	first, err := c.Apply(table)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.TableComment(table.Name)
	if err != nil || got != owner.Comment() {
		t.Fatalf("TableComment = %q, %v; want %q", got, err, owner.Comment())
	}
	if o, ok := ParseOwner(got); !ok || !o.Same(owner) {
		t.Errorf("record read back as %+v, %v", o, ok)
	}

	changed := sampleTable()
	changed.Comment = "not written by a delta"
	changed.Sets[2].Elements = append(changed.Sets[2].Elements, Element{Addr: netip.MustParseAddr("10.9.9.10")})
	d := Diff(table, changed)
	if d.Full {
		t.Fatalf("delta is full: %s", d.Reason)
	}
	if _, err := c.WriteDeltaAt(d, changed, first.Generation); err != nil {
		t.Fatal(err)
	}
	if got, err := c.TableComment(table.Name); err != nil || got != owner.Comment() {
		t.Errorf("after a delta: comment %q, %v; want %q", got, err, owner.Comment())
	}

	// A guard that refuses sends nothing: no generation is created.
	before, err := c.Generation()
	if err != nil {
		t.Fatal(err)
	}
	refused := errors.New("not ours")
	var seen string
	_, err = c.ApplyGuarded(changed, func(comment string, exists bool) error {
		seen = comment
		return refused
	})
	if !errors.Is(err, refused) {
		t.Errorf("ApplyGuarded with a refusing guard: %v", err)
	}
	if seen != owner.Comment() {
		t.Errorf("guard saw comment %q, want %q", seen, owner.Comment())
	}
	if after, err := c.Generation(); err != nil || after != before {
		t.Errorf("generation %d after a refused guard, was %d (%v)", after, before, err)
	}

	// A whole-table write replaces the record.
	if _, err := c.ApplyGuarded(changed, func(string, bool) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := testns.ListTable(t, ns, table.Name); !strings.Contains(got, `comment "not written by a delta"`) {
		t.Errorf("after a whole-table write:\n%s", got)
	}
}

// An owner's beacon answers Alive in the namespace it programs, from any
// Conn there, until it is released; in another namespace nobody answers.
func TestKernelOwnerBeacon(t *testing.T) {
	ns, other := testns.New(t, "nftpt"), testns.New(t, "nftpt")
	open := func(netns string) *Conn {
		c, err := Open(netns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	holder, checker, elsewhere := open(ns), open(ns), open(other)
	owner := NewOwner(time.Now())
	alive := func(c *Conn) bool {
		t.Helper()
		ok, err := c.Alive(owner)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if alive(checker) {
		t.Fatal("alive before its beacon is held")
	}
	b, err := holder.Hold(owner)
	if err != nil {
		t.Fatal(err)
	}
	if !alive(checker) {
		t.Error("not alive while its beacon is held")
	}
	if alive(elsewhere) {
		t.Error("alive in a namespace it does not program")
	}
	if _, err := checker.Hold(owner); err == nil {
		t.Error("a second beacon of the same owner was bound")
	}
	b.Close()
	if alive(checker) {
		t.Error("alive after its beacon was released")
	}
}

// beaconSquatterEnv makes TestKernelOwnerBeaconSquatter's helper process
// bind the beacon name it holds (see below) and wait to be killed.
const beaconSquatterEnv = "NFTPOLICY_TEST_BEACON_SQUATTER"

// A process of another user that binds a dead owner's beacon name (it is
// in /proc/net/unix, and the token in the table's comment) does not make
// that owner alive: a later nftpolicy would otherwise be refused the
// table for as long as the squatter runs (the adversarial pass did so
// as nobody).
func TestKernelOwnerBeaconSquatter(t *testing.T) {
	if name := os.Getenv(beaconSquatterEnv); name != "" {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
		if err == nil {
			err = unix.Bind(fd, &unix.SockaddrUnix{Name: name})
		}
		if err != nil {
			fmt.Println("bind:", err)
			os.Exit(1)
		}
		fmt.Println("bound")
		time.Sleep(time.Hour) // until killed
	}
	ns := testns.New(t, "nftpt")
	c, err := Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	owner := NewOwner(time.Now())
	cmd := exec.Command("ip", "netns", "exec", ns, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		os.Args[0], "-test.run=^TestKernelOwnerBeaconSquatter$", "-test.count=1")
	cmd.Env = append(os.Environ(), beaconSquatterEnv+"="+beaconAddr(owner).Name)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "bound" {
		t.Fatalf("the squatter did not bind the beacon name: %q", line)
	}
	alive, err := c.Alive(owner)
	if err != nil {
		t.Fatal(err)
	}
	if alive {
		t.Error("an owner is alive because a process of user nobody holds its beacon name")
	}
	// Held by root (us), as a daemon holds it after all: alive.
	cmd.Process.Kill()
	cmd.Wait()
	b, err := c.Hold(owner)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if alive, err := c.Alive(owner); err != nil || !alive {
		t.Errorf("alive while root holds the beacon: %v, %v", alive, err)
	}
}

// A Conn whose namespace was deleted says so.
func TestKernelNetnsGone(t *testing.T) {
	ns, c := openTestNS(t)
	if err := c.CheckNetns(); err != nil {
		t.Fatalf("fresh namespace: %v", err)
	}
	if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns del: %v: %s", err, out)
	}
	if err := c.CheckNetns(); !errors.Is(err, ErrNetnsGone) {
		t.Errorf("after ip netns del: %v, want ErrNetnsGone", err)
	}
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	if err := c.CheckNetns(); !errors.Is(err, ErrNetnsGone) || !strings.Contains(err.Error(), "another namespace") {
		t.Errorf("after the name was reused: %v, want another namespace", err)
	}
	if own, err := Open(""); err != nil || own.CheckNetns() != nil {
		t.Errorf("the current namespace: %v", err)
	}
}

// The Monitor signals a base chain added on the forward hook by another
// table, and not one of ours or one on another hook.
func TestKernelMonitorForwardChains(t *testing.T) {
	ns, c := openTestNS(t)
	m, err := c.Monitor("nftpolicy")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const wait = 10 * time.Second
	settle := func() {
		t.Helper()
		gen, err := c.Generation()
		if err != nil {
			t.Fatal(err)
		}
		m.Untouched(gen, gen, wait) // waits for the notifications of gen
	}
	if _, err := c.Apply(sampleTable()); err != nil { // our own forward chain
		t.Fatal(err)
	}
	testns.Nft(t, ns, "add table inet other\nadd chain inet other in { type filter hook input priority -300; }\n", "-f", "-")
	settle()
	select {
	case <-m.ForwardChains():
		t.Error("signalled for our own forward chain or another hook")
	default:
	}
	testns.Nft(t, ns, "add table ip kube\nadd chain ip kube kube-forward { type filter hook forward priority -1; }\n", "-f", "-")
	select {
	case <-m.ForwardChains():
	case <-time.After(wait):
		t.Error("no signal for another table's forward chain")
	}
}
