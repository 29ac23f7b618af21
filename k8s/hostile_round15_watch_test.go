package k8s

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// Hostile round 15: watch streams of pods and nodes served over HTTP to
// the daemon's own slim client (NewSlimClient), against the same bytes
// decoded by a client with client-go's stock codecs.

// r15Pod is a pod whose every kept field is set, padded with pad bytes of
// fields the slim decoder skips (an annotation, an env var), so that its
// frame is as large as wanted.
func r15Pod(i, pad int) *corev1.Pod {
	rp := corev1.ContainerRestartPolicyAlways
	del := metav1.Unix(int64(2000+i), 0)
	p := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("p-%d", i), Namespace: "ns", UID: types.UID(fmt.Sprintf("uid-%d", i)),
			ResourceVersion: fmt.Sprint(100 + i), CreationTimestamp: metav1.Unix(int64(1000+i), 0),
			Labels:      map[string]string{"app": fmt.Sprintf("a%d", i), "k": strings.Repeat("v", i%7)},
			Annotations: map[string]string{"pad": strings.Repeat(string(rune('a'+i%26)), pad)},
		},
		Spec: corev1.PodSpec{
			NodeName: fmt.Sprintf("node-%d", i%3), HostNetwork: i%4 == 1,
			Containers: []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(8000 + i), Protocol: corev1.ProtocolTCP}},
				Env: []corev1.EnvVar{{Name: "X", Value: strings.Repeat("z", pad/2)}}}},
			InitContainers: []corev1.Container{{Name: "side", RestartPolicy: &rp, Ports: []corev1.ContainerPort{{ContainerPort: int32(9000 + i), Protocol: corev1.ProtocolUDP}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: fmt.Sprintf("10.1.%d.%d", i/250, i%250+1),
			PodIPs: []corev1.PodIP{{IP: fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)}, {IP: fmt.Sprintf("fd00::%x", i+1)}}},
	}
	if i%5 == 2 {
		p.DeletionTimestamp = &del
	}
	return p
}

func r15Node(i, pad int) *corev1.Node {
	return &corev1.Node{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i), UID: types.UID(fmt.Sprintf("nuid-%d", i)), ResourceVersion: fmt.Sprint(500 + i),
			CreationTimestamp: metav1.Unix(int64(3000+i), 0), Labels: map[string]string{"zone": fmt.Sprintf("z%d", i)}},
		Spec: corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.244.%d.0/24", i), PodCIDRs: []string{fmt.Sprintf("10.244.%d.0/24", i), fmt.Sprintf("fd01:%x::/64", i+1)}},
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.0.0.%d", i+1)}, {Type: corev1.NodeHostName, Address: fmt.Sprintf("node-%d", i)}},
			Images:    []corev1.ContainerImage{{Names: []string{strings.Repeat("i", pad)}}},
		},
	}
}

// r15Event is one event to serve: typ and obj, or raw frame bytes.
type r15Event struct {
	typ string
	obj runtime.Object
}

// r15Stream encodes events as the API server does for the media type:
// protobuf (length-delimited WatchEvents whose objects are protobuf) or
// JSON (newline-free concatenated WatchEvents).
func r15Stream(t testing.TB, protobufStream bool, events []r15Event) []byte {
	t.Helper()
	var out bytes.Buffer
	if protobufStream {
		frames := protobuf.LengthDelimitedFramer.NewFrameWriter(&out)
		es := protobuf.NewRawSerializer(scheme.Scheme, scheme.Scheme)
		for _, e := range events {
			if err := es.Encode(&metav1.WatchEvent{Type: e.typ, Object: runtime.RawExtension{Raw: encodeProtobuf(t, e.obj)}}, frames); err != nil {
				t.Fatal(err)
			}
		}
		return out.Bytes()
	}
	js := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, json.SerializerOptions{})
	for _, e := range events {
		var ob bytes.Buffer
		if err := js.Encode(e.obj, &ob); err != nil {
			t.Fatal(err)
		}
		if err := js.Encode(&metav1.WatchEvent{Type: e.typ, Object: runtime.RawExtension{Raw: ob.Bytes()}}, &out); err != nil {
			t.Fatal(err)
		}
	}
	return out.Bytes()
}

// r15Server serves stream to every watch, in chunks of chunk bytes each
// flushed (a frame split across reads), with the content type; a list is
// answered with an empty list of the watched kind.
func r15Server(t testing.TB, contentType string, stream []byte, chunk int) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") != "true" {
			var list runtime.Object = &corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}, ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
			if strings.Contains(r.URL.Path, "nodes") {
				list = &corev1.NodeList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "NodeList"}, ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
			}
			w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
			w.Write(encodeProtobuf(t, list))
			return
		}
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(200)
		fl := w.(http.Flusher)
		for b := stream; len(b) > 0; {
			n := min(chunk, len(b))
			w.Write(b[:n])
			fl.Flush()
			b = b[n:]
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func r15Kubeconfig(t testing.TB, url string) string {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, url)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// r15Clients are the daemon's slim client and a stock one (client-go's
// codecs, the daemon's other settings) for the server.
func r15Clients(t testing.TB, url string) (slim, stock corev1client.CoreV1Interface) {
	kc := r15Kubeconfig(t, url)
	slim, err := NewSlimClient(kc, "r15")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	builtinConfig(cfg, "r15")
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return slim, cs.CoreV1()
}

type r15Got struct {
	typ watch.EventType
	obj runtime.Object
}

// r15Watch watches pods (or nodes) with c and keeps every event until
// the stream ends, or 5 s pass.
func r15Watch(t testing.TB, c corev1client.CoreV1Interface, nodes bool) []r15Got {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var w watch.Interface
	var err error
	if nodes {
		w, err = c.Nodes().Watch(ctx, metav1.ListOptions{})
	} else {
		w, err = c.Pods("").Watch(ctx, metav1.ListOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var all []r15Got
	for {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				return all
			}
			all = append(all, r15Got{e.Type, e.Object})
		case <-ctx.Done():
			t.Fatalf("watch did not end; %d events", len(all))
		}
	}
}

// r15View is what the daemon keeps of a decoded object.
func r15View(o runtime.Object) runtime.Object {
	switch o := o.(type) {
	case *corev1.Pod:
		v := slimView(o)
		v.TypeMeta = metav1.TypeMeta{}
		// The slim client decodes an admitted pod to its record (see
		// sameSlimPod, which holds it to that).
		if rec := recordOf(o); rec != nil {
			return rec
		}
		return v
	case *corev1.Node:
		n := o.DeepCopy()
		trimNode(n)
		if v, ok := o.Annotations[metav1.InitialEventsAnnotationKey]; ok {
			n.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: v}
		}
		n.TypeMeta = metav1.TypeMeta{}
		return n
	case *corev1.PodList:
		l := &corev1.PodList{ListMeta: o.ListMeta}
		for i := range o.Items {
			v := slimView(&o.Items[i]) // a list's pods stay corev1.Pods
			v.TypeMeta = metav1.TypeMeta{}
			l.Items = append(l.Items, *v)
		}
		return l
	}
	return o
}

// r15Compare serves events and asserts the slim client's events equal
// the stock client's and, for pods and nodes, what was sent.
func r15Compare(t *testing.T, protobufStream bool, chunk int, nodes bool, events []r15Event) {
	t.Helper()
	ct := runtime.ContentTypeProtobuf + ";stream=watch"
	if !protobufStream {
		ct = runtime.ContentTypeJSON
	}
	srv := r15Server(t, ct, r15Stream(t, protobufStream, events), chunk)
	slim, stock := r15Clients(t, srv.URL)
	got, want := r15Watch(t, slim, nodes), r15Watch(t, stock, nodes)
	if len(got) != len(want) {
		t.Fatalf("slim client: %d events, stock: %d (sent %d)", len(got), len(want), len(events))
	}
	for i := range want {
		if got[i].typ != want[i].typ {
			t.Fatalf("event %d: slim %s, stock %s", i, got[i].typ, want[i].typ)
		}
		g, w := r15View(got[i].obj), r15View(want[i].obj)
		if diff := cmp.Diff(w, g); diff != "" {
			t.Fatalf("event %d (%s) (-stock +slim):\n%s", i, got[i].typ, diff)
		}
		if i < len(events) {
			if sent := r15View(events[i].obj); fmt.Sprintf("%T", sent) == fmt.Sprintf("%T", g) {
				if _, ok := sent.(*metav1.Status); !ok {
					if diff := cmp.Diff(sent, g); diff != "" {
						t.Fatalf("event %d (%s) (-sent +slim):\n%s", i, got[i].typ, diff)
					}
				}
			}
		}
	}
}

// TestHostileRound15WatchSizes: pods of very different sizes back to
// back (tiny after huge, huge after tiny, past the stream decoder's 1 KiB
// buffer and its doublings), split across reads, then a bookmark and an
// ERROR; every event is kept until the stream ends.
func TestHostileRound15WatchSizes(t *testing.T) {
	pads := []int{0, 3000, 0, 70000, 10, 1 << 20, 0, 900, 1000, 1010, 2030, 0, 300000, 5}
	var events []r15Event
	for i, pad := range pads {
		events = append(events, r15Event{[]string{"ADDED", "MODIFIED", "DELETED"}[i%3], r15Pod(i, pad)})
	}
	events = append(events,
		r15Event{"BOOKMARK", &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{ResourceVersion: "999", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}},
		r15Event{"ERROR", &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: "Failure", Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"}},
	)
	for _, chunk := range []int{1 << 20, 7} {
		for _, pb := range []bool{true, false} {
			t.Run(fmt.Sprintf("chunk%d/protobuf=%v", chunk, pb), func(t *testing.T) { r15Compare(t, pb, chunk, false, events) })
		}
	}
}

// TestHostileRound15WatchNodes: as TestHostileRound15WatchSizes, nodes.
func TestHostileRound15WatchNodes(t *testing.T) {
	pads := []int{0, 5000, 0, 1 << 19, 1, 0, 1023, 1024, 2048}
	var events []r15Event
	for i, pad := range pads {
		events = append(events, r15Event{[]string{"ADDED", "MODIFIED", "DELETED"}[i%3], r15Node(i, pad)})
	}
	events = append(events, r15Event{"BOOKMARK", &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{ResourceVersion: "999", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}})
	for _, pb := range []bool{true, false} {
		t.Run(fmt.Sprintf("protobuf=%v", pb), func(t *testing.T) { r15Compare(t, pb, 13, true, events) })
	}
}
