package k8se2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftpolicy/nftpolicy/internal/apiserver"
	"github.com/nftpolicy/nftpolicy/internal/netns"
	"github.com/nftpolicy/nftpolicy/internal/testbin"
)

// waitReadyz polls /readyz until ok holds for its status and body, failing
// t after timeout (generous: it bounds a hang, it measures nothing) or if
// the daemon exits.
func (d *daemon) waitReadyz(t *testing.T, what string, timeout time.Duration, ok func(code int, body string) bool) (int, string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var r testbin.Readyz
	for time.Now().Before(deadline) {
		if d.Exited() {
			t.Fatalf("%s: daemon exited: %v", what, d.Cmd.ProcessState)
		}
		var err error
		r, err = d.Readyz()
		code := http.StatusServiceUnavailable
		if r.Ready {
			code = http.StatusOK
		}
		if err == nil && ok(code, r.Body) {
			return code, r.Body
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v; last /readyz %q", what, timeout, r.Body)
	return 0, ""
}

// While the API server is down the daemon keeps the table it programmed
// and is not ready, saying why (the API server's address and the error);
// once the API server is back and the informers have caught up, it is
// ready again by itself and follows changes.
func TestIntegrationAPIServerDown(t *testing.T) {
	c := netns.NewTestCluster(t, netns.Options{Name: "down", IPv4: true, Timeout: 500 * time.Millisecond})
	srv := apiserver.StartTest(t, apiserver.Options{})
	ctx := context.Background()
	client, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := srv.WriteKubeconfig(kubeconfig, ""); err != nil {
		t.Fatal(err)
	}
	apiHost := strings.TrimPrefix(srv.URL, "https://")

	n1, err := c.AddNode("node1")
	if err != nil {
		t.Fatal(err)
	}
	xa, err := c.AddPod(n1, "x", "a")
	if err != nil {
		t.Fatal(err)
	}
	ya, err := c.AddPod(n1, "y", "a")
	if err != nil {
		t.Fatal(err)
	}
	pods := []*netns.Pod{xa, ya}
	keys := netns.Keys(pods)
	createCluster(ctx, t, client, n1, pods, pods...)
	deny := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "default-deny"},
		Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	}
	if _, err := client.NetworkingV1().NetworkPolicies("x").Create(ctx, deny, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	d := startDaemon(t, "--kubeconfig", kubeconfig, "--node", "node1", "--netns", n1.NetnsName())
	d.waitReady(t, 60*time.Second)
	before := nftList(n1)
	if before == "" {
		t.Fatal("no table inet nftpolicy after the first sync")
	}
	want := netns.NewMatrix(keys, true).Expect("*", "x/a", false).Expect("x/a", "x/a", true)
	checkMatrix(t, c, pods, "initial state", want)

	// Down: not ready, naming the API server and the error; the table stays.
	if err := srv.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	_, body := d.waitReadyz(t, "/readyz 503 naming the API server", 3*time.Minute, func(code int, body string) bool {
		return code == http.StatusServiceUnavailable && strings.Contains(body, "API source") && strings.Contains(body, apiHost)
	})
	t.Logf("/readyz while the API server is down:\n%s", body)
	if !strings.Contains(body, "connection refused") {
		t.Errorf("/readyz does not name the error (connection refused):\n%s", body)
	}
	if !strings.Contains(body, "synced generation") {
		t.Errorf("/readyz lost the synced generation while the API server is down:\n%s", body)
	}
	if got := nftList(n1); got != before {
		t.Errorf("the table changed while the API server was down:\n%s", got)
	}
	checkMatrix(t, c, pods, "API server down", want)
	if log := d.Logs(); !strings.Contains(log, "cannot list and watch at the API server") || !strings.Contains(log, srv.URL) {
		t.Errorf("the daemon did not log the failure naming %s:\n%s", srv.URL, log)
	}
	// Still not ready after every informer has retried: the retries neither
	// clear it nor log a line each.
	_, body = d.waitReadyz(t, "two more failed requests per informer", 3*time.Minute, func(code int, body string) bool {
		return code == http.StatusServiceUnavailable && failedRequests(body) >= 12
	})
	if n := strings.Count(d.Logs(), "cannot list and watch at the API server"); n > 2 {
		t.Errorf("%d log lines for %d failed requests, want the first and at most one repeat (backoff):\n%s", n, failedRequests(body), d.Logs())
	}

	// Back (same etcd, so the objects are there): ready again by itself.
	if err := srv.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	_, body = d.waitReadyz(t, "/readyz 200 after the API server is back", 3*time.Minute, func(code int, _ string) bool {
		return code == http.StatusOK
	})
	t.Logf("ready again %v after the API server restarted: %s", time.Since(restarted).Round(time.Millisecond), strings.TrimSpace(body))
	if got := nftList(n1); got != before {
		t.Errorf("the table changed across the restart, where nothing changed:\n%s", got)
	}
	if !strings.Contains(d.Logs(), "the API server answers again") {
		t.Errorf("the recovery was not logged:\n%s", d.Logs())
	}

	// A change made after the restart is programmed.
	allow := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "allow-y"},
		Spec: networkingv1.NetworkPolicySpec{
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "y"}},
			}}}},
		},
	}
	if _, err := client.NetworkingV1().NetworkPolicies("x").Create(ctx, allow, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for nftList(n1) == before {
		if time.Now().After(deadline) {
			t.Fatal("a policy created after the restart was not programmed within a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.waitReadyz(t, "/readyz 200 after the change", time.Minute, func(code int, _ string) bool { return code == http.StatusOK })
	want.Expect("y/a", "x/a", true)
	checkMatrix(t, c, pods, "allow-y created after the restart", want)
	if os.Getenv("K8SE2E_SHOW_LOG") != "" {
		t.Logf("daemon log:\n%s", d.Logs())
	}
}

// failedRequests reads "(N failed requests)" from a /readyz body, 0 when
// there is none.
func failedRequests(body string) int {
	_, after, ok := strings.Cut(body, " failed requests)")
	if !ok {
		return 0
	}
	before := body[:len(body)-len(after)-len(" failed requests)")]
	i := strings.LastIndex(before, "(")
	n, _ := strconv.Atoi(before[i+1:])
	return n
}
