package k8s

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// DefaultCoalesce is how long an Informers waits after the first change of a
// burst before it builds a Snapshot: long enough that a rollout of many pods
// costs one Snapshot, short against the time a pod takes to start.
const DefaultCoalesce = 50 * time.Millisecond

// An Informers follows the API server through client-go shared informers on
// Pods, Namespaces, NetworkPolicies and Nodes, and builds Snapshots from
// their caches.
//
// The caches are the state: a watch that breaks leaves them as they were (so
// the enforcer keeps enforcing the last state while the API server is away),
// and a relist replaces them as a whole, with a delete event for everything
// that disappeared meanwhile, so a Snapshot built from them after a relist
// neither loses nor duplicates an object.
type Informers struct {
	log      *zap.Logger
	factory  informers.SharedInformerFactory
	infs     []cache.SharedIndexInformer // namespaces, pods, nodes, policies
	changed  chan struct{}               // capacity 1: "something changed since the last Snapshot"
	coalesce time.Duration

	mu      sync.Mutex
	invalid map[types.UID]bool // objects the API server accepted but Admit rejects
}

// InformerOptions configures NewInformers.
type InformerOptions struct {
	// Coalesce is how long to wait after a change for more before building
	// a Snapshot; DefaultCoalesce when zero.
	Coalesce time.Duration
	// Resync, when not zero, replays every cached object to the handlers
	// at that period. Not needed for correctness (the watch delivers every
	// change); zero disables it.
	Resync time.Duration
	// Log receives watch errors and skipped objects; zap.NewNop when nil.
	Log *zap.Logger
}

// NewInformers sets up the informers on client. Nothing is listed or
// watched until Start.
func NewInformers(client kubernetes.Interface, opts InformerOptions) *Informers {
	if opts.Coalesce <= 0 {
		opts.Coalesce = DefaultCoalesce
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	in := &Informers{
		log:      opts.Log,
		changed:  make(chan struct{}, 1),
		coalesce: opts.Coalesce,
		invalid:  map[types.UID]bool{},
	}
	in.factory = informers.NewSharedInformerFactoryWithOptions(client, opts.Resync, informers.WithTransform(in.transform))
	in.infs = []cache.SharedIndexInformer{
		in.factory.Core().V1().Namespaces().Informer(),
		in.factory.Core().V1().Pods().Informer(),
		in.factory.Core().V1().Nodes().Informer(),
		in.factory.Networking().V1().NetworkPolicies().Informer(),
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { in.notify() },
		UpdateFunc: in.onUpdate,
		DeleteFunc: in.onDelete,
	}
	for _, inf := range in.infs {
		// Errors only when the informer has started; it has not.
		_, _ = inf.AddEventHandler(handler)
		_ = inf.SetWatchErrorHandlerWithContext(in.watchError)
	}
	return in
}

// Start starts the informers and waits until every cache holds a complete
// list, or ctx ends (then it returns an error and the informers stop with
// ctx). The informers run until ctx ends.
func (in *Informers) Start(ctx context.Context) error {
	in.factory.Start(ctx.Done())
	synced := make([]cache.InformerSynced, len(in.infs))
	for i, inf := range in.infs {
		synced[i] = inf.HasSynced
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("informer caches not synced: %w", context.Cause(ctx))
	}
	return nil
}

// HasSynced reports whether every cache has completed its first list.
func (in *Informers) HasSynced() bool {
	for _, inf := range in.infs {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// Snapshot builds a Snapshot of the caches as they are now. Objects are
// shared with the caches, which never edit an object they hold (an update
// replaces it), so a Snapshot is immutable without copying.
func (in *Informers) Snapshot() *Snapshot {
	in.mu.Lock()
	defer in.mu.Unlock()
	snap := &Snapshot{}
	for _, obj := range in.infs[0].GetStore().List() {
		if o, ok := obj.(*corev1.Namespace); ok && !in.invalid[o.UID] {
			snap.Namespaces = append(snap.Namespaces, o)
		}
	}
	for _, obj := range in.infs[1].GetStore().List() {
		if o, ok := obj.(*corev1.Pod); ok && !in.invalid[o.UID] {
			snap.Pods = append(snap.Pods, o)
		}
	}
	for _, obj := range in.infs[2].GetStore().List() {
		if o, ok := obj.(*corev1.Node); ok && !in.invalid[o.UID] {
			snap.Nodes = append(snap.Nodes, o)
		}
	}
	for _, obj := range in.infs[3].GetStore().List() {
		if o, ok := obj.(*networkingv1.NetworkPolicy); ok && !in.invalid[o.UID] {
			snap.Policies = append(snap.Policies, o)
		}
	}
	snap.Sort()
	return snap
}

// Watch sends a Snapshot now and another after every burst of changes, at
// most one per coalesce interval, until ctx ends; then it closes the
// channel. Call it after Start. A receiver that is slow misses nothing: the
// next Snapshot it gets is built after every change it has not seen.
func (in *Informers) Watch(ctx context.Context) <-chan *Snapshot {
	out := make(chan *Snapshot, 1)
	go func() {
		defer close(out)
		// Drain a notification from the initial list: the first Snapshot
		// already holds it.
		select {
		case <-in.changed:
		default:
		}
		for {
			select {
			case out <- in.Snapshot():
			case <-ctx.Done():
				return
			}
			select {
			case <-in.changed:
			case <-ctx.Done():
				return
			}
			// Let the burst finish; changes meanwhile leave a notification
			// behind, which the next round consumes harmlessly at worst.
			t := time.NewTimer(in.coalesce)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
			select {
			case <-in.changed:
			default:
			}
		}
	}()
	return out
}

func (in *Informers) notify() {
	select {
	case in.changed <- struct{}{}:
	default:
	}
}

// onUpdate notifies unless the update changes nothing the compiler reads:
// after transform, objects hold only such fields, so an update of a pod's
// conditions or a node's heartbeat compares equal and costs nothing.
func (in *Informers) onUpdate(oldObj, newObj any) {
	// A resync (same object replayed) compares equal too.
	if equalIgnoringVersion(oldObj, newObj) {
		return
	}
	in.notify()
}

func (in *Informers) onDelete(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if o, ok := obj.(metav1.Object); ok {
		in.mu.Lock()
		delete(in.invalid, o.GetUID())
		in.mu.Unlock()
	}
	in.notify()
}

func (in *Informers) watchError(_ context.Context, r *cache.Reflector, err error) {
	// A closed watch is routine (the API server ends watches after a
	// timeout); anything else is logged, once per failed attempt, while the
	// reflector retries with backoff and the caches keep their state.
	if errors.Is(err, context.Canceled) {
		return
	}
	in.log.Warn("watch failed; enforcing the last known state until it recovers",
		zap.String("resource", r.TypeDescription()), zap.Error(err))
}

// transform runs on every object the informers receive, before it is
// cached: it keeps only what the compiler reads, so that 10k pods cost
// little memory and an irrelevant update compares equal, and applies Admit
// (defaulting and normalization as for manifests; the API server has
// defaulted already, so this mostly canonicalizes addresses). An object that
// fails validation is cached but marked invalid and left out of Snapshots.
// transform is idempotent, as client-go requires: it may see an object it
// has already transformed.
func (in *Informers) transform(obj any) (any, error) {
	var slim interface {
		runtime.Object
		metav1.Object
	}
	var kind string
	switch o := obj.(type) {
	case *corev1.Namespace:
		slim, kind = slimNamespace(o), "Namespace"
	case *corev1.Pod:
		slim, kind = slimPod(o), "Pod"
	case *corev1.Node:
		slim, kind = slimNode(o), "Node"
	case *networkingv1.NetworkPolicy:
		kind = "NetworkPolicy"
		np := o.DeepCopy()
		np.ManagedFields = nil
		np.Annotations = nil
		slim = np
	default:
		return obj, nil
	}
	errs := Admit(slim)
	in.mu.Lock()
	if len(errs) > 0 {
		in.invalid[slim.GetUID()] = true
	} else {
		delete(in.invalid, slim.GetUID())
	}
	in.mu.Unlock()
	if len(errs) > 0 {
		in.log.Warn("skipped an API object",
			NameField("object", objectName(kind, slim.GetNamespace(), slim.GetName())),
			ErrorField(FieldErrors(errs)))
	}
	return slim, nil
}

// slimMeta keeps the metadata a Snapshot needs: identity and labels.
func slimMeta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:              m.Name,
		Namespace:         m.Namespace,
		UID:               m.UID,
		ResourceVersion:   m.ResourceVersion,
		Labels:            m.Labels,
		CreationTimestamp: m.CreationTimestamp,
		DeletionTimestamp: m.DeletionTimestamp,
	}
}

func slimNamespace(ns *corev1.Namespace) *corev1.Namespace {
	return &corev1.Namespace{
		TypeMeta:   ns.TypeMeta,
		ObjectMeta: slimMeta(&ns.ObjectMeta),
		Status:     corev1.NamespaceStatus{Phase: ns.Status.Phase},
	}
}

func slimPod(p *corev1.Pod) *corev1.Pod {
	slimContainers := func(cs []corev1.Container) []corev1.Container {
		if cs == nil {
			return nil
		}
		out := make([]corev1.Container, len(cs))
		for i, c := range cs {
			out[i] = corev1.Container{Name: c.Name, Ports: c.Ports, RestartPolicy: c.RestartPolicy}
		}
		return out
	}
	return &corev1.Pod{
		TypeMeta:   p.TypeMeta,
		ObjectMeta: slimMeta(&p.ObjectMeta),
		Spec: corev1.PodSpec{
			NodeName:       p.Spec.NodeName,
			HostNetwork:    p.Spec.HostNetwork,
			Containers:     slimContainers(p.Spec.Containers),
			InitContainers: slimContainers(p.Spec.InitContainers),
		},
		Status: corev1.PodStatus{
			Phase:  p.Status.Phase,
			PodIP:  p.Status.PodIP,
			PodIPs: p.Status.PodIPs,
		},
	}
}

func slimNode(n *corev1.Node) *corev1.Node {
	var addrs []corev1.NodeAddress
	for _, a := range n.Status.Addresses {
		if isIPAddressType(a.Type) {
			addrs = append(addrs, a)
		}
	}
	return &corev1.Node{
		TypeMeta:   n.TypeMeta,
		ObjectMeta: slimMeta(&n.ObjectMeta),
		Spec:       corev1.NodeSpec{PodCIDR: n.Spec.PodCIDR, PodCIDRs: n.Spec.PodCIDRs},
		Status:     corev1.NodeStatus{Addresses: addrs},
	}
}

// equalIgnoringVersion compares two transformed objects of one kind,
// ignoring metadata.resourceVersion.
func equalIgnoringVersion(a, b any) bool {
	switch a := a.(type) {
	case *corev1.Namespace:
		b, ok := b.(*corev1.Namespace)
		return ok && equality.Semantic.DeepEqual(a.Labels, b.Labels) && a.Status.Phase == b.Status.Phase
	case *corev1.Pod:
		b, ok := b.(*corev1.Pod)
		return ok && equality.Semantic.DeepEqual(a.Labels, b.Labels) &&
			equality.Semantic.DeepEqual(a.Spec, b.Spec) && equality.Semantic.DeepEqual(a.Status, b.Status)
	case *corev1.Node:
		b, ok := b.(*corev1.Node)
		return ok && equality.Semantic.DeepEqual(a.Labels, b.Labels) &&
			equality.Semantic.DeepEqual(a.Spec, b.Spec) && equality.Semantic.DeepEqual(a.Status, b.Status)
	case *networkingv1.NetworkPolicy:
		b, ok := b.(*networkingv1.NetworkPolicy)
		return ok && equality.Semantic.DeepEqual(a.Labels, b.Labels) && equality.Semantic.DeepEqual(a.Spec, b.Spec)
	}
	return false
}

// NewClient returns a clientset for kubeconfig, a kubeconfig file path, or
// for the in-cluster configuration (the pod's service account) when
// kubeconfig is empty.
func NewClient(kubeconfig, userAgent string) (kubernetes.Interface, error) {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = userAgent
	// Informers list and watch; the defaults (5 qps, burst 10) only slow
	// the first list of four resources after a restart.
	cfg.QPS, cfg.Burst = 20, 40
	return kubernetes.NewForConfig(cfg)
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster config: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}

func objectName(kind, namespace, name string) string {
	if namespace == "" {
		return kind + " " + name
	}
	return kind + " " + namespace + "/" + name
}
