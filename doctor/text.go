package doctor

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// WriteText prints the report in its stable text layout: fixed section
// headings in brackets, one fact per line (see doc.go).
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	// Every line goes through printable, whatever it holds: no name, kernel
	// error or drift description can start a line of its own or reach the
	// terminal as a control sequence.
	p := func(format string, args ...any) { fmt.Fprintf(&b, "%s\n", printable(fmt.Sprintf(format, args...))) }
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
			dev = " device " + quoteName(h.Device)
		}
		p("hook %s%s (%s):", h.Hook, dev, h.Families)
		for _, c := range h.Chains {
			ours := ""
			if c.Ours {
				ours = " [ours]"
			}
			p("  %11d  %s %s %s: type %s, policy %s, %s%s", c.Priority, c.Family, quoteName(c.Table), quoteName(c.Chain), quoteName(c.Type), c.Policy, c.Component, ours)
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
		p("table %s %s (%s):", t.Family, quoteName(t.Table), t.Component)
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
			p("  chain %s rule %d: %s %s bits %s value %s%s (%s)", quoteName(u.Chain), u.Handle, u.Access, u.Mark, u.Bits, u.Value, flags, u.Via)
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
			p("owner: %s", quoteName(o.Owner.ID))
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

// quoteName returns a name read from the kernel (a table's, a chain's, a
// device's) as it is when it is plain: printable ASCII, no space, no
// quote, backslash or bracket, not empty. Any other name is quoted, in
// Go's ASCII-only syntax ("a\nb", "\x1b[2J", "[our table]"), so that
// it cannot pose as a section, a line, a marker such as [ours] or more
// than one word of the layout. Ordinary names, nftpolicy's and
// kube-proxy's and iptables-nft's, are plain and print as before.
func quoteName(name string) string {
	if name == "" {
		return `""`
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\\' || c == '[' || c == ']' {
			return strconv.QuoteToASCII(name)
		}
	}
	return name
}

// printable escapes, in a line of text, everything but printable ASCII:
// a control character as \xNN (\n, \t and the like as such), any other
// rune as \uNNNN, a byte that is not UTF-8 as \xNN. A line of printable
// ASCII, quoted names included, comes back as it is.
func printable(line string) string {
	plain := true
	for i := 0; i < len(line); i++ {
		if c := line[i]; c < ' ' || c >= 0x7f {
			plain = false
			break
		}
	}
	if plain {
		return line
	}
	var b strings.Builder
	for i := 0; i < len(line); {
		r, n := utf8.DecodeRuneInString(line[i:])
		switch {
		case r >= ' ' && r < 0x7f:
			b.WriteRune(r)
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, line[i])
		default:
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}
