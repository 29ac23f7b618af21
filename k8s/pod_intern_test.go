package k8s

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestInternTableBoundedUnderChurn holds the intern table to its
// own promise (pod.go, internTable): "the table stays within a few times
// what the cluster holds now, however long the daemon runs".
//
// A cluster where 100 label sets are live at any time, and where pods
// with a label value of their own come and go (a CronJob's
// controller-uid / batch.kubernetes.io/controller-uid, a StatefulSet's
// pod-name label, a rollout's pod-template-hash) asks the table for a
// new key on every pod creation. Nothing asks for the old ones again, so
// they should be dropped within a generation or two.
func TestInternTableBoundedUnderChurn(t *testing.T) {
	tab := newInternTable[string]()
	const live = 100
	const churn = 200_000 // e.g. a few weeks of a CronJob fleet
	for i := 0; i < churn; i++ {
		// The live keys are asked for all the time (every update of a
		// running pod re-interns its labels).
		k := fmt.Sprintf("live-%d", i%live)
		tab.get(k, func() string { return k })
		// One pod that lives briefly, with a value of its own.
		u := fmt.Sprintf("controller-uid=%08d", i)
		tab.get(u, func() string { return u })
	}
	tab.mu.Lock()
	held := len(tab.cur) + len(tab.prev)
	turnAt := tab.turnAt
	tab.mu.Unlock()
	// "a few times what the cluster holds now": the cluster holds ~101
	// keys; allow the minimum generation size (1024) twice over and more.
	if bound := 4 * 1024; held > bound {
		t.Errorf("after %d short-lived keys with %d live ones, the table holds %d entries (turnAt=%d), more than %d: "+
			"turnAt doubles at every turn (max(1024, 2*len(prev)) where len(prev) is the old turnAt), so generations grow "+
			"without bound and the table holds about everything ever interned", churn, live, held, turnAt, bound)
	}
}

// TestInternLabelsBoundedThroughNewPod is the same through NewPod,
// the way the informer transform feeds the global tables: each
// short-lived Job pod has a controller-uid label of its own.
func TestInternLabelsBoundedThroughNewPod(t *testing.T) {
	size := func() (maps, strings int) {
		labelMaps.mu.Lock()
		maps = len(labelMaps.cur) + len(labelMaps.prev)
		labelMaps.mu.Unlock()
		strs.mu.Lock()
		strings = len(strs.cur) + len(strs.prev)
		strs.mu.Unlock()
		return
	}
	m0, s0 := size()
	const jobs = 100_000
	for i := 0; i < jobs; i++ {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "batch", Name: fmt.Sprintf("job-%d-abcde", i), Labels: map[string]string{
				"app":                                "report",
				"batch.kubernetes.io/job-name":       fmt.Sprintf("job-%d", i),
				"controller-uid":                     fmt.Sprintf("6c1f0b9e-0000-4000-8000-%012d", i),
				"batch.kubernetes.io/controller-uid": fmt.Sprintf("6c1f0b9e-0000-4000-8000-%012d", i),
			}},
			Spec:   corev1.PodSpec{NodeName: "node-1"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}}},
		}
		NewPod(p) // the pod is gone a minute later: nothing holds its record
	}
	m1, s1 := size()
	t.Logf("label maps held: %d -> %d; strings held: %d -> %d after %d short-lived Job pods", m0, m1, s0, s1, jobs)
	if m1-m0 > 8*1024 || s1-s0 > 8*1024 {
		t.Errorf("after %d short-lived pods (none alive), the intern tables grew by %d label maps and %d strings: unbounded with churn",
			jobs, m1-m0, s1-s0)
	}
}

// TestNewPodReadsWhatTheCompilerNeeds checks the record against the
// corev1.Pod it comes from, independently of the reference evaluator
// (which since 0b3c676 reads the record's port list too): sidecar ports
// count, a plain init container's do not, podIP alone is an address, and
// nothing of the source object is shared with the record.
func TestNewPodReadsWhatTheCompilerNeeds(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	onFailure := corev1.ContainerRestartPolicy("OnFailure")
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "a", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{
				{Name: "migrate", Ports: []corev1.ContainerPort{{Name: "mig", ContainerPort: 5000, Protocol: corev1.ProtocolTCP}}},
				{Name: "odd", RestartPolicy: &onFailure, Ports: []corev1.ContainerPort{{Name: "odd", ContainerPort: 5001, Protocol: corev1.ProtocolTCP}}},
				{Name: "envoy", RestartPolicy: &always, Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 15001, Protocol: corev1.ProtocolTCP}}},
			},
			Containers: []corev1.Container{
				{Name: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}},
			},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7"},
	}
	rec := NewPod(p)
	var names []string
	for _, cp := range rec.Spec.Ports {
		names = append(names, fmt.Sprintf("%s/%d", cp.Name, cp.ContainerPort))
	}
	if got, want := fmt.Sprint(names), "[http/8080 http/15001]"; got != want {
		t.Errorf("record ports %s, want %s (containers, then sidecars; not plain init containers)", got, want)
	}
	if len(rec.Status.PodIPs) != 1 || rec.Status.PodIPs[0].IP != "10.0.0.7" {
		t.Errorf("podIP alone: record addresses %v", rec.Status.PodIPs)
	}
	// podIP not among podIPs (only a manifest that skipped Admit): both kept.
	q := p.DeepCopy()
	q.Status.PodIPs = []corev1.PodIP{{IP: "fd00::7"}}
	if got := NewPod(q).Status.PodIPs; len(got) != 2 || got[0].IP != "10.0.0.7" || got[1].IP != "fd00::7" {
		t.Errorf("podIP outside podIPs: record addresses %v", got)
	}
	// The source object is the informer's to drop or reuse: editing it
	// must not reach the record.
	p.Labels["app"] = "db"
	p.Spec.Containers[0].Ports[0].ContainerPort = 9999
	p.Status.PodIP = "10.9.9.9"
	if rec.Labels["app"] != "web" || rec.Spec.Ports[0].ContainerPort != 8080 || rec.Status.PodIPs[0].IP != "10.0.0.7" {
		t.Errorf("the record shares state with its source: %+v", rec)
	}
	// Core and back is the same record.
	back := NewPod(rec.Core())
	if fmt.Sprint(back.Spec.Ports) != fmt.Sprint(rec.Spec.Ports) || fmt.Sprint(back.Status.PodIPs) != fmt.Sprint(rec.Status.PodIPs) {
		t.Errorf("Core round trip: %v %v, want %v %v", back.Spec.Ports, back.Status.PodIPs, rec.Spec.Ports, rec.Status.PodIPs)
	}
}

// TestInternConcurrent records pods from several goroutines at
// once, across generation turns (more keys than a generation holds), and
// requires every record to carry exactly its own labels and ports. Run
// with -race too.
func TestInternConcurrent(t *testing.T) {
	const workers, perWorker = 8, 3000
	errs := make(chan string, workers)
	done := make(chan struct{})
	for w := 0; w < workers; w++ {
		go func(w int) {
			defer func() { done <- struct{}{} }()
			for i := 0; i < perWorker; i++ {
				v := fmt.Sprintf("v%d", (i*7+w)%2500) // overlapping between workers, > a generation
				port := int32(1000 + (i+w)%3000)
				p := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("p-%d-%d", w, i), Labels: map[string]string{"k": v, "w": "x"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{
						{Name: "http", ContainerPort: port, Protocol: corev1.ProtocolTCP}}}}},
					Status: corev1.PodStatus{PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}}},
				}
				rec := NewPod(p)
				if rec.Labels["k"] != v || len(rec.Labels) != 2 || len(rec.Spec.Ports) != 1 || rec.Spec.Ports[0].ContainerPort != port {
					select {
					case errs <- fmt.Sprintf("worker %d pod %d: labels %v ports %v, want k=%s port %d", w, i, rec.Labels, rec.Spec.Ports, v, port):
					default:
					}
					return
				}
			}
		}(w)
	}
	for w := 0; w < workers; w++ {
		<-done
	}
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// Interning keys are unique by construction: label maps or port lists
// that differ never share a record's value, whatever bytes an object
// that failed validation (still recorded, marked invalid) carries. With
// NUL-separated keys, {x-forged: "b\x00y\x00d"} was {x-forged: b, y: d}.
func TestInternKeysAreUnambiguous(t *testing.T) {
	forged := internLabels(map[string]string{"x-forged": "b\x00y\x00d"})
	honest := internLabels(map[string]string{"x-forged": "b", "y": "d"})
	if len(honest) != 2 || honest["y"] != "d" || len(forged) != 1 {
		t.Errorf("label maps mixed up: forged %q, honest %q", forged, honest)
	}
	pod := func(ports ...corev1.ContainerPort) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Ports: ports}}}}
	}
	a := podPorts(pod(corev1.ContainerPort{Name: "web\x00TCP\x0080\x000\x00\x00", Protocol: "TCP", ContainerPort: 80}))
	b := podPorts(pod(corev1.ContainerPort{Name: "web", Protocol: "TCP", ContainerPort: 80},
		corev1.ContainerPort{Name: "", Protocol: "TCP", ContainerPort: 80}))
	if len(a) != 1 || len(b) != 2 {
		t.Errorf("port lists mixed up: %v and %v", a, b)
	}
}
