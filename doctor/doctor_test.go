package doctor

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nftpolicy/nftpolicy/enforcer"
	"github.com/nftpolicy/nftpolicy/nft"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		shape tableShape
		want  string
	}{
		{tableShape{family: "inet", name: "nftpolicy"}, Nftpolicy},
		{tableShape{family: "inet", name: "nftpolicy-handover"}, NftpolicyHandover},
		{tableShape{family: "ip", name: "nftpolicy-handover"}, Other},
		{tableShape{family: "ip", name: "nftpolicy"}, Other},
		{tableShape{family: "ip", name: "kube-proxy"}, KubeProxy},
		{tableShape{family: "inet", name: "kube-proxy"}, KubeProxy},
		{tableShape{family: "ip6", name: "calico"}, Calico},
		{tableShape{family: "ip", name: "filter", chains: []string{"FORWARD", "INPUT"}, base: []string{"FORWARD", "INPUT"}}, IptablesNft},
		{tableShape{family: "ip", name: "filter", chains: []string{"FORWARD", "KUBE-FORWARD", "cali-FORWARD"}, base: []string{"FORWARD"}}, "iptables-nft (kube-proxy, Calico)"},
		{tableShape{family: "ip", name: "filter", chains: []string{"forward"}, base: []string{"forward"}}, Other}, // written by hand
		{tableShape{family: "inet", name: "filter", chains: []string{"FORWARD"}, base: []string{"FORWARD"}}, Other},
		{tableShape{family: "bridge", name: "filter", base: []string{"FORWARD"}}, Ebtables},
		{tableShape{family: "inet", name: "x", chains: []string{"cali-pi-1"}}, Calico},
	} {
		if got := classify(tc.shape, "nftpolicy"); got != tc.want {
			t.Errorf("classify(%+v) = %q, want %q", tc.shape, got, tc.want)
		}
	}
}

func base(name, typ, hook string, prio int32) nft.InspectedChain {
	return nft.InspectedChain{Name: name, Hook: &nft.InspectedHook{Type: typ, Hook: hook, Priority: prio, Policy: "accept"}}
}

// TestBuildWarnings builds a report from facts read elsewhere and checks
// each kind of warning appears for what causes it, and only then.
func TestBuildWarnings(t *testing.T) {
	owner := nft.Owner{Host: "node-1", PID: 42, Token: "0123456789abcdef", Since: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Layout: enforcer.Layout - 1}
	in := &nft.Inspection{Generation: 9, Tables: []nft.InspectedTable{
		{Family: "inet", Name: "nftpolicy", Chains: []nft.InspectedChain{base("filter-forward", "filter", "forward", -5)}},
		{Family: "ip", Name: "kube-proxy", Chains: []nft.InspectedChain{base("filter-forward", "filter", "forward", -110), base("nat-postrouting", "nat", "postrouting", 100)},
			Marks: []nft.MarkUse{{Chain: "mark-for-masquerade", Kind: nft.MetaMark, Write: true, Bits: 0x4000, Value: 0x4000, Via: "nft"}}},
		{Family: "ip", Name: "filter", Chains: []nft.InspectedChain{base("FORWARD", "filter", "forward", 0)}},
		{Family: "ip", Name: "other", Chains: []nft.InspectedChain{base("fwd", "filter", "forward", -5), base("early", "filter", "forward", -300)},
			Marks: []nft.MarkUse{{Chain: "fwd", Kind: nft.CtMark, Write: true, Bits: 0x6, Via: "nft"}, {Chain: "fwd", Kind: nft.MetaMark, Bits: ^uint32(0), Value: 4, Exact: true, Via: "nft"}}},
	}}
	f := Facts{Inspection: in, Comment: owner.Comment(), HasTable: true, Alive: false, Drift: "chain filter-forward rule 0: x",
		Features: []nft.FeatureCheck{{Name: "verdict maps", Used: true}, {Name: "fib reverse-path lookup", Used: true, Err: errors.New("operation not supported")}}, GenAfter: 9}
	r := Build(f, Options{Expected: &nft.Table{}, Source: "manifests x"})
	var kinds []string
	for _, w := range r.Warnings {
		kinds = append(kinds, w.Kind)
	}
	want := []string{WarnAhead, WarnSamePriority, WarnMarkOverlap, WarnContent, WarnOwner, WarnLayout, WarnFeature}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("warning kinds (-want +got):\n%s\n%+v", diff, r.Warnings)
	}
	fwd := r.Hooks[0]
	var order []string
	for _, c := range fwd.Chains {
		order = append(order, c.Family+" "+c.Table+" "+c.Chain)
	}
	if diff := cmp.Diff([]string{"ip other early", "ip kube-proxy filter-forward", "inet nftpolicy filter-forward", "ip other fwd", "ip filter FORWARD"}, order); fwd.Hook != "forward" || diff != "" {
		t.Errorf("hook %s order (-want +got):\n%s", fwd.Hook, diff)
	}
	if len(r.Marks.Tables) != 2 || r.Marks.Tables[1].Overlap != 0x4 || r.Marks.Tables[1].CtWrite != 0x6 || len(r.Marks.Tables[1].Exact) != 1 {
		t.Errorf("marks: %+v", r.Marks.Tables)
	}

	// The same namespace, sound: our chain first, its owner running, the
	// content as compiled, every feature there.
	in.Tables = in.Tables[:3]
	in.Tables[0].Chains[0].Hook.Priority = -111
	owner.Layout = enforcer.Layout
	f = Facts{Inspection: in, Comment: owner.Comment(), HasTable: true, Alive: true, Features: f.Features[:1], GenAfter: 9}
	if r := Build(f, Options{Expected: &nft.Table{}, Source: "manifests x"}); len(r.Warnings) != 0 || r.Ours.Content != "matches" {
		t.Errorf("warnings of a sound namespace: %+v, content %q", r.Warnings, r.Ours.Content)
	}
}
