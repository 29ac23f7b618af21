package probe

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// SendForgedUDP sends one UDP datagram from src to dst through a raw socket
// that writes the IP header itself (IPPROTO_RAW), so src may be any
// address: what a pod with CAP_NET_RAW can do to pretend to be another.
func SendForgedUDP(src, dst netip.AddrPort, payload []byte) error {
	if src.Addr().Is4() != dst.Addr().Is4() {
		return fmt.Errorf("forged UDP %s -> %s: families differ", src, dst)
	}
	udp := make([]byte, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], src.Port())
	binary.BigEndian.PutUint16(udp[2:], dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[8:], payload)

	// The checksum covers a pseudo-header of addresses, protocol and length
	// (RFC 768, RFC 8200 8.1).
	s, d := src.Addr().AsSlice(), dst.Addr().AsSlice()
	var pseudo []byte
	pseudo = append(pseudo, s...)
	pseudo = append(pseudo, d...)
	if src.Addr().Is4() {
		pseudo = append(pseudo, 0, unix.IPPROTO_UDP, byte(len(udp)>>8), byte(len(udp)))
	} else {
		pseudo = binary.BigEndian.AppendUint32(pseudo, uint32(len(udp)))
		pseudo = append(pseudo, 0, 0, 0, unix.IPPROTO_UDP)
	}
	sum := checksum(append(pseudo, udp...))
	if sum == 0 {
		sum = 0xffff
	}
	binary.BigEndian.PutUint16(udp[6:], sum)

	var pkt []byte
	var sa unix.Sockaddr
	family := unix.AF_INET6
	if src.Addr().Is4() {
		family = unix.AF_INET
		ip := make([]byte, 20)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
		ip[8], ip[9] = 64, unix.IPPROTO_UDP
		copy(ip[12:], s)
		copy(ip[16:], d)
		binary.BigEndian.PutUint16(ip[10:], checksum(ip))
		pkt = append(ip, udp...)
		sa = &unix.SockaddrInet4{Addr: dst.Addr().As4()}
	} else {
		ip := make([]byte, 40)
		ip[0] = 6 << 4
		binary.BigEndian.PutUint16(ip[4:], uint16(len(udp)))
		ip[6], ip[7] = unix.IPPROTO_UDP, 64
		copy(ip[8:], s)
		copy(ip[24:], d)
		pkt = append(ip, udp...)
		sa = &unix.SockaddrInet6{Addr: dst.Addr().As16()}
	}
	fd, err := unix.Socket(family, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return fmt.Errorf("raw socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Sendto(fd, pkt, 0, sa); err != nil {
		return fmt.Errorf("send forged UDP %s -> %s: %w", src, dst, err)
	}
	return nil
}

// checksum is the Internet checksum (RFC 1071).
func checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}
