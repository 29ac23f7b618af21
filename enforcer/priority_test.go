package enforcer

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/nftpolicy/nftpolicy/nft"
)

func chainAt(family nft.Family, table, typ string, prio int32) nft.BaseChain {
	return nft.BaseChain{Family: family, Table: table, Name: "forward", Type: typ, Hook: "forward", Priority: prio}
}

func TestChoosePriority(t *testing.T) {
	for _, tc := range []struct {
		name    string
		others  []nft.BaseChain
		want    int32
		wantErr string
	}{
		{name: "alone", want: DefaultPriority},
		{name: "kube-proxy 1.31+ at 0", others: []nft.BaseChain{chainAt(nft.FamilyIPv4, "kube-proxy", "filter", 0)}, want: DefaultPriority},
		{name: "old kube-proxy at -110", others: []nft.BaseChain{
			chainAt(nft.FamilyIPv4, "kube-proxy", "filter", -110), chainAt(nft.FamilyIPv6, "kube-proxy", "filter", -110),
		}, want: -111},
		{name: "kube-proxy -101 and iptables-nft filter 0", others: []nft.BaseChain{
			chainAt(nft.FamilyIPv4, "kube-proxy", "filter", -101), chainAt(nft.FamilyIPv4, "filter", "filter", 0),
		}, want: -102},
		{name: "never equal to another chain, filter or not", others: []nft.BaseChain{
			chainAt(nft.FamilyIPv4, "kube-proxy", "filter", -110), chainAt(nft.FamilyInet, "other", "filter", -111),
			chainAt(nft.FamilyIPv4, "mangle", "route", -113),
		}, want: -112},
		{name: "our own table is ignored", others: []nft.BaseChain{chainAt(nft.FamilyInet, "nftpolicy", "filter", -50)}, want: DefaultPriority},
		// A whole write goes through the handover table at our priority:
		// counting it as another chain moved ours at every write.
		{name: "our handover table is ignored", others: []nft.BaseChain{chainAt(nft.FamilyInet, "nftpolicy-handover", "filter", -50)}, want: DefaultPriority},
		{name: "another family's table of that name is not ours", others: []nft.BaseChain{chainAt(nft.FamilyIPv4, "nftpolicy-handover", "filter", -50)}, want: -51},
		{name: "mangle at -150 is not a filter chain", others: []nft.BaseChain{chainAt(nft.FamilyIPv4, "mangle", "filter", -150)}, want: -151},
		// Conntrack is not on the forward hook: a chain at or below -200
		// there is just another chain to be ahead of.
		{name: "a chain at conntrack's -200", others: []nft.BaseChain{chainAt(nft.FamilyIPv4, "early", "filter", -200)}, want: -201},
		{name: "a raw-priority chain at -300", others: []nft.BaseChain{
			chainAt(nft.FamilyIPv4, "kube-proxy", "filter", -110), chainAt(nft.FamilyInet, "early", "filter", -300),
			chainAt(nft.FamilyIPv4, "other", "filter", -301),
		}, want: -302},
		// Nothing ahead is free: the lowest free priority, with an error
		// that says so (ResolvePriority warns and goes on).
		{name: "nothing is ahead of the lowest priority", others: []nft.BaseChain{chainAt(nft.FamilyIPv4, "first", "filter", math.MinInt32)},
			want: math.MinInt32 + 1, wantErr: "no forward priority is ahead of ip first chain forward (priority -2147483648); using -2147483647"},
		{name: "nothing free below", others: []nft.BaseChain{
			chainAt(nft.FamilyIPv4, "a", "filter", math.MinInt32+1), chainAt(nft.FamilyIPv4, "b", "route", math.MinInt32),
		}, want: math.MinInt32 + 2, wantErr: "no forward priority is ahead of ip a chain forward"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ChoosePriority(tc.others, DefaultTable)
			if tc.wantErr != "" {
				var notAhead *NotAheadError
				if !errors.As(err, &notAhead) || !strings.Contains(err.Error(), tc.wantErr) || got != tc.want || notAhead.Priority != tc.want {
					t.Fatalf("ChoosePriority = %d, %v; want %d and a NotAheadError %q", got, err, tc.want, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ChoosePriority = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

func TestCheckPriority(t *testing.T) {
	others := []nft.BaseChain{chainAt(nft.FamilyIPv4, "kube-proxy", "filter", -110), chainAt(nft.FamilyIPv4, "filter", "filter", 0)}
	if w := CheckPriority(-120, others, DefaultTable); len(w) != 0 {
		t.Errorf("-120 is ahead of everything, got warnings %q", w)
	}
	w := CheckPriority(-110, others, DefaultTable)
	if len(w) != 1 || !strings.Contains(w[0], "equals that of ip kube-proxy chain forward") {
		t.Errorf("CheckPriority(-110) = %q", w)
	}
	w = CheckPriority(-50, others, DefaultTable)
	if len(w) != 1 || !strings.Contains(w[0], "runs after ip kube-proxy chain forward (priority -110)") {
		t.Errorf("CheckPriority(-50) = %q", w)
	}
	// Below -200 is no problem in itself: conntrack is done before forward.
	if w := CheckPriority(-250, others, DefaultTable); len(w) != 0 {
		t.Errorf("CheckPriority(-250) = %q, want no warning", w)
	}
	w = CheckPriority(-250, append(others, chainAt(nft.FamilyIPv4, "raw", "filter", -300)), DefaultTable)
	if len(w) != 1 || !strings.Contains(w[0], "runs after ip raw chain forward (priority -300)") {
		t.Errorf("CheckPriority(-250) with a chain at -300 = %q", w)
	}
}

func TestCheckMarkMask(t *testing.T) {
	if err := CheckMarkMask(DefaultMarkMask, false); err != nil {
		t.Errorf("default mask refused: %v", err)
	}
	for _, tc := range []struct {
		mask uint32
		want []string
	}{
		{0x4000, []string{"kube-proxy"}},
		{0x00010000, []string{"Calico", "kube-router"}},
		{0x00000100, []string{"Cilium", "Istio"}},
		{0x00000001, []string{"Antrea", "Istio"}},
		{0x00001000, []string{"Azure NPM"}},
		{0x00040000, []string{"Calico", "Weave Net"}},
		{0x00008000, []string{"kubelet"}},
	} {
		err := CheckMarkMask(tc.mask, false)
		if err == nil {
			t.Errorf("mask 0x%x accepted", tc.mask)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("mask 0x%x: error %q does not name %s", tc.mask, err, w)
			}
		}
		if err := CheckMarkMask(tc.mask, true); err != nil {
			t.Errorf("mask 0x%x with overlap allowed: %v", tc.mask, err)
		}
	}
	if err := CheckMarkMask(0, true); err == nil {
		t.Error("empty mask accepted")
	}
}

// With a two-bit mask the allow bit is the lower one, both bits are cleared
// when a packet leaves, and an allow bit already on a packet (a co-resident
// sharing our bits under --allow-mark-overlap) does not let it through.
// Egress sets and tests the bit (ingress accepts at once, acceptsAtOnce):
// x/a may reach y alone.
func TestWiderMaskUsesLowestBit(t *testing.T) {
	const mask, allow = 0x0c, 0x04
	table, _ := Compile(cluster(policy("x", "deny", denyEgress), policy("x", "to-y", selecting("a"), egressRule(peers(nsPeer("y"))))),
		Options{Node: testNode, MarkMask: mask})
	if !strings.Contains(nft.Render(table), fmt.Sprintf("meta mark & 0x%08x == 0x%08x", allow, allow)) {
		t.Fatalf("the allow check does not test bit 0x%x:\n%s", allow, nft.Render(table))
	}
	trace := func(from, to string, mark uint32) nft.TraceResult {
		t.Helper()
		res, err := nft.Trace(table, "filter-forward", nft.Packet{
			Src: addrOf(t, from, nft.IPv4), Dst: addrOf(t, to, nft.IPv4), Proto: nft.ProtoTCP, Dport: 80, Mark: mark,
		})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := trace("x/a", "x/b", 0x4000|allow); res.Verdict != nft.Drop {
		t.Errorf("a preset allow bit let a denied packet through: %v", res.Path)
	}
	if res := trace("x/a", "y/a", 0x4000|mask); res.Verdict != nft.Accept || res.Mark != 0x4000 {
		t.Errorf("allowed packet: verdict %s, mark 0x%x; want accept with 0x4000 only", res.Verdict, res.Mark)
	}
}
