package doctor

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nftpolicy/nftpolicy/enforcer"
	"github.com/nftpolicy/nftpolicy/nft"
)

// A Report is everything `nftpolicy doctor` found, in the order it prints
// it. Its JSON form is `nftpolicy doctor --json` (field names in doc.go).
type Report struct {
	Netns      string    `json:"netns"` // "" for the current namespace
	Table      string    `json:"table"` // "inet nftpolicy"
	MarkMask   Hex       `json:"markMask"`
	Generation uint32    `json:"generation"`
	Hooks      []Hook    `json:"hooks"`
	Marks      Marks     `json:"marks"`
	Ours       Ours      `json:"ours"`
	Features   []Feature `json:"features"`
	Warnings   []Warning `json:"warnings"`
}

// A Hex is a mark or mask, "0x00004000" in JSON and text.
type Hex uint32

func (h Hex) String() string { return fmt.Sprintf("0x%08x", uint32(h)) }

// MarshalText makes JSON print a Hex as its String.
func (h Hex) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText reads a Hex back from a report's JSON.
func (h *Hex) UnmarshalText(b []byte) error {
	v, err := strconv.ParseUint(string(b), 0, 32)
	if err != nil {
		return fmt.Errorf("mark %q: %w", b, err)
	}
	*h = Hex(v)
	return nil
}

// A Hook is one hook's base chains, in the order packets meet them.
type Hook struct {
	// Families sharing the hook: "ip ip6 inet" (an inet chain sees the
	// packets of both), "arp", "bridge", "netdev".
	Families string  `json:"families"`
	Hook     string  `json:"hook"`
	Device   string  `json:"device,omitempty"`
	Chains   []Chain `json:"chains"`
}

// A Chain is a base chain on a Hook.
type Chain struct {
	Priority  int32  `json:"priority"`
	Family    string `json:"family"`
	Table     string `json:"table"`
	Chain     string `json:"chain"`
	Type      string `json:"type"`
	Policy    string `json:"policy"`
	Component string `json:"component"`
	Ours      bool   `json:"ours"`
}

// Marks are the mark bits other tables read and write, against our mask.
type Marks struct {
	// KnownUsers are the components of enforcer.KnownMarkUsers whose bits
	// the mask overlaps ("kube-proxy 0x00004000").
	KnownUsers []string     `json:"knownUsers"`
	Tables     []TableMarks `json:"tables"`
}

// TableMarks are one table's reads and writes of the marks.
type TableMarks struct {
	Family    string `json:"family"`
	Table     string `json:"table"`
	Component string `json:"component"`
	MetaRead  Hex    `json:"metaRead"`  // packet-mark bits compared under a mask
	MetaWrite Hex    `json:"metaWrite"` // packet-mark bits it may change
	CtRead    Hex    `json:"ctRead"`
	CtWrite   Hex    `json:"ctWrite"`
	// Exact are the values a rule compares the whole packet or conntrack
	// mark with (`meta mark 0x4000`): they hold only while our bits are
	// clear, as nftpolicy leaves them. They are not counted as reads.
	Exact []Hex `json:"exact"`
	// Overlap is the part of our mask that the table reads or writes.
	Overlap Hex   `json:"overlap"`
	Uses    []Use `json:"uses"`
}

// A Use is one rule's read or write of a mark (nft.MarkUse).
type Use struct {
	Chain     string `json:"chain"`
	Handle    uint64 `json:"handle"`
	Mark      string `json:"mark"`   // "meta mark" or "ct mark"
	Access    string `json:"access"` // "read" or "write"
	Bits      Hex    `json:"bits"`
	Value     Hex    `json:"value"`
	Exact     bool   `json:"exact"`
	Via       string `json:"via"`
	Undecoded bool   `json:"undecoded"`
}

// Ours is our table's state, against what the daemon programs.
type Ours struct {
	Present bool   `json:"present"`
	Comment string `json:"comment"`
	// Owner is the owner record of the comment (nft.Owner); nil without one.
	Owner *Owner `json:"owner"`
	// Layout is the table layout this build writes (enforcer.Layout).
	Layout int `json:"layout"`
	// Source is what the table was compiled from for Content; "" when
	// no source was given and the content was not compared.
	Source string `json:"source"`
	// Content is "matches", the first difference found (nft.Conn.Drift),
	// or "" when not compared.
	Content string `json:"content"`
}

// An Owner is the owner record of our table.
type Owner struct {
	ID     string    `json:"id"`
	Since  time.Time `json:"since"`
	Layout int       `json:"layout"`
	// Alive is whether the process that wrote it still runs (nft.Conn.Alive).
	Alive    bool   `json:"alive"`
	AliveErr string `json:"aliveError,omitempty"`
}

// A Feature is one kernel feature, checked.
type Feature struct {
	Name  string `json:"name"`
	Used  bool   `json:"used"` // by this build's table
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"` // the kernel's, when not OK
}

// A Warning is a finding that needs a look: Kind is one of the Warn*
// constants.
type Warning struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// Warning kinds.
const (
	WarnSamePriority = "same-priority"  // another base chain has our exact priority on our hook
	WarnAhead        = "runs-ahead"     // a kube-proxy, Calico or iptables-nft filter chain runs before ours
	WarnMarkOverlap  = "mark-overlap"   // another table reads or writes our bits
	WarnKnownUser    = "mark-known"     // the mask overlaps a known component's bits
	WarnNoTable      = "no-table"       // our table is missing, or has no base chain
	WarnOwner        = "owner"          // no owner record, or its owner does not run
	WarnLayout       = "layout"         // the owner record's layout is not this build's
	WarnContent      = "content"        // the table differs from the one compiled from the source
	WarnFeature      = "feature"        // a kernel feature the table uses is missing
	WarnUnreadable   = "unreadable"     // rules that could not be read or decoded
	WarnChanged      = "changed"        // the ruleset changed while the doctor read it
	WarnUndecoded    = "mark-undecoded" // an xtables mark extension whose data is not decoded
)

// Options say what to check.
type Options struct {
	Netns    string // for the report; the Conn is already on it
	Table    string // enforcer.DefaultTable when empty
	MarkMask uint32 // enforcer.DefaultMarkMask when zero
	// Expected is the table the daemon would program now, compiled from
	// Source; nil to leave the content uncompared.
	Expected *nft.Table
	Source   string
}

// Facts are the reads a Report is built from.
type Facts struct {
	Inspection *nft.Inspection
	Comment    string
	HasTable   bool
	Alive      bool
	AliveErr   error
	Drift      string // "" when it matches, or when Expected is nil
	Features   []nft.FeatureCheck
	FeatureErr error  // the checks could not run
	GenAfter   uint32 // the generation once every read is done
}

// Check reads conn's namespace, never writing to it, and reports.
func Check(conn *nft.Conn, opts Options) (*Report, error) {
	opts = opts.withDefaults()
	var f Facts
	var err error
	if f.Inspection, err = conn.Inspect(); err != nil {
		return nil, err
	}
	f.Comment, err = conn.TableComment(opts.Table)
	switch {
	case errors.Is(err, nft.ErrNoTable):
	case err != nil:
		return nil, err
	default:
		f.HasTable = true
	}
	if o, ok := nft.ParseOwner(f.Comment); ok {
		f.Alive, f.AliveErr = conn.Alive(o)
	}
	if opts.Expected != nil {
		if f.Drift, err = conn.Drift(opts.Expected); err != nil {
			return nil, err
		}
	}
	f.Features, f.FeatureErr = nft.ProbeFeatures()
	if f.GenAfter, err = conn.Generation(); err != nil {
		return nil, err
	}
	return Build(f, opts), nil
}

func (o Options) withDefaults() Options {
	if o.Table == "" {
		o.Table = enforcer.DefaultTable
	}
	if o.MarkMask == 0 {
		o.MarkMask = enforcer.DefaultMarkMask
	}
	return o
}

// Build makes the Report of facts, read by Check: it does no I/O.
func Build(f Facts, opts Options) *Report {
	opts = opts.withDefaults()
	in := f.Inspection
	r := &Report{Netns: opts.Netns, Table: "inet " + opts.Table, MarkMask: Hex(opts.MarkMask), Generation: in.Generation,
		Hooks: []Hook{}, Features: []Feature{}, Warnings: []Warning{}}
	warn := func(kind, format string, args ...any) {
		r.Warnings = append(r.Warnings, Warning{kind, fmt.Sprintf(format, args...)})
	}
	components := map[string]string{} // "family name" → component
	for _, t := range in.Tables {
		s := tableShape{family: t.Family, name: t.Name}
		for _, c := range t.Chains {
			s.chains = append(s.chains, c.Name)
			if c.Hook != nil {
				s.base = append(s.base, c.Name)
			}
		}
		components[t.Family+" "+t.Name] = classify(s, opts.Table)
		for _, e := range t.Errors {
			warn(WarnUnreadable, "%s %s %s: its marks are not counted", t.Family, quoteName(t.Name), e)
		}
	}
	r.buildHooks(in, components, opts.Table)
	r.priorityWarnings(warn)
	r.buildMarks(in, components, opts, warn)
	r.buildOurs(f, opts, warn)
	if f.FeatureErr != nil {
		warn(WarnFeature, "kernel features not checked: %v", f.FeatureErr)
	}
	for _, fc := range f.Features {
		ft := Feature{Name: fc.Name, Used: fc.Used, OK: fc.Err == nil}
		if fc.Err != nil {
			ft.Error = fc.Err.Error()
			if fc.Used {
				warn(WarnFeature, "the kernel refuses %s, which the table uses: %v", fc.Name, fc.Err)
			}
		}
		r.Features = append(r.Features, ft)
	}
	if f.GenAfter != 0 && f.GenAfter != in.Generation {
		warn(WarnChanged, "the ruleset changed while it was read (generation %d, then %d): run the doctor again", in.Generation, f.GenAfter)
	}
	return r
}

// ipFamilies share the IP hooks: an inet chain sees the packets of both.
var ipFamilies = map[string]bool{"ip": true, "ip6": true, "inet": true}

func (r *Report) buildHooks(in *nft.Inspection, components map[string]string, ourTable string) {
	type key struct{ families, hook, device string }
	byKey := map[key]*Hook{}
	var order []key
	for _, t := range in.Tables {
		for _, c := range t.Chains {
			if c.Hook == nil {
				continue
			}
			families := t.Family
			if ipFamilies[t.Family] && c.Hook.Device == "" {
				families = "ip ip6 inet"
			}
			k := key{families, c.Hook.Hook, c.Hook.Device}
			h := byKey[k]
			if h == nil {
				h = &Hook{Families: k.families, Hook: k.hook, Device: k.device}
				byKey[k] = h
				order = append(order, k)
			}
			h.Chains = append(h.Chains, Chain{Priority: c.Hook.Priority, Family: t.Family, Table: t.Name, Chain: c.Name,
				Type: c.Hook.Type, Policy: c.Hook.Policy, Component: components[t.Family+" "+t.Name],
				Ours: t.Family == "inet" && (t.Name == ourTable || t.Name == nft.HandoverTable(ourTable))})
		}
	}
	// IP hooks first, in the order a forwarded packet meets them, then the
	// other families.
	rank := map[string]int{"ingress": 0, "prerouting": 1, "input": 2, "forward": 3, "output": 4, "postrouting": 5, "egress": 6}
	famRank := map[string]int{"ip ip6 inet": 0, "inet": 1, "ip": 1, "ip6": 1, "netdev": 2, "bridge": 3, "arp": 4}
	sort.Slice(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if famRank[a.families] != famRank[b.families] {
			return famRank[a.families] < famRank[b.families]
		}
		if a.families != b.families {
			return a.families < b.families
		}
		if rank[a.hook] != rank[b.hook] {
			return rank[a.hook] < rank[b.hook]
		}
		if a.hook != b.hook {
			return a.hook < b.hook
		}
		return a.device < b.device
	})
	for _, k := range order {
		h := byKey[k]
		sort.SliceStable(h.Chains, func(i, j int) bool {
			a, b := h.Chains[i], h.Chains[j]
			if a.Priority != b.Priority {
				return a.Priority < b.Priority
			}
			return a.Family+" "+a.Table+" "+a.Chain < b.Family+" "+b.Table+" "+b.Chain
		})
		r.Hooks = append(r.Hooks, *h)
	}
}

// priorityWarnings warns, for each of our base chains, of another base
// chain at its exact priority on its hook (their order is undefined), and
// of a kube-proxy, Calico or iptables-nft filter chain that runs before
// it. An ip chain and an ip6 chain never see the same packet, but our inet
// chain sees the packets of both.
func (r *Report) priorityWarnings(warn func(kind, format string, args ...any)) {
	for _, h := range r.Hooks {
		for _, ours := range h.Chains {
			if !ours.Ours {
				continue
			}
			for _, c := range h.Chains {
				switch {
				case c.Ours:
				case c.Priority == ours.Priority:
					warn(WarnSamePriority, "%s %s %s has the priority %d of our %s on hook %s: which runs first is undefined",
						c.Family, quoteName(c.Table), quoteName(c.Chain), c.Priority, quoteName(ours.Chain), h.Hook)
				case c.Priority < ours.Priority && c.Type == "filter" && watched(c.Component):
					warn(WarnAhead, "%s filter chain %s %s %s (priority %d) runs ahead of our %s (priority %d) on hook %s: its accept and its marks come first",
						c.Component, c.Family, quoteName(c.Table), quoteName(c.Chain), c.Priority, quoteName(ours.Chain), ours.Priority, h.Hook)
				}
			}
		}
	}
}

func (r *Report) buildMarks(in *nft.Inspection, components map[string]string, opts Options, warn func(kind, format string, args ...any)) {
	mask := opts.MarkMask
	r.Marks = Marks{KnownUsers: []string{}, Tables: []TableMarks{}}
	for _, u := range enforcer.KnownMarkUsers {
		if u.Bits&mask != 0 {
			r.Marks.KnownUsers = append(r.Marks.KnownUsers, fmt.Sprintf("%s %s", u.Name, Hex(u.Bits&mask)))
			warn(WarnKnownUser, "mask %s overlaps the bits %s of %s (%s)", Hex(mask), Hex(u.Bits&mask), u.Name, u.Why)
		}
	}
	for _, t := range in.Tables {
		if t.Family == "inet" && (t.Name == opts.Table || t.Name == nft.HandoverTable(opts.Table)) || len(t.Marks) == 0 {
			continue
		}
		tm := TableMarks{Family: t.Family, Table: t.Name, Component: components[t.Family+" "+t.Name], Exact: []Hex{}, Uses: []Use{}}
		exact := map[Hex]bool{}
		for _, u := range t.Marks {
			access := "read"
			if u.Write {
				access = "write"
			}
			tm.Uses = append(tm.Uses, Use{Chain: u.Chain, Handle: u.Handle, Mark: string(u.Kind), Access: access,
				Bits: Hex(u.Bits), Value: Hex(u.Value), Exact: u.Exact, Via: u.Via, Undecoded: u.Undecoded})
			if u.Undecoded {
				warn(WarnUndecoded, "%s %s chain %s rule %d: %s, counted as %s all bits", t.Family, quoteName(t.Name), quoteName(u.Chain), u.Handle, u.Via, access)
			}
			switch {
			case u.Exact:
				exact[Hex(u.Value)] = true
			case u.Kind == nft.MetaMark && u.Write:
				tm.MetaWrite |= Hex(u.Bits)
			case u.Kind == nft.MetaMark:
				tm.MetaRead |= Hex(u.Bits)
			case u.Write:
				tm.CtWrite |= Hex(u.Bits)
			default:
				tm.CtRead |= Hex(u.Bits)
			}
		}
		for v := range exact {
			tm.Exact = append(tm.Exact, v)
		}
		sort.Slice(tm.Exact, func(i, j int) bool { return tm.Exact[i] < tm.Exact[j] })
		// The conntrack mark counts too: nftpolicy's revoked bit comes from
		// the same mask (enforcer.RevokedBit).
		tm.Overlap = (tm.MetaRead | tm.MetaWrite | tm.CtRead | tm.CtWrite) & Hex(mask)
		if tm.Overlap != 0 {
			var what []string
			for _, p := range []struct {
				name string
				bits Hex
			}{{"reads the packet mark", tm.MetaRead}, {"writes the packet mark", tm.MetaWrite}, {"reads the conntrack mark", tm.CtRead}, {"writes the conntrack mark", tm.CtWrite}} {
				if p.bits&Hex(mask) != 0 {
					what = append(what, fmt.Sprintf("%s %s", p.name, p.bits&Hex(mask)))
				}
			}
			warn(WarnMarkOverlap, "%s %s (%s) uses bits of our mask %s: %s", t.Family, quoteName(t.Name), tm.Component, Hex(mask), strings.Join(what, ", "))
		}
		r.Marks.Tables = append(r.Marks.Tables, tm)
	}
}

func (r *Report) buildOurs(f Facts, opts Options, warn func(kind, format string, args ...any)) {
	o := Ours{Present: f.HasTable, Comment: f.Comment, Layout: enforcer.Layout, Source: opts.Source}
	defer func() { r.Ours = o }()
	if opts.Expected != nil {
		o.Content = "matches"
		if f.Drift != "" {
			o.Content = f.Drift
			warn(WarnContent, "the table differs from the one compiled from %s: %s", opts.Source, f.Drift)
		}
	}
	if !f.HasTable {
		warn(WarnNoTable, "there is no table %s: nothing enforces NetworkPolicy here", r.Table)
		return
	}
	base := 0
	for _, h := range r.Hooks {
		for _, c := range h.Chains {
			if c.Ours {
				base++
			}
		}
	}
	if base == 0 {
		warn(WarnNoTable, "table %s has no base chain: it sees no packet", r.Table)
	}
	rec, ok := nft.ParseOwner(f.Comment)
	if !ok {
		warn(WarnOwner, "table %s has no owner record (comment %q): it was not written by a running nftpolicy (nft -f, a backup, an old build)", r.Table, f.Comment)
		return
	}
	o.Owner = &Owner{ID: rec.ID(), Since: rec.Since, Layout: rec.Layout, Alive: f.Alive}
	switch {
	case f.AliveErr != nil:
		o.Owner.AliveErr = f.AliveErr.Error()
		warn(WarnOwner, "cannot tell whether owner %s runs: %v", quoteName(rec.ID()), f.AliveErr)
	case !f.Alive:
		warn(WarnOwner, "owner %s does not run: no daemon keeps the table in step with the cluster (as after `nftpolicy apply`)", quoteName(rec.ID()))
	}
	if rec.Layout != enforcer.Layout {
		warn(WarnLayout, "the table has layout %d, this build writes %d: a daemon of this build replaces it whole at its start", rec.Layout, enforcer.Layout)
	}
}
