package k8s

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// startFake starts Informers on a fake clientset holding objs and returns
// once the caches are synced and all four watches are open, so that every
// later write is seen as an event.
func startFake(t *testing.T, objs ...runtime.Object) (*fake.Clientset, *Informers, <-chan *Snapshot) {
	t.Helper()
	return startFakeWith(t, InformerOptions{}, objs...)
}

// startFakeWith is startFake with opts.
func startFakeWith(t *testing.T, opts InformerOptions, objs ...runtime.Object) (*fake.Clientset, *Informers, <-chan *Snapshot) {
	t.Helper()
	client := fake.NewClientset(objs...)
	var watches atomic.Int32
	client.PrependWatchReactor("*", func(clienttesting.Action) (bool, watch.Interface, error) {
		watches.Add(1)
		return false, nil, nil // fall through to the tracker's watch
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	in := NewInformers(client, opts)
	if err := in.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if !in.HasSynced() {
		t.Fatal("HasSynced false after Start")
	}
	deadline := time.Now().Add(10 * time.Second)
	for watches.Load() < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of 4 watches started", watches.Load())
		}
		time.Sleep(time.Millisecond)
	}
	return client, in, in.Watch(ctx)
}

// next returns the first Snapshot from ch for which ok holds, failing t
// after 10 s.
func next(t *testing.T, ch <-chan *Snapshot, what string, ok func(*Snapshot) bool) *Snapshot {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case s, open := <-ch:
			if !open {
				t.Fatalf("%s: channel closed", what)
			}
			if ok(s) {
				return s
			}
		case <-timeout:
			t.Fatalf("%s: no such snapshot within 10s", what)
		}
	}
}

func objectNames(snap *Snapshot) []string {
	var out []string
	for _, ns := range snap.Namespaces {
		out = append(out, "Namespace "+ns.Name)
	}
	for _, p := range snap.Pods {
		out = append(out, "Pod "+p.Namespace+"/"+p.Name)
	}
	for _, n := range snap.Nodes {
		out = append(out, "Node "+n.Name)
	}
	for _, np := range snap.Policies {
		out = append(out, "NetworkPolicy "+np.Namespace+"/"+np.Name)
	}
	return out
}

func podWithIP(namespace, name, ip string, labels map[string]string) *corev1.Pod {
	p := pod(namespace, name)
	p.UID = types.UID("uid-" + namespace + "-" + name)
	p.Labels = labels
	p.Spec.NodeName = "node1"
	p.Spec.Containers = []corev1.Container{{Name: "c", Image: "busybox", Env: []corev1.EnvVar{{Name: "A", Value: "b"}},
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80}}}}
	p.Status.Phase = corev1.PodRunning
	if ip != "" {
		p.Status.PodIP = ip
	}
	return p
}

func TestInformersInitialSnapshot(t *testing.T) {
	x := namespace("x")
	x.UID = "uid-x"
	x.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	np := &networkingv1.NetworkPolicy{ObjectMeta: objectMeta("x", "deny"),
		Spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{
			Ports: []networkingv1.NetworkPolicyPort{{}},
			From:  []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.1/8"}}},
		}}}}
	np.UID = "uid-np"
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", UID: "uid-node1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.0.1"}, {Type: corev1.NodeHostName, Address: "node1"}}}}
	_, _, ch := startFake(t, x, podWithIP("x", "b", "10.1.0.2", nil), podWithIP("x", "a", "fd00::0:1", nil), node, np)
	snap := next(t, ch, "initial", func(*Snapshot) bool { return true })

	want := []string{"Namespace x", "Pod x/a", "Pod x/b", "Node node1", "NetworkPolicy x/deny"}
	if d := cmp.Diff(want, objectNames(snap)); d != "" {
		t.Fatalf("objects (-want +got):\n%s", d)
	}
	// The same defaulting and normalization as the manifests source.
	if got := snap.Namespaces[0].Labels[corev1.LabelMetadataName]; got != "x" {
		t.Errorf("namespace label %s = %q, want x", corev1.LabelMetadataName, got)
	}
	a := snap.Pods[0]
	if got := a.Status.PodIPs; len(got) != 1 || got[0].IP != "fd00::1" {
		t.Errorf("pod x/a podIPs = %v, want [fd00::1] (defaulted from podIP, canonical)", got)
	}
	if got := a.Spec.Ports[0].Protocol; got != corev1.ProtocolTCP {
		t.Errorf("container port protocol = %q, want TCP", got)
	}
	p := snap.Policies[0]
	if got := p.Spec.PolicyTypes; len(got) != 1 || got[0] != networkingv1.PolicyTypeIngress {
		t.Errorf("policyTypes = %v, want [Ingress]", got)
	}
	if got := p.Spec.Ingress[0].From[0].IPBlock.CIDR; got != "10.0.0.0/8" {
		t.Errorf("ipBlock cidr = %q, want 10.0.0.0/8", got)
	}
	if got := *p.Spec.Ingress[0].Ports[0].Protocol; got != corev1.ProtocolTCP {
		t.Errorf("policy port protocol = %q, want TCP", got)
	}
	// Only what the compiler reads is kept.
	if snap.Namespaces[0].ManagedFields != nil {
		t.Errorf("cached objects were not slimmed: %+v", snap.Namespaces[0].ObjectMeta)
	}
	if got := snap.Nodes[0].Status.Addresses; len(got) != 1 {
		t.Errorf("node addresses = %v, want only the InternalIP", got)
	}
}

func TestInformersFollowChanges(t *testing.T) {
	ctx := context.Background()
	client, _, ch := startFake(t, namespace("x"))
	next(t, ch, "initial", func(*Snapshot) bool { return true })

	pods := client.CoreV1().Pods("x")
	created, err := pods.Create(ctx, podWithIP("x", "a", "", map[string]string{"app": "a"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	next(t, ch, "pod created", func(s *Snapshot) bool { return len(s.Pods) == 1 })

	// A pod IP appearing, through the status subresource as the kubelet does.
	created.Status.PodIP = "10.1.0.9"
	updated, err := pods.UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	next(t, ch, "pod IP", func(s *Snapshot) bool { return len(s.Pods) == 1 && s.Pods[0].Status.PodIPs[0].IP == "10.1.0.9" })

	updated.Labels = map[string]string{"app": "b"}
	if _, err := pods.Update(ctx, updated, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	next(t, ch, "pod label", func(s *Snapshot) bool { return len(s.Pods) == 1 && s.Pods[0].Labels["app"] == "b" })

	ns, err := client.CoreV1().Namespaces().Get(ctx, "x", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels = map[string]string{"team": "red"}
	if _, err := client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	next(t, ch, "namespace label", func(s *Snapshot) bool {
		return len(s.Namespaces) == 1 && s.Namespaces[0].Labels["team"] == "red"
	})

	np := &networkingv1.NetworkPolicy{ObjectMeta: objectMeta("x", "deny")}
	if _, err := client.NetworkingV1().NetworkPolicies("x").Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	next(t, ch, "policy created", func(s *Snapshot) bool { return len(s.Policies) == 1 })

	if err := pods.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.NetworkingV1().NetworkPolicies("x").Delete(ctx, "deny", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	next(t, ch, "deleted", func(s *Snapshot) bool { return len(s.Pods) == 0 && len(s.Policies) == 0 })
}

// Watch builds a Snapshot only when the previous one was taken: a
// receiver that takes none during a burst of 100 changes then gets a few
// Snapshots, not one per change, and the last holds every change. Watch
// does not wait to coalesce (the Syncer does, the one place that does).
func TestInformersWatchBuildsWhenTaken(t *testing.T) {
	ctx := context.Background()
	client, in, ch := startFakeWith(t, InformerOptions{}, namespace("x"))
	next(t, ch, "initial", func(*Snapshot) bool { return true })
	const n = 100
	for i := range n {
		if _, err := client.CoreV1().Pods("x").Create(ctx, podWithIP("x", fmt.Sprintf("p%03d", i), "10.1.0.1", nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Every change in the caches, none taken from Watch yet.
	deadline := time.Now().Add(10 * time.Second)
	for len(in.Snapshot().Pods) < n {
		if time.Now().After(deadline) {
			t.Fatal("the caches did not see every pod")
		}
		time.Sleep(time.Millisecond)
	}
	seen := 0
	next(t, ch, "all pods", func(s *Snapshot) bool { seen++; return len(s.Pods) == n })
	// The one built at the burst's first change, waiting since, and one
	// built after it was taken.
	if seen > 2 {
		t.Errorf("%d Snapshots for a burst of %d changes nobody took meanwhile; want a few", seen, n)
	}
	t.Logf("%d Snapshots for %d creates", seen, n)
}

// An object the API server accepted but the compiler's validation rejects
// (here: podIP not the first of podIPs) is left out, and comes back once
// fixed.
func TestInformersSkipInvalid(t *testing.T) {
	ctx := context.Background()
	bad := podWithIP("x", "bad", "10.1.0.1", nil)
	bad.Status.PodIPs = []corev1.PodIP{{IP: "10.1.0.2"}}
	client, _, ch := startFake(t, namespace("x"), bad, podWithIP("x", "good", "10.1.0.3", nil))
	snap := next(t, ch, "initial", func(*Snapshot) bool { return true })
	if d := cmp.Diff([]string{"Namespace x", "Pod x/good"}, objectNames(snap)); d != "" {
		t.Fatalf("objects (-want +got):\n%s", d)
	}
	bad.Status.PodIPs = []corev1.PodIP{{IP: "10.1.0.1"}}
	if _, err := client.CoreV1().Pods("x").UpdateStatus(ctx, bad, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	next(t, ch, "fixed pod", func(s *Snapshot) bool { return len(s.Pods) == 2 })
}

// Updates that change nothing the compiler reads (conditions, heartbeats,
// annotations) do not cause Snapshots.
func TestEqualIgnoringVersion(t *testing.T) {
	in := NewInformers(fake.NewClientset(), InformerOptions{})
	tr := func(o runtime.Object) any {
		out, err := in.transform(o)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	a := podWithIP("x", "a", "10.1.0.1", map[string]string{"app": "a"})
	a.ResourceVersion = "1"
	b := a.DeepCopy()
	b.ResourceVersion = "2"
	b.Annotations = map[string]string{"x": "y"}
	b.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if !equalIgnoringVersion(tr(a), tr(b)) {
		t.Error("a condition change compares unequal")
	}
	c := b.DeepCopy()
	c.Labels = map[string]string{"app": "c"}
	if equalIgnoringVersion(tr(b), tr(c)) {
		t.Error("a label change compares equal")
	}
	d := b.DeepCopy()
	d.Status.Phase = corev1.PodSucceeded
	if equalIgnoringVersion(tr(b), tr(d)) {
		t.Error("a phase change compares equal")
	}
	n1 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "1"}}
	n2 := n1.DeepCopy()
	n2.ResourceVersion = "2"
	n2.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, LastHeartbeatTime: metav1.Now()}}
	if !equalIgnoringVersion(tr(n1), tr(n2)) {
		t.Error("a node heartbeat compares unequal")
	}
	// transform is idempotent, as client-go requires.
	once := tr(a)
	if d := cmp.Diff(once, tr(once.(runtime.Object))); d != "" {
		t.Errorf("transform twice differs (-once +twice):\n%s", d)
	}
}

// While watches fail, the failure is logged once (not once per retry),
// Health says why, and Snapshots keep the last listed state.
func TestInformersWatchErrorsKeepState(t *testing.T) {
	client := fake.NewClientset(namespace("x"), podWithIP("x", "a", "10.1.0.1", nil))
	var failures atomic.Int32
	client.PrependWatchReactor("*", func(clienttesting.Action) (bool, watch.Interface, error) {
		failures.Add(1)
		return true, nil, errors.New("connection refused")
	})
	core, logs := observer.New(zap.WarnLevel)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in := NewInformers(client, InformerOptions{Log: zap.New(core), Server: "https://api.test:6443"})
	if err := in.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// Each of the four reflectors retries with backoff (0.8 s, then 1.6 s):
	// wait for a second round of all four.
	deadline := time.Now().Add(20 * time.Second)
	for failures.Load() < 8 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d failed watches", failures.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := logs.Len(); got != 1 {
		t.Errorf("%d log entries after %d failed watches, want 1 (then more with backoff): %v", got, failures.Load(), logs.All())
	} else if m := logs.All()[0].ContextMap(); m["resource"] == nil || m["error"] == nil || m["server"] != "https://api.test:6443" {
		t.Errorf("log entry lacks resource, error or server: %v", m)
	}
	_, err := in.Health()
	if err == nil || !strings.Contains(err.Error(), "https://api.test:6443") || !strings.Contains(err.Error(), "connection refused") ||
		!strings.Contains(err.Error(), "namespaces, pods, nodes, networkpolicies") {
		t.Errorf("Health = %v, want the server, the four resources and the error", err)
	}
	if d := cmp.Diff([]string{"Namespace x", "Pod x/a"}, objectNames(in.Snapshot())); d != "" {
		t.Errorf("objects (-want +got):\n%s", d)
	}
}

// A watch refused by the API server (connection refused) is retried by the
// reflector without ever calling its watch error handler; Health still
// reports it at once, and clears once every link has caught up.
func TestInformersHealthRecovers(t *testing.T) {
	np := &networkingv1.NetworkPolicy{ObjectMeta: objectMeta("x", "deny")}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}}
	client := fake.NewClientset(namespace("x"), podWithIP("x", "a", "10.1.0.1", nil), node, np)
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	var down atomic.Bool
	var mu sync.Mutex
	var open []watch.Interface
	client.PrependWatchReactor("*", func(a clienttesting.Action) (bool, watch.Interface, error) {
		if down.Load() {
			return true, nil, refused
		}
		w, err := client.Tracker().Watch(a.GetResource(), a.GetNamespace(), a.(clienttesting.WatchActionImpl).ListOptions)
		mu.Lock()
		defer mu.Unlock()
		open = append(open, w)
		return true, w, err
	})
	client.PrependReactor("list", "*", func(clienttesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			return true, nil, refused
		}
		return false, nil, nil
	})
	core, logs := observer.New(zap.InfoLevel)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in := NewInformers(client, InformerOptions{Log: zap.New(core), Server: "https://api.test:6443"})
	if err := in.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				_, err := in.Health()
				t.Fatalf("%s: not within 60s; Health = %v; log %v", what, err, logs.All())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("four watches", func() bool { mu.Lock(); defer mu.Unlock(); return len(open) == 4 })
	changed, err := in.Health()
	if err != nil {
		t.Fatalf("Health = %v before any failure", err)
	}

	// The API server goes away: its watches end and it refuses connections.
	// Watches that lasted a second are re-opened inside the reflector's
	// round, where a refused one is retried without the error handler.
	time.Sleep(1200 * time.Millisecond)
	down.Store(true)
	mu.Lock()
	for _, w := range open {
		w.Stop()
	}
	open = nil
	mu.Unlock()
	select {
	case <-changed:
	case <-time.After(60 * time.Second):
		t.Fatal("Health did not change after the watches were refused")
	}
	waitFor("all four failing", func() bool {
		_, err := in.Health()
		return err != nil && strings.Contains(err.Error(), "namespaces, pods, nodes, networkpolicies")
	})
	_, err = in.Health()
	if !strings.Contains(err.Error(), "https://api.test:6443") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Health = %v, want the server and the error", err)
	}
	if got := logs.FilterLevelExact(zap.ErrorLevel).Len(); got != 1 {
		t.Errorf("%d error entries, want 1: %v", got, logs.All())
	}

	// Back: each link heals with a list, or with the first event of a
	// watch from where it was (the fake replays nothing, so touch each
	// resource).
	down.Store(false)
	touch := func() {
		bg := context.Background()
		label := map[string]string{"t": time.Now().Format("150405.000000")}
		if ns, err := client.CoreV1().Namespaces().Get(bg, "x", metav1.GetOptions{}); err == nil {
			ns.Labels = label
			client.CoreV1().Namespaces().Update(bg, ns, metav1.UpdateOptions{})
		}
		if p, err := client.CoreV1().Pods("x").Get(bg, "a", metav1.GetOptions{}); err == nil {
			p.Labels = label
			client.CoreV1().Pods("x").Update(bg, p, metav1.UpdateOptions{})
		}
		if n, err := client.CoreV1().Nodes().Get(bg, "node1", metav1.GetOptions{}); err == nil {
			n.Labels = label
			client.CoreV1().Nodes().Update(bg, n, metav1.UpdateOptions{})
		}
		if p, err := client.NetworkingV1().NetworkPolicies("x").Get(bg, "deny", metav1.GetOptions{}); err == nil {
			p.Labels = label
			client.NetworkingV1().NetworkPolicies("x").Update(bg, p, metav1.UpdateOptions{})
		}
	}
	waitFor("Health nil again", func() bool {
		mu.Lock()
		n := len(open)
		mu.Unlock()
		if n > 0 {
			touch()
		}
		_, err := in.Health()
		return err == nil
	})
	if logs.FilterMessageSnippet("answers again").Len() != 1 {
		t.Errorf("recovery not logged once: %v", logs.All())
	}
}

// patchList keeps a Snapshot's list what listing and sorting the cache
// would give, through random adds, updates, deletes and invalid objects,
// and never changes the list it patches (an earlier Snapshot holds it).
func TestPatchListMatchesListing(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	invalid := map[any]bool{}
	var list []*corev1.Pod
	for step := range 2000 {
		changed := map[string]bool{}
		for range 1 + r.IntN(5) {
			ns, name := fmt.Sprintf("ns-%d", r.IntN(4)), fmt.Sprintf("p-%d", r.IntN(30))
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(fmt.Sprintf("%s/%s-%d", ns, name, step))}}
			changed[ns+"/"+name] = true
			if r.IntN(3) == 0 {
				_ = store.Delete(p)
				continue
			}
			invalid[p] = r.IntN(8) == 0
			_ = store.Update(p)
		}
		before := slices.Clone(list)
		next := patchList(list, changed, store, invalid)
		if !slices.Equal(list, before) {
			t.Fatalf("step %d: patchList changed the list it was given", step)
		}
		var want []*corev1.Pod
		for _, o := range store.List() {
			if !invalid[o] {
				p := o.(*corev1.Pod)
				want = append(want, p)
			}
		}
		sortByName(want)
		if !slices.Equal(next, want) {
			t.Fatalf("step %d: patched list differs from the listing", step)
		}
		list = next
	}
}

// TestReadNodeAddresses: a node's addresses as the API server may hold
// them (it does not check them) are read as Kubernetes' components read
// them, and what is not an address is left out.
func TestReadNodeAddresses(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"10.0.0.7", "10.0.0.7"},
		{"2001:db8::1", "2001:db8::1"},
		{"2001:DB8::1", "2001:DB8::1"}, // normalizeNode canonicalizes it
		{"::ffff:10.0.0.7", "10.0.0.7"},
		{"010.0.0.8", "10.0.0.8"},
		{"10.000.0.0010", "10.0.0.10"},
		{"fe80::1%eth0", "fe80::1"},
		{"256.0.0.1", ""},
		{"10.0.0", ""},
		{"10.0.0.-1", ""},
		{"10..0.1", ""},
		{"node-1.example.com", ""},
		{"", ""},
	} {
		n := &corev1.Node{Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "10.1.1.1"}, {Type: corev1.NodeExternalIP, Address: c.in}}}}
		unread := readNodeAddresses(n)
		want := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.1.1.1"}}
		var wantUnread []string
		if c.want != "" {
			want = append(want, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: c.want})
		} else {
			wantUnread = []string{c.in}
		}
		if diff := cmp.Diff(want, n.Status.Addresses); diff != "" {
			t.Errorf("%q: addresses (-want +got):\n%s", c.in, diff)
		}
		if diff := cmp.Diff(wantUnread, unread); diff != "" {
			t.Errorf("%q: left out (-want +got):\n%s", c.in, diff)
		}
	}
}

// Before the first Snapshot there is nothing to patch (it lists every
// cache), so the first list's events note nothing; once it is taken, an
// event is noted and the next Snapshot holds it.
func TestInformersFirstListNotesNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	objs := []runtime.Object{namespace("x")}
	for i := range 50 {
		objs = append(objs, podWithIP("x", fmt.Sprintf("p%d", i), fmt.Sprintf("10.1.0.%d", i+1), nil))
	}
	client := fake.NewClientset(objs...)
	in := NewInformers(client, InformerOptions{})
	if err := in.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// Start returns once the handlers have seen the whole first list.
	in.mu.Lock()
	noted := 0
	for _, m := range in.pending {
		noted += len(m)
	}
	in.mu.Unlock()
	if noted != 0 {
		t.Fatalf("the first list noted %d objects before any Snapshot; want 0", noted)
	}
	ch := in.Watch(ctx)
	next(t, ch, "first", func(s *Snapshot) bool { return len(s.Pods) == 50 && len(s.Namespaces) == 1 })
	if _, err := client.CoreV1().Pods("x").Create(ctx, podWithIP("x", "late", "10.1.1.1", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	next(t, ch, "pod created after the first Snapshot", func(s *Snapshot) bool {
		return len(s.Pods) == 51 && slices.ContainsFunc(s.Pods, func(p *Pod) bool { return p.Name == "late" })
	})
}
