package enforcer

import (
	"testing"
)

// Two isolated pods of this node holding one address made the kernel
// refuse every batch (EEXIST on the dispatch map), freezing every update
// of the node, revocations included.
func TestKernelDuplicateAddressDoesNotFreezeUpdates(t *testing.T) {
	s, ns := newTestSyncer(t)
	snap := cluster(
		policy("x", "a-from-y", selecting("a"), ingressRule(peers(nsPeer("y")))),
		policy("x", "new-from-z", selecting("new"), ingressRule(peers(nsPeer("z")))),
	)
	if _, err := s.Sync(snap); err != nil {
		t.Fatal(err)
	}
	dup := withPod(snap, testPod("x", "new", withAddressOf("x", "a"), labelled("pod", "new"), createdAt(100)))
	res, err := s.Sync(dup)
	if err != nil {
		t.Fatalf("sync with two pods on one address: %v", err)
	}
	// A later revocation still lands: x/new's policy goes.
	revoked := *dup
	revoked.Policies = revoked.Policies[:1]
	if res, err = s.Sync(&revoked); err != nil {
		t.Fatalf("revocation after the duplicate: %v", err)
	}
	assertProgrammed(t, s, ns, res.Table)
}
