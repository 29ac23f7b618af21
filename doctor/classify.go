package doctor

import (
	"sort"
	"strings"

	"github.com/nftpolicy/nftpolicy/nft"
)

// Components.
//
// A table is told apart by its family, its name and the names of its
// chains; nothing in the kernel says who wrote it. See doc.go for the
// rules and their limits.

// Component names.
const (
	Nftpolicy = "nftpolicy"
	// NftpolicyHandover is our handover table (nft.HandoverTable), which
	// outlives a whole write only if the write stopped half way: the
	// next whole write removes it.
	NftpolicyHandover = "nftpolicy (handover table of a whole write that stopped half way)"
	KubeProxy         = "kube-proxy"
	Calico            = "Calico"
	IptablesNft       = "iptables-nft"
	Ebtables          = "ebtables-nft"
	Arptables         = "arptables-nft"
	Firewalld         = "firewalld"
	Other             = "other"
)

// xtablesTables are the tables iptables-nft, ip6tables-nft, arptables-nft
// and ebtables-nft create, by family.
var xtablesTables = map[string]map[string]string{
	"ip":     {"filter": IptablesNft, "nat": IptablesNft, "mangle": IptablesNft, "raw": IptablesNft, "security": IptablesNft},
	"ip6":    {"filter": IptablesNft, "nat": IptablesNft, "mangle": IptablesNft, "raw": IptablesNft, "security": IptablesNft},
	"arp":    {"filter": Arptables},
	"bridge": {"filter": Ebtables, "nat": Ebtables, "broute": Ebtables},
}

// xtablesBase are the names of the built-in chains of the xtables tools:
// the only base chains they create.
var xtablesBase = map[string]bool{
	"PREROUTING": true, "INPUT": true, "FORWARD": true, "OUTPUT": true, "POSTROUTING": true, "BROUTING": true,
}

// A tableShape is what classifying a table reads.
type tableShape struct {
	family, name string
	chains       []string // every chain's name
	base         []string // the base chains' names
}

// classify names the component that wrote a table: "nftpolicy" for ours,
// "kube-proxy" and "Calico" for their nftables tables, "iptables-nft" and
// the other xtables tools for theirs, followed by the co-residents whose
// chains live in it ("iptables-nft (kube-proxy, Calico)"), and "other"
// for the rest.
func classify(t tableShape, ourTable string) string {
	name := strings.ToLower(t.name)
	switch {
	case t.family == "inet" && t.name == ourTable:
		return Nftpolicy
	case t.family == "inet" && t.name == nft.HandoverTable(ourTable):
		return NftpolicyHandover
	case name == "kube-proxy":
		return KubeProxy
	case name == "calico" || strings.HasPrefix(name, "calico-") || strings.HasPrefix(name, "calico_"):
		return Calico
	case name == "firewalld":
		return Firewalld
	}
	if tool, ok := xtablesTables[t.family][t.name]; ok && allXtablesBase(t.base) {
		var inside []string
		if hasPrefix(t.chains, "KUBE-") {
			inside = append(inside, KubeProxy)
		}
		if hasPrefix(t.chains, "cali-") {
			inside = append(inside, Calico)
		}
		if len(inside) > 0 {
			return tool + " (" + strings.Join(inside, ", ") + ")"
		}
		return tool
	}
	if hasPrefix(t.chains, "cali-") {
		return Calico
	}
	return Other
}

func allXtablesBase(base []string) bool {
	for _, b := range base {
		if !xtablesBase[b] {
			return false
		}
	}
	return true
}

func hasPrefix(names []string, prefix string) bool {
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}

// watched reports whether a component is one whose filter chains ours
// must run ahead of (the design's kube-proxy, Calico and iptables-nft,
// iptables-nft tables holding their chains included).
func watched(component string) bool {
	for _, c := range []string{KubeProxy, Calico, IptablesNft} {
		if component == c || strings.HasPrefix(component, c+" ") {
			return true
		}
	}
	return false
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
