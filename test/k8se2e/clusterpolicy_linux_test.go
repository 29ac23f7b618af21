package k8se2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	policyv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
	policyclient "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"

	"github.com/nftpolicy/nftpolicy/internal/apiserver"
	"github.com/nftpolicy/nftpolicy/k8s"
)

// crdPath is the experimental-channel CRD of deploy/crds.
var crdPath = filepath.Join(repoRoot, "deploy", "crds", "experimental", "policy.networking.k8s.io_clusternetworkpolicies.yaml")

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// cnpClients returns admin clients of srv: core, ClusterNetworkPolicy,
// dynamic.
func cnpClients(t *testing.T, srv *apiserver.Server) (kubernetes.Interface, policyclient.Interface, dynamic.Interface) {
	t.Helper()
	cfg := srv.Config("")
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := policyclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client, pc, dyn
}

// installCRD creates the ClusterNetworkPolicy CRD of deploy/crds on srv and
// waits until ClusterNetworkPolicies can be listed.
func installCRD(t *testing.T, srv *apiserver.Server, pc policyclient.Interface) {
	t.Helper()
	createAll(t, srv, manifestDocs(t, crdPath))
	if t.Failed() {
		t.FailNow()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := pc.PolicyV1beta1().ClusterNetworkPolicies().List(context.Background(), metav1.ListOptions{})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ClusterNetworkPolicies not served 30s after the CRD was created: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cnp returns an Admin ClusterNetworkPolicy that denies ingress from every
// namespace to namespace x.
func cnp(name string, priority int32) *policyv1beta1.ClusterNetworkPolicy {
	return &policyv1beta1.ClusterNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"big": strings.Repeat("x", 1000)}},
		Spec: policyv1beta1.ClusterNetworkPolicySpec{
			Tier:     policyv1beta1.AdminTier,
			Priority: priority,
			Subject: policyv1beta1.ClusterNetworkPolicySubject{
				Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "x"}},
			},
			Ingress: []policyv1beta1.ClusterNetworkPolicyIngressRule{{
				Name: "deny-all", Action: policyv1beta1.ClusterNetworkPolicyRuleActionDeny,
				From: []policyv1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: &metav1.LabelSelector{}}},
			}},
		},
	}
}

// startSource starts the informer source on srv the way `nftpolicy run`
// does, asking discovery every 200ms, and returns it with its snapshots
// and log.
func startSource(t *testing.T, ctx context.Context, client kubernetes.Interface, pc policyclient.Interface) (*k8s.Informers, <-chan *k8s.Snapshot, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.DebugLevel)
	in := k8s.NewInformers(client, k8s.InformerOptions{Log: zap.New(core), Policy: pc, ClusterPolicyCheck: 200 * time.Millisecond})
	// The informers run until ctx ends: Start gets ctx itself, and no more
	// than 30s to return.
	started := make(chan error, 1)
	go func() { started <- in.Start(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Start has not returned after 30s")
	}
	return in, in.Watch(ctx), logs
}

// waitSnapshot waits up to 30s for a snapshot for which ok returns "".
func waitSnapshot(t *testing.T, snaps <-chan *k8s.Snapshot, what string, ok func(*k8s.Snapshot) string) *k8s.Snapshot {
	t.Helper()
	timeout := time.After(30 * time.Second)
	last := "no snapshot"
	for {
		select {
		case s := <-snaps:
			if last = ok(s); last == "" {
				return s
			}
		case <-timeout:
			t.Fatalf("%s: no such snapshot within 30s; the last: %s", what, last)
		}
	}
}

// clusterPolicies describes a snapshot's ClusterNetworkPolicies as
// "name/priority ...".
func clusterPolicies(s *k8s.Snapshot) string {
	var out []string
	for _, c := range s.ClusterPolicies {
		out = append(out, fmt.Sprintf("%s/%d", c.Name, c.Spec.Priority))
	}
	return strings.Join(out, " ")
}

func want(got, want string) string {
	if got == want {
		return ""
	}
	return fmt.Sprintf("ClusterPolicies %q, want %q", got, want)
}

// A ClusterNetworkPolicy created, updated and deleted through the real API
// server (its v0.3.0 CRD installed) reaches the informer source's
// snapshots, slimmed and admitted; one the API server accepts but the
// source's validation rejects is left out and named in the log.
func TestIntegrationClusterNetworkPolicyInformer(t *testing.T) {
	srv := apiserver.StartTest(t, apiserver.Options{})
	client, pc, _ := cnpClients(t, srv)
	installCRD(t, srv, pc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cnps := pc.PolicyV1beta1().ClusterNetworkPolicies()

	if _, err := cnps.Create(ctx, cnp("deny-x", 10), metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
		t.Fatal(err)
	}
	// The CRD takes any strings in a selector; the compiler cannot use
	// this one.
	bad := cnp("bad-selector", 20)
	bad.Spec.Subject.Namespaces.MatchLabels = map[string]string{"not a key": "x"}
	if _, err := cnps.Create(ctx, bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	in, snaps, logs := startSource(t, ctx, client, pc)
	s := waitSnapshot(t, snaps, "created", func(s *k8s.Snapshot) string { return want(clusterPolicies(s), "deny-x/10") })
	got := s.ClusterPolicies[0]
	if got.Annotations != nil || got.ManagedFields != nil || got.APIVersion != "policy.networking.k8s.io/v1beta1" || got.Kind != "ClusterNetworkPolicy" {
		t.Errorf("not slimmed or typed: annotations %d, managedFields %d, %s %s", len(got.Annotations), len(got.ManagedFields), got.APIVersion, got.Kind)
	}
	if n := logs.FilterMessage("skipped an API object").FilterFieldKey("object").Len(); n == 0 ||
		!strings.Contains(fmt.Sprint(logs.FilterMessage("skipped an API object").All()[0].ContextMap()), "ClusterNetworkPolicy bad-selector") {
		t.Errorf("the rejected ClusterNetworkPolicy is not named in the log: %v", logs.All())
	}

	cur, err := cnps.Get(ctx, "deny-x", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Priority = 11
	if _, err := cnps.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSnapshot(t, snaps, "updated", func(s *k8s.Snapshot) string { return want(clusterPolicies(s), "deny-x/11") })

	// Fixed, it is admitted.
	if err := cnps.Delete(ctx, "bad-selector", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cnps.Delete(ctx, "deny-x", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSnapshot(t, snaps, "deleted", func(s *k8s.Snapshot) string { return want(clusterPolicies(s), "") })
	if _, err := in.Health(); err != nil {
		t.Errorf("Health: %v", err)
	}
}

// Without the CRD the source starts, serves NetworkPolicies and is
// healthy, and says once that ClusterNetworkPolicy is not served. Once the
// CRD is installed, a ClusterNetworkPolicy arrives; once it is removed,
// the source drops them and stays healthy.
func TestIntegrationClusterNetworkPolicyCRDLater(t *testing.T) {
	srv := apiserver.StartTest(t, apiserver.Options{})
	client, pc, dyn := cnpClients(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "deny"},
		Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	}
	if _, err := client.NetworkingV1().NetworkPolicies("x").Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	in, snaps, logs := startSource(t, ctx, client, pc)
	t.Logf("started without the CRD in %v", time.Since(start).Round(time.Millisecond))
	waitSnapshot(t, snaps, "NetworkPolicy without the CRD", func(s *k8s.Snapshot) string {
		if len(s.Policies) != 1 || s.Policies[0].Name != "deny" {
			return fmt.Sprintf("%d policies", len(s.Policies))
		}
		return want(clusterPolicies(s), "")
	})
	if _, err := in.Health(); err != nil {
		t.Errorf("Health without the CRD: %v", err)
	}
	// A few discovery rounds, and still one line.
	time.Sleep(time.Second)
	if n := logs.FilterMessageSnippet("does not serve ClusterNetworkPolicy").Len(); n != 1 {
		t.Errorf("%d log lines say ClusterNetworkPolicy is not served, want 1: %v", n, logs.All())
	}

	installCRD(t, srv, pc)
	if _, err := pc.PolicyV1beta1().ClusterNetworkPolicies().Create(ctx, cnp("deny-x", 5), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSnapshot(t, snaps, "ClusterNetworkPolicy after the CRD", func(s *k8s.Snapshot) string {
		if len(s.Policies) != 1 {
			return fmt.Sprintf("%d policies", len(s.Policies))
		}
		return want(clusterPolicies(s), "deny-x/5")
	})
	if _, err := in.Health(); err != nil {
		t.Errorf("Health with the CRD: %v", err)
	}

	// Removing the CRD deletes its objects; the source follows and does
	// not take the 404s of its list and watch for an outage.
	if err := dyn.Resource(crdResource).Delete(ctx, "clusternetworkpolicies.policy.networking.k8s.io", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSnapshot(t, snaps, "the CRD removed", func(s *k8s.Snapshot) string { return want(clusterPolicies(s), "") })
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := dyn.Resource(crdResource).Get(ctx, "clusternetworkpolicies.policy.networking.k8s.io", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the CRD is still there: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	if _, err := in.Health(); err != nil {
		t.Errorf("Health after the CRD was removed: %v", err)
	}
	if logs.FilterMessageSnippet("no longer serves ClusterNetworkPolicy").Len() != 1 {
		t.Errorf("the removal is not logged once: %v", logs.FilterMessageSnippet("ClusterNetworkPolicy").All())
	}
}
