package e2e

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/nftpolicy/nftpolicy/internal/netns"
)

// A small is a one-node cluster for a test of its own: the pods asked for,
// the cluster file written, nftpolicy running on the node with the flags
// given.
type small struct {
	c    *netns.Cluster
	node *netns.Node
	pods map[string]*netns.Pod // by "namespace/name"
	d    *netns.Daemons
}

// newSmall builds it: opts names and wires the cluster (Timeout defaults
// to probeTimeout), keys are the pods ("x/a") on node1, and args (nil for
// none) gives nftpolicy's extra flags, which may name the node's addresses.
func newSmall(t *testing.T, opts netns.Options, args func(*netns.Node) []string, keys ...string) *small {
	t.Helper()
	netns.RequireRoot(t)
	if opts.Timeout == 0 {
		opts.Timeout = probeTimeout
	}
	s := &small{c: netns.NewTestCluster(t, opts), pods: map[string]*netns.Pod{}}
	var err error
	if s.node, err = s.c.AddNode("node1"); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		s.addPod(t, k)
	}
	dir := t.TempDir()
	if err := netns.WriteFileAtomic(filepath.Join(dir, clusterFile), []byte(s.c.Manifests())); err != nil {
		t.Fatal(err)
	}
	var extra []string
	if args != nil {
		extra = args(s.node)
	}
	s.d = netns.StartTestDaemons(t, s.c, dir, netns.DaemonOptions{Args: extra})
	return s
}

// addPod adds pod key ("x/a") to node1; the manifests learn of it only
// when the test writes the cluster file again.
func (s *small) addPod(t *testing.T, key string) *netns.Pod {
	t.Helper()
	ns, name, _ := strings.Cut(key, "/")
	p, err := s.c.AddPod(s.node, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	s.pods[key] = p
	return p
}

// apply writes the policies file and returns once it is programmed.
func (s *small) apply(t *testing.T, policies string) {
	t.Helper()
	if err := s.d.WriteFile(policiesFile, policies); err != nil {
		t.Fatal(err)
	}
}
