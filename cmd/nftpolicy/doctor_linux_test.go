package main

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nftpolicy/nftpolicy/doctor"
	"github.com/nftpolicy/nftpolicy/internal/testns"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const doctorDir = "testdata/doctor"

// doctorNetns makes a namespace holding a kube-proxy-like nftables table
// (testdata/doctor/kube-proxy.nft), iptables-nft tables that set and test
// the masquerade mark 0x4000 (MARK in mangle, KUBE-FORWARD in filter, as
// kube-proxy's iptables mode writes them), and our table applied with
// extra flags.
func doctorNetns(t *testing.T, extra ...string) string {
	t.Helper()
	testns.RequireRoot(t, "ip", "nft", "iptables-nft")
	ns := testns.New(t, "nftpt")
	testns.Nft(t, ns, "", "-f", filepath.Join(doctorDir, "kube-proxy.nft"))
	for _, args := range [][]string{
		{"-t", "mangle", "-A", "PREROUTING", "-j", "MARK", "--set-xmark", "0x4000/0x4000"},
		{"-N", "KUBE-FORWARD"},
		{"-A", "FORWARD", "-j", "KUBE-FORWARD"},
		{"-A", "KUBE-FORWARD", "-m", "mark", "--mark", "0x4000/0x4000", "-j", "ACCEPT"},
	} {
		testns.Exec(t, ns, "", append([]string{"iptables-nft"}, args...)...)
	}
	args := append([]string{"apply", "--manifests", clusterDir, "--node", "node-1", "--netns", ns}, extra...)
	if code, _, stderr := nftpolicy(t, args...); code != 0 {
		t.Fatalf("apply exited %d: %s", code, stderr)
	}
	return ns
}

// runDoctorIn runs doctor in ns and checks it changed nothing there.
func runDoctorIn(t *testing.T, ns string, args ...string) string {
	t.Helper()
	before := testns.Nft(t, ns, "", "list", "ruleset")
	code, stdout, stderr := nftpolicy(t, append([]string{"doctor", "--netns", ns}, args...)...)
	if code != 0 {
		t.Fatalf("doctor exited %d: %s", code, stderr)
	}
	if after := testns.Nft(t, ns, "", "list", "ruleset"); after != before {
		t.Errorf("doctor changed the ruleset:\n%s", cmp.Diff(before, after))
	}
	return stdout
}

// normalize replaces the parts of a report that change from run to run.
func normalize(report, ns string) string {
	for _, r := range []struct{ re, with string }{
		{`(?m)^(ruleset generation:) \d+$`, "$1 GEN"},
		{`(?m)^(owner:) \S+$`, "$1 HOST/PID/TOKEN"},
		{`(?m)^(owner since:) \S+$`, "$1 TIME"},
		{`(?m)^((owner )?layout( of this build)?:) \d+$`, "$1 LAYOUT"},
		{`owner \S+/\d+/[0-9a-f]{16} does not run`, "owner HOST/PID/TOKEN does not run"},
	} {
		report = regexp.MustCompile(r.re).ReplaceAllString(report, r.with)
	}
	return strings.ReplaceAll(report, ns, "NETNS")
}

// TestIntegrationDoctorText compares the text report on a node with
// kube-proxy's nftables table, iptables-nft's mark 0x4000 and our table
// at the auto priority with testdata/doctor/report.golden.
func TestIntegrationDoctorText(t *testing.T) {
	ns := doctorNetns(t)
	got := normalize(runDoctorIn(t, ns, "--manifests", clusterDir, "--node", "node-1"), ns)
	golden := filepath.Join(doctorDir, "report.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("doctor report (-want +got), regenerate with -update:\n%s", diff)
	}
}

func doctorJSON(t *testing.T, ns string, args ...string) *doctor.Report {
	t.Helper()
	var r doctor.Report
	out := runDoctorIn(t, ns, append([]string{"--json"}, args...)...)
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	return &r
}

func warningKinds(r *doctor.Report) []string {
	var kinds []string
	for _, w := range r.Warnings {
		kinds = append(kinds, w.Kind)
	}
	return kinds
}

// TestIntegrationDoctorJSON checks the JSON report's fields: the mark mask
// 0x4000 (kube-proxy's bit) overlaps iptables-nft's MARK, decoded from its
// xtables data, and makes the compiled table differ from the kernel's; a
// priority of 0 shares iptables-nft's and runs after kube-proxy's.
func TestIntegrationDoctorJSON(t *testing.T) {
	ns := doctorNetns(t)
	r := doctorJSON(t, ns, "--mark-mask", "0x4000", "--manifests", clusterDir, "--node", "node-1")
	if diff := cmp.Diff([]string{"kube-proxy 0x00004000"}, r.Marks.KnownUsers); diff != "" {
		t.Errorf("knownUsers (-want +got):\n%s", diff)
	}
	overlaps := map[string]doctor.Hex{}
	var mangle *doctor.TableMarks
	for i, tm := range r.Marks.Tables {
		overlaps[tm.Family+" "+tm.Table] = tm.Overlap
		if tm.Family == "ip" && tm.Table == "mangle" {
			mangle = &r.Marks.Tables[i]
		}
	}
	if diff := cmp.Diff(map[string]doctor.Hex{"ip filter": 0x4000, "ip kube-proxy": 0x4000, "ip mangle": 0x4000}, overlaps); diff != "" {
		t.Errorf("overlaps (-want +got):\n%s", diff)
	}
	if mangle == nil || mangle.Component != "iptables-nft" || mangle.MetaWrite != 0x4000 || len(mangle.Uses) != 1 || mangle.Uses[0].Via != "xt MARK rev 2" {
		t.Errorf("ip mangle: %+v", mangle)
	}
	kinds := warningKinds(r)
	for _, k := range []string{doctor.WarnKnownUser, doctor.WarnMarkOverlap, doctor.WarnContent, doctor.WarnOwner} {
		if !slices.Contains(kinds, k) {
			t.Errorf("no %s warning: %+v", k, r.Warnings)
		}
	}
	if slices.Contains(kinds, doctor.WarnAhead) || slices.Contains(kinds, doctor.WarnSamePriority) {
		t.Errorf("priority warnings at the auto priority: %+v", r.Warnings)
	}
	if r.Ours.Content == "matches" || r.Ours.Owner == nil || r.Ours.Owner.Alive || r.MarkMask != 0x4000 {
		t.Errorf("ours: %+v, mask %s", r.Ours, r.MarkMask)
	}
	for _, f := range r.Features {
		if !f.OK {
			t.Errorf("feature %s: %s", f.Name, f.Error)
		}
	}

	// Our chain at priority 0: with iptables-nft's FORWARD, after kube-proxy's.
	if code, _, stderr := nftpolicy(t, "apply", "--manifests", clusterDir, "--node", "node-1", "--netns", ns, "--priority", "0"); code != 0 {
		t.Fatalf("apply exited %d: %s", code, stderr)
	}
	r = doctorJSON(t, ns)
	var ahead, same []string
	for _, w := range r.Warnings {
		switch w.Kind {
		case doctor.WarnAhead:
			ahead = append(ahead, w.Message)
		case doctor.WarnSamePriority:
			same = append(same, w.Message)
		}
	}
	if len(ahead) != 1 || !strings.Contains(ahead[0], "ip kube-proxy filter-forward (priority -110)") ||
		len(same) != 1 || !strings.Contains(same[0], "ip filter FORWARD has the priority 0") {
		t.Errorf("runs-ahead %q, same-priority %q", ahead, same)
	}
	if r.Ours.Source != "" || r.Ours.Content != "" {
		t.Errorf("content compared without a source: %+v", r.Ours)
	}
}

// TestIntegrationDoctorOwnerRunning checks the owner of a table a running
// daemon keeps is reported running, with this build's layout.
func TestIntegrationDoctorOwnerRunning(t *testing.T) {
	ns := doctorNetns(t)
	d := startDaemon(t, "--manifests", clusterDir, "--node", "node-1", "--netns", ns)
	d.waitGeneration(t, 0)
	r := doctorJSON(t, ns, "--manifests", clusterDir, "--node", "node-1")
	if o := r.Ours.Owner; o == nil || !o.Alive || o.Layout != r.Ours.Layout || r.Ours.Content != "matches" {
		t.Errorf("ours: %+v, owner %+v", r.Ours, o)
	}
	if len(r.Warnings) != 0 {
		t.Errorf("warnings: %+v", r.Warnings)
	}
}
