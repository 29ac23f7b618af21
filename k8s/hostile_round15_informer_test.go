package k8s

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
)

// TestHostileRound15InformerStore: two Informers follow one fake API
// server, one listing and watching pods and nodes with the daemon's slim
// client, the other with client-go's stock codecs. The streamed list
// (WatchList) and the watch after it carry pods and nodes of very
// different sizes back to back, served in 11-byte writes; after the
// bookmark, huge objects turn tiny and tiny ones huge, one is deleted.
// Both Snapshots must hold the same pods and nodes, and the last version
// sent of each.
func TestHostileRound15InformerStore(t *testing.T) {
	podPads := []int{0, 1 << 20, 3, 70000, 0, 2000, 1 << 18, 1}
	nodePads := []int{1 << 19, 0, 5000, 10}
	var podEvents, nodeEvents []r15Event
	final := map[string]runtime.Object{}
	for i, pad := range podPads {
		podEvents = append(podEvents, r15Event{"ADDED", r15Pod(i, pad)})
	}
	for i, pad := range nodePads {
		nodeEvents = append(nodeEvents, r15Event{"ADDED", r15Node(i, pad)})
	}
	mark := func(o runtime.Object, rv string) r15Event {
		m, _ := meta.Accessor(o)
		m.SetResourceVersion(rv)
		m.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
		return r15Event{"BOOKMARK", o}
	}
	podEvents = append(podEvents, mark(&corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}}, "900"))
	nodeEvents = append(nodeEvents, mark(&corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}}, "900"))
	// After the sync: sizes reversed, labels and addresses changed.
	for i, pad := range podPads {
		if i == 4 {
			podEvents = append(podEvents, r15Event{"DELETED", r15Pod(i, pad)})
			continue
		}
		p := r15Pod(i, podPads[len(podPads)-1-i])
		p.ResourceVersion = fmt.Sprint(1000 + i)
		p.Labels["gen"] = "2"
		p.Status.PodIP = fmt.Sprintf("10.2.0.%d", i+1)
		p.Status.PodIPs = []corev1.PodIP{{IP: p.Status.PodIP}}
		_ = pad
		podEvents = append(podEvents, r15Event{"MODIFIED", p})
	}
	for i := range nodePads {
		n := r15Node(i, nodePads[len(nodePads)-1-i])
		n.ResourceVersion = fmt.Sprint(1000 + i)
		n.Labels["gen"] = "2"
		n.Status.Addresses[0].Address = fmt.Sprintf("10.9.0.%d", i+1)
		nodeEvents = append(nodeEvents, r15Event{"MODIFIED", n})
	}
	for _, e := range append(append([]r15Event{}, podEvents...), nodeEvents...) {
		m, _ := meta.Accessor(e.obj)
		switch e.typ {
		case "ADDED", "MODIFIED":
			final[fmt.Sprintf("%T/%s", e.obj, m.GetName())] = e.obj
		case "DELETED":
			delete(final, fmt.Sprintf("%T/%s", e.obj, m.GetName()))
		}
	}
	streams := map[string][]byte{
		"pods":            r15Stream(t, true, podEvents),
		"nodes":           r15Stream(t, true, nodeEvents),
		"namespaces":      r15Stream(t, true, []r15Event{mark(&corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}}, "900")}),
		"networkpolicies": r15Stream(t, true, []r15Event{mark(&networkingv1.NetworkPolicy{TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"}}, "900")}),
	}
	lists := map[string]runtime.Object{
		"pods": &corev1.PodList{}, "nodes": &corev1.NodeList{}, "namespaces": &corev1.NamespaceList{}, "networkpolicies": &networkingv1.NetworkPolicyList{},
	}
	kinds := map[string]string{"pods": "PodList", "nodes": "NodeList", "namespaces": "NamespaceList", "networkpolicies": "NetworkPolicyList"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
		res := parts[len(parts)-1]
		if r.URL.Query().Get("watch") != "true" {
			l, ok := lists[res]
			if !ok {
				http.NotFound(w, r)
				return
			}
			l = l.DeepCopyObject()
			gv := "v1"
			if res == "networkpolicies" {
				gv = "networking.k8s.io/v1"
			}
			l.GetObjectKind().SetGroupVersionKind(schemaGVK(gv, kinds[res]))
			var buf bytes.Buffer
			protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(l, &buf)
			w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
			w.Write(buf.Bytes())
			return
		}
		w.Header().Set("Content-Type", runtime.ContentTypeProtobuf+";stream=watch")
		w.WriteHeader(200)
		fl := w.(http.Flusher)
		fl.Flush()
		if r.URL.Query().Get("sendInitialEvents") == "true" {
			for b := streams[res]; len(b) > 0; {
				n := min(11, len(b))
				if _, err := w.Write(b[:n]); err != nil {
					return
				}
				fl.Flush()
				b = b[n:]
			}
		}
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	kc := r15Kubeconfig(t, srv.URL)
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	builtinConfig(cfg, "r15")
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	slim, err := NewSlimClient(kc, "r15")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	inSlim := NewInformers(cs, InformerOptions{Slim: slim})
	inStock := NewInformers(cs, InformerOptions{Slim: cs.CoreV1()})
	for _, in := range []*Informers{inSlim, inStock} {
		if err := in.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// What each Snapshot should hold: the last version sent of each.
	ref := NewInformers(cs, InformerOptions{})
	want := map[string]any{}
	for k, o := range final {
		o = o.DeepCopyObject()
		o.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
		got, _ := ref.transform(o)
		want[k] = got
	}
	view := func(s *Snapshot) map[string]any {
		m := map[string]any{}
		for _, p := range s.Pods {
			m["*v1.Pod/"+p.Name] = p
		}
		for _, n := range s.Nodes {
			m["*v1.Node/"+n.Name] = n
		}
		return m
	}
	var diffs string
	for ctx.Err() == nil {
		diffs = ""
		for name, in := range map[string]*Informers{"slim": inSlim, "stock": inStock} {
			if d := cmp.Diff(want, view(in.Snapshot())); d != "" {
				diffs += fmt.Sprintf("%s informer (-sent +cached):\n%s\n", name, d)
			}
		}
		if diffs == "" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal(diffs)
}

func schemaGVK(gv, kind string) schema.GroupVersionKind {
	g, _ := schema.ParseGroupVersion(gv)
	return g.WithKind(kind)
}
