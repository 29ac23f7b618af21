// Command vmap measures what one address . protocol . port verdict map
// lookup costs a packet, against the chain of first-match rules it
// replaces. A sender pod floods a receiver pod on the same node with one
// unanswered UDP flow through the node's forward hook (as hack/bench/pps
// does); an nft counter in the receiver counts what arrives. Variants,
// interleaved in every round, each a table on the forward hook:
//
//   - empty: the base chain alone, policy accept;
//   - chain-N: N rules `ip saddr @peers meta l4proto udp th dport X drop`,
//     X = 10000..10000+N-1, none of which matches the flood (its source is
//     in @peers, its protocol is UDP, its port is none of them: each rule
//     runs to its port compare, the worst miss);
//   - vmap-N: one rule `ip saddr . meta l4proto . th dport vmap @m`, m
//     holding for each of @peers' ranges and each X `range . udp . X :
//     drop`: the same decision for every packet, one lookup.
//
// @peers holds 10 ranges, one of them the sender's, so vmap-N's map holds
// 10·N elements. N is 10 and 100 by default (-n).
//
// It prints packets per second as ratios only: each variant against
// empty, and vmap-N against chain-N, medians of the per-round ratios.
//
// With -exact it measures instead the exact address . protocol . port
// map (no intervals: the kernel's hash set), whose lookup should cost the
// same whatever its size, as a map of every pod address × port needs.
// N is then the number of elements, 10, 100, 1000 and 10000 by default,
// one of them the flood's own key (sender . udp . port : accept), the
// others other addresses' and ports' (drop). Variants, interleaved in
// every round as above:
//
//   - empty;
//   - exact-N: one rule `ip saddr . meta l4proto . th dport vmap @m`, m
//     exact, holding the N elements: every packet hits;
//   - interval-N: the same rule and elements in an interval map (the
//     kernel's pipapo set), for comparison;
//   - rules-N: the N elements as N first-match rules `ip saddr A meta
//     l4proto udp th dport X drop`, the flood's (accept) last: the chain
//     the map replaces, at its worst.
//
// It prints each variant against empty, exact-N against the smallest
// exact map (exact-10 by default; the claim: flat), and exact-N against
// interval-N and rules-N.
//
// Run as root: go run ./hack/bench/vmap [-exact] [-rounds 5] [-seconds 2] [-n 10,100]
package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nftpolicy/nftpolicy/hack/bench/internal/flood"
	"github.com/nftpolicy/nftpolicy/internal/netns"
	"github.com/nftpolicy/nftpolicy/nft"
)

const (
	table     = "vmapbench"
	firstPort = 10000
)

func main() {
	flood.Subcommand("vmap")
	os.Exit(run())
}

func run() int {
	rounds := flag.Int("rounds", 5, "measured rounds, after one warm-up round")
	seconds := flag.Float64("seconds", 2, "flood duration of one measurement")
	settle := flag.Duration("settle", 500*time.Millisecond, "pause between programming a variant and flooding")
	sizes := flag.String("n", "10,100", "rule counts N, comma-separated (with -exact: element counts, default 10,100,1000,10000)")
	exact := flag.Bool("exact", false, "measure the exact (hash) address . protocol . port map at N elements instead")
	flag.Parse()
	nGiven := false
	flag.Visit(func(f *flag.Flag) { nGiven = nGiven || f.Name == "n" })
	if *exact && !nGiven {
		*sizes = "10,100,1000,10000"
	}
	var ns []int
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 50000 {
			fmt.Fprintf(os.Stderr, "bad -n %q\n", f)
			return 2
		}
		ns = append(ns, n)
	}

	c, err := netns.NewCluster(netns.Options{Name: "vmapbench", IPv4: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	node, err := c.AddNode("node-1")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	src, dst, err := flood.Pods(c, node)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	conn, err := nft.Open(node.NetnsPath())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer conn.Close()

	type variant struct {
		name  string
		table *nft.Table
	}
	peers := peerRanges(src.IPv4())
	variants := []variant{{"empty", base(nil)}}
	for _, n := range ns {
		if *exact {
			elems := exactElements(src.IPv4(), n)
			variants = append(variants,
				variant{fmt.Sprintf("exact-%d", n), mapTable(elems, false)},
				variant{fmt.Sprintf("interval-%d", n), mapTable(elems, true)},
				variant{fmt.Sprintf("rules-%d", n), rulesTable(elems)})
			continue
		}
		variants = append(variants,
			variant{fmt.Sprintf("chain-%d", n), chainTable(peers, n)},
			variant{fmt.Sprintf("vmap-%d", n), vmapTable(peers, n)})
	}
	// The tracer agrees that every variant lets the flood through.
	for _, v := range variants {
		if err := v.table.Validate(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", v.name, err)
			return 1
		}
		res, err := nft.Trace(v.table, "filter-forward", nft.Packet{Src: src.IPv4(), Dst: dst.IPv4(), Proto: nft.ProtoUDP, Dport: flood.Port})
		if err != nil || res.Verdict != nft.Accept {
			fmt.Fprintf(os.Stderr, "%s: the flood would not pass: %+v, %v\n", v.name, res, err)
			return 1
		}
	}

	pps := map[string][]float64{}
	for round := 0; round <= *rounds; round++ {
		for _, v := range variants {
			if err := conn.Delete(nft.FamilyInet, table); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			if _, err := conn.Apply(v.table); err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", v.name, err)
				return 1
			}
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
	conn.Delete(nft.FamilyInet, table)

	ratio := func(a, b string) float64 {
		r := make([]float64, len(pps[a]))
		for i := range r {
			r[i] = pps[a][i] / pps[b][i]
		}
		return flood.Median(r)
	}
	fmt.Printf("one unanswered UDP flow through the forward hook, %d rounds of %.0fs after a warm-up; medians of per-round ratios\n", *rounds, *seconds)
	fmt.Printf("%-14s %14s\n", "variant", "pps vs empty")
	for _, v := range variants[1:] {
		fmt.Printf("%-14s %13.3fx\n", v.name, ratio(v.name, "empty"))
	}
	fmt.Printf("\n%-14s %-14s %14s\n", "variant", "against", "pps ratio")
	against := func(a, b string) {
		fmt.Printf("%-14s %-14s %13.3fx\n", a, b, ratio(a, b))
	}
	for _, n := range ns {
		if *exact {
			against(fmt.Sprintf("exact-%d", n), fmt.Sprintf("exact-%d", ns[0]))
			continue
		}
		against(fmt.Sprintf("vmap-%d", n), fmt.Sprintf("chain-%d", n))
	}
	if *exact {
		for _, n := range ns {
			against(fmt.Sprintf("exact-%d", n), fmt.Sprintf("interval-%d", n))
			against(fmt.Sprintf("exact-%d", n), fmt.Sprintf("rules-%d", n))
		}
	}
	return 0
}

// peerRanges are ten disjoint /24 ranges, the third the sender's.
func peerRanges(sender netip.Addr) []netip.Prefix {
	p := netip.PrefixFrom(sender, 24).Masked()
	var out []netip.Prefix
	for i := range 10 {
		b := p.Addr().As4()
		b[1] += byte(i - 2) // neighbouring /16s, one of them the sender's
		out = append(out, netip.PrefixFrom(netip.AddrFrom4(b), 24))
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return out
}

func lastOf(p netip.Prefix) netip.Addr {
	b := p.Addr().As4()
	b[3] = 255
	return netip.AddrFrom4(b)
}

func base(rules []nft.Rule) *nft.Table {
	return &nft.Table{Family: nft.FamilyInet, Name: table, Chains: []*nft.Chain{{
		Name:  "filter-forward",
		Hook:  &nft.Hook{Type: "filter", Hook: "forward", Priority: -5, Policy: nft.Accept},
		Rules: rules,
	}}}
}

// chainTable: n rules `ip saddr @peers meta l4proto udp th dport X drop`.
func chainTable(peers []netip.Prefix, n int) *nft.Table {
	set := &nft.Set{Name: "peers", Key: nft.KeyIPv4, Interval: true}
	for _, p := range peers {
		set.Elements = append(set.Elements, nft.Element{Addr: p.Addr(), Last: lastOf(p)})
	}
	var rules []nft.Rule
	for i := range n {
		rules = append(rules, nft.Rule{Exprs: []nft.Expr{
			nft.AddrInSet{Family: nft.IPv4, Field: nft.Saddr, Set: "peers"},
			nft.L4ProtoEq{Proto: nft.ProtoUDP},
			nft.DportRange{First: uint16(firstPort + i), Last: uint16(firstPort + i)},
			nft.Verdict{Kind: nft.Drop},
		}})
	}
	t := base(rules)
	t.Sets = []*nft.Set{set}
	return t
}

// vmapTable: `ip saddr . meta l4proto . th dport vmap @m`, m holding
// `peer . udp . X : drop` for every peer range and X.
func vmapTable(peers []netip.Prefix, n int) *nft.Table {
	m := &nft.Set{Name: "m", Key: nft.KeyIPv4ProtoPort, Interval: true, Verdict: true}
	for _, p := range peers {
		for i := range n {
			m.Elements = append(m.Elements, nft.Element{Addr: p.Addr(), Last: lastOf(p), Proto: nft.ProtoUDP,
				Port: uint16(firstPort + i), Verdict: nft.Verdict{Kind: nft.Drop}})
		}
	}
	t := base([]nft.Rule{{Exprs: []nft.Expr{nft.AddrProtoPortVmap{Family: nft.IPv4, Field: nft.Saddr, Map: "m"}}}})
	t.Sets = []*nft.Set{m}
	return t
}

// exactElements are n distinct keys `A . udp . X`, as a map of pod
// addresses × ports holds them: addresses from the start of the sender's
// /16, ten ports each from firstPort, drop; and, first, the flood's own
// key, accept.
func exactElements(sender netip.Addr, n int) []nft.Element {
	out := []nft.Element{{Addr: sender, Proto: nft.ProtoUDP, Port: flood.Port, Verdict: nft.Verdict{Kind: nft.Accept}}}
	for a := netip.PrefixFrom(sender, 16).Masked().Addr(); len(out) < n; a = a.Next() {
		for i := 0; i < 10 && len(out) < n; i++ {
			out = append(out, nft.Element{Addr: a, Proto: nft.ProtoUDP, Port: uint16(firstPort + i), Verdict: nft.Verdict{Kind: nft.Drop}})
		}
	}
	return out
}

// mapTable: `ip saddr . meta l4proto . th dport vmap @m`, m holding
// elems, exact or (interval) in the kernel's pipapo set.
func mapTable(elems []nft.Element, interval bool) *nft.Table {
	m := &nft.Set{Name: "m", Key: nft.KeyIPv4ProtoPort, Interval: interval, Verdict: true, Elements: elems}
	t := base([]nft.Rule{{Exprs: []nft.Expr{nft.AddrProtoPortVmap{Family: nft.IPv4, Field: nft.Saddr, Map: "m"}}}})
	t.Sets = []*nft.Set{m}
	return t
}

// rulesTable: elems as first-match rules `ip saddr A meta l4proto udp th
// dport X verdict`, the first element (the flood's) last.
func rulesTable(elems []nft.Element) *nft.Table {
	var rules []nft.Rule
	for _, e := range append(slices.Clone(elems[1:]), elems[0]) {
		rules = append(rules, nft.Rule{Exprs: []nft.Expr{
			nft.AddrEq{Field: nft.Saddr, Addr: e.Addr},
			nft.L4ProtoEq{Proto: e.Proto},
			nft.DportRange{First: e.Port, Last: e.Port},
			e.Verdict,
		}})
	}
	return base(rules)
}
