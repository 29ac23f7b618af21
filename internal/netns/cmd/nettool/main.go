// Command nettool is the in-namespace half of the internal/netns harness: it serves
// TCP and UDP (echo) on a list of ports, and probes one address with TCP, UDP or
// a hand-built SCTP INIT sent through a raw IP socket.
//
//	nettool serve --tcp 80,81 --udp 80,81 [--exit-on-eof]
//	nettool probe --proto tcp|udp|sctp --addr IP --port N [--timeout 1s] [--sport N]
//
// serve prints "ready" on stdout once every listener is bound. With
// --exit-on-eof it exits when its stdin reaches end of file, so servers die with
// the process that started them even when that process is killed.
//
// probe exits 0 when the probe connected (TCP handshake done, UDP echo received,
// SCTP INIT sent), 1 when it did not, 2 on a usage or local error. This kernel has
// no SCTP sockets, so an SCTP probe only sends; the harness detects arrival with
// an nft counter in the destination namespace.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nftpolicy/nftpolicy/internal/netns/internal/probe"
)

const (
	exitOK      = 0
	exitFailed  = 1
	exitUsage   = 2
	defaultWait = time.Second
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: nettool serve|probe [flags]")
		return exitUsage
	}
	switch args[0] {
	case "serve":
		return serve(args[1:])
	case "probe":
		return probeCmd(args[1:])
	default:
		fmt.Fprintf(os.Stderr, "nettool: unknown subcommand %q\n", args[0])
		return exitUsage
	}
}

func serve(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	tcpPorts := fs.String("tcp", "80,81", "comma-separated TCP ports")
	udpPorts := fs.String("udp", "80,81", "comma-separated UDP ports (echo)")
	exitOnEOF := fs.Bool("exit-on-eof", false, "exit when stdin reaches EOF")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	tcp, err := parsePorts(*tcpPorts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nettool serve: --tcp: %v\n", err)
		return exitUsage
	}
	udp, err := parsePorts(*udpPorts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nettool serve: --udp: %v\n", err)
		return exitUsage
	}

	// ":port" binds one dual-stack socket ([::] with IPV6_V6ONLY=0), which also
	// accepts IPv4, and still works in a namespace without IPv6 addresses.
	for _, p := range tcp {
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			fmt.Fprintf(os.Stderr, "nettool serve: %v\n", err)
			return exitFailed
		}
		go acceptLoop(ln)
	}
	for _, p := range udp {
		pc, err := net.ListenPacket("udp", ":"+strconv.Itoa(p))
		if err != nil {
			fmt.Fprintf(os.Stderr, "nettool serve: %v\n", err)
			return exitFailed
		}
		go echoLoop(pc)
	}
	fmt.Println("ready")

	done := make(chan struct{})
	if *exitOnEOF {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			close(done)
		}()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-done:
	case <-sig:
	}
	return exitOK
}

func acceptLoop(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		// The handshake is the probe; nothing needs to be said.
		c.Close()
	}
}

func echoLoop(pc net.PacketConn) {
	buf := make([]byte, 65536)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		_, _ = pc.WriteTo(buf[:n], addr)
	}
}

func probeCmd(args []string) int {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	proto := fs.String("proto", "tcp", "tcp, udp or sctp")
	addrFlag := fs.String("addr", "", "destination IP address")
	port := fs.Int("port", 80, "destination port")
	timeout := fs.Duration("timeout", defaultWait, "give up after this long")
	sport := fs.Int("sport", 0, "SCTP source port (0: random ephemeral)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	addr, err := netip.ParseAddr(*addrFlag)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nettool probe: --addr: %v\n", err)
		return exitUsage
	}
	if *port < 1 || *port > 65535 {
		fmt.Fprintf(os.Stderr, "nettool probe: --port %d out of range\n", *port)
		return exitUsage
	}
	dst := netip.AddrPortFrom(addr.Unmap(), uint16(*port))

	switch *proto {
	case "tcp":
		err = probe.TCP(dst, *timeout)
	case "udp":
		err = probe.UDP(dst, *timeout)
	case "sctp":
		if *sport < 0 || *sport > 65535 {
			fmt.Fprintf(os.Stderr, "nettool probe: --sport %d out of range\n", *sport)
			return exitUsage
		}
		if err := probe.SendSCTPInit(dst, uint16(*sport)); err != nil {
			fmt.Fprintf(os.Stderr, "nettool probe: %v\n", err)
			return exitUsage
		}
		fmt.Println("sent")
		return exitOK
	default:
		fmt.Fprintf(os.Stderr, "nettool probe: unknown --proto %q\n", *proto)
		return exitUsage
	}
	if err != nil {
		fmt.Printf("failed: %v\n", err)
		return exitFailed
	}
	fmt.Println("connected")
	return exitOK
}

func parsePorts(s string) ([]int, error) {
	var ports []int
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, f := range strings.Split(s, ",") {
		p, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("bad port %q", f)
		}
		ports = append(ports, p)
	}
	return ports, nil
}
