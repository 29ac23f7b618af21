package nft

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

func le32(vs ...uint32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.NativeEndian.AppendUint32(b, v)
	}
	return b
}

func xtInfo(b []byte) *xt.Unknown { u := xt.Unknown(b); return &u }

// TestMarkUses decodes the expressions nft and iptables-nft write for the
// mark statements of kube-proxy, Calico and friends (as `nft --debug
// netlink` prints them).
func TestMarkUses(t *testing.T) {
	const all = ^uint32(0)
	loadMark := &expr.Meta{Key: expr.MetaKeyMARK, Register: 1}
	setMark := &expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1}
	bitwise := func(and, xor uint32) *expr.Bitwise {
		return &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: le32(and), Xor: le32(xor)}
	}
	for _, tc := range []struct {
		name  string
		exprs []expr.Any
		want  []MarkUse
	}{
		{"meta mark set meta mark | 0x4000", []expr.Any{loadMark, bitwise(^uint32(0x4000), 0x4000), setMark},
			[]MarkUse{{Kind: MetaMark, Write: true, Bits: 0x4000, Value: 0x4000, Via: "nft"}}},
		{"meta mark set meta mark ^ 0x4000", []expr.Any{loadMark, bitwise(all, 0x4000), setMark},
			[]MarkUse{{Kind: MetaMark, Write: true, Bits: 0x4000, Value: 0x4000, Via: "nft"}}},
		{"meta mark & 0x4000 == 0 return", []expr.Any{loadMark, bitwise(0x4000, 0), &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: le32(0)}, &expr.Verdict{Kind: expr.VerdictReturn}},
			[]MarkUse{{Kind: MetaMark, Bits: 0x4000, Via: "nft"}}},
		{"meta mark 0x4000 (exact)", []expr.Any{loadMark, &expr.Cmp{Register: 1, Data: le32(0x4000)}},
			[]MarkUse{{Kind: MetaMark, Bits: all, Value: 0x4000, Exact: true, Via: "nft"}}},
		{"meta mark set 0x10", []expr.Any{&expr.Immediate{Register: 1, Data: le32(0x10)}, setMark},
			[]MarkUse{{Kind: MetaMark, Write: true, Bits: all, Value: 0x10, Via: "nft"}}},
		{"ct mark set meta mark (save)", []expr.Any{loadMark, &expr.Ct{Key: expr.CtKeyMARK, SourceRegister: true, Register: 1}},
			[]MarkUse{{Kind: MetaMark, Bits: all, Via: "nft"}, {Kind: CtMark, Write: true, Bits: all, Via: "nft"}}},
		{"meta mark set ct mark & 0xff (restore)", []expr.Any{&expr.Ct{Key: expr.CtKeyMARK, Register: 1}, bitwise(0xff, 0), setMark},
			[]MarkUse{{Kind: CtMark, Bits: 0xff, Via: "nft"}, {Kind: MetaMark, Write: true, Bits: all, Via: "nft"}}},
		{"an unknown expression (nil) forgets every register", []expr.Any{loadMark, nil, &expr.Cmp{Register: 1, Data: le32(1)}}, nil},
		{"ct mark & 0x10 == 0x10 vmap", []expr.Any{&expr.Ct{Key: expr.CtKeyMARK, Register: 1}, bitwise(0x10, 0), &expr.Lookup{SourceRegister: 1, SetName: "m"}},
			[]MarkUse{{Kind: CtMark, Bits: 0x10, Via: "nft"}}},
		{"a payload load over the mark register forgets it", []expr.Any{loadMark, &expr.Payload{DestRegister: 1, Len: 4}, &expr.Cmp{Register: 1, Data: le32(1)}}, nil},
		{"an unknown expression forgets every register", []expr.Any{loadMark, &expr.SynProxy{}, &expr.Cmp{Register: 1, Data: le32(1)}}, nil},
		{"xt MARK --set-xmark 0x4000/0x4000", []expr.Any{&expr.Target{Name: "MARK", Rev: 2, Info: xtInfo(le32(0x4000, 0x4000))}},
			[]MarkUse{{Kind: MetaMark, Write: true, Bits: 0x4000, Value: 0x4000, Via: "xt MARK rev 2"}}},
		{"xt MARK --and-mark 0xffff00ff", []expr.Any{&expr.Target{Name: "MARK", Rev: 2, Info: xtInfo(le32(0, 0xff00))}},
			[]MarkUse{{Kind: MetaMark, Write: true, Bits: 0xff00, Via: "xt MARK rev 2"}}},
		{"xt mark --mark 0x4000/0x4000", []expr.Any{&expr.Match{Name: "mark", Rev: 1, Info: xtInfo(append(le32(0x4000, 0x4000), 0, 0, 0, 0, 0, 0, 0, 0))}},
			[]MarkUse{{Kind: MetaMark, Bits: 0x4000, Value: 0x4000, Via: "xt mark rev 1"}}},
		{"xt connmark --mark 0x10/0x10", []expr.Any{&expr.Match{Name: "connmark", Rev: 1, Info: xtInfo(append(le32(0x10, 0x10), 1, 0, 0, 0, 0, 0, 0, 0))}},
			[]MarkUse{{Kind: CtMark, Bits: 0x10, Value: 0x10, Via: "xt connmark rev 1"}}},
		{"xt CONNMARK --restore-mark --nfmask 0xff --ctmask 0xff", []expr.Any{&expr.Target{Name: "CONNMARK", Rev: 2, Info: xtInfo(append(le32(0, 0xff, 0xff), 0, 0, connmarkRestore, 0))}},
			[]MarkUse{{Kind: CtMark, Bits: 0xff, Via: "xt CONNMARK rev 2"}, {Kind: MetaMark, Write: true, Bits: 0xff, Via: "xt CONNMARK rev 2"}}},
		{"xt CONNMARK --save-mark", []expr.Any{&expr.Target{Name: "CONNMARK", Rev: 1, Info: xtInfo(append(le32(0, all, all), connmarkSave, 0, 0, 0))}},
			[]MarkUse{{Kind: MetaMark, Bits: all, Via: "xt CONNMARK rev 1"}, {Kind: CtMark, Write: true, Bits: all, Via: "xt CONNMARK rev 1"}}},
		{"xt MARK rev 0 is not decoded", []expr.Any{&expr.Target{Name: "MARK", Rev: 0, Info: xtInfo(make([]byte, 8))}},
			[]MarkUse{{Kind: MetaMark, Write: true, Bits: all, Via: "xt MARK rev 0", Undecoded: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := MarkUses("c", 7, tc.exprs)
			for i := range tc.want {
				tc.want[i].Chain, tc.want[i].Handle = "c", 7
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("MarkUses (-want +got):\n%s", diff)
			}
		})
	}
}

// TestKernelInspectIptablesMarks reads back what iptables-nft writes for
// MARK, CONNMARK and the mark and connmark matches, and the base chains of
// an nft table next to them.
func TestKernelInspectIptablesMarks(t *testing.T) {
	testns.RequireRoot(t, "ip", "nft", "iptables-nft")
	ns := testns.New(t, "nftpt")
	testns.Exec(t, ns, "", "iptables-nft", "-t", "mangle", "-A", "PREROUTING", "-j", "MARK", "--set-xmark", "0x4000/0x4000")
	testns.Exec(t, ns, "", "iptables-nft", "-t", "mangle", "-A", "PREROUTING", "-j", "CONNMARK", "--restore-mark", "--nfmask", "0xff", "--ctmask", "0xff")
	testns.Exec(t, ns, "", "iptables-nft", "-t", "mangle", "-A", "FORWARD", "-m", "connmark", "--mark", "0x10/0x10", "-j", "ACCEPT")
	testns.Exec(t, ns, "", "iptables-nft", "-A", "FORWARD", "-m", "mark", "--mark", "0x8000/0x8000", "-j", "DROP")
	testns.Nft(t, ns, "table inet t { chain f { type filter hook forward priority -7; policy drop; meta mark 0x4000 accept\n}\n}\n", "-f", "-")
	c, err := Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	in, err := c.Inspect()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]MarkUse{}
	var hooks []string
	for _, tb := range in.Tables {
		for _, u := range tb.Marks {
			u.Handle = 0 // assigned by the kernel
			got[tb.Family+" "+tb.Name] = append(got[tb.Family+" "+tb.Name], u)
		}
		for _, ch := range tb.Chains {
			if ch.Hook != nil && ch.Hook.Hook == "forward" {
				hooks = append(hooks, tb.Family+" "+tb.Name+" "+ch.Name+" "+ch.Hook.Type+" "+ch.Hook.Policy+" "+string(rune('0'+len(tb.Errors))))
			}
		}
		if len(tb.Errors) > 0 {
			t.Errorf("%s %s: %v", tb.Family, tb.Name, tb.Errors)
		}
	}
	want := map[string][]MarkUse{
		"inet t":    {{Chain: "f", Kind: MetaMark, Bits: ^uint32(0), Value: 0x4000, Exact: true, Via: "nft"}},
		"ip filter": {{Chain: "FORWARD", Kind: MetaMark, Bits: 0x8000, Value: 0x8000, Via: "nft"}}, // iptables-nft matches marks natively
		"ip mangle": {
			{Chain: "FORWARD", Kind: CtMark, Bits: 0x10, Value: 0x10, Via: "xt connmark rev 1"},
			{Chain: "PREROUTING", Kind: MetaMark, Write: true, Bits: 0x4000, Value: 0x4000, Via: "xt MARK rev 2"},
			{Chain: "PREROUTING", Kind: CtMark, Bits: 0xff, Via: "xt CONNMARK rev 2"},
			{Chain: "PREROUTING", Kind: MetaMark, Write: true, Bits: 0xff, Via: "xt CONNMARK rev 2"},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("marks (-want +got):\n%s", diff)
	}
	wantHooks := []string{"inet t f filter drop 0", "ip filter FORWARD filter accept 0", "ip mangle FORWARD filter accept 0"}
	if diff := cmp.Diff(wantHooks, hooks); diff != "" {
		t.Errorf("forward base chains (-want +got):\n%s", diff)
	}
	gen, err := c.Generation()
	if err != nil || gen != in.Generation {
		t.Errorf("generation %d now, %d inspected (%v)", gen, in.Generation, err)
	}
}

// TestKernelProbeFeatures checks every feature on this kernel, which has
// them all, in a namespace of the checks' own: neither a test namespace
// nor the test's own one sees a commit.
func TestKernelProbeFeatures(t *testing.T) {
	testns.RequireRoot(t, "ip", "nft")
	ns := testns.New(t, "nftpt")
	before := testns.Nft(t, ns, "", "list", "ruleset")
	var gens [2]uint32
	conns := [2]*Conn{}
	for i, path := range []string{ns, ""} {
		c, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if gens[i], err = c.Generation(); err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	checks, err := ProbeFeatures()
	if err != nil {
		t.Fatal(err)
	}
	if len(checks) < 6 {
		t.Errorf("%d checks, want every feature: %+v", len(checks), checks)
	}
	for _, f := range checks {
		if f.Err != nil {
			t.Errorf("%s: %v", f.Name, f.Err)
		}
	}
	for i, c := range conns {
		if now, _ := c.Generation(); now != gens[i] {
			t.Errorf("namespace %q: generation went from %d to %d", []string{ns, "(the test's)"}[i], gens[i], now)
		}
	}
	if after := testns.Nft(t, ns, "", "list", "ruleset"); after != before {
		t.Errorf("ruleset changed:\n%s", after)
	}
}

// TestKernelInspectNativeMarkWrites reads back the native mark writes that
// nft itself encodes: a `ct set` carries its source register in
// NFTA_CT_SREG, which google/nftables v0.3.0 does not decode (so a ct
// write read through it looks like a load and vanishes), and a `meta set`
// its own in NFTA_META_SREG. A copy from one mark into the other reads
// the bits it copies.
func TestKernelInspectNativeMarkWrites(t *testing.T) {
	testns.RequireRoot(t, "ip", "nft")
	ns := testns.New(t, "nftpt")
	testns.Nft(t, ns, "", "add", "table", "inet", "t")
	testns.Nft(t, ns, "", "add", "chain", "inet", "t", "c", "{ type filter hook forward priority -5; }")
	const all = ^uint32(0)
	rules := []struct {
		rule string
		want []MarkUse
	}{
		{"ct mark set meta mark", []MarkUse{{Kind: MetaMark, Bits: all}, {Kind: CtMark, Write: true, Bits: all}}},
		// The whole conntrack mark becomes (mark & 0x4): every other bit
		// is cleared, so all 32 may change.
		{"ct mark set meta mark & 0x4", []MarkUse{{Kind: MetaMark, Bits: 0x4}, {Kind: CtMark, Write: true, Bits: all}}},
		{"ct mark set 0x10", []MarkUse{{Kind: CtMark, Write: true, Bits: all, Value: 0x10}}},
		{"ct mark set ct mark | 0x10", []MarkUse{{Kind: CtMark, Write: true, Bits: 0x10, Value: 0x10}}},
		{"meta mark set ct mark & 0xff", []MarkUse{{Kind: CtMark, Bits: 0xff}, {Kind: MetaMark, Write: true, Bits: all}}},
		{"meta mark set meta mark | 0x4000", []MarkUse{{Kind: MetaMark, Write: true, Bits: 0x4000, Value: 0x4000}}},
	}
	var want []MarkUse
	for _, r := range rules {
		testns.Nft(t, ns, "", append([]string{"add", "rule", "inet", "t", "c"}, strings.Fields(r.rule)...)...)
		for _, u := range r.want {
			u.Chain, u.Via = "c", "nft"
			want = append(want, u)
		}
	}
	c, err := Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	in, err := c.Inspect()
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Tables) != 1 || len(in.Tables[0].Errors) != 0 {
		t.Fatalf("tables: %+v", in.Tables)
	}
	var got []MarkUse
	handles := map[uint64]bool{}
	for _, u := range in.Tables[0].Marks {
		handles[u.Handle] = true
		u.Handle = 0 // assigned by the kernel
		got = append(got, u)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("marks (-want +got):\n%s", diff)
	}
	if len(handles) != len(rules) || handles[0] {
		t.Errorf("handles %v, want one for each of %d rules", handles, len(rules))
	}
}
