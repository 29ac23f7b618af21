// Hostile review, round 18: the slim client's pods decoded straight to
// their records (decodePodRecord), and the first list noting nothing to
// patch (markPending). A helper with a behaviour-only brief tried to make
// the slim informers' Snapshots differ from the stock client's and from
// what the API server holds. It found one defect, fixed: with no example
// object for the slim pods informer, an object of another kind named as a
// pod is (a ConfigMap x/p-1 on the pods watch) replaced or deleted that
// pod (TestHostileRound18WrongKindInPodWatch, ...InStreamedList); the
// link now drops such events, as the reflector does given an example
// object. The rest held: validity flips, bookmarks, JSON answers,
// concurrent streams and relists, Snapshots during the first list.
package k8s

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
)

// Hostile round 18: the slim client decodes an admitted pod of a watch
// stream straight to its record (decodePodRecord), the pods informer has
// no example object when slim, and the first list notes nothing to patch.
// A small API server (r18API) serves pods, nodes, namespaces and
// networkpolicies over HTTP (WatchList, lists, watches, 410s), in
// protobuf or JSON, to Informers built with the daemon's slim client and
// to Informers built without it (the stock decoder, the oracle).

// r18Event is one event of a resource's log: an object written (typ
// ADDED, MODIFIED, DELETED) or injected as it is, or an expiry (the
// watches get a 410 and end).
type r18Event struct {
	rv     int
	typ    string
	obj    runtime.Object
	expire bool
}

type r18API struct {
	t     testing.TB
	json  bool
	chunk int // write size of watch streams; 0: a frame at a time

	mu    sync.Mutex
	rv    int
	state map[string]map[string]runtime.Object // resource -> key -> object
	log   map[string][]r18Event
	wake  chan struct{} // closed when log grows
	// extra are frames written into a streamed list before its end
	// bookmark; hold, when not nil, delays that bookmark until closed.
	extra map[string][]r18Event
	hold  chan struct{}
	// slowEvery/slowFor throttle a streamed list: a pause every so many
	// objects.
	slowEvery int
	slowFor   time.Duration
	srv       *httptest.Server
}

var r18Resources = []string{"pods", "nodes", "namespaces", "networkpolicies"}

func newR18API(t testing.TB, jsonAnswers bool) *r18API {
	a := &r18API{t: t, json: jsonAnswers, state: map[string]map[string]runtime.Object{}, log: map[string][]r18Event{},
		wake: make(chan struct{}), extra: map[string][]r18Event{}, rv: 10}
	for _, r := range r18Resources {
		a.state[r] = map[string]runtime.Object{}
	}
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.srv.Close)
	return a
}

func r18Typed(o runtime.Object) runtime.Object {
	o = o.DeepCopyObject()
	if _, ok := o.(*Pod); ok {
		return o
	}
	gvks, _, err := scheme.Scheme.ObjectKinds(o)
	if err == nil && len(gvks) > 0 {
		o.GetObjectKind().SetGroupVersionKind(gvks[0])
	}
	return o
}

func r18Key(o runtime.Object) string {
	m, err := meta.Accessor(o)
	if err != nil {
		panic(err)
	}
	if m.GetNamespace() == "" {
		return m.GetName()
	}
	return m.GetNamespace() + "/" + m.GetName()
}

// appendLocked adds an event of obj at the next resource version.
func (a *r18API) appendLocked(res, typ string, obj runtime.Object, expire bool) runtime.Object {
	a.rv++
	if obj != nil {
		obj = r18Typed(obj)
		m, _ := meta.Accessor(obj)
		m.SetResourceVersion(strconv.Itoa(a.rv))
	}
	a.log[res] = append(a.log[res], r18Event{rv: a.rv, typ: typ, obj: obj, expire: expire})
	close(a.wake)
	a.wake = make(chan struct{})
	return obj
}

// put creates or updates obj.
func (a *r18API) put(res string, obj runtime.Object) {
	a.mu.Lock()
	defer a.mu.Unlock()
	typ := "ADDED"
	if _, ok := a.state[res][r18Key(obj)]; ok {
		typ = "MODIFIED"
	}
	a.state[res][r18Key(obj)] = a.appendLocked(res, typ, obj, false)
}

func (a *r18API) del(res, key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	obj, ok := a.state[res][key]
	if !ok {
		return
	}
	delete(a.state[res], key)
	a.appendLocked(res, "DELETED", obj, false)
}

// inject sends an event as it is, without changing the state.
func (a *r18API) inject(res, typ string, obj runtime.Object) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.appendLocked(res, typ, obj, false)
}

// expire ends every watch of res with 410 Gone: the informer relists.
func (a *r18API) expire(res string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.appendLocked(res, "", nil, true)
}

func (a *r18API) encode(o runtime.Object) ([]byte, error) {
	var buf bytes.Buffer
	var err error
	if a.json {
		err = json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, json.SerializerOptions{}).Encode(o, &buf)
	} else {
		err = protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(o, &buf)
	}
	return buf.Bytes(), err
}

func (a *r18API) frame(typ string, o runtime.Object) ([]byte, error) {
	raw, err := a.encode(o)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	ev := &metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: raw}}
	if a.json {
		err = json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, json.SerializerOptions{}).Encode(ev, &out)
	} else {
		err = protobuf.NewRawSerializer(scheme.Scheme, scheme.Scheme).Encode(ev, protobuf.LengthDelimitedFramer.NewFrameWriter(&out))
	}
	return out.Bytes(), err
}

func r18Bookmark(res string, rv int, annotations map[string]string) runtime.Object {
	m := metav1.ObjectMeta{ResourceVersion: strconv.Itoa(rv), Annotations: annotations}
	var o runtime.Object
	switch res {
	case "pods":
		o = &corev1.Pod{ObjectMeta: m}
	case "nodes":
		o = &corev1.Node{ObjectMeta: m}
	case "namespaces":
		o = &corev1.Namespace{ObjectMeta: m}
	default:
		o = &networkingv1.NetworkPolicy{ObjectMeta: m}
	}
	return r18Typed(o)
}

func (a *r18API) sortedLocked(res string) []runtime.Object {
	keys := make([]string, 0, len(a.state[res]))
	for k := range a.state[res] {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []runtime.Object
	for _, k := range keys {
		out = append(out, a.state[res][k])
	}
	return out
}

func (a *r18API) serve(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	res := parts[len(parts)-1]
	if _, ok := a.state[res]; !ok {
		http.NotFound(w, r)
		return
	}
	ct := runtime.ContentTypeProtobuf
	if a.json {
		ct = runtime.ContentTypeJSON
	}
	q := r.URL.Query()
	if q.Get("watch") != "true" {
		a.mu.Lock()
		items, rv := a.sortedLocked(res), a.rv
		a.mu.Unlock()
		kinds := map[string]string{"pods": "PodList", "nodes": "NodeList", "namespaces": "NamespaceList", "networkpolicies": "NetworkPolicyList"}
		gv := corev1.SchemeGroupVersion
		if res == "networkpolicies" {
			gv = networkingv1.SchemeGroupVersion
		}
		list, _ := scheme.Scheme.New(gv.WithKind(kinds[res]))
		list.GetObjectKind().SetGroupVersionKind(gv.WithKind(kinds[res]))
		if err := meta.SetList(list, items); err != nil {
			a.t.Error(err)
			return
		}
		la, _ := meta.ListAccessor(list)
		la.SetResourceVersion(strconv.Itoa(rv))
		b, err := a.encode(list)
		if err != nil {
			a.t.Error(err)
			return
		}
		w.Header().Set("Content-Type", ct)
		w.Write(b)
		return
	}
	if !a.json {
		ct += ";stream=watch"
	}
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(200)
	fl := w.(http.Flusher)
	fl.Flush()
	write := func(typ string, o runtime.Object) bool {
		b, err := a.frame(typ, o)
		if err != nil {
			a.t.Error(err)
			return false
		}
		for len(b) > 0 {
			n := len(b)
			if a.chunk > 0 {
				n = min(a.chunk, n)
			}
			if _, err := w.Write(b[:n]); err != nil {
				return false
			}
			fl.Flush()
			b = b[n:]
		}
		return true
	}
	var from int
	if q.Get("sendInitialEvents") == "true" {
		a.mu.Lock()
		items, rv, extra, hold := a.sortedLocked(res), a.rv, a.extra[res], a.hold
		a.mu.Unlock()
		for i, o := range items {
			if !write("ADDED", o) {
				return
			}
			if a.slowEvery > 0 && i%a.slowEvery == a.slowEvery-1 {
				time.Sleep(a.slowFor)
			}
		}
		for _, e := range extra {
			if !write(e.typ, e.obj) {
				return
			}
		}
		if hold != nil && res == "pods" {
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
		if !write("BOOKMARK", r18Bookmark(res, rv, map[string]string{metav1.InitialEventsAnnotationKey: "true"})) {
			return
		}
		from = rv
	} else {
		a.mu.Lock()
		from = a.rv
		if v, err := strconv.Atoi(q.Get("resourceVersion")); err == nil && v > 0 {
			from = v
		}
		a.mu.Unlock()
	}
	for {
		a.mu.Lock()
		var evs []r18Event
		for _, e := range a.log[res] {
			if e.rv > from {
				evs = append(evs, e)
			}
		}
		wake := a.wake
		a.mu.Unlock()
		for _, e := range evs {
			from = e.rv
			if e.expire {
				write("ERROR", &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusFailure,
					Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
				return
			}
			if !write(e.typ, e.obj) {
				return
			}
		}
		if len(evs) > 0 {
			continue
		}
		select {
		case <-wake:
		case <-r.Context().Done():
			return
		}
	}
}

// r18Start makes Informers on the API, with the slim client or without
// (the stock decoders, the pods informer expecting *corev1.Pod), logging
// to an observer.
func r18New(t testing.TB, a *r18API, slim bool) (*Informers, *observer.ObservedLogs) {
	t.Helper()
	kc := r15Kubeconfig(t, a.srv.URL)
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	builtinConfig(cfg, "r18")
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	opts := InformerOptions{Log: zap.New(core)}
	if slim {
		if opts.Slim, err = NewSlimClient(kc, "r18"); err != nil {
			t.Fatal(err)
		}
	}
	return NewInformers(cs, opts), logs
}

func r18Start(t testing.TB, ctx context.Context, ins ...*Informers) {
	t.Helper()
	// Start's context is the informers' lifetime: not cut short here.
	for _, in := range ins {
		if err := in.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// r18StartBoth starts a slim and a stock informer on a, for the test's
// lifetime, and returns them (and their logs) by name once both hold the
// first list.
func r18StartBoth(t testing.TB, a *r18API) (map[string]*Informers, map[string]*observer.ObservedLogs) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	slim, slimLogs := r18New(t, a, true)
	stock, stockLogs := r18New(t, a, false)
	r18Start(t, ctx, slim, stock)
	ins := map[string]*Informers{"slim": slim, "stock": stock}
	r18Converge(t, a, "first list", ins)
	return ins, map[string]*observer.ObservedLogs{"slim": slimLogs, "stock": stockLogs}
}

// r18Want is what a Snapshot must hold of the API's pods and nodes: the
// transform's record of each (the stock road), the invalid left out.
func (a *r18API) want() (pods map[string]*Pod, nodes map[string]*corev1.Node) {
	ref := NewInformers(fake.NewClientset(), InformerOptions{})
	a.mu.Lock()
	defer a.mu.Unlock()
	pods, nodes = map[string]*Pod{}, map[string]*corev1.Node{}
	for k, o := range a.state["pods"] {
		o = o.DeepCopyObject()
		o.GetObjectKind().SetGroupVersionKind(schemaGVK("", ""))
		got, _ := ref.transform(o)
		if !ref.invalid[got] {
			pods[k] = got.(*Pod)
		}
	}
	for k, o := range a.state["nodes"] {
		o = o.DeepCopyObject()
		o.GetObjectKind().SetGroupVersionKind(schemaGVK("", ""))
		got, _ := ref.transform(o)
		if !ref.invalid[got] {
			nodes[k] = got.(*corev1.Node)
		}
	}
	return pods, nodes
}

// r18Ignore: resource versions differ where an update changed nothing
// the compiler reads (no event, the record kept).
var r18Ignore = cmp.Options{cmpopts.IgnoreFields(Pod{}, "ResourceVersion"), cmpopts.IgnoreFields(metav1.ObjectMeta{}, "ResourceVersion"),
	cmpopts.IgnoreFields(metav1.TypeMeta{}, "APIVersion", "Kind")}

func r18View(s *Snapshot) (map[string]*Pod, map[string]*corev1.Node) {
	pods, nodes := map[string]*Pod{}, map[string]*corev1.Node{}
	for _, p := range s.Pods {
		pods[p.Namespace+"/"+p.Name] = p
	}
	for _, n := range s.Nodes {
		nodes[n.Name] = n
	}
	return pods, nodes
}

// r18Diff is how a Snapshot of in differs from what the API holds.
func r18Diff(a *r18API, in *Informers) string {
	wp, wn := a.want()
	gp, gn := r18View(in.Snapshot())
	d := cmp.Diff(wp, gp, r18Ignore)
	if d2 := cmp.Diff(wn, gn, r18Ignore); d2 != "" {
		d += "\nnodes:\n" + d2
	}
	return d
}

// r18Converge waits until every informer's Snapshot holds what the API
// holds, and fails naming those that never do.
func r18Converge(t testing.TB, a *r18API, what string, ins map[string]*Informers) {
	t.Helper()
	deadline := time.Now().Add(8 * time.Second)
	for {
		diffs := ""
		for _, name := range slices.Sorted(func(yield func(string) bool) {
			for k := range ins {
				if !yield(k) {
					return
				}
			}
		}) {
			if d := r18Diff(a, ins[name]); d != "" {
				diffs += fmt.Sprintf("%s informer (-API +Snapshot):\n%s\n", name, d)
			}
		}
		if diffs == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s:\n%s", what, diffs)
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// r18Pod is a valid pod with what a record keeps, varied by i: labels
// (none for i%5 == 0), named container and sidecar ports, two addresses,
// terminating for i%7 == 3, hostNetwork for i%11 == 4.
func r18Pod(ns string, i int) *corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	never := corev1.ContainerRestartPolicy("Never")
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", i), Namespace: ns, UID: types.UID(fmt.Sprintf("uid-%s-%d", ns, i)),
			CreationTimestamp: metav1.Unix(int64(1000+i), 0),
			Labels:            map[string]string{"app": fmt.Sprintf("a%d", i%4), fmt.Sprintf("k%d", i%9): strings.Repeat("v", i%6)},
			Annotations:       map[string]string{"noise": strings.Repeat("n", i%50)}},
		Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", i%3),
			Containers: []corev1.Container{
				{Name: "c", Image: "img", Ports: []corev1.ContainerPort{{Name: fmt.Sprintf("http-%d", i%13), ContainerPort: int32(1000 + i%60000)}, {ContainerPort: 53, Protocol: corev1.ProtocolUDP}}},
				{Name: "d", Ports: []corev1.ContainerPort{{Name: "http-0", ContainerPort: 81, Protocol: corev1.ProtocolSCTP}}}},
			InitContainers: []corev1.Container{
				{Name: "side", RestartPolicy: &always, Ports: []corev1.ContainerPort{{Name: fmt.Sprintf("metrics-%d", i%5), ContainerPort: 9090}}},
				{Name: "init", RestartPolicy: &never, Ports: []corev1.ContainerPort{{Name: "notserved", ContainerPort: 7070}}},
				{Name: "init2", Ports: []corev1.ContainerPort{{Name: "alsonot", ContainerPort: 7071}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: fmt.Sprintf("10.%d.%d.%d", 1+i/62500, i/250%250, i%250+1),
			ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Ready: true}}},
	}
	p.Status.PodIPs = []corev1.PodIP{{IP: p.Status.PodIP}, {IP: fmt.Sprintf("fd00::%x", i+1)}}
	if i%5 == 0 {
		p.Labels = nil
	}
	if i%7 == 3 {
		del := metav1.Unix(int64(5000+i), 0)
		p.DeletionTimestamp = &del
	}
	if i%11 == 4 {
		p.Spec.HostNetwork = true
	}
	if i%6 == 5 {
		p.Spec.InitContainers = nil
	}
	return p
}

func r18Node(i int) *corev1.Node {
	n := r15Node(i, 10)
	n.TypeMeta = metav1.TypeMeta{}
	return n
}

// TestHostileRound18WrongKindInPodWatch: after the first list, a pod
// watch carries objects that are not pods, keyed as pods are: a ConfigMap
// MODIFIED named x/p-1, a NetworkPolicy DELETED named x/p-2, an Event
// ADDED named x/p-3 (a misrouting proxy, an aggregated API gone wrong, a
// hostile server). The stock informer's reflector drops each ("expected
// type *v1.Pod"), so the pods stay. The slim informer has no example
// object (NewInformers sets objs[1] = nil), so its reflector stores them
// in the pods cache under the pods' keys, and Snapshots, which read only
// *Pod records there, lose the three pods: each is then no target, its
// address no pod's (fails open). Checks: after a sentinel pod written
// later is in both Snapshots, both still hold p-1, p-2, p-3.
func TestHostileRound18WrongKindInPodWatch(t *testing.T) {
	a := newR18API(t, false)
	for i := range 6 {
		a.put("pods", r18Pod("x", i))
	}
	ins, _ := r18StartBoth(t, a)

	a.inject("pods", "MODIFIED", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "p-1", Namespace: "x"}, Data: map[string]string{"a": "b"}})
	a.inject("pods", "DELETED", &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p-2", Namespace: "x"}})
	a.inject("pods", "ADDED", &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "p-3", Namespace: "x"}, InvolvedObject: corev1.ObjectReference{Name: "p-3"}})
	a.inject("pods", "ADDED", r18Node(9)) // cluster-scoped: no pod's key
	a.put("pods", r18Pod("x", 100))       // the sentinel
	for name, in := range ins {
		deadline := time.Now().Add(8 * time.Second)
		for !slices.ContainsFunc(in.Snapshot().Pods, func(p *Pod) bool { return p.Name == "p-100" }) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the sentinel pod never came", name)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, name := range []string{"stock", "slim"} {
		if d := r18Diff(a, ins[name]); d != "" {
			var kinds []string
			for _, o := range ins[name].infs[1].GetStore().List() {
				kinds = append(kinds, fmt.Sprintf("%T %s", o, r18Key(o.(runtime.Object))))
			}
			slices.Sort(kinds)
			t.Errorf("%s informer: objects of other kinds in a pod watch changed the pods (-API +Snapshot):\n%s\npods cache: %v", name, d, kinds)
		}
	}
}

// TestHostileRound18ValidityFlips: one pod turns valid, invalid (one
// field: a port name, then an address with a leading zero, then a label
// value), valid again; others have no labels, terminate, have sidecar
// named ports, run on the host network, lose and regain their labels.
// After each step both informers' Snapshots hold what the API holds, the
// invalid versions left out, and both log each invalid version skipped.
func TestHostileRound18ValidityFlips(t *testing.T) {
	for _, jsonAnswers := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", jsonAnswers), func(t *testing.T) {
			a := newR18API(t, jsonAnswers)
			a.chunk = 7
			for i := range 12 {
				a.put("pods", r18Pod("x", i))
			}
			for i := range 3 {
				a.put("nodes", r18Node(i))
			}
			ins, logsOf := r18StartBoth(t, a)

			steps := []struct {
				what    string
				invalid bool
				edit    func(p *corev1.Pod)
			}{
				{"bad port name", true, func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].Name = "HTTP" }},
				{"valid again", false, func(p *corev1.Pod) { p.Labels = map[string]string{"app": "back"} }},
				{"podIP with a leading zero", true, func(p *corev1.Pod) {
					p.Status.PodIP = "10.1.0.01"
					p.Status.PodIPs[0].IP = "10.1.0.01"
				}},
				{"valid, other address", false, func(p *corev1.Pod) { p.Status.PodIP, p.Status.PodIPs[0].IP = "10.1.9.9", "10.1.9.9" }},
				{"bad label value", true, func(p *corev1.Pod) { p.Labels = map[string]string{"app": "has space"} }},
				{"sidecar port name invalid", true, func(p *corev1.Pod) { p.Spec.InitContainers[0].Ports[0].Name = "-bad" }},
				{"valid, no labels, terminating", false, func(p *corev1.Pod) {
					p.Labels = nil
					del := metav1.Unix(9999, 0)
					p.DeletionTimestamp = &del
				}},
			}
			invalids := 0
			for _, s := range steps {
				cur := r18Pod("x", 1) // each step one edit of the same valid pod
				s.edit(cur)
				if s.invalid {
					invalids++
				}
				a.put("pods", cur)
				// Other pods change alongside: labels dropped and back,
				// sidecars gone, host network.
				o := r18Pod("x", 2)
				if invalids%2 == 1 {
					o.Labels = nil
					o.Spec.InitContainers = nil
					o.Spec.HostNetwork = true
				}
				a.put("pods", o)
				r18Converge(t, a, s.what, ins)
			}
			a.del("pods", "x/p-1")
			a.del("pods", "x/p-3")
			r18Converge(t, a, "deleted", ins)
			for name, logs := range logsOf {
				n := logs.FilterMessage("skipped an API object").FilterField(zap.String("object", "Pod x/p-1")).Len()
				if n != invalids {
					for _, e := range logs.FilterField(zap.String("object", "Pod x/p-1")).All() {
						t.Logf("%s %v", e.Message, e.ContextMap())
					}
					t.Errorf("%s informer: %d pods x/p-1 logged as skipped, want %d", name, n, invalids)
				}
			}
		})
	}
}

// TestHostileRound18BookmarkVariants: a streamed list whose pods carry,
// before the real end bookmark, bookmarks without the annotation, with
// it "false", with it "true" but on an ADDED pod, and a bookmark whose
// object is a whole valid pod without the annotation. Start must not
// return before the real bookmark (held back here), and then every pod
// of the list is in the first Snapshot, none of the bookmarks' pods.
func TestHostileRound18BookmarkVariants(t *testing.T) {
	for _, slimClient := range []bool{true, false} {
		t.Run(fmt.Sprintf("slim=%v", slimClient), func(t *testing.T) {
			a := newR18API(t, false)
			for i := range 5 {
				a.put("pods", r18Pod("x", i))
			}
			annotated := r18Typed(r18Pod("x", 50)).(*corev1.Pod)
			annotated.ResourceVersion = "12"
			annotated.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
			whole := r18Typed(r18Pod("x", 51)).(*corev1.Pod)
			whole.ResourceVersion = "12"
			falseMark := r18Bookmark("pods", 12, map[string]string{metav1.InitialEventsAnnotationKey: "false"})
			a.extra["pods"] = []r18Event{
				{typ: "BOOKMARK", obj: r18Bookmark("pods", 12, nil)},
				{typ: "BOOKMARK", obj: falseMark},
				{typ: "ADDED", obj: annotated},
				{typ: "BOOKMARK", obj: whole},
			}
			a.hold = make(chan struct{})
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			in, _ := r18New(t, a, slimClient)
			started := make(chan error, 1)
			go func() { started <- in.Start(ctx) }()
			select {
			case err := <-started:
				t.Fatalf("Start returned (%v) before the end bookmark", err)
			case <-time.After(1500 * time.Millisecond):
			}
			close(a.hold)
			if err := <-started; err != nil {
				t.Fatal(err)
			}
			got, _ := r18View(in.Snapshot())
			want, _ := a.want()
			rec, _ := NewInformers(fake.NewClientset(), InformerOptions{}).transform(r18Pod("x", 50))
			want["x/p-50"] = rec.(*Pod) // an ADDED pod, annotated or not
			if d := cmp.Diff(want, got, r18Ignore); d != "" {
				t.Errorf("first Snapshot (-want +got):\n%s", d)
			}
		})
	}
}

// TestHostileRound18ConcurrentStreams: three slim informers and a stock
// one list and watch 1,500 pods of one API at once (their decoders share
// the scratch pool and the interning tables), served in 13-byte writes;
// while they list, pods change labels, ports and addresses, are deleted
// and made; then every pods watch gets a 410 and all relist at once
// while more pods change. Every Snapshot must end up holding exactly the
// API's pods: one pod's labels, ports or addresses in another's record
// would show as a difference.
func TestHostileRound18ConcurrentStreams(t *testing.T) {
	a := newR18API(t, false)
	a.chunk = 13
	const n = 1500
	for i := range n {
		a.put("pods", r18Pod(fmt.Sprintf("ns%d", i%4), i))
	}
	for i := range 3 {
		a.put("nodes", r18Node(i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ins := map[string]*Informers{}
	for k := range 3 {
		ins[fmt.Sprintf("slim%d", k)], _ = r18New(t, a, true)
	}
	ins["stock"], _ = r18New(t, a, false)
	r := rand.New(rand.NewPCG(18, 18))
	churn := func(rounds int) {
		for range rounds {
			i := r.IntN(n)
			p := r18Pod(fmt.Sprintf("ns%d", i%4), i)
			switch r.IntN(5) {
			case 0:
				a.del("pods", p.Namespace+"/"+p.Name)
				continue
			case 1:
				p.Labels = map[string]string{"app": fmt.Sprintf("z%d", r.IntN(50)), "rnd": strconv.Itoa(r.IntN(1000))}
			case 2:
				p.Spec.Containers[0].Ports[0].Name = fmt.Sprintf("p%d", r.IntN(99))
			case 3:
				p.Status.PodIP = fmt.Sprintf("10.200.%d.%d", r.IntN(250), r.IntN(250)+1)
				p.Status.PodIPs = []corev1.PodIP{{IP: p.Status.PodIP}}
			case 4:
				p.Spec.Containers[0].Ports[0].Name = "BAD" // invalid
			}
			a.put("pods", p)
		}
	}
	var wg sync.WaitGroup
	starts := make(chan error, len(ins))
	for _, in := range ins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			starts <- in.Start(ctx)
		}()
	}
	churn(200)
	wg.Wait()
	close(starts)
	for err := range starts {
		if err != nil {
			t.Fatal(err)
		}
	}
	churn(100)
	a.expire("pods")
	churn(200)
	r18Converge(t, a, "after concurrent lists, churn and a relist", ins)
}

// TestHostileRound18ConcurrentDecode: four goroutines decode distinct
// pods with the slim serializer at once, keeping every record; each
// record must be the transform's of its own pod, when decoded and still
// at the end (a record sharing the scratch pod's labels or ports would
// change when the scratch is reused).
func TestHostileRound18ConcurrentDecode(t *testing.T) {
	slim := slimSerializer{protobufCodec}
	const workers, per = 4, 400
	type kept struct {
		want *Pod
		got  runtime.Object
	}
	results := make([][]kept, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				p := r18Pod(fmt.Sprintf("w%d", w), w*per+i)
				p.Labels = map[string]string{fmt.Sprintf("w%d", w): strconv.Itoa(i), "app": strconv.Itoa(i % 3)}
				if i%10 == 9 {
					p.Labels = nil
				}
				if i%17 == 8 {
					p.Spec.Containers[0].Ports[0].Name = "NOPE" // invalid: a corev1.Pod
				}
				p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
				var buf bytes.Buffer
				if err := protobufCodec.Encode(p, &buf); err != nil {
					t.Error(err)
					return
				}
				got, _, err := slim.Decode(buf.Bytes(), nil, nil)
				if err != nil {
					t.Error(err)
					return
				}
				want, errs := admitPod(slimView(p))
				if len(errs) > 0 {
					want = nil
				}
				results[w] = append(results[w], kept{want, got})
			}
		}()
	}
	wg.Wait()
	for w, rs := range results {
		for i, k := range rs {
			switch g := k.got.(type) {
			case *Pod:
				if k.want == nil {
					t.Errorf("worker %d pod %d: an invalid pod decoded to a record", w, i)
				} else if d := cmp.Diff(k.want, g); d != "" {
					t.Errorf("worker %d pod %d: record (-want +got):\n%s", w, i, d)
				}
			case *corev1.Pod:
				if k.want != nil {
					t.Errorf("worker %d pod %d: a valid pod decoded to a corev1.Pod", w, i)
				}
			default:
				t.Errorf("worker %d pod %d: decoded a %T", w, i, g)
			}
		}
	}
}

// TestHostileRound18SnapshotsDuringFirstList: Snapshots are taken without
// pause while the first list streams in slowly (so the first Snapshot is
// of a partial cache, and the first list's events then come after it)
// and while pods change after it; in the end the Snapshot holds exactly
// the API's pods, and equals a fresh full listing of the caches.
func TestHostileRound18SnapshotsDuringFirstList(t *testing.T) {
	for _, slimClient := range []bool{true, false} {
		t.Run(fmt.Sprintf("slim=%v", slimClient), func(t *testing.T) {
			a := newR18API(t, false)
			a.slowEvery, a.slowFor = 40, 3*time.Millisecond
			for i := range 600 {
				a.put("pods", r18Pod("x", i))
			}
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			in, _ := r18New(t, a, slimClient)
			stop := make(chan struct{})
			var snaps sync.WaitGroup
			snaps.Add(1)
			taken := 0
			go func() {
				defer snaps.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					in.Snapshot()
					taken++
					time.Sleep(200 * time.Microsecond)
				}
			}()
			r18Start(t, ctx, in)
			for i := range 100 {
				p := r18Pod("x", i*5)
				p.Labels = map[string]string{"gen": "2"}
				a.put("pods", p)
				if i%4 == 0 {
					a.del("pods", fmt.Sprintf("x/p-%d", i*5+1))
				}
				a.put("pods", r18Pod("x", 1000+i))
			}
			time.Sleep(300 * time.Millisecond)
			close(stop)
			snaps.Wait()
			if taken < 5 {
				t.Fatalf("only %d Snapshots taken meanwhile (the test's premise)", taken)
			}
			r18Converge(t, a, "after Snapshots during the first list", map[string]*Informers{"it": in})
			// A fresh full listing of the same caches.
			patched := in.Snapshot()
			in.mu.Lock()
			in.last = nil
			in.mu.Unlock()
			full := in.Snapshot()
			if d := cmp.Diff(full.Pods, patched.Pods); d != "" {
				t.Errorf("patched Snapshot differs from a full listing (-full +patched):\n%s", d)
			}
		})
	}
}

// TestHostileRound18WrongKindInStreamedList: as
// TestHostileRound18WrongKindInPodWatch, within the streamed list
// (WatchList) itself: after the pods, before the end bookmark, an ADDED
// ConfigMap named x/p-1. The stock reflector drops it; the first
// Snapshot must hold every pod of the list, p-1 included.
func TestHostileRound18WrongKindInStreamedList(t *testing.T) {
	for _, slimClient := range []bool{false, true} {
		t.Run(fmt.Sprintf("slim=%v", slimClient), func(t *testing.T) {
			a := newR18API(t, false)
			for i := range 4 {
				a.put("pods", r18Pod("x", i))
			}
			a.extra["pods"] = []r18Event{{typ: "ADDED", obj: r18Typed(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "p-1", Namespace: "x", ResourceVersion: "14"}})}}
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			in, _ := r18New(t, a, slimClient)
			r18Start(t, ctx, in)
			if d := r18Diff(a, in); d != "" {
				t.Errorf("first Snapshot (-API +Snapshot):\n%s", d)
			}
		})
	}
}
