// Command gen writes a synthetic cluster (see internal/scale) as a
// manifests directory, for benchmarks of nftpolicy apply against nft -f.
//
//	go run ./hack/bench/gen -namespaces 100 -pods 100 -policies 10 -local 110 -out /tmp/m
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"

	"github.com/nftpolicy/nftpolicy/internal/scale"
)

func main() { os.Exit(run()) }

func run() int {
	namespaces := flag.Int("namespaces", 100, "namespaces")
	pods := flag.Int("pods", 100, "pods per namespace")
	policies := flag.Int("policies", 10, "policies per namespace")
	local := flag.Int("local", 110, "pods on the node under test")
	node := flag.String("node", "node-1", "the node under test")
	out := flag.String("out", "", "directory to write (created)")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "gen: -out is required")
		return 2
	}
	snap := scale.Cluster(*namespaces, *pods, *policies, *local, *node, false)
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		return 1
	}
	write := func(name string, objs []any) error {
		f, err := os.Create(filepath.Join(*out, name))
		if err != nil {
			return err
		}
		defer f.Close()
		for _, o := range objs {
			b, err := yaml.Marshal(o)
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(f, "---\n%s", b); err != nil {
				return err
			}
		}
		return f.Close()
	}
	var nss, ps, nps []any
	for _, o := range snap.Namespaces {
		o.APIVersion, o.Kind = "v1", "Namespace"
		nss = append(nss, o)
	}
	for _, o := range snap.Pods {
		ps = append(ps, o.Core())
	}
	for _, o := range snap.Policies {
		o.APIVersion, o.Kind = "networking.k8s.io/v1", "NetworkPolicy"
		nps = append(nps, o)
	}
	for name, objs := range map[string][]any{"namespaces.yaml": nss, "pods.yaml": ps, "policies.yaml": nps} {
		if err := write(name, objs); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			return 1
		}
	}
	return 0
}
