// Command pps measures what nftpolicy costs per NEW packet: one UDP flow
// that is never answered stays NEW in conntrack, so every one of its packets
// takes the policy path. A sender pod floods a receiver pod on the same node
// through the node's forward hook; an nft counter in the receiver counts
// what arrives (and drops it, so nothing answers). Variants, interleaved in
// every round:
//
//   - none: no table on the forward hook;
//   - conntrack-only: one chain `ct state established,related accept`;
//   - nftpolicy with 10, 1k and 10k policies, the receiver isolated by a
//     policy allowing the flow;
//   - the same with connection counters (enforcer.Options.Counters): the
//     rule that allows the flow counts every packet, as each is NEW;
//   - the same with counters and flow logs for the receiver's namespace
//     (enforcer.Options.FlowLog, as the daemon runs by default with the
//     namespace annotated): ahead of the rule that allows, a rule with
//     the same match, the allow-bit check and a limit evaluates every
//     packet, and logs the few the limit lets through to a group nobody
//     reads (the kernel drops them unread; reading costs the daemon,
//     not the packet path).
//
// Each variant with counters or flow logs is also compared, round by
// round, with the variant without them that ran just before it.
//
// Run as root: go run ./hack/bench/pps [-rounds 5] [-seconds 2]
package main

import (
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nftpolicy/nftpolicy/enforcer"
	"github.com/nftpolicy/nftpolicy/internal/netns"
	"github.com/nftpolicy/nftpolicy/internal/scale"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

const (
	node      = "node-1"
	floodPort = 9999
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "flood" {
		os.Exit(flood(os.Args[2:]))
	}
	os.Exit(run())
}

// flood sends UDP datagrams to ADDR:PORT for SECONDS from one socket, so
// one flow, and prints how many it sent.
func flood(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: pps flood ADDR:PORT SECONDS")
		return 2
	}
	secs, _ := strconv.ParseFloat(args[1], 64)
	conn, err := net.Dial("udp", args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	payload := make([]byte, 64)
	deadline := time.Now().Add(time.Duration(secs * float64(time.Second)))
	sent := 0
	for time.Now().Before(deadline) {
		for i := 0; i < 256; i++ {
			if _, err := conn.Write(payload); err == nil {
				sent++
			}
		}
	}
	fmt.Println(sent)
	return 0
}

type variant struct {
	name  string
	setup func() error
	vs    string // the variant it is compared with round by round, if any
}

func run() int {
	rounds := flag.Int("rounds", 5, "measured rounds, after one warm-up round")
	seconds := flag.Float64("seconds", 2, "flood duration of one measurement")
	settle := flag.Duration("settle", time.Second, "pause between programming a variant and flooding")
	flag.Parse()

	c, err := netns.NewCluster(netns.Options{Name: "ppsbench", IPv4: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	n, err := c.AddNode(node)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	src, err1 := c.AddPod(n, "bench", "src")
	dst, err2 := c.AddPod(n, "bench", "dst")
	if err := firstErr(err1, err2); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if out, err := dst.ExecInput([]byte(fmt.Sprintf(`table inet bench {
	chain input {
		type filter hook input priority 0; policy accept;
		udp dport %d counter drop
	}
}
`, floodPort)), "nft", "-f", "-"); err != nil {
		fmt.Fprintf(os.Stderr, "receiver counter: %v\n%s", err, out)
		return 1
	}
	conn, err := nft.Open(n.NetnsPath())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer conn.Close()

	clear := func() error {
		if err := conn.Delete(nft.FamilyInet, enforcer.DefaultTable); err != nil {
			return err
		}
		// The table may not exist; what matters is that it is gone.
		n.Exec("nft", "delete", "table", "inet", "ctonly")
		return nil
	}
	withPolicies := func(namespaces, policiesPerNS int, counters, flowLog bool) func() error {
		snap := benchSnapshot(src, dst, namespaces, policiesPerNS, flowLog)
		opts := enforcer.Options{Node: node, Counters: counters}
		if flowLog {
			opts.FlowLog = enforcer.FlowLog{Group: 100}
		}
		table, problems := enforcer.Compile(snap, opts)
		if len(problems) > 0 {
			fmt.Fprintln(os.Stderr, "compile:", problems)
		}
		return func() error {
			if err := clear(); err != nil {
				return err
			}
			_, err := conn.Apply(table)
			return err
		}
	}
	variants := []variant{
		{"none", clear, ""},
		{"conntrack-only", func() error {
			if err := clear(); err != nil {
				return err
			}
			out, err := n.ExecInput([]byte("table inet ctonly {\n\tchain forward {\n\t\ttype filter hook forward priority -5; policy accept;\n\t\tct state established,related accept\n\t}\n}\n"), "nft", "-f", "-")
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		}, ""},
		{"nftpolicy 10 policies", withPolicies(1, 10, false, false), ""},
		{"10 policies +counters", withPolicies(1, 10, true, false), "nftpolicy 10 policies"},
		{"10 policies +flow log", withPolicies(1, 10, true, true), "10 policies +counters"},
		{"nftpolicy 1k policies", withPolicies(100, 10, false, false), ""},
		{"1k policies +counters", withPolicies(100, 10, true, false), "nftpolicy 1k policies"},
		{"1k policies +flow log", withPolicies(100, 10, true, true), "1k policies +counters"},
		{"nftpolicy 10k policies", withPolicies(100, 100, false, false), ""},
		{"10k policies +counters", withPolicies(100, 100, true, false), "nftpolicy 10k policies"},
		{"10k policies +flow log", withPolicies(100, 100, true, true), "10k policies +counters"},
	}

	pps := map[string][]float64{}
	for round := 0; round <= *rounds; round++ {
		for _, v := range variants {
			if err := v.setup(); err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", v.name, err)
				return 1
			}
			// Let the kernel finish freeing the table the setup replaced
			// (nf_tables destroys it in a deferred work item) before the
			// flood competes with it for the CPU.
			time.Sleep(*settle)
			got, err := measure(src, dst, *seconds)
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", v.name, err)
				return 1
			}
			if round > 0 { // round 0 warms up
				pps[v.name] = append(pps[v.name], got)
			}
		}
	}

	fmt.Printf("per-NEW-packet cost: one unanswered UDP flow through the forward hook, %d rounds of %.0fs after a warm-up, medians\n", *rounds, *seconds)
	fmt.Printf("%-24s %12s %12s %16s\n", "variant", "pps", "vs ct-only", "ns/pkt over ct")
	base := median(pps["conntrack-only"])
	for _, v := range variants {
		m := median(pps[v.name])
		fmt.Printf("%-24s %12.0f %11.3fx %16.0f\n", v.name, m, m/base, 1e9/m-1e9/base)
	}
	// Counters against the same table without them, flow logs against
	// the same table with counters only, round by round: the two ran
	// seconds apart, so the ratio is less noisy than the medians'.
	fmt.Printf("\n%-24s %-24s %12s %16s\n", "variant", "against", "pps ratio", "cost per packet")
	for _, v := range variants {
		if v.vs == "" {
			continue
		}
		with, without := pps[v.name], pps[v.vs]
		ratios := make([]float64, len(with))
		for r := range with {
			ratios[r] = with[r] / without[r]
		}
		m := median(ratios)
		fmt.Printf("%-24s %-24s %11.3fx %15.1f%%\n", v.name, v.vs, m, (1/m-1)*100)
	}
	return 0
}

// measure floods dst from src and returns the packets per second that
// reached dst.
func measure(src, dst *netns.Pod, seconds float64) (float64, error) {
	before, err := received(dst)
	if err != nil {
		return 0, err
	}
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	target := netip.AddrPortFrom(dst.IPv4(), floodPort).String()
	out, err := exec.Command("ip", "netns", "exec", src.NetnsName(), self, "flood", target, fmt.Sprint(seconds)).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("flood: %v: %s", err, out)
	}
	after, err := received(dst)
	if err != nil {
		return 0, err
	}
	// The sender floods for exactly seconds; its start-up is outside that.
	return float64(after-before) / seconds, nil
}

var counterRE = regexp.MustCompile(`counter packets (\d+)`)

func received(dst *netns.Pod) (int, error) {
	out, err := dst.Exec("nft", "list", "table", "inet", "bench")
	if err != nil {
		return 0, fmt.Errorf("%v: %s", err, out)
	}
	m := counterRE.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no counter in %s", out)
	}
	return strconv.Atoi(string(m[1]))
}

// benchSnapshot is a scale cluster plus the two bench pods, the receiver
// isolated for ingress by a policy that allows the sender's flow among the
// cluster's own policies.
//
// With flowLog the bench namespace is annotated for flow logs.
func benchSnapshot(src, dst *netns.Pod, namespaces, policiesPerNS int, flowLog bool) *k8s.Snapshot {
	snap := scale.Cluster(namespaces, 100, policiesPerNS, 100, node, false)
	bench := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}
	if flowLog {
		bench.Annotations = map[string]string{k8s.FlowLogAnnotation: "true"}
	}
	snap.Namespaces = append(snap.Namespaces, bench)
	for _, p := range []*netns.Pod{src, dst} {
		snap.Pods = append(snap.Pods, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: p.Name(), Labels: map[string]string{"pod": p.Name(), "tier": "tier-0"}},
			Spec:       corev1.PodSpec{NodeName: node},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: p.IPv4().String()}}},
		})
	}
	udp := corev1.ProtocolUDP
	port := intstr.FromInt32(floodPort)
	snap.Policies = append(snap.Policies, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: "allow-flood"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pod": "dst"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				// Every tier-0 pod of the cluster: a peer set of thousands.
				From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}, PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "tier-0"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &port}},
			}},
		},
	})
	snap.Sort()
	return snap
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
