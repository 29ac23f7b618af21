package probe

import (
	"encoding/binary"
	"hash/crc32"
	"testing"
)

// The CRC32c check value of "123456789" is 0xe3069283 (RFC 3720 B.4 and the
// usual CRC catalogue), which pins the polynomial we use.
func TestCastagnoliCheckValue(t *testing.T) {
	if got := crc32.Checksum([]byte("123456789"), castagnoli); got != 0xe3069283 {
		t.Fatalf("crc32c(123456789) = %#x, want 0xe3069283", got)
	}
}

func TestSCTPInitLayout(t *testing.T) {
	p := SCTPInit(40000, 80, 0x01020304, 0x0a0b0c0d)
	if len(p) != 32 {
		t.Fatalf("len = %d, want 32", len(p))
	}
	if sp, dp := binary.BigEndian.Uint16(p[0:]), binary.BigEndian.Uint16(p[2:]); sp != 40000 || dp != 80 {
		t.Errorf("ports = %d -> %d, want 40000 -> 80", sp, dp)
	}
	if vtag := binary.BigEndian.Uint32(p[4:]); vtag != 0 {
		t.Errorf("verification tag = %#x, want 0 in an INIT", vtag)
	}
	if p[12] != 1 || binary.BigEndian.Uint16(p[14:]) != 20 {
		t.Errorf("chunk type %d length %d, want INIT (1) length 20", p[12], binary.BigEndian.Uint16(p[14:]))
	}
	if tag := binary.BigEndian.Uint32(p[16:]); tag != 0x01020304 {
		t.Errorf("initiate tag = %#x", tag)
	}

	// Receiver-side check: zero the field, recompute, compare (little-endian).
	sum := binary.LittleEndian.Uint32(p[8:])
	q := append([]byte(nil), p...)
	copy(q[8:12], []byte{0, 0, 0, 0})
	if want := crc32.Checksum(q, castagnoli); sum != want {
		t.Errorf("checksum = %#x, want %#x", sum, want)
	}
}
