package k8s_test

// Versions of one object through the informer source: a snapshot holds
// what the cache holds, and judges each version by itself. Found by an
// adversarial pass: a pod that began terminating, or was made again
// under its name during a relist, compared equal to its old version and
// stayed the old one in snapshots; and an invalid version stored after a
// valid one was queued passed as valid.

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nftpolicy/nftpolicy/k8s"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

func ns(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-ns-" + name)}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}
}

func pod(namespace, name, uid, ip string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID(uid), Labels: map[string]string{"app": "a"},
			CreationTimestamp: metav1.NewTime(time.Unix(1000, 0))},
		Spec:   corev1.PodSpec{NodeName: "node1", Containers: []corev1.Container{{Name: "c", Image: "x"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
}

func policy(cidr, uid string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "np", UID: types.UID(uid)},
		Spec: networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: cidr}}}}},
		},
	}
}

type harness struct {
	client  *fake.Clientset
	in      *k8s.Informers
	podW    chan *watch.FakeWatcher // pod watches, when controlled
	watches atomic.Int32
}

// start starts Informers on a fake clientset. With controlPods, every pod
// watch is a FakeWatcher handed out on podW (tracker events on pods are not
// delivered): the test decides when the reflector relists.
func start(t *testing.T, controlPods bool, objs ...runtime.Object) *harness {
	t.Helper()
	h := &harness{client: fake.NewClientset(objs...), podW: make(chan *watch.FakeWatcher, 16)}
	if controlPods {
		h.client.PrependWatchReactor("pods", func(clienttesting.Action) (bool, watch.Interface, error) {
			h.watches.Add(1)
			w := watch.NewFakeWithChanSize(16, false)
			h.podW <- w
			return true, w, nil
		})
	}
	h.client.PrependWatchReactor("*", func(a clienttesting.Action) (bool, watch.Interface, error) {
		if !controlPods || a.GetResource().Resource != "pods" {
			h.watches.Add(1)
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h.in = k8s.NewInformers(h.client, k8s.InformerOptions{})
	if err := h.in.Start(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for h.watches.Load() < 4 {
		if time.Now().After(deadline) {
			t.Fatal("watches not started")
		}
		time.Sleep(time.Millisecond)
	}
	return h
}

func findPod(s *k8s.Snapshot, name string) *k8s.Pod {
	for _, p := range s.Pods {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Finding: an update that only sets metadata.deletionTimestamp (a graceful
// delete: what `kubectl delete pod` does first) never reaches a Snapshot,
// although the enforcer reads it (enforcer/inputs.go: claim.terminating).
func TestDeletionTimestampReachesSnapshot(t *testing.T) {
	ctx := context.Background()
	h := start(t, false, ns("x"), pod("x", "p", "uid-p", "10.1.0.1"))
	if s := h.in.Snapshot(); findPod(s, "p") == nil {
		t.Fatal("pod missing initially")
	}
	p := pod("x", "p", "uid-p", "10.1.0.1")
	now := metav1.NewTime(time.Now())
	p.DeletionTimestamp = &now
	if _, err := h.client.CoreV1().Pods("x").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// An unrelated change afterwards, to be sure the handlers ran.
	if _, err := h.client.CoreV1().Namespaces().Create(ctx, ns("y"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		s := h.in.Snapshot()
		if len(s.Namespaces) == 2 {
			if got := findPod(s, "p"); got.DeletionTimestamp == nil {
				t.Errorf("snapshot pod x/p has no deletionTimestamp; the API server's (and the informer cache's) has %v", now)
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("namespace y never arrived")
}

// Finding: a pod deleted and re-created with the same name (a StatefulSet
// pod) while the watch is down is, after the relist, still the OLD object
// in every Snapshot (old UID, old creationTimestamp), when the fields the
// comparison looks at are equal.
func TestRecreateDuringRelist(t *testing.T) {
	ctx := context.Background()
	h := start(t, true, ns("x"), pod("x", "p", "uid-old", "10.1.0.1"))
	w := <-h.podW
	if s := h.in.Snapshot(); string(findPod(s, "p").UID) != "uid-old" {
		t.Fatal("initial")
	}
	// Behind the informer's back (its watch is ours and silent).
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	if err := h.client.Tracker().Delete(gvr, "x", "p"); err != nil {
		t.Fatal(err)
	}
	np := pod("x", "p", "uid-new", "10.1.0.1")
	np.CreationTimestamp = metav1.NewTime(time.Unix(2000, 0))
	if err := h.client.Tracker().Create(gvr, np, "x"); err != nil {
		t.Fatal(err)
	}
	// 410 Gone: the reflector relists.
	w.Error(&apierrors.NewResourceExpired("too old").ErrStatus)
	select {
	case <-h.podW:
	case <-time.After(10 * time.Second):
		t.Fatal("no relist")
	}
	_ = ctx
	time.Sleep(500 * time.Millisecond)
	got := findPod(h.in.Snapshot(), "p")
	if got == nil || got.UID != "uid-new" || !got.CreationTimestamp.Equal(&np.CreationTimestamp) {
		t.Errorf("after relist the snapshot holds pod x/p uid=%v created=%v; the cache holds uid-new created %v", got.UID, got.CreationTimestamp, np.CreationTimestamp)
	}
}

// Race: an update to an invalid version followed at once by one to a
// valid version. transform marks validity by UID when the delta is
// queued, the handler marks the object pending later: a Snapshot in
// between patches in the invalid object.
func TestInvalidThenValidRace(t *testing.T) {
	ctx := context.Background()
	good1 := policy("10.0.0.0/8", "uid-np")
	h := start(t, false, ns("x"), good1)
	var bad atomic.Int32
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			s := h.in.Snapshot()
			for _, p := range s.Policies {
				if p.Spec.Ingress[0].From[0].IPBlock.CIDR == "bogus" {
					bad.Add(1)
				}
			}
		}
	}()
	for i := 0; i < 300 && bad.Load() == 0; i++ {
		if _, err := h.client.NetworkingV1().NetworkPolicies("x").Update(ctx, policy("bogus", "uid-np"), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		cidr := "10.0.0.0/8"
		if i%2 == 0 {
			cidr = "10.0.0.0/16"
		}
		if _, err := h.client.NetworkingV1().NetworkPolicies("x").Update(ctx, policy(cidr, "uid-np"), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Errorf("%d snapshots held the rejected policy (ipBlock.cidr \"bogus\")", n)
	}
	// The last version, valid, arrives: poll for it rather than sleep.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		s := h.in.Snapshot()
		if len(s.Policies) == 1 && s.Policies[0].Spec.Ingress[0].From[0].IPBlock.CIDR != "bogus" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("did not converge: %v", s.Policies)
		}
	}
}
