package flowlog

import (
	"net/netip"
	"testing"
	"time"
)

func TestParseTuple(t *testing.T) {
	v4 := []byte{0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0x30, 0x39, 0, 80}
	v4opts := append([]byte{0x46, 0, 0, 44, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 1, 1, 1, 0}, 0x30, 0x39, 0, 53)
	v4frag := []byte{0x45, 0, 0, 40, 0, 0, 0x00, 0x10, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0xff, 0xff, 0xff, 0xff}
	v6 := make([]byte, 44)
	v6[0], v6[6] = 0x60, 132
	v6[23], v6[39] = 1, 2
	v6[40], v6[41], v6[42], v6[43] = 0x30, 0x39, 0x1f, 0x90
	for _, c := range []struct {
		name string
		b    []byte
		want Tuple
		ok   bool
	}{
		{"IPv4 TCP", v4, Tuple{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), 6, 12345, 80}, true},
		{"IPv4 with options, UDP", v4opts, Tuple{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), 17, 12345, 53}, true},
		{"IPv4 later fragment: no ports", v4frag, Tuple{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), 6, 0, 0}, true},
		{"IPv6 SCTP", v6, Tuple{netip.MustParseAddr("::1"), netip.MustParseAddr("::2"), 132, 12345, 8080}, true},
		{"too short", v4[:19], Tuple{}, false},
		{"IPv6 too short", v6[:39], Tuple{}, false},
		{"not IP", []byte{0x20, 1, 2}, Tuple{}, false},
		{"empty", nil, Tuple{}, false},
	} {
		got, ok := ParseTuple(c.b)
		if ok != c.ok || got != c.want {
			t.Errorf("%s: %v, %v; want %v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

// Repeats of one prefix and tuple within the window are one record with a
// count; another prefix, another tuple, or a repeat after the window are
// records of their own.
func TestMerger(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	a := Tuple{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), 6, 1000, 80}
	b := a
	b.Sport = 1001
	m := &Merger{Window: time.Second}
	var out []Record
	out = append(out, m.Add(Record{Time: at(0), Prefix: "d:x", Tuple: a})...)
	out = append(out, m.Add(Record{Time: at(200), Prefix: "d:x", Tuple: a})...)
	out = append(out, m.Add(Record{Time: at(300), Prefix: "d:x", Tuple: b})...)
	out = append(out, m.Add(Record{Time: at(400), Prefix: "a:y", Tuple: a})...)
	out = append(out, m.Add(Record{Time: at(900), Prefix: "d:x", Tuple: a})...)
	if len(out) != 0 {
		t.Fatalf("records out before their window closed: %v", out)
	}
	out = append(out, m.Add(Record{Time: at(1000), Prefix: "d:x", Tuple: a})...) // closes the first, opens a new one
	out = append(out, m.Flush(at(5000))...)
	var got []string
	for _, r := range out {
		got = append(got, r.Prefix+" "+r.Tuple.String()+" x"+string(rune('0'+r.Count)))
	}
	want := []string{
		"d:x tcp 10.0.0.1:1000 -> 10.0.0.2:80 x3",
		"d:x tcp 10.0.0.1:1001 -> 10.0.0.2:80 x1",
		"a:y tcp 10.0.0.1:1000 -> 10.0.0.2:80 x1",
		"d:x tcp 10.0.0.1:1000 -> 10.0.0.2:80 x1",
	}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("record %d: %q, want %q", i, got[i], want[i])
		}
	}
	if m.Pending() != 0 {
		t.Errorf("%d pending after the last flush", m.Pending())
	}
}
