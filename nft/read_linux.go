package nft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Reading a table back.
//
// Drift compares our table in the kernel with the one last programmed by
// content: what decides the fate of a packet must match exactly, so a
// `drop` turned `accept` under the same comment, a swapped map element or
// `flags dormant` is drift as much as a flushed chain is.
//
// The table is read with raw nf_tables dumps on one socket (the table, all
// chains, the rules of each chain, the sets, the elements of each set)
// rather than through google/nftables, which opens a socket per call and
// decodes lossily: its set reader overwrites a map's key type with the
// data type, its expression decoders skip attributes (a bitwise op, a ct
// source register) and drop expressions they do not know. Each expression
// the kernel dumps is instead reduced to a canonical form of its
// attributes, and compared with the same form of what the writer encodes
// for the model (encodeRule, encodeElements), so a difference anywhere in
// an expression is found, whatever it is.
//
// The canonical form absorbs what the kernel echoes differently from what
// nft and google/nftables send, and nothing else: attribute order, the
// NLA_F_NESTED flag (the kernel dumps nests without it), a lookup's set id
// (resolved to the set, whose name is dumped) and the defaults the kernel
// dumps when they were not sent (a lookup's flags, a bitwise op).

// Attribute numbers of linux/netfilter/nf_tables.h that x/sys/unix lacks.
const (
	nftaChainFlags    = 10 // NFTA_CHAIN_FLAGS
	nftChainBase      = 1  // NFT_CHAIN_BASE
	nftaBitwiseOp     = 6  // NFTA_BITWISE_OP
	nftaBitwiseData   = 7  // NFTA_BITWISE_DATA
	nftaSetElemKeyEnd = 10 // NFTA_SET_ELEM_KEY_END
	nftaSetDescConcat = 2  // NFTA_SET_DESC_CONCAT
	nftaSetFieldLen   = 1  // NFTA_SET_FIELD_LEN
	nftSetConcat      = 0x80
)

// tableFlags are the flags the applier creates our table with (writer.table
// carries none). Any other value, `flags dormant` above all (the table
// stays but none of its chains sees a packet), is drift.
const tableFlags = 0

// A kernelTable is one of our tables as the kernel dumps it.
type kernelTable struct {
	flags  uint32
	chains map[string]*kernelChain
	sets   map[string]*kernelSet
}

type kernelChain struct {
	hook  *kernelHook // nil for a regular chain
	flags uint32
	rules []kernelRule
}

type kernelHook struct {
	num      uint32
	priority int32
	policy   uint32
	typ      string
}

type kernelRule struct {
	exprs    []byte // canonical (see appendCanonExpr), one after the other
	userdata []byte
}

type kernelSet struct {
	flags    uint32
	keyType  uint32
	keyLen   uint32
	dataType uint32
	// fields are the lengths of a concatenation's fields as the set
	// declares them (NFTA_SET_DESC_CONCAT), nil if it declares none.
	fields   []uint32
	elements map[string]int // canonical (see appendCanonElement) → how many
	count    int
}

// errDumpInterrupted reports a dump that kept being interrupted: the
// kernel flags a dump whose ruleset generation changed while it was read.
var errDumpInterrupted = errors.New("dump interrupted by concurrent commits too often")

// errDumpRepeats reports a set whose dump kept repeating elements (see
// readKernel): a hash set the kernel kept resizing.
var errDumpRepeats = errors.New("dump of the set's elements kept repeating some (the kernel resizing its hash)")

// dumpTries bounds the attempts at one dump that commits (anyone's, to any
// table) keep interrupting. Each dump is one chain or one set, so a retry
// is cheap and a busy neighbour (kube-proxy commits every second) rarely
// interrupts one twice.
const dumpTries = 10

func nftMsgType(t uint16) netlink.HeaderType {
	return netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | t)
}

// dump sends an nf_tables dump request of type typ for the inet family,
// with attrs, and hands the attributes of each message of the reply to
// each, valid during the call only. A dump that the kernel reports
// interrupted is started again: start is called before each attempt, to
// drop what each collected of the one before.
func dump(nl *netlink.Conn, typ uint16, attrs []netlink.Attribute, start func(), each func(attrs []byte) error) error {
	data, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		return err
	}
	req := netlink.Message{
		Header: netlink.Header{Type: nftMsgType(typ), Flags: netlink.Request | netlink.Dump},
		Data:   append(nfgenmsg(unix.NFPROTO_INET, 0), data...),
	}
	want := nftMsgType(typ - 1) // NFT_MSG_NEWx answers NFT_MSG_GETx
	for range dumpTries {
		start()
		if _, err := nl.Send(req); err != nil {
			return err
		}
		interrupted := false
		var cbErr error
		for m, err := range nl.ReceiveIter() {
			if err != nil {
				return err
			}
			if m.Header.Flags&netlink.DumpInterrupted != 0 {
				interrupted = true
			}
			if interrupted || cbErr != nil || m.Header.Type != want || len(m.Data) < 4 {
				continue // read the dump to its end
			}
			cbErr = each(m.Data[4:])
		}
		if cbErr != nil {
			return cbErr
		}
		if !interrupted {
			return nil
		}
	}
	return errDumpInterrupted
}

// nlaTypeMask clears the flag bits of an attribute type.
const nlaTypeMask = ^uint16(unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)

var errBadAttr = errors.New("malformed netlink attribute")

// walk calls fn for each attribute in b, with its type without the flag
// bits and its value (a part of b, not a copy), and stops at fn's first
// error. It reads what the kernel dumps millions of times at 10k policies,
// so it allocates nothing.
func walk(b []byte, fn func(typ uint16, data []byte) error) error {
	for len(b) > 0 {
		if len(b) < 4 {
			return errBadAttr
		}
		n := int(binary.NativeEndian.Uint16(b))
		if n < 4 || n > len(b) {
			return errBadAttr
		}
		if err := fn(binary.NativeEndian.Uint16(b[2:])&nlaTypeMask, b[4:n]); err != nil {
			return err
		}
		b = b[min((n+3)&^3, len(b)):]
	}
	return nil
}

func str(b []byte) string { return string(bytes.TrimRight(b, "\x00")) }

func u32(b []byte) uint32 {
	if len(b) < 4 {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

// readKernel reads the inet table name: its flags, chains with their hooks
// and rules, sets with their elements. ErrNoTable if there is none.
func (c *Conn) readKernel(name string) (*kernelTable, error) {
	nl, err := c.dial()
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	defer nl.Close()
	kt := &kernelTable{chains: map[string]*kernelChain{}, sets: map[string]*kernelSet{}}
	found := false
	nameAttr := func(typ uint16) netlink.Attribute { return netlink.Attribute{Type: typ, Data: []byte(name + "\x00")} }
	// A dump, not a get: a missing table is then no table in the reply
	// rather than an error to tell from others.
	err = dump(nl, unix.NFT_MSG_GETTABLE, nil, func() { found = false }, func(b []byte) error {
		var tname []byte
		var flags uint32
		err := walk(b, func(typ uint16, data []byte) error {
			switch typ {
			case unix.NFTA_TABLE_NAME:
				tname = data
			case unix.NFTA_TABLE_FLAGS:
				flags = u32(data)
			}
			return nil
		})
		if str(tname) == name {
			found, kt.flags = true, flags
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read table: %w", err)
	}
	if !found {
		return nil, ErrNoTable
	}
	// The kernel dumps every chain of the family: ours are picked out.
	err = dump(nl, unix.NFT_MSG_GETCHAIN, nil, func() { clear(kt.chains) }, func(b []byte) error {
		var table, cname []byte
		ch := &kernelChain{}
		var hook kernelHook
		err := walk(b, func(typ uint16, data []byte) error {
			switch typ {
			case unix.NFTA_CHAIN_TABLE:
				table = data
			case unix.NFTA_CHAIN_NAME:
				cname = data
			case unix.NFTA_CHAIN_HOOK:
				ch.hook = &hook
				return walk(data, func(typ uint16, data []byte) error {
					switch typ {
					case unix.NFTA_HOOK_HOOKNUM:
						hook.num = u32(data)
					case unix.NFTA_HOOK_PRIORITY:
						hook.priority = int32(u32(data))
					}
					return nil
				})
			case unix.NFTA_CHAIN_POLICY:
				hook.policy = u32(data)
			case unix.NFTA_CHAIN_TYPE:
				hook.typ = str(data)
			case nftaChainFlags:
				ch.flags = u32(data)
			}
			return nil
		})
		if str(table) == name {
			kt.chains[str(cname)] = ch
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read chains: %w", err)
	}
	// One dump per chain: a dump of the whole table restarts its walk of
	// the table's rules for every buffer it fills.
	for cname, ch := range kt.chains {
		attrs := []netlink.Attribute{nameAttr(unix.NFTA_RULE_TABLE), {Type: unix.NFTA_RULE_CHAIN, Data: []byte(cname + "\x00")}}
		err := dump(nl, unix.NFT_MSG_GETRULE, attrs, func() { ch.rules = nil }, func(b []byte) error {
			var r kernelRule
			var rchain []byte
			err := walk(b, func(typ uint16, data []byte) error {
				var err error
				switch typ {
				case unix.NFTA_RULE_CHAIN:
					rchain = data
				case unix.NFTA_RULE_EXPRESSIONS:
					r.exprs, err = appendCanonExprList(nil, data)
				case unix.NFTA_RULE_USERDATA:
					r.userdata = bytes.Clone(data)
				}
				return err
			})
			if str(rchain) == cname {
				ch.rules = append(ch.rules, r)
			}
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("read chain %s: %w", cname, err)
		}
	}
	err = dump(nl, unix.NFT_MSG_GETSET, []netlink.Attribute{nameAttr(unix.NFTA_SET_TABLE)}, func() { clear(kt.sets) }, func(b []byte) error {
		var table, sname []byte
		s := &kernelSet{elements: map[string]int{}}
		err := walk(b, func(typ uint16, data []byte) error {
			switch typ {
			case unix.NFTA_SET_TABLE:
				table = data
			case unix.NFTA_SET_NAME:
				sname = data
			case unix.NFTA_SET_FLAGS:
				s.flags = u32(data)
			case unix.NFTA_SET_KEY_TYPE:
				s.keyType = u32(data)
			case unix.NFTA_SET_KEY_LEN:
				s.keyLen = u32(data)
			case unix.NFTA_SET_DATA_TYPE:
				s.dataType = u32(data)
			case unix.NFTA_SET_DESC:
				return walk(data, func(typ uint16, data []byte) error {
					if typ != nftaSetDescConcat {
						return nil
					}
					return walk(data, func(typ uint16, data []byte) error {
						if typ != unix.NFTA_LIST_ELEM {
							return nil
						}
						return walk(data, func(typ uint16, data []byte) error {
							if typ == nftaSetFieldLen {
								s.fields = append(s.fields, u32(data))
							}
							return nil
						})
					})
				})
			}
			return nil
		})
		if str(table) == name {
			kt.sets[str(sname)] = s
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read sets: %w", err)
	}
	var buf []byte
	for sname, s := range kt.sets {
		attrs := []netlink.Attribute{nameAttr(unix.NFTA_SET_ELEM_LIST_TABLE), {Type: unix.NFTA_SET_ELEM_LIST_SET, Data: []byte(sname + "\x00")}}
		// A dump of more elements than one message holds resumes by
		// skipping as many as were sent, in the order the set walks
		// them. A hash set the kernel is resizing (it does so in the
		// background after a large write) walks in another order from
		// one message to the next, and the dump repeats some elements
		// and leaves as many out, the count right and the content wrong.
		// A set never holds one element twice, so a repeat gives it
		// away: the set is read again once the resize is done.
		repeated := false
		for try := 1; ; try++ {
			err := dump(nl, unix.NFT_MSG_GETSETELEM, attrs, func() { clear(s.elements); s.count = 0; repeated = false }, func(b []byte) error {
				return walk(b, func(typ uint16, data []byte) error {
					if typ != unix.NFTA_SET_ELEM_LIST_ELEMENTS {
						return nil
					}
					return walk(data, func(typ uint16, data []byte) error {
						if typ != unix.NFTA_LIST_ELEM {
							return nil
						}
						var err error
						if buf, err = appendCanonElement(buf[:0], data); err != nil {
							return err
						}
						if s.elements[string(buf)] > 0 {
							repeated = true
						}
						s.elements[string(buf)]++
						s.count++
						return nil
					})
				})
			})
			if err != nil {
				return nil, fmt.Errorf("read set %s: %w", sname, err)
			}
			if !repeated {
				break
			}
			if try == dumpTries {
				return nil, fmt.Errorf("read set %s: %w", sname, errDumpRepeats)
			}
			time.Sleep(time.Duration(try) * 10 * time.Millisecond)
		}
	}
	return kt, nil
}

// An attr is one netlink attribute, its type without the flag bits.
type attr struct {
	typ  uint16
	data []byte
}

// A schema says how to put a nest of attributes into canonical form.
type schema struct {
	// nest returns the schema of the nest that attribute typ holds, nil
	// when its value is plain bytes.
	nest func(typ uint16) *schema
	// keep leaves out the attributes it is false for; nil keeps all.
	keep func(typ uint16, data []byte) bool
	// defaults are added when their type is absent.
	defaults []attr
}

var (
	// plain: attributes of plain values (a verdict's code and chain, an
	// expression the writer never uses).
	plain = &schema{}
	// nftData: an nft_data nest, a NFTA_DATA_VALUE or a NFTA_DATA_VERDICT
	// nest.
	nftData = &schema{nest: func(typ uint16) *schema {
		if typ == unix.NFTA_DATA_VERDICT {
			return plain
		}
		return nil
	}}
	// exprSchemas: the expressions the writer uses, by name. Their
	// nft_data nests, the lookup's set id (which names the set within the
	// batch that creates it; the kernel dumps its name, which is sent too)
	// and the defaults the kernel dumps when they were not sent: a lookup
	// not inverted, a bitwise NFT_BITWISE_BOOL.
	exprSchemas = map[string]*schema{
		"cmp":       {nest: dataIf(unix.NFTA_CMP_DATA)},
		"immediate": {nest: dataIf(unix.NFTA_IMMEDIATE_DATA)},
		"range":     {nest: dataIf(unix.NFTA_RANGE_FROM_DATA, unix.NFTA_RANGE_TO_DATA)},
		"bitwise": {
			nest:     dataIf(unix.NFTA_BITWISE_MASK, unix.NFTA_BITWISE_XOR, nftaBitwiseData),
			defaults: []attr{{nftaBitwiseOp, []byte{0, 0, 0, unix.NFT_BITWISE_BOOL}}},
		},
		"lookup": {
			keep:     func(typ uint16, _ []byte) bool { return typ != unix.NFTA_LOOKUP_SET_ID },
			defaults: []attr{{unix.NFTA_LOOKUP_FLAGS, []byte{0, 0, 0, 0}}},
		},
		// A counter's values are what it counted, not what the rule
		// says (RuleCounters reads them).
		"counter": {keep: func(uint16, []byte) bool { return false }},
		// A limit's rate, unit, burst, type and flags are content (the
		// kernel dumps all five, sent or not); the padding some
		// architectures put before a 64-bit value is not.
		"limit": {keep: func(typ uint16, _ []byte) bool { return typ != unix.NFTA_LIMIT_PAD }},
	}
	// element: a set element (the attributes of an NFTA_LIST_ELEM): its
	// key, key end, data and flags, and anything else the kernel holds for
	// it (a timeout, expressions) but its comment. Zero flags are no
	// flags, whether sent or not.
	element = &schema{
		nest: dataIf(unix.NFTA_SET_ELEM_KEY, nftaSetElemKeyEnd, unix.NFTA_SET_ELEM_DATA),
		keep: func(typ uint16, data []byte) bool {
			return typ != unix.NFTA_SET_ELEM_USERDATA && !(typ == unix.NFTA_SET_ELEM_FLAGS && u32(data) == 0)
		},
	}
)

// dataIf is a schema's nest for attribute types holding nft_data.
func dataIf(types ...uint16) func(uint16) *schema {
	return func(typ uint16) *schema {
		if slices.Contains(types, typ) {
			return nftData
		}
		return nil
	}
}

// maxAttrs is how many attributes of one nest the canonical encoder sorts
// without allocating; more is no error, only slower.
const maxAttrs = 12

// appendCanon appends the canonical form of the nest b under sc: its
// attributes sorted by type (stable), each as type (2 bytes), length (4)
// and value, the value itself canonical where it is a nest.
func appendCanon(dst, b []byte, sc *schema) ([]byte, error) {
	var arr [maxAttrs]attr
	attrs := arr[:0]
	err := walk(b, func(typ uint16, data []byte) error {
		if sc.keep == nil || sc.keep(typ, data) {
			attrs = append(attrs, attr{typ, data})
		}
		return nil
	})
	if err != nil {
		return dst, err
	}
	for _, d := range sc.defaults {
		found := false
		for _, a := range attrs {
			found = found || a.typ == d.typ
		}
		if !found {
			attrs = append(attrs, d)
		}
	}
	for i := 1; i < len(attrs); i++ { // insertion sort: a handful, nearly sorted
		for j := i; j > 0 && attrs[j].typ < attrs[j-1].typ; j-- {
			attrs[j], attrs[j-1] = attrs[j-1], attrs[j]
		}
	}
	for _, a := range attrs {
		dst = binary.BigEndian.AppendUint16(dst, a.typ)
		at := len(dst)
		dst = append(dst, 0, 0, 0, 0)
		var sub *schema
		if sc.nest != nil {
			sub = sc.nest(a.typ)
		}
		if sub != nil {
			if dst, err = appendCanon(dst, a.data, sub); err != nil {
				return dst, err
			}
		} else {
			dst = append(dst, a.data...)
		}
		binary.BigEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
	}
	return dst, nil
}

// exprParts splits one expression (the attributes of an NFTA_LIST_ELEM of
// NFTA_RULE_EXPRESSIONS) into its name and its data.
func exprParts(b []byte) (name string, data []byte, err error) {
	err = walk(b, func(typ uint16, v []byte) error {
		switch typ {
		case unix.NFTA_EXPR_NAME:
			name = str(v)
		case unix.NFTA_EXPR_DATA:
			data = v
		}
		return nil
	})
	return name, data, err
}

// appendCanonExpr appends the canonical form of one expression (the
// attributes NFTA_EXPR_NAME and NFTA_EXPR_DATA): its name's length (2
// bytes) and name, then the length (4) and canonical form of its data.
func appendCanonExpr(dst, b []byte) ([]byte, error) {
	name, data, err := exprParts(b)
	if err != nil {
		return dst, err
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(name)))
	dst = append(dst, name...)
	at := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	sc := exprSchemas[name]
	if sc == nil {
		sc = plain
	}
	dst, err = appendCanon(dst, data, sc)
	binary.BigEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
	return dst, err
}

// appendCanonExprList appends the canonical forms of a list of
// expressions (NFTA_RULE_EXPRESSIONS).
func appendCanonExprList(dst, b []byte) ([]byte, error) {
	err := walk(b, func(typ uint16, data []byte) error {
		if typ != unix.NFTA_LIST_ELEM {
			return nil
		}
		var err error
		dst, err = appendCanonExpr(dst, data)
		return err
	})
	return dst, err
}

// splitExprs splits canonical expressions (appendCanonExprList) into
// their names and canonical data, for a description.
func splitExprs(b []byte) (names []string, data [][]byte) {
	for len(b) >= 2 {
		n := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+n+4 {
			break
		}
		name := string(b[2 : 2+n])
		b = b[2+n:]
		m := int(binary.BigEndian.Uint32(b))
		if len(b) < 4+m {
			break
		}
		names, data = append(names, name), append(data, b[4:4+m])
		b = b[4+m:]
	}
	return names, data
}

// appendCanonElement appends the canonical form of a set element (the
// attributes of an NFTA_LIST_ELEM).
func appendCanonElement(dst, b []byte) ([]byte, error) {
	return appendCanon(dst, b, element)
}

// attrsOf encodes attributes as netlink does, for appendCanon.
func attrsOf(attrs ...attr) []byte {
	var out []byte
	for _, a := range attrs {
		n := 4 + len(a.data)
		out = binary.NativeEndian.AppendUint16(out, uint16(n))
		out = binary.NativeEndian.AppendUint16(out, a.typ)
		out = append(out, a.data...)
		out = append(out, make([]byte, (n+3)&^3-n)...)
	}
	return out
}

// wantElement appends the canonical form of an element as the writer
// encodes it (see appendCanonElement).
func wantElement(dst []byte, e nftables.SetElement) []byte {
	attrs := []attr{{unix.NFTA_SET_ELEM_KEY, attrsOf(attr{unix.NFTA_DATA_VALUE, e.Key})}}
	if len(e.KeyEnd) > 0 {
		attrs = append(attrs, attr{nftaSetElemKeyEnd, attrsOf(attr{unix.NFTA_DATA_VALUE, e.KeyEnd})})
	}
	if e.IntervalEnd {
		attrs = append(attrs, attr{unix.NFTA_SET_ELEM_FLAGS, binary.BigEndian.AppendUint32(nil, unix.NFT_SET_ELEM_INTERVAL_END)})
	}
	if v := e.VerdictData; v != nil {
		va := []attr{{unix.NFTA_VERDICT_CODE, binary.BigEndian.AppendUint32(nil, uint32(v.Kind))}}
		if v.Chain != "" {
			va = append(va, attr{unix.NFTA_VERDICT_CHAIN, []byte(v.Chain + "\x00")})
		}
		attrs = append(attrs, attr{unix.NFTA_SET_ELEM_DATA, attrsOf(attr{unix.NFTA_DATA_VERDICT, attrsOf(va...)})})
	}
	dst, _ = appendCanon(dst, attrsOf(attrs...), element) // well-formed by construction
	return dst
}

// wantRule appends the canonical form of the expressions the writer
// encodes for r (see appendCanonExprList).
func wantRule(dst []byte, r Rule, sets map[string]*nftables.Set) ([]byte, error) {
	exprs, err := encodeRule(r, sets)
	if err != nil {
		return dst, err
	}
	for _, e := range exprs {
		b, err := expr.Marshal(byte(nftables.TableFamilyINet), e)
		if err != nil {
			return dst, err
		}
		if dst, err = appendCanonExpr(dst, b); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// ReadTable reads the chains and sets of an inet table.
func (c *Conn) ReadTable(name string) (*TableState, error) {
	kt, err := c.readKernel(name)
	if err != nil {
		return nil, fmt.Errorf("read table inet %s: %w", name, err)
	}
	st := &TableState{Chains: map[string][]string{}, Sets: map[string]int{}}
	for cname, ch := range kt.chains {
		comments := make([]string, 0, len(ch.rules))
		for _, r := range ch.rules {
			s, _ := userdata.GetString(r.userdata, userdata.TypeComment)
			comments = append(comments, s)
		}
		st.Chains[cname] = comments
	}
	for sname, s := range kt.sets {
		st.Sets[sname] = s.count
	}
	return st, nil
}

// Drift compares the table in the kernel with t, the table last programmed,
// by content, and describes the first difference found, or returns "" when
// they agree. It compares the table's flags; each chain, with the type,
// hook, priority and policy of a base chain; every rule, expression by
// expression, and its comment; every set's key type and flags, and its
// elements, verdicts included. A missing table is drift too. What the
// kernel does not echo (handles, set ids) or echoes in its own form is
// normalized first (see appendCanon).
func (c *Conn) Drift(t *Table) (string, error) {
	got, err := c.readKernel(t.Name)
	if errors.Is(err, ErrNoTable) {
		return "table inet " + t.Name + " is gone", nil
	}
	if err != nil {
		return "", fmt.Errorf("read table inet %s: %w", t.Name, err)
	}
	if got.flags != tableFlags {
		return fmt.Sprintf("table flags are %#x%s, programmed %#x", got.flags, dormant(got.flags), tableFlags), nil
	}
	if d, err := chainDrift(got, t); d != "" || err != nil {
		return d, err
	}
	return setDrift(got, t)
}

func dormant(flags uint32) string {
	if flags&unix.NFT_TABLE_F_DORMANT != 0 {
		return " (dormant: no chain of the table sees a packet)"
	}
	return ""
}

func chainDrift(got *kernelTable, t *Table) (string, error) {
	want := make(map[string]bool, len(t.Chains))
	for _, ch := range t.Chains {
		want[ch.Name] = true
	}
	for name := range got.chains {
		if !want[name] {
			return "chain " + name + " in the kernel was not programmed", nil
		}
	}
	sets := make(map[string]*nftables.Set, len(t.Sets))
	for _, s := range t.Sets {
		// Interval: an address . protocol . port map lookup is encoded
		// as its map's kind asks (see encodeRule).
		sets[s.Name] = &nftables.Set{Name: s.Name, Interval: s.Interval}
	}
	var buf []byte
	for _, ch := range t.Chains {
		kc, ok := got.chains[ch.Name]
		if !ok {
			return "chain " + ch.Name + " is missing", nil
		}
		if d, err := hookDrift(kc, ch); d != "" || err != nil {
			return d, err
		}
		if len(kc.rules) != len(ch.Rules) {
			return fmt.Sprintf("chain %s holds %d rules, %d programmed", ch.Name, len(kc.rules), len(ch.Rules)), nil
		}
		for i, r := range ch.Rules {
			var err error
			if buf, err = wantRule(buf[:0], r, sets); err != nil {
				return "", fmt.Errorf("chain %s rule %d (%s): %w", ch.Name, i, RenderRule(r), err)
			}
			kr := kc.rules[i]
			if !bytes.Equal(kr.exprs, buf) {
				return fmt.Sprintf("chain %s rule %d (%s): %s", ch.Name, i, RenderRule(r), exprDrift(kr.exprs, buf)), nil
			}
			var ud []byte
			if r.Comment != "" {
				ud = userdata.AppendString(nil, userdata.TypeComment, r.Comment)
			}
			if !bytes.Equal(kr.userdata, ud) {
				s, _ := userdata.GetString(kr.userdata, userdata.TypeComment)
				return fmt.Sprintf("chain %s rule %d (%s): comment %q, programmed %q", ch.Name, i, RenderRule(r), s, r.Comment), nil
			}
		}
	}
	return "", nil
}

func hookDrift(kc *kernelChain, ch *Chain) (string, error) {
	h := ch.Hook
	switch {
	case h == nil && kc.hook == nil:
		if kc.flags != 0 {
			return fmt.Sprintf("chain %s has flags %#x", ch.Name, kc.flags), nil
		}
		return "", nil
	case h == nil:
		return "chain " + ch.Name + " is a base chain in the kernel", nil
	case kc.hook == nil:
		return "base chain " + ch.Name + " is a regular chain in the kernel", nil
	}
	num, err := hookNum(h.Hook)
	if err != nil {
		return "", fmt.Errorf("chain %s: %w", ch.Name, err)
	}
	policy := uint32(nftables.ChainPolicyAccept)
	if h.Policy == Drop {
		policy = uint32(nftables.ChainPolicyDrop)
	}
	k := kc.hook
	switch {
	case k.typ != h.Type:
		return fmt.Sprintf("chain %s has type %s, programmed %s", ch.Name, k.typ, h.Type), nil
	case k.num != uint32(*num):
		return fmt.Sprintf("chain %s is on hook %d, programmed %s (%d)", ch.Name, k.num, h.Hook, *num), nil
	case k.priority != h.Priority:
		return fmt.Sprintf("chain %s has priority %d, programmed %d", ch.Name, k.priority, h.Priority), nil
	case k.policy != policy:
		return fmt.Sprintf("chain %s has policy %s, programmed %s", ch.Name, policyName(k.policy), h.Policy), nil
	case kc.flags != nftChainBase:
		return fmt.Sprintf("chain %s has flags %#x", ch.Name, kc.flags), nil
	}
	return "", nil
}

func policyName(p uint32) string {
	switch p {
	case uint32(nftables.ChainPolicyAccept):
		return "accept"
	case uint32(nftables.ChainPolicyDrop):
		return "drop"
	}
	return fmt.Sprint(p)
}

// exprDrift describes the first difference between the canonical
// expressions of a rule in the kernel and those programmed.
func exprDrift(got, want []byte) string {
	gn, gd := splitExprs(got)
	wn, wd := splitExprs(want)
	for i := range min(len(gn), len(wn)) {
		if gn[i] == wn[i] && bytes.Equal(gd[i], wd[i]) {
			continue
		}
		g, w := describeExpr(gn[i], gd[i]), describeExpr(wn[i], wd[i])
		if g == w {
			return fmt.Sprintf("expression %d (%s) differs from the one programmed", i, g)
		}
		return fmt.Sprintf("expression %d is %s in the kernel, programmed %s", i, g, w)
	}
	return fmt.Sprintf("%d expressions in the kernel, %d programmed", len(gn), len(wn))
}

// describeExpr names an expression, or the verdict of an immediate.
func describeExpr(name string, data []byte) string {
	if name == "immediate" {
		if v, ok := verdictOf(data, unix.NFTA_IMMEDIATE_DATA); ok {
			return v
		}
	}
	return name
}

// verdictOf decodes the verdict in the nft_data attribute typ of a
// canonical form.
func verdictOf(canon []byte, typ uint16) (string, bool) {
	data, ok := canonAttr(canon, typ)
	if !ok {
		return "", false
	}
	v, ok := canonAttr(data, unix.NFTA_DATA_VERDICT)
	if !ok {
		return "", false
	}
	code, ok := canonAttr(v, unix.NFTA_VERDICT_CODE)
	if !ok || len(code) != 4 {
		return "", false
	}
	chain, _ := canonAttr(v, unix.NFTA_VERDICT_CHAIN)
	var s string
	switch k := expr.VerdictKind(int32(binary.BigEndian.Uint32(code))); k {
	case expr.VerdictAccept:
		s = "accept"
	case expr.VerdictDrop:
		s = "drop"
	case expr.VerdictReturn:
		s = "return"
	case expr.VerdictJump:
		s = "jump"
	case expr.VerdictGoto:
		s = "goto"
	case expr.VerdictContinue:
		s = "continue"
	default:
		s = fmt.Sprintf("verdict %d", k)
	}
	if len(chain) > 0 {
		s += " " + str(chain)
	}
	return s, true
}

// canonAttr returns the value of attribute typ in a canonical form.
func canonAttr(b []byte, typ uint16) ([]byte, bool) {
	for len(b) >= 6 {
		t, n := binary.BigEndian.Uint16(b), int(binary.BigEndian.Uint32(b[2:]))
		if len(b) < 6+n {
			return nil, false
		}
		if t == typ {
			return b[6 : 6+n], true
		}
		b = b[6+n:]
	}
	return nil, false
}

// setDrift compares the sets; it consumes got's element counts.
func setDrift(got *kernelTable, t *Table) (string, error) {
	var buf []byte
	want := make(map[string]bool, len(t.Sets))
	for _, s := range t.Sets {
		want[s.Name] = true
	}
	for name := range got.sets {
		if !want[name] {
			return "set " + name + " in the kernel was not programmed", nil
		}
	}
	for _, s := range t.Sets {
		ks, ok := got.sets[s.Name]
		if !ok {
			return "set " + s.Name + " is missing", nil
		}
		// As addSet declares it.
		key := keyDatatype(s.Key)
		var flags, dataType uint32
		if s.Interval {
			flags |= unix.NFT_SET_INTERVAL
		}
		if s.Verdict {
			flags |= unix.NFT_SET_MAP
			dataType = unix.NFT_DATA_VERDICT
		}
		var fields []uint32
		if s.protoPortMap() {
			flags |= nftSetConcat
			for _, f := range nftables.ConcatSetTypeElements(key) {
				fields = append(fields, f.Bytes)
			}
		}
		switch {
		case ks.flags != flags:
			return fmt.Sprintf("set %s has flags %#x, programmed %#x", s.Name, ks.flags, flags), nil
		case ks.keyType != key.GetNFTMagic() || ks.keyLen != key.Bytes:
			return fmt.Sprintf("set %s has key type %#x of %d bytes, programmed %s", s.Name, ks.keyType, ks.keyLen, key.Name), nil
		case ks.dataType != dataType:
			return fmt.Sprintf("set %s has data type %#x, programmed %#x", s.Name, ks.dataType, dataType), nil
		case !slices.Equal(ks.fields, fields):
			return fmt.Sprintf("set %s has concatenated fields of %v bytes, programmed %v", s.Name, ks.fields, fields), nil
		}
		elems, err := encodeElements(s)
		if err != nil {
			return "", fmt.Errorf("set %s: %w", s.Name, err)
		}
		// What the kernel holds is counted down by what was programmed:
		// anything missing shows on the way, anything more at the end.
		// The kernel's element order (hash, tree) is its own.
		left := ks.elements
		for _, e := range elems {
			buf = wantElement(buf[:0], e)
			if left[string(buf)] == 0 {
				return fmt.Sprintf("set %s: element %s is missing", s.Name, describeElement(s, buf)), nil
			}
			left[string(buf)]--
		}
		for e, n := range left {
			if n > 0 {
				return fmt.Sprintf("set %s: element %s in the kernel was not programmed", s.Name, describeElement(s, []byte(e))), nil
			}
		}
	}
	return "", nil
}

// describeElement prints a canonical element of s as nft would, roughly:
// its key, "(end)" for the end of an interval, flags, the verdict.
func describeElement(s *Set, b []byte) string {
	var out string
	if k, ok := canonAttr(b, unix.NFTA_SET_ELEM_KEY); ok {
		key, _ := canonAttr(k, unix.NFTA_DATA_VALUE)
		out = describeKey(s, key)
		if k, ok := canonAttr(b, nftaSetElemKeyEnd); ok {
			end, _ := canonAttr(k, unix.NFTA_DATA_VALUE)
			out += " - " + describeKey(s, end)
		}
	} else {
		out = "*" // a catch-all element has no key
	}
	if f, ok := canonAttr(b, unix.NFTA_SET_ELEM_FLAGS); ok && len(f) == 4 {
		switch flags := binary.BigEndian.Uint32(f); flags {
		case unix.NFT_SET_ELEM_INTERVAL_END:
			out += " (end of an interval)"
		default:
			out += fmt.Sprintf(" (flags %#x)", flags)
		}
	}
	if v, ok := verdictOf(b, unix.NFTA_SET_ELEM_DATA); ok {
		out += " : " + v
	}
	return out
}

func describeKey(s *Set, key []byte) string {
	addrLen := 4
	if s.Key.Family() == IPv6 {
		addrLen = 16
	}
	if len(key) < addrLen {
		return fmt.Sprintf("%x", key)
	}
	a, _ := netip.AddrFromSlice(key[:addrLen])
	if !s.Key.Concat() {
		if len(key) != addrLen {
			return fmt.Sprintf("%x", key)
		}
		return a.String()
	}
	rest := key[addrLen:]
	if len(rest) != 8 {
		return fmt.Sprintf("%x", key)
	}
	return fmt.Sprintf("%s . %d . %d", a, rest[0], binary.BigEndian.Uint16(rest[4:]))
}
