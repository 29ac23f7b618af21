package k8se2e

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nftpolicy/nftpolicy/internal/apiserver"
	"github.com/nftpolicy/nftpolicy/k8s"
)

// Hostile round 14: the informers as `nftpolicy run --kubeconfig` starts
// them (cmd/nftpolicy/sources.go startInformers: NewClient,
// NewPolicyClient, NewSlimClient, NewInformers with Policy and Slim),
// against a real kube-apiserver, compared field by field with what a
// plain clientset reading JSON (the generated decoders, no slim client)
// lists of the same pods and nodes.

// r14View is what the daemon reads of a pod or node, as text: one line
// per field, so a diff names the field.
type r14View map[string]string

// r14PodView is the view of an API pod: what a k8s.Pod record must hold.
func r14PodView(p *corev1.Pod) r14View {
	v := r14View{
		"uid":     string(p.UID),
		"labels":  r14Labels(p.Labels),
		"created": p.CreationTimestamp.UTC().String(),
		"deleted": r14Time(p.DeletionTimestamp),
		"node":    p.Spec.NodeName,
		"hostNet": fmt.Sprint(p.Spec.HostNetwork),
		"phase":   string(p.Status.Phase),
	}
	var ports []corev1.ContainerPort
	for _, c := range p.Spec.Containers {
		ports = append(ports, c.Ports...)
	}
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			ports = append(ports, c.Ports...)
		}
	}
	v["ports"] = r14Ports(ports)
	ips := []string{}
	for _, ip := range p.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	if p.Status.PodIP != "" && !slices.Contains(ips, p.Status.PodIP) {
		ips = append([]string{p.Status.PodIP}, ips...)
	}
	v["ips"] = r14IPs(ips)
	return v
}

// r14RecordView is the view of the daemon's record of a pod.
func r14RecordView(p *k8s.Pod) r14View {
	ips := []string{}
	for _, ip := range p.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	return r14View{
		"uid":     string(p.UID),
		"labels":  r14Labels(p.Labels),
		"created": p.CreationTimestamp.UTC().String(),
		"deleted": r14Time(p.DeletionTimestamp),
		"node":    p.Spec.NodeName,
		"hostNet": fmt.Sprint(p.Spec.HostNetwork),
		"phase":   string(p.Status.Phase),
		"ports":   r14Ports(p.Spec.Ports),
		"ips":     r14IPs(ips),
	}
}

// r14NodeView is the view of a node: labels, pod CIDRs, and the
// InternalIP/ExternalIP addresses (what the compiler reads; a Hostname is
// not an address it reads).
func r14NodeView(n *corev1.Node) r14View {
	var addrs []string
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
			addrs = append(addrs, string(a.Type)+"="+r14IP(a.Address))
		}
	}
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	return r14View{
		"uid":      string(n.UID),
		"labels":   r14Labels(n.Labels),
		"created":  n.CreationTimestamp.UTC().String(),
		"podCIDRs": strings.Join(cidrs, ","),
		"addrs":    strings.Join(addrs, ","),
	}
}

func r14Labels(l map[string]string) string {
	var out []string
	for k, v := range l {
		out = append(out, fmt.Sprintf("%q=%q", k, v))
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func r14Time(t *metav1.Time) string {
	if t == nil {
		return "<nil>"
	}
	return t.UTC().String()
}

func r14Ports(ports []corev1.ContainerPort) string {
	var out []string
	for _, p := range ports {
		out = append(out, fmt.Sprintf("%s/%s/%d/%d/%s", p.Name, p.Protocol, p.ContainerPort, p.HostPort, p.HostIP))
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// r14IP is an address in canonical form (the daemon canonicalizes; a
// spelling is not a difference), or the text itself when it does not
// parse.
func r14IP(s string) string {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.String()
	}
	return s
}

func r14IPs(ips []string) string {
	var out []string
	for _, ip := range ips {
		out = append(out, r14IP(ip))
	}
	return strings.Join(out, ",")
}

// r14Cluster starts an API server with a namespace, and returns it with a
// plain JSON clientset of it.
func r14Cluster(t *testing.T) (*apiserver.Server, kubernetes.Interface) {
	t.Helper()
	srv := apiserver.StartTest(t, apiserver.Options{})
	cfg := srv.Config("")
	cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
	ref, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ref.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return srv, ref
}

// r14Daemon is a set of informers started as `nftpolicy run` starts them.
type r14Daemon struct {
	in   *k8s.Informers
	logs *observer.ObservedLogs
	stop context.CancelFunc
}

// r14Start starts the informers; they run until stop, or until cleanup
// (the test's Cleanup, which may be a parent's) runs.
func r14Start(t *testing.T, srv *apiserver.Server, cleanup func(func())) *r14Daemon {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := srv.WriteKubeconfig(kubeconfig, ""); err != nil {
		t.Fatal(err)
	}
	client, err := k8s.NewClient(kubeconfig, "nftpolicy/hostile-round14")
	if err != nil {
		t.Fatal(err)
	}
	policy, err := k8s.NewPolicyClient(kubeconfig, "nftpolicy/hostile-round14")
	if err != nil {
		t.Fatal(err)
	}
	slim, err := k8s.NewSlimClient(kubeconfig, "nftpolicy/hostile-round14")
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.DebugLevel)
	in := k8s.NewInformers(client, k8s.InformerOptions{Log: zap.New(core), Policy: policy, Slim: slim})
	ctx, cancel := context.WithCancel(context.Background())
	cleanup(cancel)
	// The informers run until ctx ends: Start gets ctx itself, and no
	// more than 60s to return.
	started := make(chan error, 1)
	go func() { started <- in.Start(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Start has not returned after 60s")
	}
	return &r14Daemon{in: in, logs: logs, stop: cancel}
}

// r14Diff compares the daemon's snapshot with the reference's lists of
// pods and nodes; with rv, resourceVersions too. "" when they agree.
func r14Diff(ctx context.Context, ref kubernetes.Interface, snap *k8s.Snapshot, rv bool) (string, error) {
	pods, err := ref.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	nodes, err := ref.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	want, got := map[string]r14View{}, map[string]r14View{}
	for i := range pods.Items {
		p := &pods.Items[i]
		v := r14PodView(p)
		if rv {
			v = r14View{"rv": p.ResourceVersion}
		}
		want["Pod "+p.Namespace+"/"+p.Name] = v
	}
	for _, p := range snap.Pods {
		v := r14RecordView(p)
		if rv {
			v = r14View{"rv": p.ResourceVersion}
		}
		got["Pod "+p.Namespace+"/"+p.Name] = v
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		v := r14NodeView(n)
		if rv {
			v = r14View{"rv": n.ResourceVersion}
		}
		want["Node "+n.Name] = v
	}
	for _, n := range snap.Nodes {
		v := r14NodeView(n)
		if rv {
			v = r14View{"rv": n.ResourceVersion}
		}
		got["Node "+n.Name] = v
	}
	return cmp.Diff(want, got), nil
}

// r14Wait waits up to wait for the daemon's snapshot to agree with the
// reference, and returns the last difference ("" when they agreed).
func r14Wait(t *testing.T, d *r14Daemon, ref kubernetes.Interface, wait time.Duration) string {
	t.Helper()
	ctx := context.Background()
	var diff string
	for deadline := time.Now().Add(wait); ; time.Sleep(100 * time.Millisecond) {
		var err error
		diff, err = r14Diff(ctx, ref, d.in.Snapshot(), false)
		if err != nil {
			t.Fatal(err)
		}
		if diff == "" || time.Now().After(deadline) {
			return diff
		}
	}
}

func r14Ptr[T any](v T) *T { return &v }

// r14Probe makes a write the API server may refuse: when it does, the
// case is logged as held by the API server and left out.
func r14Probe(t *testing.T, what string, err error) bool {
	t.Helper()
	if err != nil {
		t.Logf("the API server refuses %s: %v", what, err)
		return false
	}
	t.Logf("the API server stores %s", what)
	return true
}

// r14SetStatus writes a pod's status through the status subresource, as
// the kubelet does.
func r14SetStatus(ctx context.Context, ref kubernetes.Interface, name string, phase corev1.PodPhase, ips ...string) error {
	p, err := ref.CoreV1().Pods("x").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	p.Status.Phase = phase
	p.Status.PodIP, p.Status.PodIPs = "", nil
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0]
	}
	_, err = ref.CoreV1().Pods("x").UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

// r14CreatePod creates a pod and sets its status.
func r14CreatePod(ctx context.Context, ref kubernetes.Interface, p *corev1.Pod, phase corev1.PodPhase, ips ...string) error {
	p.Namespace = "x"
	if len(p.Spec.Containers) == 0 {
		p.Spec.Containers = []corev1.Container{{Name: "c", Image: "busybox"}}
	}
	if _, err := ref.CoreV1().Pods("x").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return err
	}
	return r14SetStatus(ctx, ref, p.Name, phase, ips...)
}

// r14CreateNode creates a node and sets its addresses.
func r14CreateNode(ctx context.Context, ref kubernetes.Interface, n *corev1.Node, addrs ...corev1.NodeAddress) error {
	created, err := ref.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	created.Status.Addresses = addrs
	_, err = ref.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		_ = ref.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{})
	}
	return err
}

// r14Populate writes the cluster the tests compare: ordinary and unusual
// pods and nodes, each unusual one only if the API server stores it.
func r14Populate(t *testing.T, ref kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	always := corev1.ContainerRestartPolicyAlways
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	must("node n-good", r14CreateNode(ctx, ref, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n-good", Labels: map[string]string{"zone": "a", "example.com/rack": "r1"}},
		Spec:       corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24", "fd00:1::/64"}},
	}, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.5"}, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "fd00::5"},
		corev1.NodeAddress{Type: corev1.NodeHostName, Address: "n-good"}))
	r14Probe(t, "node n-cidr0 with podCIDR 010.244.3.0/24", r14CreateNode(ctx, ref, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n-cidr0"}, Spec: corev1.NodeSpec{PodCIDR: "010.244.3.0/24"},
	}, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.10"}))
	bigLabels := map[string]string{}
	for i := range 60 {
		bigLabels[fmt.Sprintf("example.com/%s-%02d", strings.Repeat("k", 50), i)] = strings.Repeat(string(rune('a'+i%26)), 63)
	}
	must("node n-big", r14CreateNode(ctx, ref, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("n", 200) + ".big", Labels: bigLabels},
		Spec:       corev1.NodeSpec{PodCIDR: "10.244.2.0/24"},
	}, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.7"}, corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: "big.internal"}))

	must("pod plain", r14CreatePod(ctx, ref, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "plain", Labels: map[string]string{"app": "web", "example.com/tier": "front"}},
		Spec: corev1.PodSpec{
			NodeName: "n-good",
			Containers: []corev1.Container{
				{Name: "c1", Image: "busybox", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80}, {Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}}},
				{Name: "c2", Image: "busybox", Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9090, HostPort: 19090, HostIP: "10.0.0.5"}, {ContainerPort: 7000, Protocol: corev1.ProtocolSCTP}}},
			},
			InitContainers: []corev1.Container{
				{Name: "side", Image: "busybox", RestartPolicy: &always, Ports: []corev1.ContainerPort{{Name: "side-http", ContainerPort: 8080}}},
				{Name: "init", Image: "busybox", Ports: []corev1.ContainerPort{{Name: "init-only", ContainerPort: 7070}}},
			},
		},
	}, corev1.PodRunning, "10.244.1.10", "fd00:1::a"))
	must("pod annotated", r14CreatePod(ctx, ref, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "annotated", Labels: map[string]string{"app": "ann"}, Annotations: map[string]string{
			metav1.InitialEventsAnnotationKey: "true",
			"weird":                           "\u202e\u0000\uffff" + strings.Repeat("\U0001F600", 1000),
			"big":                             strings.Repeat("x", 200<<10),
		}},
		Spec: corev1.PodSpec{NodeName: "n-good"},
	}, corev1.PodRunning, "10.244.1.11"))
	must("pod host", r14CreatePod(ctx, ref, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "host", Labels: map[string]string{"app": "host"}},
		Spec:       corev1.PodSpec{NodeName: "n-good", HostNetwork: true, Containers: []corev1.Container{{Name: "c", Image: "busybox", Ports: []corev1.ContainerPort{{Name: "hp", ContainerPort: 9100, HostPort: 9100}}}}},
	}, corev1.PodRunning, "10.0.0.5"))
	var many []corev1.Container
	for i := range 40 {
		c := corev1.Container{Name: fmt.Sprintf("c%d", i), Image: "busybox"}
		for j := range 3 {
			c.Ports = append(c.Ports, corev1.ContainerPort{Name: fmt.Sprintf("p%dx%d", i, j), ContainerPort: int32(1000 + 3*i + j)})
		}
		many = append(many, c)
	}
	must("pod big", r14CreatePod(ctx, ref, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("p", 240) + ".big", Labels: bigLabels},
		Spec:       corev1.PodSpec{NodeName: "n-good", Containers: many},
	}, corev1.PodRunning, "10.244.1.12"))
	must("pod upper", r14CreatePod(ctx, ref, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "upper"}, Spec: corev1.PodSpec{NodeName: "n-good"}},
		corev1.PodRunning, "FD00:1::ABCD"))
	must("pod done", r14CreatePod(ctx, ref, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "done", Labels: map[string]string{"app": "job"}}, Spec: corev1.PodSpec{NodeName: "n-good"}},
		corev1.PodSucceeded, "10.244.1.13"))
	must("pod pending", r14CreatePod(ctx, ref, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pending", Labels: map[string]string{}}}, corev1.PodPending))
	must("pod term", r14CreatePod(ctx, ref, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "term", Finalizers: []string{"example.com/hold"}}, Spec: corev1.PodSpec{NodeName: "n-good"}},
		corev1.PodRunning, "10.244.1.14"))
	for _, c := range []struct{ name, ip string }{{"ip-mapped", "::ffff:10.244.1.15"}, {"ip-lead", "010.244.1.16"}, {"ip-zone", "fe80::1%eth0"}} {
		err := r14CreatePod(ctx, ref, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: c.name}, Spec: corev1.PodSpec{NodeName: "n-good"}}, corev1.PodRunning, c.ip)
		if !r14Probe(t, fmt.Sprintf("pod %s with podIP %q", c.name, c.ip), err) {
			_ = ref.CoreV1().Pods("x").Delete(ctx, c.name, metav1.DeleteOptions{GracePeriodSeconds: r14Ptr(int64(0))})
		}
	}
	// A pod bound through the binding subresource, as the scheduler does,
	// to a node name no pod spec may hold.
	must("pod bound", r14CreatePod(ctx, ref, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bound", Labels: map[string]string{"app": "bound"}}}, corev1.PodPending))
	err := ref.CoreV1().Pods("x").Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "bound"}, Target: corev1.ObjectReference{Kind: "Node", Name: "Bad_Node!"}}, metav1.CreateOptions{})
	if r14Probe(t, `pod bound bound to node "Bad_Node!"`, err) {
		must("pod bound status", r14SetStatus(ctx, ref, "bound", corev1.PodRunning, "10.244.1.17"))
	}
}

// TestHostileRound14InformersMatchAPIServer: the daemon's pods and nodes
// against a plain JSON clientset's, after creates, updates, deletes, a
// restart of the informers and one of the API server. resourceVersions
// are compared on their own, and only logged (see the end).
func TestHostileRound14InformersMatchAPIServer(t *testing.T) {
	srv, ref := r14Cluster(t)
	r14Populate(t, ref)
	ctx := context.Background()
	d := r14Start(t, srv, t.Cleanup)
	parentCleanup := t.Cleanup
	wait := 20 * time.Second
	check := func(t *testing.T, what string) {
		t.Helper()
		if diff := r14Wait(t, d, ref, wait); diff != "" {
			t.Errorf("%s: after %s the daemon's pods and nodes differ from the API server's (-API server +daemon):\n%s", what, wait, diff)
		}
	}
	var rvDiffs []string
	checkRV := func(what string) {
		if diff, err := r14Diff(ctx, ref, d.in.Snapshot(), true); err != nil {
			t.Fatal(err)
		} else if diff != "" {
			rvDiffs = append(rvDiffs, what+":\n"+diff)
		}
	}

	t.Run("initial", func(t *testing.T) { check(t, "the first list") })

	t.Run("updates", func(t *testing.T) {
		p, err := ref.CoreV1().Pods("x").Get(ctx, "plain", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Labels = map[string]string{"app": "api", "new": "1"}
		if _, err := ref.CoreV1().Pods("x").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := r14SetStatus(ctx, ref, "annotated", corev1.PodRunning, "10.244.1.21", "fd00:1::21"); err != nil {
			t.Fatal(err)
		}
		if err := r14SetStatus(ctx, ref, "pending", corev1.PodRunning, "10.244.1.22"); err != nil {
			t.Fatal(err)
		}
		n, err := ref.CoreV1().Nodes().Get(ctx, "n-good", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Labels["zone"] = "c"
		if _, err := ref.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		check(t, "labels and statuses changed")

		// Changes of what the daemon does not read: an annotation, a
		// node's heartbeat. Only the resourceVersions move.
		p, err = ref.CoreV1().Pods("x").Get(ctx, "plain", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Annotations = map[string]string{"touched": "yes"}
		if _, err := ref.CoreV1().Pods("x").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		n, err = ref.CoreV1().Nodes().Get(ctx, "n-good", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
		if _, err := ref.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		check(t, "an annotation and a heartbeat")
		checkRV("after an annotation and a heartbeat")
	})

	t.Run("deletes", func(t *testing.T) {
		zero := metav1.DeleteOptions{GracePeriodSeconds: r14Ptr(int64(0))}
		if err := ref.CoreV1().Pods("x").Delete(ctx, "term", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		check(t, "pod term terminating (held by its finalizer)")
		p, err := ref.CoreV1().Pods("x").Get(ctx, "term", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Finalizers = nil
		if _, err := ref.CoreV1().Pods("x").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := ref.CoreV1().Pods("x").Delete(ctx, "done", zero); err != nil {
			t.Fatal(err)
		}
		// Re-created at once under its name: a new UID, a new address.
		if err := r14CreatePod(ctx, ref, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "done", Labels: map[string]string{"app": "job2"}}, Spec: corev1.PodSpec{NodeName: "n-good"}},
			corev1.PodRunning, "10.244.1.23"); err != nil {
			t.Fatal(err)
		}
		if err := ref.CoreV1().Nodes().Delete(ctx, strings.Repeat("n", 200)+".big", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		check(t, "deletes and a re-create")
	})

	t.Run("restart informers", func(t *testing.T) {
		d.stop()
		// While no informer runs: a pod deleted, one re-created, a label.
		zero := metav1.DeleteOptions{GracePeriodSeconds: r14Ptr(int64(0))}
		if err := ref.CoreV1().Pods("x").Delete(ctx, "upper", zero); err != nil {
			t.Fatal(err)
		}
		if err := ref.CoreV1().Pods("x").Delete(ctx, "done", zero); err != nil {
			t.Fatal(err)
		}
		if err := r14CreatePod(ctx, ref, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "done", Labels: map[string]string{"app": "job3"}}, Spec: corev1.PodSpec{NodeName: "n-good"}},
			corev1.PodRunning, "10.244.1.24"); err != nil {
			t.Fatal(err)
		}
		d = r14Start(t, srv, parentCleanup)
		check(t, "new informers")
		checkRV("new informers")
	})

	t.Run("restart API server", func(t *testing.T) {
		// The reflectors retry on their own backoff, up to a minute apart.
		wait = 90 * time.Second
		if err := srv.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		if err := srv.StartAPIServer(); err != nil {
			t.Fatal(err)
		}
		p, err := ref.CoreV1().Pods("x").Get(ctx, "plain", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Labels["after"] = "restart"
		if _, err := ref.CoreV1().Pods("x").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := ref.CoreV1().Pods("x").Delete(ctx, "host", metav1.DeleteOptions{GracePeriodSeconds: r14Ptr(int64(0))}); err != nil {
			t.Fatal(err)
		}
		check(t, "after the API server restarted")
	})

	// An update of nothing the compiler reads (an annotation, a node's
	// heartbeat) sends no Snapshot, by design (k8s/doc.go), so the
	// Snapshot keeps the earlier resourceVersion: logged, not a failure.
	if len(rvDiffs) > 0 {
		t.Logf("resourceVersions the snapshot keeps from before updates of unread fields (-API server +daemon), %s", strings.Join(rvDiffs, "\n"))
	}

	for _, e := range d.logs.FilterMessage("skipped an API object").All() {
		t.Logf("daemon log: %s %v", e.Message, e.ContextMap())
	}
}

// r14OddNodes are addresses the API server stores in a Node's
// status.addresses (it validates their text nowhere) and ValidateNode
// refuses.
var r14OddNodes = []struct{ name, addr string }{
	{"n-mapped", "::ffff:10.0.0.7"}, {"n-lead", "010.0.0.8"}, {"n-dns", "node-1.example.com"}, {"n-zone", "fe80::1%eth0"},
}

// TestHostileRound14NodesWithOddAddresses: Nodes whose ExternalIP the API
// server stores as written, though it is no strict IP address, were left
// out of the daemon's Snapshots whole (labels, pod CIDRs, the valid
// InternalIP too) until dd49015; see k8s
// TestHostileRound14NodeWithUnreadableAddressIsDropped. n-good is the
// control.
func TestHostileRound14NodesWithOddAddresses(t *testing.T) {
	srv, ref := r14Cluster(t)
	ctx := context.Background()
	if err := r14CreateNode(ctx, ref, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n-good", Labels: map[string]string{"zone": "a"}}, Spec: corev1.NodeSpec{PodCIDR: "10.244.1.0/24"}},
		corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.5"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range r14OddNodes {
		if err := r14CreateNode(ctx, ref, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: c.name, Labels: map[string]string{"zone": "b"}},
			Spec:       corev1.NodeSpec{PodCIDR: "10.244.9.0/24"},
		}, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.9"}, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: c.addr}); err != nil {
			t.Fatalf("the API server refuses node %s with ExternalIP %q (the test's premise): %v", c.name, c.addr, err)
		}
	}
	d := r14Start(t, srv, t.Cleanup)
	// Each node must be there with its labels, pod CIDRs and valid
	// InternalIP; what becomes of the odd address (dropped, unmapped,
	// its zone cut) is logged, not judged.
	snap := d.in.Snapshot()
	for _, name := range []string{"n-good", "n-mapped", "n-lead", "n-dns", "n-zone"} {
		i := slices.IndexFunc(snap.Nodes, func(n *corev1.Node) bool { return n.Name == name })
		if i < 0 {
			t.Errorf("Node %s is in the API server but in no Snapshot", name)
			continue
		}
		n := snap.Nodes[i]
		want := "10.0.0.9"
		if name == "n-good" {
			want = "10.0.0.5"
		}
		if !slices.Contains(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: want}) || n.Labels["zone"] == "" || len(n.Spec.PodCIDRs) != 1 {
			t.Errorf("Node %s in the Snapshot: labels %v, podCIDRs %v, addresses %v", name, n.Labels, n.Spec.PodCIDRs, n.Status.Addresses)
		}
		t.Logf("Node %s: the daemon reads addresses %v", name, n.Status.Addresses)
	}
	for _, e := range d.logs.FilterMessage("skipped an API object").All() {
		t.Logf("daemon log: %s %v", e.Message, e.ContextMap())
	}
}
