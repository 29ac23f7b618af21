// Command events measures event → kernel latency: for each kind of event
// (pod add, pod delete, pod label change, namespace label change, policy
// add, policy edit) it applies N events one after another to a synthetic
// cluster and times the syncer's compile and delta batch for each, with no
// debounce; the daemon's default debounce (100 ms) adds to every figure when
// events arrive one at a time. Needs root (it programs a throwaway netns).
//
//	go run ./hack/bench/events [-namespaces 100 -policies 10 -events 200]
package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftpolicy/nftpolicy/enforcer"
	"github.com/nftpolicy/nftpolicy/internal/scale"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

const node = "node-1"

func main() { os.Exit(run()) }

func run() int {
	namespaces := flag.Int("namespaces", 100, "namespaces of 100 pods")
	policies := flag.Int("policies", 10, "policies per namespace")
	events := flag.Int("events", 200, "events of each kind")
	debounce := flag.Duration("debounce", 100*time.Millisecond, "the daemon's debounce, added for the second column")
	flag.Parse()

	ns := fmt.Sprintf("nftbench-ev-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "ip netns add: %v: %s", err, out)
		return 1
	}
	defer exec.Command("ip", "netns", "del", ns).Run()
	conn, err := nft.Open(ns)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer conn.Close()
	s := enforcer.NewSyncer(conn, enforcer.Options{Node: node}, enforcer.PrioritySetting{Auto: true}, zap.NewNop())

	snap := scale.Cluster(*namespaces, 100, *policies, 100, node, false)
	if _, err := s.Sync(snap); err != nil {
		fmt.Fprintln(os.Stderr, "first sync:", err)
		return 1
	}
	fmt.Printf("event -> kernel, %d policies / %d pods, %d events of each kind, no debounce (then + %v)\n",
		*namespaces**policies, *namespaces*100, *events, *debounce)
	fmt.Printf("%-22s %10s %10s %10s %14s %14s\n", "event", "p50", "p99", "max", "p50+debounce", "p99+debounce")
	for _, kind := range kinds {
		var took []time.Duration
		cur := snap
		for i := 0; i < *events; i++ {
			next := kind.apply(cur, i)
			start := time.Now()
			res, err := s.Sync(next)
			took = append(took, time.Since(start))
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s #%d: %v\n", kind.name, i, err)
				return 1
			}
			if res.Batch.Full {
				fmt.Fprintf(os.Stderr, "%s #%d rewrote the whole table\n", kind.name, i)
				return 1
			}
			cur = next
		}
		slices.Sort(took)
		p50, p99, mx := took[len(took)/2], took[len(took)*99/100], took[len(took)-1]
		fmt.Printf("%-22s %10s %10s %10s %14s %14s\n", kind.name, ms(p50), ms(p99), ms(mx), ms(p50+*debounce), ms(p99+*debounce))
		// The next kind starts from the same cluster.
		if _, err := s.Sync(snap); err != nil {
			fmt.Fprintln(os.Stderr, "reset:", err)
			return 1
		}
	}
	return 0
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

type kind struct {
	name  string
	apply func(s *k8s.Snapshot, i int) *k8s.Snapshot
}

// Each kind returns a new snapshot (snapshots are immutable) that differs
// from s by one object; event i alternates so that every event is a change.
var kinds = []kind{
	{"pod add", func(s *k8s.Snapshot, i int) *k8s.Snapshot {
		out := *s
		ip := netip.AddrFrom4([4]byte{10, 200, byte(i >> 8), byte(i)})
		out.Pods = append(slices.Clip(s.Pods), &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns-0", Name: fmt.Sprintf("new-%d", i), Labels: map[string]string{"app": "app-0", "tier": "tier-0"}},
			Spec:       corev1.PodSpec{NodeName: "node-other"},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: ip.String()}}},
		})
		return &out
	}},
	{"pod delete", func(s *k8s.Snapshot, i int) *k8s.Snapshot {
		out := *s
		out.Pods = slices.Delete(slices.Clone(s.Pods), 3+i, 4+i)
		return &out
	}},
	{"pod label change", func(s *k8s.Snapshot, i int) *k8s.Snapshot {
		out := *s
		out.Pods = slices.Clone(s.Pods)
		p := s.Pods[3+3*i].DeepCopy()
		p.Labels["tier"] = fmt.Sprintf("tier-%d", i%2+1)
		out.Pods[3+3*i] = p
		return &out
	}},
	{"namespace label change", func(s *k8s.Snapshot, i int) *k8s.Snapshot {
		out := *s
		out.Namespaces = slices.Clone(s.Namespaces)
		n := s.Namespaces[i%len(s.Namespaces)].DeepCopy()
		n.Labels["team"] = fmt.Sprintf("team-%d", (i+1)%10)
		out.Namespaces[i%len(s.Namespaces)] = n
		return &out
	}},
	{"policy add", func(s *k8s.Snapshot, i int) *k8s.Snapshot {
		out := *s
		np := s.Policies[i%len(s.Policies)].DeepCopy()
		np.Name = fmt.Sprintf("added-%d", i)
		out.Policies = append(slices.Clip(s.Policies), np)
		return &out
	}},
	{"policy edit", func(s *k8s.Snapshot, i int) *k8s.Snapshot {
		out := *s
		out.Policies = slices.Clone(s.Policies)
		np := s.Policies[(2*i)%len(s.Policies)].DeepCopy()
		np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{
			From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: fmt.Sprintf("172.16.%d.0/24", i%256)}}},
		})
		out.Policies[(2*i)%len(s.Policies)] = np
		return &out
	}},
}
