package k8s

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
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
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/watchlist"
	policyv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
	policyclient "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"
)

// An Informers follows the API server through client-go shared informers on
// Pods, Namespaces, NetworkPolicies and Nodes, and ClusterNetworkPolicies
// while the API server serves them, and builds Snapshots from their caches.
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
	log    *zap.Logger
	server string                      // the API server's URL, for messages
	infs   []cache.SharedIndexInformer // namespaces, pods, nodes, policies
	// handled[i] reports whether infs[i]'s handlers have seen its first
	// list (the registration's HasSynced): handlers run behind the cache,
	// and a first Snapshot taken before they caught up saw every later
	// notification of the list as a change to patch in.
	handled []func() bool
	changed chan struct{} // capacity 1: "something changed since the last Snapshot"

	mu sync.Mutex
	// invalid holds the transformed objects the API server accepted but
	// Admit rejects. It is keyed by the object the cache stores, a version,
	// not by UID: an invalid version followed by a valid one is transformed
	// (when queued) before the invalid one is stored, and a flag per UID
	// would pass the stored invalid version as valid meanwhile.
	invalid map[any]bool
	// pending holds, per informer of infs, the cache keys of the objects
	// its events changed since the last Snapshot. The next Snapshot
	// patches last's sorted lists with what the cache holds for them now
	// instead of listing and sorting every object again: an event costs a
	// copy of its kind's list, not a sort of every kind (10k pods sorted
	// again for a policy edit was most of a Snapshot).
	pending [4]map[string]bool
	last    *Snapshot

	health health
	resync time.Duration

	// ClusterNetworkPolicies, a CRD that may be missing: see
	// followClusterPolicies.
	policy    policyclient.Interface // nil: not followed
	discovery discovery.DiscoveryInterface
	cnpCheck  time.Duration
	cnpMu     sync.Mutex
	cnp       *cnpInformer // nil while the API server does not serve them
}

// A cnpInformer is the informer on ClusterNetworkPolicies while they are
// served, and how to stop it.
type cnpInformer struct {
	inf  cache.SharedIndexInformer
	stop context.CancelFunc
	done chan struct{}
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
	// Policy is the client of policy.networking.k8s.io; nil leaves
	// ClusterNetworkPolicies out (NewPolicyClient makes one).
	Policy policyclient.Interface
	// Slim is the client pods and nodes are listed and watched with; nil
	// takes the client's. NewSlimClient makes one that decodes only what
	// the daemon keeps of them.
	Slim corev1client.CoreV1Interface
	// ClusterPolicyCheck is how often discovery is asked whether the API
	// server serves ClusterNetworkPolicies (the CRD installed or removed);
	// 30 seconds when zero.
	ClusterPolicyCheck time.Duration
}

// DefaultClusterPolicyCheck is InformerOptions.ClusterPolicyCheck when
// zero: a CRD installed later is followed within this long.
const DefaultClusterPolicyCheck = 30 * time.Second

// NewInformers sets up the informers on client. Nothing is listed or
// watched until Start.
func NewInformers(client kubernetes.Interface, opts InformerOptions) *Informers {
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.Server == "" {
		opts.Server = serverOf(client)
	}
	if opts.ClusterPolicyCheck <= 0 {
		opts.ClusterPolicyCheck = DefaultClusterPolicyCheck
	}
	in := &Informers{
		log:       opts.Log,
		server:    opts.Server,
		changed:   make(chan struct{}, 1),
		invalid:   map[any]bool{},
		policy:    opts.Policy,
		discovery: client.Discovery(),
		cnpCheck:  opts.ClusterPolicyCheck,
	}
	in.health.changed = make(chan struct{})
	// Each informer lists and watches through a link, which tells Health
	// how its requests fare; the reflectors behind the informers do not
	// say (see link).
	noWatchList := watchlist.DoesClientNotSupportWatchListSemantics(client)
	core, netv1 := client.CoreV1(), client.NetworkingV1()
	slim := core
	if opts.Slim != nil {
		slim = opts.Slim
	}
	links := []*link{ // in the order of resources
		{list: listFunc(core.Namespaces().List), watch: core.Namespaces().Watch},
		{list: listFunc(slim.Pods("").List), watch: slim.Pods("").Watch},
		{list: listFunc(slim.Nodes().List), watch: slim.Nodes().Watch},
		{list: listFunc(netv1.NetworkPolicies("").List), watch: netv1.NetworkPolicies("").Watch},
	}
	objs := []runtime.Object{&corev1.Namespace{}, &corev1.Pod{}, &corev1.Node{}, &networkingv1.NetworkPolicy{}}
	if opts.Slim != nil {
		// The slim client's watch events carry a pod's record (*Pod) where
		// they can, a corev1.Pod where the transform must see one (see
		// decodePodRecord), so the reflector must not drop either as of
		// the wrong type: no example object. transform takes both, and a
		// Snapshot reads only records. The link drops the other kinds, as
		// the reflector does given an example object.
		objs[1] = nil
		links[1].accepts = func(o runtime.Object) bool {
			switch o.(type) {
			case *corev1.Pod, *Pod:
				return true
			}
			return false
		}
	}
	for i, l := range links {
		l.in, l.resource, l.noWatchList = in, resources[i], noWatchList
		inf, handled := in.newInformer(l, objs[i], opts.Resync, i)
		in.infs = append(in.infs, inf)
		in.handled = append(in.handled, handled)
	}
	in.resync = opts.Resync
	return in
}

// newInformer returns an informer that lists and watches through l, with
// the transform, handlers and error handler every informer has.
//
// kind is its index in infs, whose list its events make dirty; -1 for the
// ClusterNetworkPolicy informer, whose list is always rebuilt.
// handled reports whether the handlers have seen the first list.
func (in *Informers) newInformer(l *link, obj runtime.Object, resync time.Duration, kind int) (inf cache.SharedIndexInformer, handled func() bool) {
	// No indexers: nothing looks objects up by anything but their key,
	// and a namespace index costs a key string and a set entry per pod.
	inf = cache.NewSharedIndexInformerWithOptions(l, obj, cache.SharedIndexInformerOptions{
		ResyncPeriod:      resync,
		ObjectDescription: l.resource, // what client-go's logs call it, with or without an example object
	})
	// These error only once the informer has started; it has not.
	_ = inf.SetTransform(in.transform)
	reg, _ := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			in.markPending(kind, obj)
			in.notify()
		},
		UpdateFunc: func(oldObj, newObj any) {
			if oldObj != newObj {
				in.forget(oldObj) // no longer stored
			}
			// A resync (the same object replayed) or an update of a field
			// the compiler does not read (transform drops those: a pod's
			// conditions, a node's heartbeat) compares equal and costs
			// nothing.
			if !equalIgnoringVersion(oldObj, newObj) {
				in.markPending(kind, newObj)
				in.notify()
			}
		},
		DeleteFunc: func(obj any) {
			in.forget(obj)
			in.markPending(kind, obj)
			in.notify()
		},
	})
	_ = inf.SetWatchErrorHandlerWithContext(in.watchError)
	return inf, reg.HasSynced
}

// resources are what the informers follow, in the order of Informers.infs,
// then the ClusterNetworkPolicies.
var resources = []string{"namespaces", "pods", "nodes", "networkpolicies", clusterPolicyResource}

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
//
// ClusterNetworkPolicies are waited for only when the API server serves
// them: Start first asks discovery (again each second while it cannot
// answer), and when the CRD is not installed, logs so once and goes on
// without them. See followClusterPolicies for what happens later.
func (in *Informers) Start(ctx context.Context) error {
	for _, inf := range in.infs {
		go inf.RunWithContext(ctx)
	}
	var synced []cache.InformerSynced
	for i, inf := range in.infs {
		synced = append(synced, inf.HasSynced, in.handled[i])
	}
	if in.policy != nil {
		served, err := in.waitServed(ctx)
		if err != nil {
			return fmt.Errorf("informer caches not synced: %w", err)
		}
		if served {
			synced = append(synced, in.startClusterPolicies(ctx).HasSynced)
		} else {
			in.log.Warn("the API server does not serve ClusterNetworkPolicy (its CRD is not installed): enforcing without it, and asking again periodically",
				zap.String("server", in.server), zap.String("resource", clusterPolicyGroupVersion+"/"+clusterPolicyResource), zap.Duration("every", in.cnpCheck))
		}
		go in.followClusterPolicies(ctx)
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
	if c := in.clusterPolicies(); c != nil && !c.inf.HasSynced() {
		return false
	}
	return true
}

// clusterPolicyGroupVersion is the version the informer follows.
const clusterPolicyGroupVersion = ClusterPolicyGroup + "/v1beta1"

// clusterPoliciesServed asks discovery whether the API server serves
// ClusterNetworkPolicies (v1beta1). A group version it does not know is
// an answer (false), any other error none.
func (in *Informers) clusterPoliciesServed() (bool, error) {
	list, err := in.discovery.ServerResourcesForGroupVersion(clusterPolicyGroupVersion)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, r := range list.APIResources {
		if r.Name == clusterPolicyResource {
			return true, nil
		}
	}
	return false, nil
}

// waitServed asks clusterPoliciesServed until it answers, or ctx ends.
func (in *Informers) waitServed(ctx context.Context) (bool, error) {
	for {
		served, err := in.clusterPoliciesServed()
		if err == nil {
			return served, nil
		}
		in.log.Debug("cannot ask the API server whether it serves ClusterNetworkPolicy; asking again", zap.String("server", in.server), ErrorField(err))
		select {
		case <-ctx.Done():
			return false, context.Cause(ctx)
		case <-time.After(time.Second):
		}
	}
}

// clusterPolicies returns the ClusterNetworkPolicy informer, nil while
// they are not served.
func (in *Informers) clusterPolicies() *cnpInformer {
	in.cnpMu.Lock()
	defer in.cnpMu.Unlock()
	return in.cnp
}

// startClusterPolicies starts an informer on ClusterNetworkPolicies, which
// runs until ctx ends or stopClusterPolicies.
func (in *Informers) startClusterPolicies(ctx context.Context) cache.SharedIndexInformer {
	cnps := in.policy.PolicyV1beta1().ClusterNetworkPolicies()
	l := &link{in: in, resource: clusterPolicyResource, list: listFunc(cnps.List), watch: cnps.Watch,
		noWatchList: watchlist.DoesClientNotSupportWatchListSemantics(in.policy)}
	inf, _ := in.newInformer(l, &policyv1beta1.ClusterNetworkPolicy{}, in.resync, -1)
	ctx, stop := context.WithCancel(ctx)
	c := &cnpInformer{inf: inf, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		inf.RunWithContext(ctx)
	}()
	in.cnpMu.Lock()
	in.cnp = c
	in.cnpMu.Unlock()
	return inf
}

// stopClusterPolicies stops the ClusterNetworkPolicy informer and drops
// its cache: the API server no longer serves them, so none exists (the
// API server deletes every one before it removes their CRD).
func (in *Informers) stopClusterPolicies() {
	in.cnpMu.Lock()
	c := in.cnp
	in.cnp = nil
	in.cnpMu.Unlock()
	if c == nil {
		return
	}
	c.stop()
	<-c.done
	in.mu.Lock()
	for _, obj := range c.inf.GetStore().List() {
		delete(in.invalid, obj)
	}
	in.mu.Unlock()
	// Its list and watch fail with 404 until it is stopped: that is no
	// outage of the API server.
	in.health.recovered(in, clusterPolicyResource)
	in.notify()
}

// followClusterPolicies asks discovery every cnpCheck whether the API
// server serves ClusterNetworkPolicies, until ctx ends: once their CRD is
// installed it starts the informer (the next Snapshot after its first
// list holds them), and once the CRD is removed it stops it and drops the
// cache, so that the 404s of its list and watch do not count as an outage.
// Each change is logged once. While discovery cannot answer (the API
// server away) nothing changes; the links report the outage.
//
// Why discovery, and not the reflector's error handler: a reflector whose
// resource is not served retries its list with backoff forever, and
// Health would call that an outage; and a resource that appears is never
// announced to a reflector that does not exist. Discovery says both, for
// one cheap request per period.
func (in *Informers) followClusterPolicies(ctx context.Context) {
	t := time.NewTicker(in.cnpCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		served, err := in.clusterPoliciesServed()
		if err != nil {
			in.log.Debug("cannot ask the API server whether it serves ClusterNetworkPolicy", zap.String("server", in.server), ErrorField(err))
			continue
		}
		running := in.clusterPolicies() != nil
		switch {
		case served && !running:
			in.log.Info("the API server serves ClusterNetworkPolicy now: following it",
				zap.String("server", in.server), zap.String("resource", clusterPolicyGroupVersion+"/"+clusterPolicyResource))
			inf := in.startClusterPolicies(ctx)
			go func() {
				if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
					in.notify()
				}
			}()
		case !served && running:
			in.log.Warn("the API server no longer serves ClusterNetworkPolicy (its CRD was removed): enforcing without it",
				zap.String("server", in.server), zap.String("resource", clusterPolicyGroupVersion+"/"+clusterPolicyResource))
			in.stopClusterPolicies()
		}
	}
}

// Snapshot builds a Snapshot of the caches as they are now. Objects are
// shared with the caches, which never edit an object they hold (an update
// replaces it), so a Snapshot is immutable without copying.
func (in *Informers) Snapshot() *Snapshot {
	// Before in.mu: HasSynced takes the lock of the informer's queue, under
	// which transform takes in.mu.
	cnp := in.clusterPolicies()
	if cnp != nil && !cnp.inf.HasSynced() {
		cnp = nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	// The first Snapshot lists every informer; later ones patch the last
	// one's lists with the objects events changed (see pending).
	snap := &Snapshot{}
	if last := in.last; last != nil {
		snap.Namespaces = patchList(last.Namespaces, in.pending[0], in.infs[0].GetStore(), in.invalid)
		snap.Pods = patchList(last.Pods, in.pending[1], in.infs[1].GetStore(), in.invalid)
		snap.Nodes = patchList(last.Nodes, in.pending[2], in.infs[2].GetStore(), in.invalid)
		snap.Policies = patchList(last.Policies, in.pending[3], in.infs[3].GetStore(), in.invalid)
	}
	in.pending = [4]map[string]bool{}
	if in.last == nil {
		for _, obj := range in.infs[0].GetStore().List() {
			if o, ok := obj.(*corev1.Namespace); ok && !in.invalid[obj] {
				snap.Namespaces = append(snap.Namespaces, o)
			}
		}
		sortByName(snap.Namespaces)
		for _, obj := range in.infs[1].GetStore().List() {
			if o, ok := obj.(*Pod); ok && !in.invalid[obj] {
				snap.Pods = append(snap.Pods, o)
			}
		}
		sortByName(snap.Pods)
		for _, obj := range in.infs[2].GetStore().List() {
			if o, ok := obj.(*corev1.Node); ok && !in.invalid[obj] {
				snap.Nodes = append(snap.Nodes, o)
			}
		}
		sortByName(snap.Nodes)
		for _, obj := range in.infs[3].GetStore().List() {
			if o, ok := obj.(*networkingv1.NetworkPolicy); ok && !in.invalid[obj] {
				snap.Policies = append(snap.Policies, o)
			}
		}
		sortByName(snap.Policies)
	}
	// Only a complete list: an informer started after the others (the CRD
	// installed later) is left out until its first list is in.
	if cnp != nil {
		for _, obj := range cnp.inf.GetStore().List() {
			if o, ok := obj.(*policyv1beta1.ClusterNetworkPolicy); ok && !in.invalid[obj] {
				snap.ClusterPolicies = append(snap.ClusterPolicies, o)
			}
		}
	}
	sortByName(snap.ClusterPolicies)
	in.last = snap
	return snap
}

// markPending notes an object an event of informer kind changed, or
// deleted (see pending).
//
// Until the first Snapshot there is nothing to patch: that Snapshot lists
// every cache, and the cache already holds what an event notifies (client-go
// stores an object before it hands the event to the handlers). Noting the
// first list's 150k pods anyway cost a key string and a map entry each,
// alive through the list and thrown away by that Snapshot.
func (in *Informers) markPending(kind int, obj any) {
	if kind < 0 {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.last == nil {
		return
	}
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	if in.pending[kind] == nil {
		in.pending[kind] = map[string]bool{}
	}
	in.pending[kind][key] = true
}

// patchList returns list, sorted by namespace and name, with each pending
// object in place of the one of its name (left out when deleted or
// invalid). list itself, which an earlier Snapshot holds, is not changed.
func patchList[T metav1.Object](list []T, changed map[string]bool, store cache.Store, invalid map[any]bool) []T {
	if len(changed) == 0 {
		return list
	}
	// The changed objects in the list's order, then one merge: a burst
	// (a rollout, or the notifications of a first list) changes thousands
	// of a list of 150k pods, and an insert or delete per change moved
	// the whole list each time.
	type update struct {
		key [2]string
		obj T
		in  bool // the cache holds it, valid: in the list
	}
	updates := make([]update, 0, len(changed))
	for key := range changed {
		ns, name, err := cache.SplitMetaNamespaceKey(key)
		if err != nil {
			continue // no key we made
		}
		u := update{key: [2]string{ns, name}}
		// What the cache holds now, judged by the validity recorded for
		// it: the same pair a full listing reads.
		obj, exists, err := store.GetByKey(key)
		if t, ok := obj.(T); err == nil && exists && ok && !invalid[obj] {
			u.obj, u.in = t, true
		}
		updates = append(updates, u)
	}
	slices.SortFunc(updates, func(a, b update) int {
		return cmp.Or(cmp.Compare(a.key[0], b.key[0]), cmp.Compare(a.key[1], b.key[1]))
	})
	cmpKey := func(o T, k [2]string) int {
		return cmp.Or(cmp.Compare(o.GetNamespace(), k[0]), cmp.Compare(o.GetName(), k[1]))
	}
	out := make([]T, 0, len(list)+len(updates))
	i := 0
	for _, u := range updates {
		for i < len(list) && cmpKey(list[i], u.key) < 0 {
			out = append(out, list[i])
			i++
		}
		if i < len(list) && cmpKey(list[i], u.key) == 0 {
			i++ // replaced, or gone
		}
		if u.in {
			out = append(out, u.obj)
		}
	}
	return append(out, list[i:]...)
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

// forget drops what invalid holds of an object the cache no longer
// stores: replaced by a newer version, or deleted.
func (in *Informers) forget(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	in.mu.Lock()
	delete(in.invalid, obj)
	in.mu.Unlock()
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
	// accepts, when set, is the check of an event's object type that the
	// reflector makes when its informer has an example object, for the
	// informer that has none (the slim pods, see NewInformers): an object
	// of another kind, named as a pod is, would otherwise replace or
	// delete that pod in the cache.
	accepts func(runtime.Object) bool
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
	return newObservedWatch(w, func(ev watch.Event) bool {
		if ev.Type != watch.Error && l.accepts != nil && !l.accepts(ev.Object) {
			l.in.log.Warn("dropped a watch event whose object is of another kind",
				zap.String("resource", l.resource), zap.String("event", string(ev.Type)), zap.String("type", fmt.Sprintf("%T", ev.Object)))
			return false
		}
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
		return true
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
// before the reflector gets it; an event see returns false for is dropped.
type observedWatch struct {
	w    watch.Interface
	out  chan watch.Event
	stop chan struct{}
	once sync.Once
}

func newObservedWatch(w watch.Interface, see func(watch.Event) bool) watch.Interface {
	o := &observedWatch{w: w, out: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(o.out)
		for {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				if !see(ev) {
					continue
				}
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
	// Every object is trimmed in place (see trimPod), so that a second
	// transform of it (a streamed list's objects are transformed into the
	// reflector's temporary store, then again into the queue) admits the
	// same object and marks no other one invalid.
	var slim interface {
		runtime.Object
		metav1.Object
	}
	var kind string
	switch o := obj.(type) {
	case *corev1.Namespace:
		trimNamespace(o)
		slim, kind = o, "Namespace"
	case *corev1.Pod:
		// Validated as the Pod it is, kept as the record the compiler
		// reads (see Pod).
		kind = "Pod"
		rec, errs := admitPod(o)
		in.admitted(kind, rec, errs)
		return rec, nil
	case *corev1.Node:
		trimNode(o)
		if unread := readNodeAddresses(o); len(unread) > 0 {
			in.log.Warn("left out node addresses that are not IP addresses",
				NameField("object", objectName("Node", "", o.Name)), zap.Strings("addresses", unread))
		}
		slim, kind = o, "Node"
	case *networkingv1.NetworkPolicy:
		kind = "NetworkPolicy"
		o.ManagedFields = nil
		o.Annotations = nil
		slim = o
	case *policyv1beta1.ClusterNetworkPolicy:
		kind = "ClusterNetworkPolicy"
		o.TypeMeta = metav1.TypeMeta{APIVersion: clusterPolicyGroupVersion, Kind: kind}
		o.ObjectMeta = slimMeta(&o.ObjectMeta)
		o.Status = policyv1beta1.ClusterNetworkPolicyStatus{}
		slim = o
	default:
		return obj, nil // a Pod record already (transform is idempotent)
	}
	errs := Admit(slim)
	in.admitted(kind, slim, errs)
	return slim, nil
}

// admitPod trims p (in place), admits it (Admit defaults and canonicalizes
// too) and returns its record, with what Admit found wrong. The slim
// decoder admits a pod it decodes this way too (decodePodRecord), so that
// a pod's record is the same by either road.
func admitPod(p *corev1.Pod) (*Pod, field.ErrorList) {
	trimPod(p)
	errs := Admit(p)
	return NewPod(p), errs
}

// admitted records what Admit found of obj, the very value the cache
// will store: an invalid one is marked, left out of Snapshots and logged.
func (in *Informers) admitted(kind string, obj metav1.Object, errs field.ErrorList) {
	if len(errs) == 0 {
		return
	}
	in.mu.Lock()
	in.invalid[obj] = true
	in.mu.Unlock()
	in.log.Warn("skipped an API object",
		NameField("object", objectName(kind, obj.GetNamespace(), obj.GetName())),
		ErrorField(FieldErrors(errs)))
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

// trimNamespace keeps, of the annotations, only the one that turns flow
// logs on (FlowLogAnnotation); in place (see trimPod).
func trimNamespace(ns *corev1.Namespace) {
	trimmed := corev1.Namespace{
		TypeMeta:   ns.TypeMeta,
		ObjectMeta: slimMeta(&ns.ObjectMeta),
		Status:     corev1.NamespaceStatus{Phase: ns.Status.Phase},
	}
	if v, ok := ns.Annotations[FlowLogAnnotation]; ok {
		trimmed.Annotations = map[string]string{FlowLogAnnotation: v}
	}
	*ns = trimmed
}

// trimPod clears p down to what a Pod record is made of (NewPod) and what
// its validation reads, in place: the transform owns the object it is
// given (client-go, since v1.27), and the record is what is kept, so a
// copy would be garbage at once (a corev1.Pod is 1,240 bytes before its
// containers, 150k of them at each start).
func trimPod(p *corev1.Pod) {
	for _, cs := range [][]corev1.Container{p.Spec.Containers, p.Spec.InitContainers} {
		for i, c := range cs {
			cs[i] = corev1.Container{Name: c.Name, Ports: c.Ports, RestartPolicy: c.RestartPolicy}
		}
	}
	trimmed := corev1.Pod{
		TypeMeta:   p.TypeMeta,
		ObjectMeta: slimMeta(&p.ObjectMeta),
		Spec: corev1.PodSpec{
			NodeName:       p.Spec.NodeName,
			HostNetwork:    p.Spec.HostNetwork,
			Containers:     p.Spec.Containers,
			InitContainers: p.Spec.InitContainers,
		},
		Status: corev1.PodStatus{
			Phase:  p.Status.Phase,
			PodIP:  p.Status.PodIP,
			PodIPs: p.Status.PodIPs,
		},
	}
	*p = trimmed
}

// readNodeAddresses makes a trimmed node's addresses ones ValidateNode
// accepts, and returns those it left out. The API server does not check
// status.addresses (a kubelet, a cloud controller or `kubectl patch
// --subresource=status` may write any text), so a node must not be
// refused whole for one of them: its labels, CIDRs and other addresses
// are what ClusterNetworkPolicy node peers and --default-deny-unknown
// read. They are read as Kubernetes' own components have read them
// (k8s.io/utils/net's ParseIPSloppy, Go 1.16's rules): an
// IPv4 address with leading zeros is decimal (010.0.0.8 is 10.0.0.8), an
// IPv4-mapped address is its IPv4 address, and a zone is dropped. What
// is not an address (a DNS name) is left out.
func readNodeAddresses(n *corev1.Node) (unread []string) {
	kept := n.Status.Addresses[:0]
	for _, a := range n.Status.Addresses {
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			var ok bool
			if ip, ok = parseIPv4LeadingZeros(a.Address); !ok {
				unread = append(unread, a.Address)
				continue
			}
			a.Address = ip.String()
		}
		if ip.Is4In6() || ip.Zone() != "" {
			a.Address = ip.Unmap().WithZone("").String()
		}
		kept = append(kept, a) // canonicalized by normalizeNode
	}
	if len(kept) == 0 {
		kept = nil
	}
	n.Status.Addresses = kept
	return unread
}

// parseIPv4LeadingZeros reads a dotted IPv4 address whose parts may have
// leading zeros, each part decimal.
func parseIPv4LeadingZeros(s string) (netip.Addr, bool) {
	var b [4]byte
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return netip.Addr{}, false
	}
	for i, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return netip.Addr{}, false
		}
		v, err := strconv.Atoi(p)
		if err != nil || v > 255 {
			return netip.Addr{}, false
		}
		b[i] = byte(v)
	}
	return netip.AddrFrom4(b), true
}

// trimNode keeps a node's identity, CIDRs and IP addresses; in place (see
// trimPod).
func trimNode(n *corev1.Node) {
	addrs := n.Status.Addresses[:0]
	for _, a := range n.Status.Addresses {
		if isIPAddressType(a.Type) {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		addrs = nil
	}
	trimmed := corev1.Node{
		TypeMeta:   n.TypeMeta,
		ObjectMeta: slimMeta(&n.ObjectMeta),
		Spec:       corev1.NodeSpec{PodCIDR: n.Spec.PodCIDR, PodCIDRs: n.Spec.PodCIDRs},
		Status:     corev1.NodeStatus{Addresses: addrs},
	}
	*n = trimmed
}

// equalIgnoringVersion compares two transformed objects of one kind,
// ignoring metadata.resourceVersion: their identity (sameIdentity) and the
// fields the compiler reads.
func equalIgnoringVersion(a, b any) bool {
	ma, okA := a.(metav1.Object)
	mb, okB := b.(metav1.Object)
	if !okA || !okB || !sameIdentity(ma, mb) {
		return false
	}
	switch a := a.(type) {
	case *corev1.Namespace:
		b, ok := b.(*corev1.Namespace)
		return ok && equality.Semantic.DeepEqual(a.Labels, b.Labels) && a.Status.Phase == b.Status.Phase &&
			a.Annotations[FlowLogAnnotation] == b.Annotations[FlowLogAnnotation]
	case *Pod:
		b, ok := b.(*Pod)
		return ok && equality.Semantic.DeepEqual(a.Labels, b.Labels) &&
			equality.Semantic.DeepEqual(a.Spec, b.Spec) && equality.Semantic.DeepEqual(a.Status, b.Status)
	case *corev1.Node:
		b, ok := b.(*corev1.Node)
		return ok && equality.Semantic.DeepEqual(a.Labels, b.Labels) &&
			equality.Semantic.DeepEqual(a.Spec, b.Spec) && equality.Semantic.DeepEqual(a.Status, b.Status)
	case *networkingv1.NetworkPolicy:
		b, ok := b.(*networkingv1.NetworkPolicy)
		return ok && equality.Semantic.DeepEqual(a.Labels, b.Labels) && equality.Semantic.DeepEqual(a.Spec, b.Spec)
	case *policyv1beta1.ClusterNetworkPolicy:
		b, ok := b.(*policyv1beta1.ClusterNetworkPolicy)
		return ok && equality.Semantic.DeepEqual(a.Labels, b.Labels) && equality.Semantic.DeepEqual(a.Spec, b.Spec)
	}
	return false
}

// sameIdentity reports whether a and b are the same object at the same
// stage of its life, as the compiler reads them: a pod deleted and made
// again under its name (a new UID, a new creation time), or one that
// began terminating, is a change.
func sameIdentity(a, b metav1.Object) bool {
	da, db := a.GetDeletionTimestamp(), b.GetDeletionTimestamp()
	ca, cb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
	return a.GetUID() == b.GetUID() && ca.Equal(&cb) && da.Equal(db)
}

// NewPolicyClient returns a client of policy.networking.k8s.io
// (ClusterNetworkPolicy) for kubeconfig, as NewClient does.
func NewPolicyClient(kubeconfig, userAgent string) (policyclient.Interface, error) {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = userAgent
	return policyclient.NewForConfig(cfg)
}

// NewClient returns a clientset for kubeconfig, a kubeconfig file path, or
// for the in-cluster configuration (the pod's service account) when
// kubeconfig is empty.
func NewClient(kubeconfig, userAgent string) (kubernetes.Interface, error) {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	builtinConfig(cfg, userAgent)
	return kubernetes.NewForConfig(cfg)
}

// NewSlimClient returns the client the informers list and watch pods and
// nodes with (InformerOptions.Slim), for kubeconfig as NewClient. It asks
// for protobuf, and decodes a pod or node into only what the daemon keeps
// of it: the fields trimPod and trimNode keep (see
// slimSerializer). Use it for nothing else: a pod or node read or
// written through it is missing all the rest.
//
// It shares NewClient's connection: client-go keeps one transport for
// equal TLS configurations.
func NewSlimClient(kubeconfig, userAgent string) (corev1client.CoreV1Interface, error) {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	builtinConfig(cfg, userAgent)
	cfg.APIPath = "/api"
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.NegotiatedSerializer = slimCodecs{rest.CodecFactoryForGeneratedClient(scheme.Scheme, scheme.Codecs).WithoutConversion()}
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("slim client: %w", err)
	}
	return corev1client.New(rc), nil
}

// builtinConfig sets what the clients of built-in kinds share.
func builtinConfig(cfg *rest.Config, userAgent string) {
	cfg.UserAgent = userAgent
	// Informers list and watch; the defaults (5 qps, burst 10) only slow
	// the first list of four resources after a restart.
	cfg.QPS, cfg.Burst = 20, 40
	// Protobuf, for the built-in kinds: at 150k pods the first list is
	// most of what the daemon ever reads, and protobuf is about a third of
	// JSON's bytes and far cheaper to decode. (ClusterNetworkPolicy, a
	// CRD, is served as JSON only: NewPolicyClient keeps the default.)
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
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
