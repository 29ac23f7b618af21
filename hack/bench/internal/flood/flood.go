// Package flood is the packet path measurement the per-packet benchmarks
// share (hack/bench/pps, hack/bench/vmap): one UDP flow that is never
// answered, so every packet of it is NEW to conntrack and takes the policy
// path, from a sender pod to a receiver pod whose input hook counts what
// arrives and drops it.
package flood

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/nftpolicy/nftpolicy/internal/netns"
)

// Port is the receiver's UDP port.
const Port = 9999

// Subcommand runs `NAME flood ADDR:PORT SECONDS`, the sender, and exits,
// when the program was started as one: call it first in main. The
// benchmark starts itself so in the sender's network namespace.
func Subcommand(name string) {
	if len(os.Args) > 1 && os.Args[1] == "flood" {
		os.Exit(send(name, os.Args[2:]))
	}
}

// send sends UDP datagrams to ADDR:PORT for SECONDS from one socket, so
// one flow, and prints how many it sent.
func send(name string, args []string) int {
	if len(args) != 2 {
		fmt.Fprintf(os.Stderr, "usage: %s flood ADDR:PORT SECONDS\n", name)
		return 2
	}
	secs, _ := strconv.ParseFloat(args[1], 64)
	conn, err := net.Dial("udp", args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	payload := make([]byte, 64)
	deadline := time.Now().Add(time.Duration(secs * float64(time.Second)))
	sent := 0
	for time.Now().Before(deadline) {
		for range 256 {
			if _, err := conn.Write(payload); err == nil {
				sent++
			}
		}
	}
	fmt.Println(sent)
	return 0
}

// Pods adds the sender bench/src and the receiver bench/dst to node, and
// the receiver's counter.
func Pods(c *netns.Cluster, node *netns.Node) (src, dst *netns.Pod, err error) {
	if src, err = c.AddPod(node, "bench", "src"); err != nil {
		return nil, nil, err
	}
	if dst, err = c.AddPod(node, "bench", "dst"); err != nil {
		return nil, nil, err
	}
	if out, err := dst.ExecInput([]byte(fmt.Sprintf(`table inet bench {
	chain input {
		type filter hook input priority 0; policy accept;
		udp dport %d counter drop
	}
}
`, Port)), "nft", "-f", "-"); err != nil {
		return nil, nil, fmt.Errorf("receiver counter: %v\n%s", err, out)
	}
	return src, dst, nil
}

// Measure floods dst from src for seconds and returns the packets per
// second that reached dst.
func Measure(src, dst *netns.Pod, seconds float64) (float64, error) {
	before, err := received(dst)
	if err != nil {
		return 0, err
	}
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	target := netip.AddrPortFrom(dst.IPv4(), Port).String()
	out, err := exec.Command("ip", "netns", "exec", src.NetnsName(), self, "flood", target, fmt.Sprint(seconds)).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("flood: %v: %s", err, out)
	}
	after, err := received(dst)
	if err != nil {
		return 0, err
	}
	// The sender floods for exactly seconds; its start-up is outside that.
	return float64(after-before) / seconds, nil
}

var counterRE = regexp.MustCompile(`counter packets (\d+)`)

func received(dst *netns.Pod) (int, error) {
	out, err := dst.Exec("nft", "list", "table", "inet", "bench")
	if err != nil {
		return 0, fmt.Errorf("%v: %s", err, out)
	}
	m := counterRE.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no counter in %s", out)
	}
	return strconv.Atoi(string(m[1]))
}

// Median is the median of v; 0 for none.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
