package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/nftpolicy/nftpolicy/enforcer"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// explainFlags are the flags of `nftpolicy explain` beyond the source's.
type explainFlags struct {
	from, to string // an address, or namespace/pod
	proto    string
	port     uint
}

// explain prints why the first packet of a connection from cfg.explain.from
// to cfg.explain.to gets its verdict on cfg.node: it compiles the table
// the daemon would program and asks it (enforcer.Compiler.Explain).
func explain(cfg *config, stdout io.Writer, log *zap.Logger) error {
	x := cfg.explain
	proto, ok := map[string]nft.Proto{"tcp": nft.ProtoTCP, "udp": nft.ProtoUDP, "sctp": nft.ProtoSCTP}[strings.ToLower(x.proto)]
	switch {
	case x.from == "" || x.to == "":
		return errors.New("--from and --to are required: an address or namespace/pod each")
	case !ok:
		return fmt.Errorf("--proto %q: want tcp, udp or sctp", x.proto)
	case x.port < 1 || x.port > 65535:
		return fmt.Errorf("--port %d: want 1 to 65535", x.port)
	}
	snap, objErrs, err := load(cfg, log)
	if err != nil {
		return err
	}
	nodeErr := checkNode(cfg, snap, log)
	srcs, err := resolveEndpoint(snap, x.from, "--from")
	if err != nil {
		return err
	}
	dsts, err := resolveEndpoint(snap, x.to, "--to")
	if err != nil {
		return err
	}
	// The first pair of one family, IPv4 first: a pod has an address of
	// each family in a dual-stack cluster.
	var src, dst netip.Addr
	for _, a := range srcs {
		for _, b := range dsts {
			if !src.IsValid() && a.Is4() == b.Is4() {
				src, dst = a, b
			}
		}
	}
	if !src.IsValid() {
		return fmt.Errorf("--from %s (%v) and --to %s (%v) share no address family", x.from, srcs, x.to, dsts)
	}
	opts := cfg.options()
	c := enforcer.NewCompiler(opts)
	table, problems := c.Compile(snap, enforcer.DefaultPriority)
	enforcer.LogProblems(log, problems)
	pkt := nft.Packet{Src: src, Dst: dst, Proto: proto, Dport: uint16(x.port), DNAT: src == dst}
	e, err := c.Explain(table, pkt)
	if err != nil {
		return err
	}
	for _, end := range []*enforcer.Endpoint{&e.From, &e.To} {
		end.Node = podNode(snap, end.Pod)
	}
	fmt.Fprintf(stdout, "node:    %s\nflow:    %s %s → %s port %d (its first packet)\n", cfg.node, strings.ToLower(x.proto), src, dst, x.port)
	if _, err := io.WriteString(stdout, e.String()); err != nil {
		return err
	}
	// explain reads the sources as they are; a daemon that rejected an
	// object enforces its last good version, or a stand-in, or held the
	// table from before its start, none of which explain can see.
	partial := leftOut(objErrs, problems, nodeErr)
	if partial != nil {
		fmt.Fprintf(stdout, "note:    the sources hold errors (below, exit status 3): a running daemon may enforce last good versions of those objects, not what explain read\n")
	}
	return partial
}

// resolveEndpoint reads an address, or namespace/pod: the pod's
// addresses in snap, IPv4 first.
func resolveEndpoint(snap *k8s.Snapshot, s, flag string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			// A zone scopes a link-local address to an interface of the
			// host running explain; policy never sees one.
			return nil, fmt.Errorf("%s %q: an address with a zone (%%%s) is not one policy can match; give it without", flag, s, a.Zone())
		}
		return []netip.Addr{a.Unmap()}, nil
	}
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" {
		return nil, fmt.Errorf("%s %q: want an address or namespace/pod", flag, s)
	}
	for _, p := range snap.Pods {
		if p.Namespace != ns || p.Name != name {
			continue
		}
		var addrs []netip.Addr
		for _, ip := range p.Status.PodIPs {
			if a, err := netip.ParseAddr(ip.IP); err == nil {
				addrs = append(addrs, a.Unmap())
			}
		}
		if len(addrs) == 0 || p.Spec.HostNetwork {
			return nil, fmt.Errorf("%s %s: the pod has no address of its own (none reported yet, or on the host network)", flag, s)
		}
		slices.SortStableFunc(addrs, func(a, b netip.Addr) int { return cmp.Compare(a.BitLen(), b.BitLen()) })
		return addrs, nil
	}
	return nil, fmt.Errorf("%s %s: no such pod", flag, s)
}

// podNode is the node of pod key ("namespace/name"), "" if unknown.
func podNode(snap *k8s.Snapshot, key string) string {
	for _, p := range snap.Pods {
		if p.Namespace+"/"+p.Name == key {
			return p.Spec.NodeName
		}
	}
	return ""
}
