package nft

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strconv"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// inspectAttempts bounds the reads of Inspect while others keep committing.
const inspectAttempts = 5

// Inspect reads every table of every family in this Conn's namespace (see
// Inspection). The read is repeated, up to a few times, until the ruleset
// generation is the same before and after it, so that the tables are
// those of one generation; it fails if the ruleset kept changing.
func (c *Conn) Inspect() (*Inspection, error) {
	for range inspectAttempts {
		before, err := c.Generation()
		if err != nil {
			return nil, err
		}
		in, err := c.inspect()
		if err != nil {
			return nil, err
		}
		after, err := c.Generation()
		if err != nil {
			return nil, err
		}
		if before == after {
			in.Generation = after
			return in, nil
		}
	}
	return nil, fmt.Errorf("inspect ruleset: it changed during each of %d reads", inspectAttempts)
}

func (c *Conn) inspect() (*Inspection, error) {
	nl, release, err := c.newQueryConn()
	if err != nil {
		return nil, fmt.Errorf("inspect ruleset: netlink: %w", err)
	}
	defer release()
	raw, err := c.dial()
	if err != nil {
		return nil, fmt.Errorf("inspect ruleset: netlink: %w", err)
	}
	defer raw.Close()
	tables, err := nl.ListTables()
	if err != nil {
		return nil, fmt.Errorf("inspect ruleset: list tables: %w", err)
	}
	chains, err := nl.ListChains()
	if err != nil {
		return nil, fmt.Errorf("inspect ruleset: list chains: %w", err)
	}
	type key struct {
		family nftables.TableFamily
		name   string
	}
	byKey := map[key]*InspectedTable{}
	in := &Inspection{}
	for _, t := range tables {
		byKey[key{t.Family, t.Name}] = &InspectedTable{Family: familyName(t.Family), Name: t.Name}
	}
	for _, ch := range chains {
		it := byKey[key{ch.Table.Family, ch.Table.Name}]
		if it == nil { // a table created between the two dumps
			continue
		}
		ic := InspectedChain{Name: ch.Name}
		if ch.Hooknum != nil {
			h := &InspectedHook{Type: string(ch.Type), Hook: HookName(it.Family, uint32(*ch.Hooknum)), Device: ch.Device}
			if ch.Priority != nil {
				h.Priority = int32(*ch.Priority)
			}
			if ch.Policy != nil {
				h.Policy = "drop"
				if *ch.Policy == nftables.ChainPolicyAccept {
					h.Policy = "accept"
				}
			}
			ic.Hook = h
		}
		rules, err := inspectRules(raw, ch.Table.Family, ch.Table.Name, ch.Name)
		if err != nil {
			it.Errors = append(it.Errors, fmt.Sprintf("chain %s: %v", ch.Name, err))
		}
		ic.Rules = len(rules)
		for _, r := range rules {
			it.Marks = append(it.Marks, MarkUses(ch.Name, r.handle, r.exprs)...)
		}
		it.Chains = append(it.Chains, ic)
	}
	for _, it := range byKey {
		sort.Slice(it.Chains, func(i, j int) bool { return it.Chains[i].Name < it.Chains[j].Name })
		sort.SliceStable(it.Marks, func(i, j int) bool { return it.Marks[i].Chain < it.Marks[j].Chain })
		sort.Strings(it.Errors)
		in.Tables = append(in.Tables, *it)
	}
	sort.Slice(in.Tables, func(i, j int) bool {
		a, b := in.Tables[i], in.Tables[j]
		if a.Family != b.Family {
			return a.Family < b.Family
		}
		return a.Name < b.Name
	})
	return in, nil
}

// Reading rules.
//
// The rules are dumped raw and their expressions decoded here rather than
// with google/nftables' Conn.GetRules, whose decoders lose what MarkUses
// needs: v0.3.0 decodes a ct expression's NFTA_CT_DREG but not its
// NFTA_CT_SREG, so `ct mark set meta mark` ([ ct set mark with reg 1 ])
// comes back as a load of the ct mark into no register, and the write is
// gone; and it drops an expression it does not know instead of saying one
// was there, which could let a mark seem to pass through it. Its meta
// decoder reads NFTA_META_SREG and is used as it is.

// An inspectedRule is one rule of a chain, as MarkUses reads it.
type inspectedRule struct {
	handle uint64
	exprs  []expr.Any // nil for an expression decodeExpr does not know
}

// inspectRules dumps the rules of one chain of any family over nl. A dump
// that a commit interrupts is not retried here: the commit changes the
// ruleset generation, and Inspect reads everything again.
func inspectRules(nl *netlink.Conn, family nftables.TableFamily, table, chain string) ([]inspectedRule, error) {
	attrs, err := netlink.MarshalAttributes([]netlink.Attribute{
		{Type: unix.NFTA_RULE_TABLE, Data: []byte(table + "\x00")},
		{Type: unix.NFTA_RULE_CHAIN, Data: []byte(chain + "\x00")},
	})
	if err != nil {
		return nil, err
	}
	req := netlink.Message{
		Header: netlink.Header{Type: nftMsgType(unix.NFT_MSG_GETRULE), Flags: netlink.Request | netlink.Dump},
		Data:   append(nfgenmsg(uint8(family), 0), attrs...),
	}
	if _, err := nl.Send(req); err != nil {
		return nil, err
	}
	var rules []inspectedRule
	var decodeErr error
	for m, err := range nl.ReceiveIter() {
		if err != nil {
			return nil, err
		}
		if decodeErr != nil || m.Header.Type != nftMsgType(unix.NFT_MSG_NEWRULE) || len(m.Data) < 4 {
			continue // read the dump to its end
		}
		var r inspectedRule
		var rchain []byte
		decodeErr = walk(m.Data[4:], func(typ uint16, data []byte) error {
			switch typ {
			case unix.NFTA_RULE_CHAIN:
				rchain = data
			case unix.NFTA_RULE_HANDLE:
				if len(data) == 8 {
					r.handle = binary.BigEndian.Uint64(data)
				}
			case unix.NFTA_RULE_EXPRESSIONS:
				return walk(data, func(typ uint16, data []byte) error {
					if typ == unix.NFTA_LIST_ELEM {
						e, err := decodeExpr(byte(family), data)
						r.exprs = append(r.exprs, e)
						return err
					}
					return nil
				})
			}
			return nil
		})
		if str(rchain) == chain {
			rules = append(rules, r)
		}
	}
	return rules, decodeErr
}

// inspectExprs are the expressions decodeExpr knows: those MarkUses
// follows registers through.
var inspectExprs = map[string]func() expr.Any{
	"meta":      func() expr.Any { return &expr.Meta{} },
	"ct":        func() expr.Any { return &expr.Ct{} },
	"immediate": func() expr.Any { return &expr.Immediate{} },
	"bitwise":   func() expr.Any { return &expr.Bitwise{} },
	"cmp":       func() expr.Any { return &expr.Cmp{} },
	"range":     func() expr.Any { return &expr.Range{} },
	"lookup":    func() expr.Any { return &expr.Lookup{} },
	"payload":   func() expr.Any { return &expr.Payload{} },
	"exthdr":    func() expr.Any { return &expr.Exthdr{} },
	"fib":       func() expr.Any { return &expr.Fib{} },
	"rt":        func() expr.Any { return &expr.Rt{} },
	"socket":    func() expr.Any { return &expr.Socket{} },
	"numgen":    func() expr.Any { return &expr.Numgen{} },
	"hash":      func() expr.Any { return &expr.Hash{} },
	"byteorder": func() expr.Any { return &expr.Byteorder{} },
	"target":    func() expr.Any { return &expr.Target{} },
	"match":     func() expr.Any { return &expr.Match{} },
	"counter":   func() expr.Any { return &expr.Counter{} },
	"log":       func() expr.Any { return &expr.Log{} },
	"limit":     func() expr.Any { return &expr.Limit{} },
	"quota":     func() expr.Any { return &expr.Quota{} },
	"objref":    func() expr.Any { return &expr.Objref{} },
	"nat":       func() expr.Any { return &expr.NAT{} },
	"masq":      func() expr.Any { return &expr.Masq{} },
	"redir":     func() expr.Any { return &expr.Redir{} },
	"reject":    func() expr.Any { return &expr.Reject{} },
	"dynset":    func() expr.Any { return &expr.Dynset{} },
	"notrack":   func() expr.Any { return &expr.Notrack{} },
	"queue":     func() expr.Any { return &expr.Queue{} },
	"connlimit": func() expr.Any { return &expr.Connlimit{} },
}

// decodeExpr decodes one expression (the attributes of an NFTA_LIST_ELEM
// of NFTA_RULE_EXPRESSIONS) of a rule of family fam: nil, with no error,
// for one it does not know, which MarkUses takes as unknown (it forgets
// every register).
func decodeExpr(fam byte, b []byte) (expr.Any, error) {
	name, data, err := exprParts(b)
	if err != nil {
		return nil, err
	}
	mk := inspectExprs[name]
	if mk == nil {
		return nil, nil
	}
	e := mk()
	if err := expr.Unmarshal(fam, data, e); err != nil {
		return nil, fmt.Errorf("expression %s: %w", name, err)
	}
	if ct, ok := e.(*expr.Ct); ok {
		// NFTA_CT_SREG, which v0.3.0 skips: a write of the key from it.
		err := walk(data, func(typ uint16, v []byte) error {
			if typ == unix.NFTA_CT_SREG {
				ct.Register, ct.SourceRegister = u32(v), true
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return e, nil
}

// familyName is nft's name of a table family.
func familyName(f nftables.TableFamily) string {
	switch f {
	case nftables.TableFamilyINet:
		return "inet"
	case nftables.TableFamilyIPv4:
		return "ip"
	case nftables.TableFamilyIPv6:
		return "ip6"
	case nftables.TableFamilyARP:
		return "arp"
	case nftables.TableFamilyBridge:
		return "bridge"
	case nftables.TableFamilyNetdev:
		return "netdev"
	}
	return "family " + strconv.Itoa(int(f))
}

// Decoding marks.
//
// A rule's expressions pass values through registers: `meta mark & 0x4000
// == 0x4000` is
//
//	[ meta load mark => reg 1 ]
//	[ bitwise reg 1 = ( reg 1 & 0x00004000 ) ^ 0x00000000 ]
//	[ cmp eq reg 1 0x00004000 ]
//
// MarkUses follows each register holding a mark, with the mask and xor
// applied to it so far, to the compare that reads it or the meta/ct set
// that writes it. Marks are host-endian 32-bit values in registers, in
// compares and in xtables data alike. A register written by anything else
// forgets the mark; an expression this decoder does not know forgets every
// register, so an unknown expression can hide a use but never invent one.

// markReg is what a register holds when it holds a mark: (mark & and) ^ xor.
type markReg struct {
	kind     MarkKind // "" for a constant
	and, xor uint32   // for a constant, and is 0 and xor the value
}

// regSlot maps a register to its 32-bit slot: the 16-byte registers
// NFT_REG_1..4 overlay NFT_REG32_00..15.
func regSlot(r uint32) uint32 {
	if r >= unix.NFT_REG_1 && r <= unix.NFT_REG_4 {
		return (r - unix.NFT_REG_1) * 4
	}
	if r >= unix.NFT_REG32_00 {
		return r - unix.NFT_REG32_00
	}
	return 1 << 31 // the verdict register holds no mark
}

func hostU32(b []byte) (uint32, bool) {
	if len(b) < 4 {
		return 0, false
	}
	return binary.NativeEndian.Uint32(b), true
}

// MarkUses decodes where the expressions of one rule (the rule of the
// given handle in chain) read or write a mark.
func MarkUses(chain string, handle uint64, exprs []expr.Any) []MarkUse {
	regs := map[uint32]markReg{}
	var uses []MarkUse
	use := func(u MarkUse) {
		u.Chain, u.Handle = chain, handle
		if u.Via == "" {
			u.Via = "nft"
		}
		uses = append(uses, u)
	}
	read := func(r uint32, value uint32) {
		m, ok := regs[regSlot(r)]
		if !ok || m.kind == "" {
			return
		}
		use(MarkUse{Kind: m.kind, Bits: m.and, Value: value, Exact: m.and == ^uint32(0)})
	}
	// write records an assignment of kind from register r.
	write := func(kind MarkKind, r uint32) {
		m, ok := regs[regSlot(r)]
		switch {
		case ok && m.kind == kind:
			// (mark & and) ^ xor: the bits outside and, and those xor
			// flips, may change.
			use(MarkUse{Kind: kind, Write: true, Bits: ^m.and | m.xor, Value: m.xor})
		case ok && m.kind == "":
			use(MarkUse{Kind: kind, Write: true, Bits: ^uint32(0), Value: m.xor})
		case ok:
			// From the other mark: a copy, which reads the bits it
			// carries over, as CONNMARK --save-mark and --restore-mark
			// do; and the whole mark is replaced, the bits the mask
			// clears included (`ct mark set meta mark & 0x4`).
			if m.and != 0 {
				use(MarkUse{Kind: m.kind, Bits: m.and})
			}
			use(MarkUse{Kind: kind, Write: true, Bits: ^uint32(0)})
		default: // from anything else
			use(MarkUse{Kind: kind, Write: true, Bits: ^uint32(0)})
		}
	}
	forget := func(r uint32) { delete(regs, regSlot(r)) }
	for _, e := range exprs {
		switch e := e.(type) {
		case *expr.Meta:
			switch {
			case e.SourceRegister && e.Key == expr.MetaKeyMARK:
				write(MetaMark, e.Register)
			case e.SourceRegister:
			case e.Key == expr.MetaKeyMARK:
				regs[regSlot(e.Register)] = markReg{kind: MetaMark, and: ^uint32(0)}
			default:
				forget(e.Register)
			}
		case *expr.Ct:
			switch {
			case e.SourceRegister && e.Key == expr.CtKeyMARK:
				write(CtMark, e.Register)
			case e.SourceRegister:
			case e.Key == expr.CtKeyMARK:
				regs[regSlot(e.Register)] = markReg{kind: CtMark, and: ^uint32(0)}
			default:
				forget(e.Register)
			}
		case *expr.Immediate:
			if v, ok := hostU32(e.Data); ok && len(e.Data) == 4 {
				regs[regSlot(e.Register)] = markReg{xor: v}
			} else {
				forget(e.Register)
			}
		case *expr.Bitwise:
			m, ok := regs[regSlot(e.SourceRegister)]
			and, okA := hostU32(e.Mask)
			xor, okX := hostU32(e.Xor)
			if !ok || !okA || !okX || e.Len != 4 {
				forget(e.DestRegister)
				continue
			}
			regs[regSlot(e.DestRegister)] = markReg{kind: m.kind, and: m.and & and, xor: m.xor&and ^ xor}
		case *expr.Cmp:
			v, _ := hostU32(e.Data)
			read(e.Register, v)
		case *expr.Range:
			v, _ := hostU32(e.FromData)
			read(e.Register, v)
		case *expr.Lookup:
			read(e.SourceRegister, 0)
			if e.IsDestRegSet {
				forget(e.DestRegister)
			}
		case *expr.Payload:
			if e.OperationType == expr.PayloadLoad {
				forget(e.DestRegister)
			}
		case *expr.Exthdr:
			forget(e.DestRegister)
		case *expr.Fib:
			forget(e.Register)
		case *expr.Rt:
			forget(e.Register)
		case *expr.Socket:
			forget(e.Register)
		case *expr.Numgen:
			forget(e.Register)
		case *expr.Hash:
			forget(e.DestRegister)
		case *expr.Byteorder:
			forget(e.DestRegister)
		case *expr.Target:
			uses = append(uses, xtMarkUses(chain, handle, "target", e.Name, e.Rev, e.Info)...)
		case *expr.Match:
			uses = append(uses, xtMarkUses(chain, handle, "match", e.Name, e.Rev, e.Info)...)
		case *expr.Verdict, *expr.Counter, *expr.Log, *expr.Limit, *expr.Quota, *expr.Objref,
			*expr.NAT, *expr.Masq, *expr.Redir, *expr.Reject, *expr.Dynset, *expr.Notrack,
			*expr.Queue, *expr.Connlimit:
			// read registers at most, write none that could hold a mark
		default:
			clear(regs)
		}
	}
	return uses
}

// xtables marks.
//
// iptables-nft encodes the mark match natively (meta mark & mask == value),
// but the MARK and CONNMARK targets and the connmark match stay xtables
// extensions in the rule, their kernel structure as an opaque blob
// (linux/netfilter/xt_mark.h, xt_connmark.h), in host byte order:
//
//	MARK rev 2      xt_mark_tginfo2      { u32 mark, mask }                       mark = (mark & ~mask) ^ value
//	mark rev 1      xt_mark_mtinfo1      { u32 mark, mask; u8 invert }            (mark & mask) == value
//	CONNMARK rev 1  xt_connmark_tginfo1  { u32 ctmark, ctmask, nfmask; u8 mode }
//	CONNMARK rev 2  xt_connmark_tginfo2  { u32 ctmark, ctmask, nfmask; u8 shift_dir, shift_bits, mode }
//	connmark rev 1  xt_connmark_mtinfo1  { u32 mark, mask; u8 invert }
//
// Checked with iptables v1.8.9 (nf_tables): `-j MARK --set-xmark
// 0x4000/0x4000` is MARK rev 2, `-j CONNMARK --restore-mark` CONNMARK
// rev 2, `-m connmark --mark` connmark rev 1. Older revisions (MARK rev
// 0/1, mark rev 0: an unsigned long each) are reported Undecoded.

// CONNMARK modes (xt_connmark.h).
const (
	connmarkSet     = 0
	connmarkSave    = 1
	connmarkRestore = 2
)

func xtMarkUses(chain string, handle uint64, kind, name string, rev uint32, info xt.InfoAny) []MarkUse {
	var b []byte
	if u, ok := info.(*xt.Unknown); ok && u != nil {
		b = *u
	}
	via := fmt.Sprintf("xt %s rev %d", name, rev)
	mk := func(k MarkKind, write bool, bits, value uint32) MarkUse {
		return MarkUse{Chain: chain, Handle: handle, Kind: k, Write: write, Bits: bits, Value: value, Via: via}
	}
	undecoded := func(k MarkKind, write bool) []MarkUse {
		u := mk(k, write, ^uint32(0), 0)
		u.Undecoded = true
		return []MarkUse{u}
	}
	word := func(i int) uint32 { return binary.NativeEndian.Uint32(b[4*i:]) }
	switch {
	case kind == "target" && name == "MARK":
		if rev != 2 || len(b) < 8 {
			return undecoded(MetaMark, true)
		}
		return []MarkUse{mk(MetaMark, true, word(1)|word(0), word(0))}
	case kind == "match" && (name == "mark" || name == "connmark"):
		k := MetaMark
		if name == "connmark" {
			k = CtMark
		}
		if rev != 1 || len(b) < 8 {
			return undecoded(k, false)
		}
		u := mk(k, false, word(1), word(0))
		u.Exact = u.Bits == ^uint32(0)
		return []MarkUse{u}
	case kind == "target" && name == "CONNMARK":
		if (rev != 1 && rev != 2) || len(b) < 13 || rev == 2 && len(b) < 15 {
			return undecoded(CtMark, true)
		}
		ctmark, ctmask, nfmask := word(0), word(1), word(2)
		mode, shift := b[12], func(v uint32) uint32 { return v }
		if rev == 2 {
			dir, bits := b[12], uint32(b[13])
			mode = b[14]
			shift = func(v uint32) uint32 {
				if dir == 0 {
					return v << bits
				}
				return v >> bits
			}
		}
		switch mode {
		case connmarkSet:
			return []MarkUse{mk(CtMark, true, ctmask|ctmark, ctmark)}
		case connmarkSave: // ctmark = (ctmark & ~ctmask) ^ shift(mark & nfmask)
			return []MarkUse{mk(MetaMark, false, nfmask, 0), mk(CtMark, true, ctmask|shift(nfmask), 0)}
		case connmarkRestore: // mark = (mark & ~nfmask) ^ shift(ctmark & ctmask)
			return []MarkUse{mk(CtMark, false, ctmask, 0), mk(MetaMark, true, nfmask|shift(ctmask), 0)}
		}
		return undecoded(CtMark, true)
	}
	return nil
}
