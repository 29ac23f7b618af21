package k8s

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// Hostile round 14: what the informers' Snapshots hold of pods and nodes,
// against what the API server (here a fake clientset) holds.

// r14Node is a node with a label, pod CIDRs and an InternalIP, plus one
// ExternalIP address of the given text.
func r14Node(name, extra string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1", Labels: map[string]string{"zone": "a"}},
		Spec:       corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "10.0.0.5"},
			{Type: corev1.NodeExternalIP, Address: extra},
			{Type: corev1.NodeHostName, Address: name},
		}},
	}
}

// TestHostileRound14NodeWithUnreadableAddressIsDropped: the API server
// does not validate the text of a Node's status.addresses (upstream
// ValidateNode validates the spec; ValidateNodeUpdate only refuses
// duplicate addresses), and a kubelet, a cloud controller or an operator
// with `kubectl patch --subresource=status` can write any string there.
// ValidateNode refuses the whole Node when one InternalIP/ExternalIP
// address does not parse strictly (IPv4-mapped IPv6, leading zeros, an
// IPv6 zone, a DNS name), so the Node vanishes from every Snapshot: its
// labels, pod CIDRs and its valid addresses too. The compiler itself
// reads addresses leniently (enforcer/cluster.go syncNodes skips what
// does not parse and Unmaps the rest), so nothing needs the whole node
// dropped.
//
// What that opens: a ClusterNetworkPolicy Deny whose peer selects nodes
// by label no longer holds this node's addresses, and --default-deny-unknown
// on that node (without --pod-cidr) closes nothing ("no Node object").
//
// test/k8se2e/hostile_round14_informer_linux_test.go shows a real
// kube-apiserver storing such nodes. Failed at 1f42907; fixed by dd49015
// (10.0.0.7 is the control).
func TestHostileRound14NodeWithUnreadableAddressIsDropped(t *testing.T) {
	// 10.0.0.7 is the control: the harness finds a node that parses.
	for _, addr := range []string{"10.0.0.7", "::ffff:10.0.0.7", "010.0.0.7", "fe80::1%eth0", "node-1.example.com"} {
		t.Run(addr, func(t *testing.T) {
			node := r14Node("n1", addr)
			_, in, _ := startFake(t, node)
			snap := in.Snapshot()
			i := slices.IndexFunc(snap.Nodes, func(n *corev1.Node) bool { return n.Name == "n1" })
			if i < 0 {
				t.Fatalf("Node n1 (ExternalIP %q, InternalIP 10.0.0.5, podCIDR 10.244.1.0/24, zone=a) is in the API server but in no Snapshot", addr)
			}
			got := snap.Nodes[i]
			if !cmp.Equal(got.Labels, node.Labels) || !cmp.Equal(got.Spec.PodCIDRs, node.Spec.PodCIDRs) ||
				!slices.Contains(got.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.5"}) {
				t.Fatalf("Node n1 in the Snapshot: labels %v, podCIDRs %v, addresses %v", got.Labels, got.Spec.PodCIDRs, got.Status.Addresses)
			}
		})
	}
}

// r14WatchListClient hides the fake clientset's
// IsWatchListSemanticsUnSupported, so that the reflectors stream their
// lists (SendInitialEvents) as they do against a real API server.
type r14WatchListClient struct{ kubernetes.Interface }

// TestHostileRound14WatchListLeaksInvalid: with a streaming list (the
// default against a real API server since client-go v0.35), the reflector
// transforms each object into its temporary store, then Replace hands the
// transformed objects to the informer's queue, which transforms them
// again. transform is idempotent for pods (a *Pod is returned as it is),
// but a Node (a Namespace, a NetworkPolicy) is slimmed anew: two objects,
// two Admits, and the first one's entry in Informers.invalid is for an
// object no cache ever stores, which forget never sees. Every streamed
// list (each start and each relist, e.g. after a 410) leaves one entry,
// and the slim object it pins, per invalid node. (Fixed by 8402004: the
// second transform is the same object.)
func TestHostileRound14WatchListLeaksInvalid(t *testing.T) {
	fc := fake.NewClientset()
	bookmark := map[string]runtime.Object{
		"namespaces":      &corev1.Namespace{},
		"pods":            &corev1.Pod{},
		"nodes":           &corev1.Node{},
		"networkpolicies": &networkingv1.NetworkPolicy{},
	}
	var streamed atomic.Int32
	fc.PrependWatchReactor("*", func(a clienttesting.Action) (bool, watch.Interface, error) {
		res := a.GetResource().Resource
		opts := a.(clienttesting.WatchActionImpl).ListOptions
		if opts.SendInitialEvents == nil || !*opts.SendInitialEvents || bookmark[res] == nil {
			return true, watch.NewFake(), nil // a later watch: nothing happens
		}
		w := watch.NewFakeWithChanSize(4, false)
		if res == "nodes" {
			n := r14Node("n1", "10.0.0.7")
			n.Spec.PodCIDR, n.Spec.PodCIDRs = "not-a-cidr", nil // invalid here
			n.ResourceVersion = "5"
			w.Add(n)
		}
		b := bookmark[res].DeepCopyObject()
		m, _ := meta.Accessor(b)
		m.SetResourceVersion("5")
		m.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
		w.Action(watch.Bookmark, b)
		streamed.Add(1)
		return true, w, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	in := NewInformers(r14WatchListClient{fc}, InformerOptions{})
	startCtx, stop := context.WithTimeout(ctx, 20*time.Second)
	defer stop()
	if err := in.Start(startCtx); err != nil {
		t.Fatal(err)
	}
	if n := streamed.Load(); n != 4 {
		t.Fatalf("%d of the 4 informers streamed their list (the test's premise)", n)
	}
	stored := in.infs[2].GetStore().List()
	if len(stored) != 1 {
		t.Fatalf("the node cache holds %d objects, want the one node", len(stored))
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.invalid[stored[0]] {
		t.Fatal("the stored node is not marked invalid (the test's premise)")
	}
	if len(in.invalid) != 1 {
		t.Fatalf("Informers.invalid holds %d objects after one streamed list of one invalid node; the caches store 1", len(in.invalid))
	}
}

// TestHostileRound14PodAnnotatedInitialEventsEnd: a pod may carry the
// annotation that marks the end of a streamed list
// (k8s.io/initial-events-end: "true") on itself; the slim decoder keeps
// that annotation for the reflector. Streamed as an ADDED event, it must
// not end the list: the caches are synced only at the real bookmark,
// and the pod is in the Snapshot after it. (Held.)
func TestHostileRound14PodAnnotatedInitialEventsEnd(t *testing.T) {
	fc := fake.NewClientset()
	bookmark := map[string]runtime.Object{
		"namespaces":      &corev1.Namespace{},
		"pods":            &corev1.Pod{},
		"nodes":           &corev1.Node{},
		"networkpolicies": &networkingv1.NetworkPolicy{},
	}
	podW := make(chan *watch.FakeWatcher, 1)
	mark := func(res string) runtime.Object {
		b := bookmark[res].DeepCopyObject()
		m, _ := meta.Accessor(b)
		m.SetResourceVersion("5")
		m.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
		return b
	}
	fc.PrependWatchReactor("*", func(a clienttesting.Action) (bool, watch.Interface, error) {
		res := a.GetResource().Resource
		opts := a.(clienttesting.WatchActionImpl).ListOptions
		if opts.SendInitialEvents == nil || !*opts.SendInitialEvents || bookmark[res] == nil {
			return true, watch.NewFake(), nil
		}
		w := watch.NewFakeWithChanSize(4, false)
		if res == "pods" {
			p := podWithIP("x", "a", "10.1.0.9", map[string]string{"app": "a"})
			p.ResourceVersion = "4"
			p.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
			w.Add(p)
			podW <- w // its bookmark comes later
			return true, w, nil
		}
		w.Action(watch.Bookmark, mark(res))
		return true, w, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	in := NewInformers(r14WatchListClient{fc}, InformerOptions{})
	started := make(chan error, 1)
	go func() { started <- in.Start(ctx) }()
	var w *watch.FakeWatcher
	select {
	case w = <-podW:
	case <-time.After(10 * time.Second):
		t.Fatal("no streamed pod list within 10s")
	}
	select {
	case err := <-started:
		t.Fatalf("Start returned (%v) before the pods' bookmark: a pod's own annotation ended the list", err)
	case <-time.After(time.Second):
	}
	w.Action(watch.Bookmark, mark("pods"))
	select {
	case err := <-started:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start has not returned 10s after the bookmark")
	}
	if s := in.Snapshot(); len(s.Pods) != 1 || s.Pods[0].Name != "a" {
		t.Fatalf("Snapshot pods %v, want x/a", objectNames(s))
	}
}

// TestHostileRound14StreamedRelist: a streamed list, a 410 Gone on its
// watch, and a second streamed list in which one pod is gone, one is new
// and one was deleted and re-created under its name (a new UID and
// address): the Snapshot after it is the second list's, exactly. (Held.)
func TestHostileRound14StreamedRelist(t *testing.T) {
	fc := fake.NewClientset()
	bookmark := map[string]runtime.Object{
		"namespaces":      &corev1.Namespace{},
		"pods":            &corev1.Pod{},
		"nodes":           &corev1.Node{},
		"networkpolicies": &networkingv1.NetworkPolicy{},
	}
	mark := func(res, rv string) runtime.Object {
		b := bookmark[res].DeepCopyObject()
		m, _ := meta.Accessor(b)
		m.SetResourceVersion(rv)
		m.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
		return b
	}
	mkPod := func(name, uid, ip, rv string) *corev1.Pod {
		p := podWithIP("x", name, ip, map[string]string{"app": name})
		p.UID, p.ResourceVersion = types.UID(uid), rv
		return p
	}
	var podStreams atomic.Int32
	firstPodW := make(chan *watch.FakeWatcher, 1)
	fc.PrependWatchReactor("*", func(a clienttesting.Action) (bool, watch.Interface, error) {
		res := a.GetResource().Resource
		opts := a.(clienttesting.WatchActionImpl).ListOptions
		if opts.SendInitialEvents == nil || !*opts.SendInitialEvents || bookmark[res] == nil {
			return true, watch.NewFake(), nil
		}
		w := watch.NewFakeWithChanSize(8, false)
		if res != "pods" {
			w.Action(watch.Bookmark, mark(res, "5"))
			return true, w, nil
		}
		switch podStreams.Add(1) {
		case 1:
			w.Add(mkPod("a", "uid-a1", "10.1.0.1", "3"))
			w.Add(mkPod("b", "uid-b", "10.1.0.2", "4"))
			w.Action(watch.Bookmark, mark(res, "5"))
			firstPodW <- w
		default:
			w.Add(mkPod("a", "uid-a2", "10.1.0.3", "8"))
			w.Add(mkPod("c", "uid-c", "10.1.0.4", "9"))
			w.Action(watch.Bookmark, mark(res, "10"))
		}
		return true, w, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	in := NewInformers(r14WatchListClient{fc}, InformerOptions{})
	startCtx, stop := context.WithTimeout(ctx, 20*time.Second)
	defer stop()
	if err := in.Start(startCtx); err != nil {
		t.Fatal(err)
	}
	view := func(s *Snapshot) string {
		var out []string
		for _, p := range s.Pods {
			out = append(out, p.Name+"/"+string(p.UID)+"/"+p.Status.PodIPs[0].IP)
		}
		return strings.Join(out, " ")
	}
	if got, want := view(in.Snapshot()), "a/uid-a1/10.1.0.1 b/uid-b/10.1.0.2"; got != want {
		t.Fatalf("first list: %q, want %q", got, want)
	}
	w := <-firstPodW
	w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
	want := "a/uid-a2/10.1.0.3 c/uid-c/10.1.0.4"
	var got string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got = view(in.Snapshot()); got == want {
			return
		}
	}
	t.Fatalf("after the relist (%d pod streams): %q, want %q", podStreams.Load(), got, want)
}
