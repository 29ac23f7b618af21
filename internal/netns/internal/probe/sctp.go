package probe

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net"
	"net/netip"
)

// ProtoSCTP is the IP protocol number of SCTP (RFC 4960).
const ProtoSCTP = 132

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// SCTPInit returns an SCTP packet (common header + INIT chunk, RFC 4960 3.1 and
// 3.3.2) from sport to dport. The verification tag of an INIT is 0; tag and tsn
// are the Initiate Tag and Initial TSN, which must not be 0.
//
// The checksum is CRC32c over the whole packet with the checksum field zeroed,
// stored little-endian, exactly as Linux sctp_compute_cksum does. A wrong
// checksum would make conntrack (nf_conntrack_proto_sctp) classify the packet
// as invalid instead of new, which is not what a policy test wants.
func SCTPInit(sport, dport uint16, tag, tsn uint32) []byte {
	p := make([]byte, 12+20)
	// Common header.
	binary.BigEndian.PutUint16(p[0:], sport)
	binary.BigEndian.PutUint16(p[2:], dport)
	binary.BigEndian.PutUint32(p[4:], 0) // verification tag: 0 in an INIT
	// p[8:12] checksum, filled below.

	// INIT chunk: type 1, flags 0, length 20, no optional parameters.
	c := p[12:]
	c[0] = 1
	c[1] = 0
	binary.BigEndian.PutUint16(c[2:], 20)
	binary.BigEndian.PutUint32(c[4:], tag)
	binary.BigEndian.PutUint32(c[8:], 65535) // advertised receiver window credit
	binary.BigEndian.PutUint16(c[12:], 10)   // outbound streams
	binary.BigEndian.PutUint16(c[14:], 10)   // maximum inbound streams
	binary.BigEndian.PutUint32(c[16:], tsn)

	binary.LittleEndian.PutUint32(p[8:], crc32.Checksum(p, castagnoli))
	return p
}

// SendSCTPInit sends one INIT to dst from sport (a random ephemeral port when
// 0) through a raw IP socket; the kernel writes the IP header and picks the
// source address. There is no answer to wait for: this kernel has no SCTP, and
// the receiver watches for the INIT with nft instead.
func SendSCTPInit(dst netip.AddrPort, sport uint16) error {
	var rnd [10]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	if sport == 0 {
		sport = 32768 + binary.BigEndian.Uint16(rnd[0:])%28232 // 32768..60999
	}
	tag := binary.BigEndian.Uint32(rnd[2:]) | 1
	tsn := binary.BigEndian.Uint32(rnd[6:]) | 1

	network := fmt.Sprintf("ip4:%d", ProtoSCTP)
	if dst.Addr().Is6() {
		network = fmt.Sprintf("ip6:%d", ProtoSCTP)
	}
	c, err := net.DialIP(network, nil, &net.IPAddr{IP: dst.Addr().AsSlice()})
	if err != nil {
		return fmt.Errorf("raw socket %s to %s: %w", network, dst.Addr(), err)
	}
	defer c.Close()
	if _, err := c.Write(SCTPInit(sport, dst.Port(), tag, tsn)); err != nil {
		return fmt.Errorf("send SCTP INIT to %s: %w", dst, err)
	}
	return nil
}
