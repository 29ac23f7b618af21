package enforcer

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nftpolicy/nftpolicy/internal/reference"
	"github.com/nftpolicy/nftpolicy/nft"
)

// checkExplain explains every probe of a generated cluster (FuzzCompile)
// and holds each explanation to the table's verdict and to the reference
// evaluator: for each end that is a pod of this node, the same policies
// isolate it and the same rules allow the connection, and the verdict is
// an accept exactly when both directions allow.
func checkExplain(t *testing.T, gc *genned) {
	t.Helper()
	c := NewCompiler(Options{Node: testNode})
	table, _ := c.Compile(gc.snap, -5)
	ref := reference.New(gc.snap, testNode)
	var diffs []string
	for _, src := range gc.addrs {
		for _, dst := range gc.addrs {
			if src.Is4() != dst.Is4() || src == dst {
				continue
			}
			for _, proto := range []nft.Proto{nft.ProtoTCP, nft.ProtoUDP, nft.ProtoSCTP} {
				for _, port := range fuzzProbePorts {
					conn := reference.Conn{Src: src, Dst: dst, Proto: proto, Port: port}
					pkt := nft.Packet{Src: src, Dst: dst, Proto: proto, Dport: port, Mark: gc.mark}
					x, err := c.Explain(table, pkt)
					if err != nil {
						t.Fatalf("explain %s: %v\n%s", gc.name(conn), err, gc.yaml())
					}
					// A connection to this node crosses the input hook,
					// which holds a chain only while cluster policies
					// judge a pod's connections to its node (node.go).
					chain := forwardChainName()
					if x.To.OwnNode {
						chain = inputChainName()
					}
					res := nft.TraceResult{Verdict: nft.Accept}
					if slices.ContainsFunc(table.Chains, func(ch *nft.Chain) bool { return ch.Name == chain }) {
						if res, err = nft.Trace(table, chain, pkt); err != nil {
							t.Fatal(err)
						}
					}
					var why []string
					if x.Verdict != res.Verdict {
						why = append(why, fmt.Sprintf("verdict %s, trace %s", x.Verdict, res.Verdict))
					}
					if both := (x.Egress == nil || x.Egress.Allowed()) && (x.Ingress == nil || x.Ingress.Allowed()); both != (x.Verdict == nft.Accept) {
						why = append(why, fmt.Sprintf("sides allow=%v, verdict %s", both, x.Verdict))
					}
					egress, ingress := ref.Explain(conn)
					why = append(why, compareSide("egress", x.Egress, egress)...)
					why = append(why, compareSide("ingress", x.Ingress, ingress)...)
					if len(why) > 0 {
						diffs = append(diffs, fmt.Sprintf("  %s: %s\n%s", gc.name(conn), strings.Join(why, "; "), indent(x.String())))
					}
				}
			}
		}
	}
	if len(diffs) > 0 {
		if len(diffs) > 10 {
			diffs = append(diffs[:10], fmt.Sprintf("  ... and %d more", len(diffs)-10))
		}
		t.Errorf("explain disagrees on %d connections:\n%s\ncluster:\n%s", len(diffs), strings.Join(diffs, "\n"), gc.yaml())
	}
}

func compareSide(dir string, got *Side, want *reference.Judgement) []string {
	switch {
	case got == nil && want == nil:
		return nil
	case got == nil || want == nil:
		return []string{fmt.Sprintf("%s judged here: explain %v, reference %v", dir, got != nil, want != nil)}
	}
	var out []string
	if g, w := sorted(got.Policies), sorted(want.Isolating); !slices.Equal(g, w) {
		out = append(out, fmt.Sprintf("%s isolated by %v, reference %v", dir, g, w))
	}
	var allows []string
	for _, r := range got.Allows {
		allows = append(allows, r.String())
	}
	if g, w := sorted(allows), sorted(want.Allowing); !slices.Equal(g, w) {
		out = append(out, fmt.Sprintf("%s allowed by %v, reference %v", dir, g, w))
	}
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}
