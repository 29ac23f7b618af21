package k8s

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"bytes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
)

// r15Frame is one length-delimited frame of a WatchEvent of typ whose
// object bytes are raw, as they are.
func r15Frame(t testing.TB, typ string, raw []byte) []byte {
	var out bytes.Buffer
	es := protobuf.NewRawSerializer(scheme.Scheme, scheme.Scheme)
	if err := es.Encode(&metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: raw}}, protobuf.LengthDelimitedFramer.NewFrameWriter(&out)); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func r15Envelope(t testing.TB, kind string, raw []byte) []byte {
	u := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: kind}, Raw: raw}
	b, err := u.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append(append([]byte{}, protobufPrefix...), b...)
}

// r15ErrorView is what is compared of an ERROR event's Status: its
// message is the decoder's error text, which the slim decoders word
// their own way ("decoding a Pod: ...").
func r15ErrorView(o runtime.Object) runtime.Object {
	if s, ok := o.(*metav1.Status); ok {
		return &metav1.Status{Status: s.Status, Code: s.Code, Reason: s.Reason}
	}
	return o
}

// r15CompareRaw serves stream (protobuf) to both clients and compares
// every event (of an ERROR's Status, its status, code and reason).
func r15CompareRaw(t *testing.T, stream []byte, nodes bool) []r15Got {
	return r15CompareRawChunk(t, stream, nodes, 5)
}

func r15CompareRawChunk(t *testing.T, stream []byte, nodes bool, chunk int) []r15Got {
	t.Helper()
	srv := r15Server(t, runtime.ContentTypeProtobuf+";stream=watch", stream, chunk)
	slim, stock := r15Clients(t, srv.URL)
	got, want := r15Watch(t, slim, nodes), r15Watch(t, stock, nodes)
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			v := r15ErrorView(r15View(got[i].obj))
			g = fmt.Sprintf("%s %T %v", got[i].typ, v, v)
		}
		if i < len(want) {
			v := r15ErrorView(r15View(want[i].obj))
			w = fmt.Sprintf("%s %T %v", want[i].typ, v, v)
		}
		if g != w {
			t.Errorf("event %d:\n slim  %s\n stock %s", i, g, w)
		}
	}
	return got
}

// TestHostileRound15OddEvents: events whose object is of another kind, a
// Status as ADDED, empty, not protobuf, a pod list, garbage; each stream
// then a pod that must still be read.
func TestHostileRound15OddEvents(t *testing.T) {
	pod := encodeProtobuf(t, r15Pod(1, 2000))
	cases := map[string][]byte{
		"node in pods":   r15Frame(t, "ADDED", encodeProtobuf(t, r15Node(1, 10))),
		"status added":   r15Frame(t, "ADDED", encodeProtobuf(t, &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Message: "m", Code: 500})),
		"empty":          r15Frame(t, "ADDED", nil),
		"error empty":    r15Frame(t, "ERROR", nil),
		"error pod":      r15Frame(t, "ERROR", pod),
		"json in proto":  r15Frame(t, "ADDED", []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"}}`)),
		"podlist":        r15Frame(t, "ADDED", encodeProtobuf(t, &corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}, Items: []corev1.Pod{*r15Pod(3, 0)}})),
		"prefix only":    r15Frame(t, "ADDED", protobufPrefix),
		"pod truncated":  r15Frame(t, "ADDED", pod[:len(pod)-3]),
		"type empty":     r15Frame(t, "", pod),
		"bookmark empty": r15Frame(t, "BOOKMARK", encodeProtobuf(t, &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}})),
		"unknown kind":   r15Frame(t, "ADDED", encodeProtobuf(t, &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}})),
		"apps pod":       r15Frame(t, "ADDED", bytes.Replace(pod, []byte("\n\x02v1"), []byte("\n\x07apps/v1"), 1)),
	}
	// Envelopes that read, around a pod (a node) that does not.
	body, err := r15Pod(2, 100).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	envelope := func(kind string, raw []byte) []byte { return r15Envelope(t, kind, raw) }
	cases["pod body truncated"] = r15Frame(t, "ADDED", envelope("Pod", body[:len(body)-3]))
	cases["pod body bad varint"] = r15Frame(t, "ADDED", envelope("Pod", append(append([]byte{}, body...), 0x80)))
	cases["zero-length frame"] = []byte{0, 0, 0, 0}
	cases["bookmark of a node"] = r15Frame(t, "BOOKMARK", encodeProtobuf(t, &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{ResourceVersion: "7"}}))
	cases["error status with details"] = r15Frame(t, "ERROR", encodeProtobuf(t, &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: "Failure", Code: 410, Reason: metav1.StatusReasonGone,
		Details: &metav1.StatusDetails{Name: "p", Kind: "pods", Causes: []metav1.StatusCause{{Type: "x", Message: strings.Repeat("m", 5000)}}}}))
	good := r15Frame(t, "ADDED", pod)
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			var s []byte
			s = append(s, good...)
			s = append(s, f...)
			s = append(s, good...)
			got := r15CompareRaw(t, s, false)
			t.Logf("%d events", len(got))
		})
	}
	t.Run("truncated frame at the end", func(t *testing.T) {
		s := append(append([]byte{}, good...), good[:len(good)-100]...)
		r15CompareRaw(t, s, false)
	})
	t.Run("frame too large", func(t *testing.T) {
		var hdr [4]byte
		binary.BigEndian.PutUint32(hdr[:], 17<<20)
		s := append(append([]byte{}, good...), hdr[:]...)
		s = append(s, make([]byte, 17<<20)...)
		s = append(s, good...)
		got := r15CompareRawChunk(t, s, false, 1<<16)
		t.Logf("%d events, the last %v", len(got), got[len(got)-1])
	})
}
