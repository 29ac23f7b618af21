package scale

import (
	"maps"
	"slices"
	"testing"
)

// TestClusterOnNodesPods holds clusterPod to Cluster's pods: the same
// names, labels, phase and addresses (the fields both records have).
func TestClusterOnNodesPods(t *testing.T) {
	want := Cluster(3, 25, 2, 5, NodeName(0), false)
	got := ClusterOnNodes(3, 25, 2, 4)
	if len(got.Pods) != len(want.Pods) || len(got.Namespaces) != len(want.Namespaces) || len(got.Policies) != len(want.Policies) {
		t.Fatalf("%d pods, %d namespaces, %d policies; Cluster has %d, %d, %d",
			len(got.Pods), len(got.Namespaces), len(got.Policies), len(want.Pods), len(want.Namespaces), len(want.Policies))
	}
	byName := map[string]int{}
	for i, p := range got.Pods {
		byName[p.Namespace+"/"+p.Name] = i
	}
	for _, w := range want.Pods {
		i, ok := byName[w.Namespace+"/"+w.Name]
		if !ok {
			t.Errorf("no pod %s/%s", w.Namespace, w.Name)
			continue
		}
		g := got.Pods[i]
		if !maps.Equal(g.Labels, w.Labels) || g.Status.Phase != w.Status.Phase || !slices.Equal(g.Status.PodIPs, w.Status.PodIPs) {
			t.Errorf("pod %s/%s: labels %v, phase %s, addresses %v; Cluster's: %v, %s, %v",
				w.Namespace, w.Name, g.Labels, g.Status.Phase, g.Status.PodIPs, w.Labels, w.Status.Phase, w.Status.PodIPs)
		}
	}
}

// TestClusterOnNodesSpread checks that 150k pods have distinct addresses
// and are spread evenly over the nodes, and that nodes have distinct
// addresses.
func TestClusterOnNodesSpread(t *testing.T) {
	const nodes = 5000
	c := ClusterOnNodes(100, 1500, 1, nodes)
	seen := map[string]string{}
	perNode := map[string]int{}
	for _, p := range c.Pods {
		for _, ip := range p.Status.PodIPs {
			if other, dup := seen[ip.IP]; dup {
				t.Fatalf("%s/%s and %s both have %s", p.Namespace, p.Name, other, ip.IP)
			}
			seen[ip.IP] = p.Namespace + "/" + p.Name
		}
		perNode[p.Spec.NodeName]++
	}
	for _, n := range c.Nodes {
		for _, a := range n.Status.Addresses {
			if other, dup := seen[a.Address]; dup {
				t.Fatalf("node %s and %s both have %s", n.Name, other, a.Address)
			}
			seen[a.Address] = "node " + n.Name
		}
	}
	if len(perNode) != nodes {
		t.Errorf("pods on %d nodes, want %d", len(perNode), nodes)
	}
	for name, n := range perNode {
		if n != len(c.Pods)/nodes {
			t.Errorf("%d pods on %s, want %d", n, name, len(c.Pods)/nodes)
		}
	}
	apps := map[string]bool{}
	for _, p := range c.Pods {
		if p.Spec.NodeName == NodeName(0) {
			apps[p.Labels["app"]] = true
		}
	}
	if len(apps) < 5 {
		t.Errorf("the pods of %s have %d app labels: not a mix (%v)", NodeName(0), len(apps), slices.Sorted(maps.Keys(apps)))
	}
}
