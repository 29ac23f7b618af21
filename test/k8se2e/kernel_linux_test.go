package k8se2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nftpolicy/nftpolicy/internal/apiserver"
	"github.com/nftpolicy/nftpolicy/internal/netns"
	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// nftList returns `nft list table inet nftpolicy` in the node's namespace
// without counter values (probes move them; they are not what the table
// enforces), or "" when the table does not exist.
func nftList(n *netns.Node) string {
	out, err := exec.Command("ip", "netns", "exec", n.NetnsName(), "nft", "list", "table", "inet", "nftpolicy").Output()
	if err != nil {
		return ""
	}
	return testns.WithoutCounterValues(string(out))
}

// latencies collects API write → kernel times.
type latencies struct {
	names []string
	d     []time.Duration
}

func (l *latencies) report(t *testing.T) {
	t.Helper()
	if len(l.d) == 0 {
		return
	}
	s := slices.Clone(l.d)
	slices.Sort(s)
	for i, n := range l.names {
		t.Logf("API write → kernel: %-34s %v", n, l.d[i].Round(time.Millisecond))
	}
	t.Logf("API write → kernel over %d writes: p50 %v, max %v", len(s), s[(len(s)-1)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}

// kernelChange runs write and returns how long it took, from just before
// the write, until the node's table differs from what it was before: the
// time from an API write to the kernel. It fails t after 10 s.
func kernelChange(t *testing.T, n *netns.Node, lat *latencies, name string, write func() error) {
	t.Helper()
	before := nftList(n)
	start := time.Now()
	if err := write(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for {
		if got := nftList(n); got != before && got != "" {
			lat.names = append(lat.names, name)
			lat.d = append(lat.d, time.Since(start))
			return
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%s: the kernel's table did not change within 10s", name)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// synced runs write and waits until the daemon has synced after it
// (/readyz generation), for writes that leave the table as it is.
func synced(t *testing.T, d *daemon, name string, write func() error) {
	t.Helper()
	before, err := d.generation()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := write(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for {
		if n, _ := d.generation(); n > before {
			t.Logf("API write → sync: %s %v", name, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%s: no sync within 10s", name)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func checkMatrix(t *testing.T, c *netns.Cluster, pods []*netns.Pod, what string, want *netns.Matrix) {
	t.Helper()
	if d := c.ProbeMatrix(pods, netns.IPv4, netns.TCP, 80).Diff(want); d != "" {
		t.Errorf("%s:\n%s", what, d)
	}
}

// createCluster creates namespaces x and y, node n with its pod CIDR and
// pods (labelled pod=<name>) through client, and gives the running ones
// their addresses.
func createCluster(ctx context.Context, t *testing.T, client kubernetes.Interface, n *netns.Node, pods []*netns.Pod, running ...*netns.Pod) {
	t.Helper()
	for _, ns := range []string{"x", "y"} {
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name()}, Spec: corev1.NodeSpec{PodCIDR: n.PodCIDRv4().String()}}
	if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if _, err := client.CoreV1().Pods(p.Namespace()).Create(ctx, apiPod(p, map[string]string{"pod": p.Name()}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range running {
		if err := setPodIP(ctx, client, p); err != nil {
			t.Fatal(err)
		}
	}
}

func apiPod(p *netns.Pod, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace(), Name: p.Name(), Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:   p.Node().Name(),
			Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80}}}},
		},
	}
}

// setPodIP does what the kubelet does once the sandbox has an address.
func setPodIP(ctx context.Context, client kubernetes.Interface, p *netns.Pod) error {
	pod, err := client.CoreV1().Pods(p.Namespace()).Get(ctx, p.Name(), metav1.GetOptions{})
	if err != nil {
		return err
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = p.IPv4().String()
	pod.Status.PodIPs = []corev1.PodIP{{IP: p.IPv4().String()}}
	_, err = client.CoreV1().Pods(p.Namespace()).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	return err
}

// rbacDaemonToken creates deploy/rbac.yaml on srv and returns a token of
// its ServiceAccount, after checking that the role allows exactly reads.
func rbacDaemonToken(t *testing.T, srv *apiserver.Server, client kubernetes.Interface) string {
	t.Helper()
	ctx := context.Background()
	createAll(t, srv, manifestDocs(t, filepath.Join(repoRoot, "deploy", "rbac.yaml")))
	if t.Failed() {
		t.FailNow()
	}
	token, err := srv.ServiceAccountToken(ctx, "kube-system", "nftpolicy", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// What the token may do, asked of the RBAC authorizer.
	user := "system:serviceaccount:kube-system:nftpolicy"
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}
	for _, c := range []struct {
		verb, group, resource, sub string
		allowed                    bool
	}{
		{"list", "", "pods", "", true}, {"watch", "", "pods", "", true}, {"get", "", "pods", "", true},
		{"list", "", "namespaces", "", true}, {"watch", "", "nodes", "", true},
		{"watch", "networking.k8s.io", "networkpolicies", "", true},
		{"list", "policy.networking.k8s.io", "clusternetworkpolicies", "", true},
		{"watch", "policy.networking.k8s.io", "clusternetworkpolicies", "", true},
		{"delete", "policy.networking.k8s.io", "clusternetworkpolicies", "", false},
		{"create", "", "pods", "", false}, {"update", "", "pods", "status", false},
		{"patch", "", "nodes", "", false}, {"delete", "networking.k8s.io", "networkpolicies", "", false},
		{"list", "", "secrets", "", false}, {"list", "", "services", "", false},
		{"list", "discovery.k8s.io", "endpointslices", "", false},
	} {
		allowed, err := canI(ctx, client, user, groups, c.verb, c.group, c.resource, c.sub)
		if err != nil {
			t.Fatal(err)
		}
		if allowed != c.allowed {
			t.Errorf("ClusterRole nftpolicy: %s %s/%s %s allowed=%v, want %v", c.verb, c.group, c.resource, c.sub, allowed, c.allowed)
		}
	}
	// The role as written: only get/list/watch, only the resources the
	// informers follow.
	role, err := client.RbacV1().ClusterRoles().Get(ctx, "nftpolicy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range role.Rules {
		if !slices.Equal(r.Verbs, []string{"get", "list", "watch"}) {
			t.Errorf("rule %v: verbs beyond get/list/watch", r)
		}
		for _, res := range r.Resources {
			if !slices.Contains([]string{"pods", "namespaces", "nodes", "networkpolicies", "clusternetworkpolicies"}, res) {
				t.Errorf("rule %v: resource %s", r, res)
			}
		}
	}
	return token
}

func TestIntegrationAPIServerToKernel(t *testing.T) {
	c := netns.NewTestCluster(t, netns.Options{Name: "k8s", IPv4: true, Timeout: 500 * time.Millisecond})
	srv := apiserver.StartTest(t, apiserver.Options{RBAC: true})
	ctx := context.Background()
	client, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	token := rbacDaemonToken(t, srv, client)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := srv.WriteKubeconfig(kubeconfig, token); err != nil {
		t.Fatal(err)
	}

	n1, err := c.AddNode("node1")
	if err != nil {
		t.Fatal(err)
	}
	xa, err := c.AddPod(n1, "x", "a")
	if err != nil {
		t.Fatal(err)
	}
	xb, err := c.AddPod(n1, "x", "b")
	if err != nil {
		t.Fatal(err)
	}
	ya, err := c.AddPod(n1, "y", "a")
	if err != nil {
		t.Fatal(err)
	}
	pods := []*netns.Pod{xa, xb, ya}
	keys := netns.Keys(pods)

	// The cluster as the kubelet and the scheduler would have made it:
	// x/b is still starting (no IP).
	createCluster(ctx, t, client, n1, pods, xa, ya)
	deny := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "default-deny"},
		Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	}
	if _, err := client.NetworkingV1().NetworkPolicies("x").Create(ctx, deny, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	d := startDaemon(t, "--kubeconfig", kubeconfig, "--node", "node1", "--netns", n1.NetnsName())
	d.waitReady(t, 30*time.Second)
	if table := nftList(n1); table == "" {
		t.Fatal("no table inet nftpolicy after the first sync")
	}
	// x/a is isolated; x/b has no IP yet, so it is not a target.
	want := netns.NewMatrix(keys, true).Expect("*", "x/a", false).Expect("x/a", "x/a", true)
	checkMatrix(t, c, pods, "initial state", want)

	lat := &latencies{}
	defer lat.report(t)

	kernelChange(t, n1, lat, "pod IP set (status subresource)", func() error { return setPodIP(ctx, client, xb) })
	want = netns.NewMatrix(keys, true).Expect("*", "x/*", false).Expect("x/a", "x/a", true).Expect("x/b", "x/b", true)
	checkMatrix(t, c, pods, "x/b got its IP and is isolated", want)

	allow := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "allow-red"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": "web"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "red"}},
			}}}},
		},
	}
	// allow-red selects no pod yet: the table stays as it is, so wait for
	// the daemon's next sync instead.
	synced(t, d, "policy created (selects nothing yet)", func() error {
		_, err := client.NetworkingV1().NetworkPolicies("x").Create(ctx, allow, metav1.CreateOptions{})
		return err
	})
	checkMatrix(t, c, pods, "allow-red selects no pod yet", want)

	kernelChange(t, n1, lat, "pod label changed", func() error {
		return relabelPod(ctx, client, "x", "a", map[string]string{"pod": "a", "tier": "web"})
	})
	checkMatrix(t, c, pods, "x/a is web, but no namespace is red", want)

	kernelChange(t, n1, lat, "namespace label changed", func() error {
		return relabelNamespace(ctx, client, "y", map[string]string{"team": "red"})
	})
	want.Expect("y/*", "x/a", true)
	checkMatrix(t, c, pods, "y is red: y/a reaches x/a", want)

	// The API server goes away: the daemon keeps enforcing what it had.
	before := nftList(n1)
	if err := srv.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	checkMatrix(t, c, pods, "API server down", want)
	if got := nftList(n1); got != before {
		t.Errorf("the table changed while the API server was down")
	}
	restart := time.Now()
	if err := srv.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("API server restarted in %v", time.Since(restart).Round(time.Millisecond))
	// After the relist nothing is lost or duplicated (the table is the same),
	// and new writes arrive again.
	kernelChange(t, n1, lat, "policy edited after restart", func() error {
		np, err := client.NetworkingV1().NetworkPolicies("x").Get(ctx, "allow-red", metav1.GetOptions{})
		if err != nil {
			return err
		}
		np.Spec.PodSelector = metav1.LabelSelector{}
		_, err = client.NetworkingV1().NetworkPolicies("x").Update(ctx, np, metav1.UpdateOptions{})
		return err
	})
	want.Expect("y/*", "x/*", true)
	checkMatrix(t, c, pods, "allow-red selects all of x after the restart", want)

	kernelChange(t, n1, lat, "policies deleted", func() error {
		for _, name := range []string{"default-deny", "allow-red"} {
			if err := client.NetworkingV1().NetworkPolicies("x").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				return err
			}
		}
		return nil
	})
	checkMatrix(t, c, pods, "no policies", netns.NewMatrix(keys, true))
	if os.Getenv("K8SE2E_SHOW_LOG") != "" {
		t.Logf("daemon log:\n%s", d.Logs())
	}
}

func relabelPod(ctx context.Context, client kubernetes.Interface, ns, name string, labels map[string]string) error {
	p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	p.Labels = labels
	_, err = client.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
	return err
}

func relabelNamespace(ctx context.Context, client kubernetes.Interface, name string, labels map[string]string) error {
	n, err := client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	n.Labels = labels
	_, err = client.CoreV1().Namespaces().Update(ctx, n, metav1.UpdateOptions{})
	return err
}

// canI asks the API server's authorizer whether user may do verb on
// group/resource[/sub] (a SubjectAccessReview, as `kubectl auth can-i --as`).
func canI(ctx context.Context, client kubernetes.Interface, user string, groups []string, verb, group, resource, sub string) (bool, error) {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource, Subresource: sub, Namespace: "x"},
	}}
	res, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return res.Status.Allowed, nil
}
