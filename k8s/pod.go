package k8s

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// A Pod is what the enforcer reads of a core/v1 Pod, and nothing more:
// every node watches every pod of the cluster (any pod may be a peer), so
// a pod's record is the unit of the daemon's memory. A corev1.Pod struct
// is 1,240 bytes before its maps and slices, and even slimmed, with its
// container list, about 2.4 KB a pod; a Pod is about a quarter of that
// (docs/performance.md, "Daemon memory").
//
// The field paths are those of corev1.Pod (p.Spec.NodeName,
// p.Status.PodIPs), so code reads it as it reads a Pod; NewPod makes one,
// Core turns one back into a corev1.Pod for writing to an API server.
//
// A Pod is immutable once it is in a Snapshot, and its Labels and
// Spec.Ports may be shared with other Pods: replace a Pod, never edit it.
type Pod struct {
	// The metadata the enforcer reads, as metav1.ObjectMeta names it (a
	// whole ObjectMeta is 232 bytes, mostly empty: 19 MB at 150k pods).
	Name              string            `json:"name"`
	Namespace         string            `json:"namespace"`
	UID               types.UID         `json:"uid,omitempty"`
	ResourceVersion   string            `json:"resourceVersion,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	CreationTimestamp metav1.Time       `json:"creationTimestamp,omitzero"`
	DeletionTimestamp *metav1.Time      `json:"deletionTimestamp,omitempty"`

	Spec   PodSpec   `json:"spec"`
	Status PodStatus `json:"status"`
}

// PodSpec is what the enforcer reads of a pod's spec.
type PodSpec struct {
	NodeName    string `json:"nodeName,omitempty"`
	HostNetwork bool   `json:"hostNetwork,omitempty"`
	// Ports are the ports the pod's containers declare, then those of
	// its sidecars (init containers with restartPolicy Always, which
	// keep running and serve): the ports a named port can name.
	Ports []corev1.ContainerPort `json:"ports,omitempty"`
}

// PodStatus is what the enforcer reads of a pod's status.
type PodStatus struct {
	Phase corev1.PodPhase `json:"phase,omitempty"`
	// PodIPs is status.podIPs, with status.podIP first when podIPs does
	// not hold it (the API server keeps them equal; a manifest may not).
	PodIPs []corev1.PodIP `json:"podIPs,omitempty"`
}

// NewPod returns the record of p. What repeats from pod to pod is held
// once: strings (namespace, node, phase, label keys and values, port
// names), and whole label maps and port lists (the pods of one
// ReplicaSet share both), so 150k pods cost about 150k names, UIDs and
// addresses.
func NewPod(p *corev1.Pod) *Pod {
	out := &Pod{
		Name:              p.Name,
		Namespace:         intern(p.Namespace),
		UID:               p.UID,
		ResourceVersion:   p.ResourceVersion,
		Labels:            internLabels(p.Labels),
		CreationTimestamp: p.CreationTimestamp,
		DeletionTimestamp: p.DeletionTimestamp.DeepCopy(),
		Spec: PodSpec{
			NodeName:    intern(p.Spec.NodeName),
			HostNetwork: p.Spec.HostNetwork,
			Ports:       podPorts(p),
		},
		Status: PodStatus{Phase: corev1.PodPhase(intern(string(p.Status.Phase))), PodIPs: podIPs(p)},
	}
	return out
}

// podPorts gathers the ports of p's containers and sidecars (see
// PodSpec.Ports), interned; nil when there are none.
func podPorts(p *corev1.Pod) []corev1.ContainerPort {
	var ports []corev1.ContainerPort
	for _, c := range p.Spec.Containers {
		ports = append(ports, c.Ports...)
	}
	for _, c := range p.Spec.InitContainers {
		if isSidecar(c) {
			ports = append(ports, c.Ports...)
		}
	}
	if len(ports) == 0 {
		return nil
	}
	key := func(b []byte) []byte {
		for _, cp := range ports {
			b = keyPart(b, cp.Name)
			b = keyPart(b, string(cp.Protocol))
			b = keyPart(b, strconv.Itoa(int(cp.ContainerPort)))
			b = keyPart(b, strconv.Itoa(int(cp.HostPort)))
			b = keyPart(b, cp.HostIP)
		}
		return b
	}
	return internKeyed(portLists, key, func() []corev1.ContainerPort {
		for i := range ports {
			ports[i].Name = intern(ports[i].Name)
			ports[i].Protocol = corev1.Protocol(intern(string(ports[i].Protocol)))
			ports[i].HostIP = intern(ports[i].HostIP)
		}
		return slices.Clip(ports)
	})
}

// isSidecar reports whether an init container keeps running beside the
// pod's containers (restartPolicy Always).
func isSidecar(c corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// podIPs returns status.podIPs with status.podIP first when it is not
// among them; nil when the pod has no address.
func podIPs(p *corev1.Pod) []corev1.PodIP {
	ips := p.Status.PodIPs
	if p.Status.PodIP != "" && !slices.Contains(ips, corev1.PodIP{IP: p.Status.PodIP}) {
		ips = append([]corev1.PodIP{{IP: p.Status.PodIP}}, ips...)
	}
	if len(ips) == 0 {
		return nil
	}
	return slices.Clone(ips)
}

// keyPart appends s to an interning key, its length first: a key is
// unique by construction, whatever bytes the strings hold (an object
// that failed validation is recorded too, and a separator byte in one of
// its labels could have spelled another pod's labels).
func keyPart(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}

// internKeyed returns t's value for the key build appends (with keyPart),
// making it with make when t holds none. The key is built in a pooled
// buffer, which t copies only when it adds the key: the key of every pod's
// labels and ports, built afresh for each pod, was 27 MB of garbage in a
// 150k-pod list.
func internKeyed[T any](t *internTable[T], build func([]byte) []byte, make func() T) T {
	key := keyBufs.Get().(*[]byte)
	defer keyBufs.Put(key)
	*key = build((*key)[:0])
	return t.getBytes(*key, make)
}

var keyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// The process's interning tables. Two generations each (see internTable),
// so that what no object holds any more is dropped in time.
var (
	strs       = newInternTable[string]()
	labelMaps  = newInternTable[map[string]string]()
	portLists  = newInternTable[[]corev1.ContainerPort]()
	emptyLabel = map[string]string{}
)

// intern returns s, held once however many objects hold it.
func intern(s string) string {
	if s == "" {
		return ""
	}
	return strs.get(s, func() string { return strings.Clone(s) })
}

// internBytes is intern for a string in bytes, which it copies only when
// no object holds the string yet.
func internBytes(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return strs.getBytes(b, func() string { return string(b) })
}

// internLabels returns labels equal to l, shared with every other object
// whose labels are equal (read-only: see Pod).
func internLabels(l map[string]string) map[string]string {
	if l == nil {
		return nil
	}
	if len(l) == 0 {
		return emptyLabel
	}
	var few [16]string // most pods' labels: no allocation
	keys := few[:0]
	for k := range l {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	key := func(b []byte) []byte {
		for _, k := range keys {
			b = keyPart(b, k)
			b = keyPart(b, l[k])
		}
		return b
	}
	return internKeyed(labelMaps, key, func() map[string]string {
		out := make(map[string]string, len(l))
		for k, v := range l {
			out[intern(k)] = intern(v)
		}
		return out
	})
}

// An internTable holds one value per key, in two generations: a lookup
// looks in the current one, then in the previous one (moving the entry to
// the current: it is still asked for), and adds to the current one what
// neither holds. When the current generation is full, it becomes the
// previous one and the old previous one is dropped: a value nobody asked
// for over a whole generation goes (objects holding it keep their copy).
// A generation holds twice what was asked for again in the one before
// (at least 1024): what is asked for again is what is still in use, so the
// table stays within a few times the values in use however many
// short-lived ones (a Job's controller-uid, a rollout's pod-template-hash)
// came and went.
type internTable[T any] struct {
	mu        sync.Mutex
	cur, prev map[string]T
	turnAt    int // the size at which cur becomes prev
	promoted  int // entries of prev asked for again in this generation
}

// minGeneration is the least number of entries a generation holds.
const minGeneration = 1024

func newInternTable[T any]() *internTable[T] {
	return &internTable[T]{cur: map[string]T{}, turnAt: minGeneration}
}

// get returns the value held for key, making it with make when none is.
func (t *internTable[T]) get(key string, make func() T) T {
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.cur[key]; ok {
		return v
	}
	v, ok := t.prev[key]
	return t.keep(strings.Clone(key), v, ok, make)
}

// getBytes is get for a key in bytes, which it only reads (a caller may
// reuse them) and copies only to add it.
func (t *internTable[T]) getBytes(key []byte, make func() T) T {
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.cur[string(key)]; ok { // looked up without a copy
		return v
	}
	v, ok := t.prev[string(key)]
	return t.keep(string(key), v, ok, make)
}

// keep adds key, a copy the table may hold, to the current generation with
// its value: v from the previous generation when found there, else a new
// one.
func (t *internTable[T]) keep(key string, v T, found bool, make func() T) T {
	if found {
		t.promoted++
	} else {
		v = make()
	}
	t.cur[key] = v
	if len(t.cur) >= t.turnAt {
		t.turnAt = max(minGeneration, 2*t.promoted)
		t.prev, t.cur, t.promoted = t.cur, map[string]T{}, 0
	}
	return v
}

// Core returns p as a corev1.Pod: its ports on containers c0, c1, ... (a
// port goes on the first whose ports do not already use its name, as port
// names are unique within a container, not a pod), podIP set to the first
// of podIPs. For writing a Snapshot to an API
// server or a manifest (tests, benchmarks, dump).
func (p *Pod) Core() *corev1.Pod {
	out := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Labels: maps.Clone(p.Labels), CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp.DeepCopy()},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork},
		Status: corev1.PodStatus{Phase: p.Status.Phase, PodIPs: slices.Clone(p.Status.PodIPs)},
	}
	for _, cp := range p.Spec.Ports {
		i := slices.IndexFunc(out.Spec.Containers, func(c corev1.Container) bool {
			return cp.Name == "" || !slices.ContainsFunc(c.Ports, func(o corev1.ContainerPort) bool { return o.Name == cp.Name })
		})
		if i < 0 {
			i = len(out.Spec.Containers)
			out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Name: "c" + strconv.Itoa(i)})
		}
		out.Spec.Containers[i].Ports = append(out.Spec.Containers[i].Ports, cp)
	}
	if out.Spec.Containers == nil {
		out.Spec.Containers = []corev1.Container{{Name: "c0"}}
	}
	if len(p.Status.PodIPs) > 0 {
		out.Status.PodIP = p.Status.PodIPs[0].IP
	}
	return out
}

// DeepCopy returns a copy of p that shares nothing with it.
func (p *Pod) DeepCopy() *Pod {
	if p == nil {
		return nil
	}
	out := *p
	out.Labels = maps.Clone(p.Labels)
	out.DeletionTimestamp = p.DeletionTimestamp.DeepCopy()
	out.Spec.Ports = slices.Clone(p.Spec.Ports)
	out.Status.PodIPs = slices.Clone(p.Status.PodIPs)
	return &out
}

// DeepCopyObject makes Pod a runtime.Object, so that it sits in an
// informer's cache and among the manifests source's objects.
func (p *Pod) DeepCopyObject() runtime.Object { return p.DeepCopy() }

// GetObjectKind is a Pod's kind, v1 Pod.
func (p *Pod) GetObjectKind() schema.ObjectKind { return podKind{} }

// podKind is the fixed kind of a Pod record.
type podKind struct{}

func (podKind) SetGroupVersionKind(schema.GroupVersionKind) {}
func (podKind) GroupVersionKind() schema.GroupVersionKind {
	return corev1.SchemeGroupVersion.WithKind("Pod")
}

// A Pod is a metav1.Object, so that informer caches key it and generic
// helpers sort and compare it; the setters of metadata it does not keep
// drop what they are given.

func (p *Pod) GetNamespace() string                          { return p.Namespace }
func (p *Pod) SetNamespace(v string)                         { p.Namespace = v }
func (p *Pod) GetName() string                               { return p.Name }
func (p *Pod) SetName(v string)                              { p.Name = v }
func (p *Pod) GetGenerateName() string                       { return "" }
func (p *Pod) SetGenerateName(string)                        {}
func (p *Pod) GetUID() types.UID                             { return p.UID }
func (p *Pod) SetUID(v types.UID)                            { p.UID = v }
func (p *Pod) GetResourceVersion() string                    { return p.ResourceVersion }
func (p *Pod) SetResourceVersion(v string)                   { p.ResourceVersion = v }
func (p *Pod) GetGeneration() int64                          { return 0 }
func (p *Pod) SetGeneration(int64)                           {}
func (p *Pod) GetSelfLink() string                           { return "" }
func (p *Pod) SetSelfLink(string)                            {}
func (p *Pod) GetCreationTimestamp() metav1.Time             { return p.CreationTimestamp }
func (p *Pod) SetCreationTimestamp(v metav1.Time)            { p.CreationTimestamp = v }
func (p *Pod) GetDeletionTimestamp() *metav1.Time            { return p.DeletionTimestamp }
func (p *Pod) SetDeletionTimestamp(v *metav1.Time)           { p.DeletionTimestamp = v }
func (p *Pod) GetDeletionGracePeriodSeconds() *int64         { return nil }
func (p *Pod) SetDeletionGracePeriodSeconds(*int64)          {}
func (p *Pod) GetLabels() map[string]string                  { return p.Labels }
func (p *Pod) SetLabels(v map[string]string)                 { p.Labels = v }
func (p *Pod) GetAnnotations() map[string]string             { return nil }
func (p *Pod) SetAnnotations(map[string]string)              {}
func (p *Pod) GetFinalizers() []string                       { return nil }
func (p *Pod) SetFinalizers([]string)                        {}
func (p *Pod) GetOwnerReferences() []metav1.OwnerReference   { return nil }
func (p *Pod) SetOwnerReferences([]metav1.OwnerReference)    {}
func (p *Pod) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }
func (p *Pod) SetManagedFields([]metav1.ManagedFieldsEntry)  {}

var _ metav1.Object = (*Pod)(nil)
