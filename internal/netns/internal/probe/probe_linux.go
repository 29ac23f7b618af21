package probe

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// The probes use plain blocking system calls rather than package net, so
// that the timeout is kept by the kernel (poll) and not by the Go scheduler:
// on a loaded machine a goroutine can be woken well after its socket became
// ready, and a probe would then report a connection that did happen as a
// timeout. Here a stall after poll returns changes nothing.

// TCP completes a TCP handshake with dst within timeout.
func TCP(dst netip.AddrPort, timeout time.Duration) error {
	fd, sa, err := socket(dst, unix.SOCK_STREAM)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	err = unix.Connect(fd, sa)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, unix.EINPROGRESS):
		return fmt.Errorf("connect %s: %w", dst, err)
	}
	ready, err := wait(fd, unix.POLLOUT, time.Now().Add(timeout))
	if err != nil {
		return fmt.Errorf("connect %s: %w", dst, err)
	}
	if !ready {
		return fmt.Errorf("connect %s: no answer within %v (%s)", dst, timeout, tcpState(fd))
	}
	soerr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		return fmt.Errorf("connect %s: %w", dst, err)
	}
	if soerr != 0 {
		return fmt.Errorf("connect %s: %w", dst, unix.Errno(soerr))
	}
	return nil
}

// UDP sends a random token to dst and waits for the same token to come back
// within timeout. It resends every 200ms so that one lost datagram does not
// turn into a false "blocked"; an ICMP unreachable (ECONNREFUSED on the
// connected socket) ends it at once.
func UDP(dst netip.AddrPort, timeout time.Duration) error {
	fd, sa, err := socket(dst, unix.SOCK_DGRAM)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, sa); err != nil {
		return fmt.Errorf("connect %s: %w", dst, err)
	}
	token, err := newToken()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 1500)
	for time.Now().Before(deadline) {
		if _, err := unix.Write(fd, token); err != nil {
			return fmt.Errorf("send to %s: %w", dst, err)
		}
		next := time.Now().Add(udpResend)
		if next.After(deadline) {
			next = deadline
		}
		for {
			ready, err := wait(fd, unix.POLLIN, next)
			if err != nil {
				return fmt.Errorf("udp %s: %w", dst, err)
			}
			if !ready {
				break
			}
			n, err := unix.Read(fd, buf)
			if err != nil {
				if errors.Is(err, unix.EAGAIN) {
					continue
				}
				return fmt.Errorf("udp %s: %w", dst, err)
			}
			if bytes.Equal(buf[:n], token) {
				return nil
			}
		}
	}
	return fmt.Errorf("no echo from %s within %v", dst, timeout)
}

// socket returns a non-blocking socket of dst's family.
func socket(dst netip.AddrPort, typ int) (int, unix.Sockaddr, error) {
	var sa unix.Sockaddr
	family := unix.AF_INET
	if a := dst.Addr().Unmap(); a.Is4() {
		sa = &unix.SockaddrInet4{Port: int(dst.Port()), Addr: a.As4()}
	} else {
		family = unix.AF_INET6
		sa = &unix.SockaddrInet6{Port: int(dst.Port()), Addr: a.As16()}
	}
	fd, err := unix.Socket(family, typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, nil, fmt.Errorf("socket: %w", err)
	}
	return fd, sa, nil
}

// wait polls fd for events until deadline and reports whether they came.
func wait(fd int, events int16, deadline time.Time) (bool, error) {
	for {
		left := time.Until(deadline)
		if left < 0 {
			left = 0
		}
		// Round up: poll takes milliseconds, and 0 would not wait at all.
		ms := int((left + time.Millisecond - 1) / time.Millisecond)
		fds := []unix.PollFd{{Fd: int32(fd), Events: events}}
		n, err := unix.Poll(fds, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, err
		}
		if n > 0 {
			// POLLERR/POLLHUP count as ready: the caller reads the error.
			return true, nil
		}
		return false, nil
	}
}

// tcpState names the TCP state of fd, for messages: SYN_SENT after a timeout
// means no SYN-ACK came back.
func tcpState(fd int) string {
	info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return "state unknown"
	}
	names := map[uint8]string{1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 7: "CLOSE"}
	if s, ok := names[info.State]; ok {
		return "state " + s
	}
	return fmt.Sprintf("state %d", info.State)
}
