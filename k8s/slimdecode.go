package k8s

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// The informers' pods and nodes are decoded from the API server's
// protobuf straight into the few fields the daemon keeps (trimPod's,
// trimNode's). The generated decoder builds the whole object first:
// managed fields, volumes, environment, probes, the status of every
// container, a node's images. At 150k pods that is much of what the
// daemon allocates while it lists (docs/performance.md, "Round nine"),
// and all of it is garbage a moment later, when the transform trims the
// object. Every other kind, and an object sent as JSON, takes the usual
// decoder.
//
// The wire format is that of k8s.io/api/core/v1/generated.proto; the
// field numbers below are its. A field this decoder does not read is
// skipped by its wire type, unparsed: a malformed managed field, say,
// which the generated decoder would refuse, passes here unseen, as it
// would have been dropped by trimPod; so is a field it reads, sent with
// another wire type than its own, which the generated code refuses. It
// reads more than the generated decoder, then, never differently: every
// field it does read is read as the generated code reads it, so that of
// any bytes the generated decoder reads, this one reads the same
// (TestSlimPodDecoderIsTheGenerated, TestSlimNodeDecoderIsTheGenerated,
// TestSlimPodDecoderMangled; hostile round 15 showed the leniency on
// frames no API server sends, and it was kept).

// protobufPrefix starts every protobuf object the API server sends
// ("k8s\x00"), before its runtime.Unknown envelope.
var protobufPrefix = []byte{'k', '8', 's', 0}

// slimSerializer is the protobuf serializer, but for pods and nodes
// of core/v1 and their lists, which it decodes with decodeSlimPod and
// decodeSlimNode.
type slimSerializer struct {
	runtime.Serializer // the protobuf serializer, for everything else
}

// Decode decodes data as the protobuf serializer does (into, when it is
// of data's kind, is reset and filled), except that a Pod holds only
// what trimPod keeps and a Node what trimNode reads, and each the
// annotation that ends a WatchList's initial events
// (metav1.InitialEventsAnnotationKey), which the reflector reads.
func (s slimSerializer) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	gvk, raw, ok := unknownEnvelope(data)
	if !ok || gvk.Group != "" || gvk.Version != "v1" {
		return s.Serializer.Decode(data, defaults, into)
	}
	var obj runtime.Object
	var err error
	switch gvk.Kind {
	case "Pod":
		if into == nil {
			obj, ok, err = decodePodRecord(raw)
		} else {
			obj, ok, err = decodeSlim(raw, into, decodeSlimPod)
		}
	case "PodList":
		obj, ok, err = decodeSlim(raw, into, decodeSlimPodList)
	case "Node":
		obj, ok, err = decodeSlim(raw, into, decodeSlimNode)
	case "NodeList":
		obj, ok, err = decodeSlim(raw, into, decodeSlimNodeList)
	default:
		ok = false
	}
	if !ok {
		return s.Serializer.Decode(data, defaults, into)
	}
	if err != nil {
		return nil, &gvk, fmt.Errorf("decoding a %s: %w", gvk.Kind, err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return obj, &gvk, nil
}

// decodeSlim decodes raw with decode into into, reset, or into a new T
// when into is nil. ok is false when into is of another type.
func decodeSlim[T any, PT interface {
	*T
	runtime.Object
}](raw []byte, into runtime.Object, decode func([]byte, PT) error) (obj runtime.Object, ok bool, err error) {
	var t PT
	if into != nil {
		if t, ok = into.(PT); !ok || t == nil {
			return nil, false, nil
		}
		*t = *new(T)
	} else {
		t = new(T)
	}
	return t, true, decode(raw, t)
}

// decodePodRecord decodes a pod given nothing to decode into (a watch
// event's object; a Get or a list decodes into its own type) straight
// into its record (*Pod), admitted as the informers' transform
// admits a corev1.Pod (admitPod): a corev1.Pod struct is 1,240 bytes
// before its containers, and decoding each of a 150k-pod list into a new
// one only to copy a quarter of it out was a third of what the daemon
// allocated while it listed (docs/performance.md, "Round eleven"). The
// pod is read into a scratch corev1.Pod that the record shares nothing
// with, reused from pod to pod.
//
// Two kinds of pod are decoded whole into a new corev1.Pod, as before, for
// the transform to take: one that fails admission, so that the transform
// logs it and keeps it marked invalid, and one that carries the WatchList
// annotation (a bookmark), which the reflector reads.
func decodePodRecord(raw []byte) (runtime.Object, bool, error) {
	s := podScratches.Get().(*podScratch)
	defer podScratches.Put(s)
	p := s.reset()
	if err := decodeSlimPod(raw, p); err != nil {
		return nil, true, err
	}
	if len(p.Labels) == 0 {
		p.Labels = nil // as the generated decoder leaves a pod without labels
	}
	if len(p.Annotations) == 0 {
		if rec, errs := admitPod(p); len(errs) == 0 {
			return rec, true, nil
		}
	}
	return decodeSlim(raw, nil, decodeSlimPod)
}

// A podScratch is a corev1.Pod to decode into, with the labels map and
// container lists of its last pod kept for the next.
type podScratch struct {
	pod    corev1.Pod
	labels map[string]string
}

var podScratches = sync.Pool{New: func() any { return &podScratch{labels: map[string]string{}} }}

// reset empties the scratch pod for the next, keeping the capacity of its
// labels and container lists (what the record is made of is copied out:
// see NewPod).
func (s *podScratch) reset() *corev1.Pod {
	containers, inits := s.pod.Spec.Containers[:0], s.pod.Spec.InitContainers[:0]
	clear(s.labels)
	s.pod = corev1.Pod{}
	s.pod.Labels = s.labels
	s.pod.Spec.Containers, s.pod.Spec.InitContainers = containers, inits
	return &s.pod
}

// unknownEnvelope reads the runtime.Unknown that wraps a protobuf object
// (typeMeta = 1 {apiVersion = 1, kind = 2}, raw = 2): the object's kind
// and its bytes, not copied. ok is false when data is not one, or names
// no kind, or says its raw bytes are encoded (contentEncoding = 3): the
// protobuf serializer then decides, and says why it refuses.
func unknownEnvelope(data []byte) (gvk schema.GroupVersionKind, raw []byte, ok bool) {
	if !bytes.HasPrefix(data, protobufPrefix) {
		return gvk, nil, false
	}
	var apiVersion string
	r := protoReader{b: data[len(protobufPrefix):]}
	for !r.done() {
		num, wire, err := r.field()
		if err != nil {
			return gvk, nil, false
		}
		switch {
		case num == 1 && wire == wireBytes:
			tm, err := r.bytes()
			if err != nil {
				return gvk, nil, false
			}
			t := protoReader{b: tm}
			for !t.done() {
				num, wire, err := t.field()
				if err != nil {
					return gvk, nil, false
				}
				switch {
				case num == 1 && wire == wireBytes:
					apiVersion, err = t.str()
				case num == 2 && wire == wireBytes:
					gvk.Kind, err = t.str()
				default:
					err = t.skip(wire)
				}
				if err != nil {
					return gvk, nil, false
				}
			}
		case num == 2 && wire == wireBytes:
			if raw, err = r.bytes(); err != nil {
				return gvk, nil, false
			}
		case num == 3 && wire == wireBytes:
			enc, err := r.bytes()
			if err != nil || len(enc) > 0 {
				return gvk, nil, false
			}
		default:
			if err := r.skip(wire); err != nil {
				return gvk, nil, false
			}
		}
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil || gvk.Kind == "" {
		return gvk, nil, false
	}
	gvk.Group, gvk.Version = gv.Group, gv.Version
	return gvk, raw, true
}

// decodeSlimPodList decodes a PodList (metadata = 1, items = 2).
func decodeSlimPodList(b []byte, list *corev1.PodList) error {
	return decodeSlimList(b, &list.ListMeta, &list.Items, decodeSlimPod)
}

// decodeSlimNodeList decodes a NodeList (metadata = 1, items = 2).
func decodeSlimNodeList(b []byte, list *corev1.NodeList) error {
	return decodeSlimList(b, &list.ListMeta, &list.Items, decodeSlimNode)
}

// decodeSlimList decodes a list of core/v1 (metadata = 1, items = 2),
// each item with decode.
//
// This decoder's functions each loop over their message's fields
// themselves: with the loop in one function calling back, the reader
// escapes to the heap, seven more allocations a pod (10% more bytes in
// BenchmarkWatchStreamPods).
func decodeSlimList[T any](b []byte, meta *metav1.ListMeta, items *[]T, decode func([]byte, *T) error) error {
	r := protoReader{b: b}
	for !r.done() {
		num, wire, err := r.field()
		if err != nil {
			return err
		}
		switch {
		case num == 1 && wire == wireBytes:
			err = r.message(meta.Unmarshal)
		case num == 2 && wire == wireBytes:
			*items = append(*items, *new(T))
			err = r.message(func(b []byte) error { return decode(b, &(*items)[len(*items)-1]) })
		default:
			err = r.skip(wire)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// decodeSlimNode decodes a Node (metadata = 1, spec = 2, status = 3) into
// n, keeping what trimNode reads: of the spec, podCIDR = 1 and podCIDRs =
// 7; of the status, addresses = 5 (all of them: trimNode picks).
func decodeSlimNode(b []byte, n *corev1.Node) error {
	r := protoReader{b: b}
	for !r.done() {
		num, wire, err := r.field()
		if err != nil {
			return err
		}
		switch {
		case num == 1 && wire == wireBytes:
			err = r.message(func(b []byte) error { return decodeSlimMeta(b, &n.ObjectMeta) })
		case num == 2 && wire == wireBytes:
			err = r.message(func(b []byte) error {
				s := protoReader{b: b}
				for !s.done() {
					num, wire, err := s.field()
					if err != nil {
						return err
					}
					switch {
					case num == 1 && wire == wireBytes:
						n.Spec.PodCIDR, err = s.str()
					case num == 7 && wire == wireBytes:
						var cidr string
						cidr, err = s.str()
						n.Spec.PodCIDRs = append(n.Spec.PodCIDRs, cidr)
					default:
						err = s.skip(wire)
					}
					if err != nil {
						return err
					}
				}
				return nil
			})
		case num == 3 && wire == wireBytes:
			err = r.message(func(b []byte) error {
				s := protoReader{b: b}
				for !s.done() {
					num, wire, err := s.field()
					if err != nil {
						return err
					}
					if num == 5 && wire == wireBytes {
						n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{})
						err = s.message(n.Status.Addresses[len(n.Status.Addresses)-1].Unmarshal)
					} else {
						err = s.skip(wire)
					}
					if err != nil {
						return err
					}
				}
				return nil
			})
		default:
			err = r.skip(wire)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// decodeSlimPod decodes a Pod (metadata = 1, spec = 2, status = 3) into
// p, keeping what trimPod keeps.
func decodeSlimPod(b []byte, p *corev1.Pod) error {
	r := protoReader{b: b}
	for !r.done() {
		num, wire, err := r.field()
		if err != nil {
			return err
		}
		switch {
		case num == 1 && wire == wireBytes:
			err = r.message(func(b []byte) error { return decodeSlimMeta(b, &p.ObjectMeta) })
		case num == 2 && wire == wireBytes:
			err = r.message(func(b []byte) error { return decodeSlimSpec(b, &p.Spec) })
		case num == 3 && wire == wireBytes:
			err = r.message(func(b []byte) error { return decodeSlimStatus(b, &p.Status) })
		default:
			err = r.skip(wire)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// decodeSlimMeta decodes the ObjectMeta fields slimMeta keeps: name = 1,
// namespace = 3, uid = 5, resourceVersion = 6, creationTimestamp = 8,
// deletionTimestamp = 9, labels = 11; and of the annotations (12), only
// metav1.InitialEventsAnnotationKey.
func decodeSlimMeta(b []byte, m *metav1.ObjectMeta) error {
	r := protoReader{b: b}
	for !r.done() {
		num, wire, err := r.field()
		if err != nil {
			return err
		}
		if wire != wireBytes {
			if err := r.skip(wire); err != nil {
				return err
			}
			continue
		}
		switch num {
		case 1:
			m.Name, err = r.str()
		case 3:
			m.Namespace, err = r.internedStr()
		case 5:
			var uid string
			uid, err = r.str()
			m.UID = types.UID(uid)
		case 6:
			m.ResourceVersion, err = r.str()
		case 8:
			err = r.message(m.CreationTimestamp.Unmarshal)
		case 9:
			if m.DeletionTimestamp == nil {
				m.DeletionTimestamp = &metav1.Time{}
			}
			err = r.message(m.DeletionTimestamp.Unmarshal)
		case 11:
			var k, v []byte
			if k, v, err = r.mapEntryBytes(); err == nil {
				if m.Labels == nil {
					m.Labels = map[string]string{}
				}
				m.Labels[internBytes(k)] = internBytes(v)
			}
		case 12:
			// Of the annotations (a pod may carry kilobytes of them),
			// only the WatchList one is kept, and nothing else copied.
			var k, v []byte
			if k, v, err = r.mapEntryBytes(); err == nil && string(k) == metav1.InitialEventsAnnotationKey {
				if m.Annotations == nil {
					m.Annotations = map[string]string{}
				}
				m.Annotations[metav1.InitialEventsAnnotationKey] = string(v)
			}
		default:
			err = r.skip(wire)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// decodeSlimSpec decodes the PodSpec fields trimPod keeps: containers =
// 2, nodeName = 10, hostNetwork = 11, initContainers = 20.
func decodeSlimSpec(b []byte, s *corev1.PodSpec) error {
	r := protoReader{b: b}
	for !r.done() {
		num, wire, err := r.field()
		if err != nil {
			return err
		}
		switch {
		case num == 2 && wire == wireBytes:
			s.Containers = append(s.Containers, corev1.Container{})
			err = r.message(func(b []byte) error { return decodeSlimContainer(b, &s.Containers[len(s.Containers)-1]) })
		case num == 20 && wire == wireBytes:
			s.InitContainers = append(s.InitContainers, corev1.Container{})
			err = r.message(func(b []byte) error { return decodeSlimContainer(b, &s.InitContainers[len(s.InitContainers)-1]) })
		case num == 10 && wire == wireBytes:
			s.NodeName, err = r.internedStr()
		case num == 11 && wire == wireVarint:
			var v uint64
			v, err = r.varint()
			s.HostNetwork = v != 0
		default:
			err = r.skip(wire)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// decodeSlimContainer decodes the Container fields trimPod keeps: name =
// 1, ports = 6, restartPolicy = 24.
func decodeSlimContainer(b []byte, c *corev1.Container) error {
	r := protoReader{b: b}
	for !r.done() {
		num, wire, err := r.field()
		if err != nil {
			return err
		}
		switch {
		case num == 1 && wire == wireBytes:
			c.Name, err = r.str()
		case num == 6 && wire == wireBytes:
			c.Ports = append(c.Ports, corev1.ContainerPort{})
			err = r.message(c.Ports[len(c.Ports)-1].Unmarshal)
		case num == 24 && wire == wireBytes:
			var s string
			s, err = r.str()
			policy := corev1.ContainerRestartPolicy(s)
			c.RestartPolicy = &policy
		default:
			err = r.skip(wire)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// decodeSlimStatus decodes the PodStatus fields trimPod keeps: phase = 1,
// podIP = 6, podIPs = 12.
func decodeSlimStatus(b []byte, s *corev1.PodStatus) error {
	r := protoReader{b: b}
	for !r.done() {
		num, wire, err := r.field()
		if err != nil {
			return err
		}
		switch {
		case num == 1 && wire == wireBytes:
			var phase string
			phase, err = r.internedStr()
			s.Phase = corev1.PodPhase(phase)
		case num == 6 && wire == wireBytes:
			s.PodIP, err = r.str()
		case num == 12 && wire == wireBytes:
			s.PodIPs = append(s.PodIPs, corev1.PodIP{})
			err = r.message(s.PodIPs[len(s.PodIPs)-1].Unmarshal)
		default:
			err = r.skip(wire)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Protobuf wire types.
const (
	wireVarint     = 0
	wireFixed64    = 1
	wireBytes      = 2
	wireStartGroup = 3
	wireEndGroup   = 4
	wireFixed32    = 5
)

var (
	errProtoOverflow  = errors.New("protobuf: varint overflows 64 bits")
	errProtoWireType  = errors.New("protobuf: illegal wire type")
	errProtoEndGroup  = errors.New("protobuf: end of a group never started")
	errProtoFieldZero = errors.New("protobuf: field number 0")
)

// A protoReader reads one protobuf message's fields in order.
type protoReader struct {
	b []byte
	i int
}

func (r *protoReader) done() bool { return r.i >= len(r.b) }

func (r *protoReader) varint() (uint64, error) {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		if shift >= 64 {
			return 0, errProtoOverflow
		}
		if r.i >= len(r.b) {
			return 0, io.ErrUnexpectedEOF
		}
		c := r.b[r.i]
		r.i++
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, nil
		}
	}
}

// field reads a field's key: its number and wire type.
func (r *protoReader) field() (num int32, wire int, err error) {
	key, err := r.varint()
	if err != nil {
		return 0, 0, err
	}
	num, wire = int32(key>>3), int(key&7)
	if num <= 0 {
		return 0, 0, errProtoFieldZero
	}
	if wire == wireEndGroup {
		return 0, 0, errProtoEndGroup
	}
	return num, wire, nil
}

// bytes reads a length-delimited field's content, not copied.
func (r *protoReader) bytes() ([]byte, error) {
	n, err := r.varint()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(r.b)-r.i) {
		return nil, io.ErrUnexpectedEOF
	}
	b := r.b[r.i : r.i+int(n)]
	r.i += int(n)
	return b, nil
}

func (r *protoReader) str() (string, error) {
	b, err := r.bytes()
	return string(b), err
}

// message reads a length-delimited field and decodes it with decode.
func (r *protoReader) message(decode func([]byte) error) error {
	b, err := r.bytes()
	if err != nil {
		return err
	}
	return decode(b)
}

// mapEntryBytes reads a map<string, string> entry (key = 1, value = 2),
// its key and value not copied out of the message; a missing key or value
// is empty ("" in the generated code). It reads as that code does, quirks
// included, so that both read the same of any bytes: a key or value is
// read by its field number alone, whatever its wire type (end-group
// included), and may run past the entry's end (not past the message's),
// after which reading goes on at the entry's end.
func (r *protoReader) mapEntryBytes() (k, v []byte, err error) {
	n, err := r.varint()
	if err != nil {
		return nil, nil, err
	}
	if n > uint64(len(r.b)-r.i) {
		return nil, nil, io.ErrUnexpectedEOF
	}
	end := r.i + int(n)
	for r.i < end {
		start := r.i
		key, err := r.varint()
		if err != nil {
			return nil, nil, err
		}
		switch int32(key >> 3) { // the generated code's field number
		case 1:
			k, err = r.bytes()
		case 2:
			v, err = r.bytes()
		default:
			r.i = start
			err = r.skipField()
			if err == nil && r.i > end {
				err = io.ErrUnexpectedEOF
			}
		}
		if err != nil {
			return nil, nil, err
		}
	}
	r.i = end
	return k, v, nil
}

// internedStr reads a string field as intern would hold it: a string
// that repeats from pod to pod (a namespace, a node, a label) is then not
// copied out of the message for each.
func (r *protoReader) internedStr() (string, error) {
	b, err := r.bytes()
	return internBytes(b), err
}

// skipField skips a whole field, its key included, as the generated
// code's skip does: a field number of 0 is skipped, and a group's end
// with no start is an error.
func (r *protoReader) skipField() error {
	key, err := r.varint()
	if err != nil {
		return err
	}
	if int(key&7) == wireEndGroup {
		return errProtoEndGroup
	}
	return r.skip(int(key & 7))
}

// skip skips the content of a field of wire type wire, its key read.
func (r *protoReader) skip(wire int) error {
	switch wire {
	case wireVarint:
		_, err := r.varint()
		return err
	case wireFixed64, wireFixed32:
		n := 8
		if wire == wireFixed32 {
			n = 4
		}
		if len(r.b)-r.i < n {
			return io.ErrUnexpectedEOF
		}
		r.i += n
		return nil
	case wireBytes:
		_, err := r.bytes()
		return err
	case wireStartGroup:
		// A group (proto2, never in Kubernetes' messages) ends at its
		// matching end-group key.
		for depth := 1; depth > 0; {
			key, err := r.varint()
			if err != nil {
				return err
			}
			switch w := int(key & 7); w {
			case wireStartGroup:
				depth++
			case wireEndGroup:
				depth--
			default:
				if err := r.skip(w); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return errProtoWireType
}

// slimCodecs are codecs whose protobuf serializer is slimSerializer:
// those of the informers' client of pods and nodes (NewSlimClient).
type slimCodecs struct {
	runtime.NegotiatedSerializer
}

func (c slimCodecs) SupportedMediaTypes() []runtime.SerializerInfo {
	infos := slices.Clone(c.NegotiatedSerializer.SupportedMediaTypes())
	for i := range infos {
		if infos[i].MediaType != runtime.ContentTypeProtobuf {
			continue
		}
		infos[i].Serializer = slimSerializer{infos[i].Serializer}
		if infos[i].StreamSerializer != nil {
			stream := *infos[i].StreamSerializer // shared: changed in a copy
			stream.Serializer = watchEventSerializer{stream.Serializer}
			infos[i].StreamSerializer = &stream
		}
	}
	return infos
}

// watchEventSerializer is the protobuf stream serializer, but it decodes a
// watch event's object bytes without copying them: they stay in the frame
// buffer the streaming decoder reuses. That is safe because the watch
// decoder (k8s.io/client-go/rest/watch) decodes the object before it reads
// the next frame, and every decoder the slim codecs hand it copies what it
// keeps (the generated code copies strings and bytes, and so do
// slimSerializer and the protobuf serializer's envelope). The copy was
// half of what a pod allocated while the informers listed
// (BenchmarkWatchStreamPods).
type watchEventSerializer struct {
	runtime.Serializer // the protobuf stream serializer
}

// Decode decodes a WatchEvent (type = 1, object = 2, a RawExtension whose
// raw = 1) into into; any other target is the stream serializer's.
func (s watchEventSerializer) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	ev, ok := into.(*metav1.WatchEvent)
	if !ok || ev == nil {
		return s.Serializer.Decode(data, defaults, into)
	}
	*ev = metav1.WatchEvent{}
	r := protoReader{b: data}
	for !r.done() {
		num, wire, err := r.field()
		if err != nil {
			return nil, nil, err
		}
		switch {
		case num == 1 && wire == wireBytes:
			ev.Type, err = r.str()
		case num == 2 && wire == wireBytes:
			err = r.message(func(b []byte) error {
				o := protoReader{b: b}
				for !o.done() {
					num, wire, err := o.field()
					if err != nil {
						return err
					}
					if num == 1 && wire == wireBytes {
						ev.Object.Raw, err = o.bytes()
					} else {
						err = o.skip(wire)
					}
					if err != nil {
						return err
					}
				}
				return nil
			})
		default:
			err = r.skip(wire)
		}
		if err != nil {
			return nil, nil, err
		}
	}
	return ev, &schema.GroupVersionKind{}, nil
}
