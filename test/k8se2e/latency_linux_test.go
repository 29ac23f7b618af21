package k8se2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nftpolicy/nftpolicy/enforcer"
	"github.com/nftpolicy/nftpolicy/internal/apiserver"
	"github.com/nftpolicy/nftpolicy/internal/ruleprobe"
	"github.com/nftpolicy/nftpolicy/internal/scale"
	"github.com/nftpolicy/nftpolicy/internal/testns"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// The node under test of the synthetic clusters (internal/scale).
const scaleNode = "node-1"

// Knobs of TestIntegrationAPIWriteToKernel, for the figures of
// docs/performance.md ("Change latency"); the suite runs the defaults.
const (
	// namespaces x pods per namespace x policies per namespace, as
	// scale.Cluster takes them: "100x100x10" is 1k policies, "100x100x100"
	// 10k. The default, 2x5x2, is a small cluster of 4 policies.
	envScale = "K8SE2E_LATENCY_SCALE"
	// Changes measured; 200 by default.
	envChanges = "K8SE2E_LATENCY_CHANGES"
	// Quiet before each change, from the kernel holding the previous one:
	// the debounce and 50ms by default (see TestIntegrationAPIWriteToKernel); 0 writes
	// each change as soon as the previous one is in the kernel.
	envGap = "K8SE2E_LATENCY_GAP"
	// Flags added to `nftpolicy run`, such as "--debounce 0".
	envArgs = "K8SE2E_LATENCY_ARGS"
)

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("$%s=%q: want a positive number", name, s)
	}
	return n
}

// scaleCluster is scale.Cluster of the size $K8SE2E_LATENCY_SCALE names
// (def when unset), with the label the API server gives every namespace,
// and the node under test, so that it is what the daemon's informers will
// see once it is created.
func scaleCluster(t *testing.T, def string) *k8s.Snapshot {
	t.Helper()
	spec := os.Getenv(envScale)
	if spec == "" {
		spec = def
	}
	var nss, pods, pols int
	if _, err := fmt.Sscanf(strings.ReplaceAll(spec, "x", " "), "%d %d %d", &nss, &pods, &pols); err != nil || nss < 1 || pods < 1 || pols < 1 {
		t.Fatalf("$%s=%q: want namespaces x pods x policies, as 100x100x10", envScale, spec)
	}
	snap := scale.Cluster(nss, pods, pols, min(110, (nss*pods+1)/2), scaleNode, false)
	scale.NameLabels(snap)
	snap.Nodes = []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: scaleNode}}}
	return snap
}

// createScale creates snap's objects through the API with parallel
// clients (creating 10k objects one at a time takes minutes): namespaces,
// then the node, pods (and their addresses, through the status
// subresource, as the kubelet does) and policies.
func createScale(t *testing.T, client kubernetes.Interface, snap *k8s.Snapshot) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	parallel := func(n int, do func(i int) error) {
		t.Helper()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var first error
		next := make(chan int)
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					if err := do(i); err != nil {
						mu.Lock()
						first = cmpErr(first, err)
						mu.Unlock()
					}
				}
			}()
		}
		for i := range n {
			next <- i
		}
		close(next)
		wg.Wait()
		if first != nil {
			t.Fatal(first)
		}
	}
	parallel(len(snap.Namespaces), func(i int) error {
		ns := snap.Namespaces[i].DeepCopy()
		delete(ns.Labels, corev1.LabelMetadataName) // the API server's to set
		_, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
		return err
	})
	for _, n := range snap.Nodes {
		if _, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	parallel(len(snap.Pods), func(i int) error {
		p := snap.Pods[i].Core()
		for j := range p.Spec.Containers {
			p.Spec.Containers[j].Image = "registry.invalid/none" // required; never pulled
		}
		created, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		created.Status = p.Status
		_, err = client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
		return err
	})
	parallel(len(snap.Policies), func(i int) error {
		np := snap.Policies[i]
		_, err := client.NetworkingV1().NetworkPolicies(np.Namespace).Create(ctx, np, metav1.CreateOptions{})
		return err
	})
	t.Logf("created %d namespaces, %d pods, %d policies in %v", len(snap.Namespaces), len(snap.Pods), len(snap.Policies), time.Since(start).Round(time.Millisecond))
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// fastClient is an admin client without client-go's default rate limit
// (the harness's 100 QPS would make the cluster's creation the test).
func fastClient(t *testing.T, srv *apiserver.Server) kubernetes.Interface {
	t.Helper()
	cfg := srv.Config("")
	cfg.QPS, cfg.Burst = 1e6, 1e6
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// scaleDaemon starts the API server, creates snap on it, and runs
// `nftpolicy run` against it in a new network namespace with args added,
// until it has programmed its first table. It returns the namespace and
// a handle on its ruleset.
func scaleDaemon(t *testing.T, snap *k8s.Snapshot, args ...string) (kubernetes.Interface, *daemon, string, *nft.Conn) {
	t.Helper()
	ns := testns.New(t, "nftk8slat")
	srv := apiserver.StartTest(t, apiserver.Options{})
	client := fastClient(t, srv)
	createScale(t, client, snap)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := srv.WriteKubeconfig(kubeconfig, ""); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, append([]string{"--kubeconfig", kubeconfig, "--node", scaleNode, "--netns", ns}, args...)...)
	start := time.Now()
	d.waitReady(t, 5*time.Minute)
	t.Logf("first sync %v after start", time.Since(start).Round(time.Millisecond))
	c, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return client, d, ns, c
}

// ruleReader opens a ruleprobe.Reader in ns for the test.
func ruleReader(t *testing.T, ns string) *ruleprobe.Reader {
	t.Helper()
	r, err := ruleprobe.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// pollInterval is the pause between two reads of the ruleset generation
// while a change is on its way: a netlink round trip of tens of
// microseconds, so the figures are this precise, without taking a core
// from the daemon and the API server.
const pollInterval = 200 * time.Microsecond

// untilInKernel polls the namespace's ruleset generation from gen and
// returns the time of the first commit after which holds (a read of the
// kernel) is true, and that generation. A commit seen is read once; if
// another came meanwhile, the time of the read is taken, never an earlier
// one. It fails t after 30 s.
func untilInKernel(t *testing.T, c *nft.Conn, gen uint32, start time.Time, holds func() (bool, error)) (time.Time, uint32) {
	t.Helper()
	for deadline := start.Add(30 * time.Second); ; {
		g, err := c.Generation()
		if err != nil {
			t.Fatal(err)
		}
		if g != gen {
			at := time.Now()
			gen = g
			ok, err := holds()
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				if g2, err := c.Generation(); err != nil {
					t.Fatal(err)
				} else if g2 != g {
					at = time.Now()
				}
				return at, gen
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the change did not reach the kernel within 30s")
		}
		time.Sleep(pollInterval)
	}
}

// percentile is the nearest-rank p-th percentile of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }

// TestIntegrationAPIWriteToKernel measures what issue 16 is about: the
// time from an API write to the kernel holding it, through the real
// kube-apiserver and etcd, the daemon's informers and its sync loop. It
// edits the TCP port of the first rule of ns-0/policy-0 (a policy that
// selects a pod of this node), one change at a time, and times each from
// just before the update is sent until a commit in the daemon's netns
// after which the policy's chain compares the new port (polled over
// netlink; nothing sleeps to wait for it). It logs one line,
// `api->kernel: p50=… p99=… ms (N changes)`, and asserts nothing about
// time: the figures are in docs/performance.md.
//
// Each change is written the default --debounce and 50 ms (a margin for
// the sync's end after its commit) after the kernel held the previous one:
// every change comes after a quiet period, the leading edge, synced at
// once. K8SE2E_LATENCY_GAP=0 writes each as soon as the previous one is
// in the kernel, so that each falls in the window after a sync and waits
// for its end: what the debounce costs. See the env* knobs for the scale
// and the daemon's flags.
func TestIntegrationAPIWriteToKernel(t *testing.T) {
	changes := envInt(t, envChanges, 200)
	gap := enforcer.DefaultDebounce + 50*time.Millisecond
	if s := os.Getenv(envGap); s != "" {
		var err error
		if gap, err = time.ParseDuration(s); err != nil || gap < 0 {
			t.Fatalf("$%s=%q: want a duration", envGap, s)
		}
	}
	snap := scaleCluster(t, "2x5x2")
	client, _, ns, c := scaleDaemon(t, snap, strings.Fields(os.Getenv(envArgs))...)
	rules := ruleReader(t, ns)
	chain, err := rules.Chain("ingress-", "-ns-0/policy-0")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	np, err := client.NetworkingV1().NetworkPolicies("ns-0").Get(ctx, "policy-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p := np.Spec.Ingress[0].Ports[0].Port; p == nil || p.IntValue() != 443 {
		t.Fatalf("ns-0/policy-0's first port is %v; want 443 (internal/scale)", p)
	}
	gen, err := c.Generation()
	if err != nil {
		t.Fatal(err)
	}
	lat := make([]time.Duration, 0, changes)
	for i := range changes {
		time.Sleep(gap) // the quiet before the change, not a wait for it
		port := uint16(20000 + i)
		np = np.DeepCopy()
		np.Spec.Ingress[0].Ports[0].Port.IntVal = int32(port)
		start := time.Now()
		np, err = client.NetworkingV1().NetworkPolicies("ns-0").Update(ctx, np, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
		var at time.Time
		at, gen = untilInKernel(t, c, gen, start, func() (bool, error) { return rules.ComparesPort(chain, port) })
		lat = append(lat, at.Sub(start))
	}
	slices.Sort(lat)
	t.Logf("api->kernel: p50=%s p99=%s ms (%d changes)", ms(percentile(lat, 50)), ms(percentile(lat, 99)), len(lat))
}

// TestIntegrationBurstToKernel is issue 16's rollout through the real
// API server: 1,000 pods change a label that policies' peer selectors
// read, as fast as parallel clients can write them, spread over about a
// second, under `nftpolicy run` with its default timing. It reports the
// syncs (/readyz generation) and kernel writes ("programmed table" in the
// daemon's log) the burst took, and how long after the last write the
// kernel held the final state (nft.Conn.Drift against the compiled final
// cluster, so that no later sync can be missed). It asserts that the
// burst was coalesced, not a count. Run it with K8SE2E_BURST=1; it is
// not part of the suite (1,000 pods to create).
func TestIntegrationBurstToKernel(t *testing.T) {
	if os.Getenv("K8SE2E_BURST") == "" {
		t.Skip("K8SE2E_BURST is not set: the 1,000-pod burst is a measurement, not part of the suite")
	}
	const pods = 1000
	snap := scale.Cluster(10, 100, 2, 110, scaleNode, false)
	scale.NameLabels(snap)
	snap.Nodes = []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: scaleNode}}}
	client, d, _, c := scaleDaemon(t, snap)
	ctx := context.Background()

	// The final state: every pod's tier moves on by one, taking it out of
	// the peer sets of one tier and into another's.
	final := *snap
	final.Pods = slices.Clone(snap.Pods)
	patches := make([][]byte, len(snap.Pods))
	for i, p := range snap.Pods {
		n, _ := strconv.Atoi(strings.TrimPrefix(p.Labels["tier"], "tier-"))
		q := p.DeepCopy()
		q.Labels["tier"] = fmt.Sprintf("tier-%d", (n+1)%3)
		final.Pods[i] = q
		patches[i] = fmt.Appendf(nil, `{"metadata":{"labels":{"tier":%q}}}`, q.Labels["tier"])
	}
	// The options of `nftpolicy run`'s defaults (--conntrack-cleanup,
	// --connection-counters).
	want, problems := enforcer.Compile(&final, enforcer.Options{Node: scaleNode, Revoke: true, Counters: true})
	if len(problems) > 0 {
		t.Fatalf("compile: %v", problems)
	}
	// Quiet: the first write of the burst is a leading edge.
	time.Sleep(time.Second)
	gen0, err := d.generation()
	if err != nil {
		t.Fatal(err)
	}
	writes0 := strings.Count(d.Logs(), "programmed table")

	// 50 clients, each writing its share of the pods at its pace: pod i
	// is due at i ms.
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, pods)
	const clients = 50
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < pods; i += clients {
				time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / pods)))
				p := snap.Pods[i]
				if _, err := client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patches[i], metav1.PatchOptions{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	span := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var drift string
	for deadline := time.Now().Add(30 * time.Second); ; {
		if drift, err = c.Drift(want); err != nil {
			t.Fatal(err)
		} else if drift == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the kernel does not hold the final state 30s after the burst: %s", drift)
		}
		time.Sleep(time.Millisecond)
	}
	settled := time.Since(start) - span
	gen, err := d.generation()
	if err != nil {
		t.Fatal(err)
	}
	// Syncs still under way (one at most: the burst's end is in the
	// kernel) are counted when they end.
	time.Sleep(2 * time.Second)
	if g, _ := d.generation(); g != gen {
		t.Logf("%d more syncs after the final state was in the kernel", g-gen)
		gen = g
	}
	syncs, writes := int(gen-gen0), strings.Count(d.Logs(), "programmed table")-writes0
	t.Logf("burst: %d pod label changes written over %v: %d syncs, %d kernel writes; final state in the kernel %v after the last write", pods, span.Round(time.Millisecond), syncs, writes, settled.Round(time.Millisecond))
	if syncs < 1 || syncs > pods/10 {
		t.Errorf("%d syncs for %d changes: not coalesced", syncs, pods)
	}
}
