package nft

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// Kernel features.
//
// ProbeFeatures writes one small table per feature, each encoded by the
// same code that writes ours (Conn.Apply), except for concatenated
// interval sets, which the model cannot express. It writes them in a
// network namespace it creates for the purpose and that ends with it: a
// thread locked to its goroutine unshares CLONE_NEWNET, opens its new
// namespace and goes back to its own, and the namespace lives as long as
// that handle. So the ruleset anyone sees is never touched, and no named
// namespace is left behind if the process dies. Kernel features are the
// kernel's, not a namespace's, so the answer holds for every namespace.

// probeTable names the tables of the checks.
const probeTable = "nftpolicy-probe"

// A feature is one check: the table that needs it, or a raw write.
type feature struct {
	name  string
	used  bool
	table *Table
	raw   func(c *Conn) error
}

func probeBase(rules ...Rule) *Chain {
	return &Chain{Name: "filter-forward", Hook: &Hook{Type: "filter", Hook: "forward", Priority: 0, Policy: Accept}, Rules: rules}
}

func features() []feature {
	a := netip.MustParseAddr("192.0.2.1")
	return []feature{
		{name: "verdict maps", used: true, table: &Table{Family: FamilyInet, Name: probeTable,
			Sets: []*Set{{Name: "pods", Key: KeyIPv4, Verdict: true, Elements: []Element{{Addr: a, Verdict: Verdict{Kind: Jump, Chain: "pod"}}}}},
			Chains: []*Chain{
				probeBase(Rule{Exprs: []Expr{AddrVmap{Family: IPv4, Field: Daddr, Map: "pods"}}}),
				{Name: "pod", Rules: []Rule{{Exprs: []Expr{Verdict{Kind: Drop}}}}},
			}}},
		{name: "interval sets", used: true, table: &Table{Family: FamilyInet, Name: probeTable,
			Sets: []*Set{{Name: "peers", Key: KeyIPv4, Interval: true,
				Elements: []Element{{Addr: netip.MustParseAddr("192.0.2.0"), Last: netip.MustParseAddr("192.0.2.127")}}}},
			Chains: []*Chain{probeBase(Rule{Exprs: []Expr{AddrInSet{Family: IPv4, Field: Saddr, Set: "peers"}, Verdict{Kind: Accept}}})}}},
		{name: "concatenated sets", used: true, table: &Table{Family: FamilyInet, Name: probeTable,
			Sets:   []*Set{{Name: "ports", Key: KeyIPv4ProtoPort, Elements: []Element{{Addr: a, Proto: ProtoTCP, Port: 80}}}},
			Chains: []*Chain{probeBase(Rule{Exprs: []Expr{AddrProtoPortInSet{Family: IPv4, Field: Daddr, Set: "ports"}, Verdict{Kind: Accept}}})}}},
		{name: "concatenated interval sets", used: false, raw: concatIntervalSet},
		{name: "conntrack state, status and mark", used: true, table: &Table{Family: FamilyInet, Name: probeTable,
			Chains: []*Chain{probeBase(
				Rule{Exprs: []Expr{CtStateEstablishedRelated{}, Verdict{Kind: Accept}}},
				Rule{Exprs: []Expr{CtStatusDNAT{}, Verdict{Kind: Accept}}},
				Rule{Exprs: []Expr{CtMarkBitsSet{Bits: 0x4}, Verdict{Kind: Drop}}},
			)}}},
		{name: "fib reverse-path lookup", used: true, table: &Table{Family: FamilyInet, Name: probeTable,
			Chains: []*Chain{probeBase(Rule{Exprs: []Expr{ReversePath{}, Verdict{Kind: Accept}}})}}},
		{name: "masked mark writes", used: true, table: &Table{Family: FamilyInet, Name: probeTable,
			Chains: []*Chain{probeBase(
				Rule{Exprs: []Expr{SetMark{Clear: 0x4, Set: 0x4}}},
				Rule{Exprs: []Expr{MarkBitsSet{Bits: 0x4}, Verdict{Kind: Return}}},
			)}}},
	}
}

// concatIntervalSet writes `set s { type ipv4_addr . inet_service; flags
// interval; elements = { 192.0.2.0-192.0.2.127 . 80-90 } }` (kernel 5.6:
// nft_set_pipapo).
func concatIntervalSet(c *Conn) error {
	nl, tx, err := c.newBatchConn(0)
	if err != nil {
		return err
	}
	t := nl.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: probeTable})
	s := &nftables.Set{Table: t, Name: "blocks", Interval: true, Concatenation: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetService)}
	// Each field of a concatenation is padded to 4 bytes; ports are big-endian.
	key := func(a string, port uint16) []byte {
		b := netip.MustParseAddr(a).As4()
		return append(b[:], byte(port>>8), byte(port), 0, 0)
	}
	if err := nl.AddSet(withSetID(s), []nftables.SetElement{{Key: key("192.0.2.0", 80), KeyEnd: key("192.0.2.127", 90)}}); err != nil {
		return err
	}
	_, err = tx.flush(nl)
	return err
}

// ProbeFeatures checks, in a throwaway network namespace, each kernel
// feature the table relies on. It fails only if it cannot make the
// namespace (that needs CAP_SYS_ADMIN); a feature the kernel refuses has
// the kernel's error in its FeatureCheck.
func ProbeFeatures() ([]FeatureCheck, error) {
	fd, err := throwawayNetns()
	if err != nil {
		return nil, fmt.Errorf("throwaway network namespace for the feature checks: %w", err)
	}
	c := &Conn{nsFd: fd}
	defer c.Close()
	var out []FeatureCheck
	for _, f := range features() {
		var err error
		if f.raw != nil {
			err = f.raw(c)
		} else {
			_, err = c.Apply(f.table)
		}
		out = append(out, FeatureCheck{Name: f.name, Used: f.used, Err: err})
		c.Delete(FamilyInet, probeTable)
	}
	return out, nil
}

// throwawayNetns returns a handle on a new, empty network namespace that
// ends when the handle (and every socket opened in it) is closed.
func throwawayNetns() (int, error) {
	return fdInNetns(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		return nil
	}, func() (int, error) {
		return unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}, "the new namespace")
}
