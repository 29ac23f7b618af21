package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nftpolicy/nftpolicy/enforcer"
	"github.com/nftpolicy/nftpolicy/internal/netns"
	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// Faults injected one after another into a running nftpolicy while the
// probers run: a half-written policies file, a policies file that cannot
// be read, our table tampered with three ways, and at last the node's
// network namespace deleted. Through each, what was programmed before
// stays in force (every probe agrees with it; a tampered table is excused
// only until the daemon repairs it), the daemon turns unready naming the
// cause, and it is ready again, with the fix programmed, once the fault is
// gone. The kernel refusing a batch, a missing CAP_NET_ADMIN and an API
// server that is down cannot be injected into a running daemon from
// outside; nft's TestKernelApplyReplacesAtomically, cmd's
// TestIntegrationMissingCapabilities and k8s's informer tests keep them.
func TestChurnFaultsUnderProbing(t *testing.T) {
	ch := newChurn(t, churnSeed(t))
	for {
		ch.edit()
		allowed := ch.allowed(ch.snapshot())
		if containsBoth(allowed) {
			break
		}
	}
	dir := t.TempDir()
	policiesPath := filepath.Join(dir, policiesFile)
	cluster, policies := ch.files()
	for name, content := range map[string]string{clusterFile: cluster, policiesFile: policies} {
		if err := netns.WriteFileAtomic(filepath.Join(dir, name), []byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	d := netns.StartTestDaemons(t, ch.c, dir, netns.DaemonOptions{})
	allowed := ch.allowed(ch.snapshot())
	tl := netns.NewTimeline(allowed)
	p := ch.startProbers()
	stopped := false
	defer func() {
		if !stopped {
			p.stop()
		}
	}()
	settle := func() {
		for n := p.full.Count(); p.full.Count() < n+2*len(ch.targets); {
			time.Sleep(20 * time.Millisecond)
		}
	}
	listing := func() string {
		out, err := ch.node.Exec("nft", "list", "table", "inet", enforcer.DefaultTable)
		if err != nil {
			t.Fatalf("nft list: %v\n%s", err, out)
		}
		return canonicalListing(string(out))
	}
	unready := func(fault, want string) {
		t.Helper()
		body, err := d.WaitUnready(want)
		if err != nil {
			t.Fatalf("%s: %v", fault, err)
		}
		t.Logf("%s: /readyz 503 %q", fault, firstLine(body))
	}
	// fix makes the next policies programmed, as a change of state.
	fix := func(fault string, f func() error) {
		t.Helper()
		before, err := d.Generations()
		if err != nil {
			t.Fatal(err)
		}
		tl.Begin()
		if err := f(); err != nil {
			t.Fatal(err)
		}
		if err := d.WaitSynced(before); err != nil {
			t.Fatalf("%s fixed: %v", fault, err)
		}
		allowed = ch.allowed(ch.snapshot())
		tl.Settle(allowed)
	}
	settle()
	faults := 0

	// A half-written policies file: the next version cut in the middle of
	// a document. The file keeps its last good objects.
	good := listing()
	ch.editPolicy() // the cluster file stays as it is
	_, next := ch.files()
	cut := next + "---\n{\"apiVersion\": \"networking.k8s.io/v1\", \"kind\": \"NetworkPolicy\", \"metadata\": {\"na"
	if i := strings.LastIndex(next, "---"); i >= 0 {
		cut = next[:i+len(next[i:])/2]
	}
	if err := os.WriteFile(policiesPath, []byte(cut), 0o644); err != nil {
		t.Fatal(err)
	}
	faults++
	unready("a half-written policies file", policiesFile)
	settle()
	if got := listing(); got != good {
		t.Errorf("a half-written policies file changed the table:\n%s", got)
	}
	fix("the half-written file", func() error { return netns.WriteFileAtomic(policiesPath, []byte(next)) })
	settle()

	// A policies file that cannot be read: a FIFO in its place, which a
	// reader would block on forever.
	good = listing()
	fifo := filepath.Join(dir, ".fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fifo, policiesPath); err != nil {
		t.Fatal(err)
	}
	faults++
	unready("a policies file that cannot be read", policiesFile)
	settle()
	if got := listing(); got != good {
		t.Errorf("an unreadable policies file changed the table:\n%s", got)
	}
	ch.editPolicy()
	_, next = ch.files()
	fix("the unreadable file", func() error {
		if err := os.Remove(policiesPath); err != nil {
			return err
		}
		return netns.WriteFileAtomic(policiesPath, []byte(next))
	})
	settle()

	// Our table tampered with by someone else: anything goes from the
	// tamper until the daemon has written the table back as it was.
	for _, tamper := range []struct {
		what string
		nft  []string
	}{
		{"the base chain flushed", []string{"flush", "chain", "inet", enforcer.DefaultTable, "filter-forward"}},
		{"an accept-all rule inserted first", []string{"insert", "rule", "inet", enforcer.DefaultTable, "filter-forward", "accept"}},
		{"the table deleted", []string{"delete", "table", "inet", enforcer.DefaultTable}},
	} {
		good = listing()
		tl.Begin()
		if out, err := ch.node.Exec(append([]string{"nft"}, tamper.nft...)...); err != nil {
			t.Fatalf("%s: %v\n%s", tamper.what, err, out)
		}
		tl.SettleUnknown()
		faults++
		tl.Begin()
		start := time.Now()
		for {
			out, _ := ch.node.Exec("nft", "list", "table", "inet", enforcer.DefaultTable)
			if canonicalListing(string(out)) == good {
				break
			}
			if time.Since(start) > 20*time.Second {
				t.Fatalf("%s: the table was not repaired within 20s:\n%s\nlog:\n%s", tamper.what, out, d.Logs(ch.node))
			}
			time.Sleep(5 * time.Millisecond)
		}
		tl.Settle(allowed)
		t.Logf("%s: repaired, seen %v after the tamper", tamper.what, time.Since(start).Round(time.Millisecond))
		settle()
	}
	stopped = true
	ch.judge(p, tl, "faults")

	// The node's network namespace deleted: nothing is left to protect,
	// and the daemon says so.
	if out, err := exec.Command("ip", "netns", "delete", ch.node.NetnsName()).CombinedOutput(); err != nil {
		t.Fatalf("ip netns delete: %v\n%s", err, out)
	}
	faults++
	unready("the network namespace deleted", "network namespace is gone")
	t.Logf("faults injected: %d", faults)
}

// elementsRE finds the element list of a set or map in `nft list`.
var elementsRE = regexp.MustCompile(`elements = \{([^}]*)\}`)

// canonicalListing is an `nft list table` in an order that depends on
// content only: the table's chains, sets and maps sorted, the elements of
// each sorted, and counters without their values. nft lists objects in the order they were created and a
// hash set's elements in the order of its buckets, so a table written
// whole lists differently from the same table reached by deltas.
func canonicalListing(s string) string {
	s = testns.WithoutCounterValues(s)
	s = elementsRE.ReplaceAllStringFunc(s, func(m string) string {
		items := strings.Split(elementsRE.FindStringSubmatch(m)[1], ",")
		for i := range items {
			items[i] = strings.TrimSpace(items[i])
		}
		slices.Sort(items)
		return "elements = { " + strings.Join(items, ", ") + " }"
	})
	var head, blocks []string
	var cur []string
	for _, line := range strings.Split(s, "\n") {
		switch {
		case cur != nil:
			cur = append(cur, line)
			if line == "\t}" {
				blocks = append(blocks, strings.Join(cur, "\n"))
				cur = nil
			}
		case strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, "\t\t") && strings.HasSuffix(line, " {"):
			cur = []string{line}
		case strings.TrimSpace(line) != "":
			head = append(head, line)
		}
	}
	slices.Sort(blocks)
	return strings.Join(head, "\n") + "\n" + strings.Join(blocks, "\n")
}

func containsBoth(b []bool) bool {
	var t, f bool
	for _, v := range b {
		t, f = t || v, f || !v
	}
	return t && f
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
