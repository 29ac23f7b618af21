package enforcer

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nftpolicy/nftpolicy/internal/testns"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// Hostile review, round 13: a node whose isolated pods have IPv6
// addresses and namespace/name of 64 bytes or more (the readable part of
// a pod chain's name is cut at 64: ingress-pod-<8 hex>-<64 bytes>, 85
// bytes). Each element of ingress-pods-v6 then takes 136 bytes of a
// message, and 512 of them (elementsPerMessage) more than a netlink
// attribute's 64 kB. The compiled table must still be written.
//
// FAILS (round 13) from 482 such pods: Apply refuses the table.
func TestHostileRound13LongPodNamesKernel(t *testing.T) {
	testns.RequireRoot(t, "nft")
	// 481 elements of 136 bytes fit a message's 64 kB; 482 do not.
	for _, pods := range []int{481, 482, 600} {
		t.Run(fmt.Sprint(pods), func(t *testing.T) { r13LongPodNames(t, pods) })
	}
}

func r13LongPodNames(t *testing.T, pods int) {
	s := cluster(policy("x", "deny", selecting("a"), denyIngress))
	s.Pods = nil
	ns := "x" + strings.Repeat("n", 40)
	s.Namespaces[0].Name = ns
	s.Namespaces[0].Labels["kubernetes.io/metadata.name"] = ns
	s.Policies[0].Namespace = ns
	for i := range pods {
		p := testPod("x", "a", func(p *k8s.Pod) {
			p.Namespace = ns
			p.Name = fmt.Sprintf("payments-api-7d9f8b6c5d-%05d", i)
			v6 := netip.AddrFrom16([16]byte{0xfd, 14: byte(i >> 8), 15: byte(i)})
			v4 := netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})
			p.Status.PodIPs = []corev1.PodIP{{IP: v4.String()}, {IP: v6.String()}}
		})
		s.Pods = append(s.Pods, p)
	}
	s.Sort()
	table, problems := Compile(s, Options{Node: testNode})
	if len(problems) > 0 {
		t.Logf("problems: %v", problems)
	}
	for _, set := range table.Sets {
		if set.Name == "ingress-pods-v6" {
			els := set.List()
			t.Logf("%s: %d elements, first verdict %v (%d bytes)", set.Name, len(els), els[0].Verdict, len(els[0].Verdict.Chain))
		}
	}
	netns := testns.New(t, "r13ln")
	c, err := nft.Open(netns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Apply(table); err != nil {
		t.Fatalf("the compiled table of %d dual-stack pods is not written: %v", pods, err)
	}
	if d, err := c.Drift(table); d != "" || err != nil {
		t.Errorf("drift: %q %v", d, err)
	}
}
