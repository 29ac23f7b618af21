package k8se2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/nftpolicy/nftpolicy/internal/apiserver"
	"github.com/nftpolicy/nftpolicy/internal/testbin"
)

// repoRoot is the repository, two levels above this package.
var repoRoot = filepath.Join("..", "..")

// manifestDocs reads every YAML document of path as unstructured objects.
func manifestDocs(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for i, doc := range strings.Split(string(data), "\n---") {
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("%s doc %d: %v", path, i, err)
		}
		if string(j) == "null" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			t.Fatalf("%s doc %d: %v", path, i, err)
		}
		out = append(out, u)
	}
	return out
}

// createAll creates objs on the server with strict field validation: an
// unknown or duplicate field, or anything the server's validation rejects,
// fails the test.
func createAll(t *testing.T, srv *apiserver.Server, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	cfg := srv.Config("")
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(client.Discovery()))
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(schema.GroupKind{Group: gvk.Group, Kind: gvk.Kind}, gvk.Version)
		if err != nil {
			t.Errorf("%s %s: %v", gvk.Kind, u.GetName(), err)
			continue
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == "namespace" {
			ri = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
		}
		if _, err := ri.Create(ctx, u, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
			t.Errorf("create %s %s/%s: %v", gvk.Kind, u.GetNamespace(), u.GetName(), err)
		}
	}
}

// deployObjects returns the objects of deploy/kustomization.yaml's
// resources, checking that the kustomization names every YAML manifest in
// deploy/ (examples/ are applied on their own).
func deployObjects(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	dir := filepath.Join(repoRoot, "deploy")
	var k struct {
		Resources []string `json:"resources"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, &k, yaml.DisallowUnknownFields); err != nil {
		// Fields other than resources are kustomize's business.
		if err := yaml.Unmarshal(data, &k); err != nil {
			t.Fatal(err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	var want []string
	for _, f := range files {
		if filepath.Base(f) != "kustomization.yaml" {
			want = append(want, filepath.Base(f))
		}
	}
	got := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(got, want) {
		t.Errorf("kustomization resources %v, want every manifest of deploy/: %v", got, want)
	}
	var objs []*unstructured.Unstructured
	for _, r := range k.Resources {
		objs = append(objs, manifestDocs(t, filepath.Join(dir, r))...)
	}
	return objs
}

func TestIntegrationDeployManifests(t *testing.T) {
	srv := apiserver.StartTest(t, apiserver.Options{RBAC: true})
	createAll(t, srv, deployObjects(t))
	// The standard-channel CRD (experimental: clusterpolicy_linux_test.go),
	// which the daemon does not need.
	createAll(t, srv, manifestDocs(t, filepath.Join(repoRoot, "deploy", "crds", "standard", "policy.networking.k8s.io_clusternetworkpolicies.yaml")))

	// The examples, in the namespaces they name.
	examples, _ := filepath.Glob(filepath.Join(repoRoot, "deploy", "examples", "*.yaml"))
	if len(examples) == 0 {
		t.Fatal("no deploy/examples/*.yaml")
	}
	var objs []*unstructured.Unstructured
	namespaces := map[string]bool{}
	for _, f := range examples {
		for _, u := range manifestDocs(t, f) {
			if ns := u.GetNamespace(); ns != "" && !namespaces[ns] {
				namespaces[ns] = true
				n := &unstructured.Unstructured{}
				n.SetAPIVersion("v1")
				n.SetKind("Namespace")
				n.SetName(ns)
				objs = append(objs, n)
			}
			objs = append(objs, u)
		}
	}
	createAll(t, srv, objs)
}

// A daemon is one `nftpolicy run` process, stopped when the test ends.
type daemon struct{ *testbin.Daemon }

func startDaemon(t *testing.T, args ...string) *daemon {
	t.Helper()
	d, err := testbin.StartDaemon(testbin.Nftpolicy(t), args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("daemon log:\n%s", d.Logs())
		}
	})
	return &daemon{d}
}

// generation returns the daemon's synced generation from /readyz, 0 when
// not ready.
func (d *daemon) generation() (uint64, error) {
	r, err := d.Readyz()
	if err != nil || !r.Ready {
		return 0, err
	}
	return r.Generation, nil
}

func (d *daemon) waitReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if d.Exited() {
			t.Fatalf("daemon exited: %v\n%s", d.Cmd.ProcessState, d.Logs())
		}
		if n, _ := d.generation(); n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("daemon not ready after %v:\n%s", timeout, d.Logs())
}
