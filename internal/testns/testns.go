// Package testns gives kernel tests throwaway network namespaces and the nft
// and ip tools inside them.
//
// # Rules
//
// Kernel tests need root, and some need tools (ip, nft, ...). Under CI (the
// CI environment variable is set) a test without them fails instead of
// skipping, so a CI run can never pass by running nothing. Every namespace is removed when its test ends, pass or
// fail, and names carry a random suffix so parallel runs never collide.
package testns

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// RequireRoot skips t unless the process is root and every one of tools is
// on the PATH; when the environment variable CI is set it fails t instead,
// so that a misconfigured CI runner cannot pass by skipping every kernel
// test.
func RequireRoot(t testing.TB, tools ...string) {
	t.Helper()
	missing := ""
	if os.Geteuid() != 0 {
		missing = "root"
	}
	for _, bin := range tools {
		if missing != "" {
			break
		}
		if _, err := exec.LookPath(bin); err != nil {
			missing = bin
		}
	}
	if missing == "" {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("this kernel test needs %s; CI is set, so failing instead of skipping", missing)
	}
	t.Skipf("this kernel test needs %s", missing)
}

// New creates a network namespace named prefix-<random>, removed when the
// test ends.
func New(t testing.TB, prefix string) string {
	t.Helper()
	RequireRoot(t)
	b := make([]byte, 4)
	rand.Read(b)
	name := prefix + "-" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() { del(t, name) })
	return name
}

// del deletes the namespace name, retrying a refusal a few times (a
// namespace still being entered or left can be busy for a moment), and
// fails the test if it stays: a namespace left behind is a leak the next
// run inherits, never to be ignored.
func del(t testing.TB, name string) {
	var out []byte
	var err error
	for range 5 {
		if out, err = exec.Command("ip", "netns", "del", name).CombinedOutput(); err == nil {
			return
		}
		if _, serr := os.Stat("/run/netns/" + name); os.IsNotExist(serr) {
			return // gone anyway
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("ip netns del %s: %v: %s (the namespace is left behind)", name, err, out)
}

// Exec runs a command inside the namespace and returns its combined output,
// failing the test on error.
func Exec(t testing.TB, netns, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", netns}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v in netns %s: %v\n%s", args, netns, err, out)
	}
	return string(out)
}

// Nft runs the nft tool inside the namespace.
func Nft(t testing.TB, netns, stdin string, args ...string) string {
	t.Helper()
	return Exec(t, netns, stdin, append([]string{"nft"}, args...)...)
}

// countersRE finds the values of a rule counter in `nft list`.
var countersRE = regexp.MustCompile(`counter packets \d+ bytes \d+`)

// WithoutCounterValues is an `nft list` with every rule counter's values
// taken out: traffic moves them and a rewrite resets them, and they are no
// part of what a table enforces, so listings compared for content must
// not see them (nftpolicy counts connections on its rules).
func WithoutCounterValues(listing string) string {
	return countersRE.ReplaceAllString(listing, "counter")
}

// ListTable is `nft list table inet NAME` inside the namespace.
func ListTable(t testing.TB, netns, table string) string {
	t.Helper()
	return Nft(t, netns, "", "list", "table", "inet", table)
}

// AssertSameAsNft is the oracle of the kernel tests. apply programs a table
// into the namespace it is given (our netlink path); text is the same table
// rendered as nft input. Both namespaces are listed with `nft list table`,
// and the listings must be identical and free of anything nft could not
// decode. It returns the listing.
func AssertSameAsNft(t testing.TB, table string, apply func(netns string) error, text string) string {
	t.Helper()
	ours, theirs := New(t, "nftpt"), New(t, "nftpt")
	if err := apply(ours); err != nil {
		t.Fatalf("apply over netlink: %v", err)
	}
	Nft(t, theirs, text, "-f", "-")
	got, want := ListTable(t, ours, table), ListTable(t, theirs, table)
	if got != want {
		t.Errorf("netlink table differs from nft -f of the rendered text\n--- nft -f:\n%s\n--- netlink:\n%s", want, got)
	}
	for _, bad := range []string{"unknown", "unsupported", "[invalid"} {
		if strings.Contains(got, bad) {
			t.Errorf("nft list prints %q:\n%s", bad, got)
		}
	}
	return got
}
