package doctor

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteText prints the report in its stable text layout: fixed section
// headings in brackets, one fact per line (see doc.go).
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	netns := r.Netns
	if netns == "" {
		netns = "(current)"
	}
	p("nftpolicy doctor")
	p("netns: %s", netns)
	p("table: %s", r.Table)
	p("mark mask: %s", r.MarkMask)
	p("ruleset generation: %d", r.Generation)

	p("")
	p("[base chains]")
	if len(r.Hooks) == 0 {
		p("none")
	}
	for _, h := range r.Hooks {
		dev := ""
		if h.Device != "" {
			dev = " device " + h.Device
		}
		p("hook %s%s (%s):", h.Hook, dev, h.Families)
		for _, c := range h.Chains {
			ours := ""
			if c.Ours {
				ours = " [ours]"
			}
			p("  %11d  %s %s %s: type %s, policy %s, %s%s", c.Priority, c.Family, c.Table, c.Chain, c.Type, c.Policy, c.Component, ours)
		}
	}

	p("")
	p("[marks]")
	known := "none"
	if len(r.Marks.KnownUsers) > 0 {
		known = strings.Join(r.Marks.KnownUsers, ", ")
	}
	p("known components using bits of %s: %s", r.MarkMask, known)
	if len(r.Marks.Tables) == 0 {
		p("no other table reads or writes a mark")
	}
	for _, t := range r.Marks.Tables {
		p("table %s %s (%s):", t.Family, t.Table, t.Component)
		p("  meta mark read:  %s", t.MetaRead)
		p("  meta mark write: %s", t.MetaWrite)
		p("  ct mark read:    %s", t.CtRead)
		p("  ct mark write:   %s", t.CtWrite)
		exact := make([]string, len(t.Exact))
		for i, v := range t.Exact {
			exact[i] = v.String()
		}
		if len(exact) == 0 {
			exact = []string{"none"}
		}
		p("  exact compares:  %s", strings.Join(exact, ", "))
		overlap := "none"
		if t.Overlap != 0 {
			overlap = t.Overlap.String()
		}
		p("  overlap with %s: %s", r.MarkMask, overlap)
		for _, u := range t.Uses {
			flags := ""
			if u.Exact {
				flags += " exact"
			}
			if u.Undecoded {
				flags += " undecoded"
			}
			p("  chain %s rule %d: %s %s bits %s value %s%s (%s)", u.Chain, u.Handle, u.Access, u.Mark, u.Bits, u.Value, flags, u.Via)
		}
	}

	p("")
	p("[our table]")
	o := r.Ours
	p("present: %s", yesNo(o.Present))
	if o.Present {
		if o.Owner == nil {
			p("owner: none (comment %q)", o.Comment)
		} else {
			p("owner: %s", o.Owner.ID)
			p("owner since: %s", o.Owner.Since.UTC().Format(time.RFC3339))
			p("owner running: %s", yesNo(o.Owner.Alive))
			p("owner layout: %d", o.Owner.Layout)
		}
	}
	p("layout of this build: %d", o.Layout)
	switch {
	case o.Source == "":
		p("content: not compared (give --manifests or --kubeconfig, and --node)")
	case o.Content == "matches":
		p("content: matches the table compiled from %s", o.Source)
	default:
		p("content: differs from the table compiled from %s: %s", o.Source, o.Content)
	}

	p("")
	p("[kernel features]")
	if len(r.Features) == 0 {
		p("not checked")
	}
	for _, f := range r.Features {
		used := ""
		if !f.Used {
			used = " (not used by this layout)"
		}
		if f.OK {
			p("%s: ok%s", f.Name, used)
		} else {
			p("%s: missing%s: %s", f.Name, used, f.Error)
		}
	}

	p("")
	p("[warnings]")
	for _, wn := range r.Warnings {
		p("%s: %s", wn.Kind, wn.Message)
	}
	p("warnings: %d", len(r.Warnings))
	_, err := io.WriteString(w, b.String())
	return err
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
