package k8s

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/watchlist"
)

// An Informers follows the API server through client-go shared informers on
// Pods, Namespaces, NetworkPolicies and Nodes, and builds Snapshots from
// their caches.
//
// The caches are the state: a watch that breaks leaves them as they were (so
// the enforcer keeps enforcing the last state while the API server is away),
// and a relist replaces them as a whole, with a delete event for everything
// that disappeared meanwhile, so a Snapshot built from them after a relist
// neither loses nor duplicates an object.
//
// Health says whether the caches follow the API server: see Health and
// the link type for how a failing and a recovered connection are told.
type Informers struct {
	log     *zap.Logger
	server  string                      // the API server's URL, for messages
	infs    []cache.SharedIndexInformer // namespaces, pods, nodes, policies
	changed chan struct{}               // capacity 1: "something changed since the last Snapshot"

	mu      sync.Mutex
	invalid map[types.UID]bool // objects the API server accepted but Admit rejects

	health health
}

// InformerOptions configures NewInformers.
type InformerOptions struct {
	// Resync, when not zero, replays every cached object to the handlers
	// at that period. Not needed for correctness (the watch delivers every
	// change); zero disables it.
	Resync time.Duration
	// Log receives list and watch errors and skipped objects; zap.NewNop
	// when nil.
	Log *zap.Logger
	// Server is the API server's URL, named in Health's errors and in the
	// log; taken from the client when it is a *kubernetes.Clientset.
	Server string
}

// NewInformers sets up the informers on client. Nothing is listed or
// watched until Start.
func NewInformers(client kubernetes.Interface, opts InformerOptions) *Informers {
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.Server == "" {
		opts.Server = serverOf(client)
	}
	in := &Informers{
		log:     opts.Log,
		server:  opts.Server,
		changed: make(chan struct{}, 1),
		invalid: map[types.UID]bool{},
	}
	in.health.changed = make(chan struct{})
	// Each informer lists and watches through a link, which tells Health
	// how its requests fare; the reflectors behind the informers do not
	// say (see link).
	noWatchList := watchlist.DoesClientNotSupportWatchListSemantics(client)
	core, netv1 := client.CoreV1(), client.NetworkingV1()
	links := []*link{ // in the order of resources
		{list: listFunc(core.Namespaces().List), watch: core.Namespaces().Watch},
		{list: listFunc(core.Pods("").List), watch: core.Pods("").Watch},
		{list: listFunc(core.Nodes().List), watch: core.Nodes().Watch},
		{list: listFunc(netv1.NetworkPolicies("").List), watch: netv1.NetworkPolicies("").Watch},
	}
	objs := []runtime.Object{&corev1.Namespace{}, &corev1.Pod{}, &corev1.Node{}, &networkingv1.NetworkPolicy{}}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { in.notify() },
		UpdateFunc: in.onUpdate,
		DeleteFunc: in.onDelete,
	}
	for i, l := range links {
		l.in, l.resource, l.noWatchList = in, resources[i], noWatchList
		inf := cache.NewSharedIndexInformerWithOptions(l, objs[i], cache.SharedIndexInformerOptions{
			ResyncPeriod: opts.Resync,
			Indexers:     cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		})
		// These error only once the informer has started; it has not.
		_ = inf.SetTransform(in.transform)
		_, _ = inf.AddEventHandler(handler)
		_ = inf.SetWatchErrorHandlerWithContext(in.watchError)
		in.infs = append(in.infs, inf)
	}
	return in
}

// resources are what the informers follow, in the order of Informers.infs.
var resources = []string{"namespaces", "pods", "nodes", "networkpolicies"}

// listFunc adapts a typed client's List to cache.ListWithContextFunc.
func listFunc[L runtime.Object](list func(context.Context, metav1.ListOptions) (L, error)) cache.ListWithContextFunc {
	return func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return list(ctx, opts)
	}
}

// serverOf returns the URL of the API server client talks to, or "" when
// it cannot tell (a fake clientset).
func serverOf(client kubernetes.Interface) string {
	cs, ok := client.(*kubernetes.Clientset)
	if !ok || cs == nil {
		return ""
	}
	rc, ok := cs.CoreV1().RESTClient().(*rest.RESTClient)
	if !ok || rc == nil {
		return ""
	}
	u := rc.Get().URL()
	return u.Scheme + "://" + u.Host
}

// Start starts the informers and waits until every cache holds a complete
// list, or ctx ends (then it returns an error and the informers stop with
// ctx). The informers run until ctx ends.
func (in *Informers) Start(ctx context.Context) error {
	for _, inf := range in.infs {
		go inf.RunWithContext(ctx)
	}
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

// Watch sends a Snapshot now and another after changes, until ctx ends;
// then it closes the channel. Call it after Start. It does not wait for
// more changes: the receiver coalesces (enforcer.Syncer.Run, the one
// place that does). A Snapshot is built when the previous one was taken
// and something changed since, so a receiver that takes none while it
// waits costs one Snapshot per wait, and misses nothing: the next one it
// takes is built after every change it has not seen.
func (in *Informers) Watch(ctx context.Context) <-chan *Snapshot {
	out := make(chan *Snapshot)
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

// watchError replaces client-go's default handler, which would print each
// failed attempt to klog's stderr: the links have already seen the error
// (a list or watch that failed passes through one), and Health and the
// log report it with backoff.
func (in *Informers) watchError(_ context.Context, r *cache.Reflector, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	in.log.Debug("list and watch ended with an error; the reflector retries with backoff",
		zap.String("resource", r.TypeDescription()), ErrorField(err))
}

// A link is the ListerWatcher of one informer: it lists and watches
// through the clientset and tells Health how each request fared.
//
// # Why here, and not in a watch error handler
//
// The reflector behind an informer calls its WatchErrorHandler only when a
// whole list-and-watch round returns an error. While the API server refuses
// connections it never does: a watch that fails with "connection refused"
// is retried inside the round, with backoff, and so is a streaming list
// (WatchListClient, on by default since client-go v0.35); client-go logs
// those retries at klog V(2)-V(4). Nor is there any call, or field, that
// says the caches are current again: HasSynced stays true after the first
// list, and LastSyncResourceVersion need not move when nothing changed.
// The reflector's requests all pass through its ListerWatcher, so that is
// where a failure is seen at once, and so is the end of it.
//
// # When a link has recovered
//
// A link that failed is healthy again when the API server has given it
// what it needs to be current, with nothing missed in between:
//
//   - a list that returned its last page (the reflector replaces the cache
//     with it);
//   - a streaming list (sendInitialEvents) that reached its
//     "k8s.io/initial-events-end" bookmark (likewise);
//   - a watch from the last resource version that delivered an event,
//     bookmarks included: the API server serves it only if it still holds
//     every change since that version, so the cache misses nothing. When
//     nothing changes, the first such event is a bookmark, which the API
//     server sends about once a minute.
//
// Merely reaching the API server again (its /readyz, a probe of our own)
// is not enough: the reflectors retry on their own backoff, up to a minute
// apart, and until each has relisted its cache is as stale as during the
// outage. An expired resource version (410 Gone, routine after the API
// server restarts or etcd compacts) neither fails nor heals a link: the
// reflector relists at once.
type link struct {
	in          *Informers
	resource    string // "pods"
	list        cache.ListWithContextFunc
	watch       cache.WatchFuncWithContext
	noWatchList bool // a fake clientset: see watchlist.DoesClientNotSupportWatchListSemantics
}

// List implements cache.Lister (the reflector calls ListWithContext).
func (l *link) List(opts metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), opts)
}

// Watch implements cache.Watcher (the reflector calls WatchWithContext).
func (l *link) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return l.WatchWithContext(context.Background(), opts)
}

func (l *link) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	obj, err := l.list(ctx, opts)
	if err != nil {
		l.failed(ctx, err)
		return obj, err
	}
	// A paginated list is complete with its last page.
	if m, merr := meta.ListAccessor(obj); merr == nil && m.GetContinue() == "" {
		l.in.health.recovered(l.in, l.resource)
	}
	return obj, nil
}

func (l *link) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := l.watch(ctx, opts)
	if err != nil {
		l.failed(ctx, err)
		return w, err
	}
	streamingList := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	return newObservedWatch(w, func(ev watch.Event) {
		switch ev.Type {
		case watch.Error:
			if err := apierrors.FromObject(ev.Object); !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
				l.failed(ctx, err)
			}
		case watch.Bookmark:
			if m, err := meta.Accessor(ev.Object); err == nil && (!streamingList || m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true") {
				l.in.health.recovered(l.in, l.resource)
			}
		default:
			if !streamingList {
				l.in.health.recovered(l.in, l.resource)
			}
		}
	}), nil
}

// IsWatchListSemanticsUnSupported tells the reflector whether the client
// can stream lists, as client-go's own informers do.
func (l *link) IsWatchListSemanticsUnSupported() bool { return l.noWatchList }

func (l *link) failed(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return // stopping
	}
	l.in.health.failed(l.in, l.resource, err)
}

// An observedWatch passes the events of a watch on, calling see with each
// before the reflector gets it.
type observedWatch struct {
	w    watch.Interface
	out  chan watch.Event
	stop chan struct{}
	once sync.Once
}

func newObservedWatch(w watch.Interface, see func(watch.Event)) watch.Interface {
	o := &observedWatch{w: w, out: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(o.out)
		for {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				see(ev)
				select {
				case o.out <- ev:
				case <-o.stop:
					return
				}
			case <-o.stop:
				return
			}
		}
	}()
	return o
}

func (o *observedWatch) ResultChan() <-chan watch.Event { return o.out }

func (o *observedWatch) Stop() {
	o.once.Do(func() {
		close(o.stop)
		o.w.Stop()
	})
}

// First and longest interval between two log entries of one outage: the
// reflectors retry every second or so at first, then every 30 to 60 s,
// four of them, and a line per attempt would bury everything else.
const (
	firstLogRepeat = 10 * time.Second
	maxLogRepeat   = 5 * time.Minute
)

// health is the state of the links, behind Informers.Health.
type health struct {
	mu       sync.Mutex
	failing  map[string]error // resource → its last error, while failing
	last     error            // the latest error of the outage
	since    time.Time        // when the outage began
	failures int              // failed requests in the outage
	logged   time.Time        // last log entry of the outage
	repeat   time.Duration    // until the next one
	err      error            // what Health returns
	changed  chan struct{}    // closed, and replaced, when err changes
}

// Health returns why the caches may not hold the API server's current
// content, nil when they do, and a channel that is closed the next time
// that changes. The error names the API server, the resources whose list
// or watch fails, since when, and the last error, e.g.
//
//	cannot list and watch pods, nodes at the API server https://10.0.0.1:6443 since 2026-01-02T15:04:05Z (7 failed requests); the caches keep the state last listed: Get "https://10.0.0.1:6443/api/v1/pods?...": dial tcp 10.0.0.1:6443: connect: connection refused
//
// It is nil again once every failed link has recovered (see link). The
// caches, and the Snapshots, keep the state last listed meanwhile.
func (in *Informers) Health() (changed <-chan struct{}, err error) {
	in.health.mu.Lock()
	defer in.health.mu.Unlock()
	return in.health.changed, in.health.err
}

func (h *health) failed(in *Informers, resource string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if h.failing == nil {
		h.failing = map[string]error{}
	}
	first := len(h.failing) == 0
	h.failing[resource] = err
	h.last = err
	h.failures++
	switch {
	case first:
		h.since, h.logged, h.repeat = now, now, firstLogRepeat
		in.log.Error("cannot list and watch at the API server; enforcing the state last listed while the informers retry with backoff",
			zap.String("server", in.server), zap.String("resource", resource), ErrorField(err))
	case now.Sub(h.logged) >= h.repeat:
		h.logged, h.repeat = now, min(2*h.repeat, maxLogRepeat)
		in.log.Error("still cannot list and watch at the API server; enforcing the state last listed",
			zap.String("server", in.server), zap.Strings("resources", h.failingLocked()),
			zap.Duration("for", now.Sub(h.since).Round(time.Second)), zap.Int("failures", h.failures), ErrorField(err))
	}
	h.setLocked(in)
}

func (h *health) recovered(in *Informers, resource string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.failing[resource]; !ok {
		return
	}
	delete(h.failing, resource)
	if len(h.failing) == 0 {
		in.log.Info("the API server answers again and every cache has caught up",
			zap.String("server", in.server), zap.Duration("after", time.Since(h.since).Round(time.Second)), zap.Int("failures", h.failures))
		h.last, h.failures = nil, 0
	}
	h.setLocked(in)
}

// failingLocked returns the failing resources in the informers' order.
func (h *health) failingLocked() []string {
	var out []string
	for _, r := range resources {
		if _, ok := h.failing[r]; ok {
			out = append(out, r)
		}
	}
	return out
}

func (h *health) setLocked(in *Informers) {
	var err error
	if len(h.failing) > 0 {
		server := in.server
		if server == "" {
			server = "(unknown)"
		}
		err = fmt.Errorf("cannot list and watch %s at the API server %s since %s (%d failed requests); the caches keep the state last listed: %w",
			strings.Join(h.failingLocked(), ", "), server, h.since.UTC().Format(time.RFC3339), h.failures, h.last)
	}
	if errText(err) == errText(h.err) {
		return
	}
	h.err = err
	close(h.changed)
	h.changed = make(chan struct{})
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
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

// slimNamespace keeps, of the annotations, only the one that turns flow
// logs on (FlowLogAnnotation).
func slimNamespace(ns *corev1.Namespace) *corev1.Namespace {
	slim := &corev1.Namespace{
		TypeMeta:   ns.TypeMeta,
		ObjectMeta: slimMeta(&ns.ObjectMeta),
		Status:     corev1.NamespaceStatus{Phase: ns.Status.Phase},
	}
	if v, ok := ns.Annotations[FlowLogAnnotation]; ok {
		slim.Annotations = map[string]string{FlowLogAnnotation: v}
	}
	return slim
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
		return ok && equality.Semantic.DeepEqual(a.Labels, b.Labels) && a.Status.Phase == b.Status.Phase &&
			a.Annotations[FlowLogAnnotation] == b.Annotations[FlowLogAnnotation]
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
