package nft

import (
	"fmt"
	"strings"

	"go4.org/netipx"
)

// Render prints the table as `nft -f` input. The output is deterministic:
// the same Table always renders to the same bytes, so it serves as the
// golden form in tests and as the text `nftpolicy dump` prints.
//
// The first two lines make the file replace the table atomically when
// loaded with `nft -f`: nft runs the whole file as one transaction.
func Render(t *Table) string {
	var b strings.Builder
	fmt.Fprintf(&b, "add table %s %s\n", t.Family, t.Name)
	fmt.Fprintf(&b, "delete table %s %s\n", t.Family, t.Name)
	fmt.Fprintf(&b, "table %s %s {\n", t.Family, t.Name)
	if t.Comment != "" {
		fmt.Fprintf(&b, "\tcomment %q\n", t.Comment)
		if len(t.Sets)+len(t.Chains) > 0 {
			b.WriteString("\n")
		}
	}
	for i, s := range t.Sets {
		if i > 0 {
			b.WriteString("\n")
		}
		renderSet(&b, s)
	}
	for i, c := range t.Chains {
		if i > 0 || len(t.Sets) > 0 {
			b.WriteString("\n")
		}
		renderChain(&b, c)
	}
	b.WriteString("}\n")
	return b.String()
}

func renderSet(b *strings.Builder, s *Set) {
	kind := "set"
	if s.Verdict {
		kind = "map"
	}
	fmt.Fprintf(b, "\t%s %s {\n", kind, s.Name)
	typ := keyTypeName(s.Key)
	if s.Verdict {
		typ += " : verdict"
	}
	fmt.Fprintf(b, "\t\ttype %s\n", typ)
	if s.Interval {
		b.WriteString("\t\tflags interval\n")
	}
	if s.Comment != "" {
		fmt.Fprintf(b, "\t\tcomment %q\n", s.Comment)
	}
	if s.Len() > 0 {
		b.WriteString("\t\telements = {")
		first := true
		for _, e := range s.All() {
			for _, one := range renderedElements(s, e) {
				if !first {
					b.WriteString(",")
				}
				first = false
				b.WriteString("\n\t\t\t")
				b.WriteString(one)
			}
		}
		b.WriteString("\n\t\t}\n")
	}
	b.WriteString("\t}\n")
}

func keyTypeName(k KeyType) string {
	switch k {
	case KeyIPv4:
		return "ipv4_addr"
	case KeyIPv6:
		return "ipv6_addr"
	case KeyIPv4ProtoPort:
		return "ipv4_addr . inet_proto . inet_service"
	case KeyIPv6ProtoPort:
		return "ipv6_addr . inet_proto . inet_service"
	}
	panic(fmt.Sprintf("nft: unknown key type %d", k))
}

// renderedElements are the elements e is in the kernel, as nft lists
// them: one, except for a range of a set held per address (PerAddress),
// which is each of its addresses.
func renderedElements(s *Set, e Element) []string {
	if !s.PerAddress {
		return []string{renderElement(s, e)}
	}
	var out []string
	for a := range Addresses(e) {
		out = append(out, a.String())
	}
	return out
}

func renderElement(s *Set, e Element) string {
	switch {
	case s.protoPortMap():
		return renderAddrRange(e) + " . " + renderProtoRange(e) + " . " + renderPortRange(e) + " : " + renderVerdict(e.Verdict)
	case s.exactProtoPortMap():
		return fmt.Sprintf("%s . %s . %d : %s", e.Addr, e.Proto, e.Port, renderVerdict(e.Verdict))
	case s.Verdict && s.Interval:
		return renderAddrRange(e) + " : " + renderVerdict(e.Verdict)
	case s.Verdict:
		return e.Addr.String() + " : " + renderVerdict(e.Verdict)
	case s.Key.Concat():
		return fmt.Sprintf("%s . %s . %d", e.Addr, e.Proto, e.Port)
	case s.ranged():
		return renderAddrRange(e)
	}
	return e.Addr.String()
}

// renderAddrRange prints an element's address range as nft lists it: one
// address, a prefix when the range is one, else first-last.
func renderAddrRange(e Element) string {
	if !e.Last.IsValid() || e.Last == e.Addr {
		return e.Addr.String()
	}
	r := netipx.IPRangeFrom(e.Addr, e.Last)
	if p, ok := r.Prefix(); ok {
		return p.String()
	}
	return e.Addr.String() + "-" + e.Last.String()
}

// renderProtoRange prints an element's protocol range: the protocol's
// name for one, numbers for a range (`6-17`, `0-255`), as nft lists them.
func renderProtoRange(e Element) string {
	first, last := e.protoRange()
	if first == last {
		return first.String()
	}
	return fmt.Sprintf("%d-%d", first, last)
}

// renderPortRange prints an element's port range: `80` or `80-81`.
func renderPortRange(e Element) string {
	first, last := e.portRange()
	if first == last {
		return fmt.Sprintf("%d", first)
	}
	return fmt.Sprintf("%d-%d", first, last)
}

func renderChain(b *strings.Builder, c *Chain) {
	fmt.Fprintf(b, "\tchain %s {\n", c.Name)
	if h := c.Hook; h != nil {
		fmt.Fprintf(b, "\t\ttype %s hook %s priority %s; policy %s;\n", h.Type, h.Hook, renderPriority(h.Priority), h.Policy)
	}
	for _, r := range c.Rules {
		fmt.Fprintf(b, "\t\t%s\n", RenderRule(r))
	}
	b.WriteString("\t}\n")
}

// renderPriority writes a priority relative to the standard filter priority
// (0), the way nft lists it: `filter - 1`, `filter + 5`, `filter`.
func renderPriority(p int32) string {
	switch {
	case p == 0:
		return "filter"
	case p < 0:
		return fmt.Sprintf("filter - %d", -p)
	}
	return fmt.Sprintf("filter + %d", p)
}

// RenderRule prints one rule as nft text, without indentation.
func RenderRule(r Rule) string {
	parts := make([]string, 0, len(r.Exprs)+1)
	for _, e := range r.Exprs {
		parts = append(parts, renderExpr(e))
	}
	if r.Comment != "" {
		parts = append(parts, fmt.Sprintf("comment %q", r.Comment))
	}
	return strings.Join(parts, " ")
}

func renderExpr(e Expr) string {
	switch e := e.(type) {
	case CtStateEstablishedRelated:
		return "ct state established,related"
	case CtStatusDNAT:
		return "ct status dnat"
	case ReversePath:
		return "fib saddr . iif oif exists"
	case AddrEq:
		return fmt.Sprintf("%s %s %s", FamilyOf(e.Addr).Keyword(), e.Field, e.Addr)
	case AddrInSet:
		return fmt.Sprintf("%s %s @%s", e.Family.Keyword(), e.Field, e.Set)
	case AddrVmap:
		return fmt.Sprintf("%s %s vmap @%s", e.Family.Keyword(), e.Field, e.Map)
	case L4ProtoEq:
		return "meta l4proto " + e.Proto.String()
	case NfprotoEq:
		if e.Family == IPv6 {
			return "meta nfproto ipv6"
		}
		return "meta nfproto ipv4"
	case DportRange:
		if e.First == e.Last {
			return fmt.Sprintf("th dport %d", e.First)
		}
		return fmt.Sprintf("th dport %d-%d", e.First, e.Last)
	case AddrProtoPortInSet:
		return fmt.Sprintf("%s %s . meta l4proto . th dport @%s", e.Family.Keyword(), e.Field, e.Set)
	case AddrProtoPortVmap:
		return fmt.Sprintf("%s %s . meta l4proto . th dport vmap @%s", e.Family.Keyword(), e.Field, e.Map)
	case ICMPv6TypeRange:
		s := fmt.Sprintf("icmpv6 type %d-%d", e.First, e.Last)
		if e.First == e.Last {
			s = fmt.Sprintf("icmpv6 type %d", e.First)
		}
		if e.HopLimit != 0 {
			s += fmt.Sprintf(" ip6 hoplimit %d", e.HopLimit)
		}
		return s
	case MarkBitsSet:
		return fmt.Sprintf("meta mark & 0x%08x == 0x%08x", e.Bits, e.Bits)
	case MarkBitsClear:
		return fmt.Sprintf("meta mark & 0x%08x == 0x00000000", e.Bits)
	case CtMarkBitsSet:
		return fmt.Sprintf("ct mark & 0x%08x == 0x%08x", e.Bits, e.Bits)
	case SetMark:
		if e.Set == 0 {
			return fmt.Sprintf("meta mark set meta mark & 0x%08x", ^e.Clear)
		}
		return fmt.Sprintf("meta mark set meta mark & 0x%08x | 0x%08x", ^(e.Clear | e.Set), e.Set)
	case Counter:
		return "counter"
	case Limit:
		// As nft lists it: a burst of 5, its default, goes unsaid.
		if e.Burst == 5 {
			return fmt.Sprintf("limit rate %d/second", e.Rate)
		}
		return fmt.Sprintf("limit rate %d/second burst %d packets", e.Rate, e.Burst)
	case Log:
		if e.Prefix == "" {
			return fmt.Sprintf("log group %d", e.Group)
		}
		return fmt.Sprintf("log prefix %q group %d", e.Prefix, e.Group)
	case Verdict:
		return renderVerdict(e)
	}
	panic(fmt.Sprintf("nft: cannot render %T", e))
}

func renderVerdict(v Verdict) string {
	if v.Kind == Jump || v.Kind == Goto {
		return string(v.Kind) + " " + v.Chain
	}
	return string(v.Kind)
}

// addrRangeOf returns the inclusive range an element covers.
func addrRangeOf(e Element) netipx.IPRange {
	last := e.Last
	if !last.IsValid() {
		last = e.Addr
	}
	return netipx.IPRangeFrom(e.Addr, last)
}

// RenderDelta prints what writing d over the table the kernel holds sends
// to reach new (Conn.WriteDeltaAt with the same arguments), as `nft -f`
// commands, one per line and in the order of the batch: chains and sets
// added, elements deleted and added, chains flushed and refilled, rules of
// the added chains, chains and sets deleted. The output is deterministic,
// so a delta can be logged and compared with a golden file, and loading it
// with `nft -f` over the old table yields new (checked by the kernel
// tests), as knftables' Transaction.String does for its transactions.
//
// A Full delta replaces the whole table: a comment with its reason, then
// Render(new). An empty delta sends nothing and prints "".
func RenderDelta(d *Delta, new *Table) string {
	if d.Full {
		return "# replace the whole table: " + d.Reason + "\n" + Render(new)
	}
	var b strings.Builder
	tbl := fmt.Sprintf("%s %s", new.Family, new.Name)
	for _, c := range d.AddChains {
		fmt.Fprintf(&b, "add chain %s %s", tbl, c.Name)
		if h := c.Hook; h != nil {
			fmt.Fprintf(&b, " { type %s hook %s priority %s; policy %s; }", h.Type, h.Hook, renderPriority(h.Priority), h.Policy)
		}
		b.WriteString("\n")
	}
	for _, s := range d.AddSets {
		kind, typ := "set", keyTypeName(s.Key)
		if s.Verdict {
			kind, typ = "map", typ+" : verdict"
		}
		fmt.Fprintf(&b, "add %s %s %s { type %s;", kind, tbl, s.Name, typ)
		if s.Interval {
			b.WriteString(" flags interval;")
		}
		if s.Comment != "" {
			fmt.Fprintf(&b, " comment %q;", s.Comment)
		}
		b.WriteString(" }\n")
		renderElements(&b, "add", tbl, s, s.List())
	}
	for _, u := range d.UpdateSets {
		gone, came := u.kernelChanges()
		renderElements(&b, "delete", tbl, u.Old, gone)
		renderElements(&b, "add", tbl, u.New, came)
	}
	for _, c := range d.RewriteChains {
		fmt.Fprintf(&b, "flush chain %s %s\n", tbl, c.Name)
		renderRules(&b, tbl, c)
	}
	for _, c := range d.AddChains {
		renderRules(&b, tbl, c)
	}
	for _, name := range d.DeleteChains {
		fmt.Fprintf(&b, "flush chain %s %s\n", tbl, name)
	}
	for _, name := range d.DeleteChains {
		fmt.Fprintf(&b, "delete chain %s %s\n", tbl, name)
	}
	for _, name := range d.DeleteSets {
		fmt.Fprintf(&b, "delete set %s %s\n", tbl, name)
	}
	return b.String()
}

// renderElements prints one `add element` or `delete element` command for
// elems of s, or nothing when there are none.
func renderElements(b *strings.Builder, verb, tbl string, s *Set, elems []Element) {
	if len(elems) == 0 {
		return
	}
	fmt.Fprintf(b, "%s element %s %s { ", verb, tbl, s.Name)
	first := true
	for _, e := range elems {
		for _, one := range renderedElements(s, e) {
			if !first {
				b.WriteString(", ")
			}
			first = false
			b.WriteString(one)
		}
	}
	b.WriteString(" }\n")
}

func renderRules(b *strings.Builder, tbl string, c *Chain) {
	for _, r := range c.Rules {
		fmt.Fprintf(b, "add rule %s %s %s\n", tbl, c.Name, RenderRule(r))
	}
}
