package flowlog

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// A Record is one logged packet: the first packet of a connection.
type Record struct {
	Time   time.Time
	Prefix string // the log statement's prefix
	Tuple  Tuple
	Count  int // packets merged into this record (Merger); 1 when read
}

// A Tuple is a connection's 5-tuple as its first packet carries it.
type Tuple struct {
	Src, Dst     netip.Addr
	Proto        uint8 // IP protocol number: 6 TCP, 17 UDP, 132 SCTP, 1 ICMP, 58 ICMPv6
	Sport, Dport uint16
}

func (t Tuple) String() string {
	return fmt.Sprintf("%s %s:%d -> %s:%d", ProtoName(t.Proto), t.Src, t.Sport, t.Dst, t.Dport)
}

// ProtoName names the protocols policy knows, and numbers the rest.
func ProtoName(p uint8) string {
	switch p {
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 132:
		return "sctp"
	case 1:
		return "icmp"
	case 58:
		return "icmpv6"
	}
	return fmt.Sprintf("proto-%d", p)
}

// ParseTuple reads the 5-tuple from a packet that starts with its IP
// header; ports are zero for protocols without them. It reports false for
// what is not an IPv4 or IPv6 packet, or too short to hold its headers.
// IPv6 extension headers are not walked: a first packet between pods
// carries none.
func ParseTuple(b []byte) (Tuple, bool) {
	if len(b) < 1 {
		return Tuple{}, false
	}
	var t Tuple
	var l4 []byte
	switch b[0] >> 4 {
	case 4:
		ihl := int(b[0]&0x0f) * 4
		if len(b) < 20 || ihl < 20 || len(b) < ihl {
			return Tuple{}, false
		}
		t.Proto = b[9]
		t.Src = netip.AddrFrom4([4]byte(b[12:16]))
		t.Dst = netip.AddrFrom4([4]byte(b[16:20]))
		if binary.BigEndian.Uint16(b[6:8])&0x1fff != 0 {
			return t, true // a later fragment: no ports in it
		}
		l4 = b[ihl:]
	case 6:
		if len(b) < 40 {
			return Tuple{}, false
		}
		t.Proto = b[6]
		t.Src = netip.AddrFrom16([16]byte(b[8:24]))
		t.Dst = netip.AddrFrom16([16]byte(b[24:40]))
		l4 = b[40:]
	default:
		return Tuple{}, false
	}
	switch t.Proto {
	case 6, 17, 132:
		if len(l4) >= 4 {
			t.Sport = binary.BigEndian.Uint16(l4[0:2])
			t.Dport = binary.BigEndian.Uint16(l4[2:4])
		}
	}
	return t, true
}

// A Merger folds records of one prefix and 5-tuple seen again within
// Window into the first one.
type Merger struct {
	Window time.Duration
	open   map[mergeKey]*Record
}

type mergeKey struct {
	prefix string
	tuple  Tuple
}

// Add takes a record and returns the records whose window has closed by
// r.Time, oldest first. r itself is held until its window closes (Flush).
func (m *Merger) Add(r Record) []Record {
	out := m.Flush(r.Time)
	if m.open == nil {
		m.open = map[mergeKey]*Record{}
	}
	k := mergeKey{r.Prefix, r.Tuple}
	if o, ok := m.open[k]; ok {
		o.Count += max(r.Count, 1)
		return out
	}
	r.Count = max(r.Count, 1)
	m.open[k] = &r
	return out
}

// Flush returns the records whose window closed by now, oldest first.
func (m *Merger) Flush(now time.Time) []Record {
	var out []Record
	for k, r := range m.open {
		if now.Sub(r.Time) >= m.Window {
			out = append(out, *r)
			delete(m.open, k)
		}
	}
	slices.SortFunc(out, func(a, b Record) int { return a.Time.Compare(b.Time) })
	return out
}

// Pending is how many records wait for their window to close.
func (m *Merger) Pending() int { return len(m.open) }
