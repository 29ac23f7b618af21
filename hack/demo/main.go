// Command demo shows nftpolicy enforcing NetworkPolicy on a sandbox made of
// network namespaces, with no cluster: one node, namespaces frontend,
// backend and other, five pods serving TCP port 80. It prints who reaches
// whom with no policy, applies the example policies of deploy/examples
// (default-deny ingress in backend, and allow frontend → backend on TCP 80)
// with `nftpolicy apply`, prints the matrix again, then the ruleset as
// `nft list table inet nftpolicy` shows it in the node's namespace, and
// removes every namespace it made, also on failure and on Ctrl-C.
//
// It needs root, iproute2 and nftables; `make demo` (hack/demo.sh) builds
// bin/nftpolicy and runs it:
//
//	go run ./hack/demo --nftpolicy bin/nftpolicy --examples deploy/examples
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nftpolicy/nftpolicy/internal/netns"
)

func main() { os.Exit(run()) }

// The sandbox's pods, "namespace/name", all on one node.
var podKeys = []string{"frontend/web", "frontend/admin", "backend/api", "backend/db", "other/tools"}

const nodeName = "demo-node"

func run() int {
	bin := flag.String("nftpolicy", "bin/nftpolicy", "the nftpolicy binary")
	examples := flag.String("examples", "deploy/examples", "the directory of example policies to apply")
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "demo: needs root (it creates network namespaces)")
		return 1
	}
	c, err := netns.NewCluster(netns.Options{Name: "demo", IPv4: true, TCPPorts: []int{80}, UDPPorts: []int{}, Timeout: 500 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	// Tear down on every way out: return, failure, Ctrl-C, SIGTERM, and a
	// closed stdout (`make demo | head`): with SIGPIPE ignored a write to
	// it fails instead of killing the process before its clean-up.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	done := make(chan int, 1)
	go func() { done <- demo(c, *bin, *examples) }()
	code := 0
	select {
	case code = <-done:
	case <-ctx.Done():
		fmt.Fprintln(os.Stderr, "\ninterrupted")
		code = 130
	}
	fmt.Println("\n== Tear-down")
	if err := c.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "demo: tear-down:", err)
		return 1
	}
	fmt.Printf("removed every network namespace of %s\n", c.ID())
	return code
}

func demo(c *netns.Cluster, bin, examples string) int {
	start := time.Now()
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	node, err := c.AddNode(nodeName)
	if err != nil {
		return fail(err)
	}
	var pods []*netns.Pod
	for _, k := range podKeys {
		ns, name, _ := strings.Cut(k, "/")
		p, err := c.AddPod(node, ns, name)
		if err != nil {
			return fail(err)
		}
		pods = append(pods, p)
	}
	fmt.Printf("== Sandbox: node %s (network namespace %s), %d pods, each serving TCP 80\n", nodeName, node.NetnsName(), len(pods))
	for _, p := range pods {
		fmt.Printf("   %-16s %s\n", p.Key(), p.IPv4())
	}

	fmt.Println("\n== Reachability with no NetworkPolicy")
	if ok := printMatrix(c, pods, netns.NewMatrix(netns.Keys(pods), true)); !ok {
		return 1
	}

	dir, err := os.MkdirTemp("", "nftpolicy-demo-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "cluster.yaml"), []byte(c.Manifests()), 0o644); err != nil {
		return fail(err)
	}
	files, _ := filepath.Glob(filepath.Join(examples, "*.yaml"))
	if len(files) == 0 {
		return fail(fmt.Errorf("no *.yaml in %s", examples))
	}
	fmt.Println("\n== Applying the example policies")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return fail(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			return fail(err)
		}
		fmt.Printf("   %s\n", f)
	}
	args := []string{"apply", "--manifests", dir, "--node", nodeName, "--netns", node.NetnsName()}
	fmt.Printf("   $ %s %s\n", bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("%s apply: %w\n%s", bin, err, out))
	}

	fmt.Println("\n== Reachability with the policies")
	fmt.Println("   backend accepts only frontend, on TCP 80; everything else is unchanged")
	want := netns.NewMatrix(netns.Keys(pods), true).
		Expect("*", "backend/*", false).
		Expect("frontend/*", "backend/*", true)
	for _, p := range pods {
		want.Set(p.Key(), p.Key(), true) // a pod always reaches itself
	}
	if ok := printMatrix(c, pods, want); !ok {
		return 1
	}

	fmt.Printf("\n== nft list table inet nftpolicy (in %s)\n", node.NetnsName())
	out, err := node.Exec("nft", "list", "table", "inet", "nftpolicy")
	if err != nil {
		return fail(err)
	}
	os.Stdout.Write(out)

	// Why one flow passes and another does not, from the same manifests.
	for _, flow := range [][2]string{{"frontend/web", "backend/api"}, {"other/tools", "backend/api"}} {
		args := []string{"explain", "--manifests", dir, "--node", nodeName, "--from", flow[0], "--to", flow[1], "--proto", "tcp", "--port", "80"}
		fmt.Printf("\n== Why: %s -> %s\n   $ %s %s\n", flow[0], flow[1], bin, strings.Join(args, " "))
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			return fail(fmt.Errorf("%s explain: %w\n%s", bin, err, out))
		}
		for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
			fmt.Println("   " + line)
		}
	}
	fmt.Printf("\n== Done in %v\n", time.Since(start).Round(100*time.Millisecond))
	return 0
}

// printMatrix probes every pod to every pod on TCP 80, prints the matrix,
// and reports whether it is want (else it prints the difference).
func printMatrix(c *netns.Cluster, pods []*netns.Pod, want *netns.Matrix) bool {
	got := c.ProbeMatrixExpect(pods, netns.IPv4, netns.TCP, 80, want)
	fmt.Println("   rows: client pod, columns: server pod; . connected, X blocked")
	fmt.Println()
	for _, line := range strings.Split(strings.TrimRight(grid(got), "\n"), "\n") {
		fmt.Println("   " + line)
	}
	if d := got.Diff(want); d != "" {
		fmt.Fprintln(os.Stderr, "demo: not what the policies say:\n"+d)
		return false
	}
	return true
}

// grid is the matrix without its header line.
func grid(m *netns.Matrix) string {
	s := m.String()
	_, rest, _ := strings.Cut(s, "\n")
	return rest
}
