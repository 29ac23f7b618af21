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
//     not the packet path);
//   - 1k policies with ClusterNetworkPolicies (-cnp, on by default);
//   - 1k policies with the receiver selected by K = 1, 10 and 100 of them
//     (-k, on by default; "k=K"): K-1 policies of the bench namespace
//     select it, each allowing another namespace on another TCP port, as
//     a multi-tenant namespace with one policy per client team looks, and
//     one more allows the flood. It sorts last, so a layout that walks
//     the policies selecting the pod walks all of them.
//
// With cluster policies, "cnp-100" adds 100 of them, a mix of Admin and
// Baseline guardrails (internal/scale.ClusterPolicies), of which two
// Admin policies and one Baseline policy select the bench namespace: the
// flood passes every one of their rules that does not match it (peer
// sets, protocols, ports) until an Admin Pass hands it to NetworkPolicy
// (receiver) or a Baseline Accept lets it out (sender), so the sender now
// has an egress pod chain too. "cnp-100-all" is the worst case, 100 Admin
// policies all selecting the receiver, each with one Deny rule from a
// namespace the sender is not in: the receiver's Admin tier has 100
// rules, of which the one lookup of the sender's address in the tier's
// class map leaves none to walk (see "Cluster network policy" in the
// enforcer's doc.go).
//
// Each variant with counters, flow logs or cluster policies is also
// compared, round by round, with the variant it extends (for cluster
// policies: the 1k-policy table without them, "no-cnp").
//
// To try a layout before building it: -dump DIR writes every compiled
// table as nft prints it; edit one by hand and measure it with
// -load name=file (repeatable), loaded with nft -f in the node and
// compared round by round with no-cnp.
//
// -only k=1,k=1 walk keeps the named variants (and none and
// conntrack-only), e.g. to hold one under perf for longer.
//
// Run as root: go run ./hack/bench/pps [-rounds 5] [-seconds 2] [-cnp=false | -cnp-only] [-k=false | -k-only] [-only names] [-dump DIR] [-load name=file]
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	policyv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/nftpolicy/nftpolicy/enforcer"
	"github.com/nftpolicy/nftpolicy/hack/bench/internal/flood"
	"github.com/nftpolicy/nftpolicy/internal/netns"
	"github.com/nftpolicy/nftpolicy/internal/scale"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

const (
	node = "node-1"
)

func main() {
	flood.Subcommand("pps")
	os.Exit(run())
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
	withCNP := flag.Bool("cnp", true, "also measure the ClusterNetworkPolicy variants (1k policies +cnp-100, +cnp-100-all)")
	cnpOnly := flag.Bool("cnp-only", false, "measure only none, conntrack-only, 1k policies and the ClusterNetworkPolicy variants")
	withK := flag.Bool("k", true, "also measure the receiver selected by K = 1, 10 and 100 policies")
	kOnly := flag.Bool("k-only", false, "measure only none, conntrack-only and the K variants")
	var loads []string
	flag.Func("load", "name=file: also measure the ruleset in file (nft -f, e.g. a -dump edited by hand), against the 1k-policy table; repeatable", func(v string) error {
		if !strings.Contains(v, "=") {
			return fmt.Errorf("want name=file, got %q", v)
		}
		loads = append(loads, v)
		return nil
	})
	dumpDir := flag.String("dump", "", "write each compiled table, as nft list prints it, to this directory (one file per variant)")
	only := flag.String("only", "", "comma-separated variants to measure besides none and conntrack-only (e.g. \"k=1\"); all when empty")
	flag.Parse()
	if *kOnly {
		*cnpOnly, *withCNP, *withK = false, false, true
	}

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
	src, dst, err := flood.Pods(c, n)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	conn, err := nft.Open(n.NetnsPath())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer conn.Close()

	var program func(label string, snap *k8s.Snapshot, counters, flowLog, walk bool, cnps clusterPolicies) func() error
	clear := func() error {
		if err := conn.Delete(nft.FamilyInet, enforcer.DefaultTable); err != nil {
			return err
		}
		// The table may not exist; what matters is that it is gone.
		n.Exec("nft", "delete", "table", "inet", "ctonly")
		return nil
	}
	withPolicies := func(label string, namespaces, policiesPerNS int, counters, flowLog bool, cnps clusterPolicies) func() error {
		return program(label, benchSnapshot(src, dst, namespaces, policiesPerNS, flowLog, cnps), counters, flowLog, false, cnps)
	}
	program = func(label string, snap *k8s.Snapshot, counters, flowLog, walk bool, cnps clusterPolicies) func() error {
		opts := enforcer.Options{Node: node, Counters: counters, WalkPolicies: walk}
		if flowLog {
			opts.FlowLog = enforcer.FlowLog{Group: 100}
		}
		table, problems := enforcer.Compile(snap, opts)
		if len(problems) > 0 {
			fmt.Fprintln(os.Stderr, "compile:", problems)
		}
		if *dumpDir != "" {
			name := fmt.Sprintf("%s/%s.nft", *dumpDir, strings.NewReplacer(" ", "-", "+", "").Replace(label))
			if err := os.WriteFile(name, []byte(nft.Render(table)), 0o644); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}
		if cnps != noCNP && len(problems) == 0 {
			stats := tierStats(table)
			fmt.Fprintf(os.Stderr, "%s: %d cluster policies, %d tier chains of %d rules; the receiver's admin tier walks %d rules for the sender\n",
				cnps, len(snap.ClusterPolicies), stats.chains, stats.rules, stats.receiverAdmin(table, src, dst))
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
	}
	if *kOnly {
		goto kVariants
	}
	if !*cnpOnly {
		variants = append(variants,
			variant{"nftpolicy 10 policies", withPolicies("nftpolicy 10 policies", 1, 10, false, false, noCNP), ""},
			variant{"10 policies +counters", withPolicies("10 policies +counters", 1, 10, true, false, noCNP), "nftpolicy 10 policies"},
			variant{"10 policies +flow log", withPolicies("10 policies +flow log", 1, 10, true, true, noCNP), "10 policies +counters"})
	}
	variants = append(variants, variant{noCNPVariant, withPolicies(noCNPVariant, 100, 10, false, false, noCNP), ""})
	if !*cnpOnly {
		variants = append(variants,
			variant{"1k policies +counters", withPolicies("1k policies +counters", 100, 10, true, false, noCNP), noCNPVariant},
			variant{"1k policies +flow log", withPolicies("1k policies +flow log", 100, 10, true, true, noCNP), "1k policies +counters"})
	}
	if *withCNP || *cnpOnly {
		variants = append(variants,
			variant{cnp100Variant, withPolicies(cnp100Variant, 100, 10, false, false, cnp100), noCNPVariant},
			variant{cnp100AllVariant, withPolicies(cnp100AllVariant, 100, 10, false, false, cnp100All), noCNPVariant})
	}
	if !*cnpOnly {
		variants = append(variants,
			variant{"nftpolicy 10k policies", withPolicies("nftpolicy 10k policies", 100, 100, false, false, noCNP), ""},
			variant{"10k policies +counters", withPolicies("10k policies +counters", 100, 100, true, false, noCNP), "nftpolicy 10k policies"},
			variant{"10k policies +flow log", withPolicies("10k policies +flow log", 100, 100, true, true, noCNP), "10k policies +counters"})
	}
kVariants:
	if *withK && !*cnpOnly {
		for _, k := range selectingK {
			name := kVariant(k)
			vs := ""
			if k != selectingK[0] {
				vs = kVariant(selectingK[0])
			}
			variants = append(variants, variant{name, program(name, kSnapshot(src, dst, k), false, false, false, noCNP), vs})
		}
		// The same clusters with pod chains that walk every selecting
		// policy (enforcer.Options.WalkPolicies), the layout before the
		// flat stage, in the same run.
		for _, k := range selectingK {
			vs := ""
			if k != selectingK[0] {
				vs = kWalkVariant(selectingK[0])
			}
			variants = append(variants, variant{kWalkVariant(k), program(kWalkVariant(k), kSnapshot(src, dst, k), false, false, true, noCNP), vs})
		}
	}

	// Hand-made rulesets are compared with the table they were most
	// likely edited from: K=1's under -k-only, the 1k-policy table else.
	loadVs := noCNPVariant
	if *kOnly {
		loadVs = kVariant(selectingK[0])
	}
	for _, l := range loads {
		name, file, _ := strings.Cut(l, "=")
		variants = append(variants, variant{name, func() error {
			if err := clear(); err != nil {
				return err
			}
			if out, err := n.Exec("nft", "-f", file); err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		}, loadVs})
	}
	if *only != "" {
		keep := map[string]bool{"none": true, "conntrack-only": true}
		for _, name := range strings.Split(*only, ",") {
			keep[name] = true
		}
		for _, l := range loads {
			name, _, _ := strings.Cut(l, "=")
			keep[name] = true
		}
		variants = slices.DeleteFunc(variants, func(v variant) bool { return !keep[v.name] })
		for i := range variants {
			if !keep[variants[i].vs] {
				variants[i].vs = ""
			}
		}
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
			got, err := flood.Measure(src, dst, *seconds)
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
	base := flood.Median(pps["conntrack-only"])
	for _, v := range variants {
		m := flood.Median(pps[v.name])
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
		m := flood.Median(ratios)
		fmt.Printf("%-24s %-24s %11.3fx %15.1f%%\n", v.name, v.vs, m, (1/m-1)*100)
	}
	if *only != "" { // the summaries below need every variant they name
		return 0
	}
	if *withCNP || *cnpOnly {
		printCNP(pps)
	}
	if *withK && !*cnpOnly {
		printK(pps)
	}
	return 0
}

// selectingK are the numbers of policies selecting the receiver that the
// K variants measure.
var selectingK = []int{1, 10, 100}

func kVariant(k int) string { return fmt.Sprintf("k=%d", k) }

func kWalkVariant(k int) string { return fmt.Sprintf("k=%d walk", k) }

// printK summarizes the K variants of each layout: the cost over
// conntrack-only, and against K=1 of the same layout, both as time per
// packet (round by round) and as cost over conntrack-only (medians).
func printK(pps map[string][]float64) {
	base := flood.Median(pps["conntrack-only"])
	over := func(name string) float64 { return 1e9/flood.Median(pps[name]) - 1e9/base }
	fmt.Printf("\nThe receiver selected by K policies, at 1k policies\n")
	fmt.Printf("%-8s %-6s %10s %16s %18s %20s\n", "layout", "K", "pps", "ns/pkt over ct", "time/pkt vs K=1", "over-ct vs K=1")
	for _, layout := range []struct {
		label string
		name  func(int) string
	}{{"flat", kVariant}, {"walk", kWalkVariant}} {
		first := pps[layout.name(selectingK[0])]
		for _, k := range selectingK {
			with := pps[layout.name(k)]
			ratios := make([]float64, len(with))
			for r := range with {
				ratios[r] = first[r] / with[r]
			}
			fmt.Printf("%-8s %-6d %10.0f %16.0f %17.3fx %19.2fx\n", layout.label, k, flood.Median(with), over(layout.name(k)),
				flood.Median(ratios), over(layout.name(k))/over(layout.name(selectingK[0])))
		}
	}
}

// kSnapshot is the 1k-policy bench cluster with the receiver selected by k
// policies of its namespace: k-1 "client-team-<i>" policies, each allowing
// TCP port 8000+i from namespace ns-<i>, which the flood matches nowhere,
// and "zz-allow-flood", which allows it and is judged last when policies
// are walked by name.
func kSnapshot(src, dst *netns.Pod, k int) *k8s.Snapshot {
	snap := benchSnapshot(src, dst, 100, 10, false, noCNP)
	for i, np := range snap.Policies {
		if np.Namespace == "bench" && np.Name == "allow-flood" {
			np = np.DeepCopy()
			np.Name = "zz-allow-flood"
			snap.Policies[i] = np
		}
	}
	tcp := corev1.ProtocolTCP
	for i := range k - 1 {
		port := intstr.FromInt32(int32(8000 + i))
		snap.Policies = append(snap.Policies, &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprintf("client-team-%02d", i)},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pod": "dst"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: scale.NamespaceNamed(fmt.Sprintf("ns-%d", i%100))}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
				}},
			},
		})
	}
	snap.Sort()
	return snap
}

// Names of the variants the ClusterNetworkPolicy summary compares.
const (
	noCNPVariant     = "nftpolicy 1k policies"
	cnp100Variant    = "1k policies +cnp-100"
	cnp100AllVariant = "1k policies +cnp-100-all"
)

// printCNP summarizes what cluster policies cost per NEW packet at 1k
// policies: over conntrack-only, and against the same table without them
// (no-cnp), round by round.
func printCNP(pps map[string][]float64) {
	base := flood.Median(pps["conntrack-only"])
	without := pps[noCNPVariant]
	fmt.Printf("\nClusterNetworkPolicy at 1k NetworkPolicies (no-cnp: %q)\n", noCNPVariant)
	fmt.Printf("%-12s %10s %16s %16s %18s\n", "variant", "pps", "ns/pkt over ct", "pps vs no-cnp", "ns/pkt vs no-cnp")
	for _, v := range []struct{ label, name string }{{"no-cnp", noCNPVariant}, {"cnp-100", cnp100Variant}, {"cnp-100-all", cnp100AllVariant}} {
		with := pps[v.name]
		ratios := make([]float64, len(with))
		for r := range with {
			ratios[r] = with[r] / without[r]
		}
		m, ratio := flood.Median(with), flood.Median(ratios)
		// pps ratio r is a time-per-packet ratio of 1/r.
		fmt.Printf("%-12s %10.0f %16.0f %15.3fx %17.3fx\n", v.label, m, 1e9/m-1e9/base, ratio, 1/ratio)
	}
}

// benchSnapshot is a scale cluster plus the two bench pods, the receiver
// isolated for ingress by a policy that allows the sender's flow among the
// cluster's own policies, and the cluster policies cnps.
//
// With flowLog the bench namespace is annotated for flow logs.
func benchSnapshot(src, dst *netns.Pod, namespaces, policiesPerNS int, flowLog bool, cnps clusterPolicies) *k8s.Snapshot {
	snap := scale.Cluster(namespaces, 100, policiesPerNS, 100, node, false)
	// As the API server labels them; no NetworkPolicy of the cluster
	// reads the label, cluster policies select by it.
	scale.NameLabels(snap)
	bench := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench", Labels: map[string]string{corev1.LabelMetadataName: "bench"}}}
	if flowLog {
		bench.Annotations = map[string]string{k8s.FlowLogAnnotation: "true"}
	}
	snap.Namespaces = append(snap.Namespaces, bench)
	for _, p := range []*netns.Pod{src, dst} {
		snap.Pods = append(snap.Pods, k8s.NewPod(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: p.Name(), Labels: map[string]string{"pod": p.Name(), "tier": "tier-0"}},
			Spec:       corev1.PodSpec{NodeName: node},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: p.IPv4().String()}}},
		}))
	}
	udp := corev1.ProtocolUDP
	port := intstr.FromInt32(flood.Port)
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
	switch cnps {
	case cnp100:
		snap.ClusterPolicies = append(scale.ClusterPolicies(97, namespaces), benchClusterPolicies()...)
	case cnp100All:
		snap.ClusterPolicies = allSelectReceiver(100, namespaces)
	}
	snap.Sort()
	return snap
}

// clusterPolicies says which ClusterNetworkPolicies a variant's cluster
// has.
type clusterPolicies int

const (
	noCNP     clusterPolicies = iota
	cnp100                    // 97 elsewhere, 2 Admin + 1 Baseline on the flood's path
	cnp100All                 // 100 Admin, all selecting the receiver
)

func (c clusterPolicies) String() string {
	return [...]string{"no-cnp", "cnp-100", "cnp-100-all"}[c]
}

// benchClusterPolicies are the three cluster policies of cnp-100 that
// select the bench namespace, so both the sender (egress) and the
// receiver (ingress). The flood (UDP from bench/src to bench/dst port
// 9999) matches none of their rules until the last of each direction:
//
//   - bench-admin-a (Admin, priority 5): nothing on the flood's path
//     matches; it has an Accept, so the pod chain checks our bit after
//     the Admin tier;
//   - bench-admin-b (Admin, priority 6): its last rule Passes traffic
//     within the bench namespace, to NetworkPolicy (the receiver, which
//     allow-flood isolates) or to the Baseline tier (the sender, which no
//     NetworkPolicy isolates for egress);
//   - bench-baseline (Baseline): its egress rules end with an Accept of
//     the bench namespace, which lets the sender's flood out.
func benchClusterPolicies() []*policyv1beta1.ClusterNetworkPolicy {
	const (
		accept = policyv1beta1.ClusterNetworkPolicyRuleActionAccept
		deny   = policyv1beta1.ClusterNetworkPolicyRuleActionDeny
		pass   = policyv1beta1.ClusterNetworkPolicyRuleActionPass
	)
	subject := policyv1beta1.ClusterNetworkPolicySubject{Namespaces: scale.NamespaceNamed("bench")}
	team := func(t string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"team": t}}
	}
	dnsPods := &policyv1beta1.NamespacedPod{NamespaceSelector: *scale.NamespaceNamed("ns-0"), PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "app-3"}}}
	from := func(p policyv1beta1.ClusterNetworkPolicyIngressPeer) []policyv1beta1.ClusterNetworkPolicyIngressPeer {
		return []policyv1beta1.ClusterNetworkPolicyIngressPeer{p}
	}
	to := func(p policyv1beta1.ClusterNetworkPolicyEgressPeer) []policyv1beta1.ClusterNetworkPolicyEgressPeer {
		return []policyv1beta1.ClusterNetworkPolicyEgressPeer{p}
	}
	protocols := func(p ...policyv1beta1.ClusterNetworkPolicyProtocol) []policyv1beta1.ClusterNetworkPolicyProtocol {
		return p
	}
	return []*policyv1beta1.ClusterNetworkPolicy{
		{ObjectMeta: metav1.ObjectMeta{Name: "bench-admin-a"}, Spec: policyv1beta1.ClusterNetworkPolicySpec{
			Tier: policyv1beta1.AdminTier, Priority: 5, Subject: subject,
			Ingress: []policyv1beta1.ClusterNetworkPolicyIngressRule{
				{Name: "quarantine", Action: deny, From: from(policyv1beta1.ClusterNetworkPolicyIngressPeer{Namespaces: team("team-1")})},
				{Name: "no-ssh", Action: deny, From: from(policyv1beta1.ClusterNetworkPolicyIngressPeer{Namespaces: &metav1.LabelSelector{}}), Protocols: protocols(scale.TCPPort(22))},
				{Name: "monitoring", Action: accept, From: from(policyv1beta1.ClusterNetworkPolicyIngressPeer{Pods: &policyv1beta1.NamespacedPod{
					NamespaceSelector: *team("team-2"), PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "app-0"}},
				}}), Protocols: protocols(scale.TCPPort(9090))},
			},
			Egress: []policyv1beta1.ClusterNetworkPolicyEgressRule{
				{Name: "no-metadata", Action: deny, To: to(policyv1beta1.ClusterNetworkPolicyEgressPeer{Networks: []policyv1beta1.CIDR{"169.254.169.254/32"}})},
				{Name: "quarantine", Action: deny, To: to(policyv1beta1.ClusterNetworkPolicyEgressPeer{Namespaces: team("team-1")})},
				{Name: "dns", Action: accept, To: to(policyv1beta1.ClusterNetworkPolicyEgressPeer{Pods: dnsPods}), Protocols: protocols(scale.UDPPort(53))},
			},
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "bench-admin-b"}, Spec: policyv1beta1.ClusterNetworkPolicySpec{
			Tier: policyv1beta1.AdminTier, Priority: 6, Subject: subject,
			Ingress: []policyv1beta1.ClusterNetworkPolicyIngressRule{
				{Name: "no-lab", Action: deny, From: from(policyv1beta1.ClusterNetworkPolicyIngressPeer{Namespaces: team("team-3")}), Protocols: protocols(scale.UDPPortRange(5000, 5100))},
				{Name: "same-namespace", Action: pass, From: from(policyv1beta1.ClusterNetworkPolicyIngressPeer{Namespaces: scale.NamespaceNamed("bench")})},
			},
			Egress: []policyv1beta1.ClusterNetworkPolicyEgressRule{
				{Name: "no-redis", Action: deny, To: to(policyv1beta1.ClusterNetworkPolicyEgressPeer{Namespaces: team("team-4")}), Protocols: protocols(scale.TCPPort(6379))},
				{Name: "same-namespace", Action: pass, To: to(policyv1beta1.ClusterNetworkPolicyEgressPeer{Namespaces: scale.NamespaceNamed("bench")})},
			},
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "bench-baseline"}, Spec: policyv1beta1.ClusterNetworkPolicySpec{
			Tier: policyv1beta1.BaselineTier, Priority: 10, Subject: subject,
			Ingress: []policyv1beta1.ClusterNetworkPolicyIngressRule{
				{Name: "same-namespace", Action: accept, From: from(policyv1beta1.ClusterNetworkPolicyIngressPeer{Namespaces: scale.NamespaceNamed("bench")})},
				{Name: "default-deny", Action: deny, From: from(policyv1beta1.ClusterNetworkPolicyIngressPeer{Namespaces: &metav1.LabelSelector{}})},
			},
			Egress: []policyv1beta1.ClusterNetworkPolicyEgressRule{
				{Name: "no-private", Action: deny, To: to(policyv1beta1.ClusterNetworkPolicyEgressPeer{Networks: []policyv1beta1.CIDR{"192.168.0.0/16"}})},
				{Name: "dns", Action: accept, To: to(policyv1beta1.ClusterNetworkPolicyEgressPeer{Pods: dnsPods}), Protocols: protocols(scale.UDPPort(53))},
				{Name: "same-namespace", Action: accept, To: to(policyv1beta1.ClusterNetworkPolicyEgressPeer{Namespaces: scale.NamespaceNamed("bench")})},
			},
		}},
	}
}

// allSelectReceiver are count Admin policies that all select the bench
// namespace for ingress, each denying ingress from one scale namespace
// (a peer set of its pods, which the sender is not in).
func allSelectReceiver(count, namespaces int) []*policyv1beta1.ClusterNetworkPolicy {
	var out []*policyv1beta1.ClusterNetworkPolicy
	for i := range count {
		out = append(out, &policyv1beta1.ClusterNetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("receiver-%d", i)},
			Spec: policyv1beta1.ClusterNetworkPolicySpec{
				Tier: policyv1beta1.AdminTier, Priority: int32(i), Subject: policyv1beta1.ClusterNetworkPolicySubject{Namespaces: scale.NamespaceNamed("bench")},
				Ingress: []policyv1beta1.ClusterNetworkPolicyIngressRule{{
					Name: "deny-" + fmt.Sprintf("ns-%d", i%namespaces), Action: policyv1beta1.ClusterNetworkPolicyRuleActionDeny,
					From: []policyv1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: scale.NamespaceNamed(fmt.Sprintf("ns-%d", i%namespaces))}},
				}},
			},
		})
	}
	return out
}

// tableStats counts a table's tier chains (admin-*, baseline-*, the
// pairs' tiers-*, with their class chains) and their rules.
type tableStats struct{ chains, rules int }

func tierStats(t *nft.Table) tableStats {
	var s tableStats
	for _, c := range t.Chains {
		if strings.HasPrefix(c.Name, "admin-") || strings.HasPrefix(c.Name, "baseline-") || strings.HasPrefix(c.Name, "tiers-") {
			s.chains++
			s.rules += len(c.Rules)
		}
	}
	return s
}

// receiverAdmin returns the rules the receiver's Admin tier walks for the
// sender's packets (-1 if it has no Admin tier), read from the table: the
// ingress dispatch map's element for its address names its pod chain,
// which jumps to the tier's chain, whose class map names the chain of the
// rules for the sender's address (0 rules when it has none).
func (tableStats) receiverAdmin(t *nft.Table, src, dst *netns.Pod) int {
	chains := map[string]*nft.Chain{}
	for _, c := range t.Chains {
		chains[c.Name] = c
	}
	sets := map[string]*nft.Set{}
	for _, s := range t.Sets {
		sets[s.Name] = s
	}
	walked := func(entry *nft.Chain) int {
		for _, r := range entry.Rules {
			for _, x := range r.Exprs {
				m, ok := x.(nft.AddrVmap)
				if !ok || sets[m.Map] == nil {
					continue
				}
				for _, e := range sets[m.Map].Elements {
					last := e.Last
					if !last.IsValid() {
						last = e.Addr
					}
					if e.Addr.Compare(src.IPv4()) <= 0 && src.IPv4().Compare(last) <= 0 && chains[e.Verdict.Chain] != nil {
						return len(chains[e.Verdict.Chain].Rules)
					}
				}
			}
		}
		return 0
	}
	for _, s := range t.Sets {
		if !s.Verdict || !strings.HasPrefix(s.Name, "ingress-pods") {
			continue
		}
		for _, e := range s.Elements {
			if e.Addr != dst.IPv4() || chains[e.Verdict.Chain] == nil {
				continue
			}
			for _, r := range chains[e.Verdict.Chain].Rules {
				for _, x := range r.Exprs {
					if v, ok := x.(nft.Verdict); ok && v.Kind == nft.Jump && strings.HasPrefix(v.Chain, "admin-") && chains[v.Chain] != nil {
						return walked(chains[v.Chain])
					}
				}
			}
		}
	}
	return -1
}
