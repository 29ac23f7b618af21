package netns

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// A Matrix is a reachability table: for every pair of pods (rows: from,
// columns: to, keyed "namespace/pod") whether traffic got through. It serves
// both as the expectation a test builds and as what ProbeMatrix observed.
type Matrix struct {
	// Family, Proto and Port describe the probes (empty for an expectation).
	Family, Proto string
	Port          int
	// Retries counts probes that were tried again: blocked probes of cells
	// the expectation allows (every cell for ProbeMatrix). Recovered counts
	// those that got through on the retry: blocked, then passed (a lost
	// packet, or a flake worth a look).
	Retries, Recovered int
	// Flakes lists the probes that recovered on retry, "from -> to: first
	// error".
	Flakes []string
	// Leaks lists the probes that got through where the expectation blocks
	// them, "from -> to: ...". They are never retried: a packet that got
	// through where policy denies it is a failure, not a flake.
	Leaks []string
	// Errors lists harness failures (not blocked traffic), "from -> to: error".
	Errors []string
	// Elapsed is how long ProbeMatrix took.
	Elapsed time.Duration

	keys    []string
	index   map[string]int
	cells   []bool         // row-major, len(keys)^2
	reasons map[int]string // why a probe of a blocked cell failed, when known
}

// Keys returns the keys ("namespace/name") of pods, in order.
func Keys(pods []*Pod) []string {
	keys := make([]string, len(pods))
	for i, p := range pods {
		keys[i] = p.Key()
	}
	return keys
}

// NewMatrix returns a square matrix over keys with every cell set to allowed.
// It panics on a duplicate key.
func NewMatrix(keys []string, allowed bool) *Matrix {
	m := &Matrix{keys: slices.Clone(keys), index: make(map[string]int, len(keys))}
	for i, k := range keys {
		if _, dup := m.index[k]; dup {
			panic(fmt.Sprintf("netns: duplicate matrix key %q", k))
		}
		m.index[k] = i
	}
	m.cells = make([]bool, len(keys)*len(keys))
	if allowed {
		for i := range m.cells {
			m.cells[i] = true
		}
	}
	return m
}

// Keys returns the row and column keys, in order.
func (m *Matrix) Keys() []string { return slices.Clone(m.keys) }

func (m *Matrix) cell(from, to string) int {
	i, ok := m.index[from]
	if !ok {
		panic(fmt.Sprintf("netns: no pod %q in matrix", from))
	}
	j, ok := m.index[to]
	if !ok {
		panic(fmt.Sprintf("netns: no pod %q in matrix", to))
	}
	return i*len(m.keys) + j
}

// Get reports whether from reaches to. It panics on an unknown key.
func (m *Matrix) Get(from, to string) bool { return m.cells[m.cell(from, to)] }

// Set sets one cell. It panics on an unknown key.
func (m *Matrix) Set(from, to string, allowed bool) { m.cells[m.cell(from, to)] = allowed }

// setReason records why the probe of a cell failed, for Diff.
func (m *Matrix) setReason(from, to, reason string) {
	if m.reasons == nil {
		m.reasons = map[int]string{}
	}
	m.reasons[m.cell(from, to)] = reason
}

// Expect sets every cell whose row matches from and whose column matches to,
// and returns m for chaining. A pattern is "*" (every pod) or "namespace/pod"
// where either part may use path.Match wildcards: "x/*", "*/a", "x/a".
// It panics when a pattern is malformed or matches no key, since an
// expectation that silently expects nothing hides mistakes.
//
//	want := NewMatrix(keys, true).Expect("*", "y/*", false).Expect("y/*", "y/*", true)
func (m *Matrix) Expect(from, to string, allowed bool) *Matrix {
	rows, cols := m.match(from), m.match(to)
	for _, i := range rows {
		for _, j := range cols {
			m.cells[i*len(m.keys)+j] = allowed
		}
	}
	return m
}

func (m *Matrix) match(pattern string) []int {
	var idx []int
	for i, k := range m.keys {
		ok := pattern == "*"
		if !ok {
			var err error
			ok, err = path.Match(pattern, k)
			if err != nil {
				panic(fmt.Sprintf("netns: bad matrix pattern %q: %v", pattern, err))
			}
		}
		if ok {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		panic(fmt.Sprintf("netns: matrix pattern %q matches no pod", pattern))
	}
	return idx
}

// Clone returns a deep copy of m.
func (m *Matrix) Clone() *Matrix {
	c := *m
	c.keys = slices.Clone(m.keys)
	c.cells = slices.Clone(m.cells)
	c.Errors = slices.Clone(m.Errors)
	c.Flakes = slices.Clone(m.Flakes)
	c.reasons = maps.Clone(m.reasons)
	c.index = maps.Clone(m.index)
	return &c
}

// Equal reports whether m and o have the same keys in the same order and the
// same cells. Probe metadata (Family, Retries, ...) is not compared.
func (m *Matrix) Equal(o *Matrix) bool {
	return slices.Equal(m.keys, o.keys) && slices.Equal(m.cells, o.cells)
}

// Count returns how many cells are allowed and how many are blocked.
func (m *Matrix) Count() (allowed, blocked int) {
	for _, v := range m.cells {
		if v {
			allowed++
		} else {
			blocked++
		}
	}
	return allowed, blocked
}

// String prints the grid, rows = from, columns = to, "." allowed and "X"
// blocked, under a line describing the probes.
func (m *Matrix) String() string {
	var b strings.Builder
	b.WriteString(m.header())
	b.WriteString(m.grid(func(i int) string { return mark(m.cells[i]) }))
	m.writeNotes(&b)
	return b.String()
}

func (m *Matrix) writeNotes(b *strings.Builder) {
	for _, l := range m.Leaks {
		b.WriteString("LEAK: " + l + "\n")
	}
	for _, f := range m.Flakes {
		b.WriteString("passed on retry: " + f + "\n")
	}
	for _, e := range m.Errors {
		b.WriteString("error: " + e + "\n")
	}
}

func (m *Matrix) header() string {
	var parts []string
	if m.Proto != "" {
		parts = append(parts, fmt.Sprintf("%s/%d", m.Proto, m.Port))
	}
	if m.Family != "" {
		parts = append(parts, m.Family)
	}
	allowed, blocked := m.Count()
	parts = append(parts, fmt.Sprintf("%d allowed, %d blocked", allowed, blocked))
	if m.Proto != "" {
		parts = append(parts, fmt.Sprintf("%d retries (%d blocked then passed), %d leaks, %v", m.Retries, m.Recovered, len(m.Leaks), m.Elapsed.Round(time.Millisecond)))
	}
	return strings.Join(parts, ", ") + "  (. allowed, X blocked)\n"
}

func mark(allowed bool) string {
	if allowed {
		return "."
	}
	return "X"
}

// grid renders one character per cell from cell(index).
func (m *Matrix) grid(cell func(i int) string) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 1, ' ', 0)
	fmt.Fprint(w, "from\\to")
	for _, k := range m.keys {
		fmt.Fprint(w, "\t"+k)
	}
	fmt.Fprintln(w)
	n := len(m.keys)
	for i, k := range m.keys {
		fmt.Fprint(w, k)
		for j := range n {
			fmt.Fprint(w, "\t"+cell(i*n+j))
		}
		fmt.Fprintln(w)
	}
	w.Flush()
	return b.String()
}

// Diff returns "" when m (observed) equals expected, else a report with the
// expected grid, the observed grid, a grid marking the differing cells with
// "X", and one line per differing cell (with the probe's error when a probe
// failed unexpectedly).
func (m *Matrix) Diff(expected *Matrix) string {
	if m.Equal(expected) {
		return ""
	}
	var b strings.Builder
	if !slices.Equal(m.keys, expected.keys) {
		fmt.Fprintf(&b, "pods differ:\nexpected %v\nobserved %v\n", expected.keys, m.keys)
		return b.String()
	}
	var diffs []string
	n := len(m.keys)
	for i := range m.cells {
		if m.cells[i] != expected.cells[i] {
			d := fmt.Sprintf("%s -> %s: expected %s, observed %s",
				m.keys[i/n], m.keys[i%n], word(expected.cells[i]), word(m.cells[i]))
			if r, ok := m.reasons[i]; ok {
				d += " (" + r + ")"
			}
			if m.cells[i] && !expected.cells[i] {
				d += ": a leak"
			}
			diffs = append(diffs, d)
		}
	}
	what := strings.TrimSpace(fmt.Sprintf("%s %s", m.probeName(), m.Family))
	fmt.Fprintf(&b, "reachability %s: %d of %d cells differ\n", what, len(diffs), len(m.cells))
	b.WriteString("expected:\n")
	b.WriteString(expected.grid(func(i int) string { return mark(expected.cells[i]) }))
	b.WriteString("observed:\n")
	b.WriteString(m.header())
	b.WriteString(m.grid(func(i int) string { return mark(m.cells[i]) }))
	b.WriteString("differences (X differs):\n")
	b.WriteString(m.grid(func(i int) string { return mark(m.cells[i] == expected.cells[i]) }))
	for _, d := range diffs {
		b.WriteString(d + "\n")
	}
	m.writeNotes(&b)
	return b.String()
}

func (m *Matrix) probeName() string {
	if m.Proto == "" {
		return ""
	}
	return fmt.Sprintf("%s/%d", m.Proto, m.Port)
}

func word(allowed bool) string {
	if allowed {
		return "allowed"
	}
	return "blocked"
}
