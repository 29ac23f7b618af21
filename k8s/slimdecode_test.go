package k8s

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	restclientwatch "k8s.io/client-go/rest/watch"
	"sigs.k8s.io/randfill"
)

// protobufCodec is the API server's protobuf serializer: what encodes the
// bytes these tests decode, and the decoder the slim one is held to.
var protobufCodec = protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)

// randomPods fills pods with random values in every field, slices and
// maps of up to three elements, a quarter of pointers nil.
func randomPods(seed uint64) *randfill.Filler {
	return randfill.NewWithSeed(int64(seed)).NilChance(.25).NumElements(0, 3).Funcs(
		// Kinds whose random bytes do not encode.
		func(q *resource.Quantity, c randfill.Continue) {
			*q = *resource.NewQuantity(c.Int63n(1000), resource.DecimalSI)
		},
		func(x *intstr.IntOrString, c randfill.Continue) { *x = intstr.FromInt32(c.Int31()) },
		func(r *runtime.RawExtension, c randfill.Continue) { r.Raw = []byte(`{}`) },
		func(t *metav1.Time, c randfill.Continue) { t.Time = metav1.Unix(c.Int63n(1<<33), 0).Time },
		func(t *metav1.MicroTime, c randfill.Continue) { t.Time = metav1.Unix(c.Int63n(1<<33), 0).Time },
		// Mostly the annotation a WatchList's bookmark carries.
		func(m *metav1.ObjectMeta, c randfill.Continue) {
			c.FillNoCustom(m)
			if c.Bool() {
				if m.Annotations == nil {
					m.Annotations = map[string]string{}
				}
				m.Annotations[metav1.InitialEventsAnnotationKey] = []string{"true", "false", ""}[c.Intn(3)]
			}
		},
	)
}

func encodeProtobuf(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := protobufCodec.Encode(obj, &buf); err != nil {
		t.Fatalf("encode %T: %v", obj, err)
	}
	return buf.Bytes()
}

// slimView is what the daemon reads of a decoded pod: trimPod's trim of a copy,
// with the annotation the reflector reads.
func slimView(p *corev1.Pod) *corev1.Pod {
	s := p.DeepCopy()
	trimPod(s)
	if v, ok := p.Annotations[metav1.InitialEventsAnnotationKey]; ok {
		s.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: v}
	}
	return s
}

// sameSlimPod compares what the slim decoder made of a pod (got) with
// what the generated decoder made of the same bytes (want), and returns
// the difference, "" for none. An admitted pod without the WatchList
// annotation must be decoded to its record, the very record the
// transform makes of want; any other to a corev1.Pod whose slimView is
// want's, for the transform to take.
func sameSlimPod(want *corev1.Pod, got runtime.Object) string {
	wantRec := recordOf(want)
	switch g := got.(type) {
	case *Pod:
		if wantRec == nil {
			return "decoded to a record, but the pod is invalid or a bookmark"
		}
		return cmp.Diff(wantRec, g)
	case *corev1.Pod:
		if wantRec != nil {
			return "decoded to a corev1.Pod, but the pod is admitted: want its record"
		}
		return cmp.Diff(slimView(want), slimView(g))
	default:
		return fmt.Sprintf("decoded a %T", got)
	}
}

// recordOf is the record the slim decoder must decode p to, made on the
// transform's road from a copy of p; nil when it must decode p whole: p
// fails admission, or carries the WatchList annotation.
func recordOf(p *corev1.Pod) *Pod {
	if _, bookmark := p.Annotations[metav1.InitialEventsAnnotationKey]; bookmark {
		return nil
	}
	if rec, errs := admitPod(slimView(p)); len(errs) == 0 {
		return rec
	}
	return nil
}

// makeValid turns a random pod into one Admit accepts, keeping its
// containers (their names, ports and restart policies random no more).
func makeValid(pod *corev1.Pod, i int) {
	pod.Name, pod.Namespace, pod.Spec.NodeName = fmt.Sprintf("p-%d", i), "ns", "node-1"
	pod.Labels = map[string]string{"app": fmt.Sprintf("a%d", i%3)}
	if i%4 == 0 {
		pod.Labels = nil
	}
	pod.Annotations = nil
	pod.Status.PodIP, pod.Status.PodIPs = fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), nil
	always := corev1.ContainerRestartPolicyAlways
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for k := range cs {
			cs[k].Ports = []corev1.ContainerPort{{Name: fmt.Sprintf("port-%d", k), ContainerPort: int32(1000 + k), Protocol: corev1.ProtocolTCP}}
			cs[k].RestartPolicy = nil
			if k%2 == 0 {
				cs[k].RestartPolicy = &always
			}
		}
	}
}

// TestSlimPodDecoderIsTheGenerated holds the slim decoder to the
// generated one on random pods: what the daemon reads of each (trimPod's
// fields, the WatchList annotation) is equal, and the slim pod holds
// nothing more.
func TestSlimPodDecoderIsTheGenerated(t *testing.T) {
	slim := slimSerializer{protobufCodec}
	seed := rand.Uint64()
	f := randomPods(seed)
	records := 0
	for i := range 3000 {
		var pod corev1.Pod
		f.Fill(&pod)
		if i%2 == 0 {
			makeValid(&pod, i) // decoded to its record
		}
		pod.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
		data := encodeProtobuf(t, &pod)

		want, _, err := protobufCodec.Decode(data, nil, nil)
		if err != nil {
			t.Fatalf("seed %d, pod %d: the generated decoder: %v", seed, i, err)
		}
		// Decoded twice: into nothing (a record, or a pod for the
		// transform), and into a pod already filled.
		got, gvk, err := slim.Decode(data, nil, nil)
		if err != nil {
			t.Fatalf("seed %d, pod %d: %v", seed, i, err)
		}
		if *gvk != corev1.SchemeGroupVersion.WithKind("Pod") {
			t.Fatalf("seed %d, pod %d: kind %v", seed, i, gvk)
		}
		wantPod := want.(*corev1.Pod)
		if diff := sameSlimPod(wantPod, got); diff != "" {
			t.Fatalf("seed %d, pod %d: the slim decoder differs (-generated +slim):\n%s", seed, i, diff)
		}
		if _, ok := got.(*Pod); ok {
			records++
		}
		into := pod.DeepCopy()
		if got2, _, err := slim.Decode(data, nil, into); err != nil || got2 != into {
			t.Fatalf("seed %d, pod %d: decode into a pod: %v (%T)", seed, i, err, got2)
		}
		for _, got := range []*corev1.Pod{into} {
			if diff := cmp.Diff(slimView(wantPod), slimView(got)); diff != "" {
				t.Fatalf("seed %d, pod %d: the slim decoder differs (-generated +slim):\n%s", seed, i, diff)
			}
			// Nothing else: the slim pod is its own slimView (its type
			// meta set as the generated decoder sets it).
			bare := slimView(got)
			bare.TypeMeta = got.TypeMeta
			if diff := cmp.Diff(bare, got); diff != "" {
				t.Fatalf("seed %d, pod %d: the slim pod holds more than the daemon reads (-read +held):\n%s", seed, i, diff)
			}
		}
	}
	if records < 1000 || records == 3000 {
		t.Fatalf("%d of 3000 pods decoded to records: the test compares one road only", records)
	}
}

// TestSlimNodeDecoderIsTheGenerated does the same for nodes: what
// trimNode reads of each, and every address (trimNode picks).
func TestSlimNodeDecoderIsTheGenerated(t *testing.T) {
	slim := slimSerializer{protobufCodec}
	seed := rand.Uint64()
	f := randomPods(seed)
	view := func(n *corev1.Node) *corev1.Node {
		s := n.DeepCopy()
		trimNode(s)
		if v, ok := n.Annotations[metav1.InitialEventsAnnotationKey]; ok {
			s.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: v}
		}
		s.Status.Addresses = n.Status.Addresses
		return s
	}
	for i := range 2000 {
		var node corev1.Node
		f.Fill(&node)
		node.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}
		data := encodeProtobuf(t, &node)
		want, _, err := protobufCodec.Decode(data, nil, nil)
		if err != nil {
			t.Fatalf("seed %d, node %d: the generated decoder: %v", seed, i, err)
		}
		got, _, err := slim.Decode(data, nil, nil)
		if err != nil {
			t.Fatalf("seed %d, node %d: %v", seed, i, err)
		}
		into := node.DeepCopy()
		if got2, _, err := slim.Decode(data, nil, into); err != nil || got2 != into {
			t.Fatalf("seed %d, node %d: decode into a node: %v (%T)", seed, i, err, got2)
		}
		for _, got := range []*corev1.Node{got.(*corev1.Node), into} {
			if diff := cmp.Diff(view(want.(*corev1.Node)), view(got)); diff != "" {
				t.Fatalf("seed %d, node %d: the slim decoder differs (-generated +slim):\n%s", seed, i, diff)
			}
			bare := view(got)
			bare.TypeMeta = got.TypeMeta
			if diff := cmp.Diff(bare, got); diff != "" {
				t.Fatalf("seed %d, node %d: the slim node holds more than the daemon reads (-read +held):\n%s", seed, i, diff)
			}
		}
	}
	// A list.
	list := &corev1.NodeList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "NodeList"}}
	list.ResourceVersion = "99"
	for range 20 {
		var node corev1.Node
		f.Fill(&node)
		list.Items = append(list.Items, node)
	}
	data := encodeProtobuf(t, list)
	want, _, err := protobufCodec.Decode(data, nil, &corev1.NodeList{})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := slim.Decode(data, nil, &corev1.NodeList{})
	if err != nil {
		t.Fatal(err)
	}
	w, g := want.(*corev1.NodeList), got.(*corev1.NodeList)
	if diff := cmp.Diff(w.ListMeta, g.ListMeta); diff != "" || len(w.Items) != len(g.Items) {
		t.Fatalf("list: %d nodes, want %d; metadata (-generated +slim):\n%s", len(g.Items), len(w.Items), diff)
	}
	for i := range w.Items {
		if diff := cmp.Diff(view(&w.Items[i]), view(&g.Items[i])); diff != "" {
			t.Fatalf("list node %d (-generated +slim):\n%s", i, diff)
		}
	}
}

// TestSlimPodDecoderLists decodes pod lists as the generated decoder
// does, and leaves every other kind to it.
func TestSlimPodDecoderLists(t *testing.T) {
	slim := slimSerializer{protobufCodec}
	f := randomPods(rand.Uint64())
	list := &corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}}
	list.ResourceVersion, list.Continue = "12345", "next"
	for range 50 {
		var pod corev1.Pod
		f.Fill(&pod)
		list.Items = append(list.Items, pod)
	}
	data := encodeProtobuf(t, list)
	want, _, err := protobufCodec.Decode(data, nil, &corev1.PodList{})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := slim.Decode(data, nil, &corev1.PodList{Items: make([]corev1.Pod, 3)})
	if err != nil {
		t.Fatal(err)
	}
	w, g := want.(*corev1.PodList), got.(*corev1.PodList)
	if diff := cmp.Diff(w.ListMeta, g.ListMeta); diff != "" {
		t.Fatalf("list metadata (-generated +slim):\n%s", diff)
	}
	if len(w.Items) != len(g.Items) {
		t.Fatalf("%d pods, want %d", len(g.Items), len(w.Items))
	}
	for i := range w.Items {
		if diff := cmp.Diff(slimView(&w.Items[i]), slimView(&g.Items[i])); diff != "" {
			t.Fatalf("pod %d (-generated +slim):\n%s", i, diff)
		}
	}

	// Other kinds, of core/v1 and of other groups, are the generated
	// decoder's, whole.
	others := []runtime.Object{
		&metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: "Failure", Message: "too old", Code: 410, Reason: metav1.StatusReasonExpired},
		&corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: "a", Annotations: map[string]string{"x": "y"}}},
	}
	for _, obj := range others {
		data := encodeProtobuf(t, obj)
		want, _, err := protobufCodec.Decode(data, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := slim.Decode(data, nil, nil)
		if err != nil {
			t.Fatalf("%T: %v", obj, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("%T (-generated +slim):\n%s", obj, diff)
		}
	}
}

// TestSlimPodDecoderMangled decodes pods cut short and with bytes
// changed: it never panics, and whenever the generated decoder reads
// such a pod, the slim one reads the same of it.
func TestSlimPodDecoderMangled(t *testing.T) {
	slim := slimSerializer{protobufCodec}
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 1))
	f := randomPods(seed)
	agreed := 0
	for i := range 2000 {
		var pod corev1.Pod
		f.Fill(&pod)
		pod.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
		data := encodeProtobuf(t, &pod)
		switch i % 3 {
		case 0:
			data = data[:len(protobufPrefix)+r.IntN(len(data)-len(protobufPrefix))]
		default:
			for range 1 + r.IntN(3) {
				data[len(protobufPrefix)+r.IntN(len(data)-len(protobufPrefix))] = byte(r.Uint32())
			}
		}
		want, _, werr := protobufCodec.Decode(data, nil, nil)
		got, _, gerr := slim.Decode(data, nil, nil)
		wantPod, ok := want.(*corev1.Pod)
		if werr != nil || !ok {
			continue
		}
		if gerr != nil {
			t.Fatalf("seed %d, pod %d: the generated decoder reads it, the slim one: %v", seed, i, gerr)
		}
		if diff := sameSlimPod(wantPod, got); diff != "" {
			t.Fatalf("seed %d, pod %d: the slim decoder differs (-generated +slim):\n%s", seed, i, diff)
		}
		agreed++
	}
	if agreed < 100 {
		t.Fatalf("only %d mangled pods were read by the generated decoder: the test compares too few", agreed)
	}
}

// The codecs replace the protobuf decoder, and only it.
func TestSlimPodCodecs(t *testing.T) {
	codecs := slimCodecs{scheme.Codecs.WithoutConversion()}
	seen := false
	for _, info := range codecs.SupportedMediaTypes() {
		_, isSlim := info.Serializer.(slimSerializer)
		if isSlim != (info.MediaType == runtime.ContentTypeProtobuf) {
			t.Errorf("%s: slim decoder %v", info.MediaType, isSlim)
		}
		seen = seen || isSlim
	}
	if !seen {
		t.Fatal("no protobuf media type")
	}
	// The watch event decoder too, in a copy: the codec factory's own
	// stream serializer, which every other client shares, is unchanged.
	for i, info := range codecs.SupportedMediaTypes() {
		shared := scheme.Codecs.WithoutConversion().SupportedMediaTypes()[i]
		if info.MediaType != runtime.ContentTypeProtobuf {
			continue
		}
		if _, ok := info.StreamSerializer.Serializer.(watchEventSerializer); !ok {
			t.Errorf("protobuf stream serializer %T", info.StreamSerializer.Serializer)
		}
		if _, ok := shared.StreamSerializer.Serializer.(watchEventSerializer); ok || shared.StreamSerializer == info.StreamSerializer {
			t.Error("the shared codec factory's stream serializer was changed")
		}
	}
	// A watch event's pod reaches the reflector as its record when it is
	// admitted, and otherwise with its kind cleared, as the generated
	// client's pods do.
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: "p", ResourceVersion: "7"}}
	dec, _, _, err := runtime.NewClientNegotiator(codecs, corev1.SchemeGroupVersion).StreamDecoder(runtime.ContentTypeProtobuf, nil)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := runtime.Decode(dec, encodeProtobuf(t, pod))
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := obj.(*Pod); !ok || got.Name != "p" || got.Namespace != "default" || got.ResourceVersion != "7" {
		t.Fatalf("decoded %T %+v, want the record of default/p", obj, obj)
	}
	pod.Name = "P_" // not a DNS subdomain: for the transform to refuse
	obj, err = runtime.Decode(dec, encodeProtobuf(t, pod))
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := obj.(*corev1.Pod); !ok || got.Name != "P_" || got.ResourceVersion != "7" || got.GetObjectKind().GroupVersionKind() != (schema.GroupVersionKind{}) {
		t.Fatalf("decoded %T %+v", obj, obj)
	}
}

func BenchmarkDecodePod(b *testing.B) {
	pod := benchmarkAPIPod()
	data := encodeProtobuf(b, pod)
	b.Run("generated", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := protobufCodec.Decode(data, nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("slim", func(b *testing.B) {
		slim := slimSerializer{protobufCodec}
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := slim.Decode(data, nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchmarkAPIPod is a pod as the API server sends it for a Deployment's
// replica: defaulted, with managed fields, a service account volume and
// the status of its one container.
func benchmarkAPIPod() *corev1.Pod {
	grace, deadline := int64(30), int64(300)
	always := true
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-7d9c6b5f4-x2k8q", GenerateName: "web-7d9c6b5f4-", Namespace: "shop",
			UID: "0b7c9a36-3c1e-4a53-9f1e-6d1b2f0c9a11", ResourceVersion: "48213377",
			CreationTimestamp: metav1.Unix(1_760_000_000, 0),
			Labels:            map[string]string{"app": "web", "pod-template-hash": "7d9c6b5f4", "tier": "frontend"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9c6b5f4",
				UID: "5f0d2c1e-8b3a-4c7d-9e6f-1a2b3c4d5e6f", Controller: &always, BlockOwnerDeletion: &always}},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
					FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: bytes.Repeat([]byte(`{"f:metadata":{"f:labels":{}}}`), 20)}},
				{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Subresource: "status",
					FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: bytes.Repeat([]byte(`{"f:status":{"f:conditions":{}}}`), 30)}},
			},
		},
		Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{{Name: "kube-api-access-abcde", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &deadline}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
						Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				}}}}},
			Containers: []corev1.Container{{
				Name: "web", Image: "registry.example/shop/web:1.42.0", ImagePullPolicy: corev1.PullIfNotPresent,
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
				Env:   []corev1.EnvVar{{Name: "MODE", Value: "production"}, {Name: "CACHE", Value: "redis://cache:6379"}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}},
				VolumeMounts:             []corev1.VolumeMount{{Name: "kube-api-access-abcde", ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}},
				ReadinessProbe:           &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}}},
				TerminationMessagePath:   "/dev/termination-log",
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
			RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: &grace, DNSPolicy: corev1.DNSClusterFirst,
			ServiceAccountName: "default", NodeName: "node-17", SchedulerName: "default-scheduler",
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &deadline},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &deadline},
			},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, HostIP: "10.0.3.17", HostIPs: []corev1.HostIP{{IP: "10.0.3.17"}},
			PodIP: "10.244.17.23", PodIPs: []corev1.PodIP{{IP: "10.244.17.23"}}, QOSClass: corev1.PodQOSBurstable,
			StartTime: &metav1.Time{Time: metav1.Unix(1_760_000_002, 0).Time},
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Unix(1_760_000_010, 0)},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Unix(1_760_000_010, 0)},
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Unix(1_760_000_002, 0)},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Unix(1_760_000_000, 0)},
			},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "web", Ready: true, RestartCount: 0, Image: "registry.example/shop/web:1.42.0",
				ImageID:     "registry.example/shop/web@sha256:4b1d2c3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c",
				ContainerID: "containerd://9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a0",
				State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Unix(1_760_000_005, 0)}}}},
		},
	}
}

// TestTransformPodIsItsRecord holds the informers' transform, which trims
// the pod it is given in place, to the record of a copy made field by
// field, on random pods: the same record, valid or invalid alike.
func TestTransformPodIsItsRecord(t *testing.T) {
	in := NewInformers(fake.NewClientset(), InformerOptions{})
	seed := rand.Uint64()
	f := randomPods(seed)
	always := corev1.ContainerRestartPolicyAlways
	// reference copies what a record is made of, and nothing else.
	reference := func(p *corev1.Pod) *corev1.Pod {
		containers := func(cs []corev1.Container) []corev1.Container {
			var out []corev1.Container
			for _, c := range cs {
				out = append(out, corev1.Container{Name: c.Name, Ports: slices.Clone(c.Ports), RestartPolicy: c.RestartPolicy})
			}
			return out
		}
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
				Labels: maps.Clone(p.Labels), CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp.DeepCopy()},
			Spec: corev1.PodSpec{NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork,
				Containers: containers(p.Spec.Containers), InitContainers: containers(p.Spec.InitContainers)},
			Status: corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: slices.Clone(p.Status.PodIPs)},
		}
	}
	invalid := 0
	for i := range 1000 {
		var pod corev1.Pod
		f.Fill(&pod)
		for j := range pod.Spec.InitContainers {
			if j%2 == 0 {
				pod.Spec.InitContainers[j].RestartPolicy = &always // a sidecar
			}
		}
		if i%2 == 0 { // a valid pod, now and then
			pod.Name, pod.Namespace, pod.Spec.NodeName, pod.Labels = fmt.Sprintf("p-%d", i), "ns", "node-1", map[string]string{"app": "a"}
			pod.Status.PodIP, pod.Status.PodIPs = "10.0.0.1", nil
			for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
				for k := range cs {
					cs[k].Ports = []corev1.ContainerPort{{Name: fmt.Sprintf("port-%d", k), ContainerPort: int32(1000 + k), Protocol: corev1.ProtocolTCP}}
				}
			}
		}
		want := reference(&pod)
		wantErrs := Admit(want)
		got, err := in.transform(pod.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		rec := got.(*Pod)
		if diff := cmp.Diff(NewPod(want), rec); diff != "" {
			t.Fatalf("seed %d, pod %d: the record (-from a copy +transformed):\n%s", seed, i, diff)
		}
		in.mu.Lock()
		gotInvalid := in.invalid[rec]
		in.mu.Unlock()
		if gotInvalid != (len(wantErrs) > 0) {
			t.Fatalf("seed %d, pod %d: invalid %v, but the copy's errors are %v", seed, i, gotInvalid, wantErrs)
		}
		if gotInvalid {
			invalid++
		}
	}
	if invalid == 0 || invalid == 1000 {
		t.Fatalf("%d of 1000 pods invalid: the test compares one kind only", invalid)
	}
}

// BenchmarkWatchStreamPods decodes and transforms a watch stream of 1,000
// pods as the informers do when they list (WatchList), with the
// generated codecs and with the slim ones: one op is the whole stream.
func BenchmarkWatchStreamPods(b *testing.B) {
	const pods = 1000
	var stream bytes.Buffer
	frames := protobuf.LengthDelimitedFramer.NewFrameWriter(&stream)
	events := protobuf.NewRawSerializer(scheme.Scheme, scheme.Scheme)
	for i := range pods {
		pod := benchmarkAPIPod()
		pod.Name = fmt.Sprintf("web-7d9c6b5f4-%05d", i)
		pod.Status.PodIP = fmt.Sprintf("10.244.%d.%d", i/250, i%250+1)
		pod.Status.PodIPs = []corev1.PodIP{{IP: pod.Status.PodIP}}
		ev := &metav1.WatchEvent{Type: "ADDED", Object: runtime.RawExtension{Raw: encodeProtobuf(b, pod)}}
		if err := events.Encode(ev, frames); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name   string
		codecs runtime.NegotiatedSerializer
	}{
		{"generated", scheme.Codecs.WithoutConversion()},
		{"slim", slimCodecs{scheme.Codecs.WithoutConversion()}},
	} {
		b.Run(c.name, func(b *testing.B) {
			in := NewInformers(fake.NewClientset(), InformerOptions{})
			objects, eventSerializer, framer, err := runtime.NewClientNegotiator(c.codecs, corev1.SchemeGroupVersion).StreamDecoder(runtime.ContentTypeProtobuf, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(stream.Len()))
			for b.Loop() {
				frames := framer.NewFrameReader(io.NopCloser(bytes.NewReader(stream.Bytes())))
				dec := restclientwatch.NewDecoder(streaming.NewDecoder(frames, eventSerializer), objects)
				n := 0
				for {
					_, obj, err := dec.Decode()
					if err == io.EOF {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					if _, err := in.transform(obj); err != nil {
						b.Fatal(err)
					}
					n++
				}
				if n != pods {
					b.Fatalf("%d pods decoded", n)
				}
			}
		})
	}
}

// TestSlimWatchStreamIsTheGenerated decodes one watch stream of random
// pods, a bookmark and an error with the generated codecs and the slim
// ones, keeping every object until the stream ends: the slim decoder
// reads each event's object in the frame buffer, which the next frame
// overwrites, so anything it kept of those bytes would show here.
func TestSlimWatchStreamIsTheGenerated(t *testing.T) {
	seed := rand.Uint64()
	f := randomPods(seed)
	var stream bytes.Buffer
	frames := protobuf.LengthDelimitedFramer.NewFrameWriter(&stream)
	events := protobuf.NewRawSerializer(scheme.Scheme, scheme.Scheme)
	send := func(typ string, obj runtime.Object) {
		if err := events.Encode(&metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: encodeProtobuf(t, obj)}}, frames); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 300 {
		var pod corev1.Pod
		f.Fill(&pod)
		if i%2 == 0 {
			// Decoded to records, which must share nothing with the
			// scratch pod the next one is read into either.
			makeValid(&pod, i)
		}
		pod.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
		send([]string{"ADDED", "MODIFIED", "DELETED"}[i%3], &pod)
	}
	send("BOOKMARK", &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{
		ResourceVersion: "1234", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true", "other": "x"}}})
	send("ERROR", &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: "Failure", Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})

	type event struct {
		typ string
		obj runtime.Object
	}
	decodeAll := func(codecs runtime.NegotiatedSerializer) []event {
		objects, eventSerializer, framer, err := runtime.NewClientNegotiator(codecs, corev1.SchemeGroupVersion).StreamDecoder(runtime.ContentTypeProtobuf, nil)
		if err != nil {
			t.Fatal(err)
		}
		dec := restclientwatch.NewDecoder(streaming.NewDecoder(framer.NewFrameReader(io.NopCloser(bytes.NewReader(stream.Bytes()))), eventSerializer), objects)
		var all []event
		for {
			typ, obj, err := dec.Decode()
			if err == io.EOF {
				return all
			}
			if err != nil {
				t.Fatalf("seed %d, event %d: %v", seed, len(all), err)
			}
			all = append(all, event{string(typ), obj})
		}
	}
	want := decodeAll(scheme.Codecs.WithoutConversion())
	got := decodeAll(slimCodecs{scheme.Codecs.WithoutConversion()})
	if len(got) != len(want) || len(want) != 302 {
		t.Fatalf("%d events decoded, the generated codecs %d, sent 302", len(got), len(want))
	}
	for i := range want {
		if got[i].typ != want[i].typ {
			t.Fatalf("event %d: type %q, want %q", i, got[i].typ, want[i].typ)
		}
		w, g := want[i].obj, got[i].obj
		var diff string
		if wp, ok := w.(*corev1.Pod); ok {
			diff = sameSlimPod(wp, g)
		} else {
			diff = cmp.Diff(w, g)
		}
		if diff != "" {
			t.Fatalf("seed %d, event %d (-generated +slim):\n%s", seed, i, diff)
		}
	}
}

// TestWatchEventDecoderMangled decodes watch event frames cut short and
// with bytes changed: whenever the generated decoder reads one, the
// slim one reads the same type and object bytes.
func TestWatchEventDecoderMangled(t *testing.T) {
	events := protobuf.NewRawSerializer(scheme.Scheme, scheme.Scheme)
	slim := watchEventSerializer{events}
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 2))
	agreed := 0
	for i := range 5000 {
		raw := make([]byte, r.IntN(40))
		for j := range raw {
			raw[j] = byte(r.Uint32())
		}
		var buf bytes.Buffer
		if err := events.Encode(&metav1.WatchEvent{Type: []string{"ADDED", "BOOKMARK", ""}[i%3], Object: runtime.RawExtension{Raw: raw}}, &buf); err != nil {
			t.Fatal(err)
		}
		data := buf.Bytes()
		if i%2 == 0 && len(data) > 0 {
			data = data[:r.IntN(len(data))]
		} else if len(data) > 0 {
			data[r.IntN(len(data))] = byte(r.Uint32())
		}
		var want, got metav1.WatchEvent
		_, _, werr := events.Decode(data, nil, &want)
		_, _, gerr := slim.Decode(data, nil, &got)
		if werr != nil {
			continue
		}
		if gerr != nil {
			t.Fatalf("seed %d, event %d: the generated decoder reads it, the slim one: %v", seed, i, gerr)
		}
		if got.Type != want.Type || !bytes.Equal(got.Object.Raw, want.Object.Raw) {
			t.Fatalf("seed %d, event %d: slim %q %x, generated %q %x", seed, i, got.Type, got.Object.Raw, want.Type, want.Object.Raw)
		}
		agreed++
	}
	if agreed < 1000 {
		t.Fatalf("only %d mangled events were read by the generated decoder", agreed)
	}
}
