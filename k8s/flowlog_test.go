package k8s

import (
	"testing"
	"testing/fstest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// Both sources hand the compiler a Namespace's flow-log annotation: the
// informer keeps it (and only it) when it slims the object, and a change
// of it alone is a change; manifests keep it as written.
func TestFlowLogAnnotationKept(t *testing.T) {
	in := NewInformers(fake.NewClientset(), InformerOptions{})
	tr := func(ns *corev1.Namespace) *corev1.Namespace {
		out, err := in.transform(ns)
		if err != nil {
			t.Fatal(err)
		}
		return out.(*corev1.Namespace)
	}
	on := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x", ResourceVersion: "1",
		Annotations: map[string]string{FlowLogAnnotation: "true", "other": "dropped"}}}
	slim := tr(on)
	if !FlowLogged(slim) {
		t.Errorf("the informer dropped the flow-log annotation: %v", slim.Annotations)
	}
	if _, ok := slim.Annotations["other"]; ok {
		t.Errorf("the informer kept an annotation nothing reads: %v", slim.Annotations)
	}
	off := on.DeepCopy()
	off.ResourceVersion = "2"
	off.Annotations[FlowLogAnnotation] = "false"
	if equalIgnoringVersion(slim, tr(off)) {
		t.Error("turning flow logs off compares equal: the compiler would not see it")
	}
	other := on.DeepCopy()
	other.ResourceVersion = "3"
	other.Annotations["other"] = "changed"
	if !equalIgnoringVersion(slim, tr(other)) {
		t.Error("a change of another annotation compares unequal")
	}
	if d := tr(slim); !FlowLogged(d) {
		t.Error("transform is not idempotent for the annotation")
	}

	snap, objErrs, err := LoadFS(fstest.MapFS{"ns.yaml": {Data: []byte(
		"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n  annotations: {nftpolicy.io/flow-log: \"true\"}\n" +
			"---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: \"y\"\n")}})
	if err != nil || len(objErrs) > 0 {
		t.Fatal(err, objErrs)
	}
	got := map[string]bool{}
	for _, ns := range snap.Namespaces {
		got[ns.Name] = FlowLogged(ns)
	}
	if !got["x"] || got["y"] {
		t.Errorf("flow logged from manifests: %v, want x only", got)
	}
}
