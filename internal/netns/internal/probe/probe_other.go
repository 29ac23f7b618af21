//go:build !linux

package probe

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// TCP completes a TCP handshake with dst within timeout.
func TCP(dst netip.AddrPort, timeout time.Duration) error {
	c, err := net.DialTimeout("tcp", dst.String(), timeout)
	if err != nil {
		return err
	}
	return c.Close()
}

// UDP sends a random token to dst and waits for the same token to come back
// within timeout, resending every 200ms.
func UDP(dst netip.AddrPort, timeout time.Duration) error {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
	if err != nil {
		return err
	}
	defer c.Close()
	token, err := newToken()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 1500)
	for time.Now().Before(deadline) {
		if _, err := c.Write(token); err != nil {
			return err
		}
		next := time.Now().Add(udpResend)
		if next.After(deadline) {
			next = deadline
		}
		_ = c.SetReadDeadline(next)
		for {
			n, err := c.Read(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					break
				}
				return err
			}
			if bytes.Equal(buf[:n], token) {
				return nil
			}
		}
	}
	return fmt.Errorf("no echo from %s within %v", dst, timeout)
}

// SendForgedUDP needs a raw IP socket that writes its own header: Linux only.
func SendForgedUDP(src, dst netip.AddrPort, payload []byte) error {
	return errors.New("probe: forged packets need Linux")
}
