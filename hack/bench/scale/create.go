package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nftpolicy/nftpolicy/internal/apiserver"
	"github.com/nftpolicy/nftpolicy/internal/scale"
)

// connections is how many TCP connections the creating clients spread
// over: one HTTP/2 connection is a single TLS stream, which one core
// encrypts and the API server reads in order.
const connections = 4

// newClient returns an admin client of srv on a connection of its own,
// speaking protobuf (cheaper than JSON for both sides), without
// client-go's rate limit. client-go shares one transport between configs
// that are alike; a Dial of its own makes each config uncacheable, so each
// client gets its own connection.
func newClient(srv *apiserver.Server) (kubernetes.Interface, error) {
	cfg := srv.Config("")
	cfg.QPS, cfg.Burst = 1e6, 1e6
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	var d net.Dialer
	cfg.Dial = d.DialContext
	return kubernetes.NewForConfig(cfg)
}

// A creation counts objects created, for the progress lines.
type creation struct {
	done    atomic.Int64
	total   int64
	phase   atomic.Value // string
	retries atomic.Int64
}

// retry calls write until it succeeds, up to 5 times while it fails for a
// reason that may pass (an API server or etcd under load: 429, 5xx,
// timeouts, a dropped connection): creating 150k pods takes minutes, and
// one such error must not throw them away. first tells write whether an
// earlier attempt may have been carried out anyway (a create then finds
// its object there).
func (c *creation) retry(ctx context.Context, write func(first bool) error) error {
	for attempt := 0; ; attempt++ {
		err := write(attempt == 0)
		if err == nil || attempt == 4 || !transient(err) || ctx.Err() != nil {
			return err
		}
		c.retries.Add(1)
		if err := sleep(ctx, 100*time.Millisecond<<attempt); err != nil {
			return err
		}
	}
}

func transient(err error) bool {
	var netErr net.Error
	return apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsUnexpectedServerError(err) ||
		errors.As(err, &netErr) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// create creates an object with retries: get fetches it when an attempt
// that failed was carried out after all.
func create[T any](ctx context.Context, c *creation, createFn func() (T, error), get func() (T, error)) (T, error) {
	var out T
	err := c.retry(ctx, func(first bool) error {
		var err error
		out, err = createFn()
		if !first && apierrors.IsAlreadyExists(err) {
			out, err = get()
		}
		return err
	})
	return out, err
}

// createCluster creates snap's objects through the API: namespaces, nodes,
// pods, policies, each kind with parallel workers, and prints progress
// every 10 s. Nodes and pods get their status (addresses) by a second
// write, as the kubelet does: the API server drops status on create.
func createCluster(ctx context.Context, srv *apiserver.Server, snap *scale.APICluster, parallel int, out io.Writer, res *results) error {
	clients := make([]kubernetes.Interface, connections)
	for i := range clients {
		var err error
		if clients[i], err = newClient(srv); err != nil {
			return err
		}
	}
	c := &creation{total: int64(len(snap.Namespaces) + len(snap.Nodes) + len(snap.Pods) + len(snap.Policies))}
	c.phase.Store("")
	start := time.Now()
	stopProgress := make(chan struct{})
	var progressDone sync.WaitGroup
	progressDone.Add(1)
	go func() {
		defer progressDone.Done()
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		last, lastAt := int64(0), start
		for {
			select {
			case <-stopProgress:
				return
			case now := <-tick.C:
				n := c.done.Load()
				fmt.Fprintf(out, "create: %d/%d objects (%s), %.0f/s now, %.0f/s overall, %s elapsed\n",
					n, c.total, c.phase.Load(), float64(n-last)/now.Sub(lastAt).Seconds(), float64(n)/now.Sub(start).Seconds(), now.Sub(start).Round(time.Second))
				last, lastAt = n, now
			}
		}
	}()
	defer func() {
		close(stopProgress)
		progressDone.Wait()
	}()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// parallel calls do(client, i) for i in [0, n) on the workers, and
	// returns the first error (cancelling the rest).
	parallelDo := func(phase string, n int, do func(client kubernetes.Interface, i int) error) error {
		c.phase.Store(phase)
		var wg sync.WaitGroup
		var once sync.Once
		var first error
		next := make(chan int)
		for w := range parallel {
			wg.Add(1)
			go func() {
				defer wg.Done()
				client := clients[w%len(clients)]
				for i := range next {
					if err := do(client, i); err != nil {
						once.Do(func() {
							first = fmt.Errorf("%s #%d: %w", phase, i, err)
							cancel()
						})
						continue
					}
					c.done.Add(1)
				}
			}()
		}
	feed:
		for i := range n {
			select {
			case next <- i:
			case <-ctx.Done():
				break feed
			}
		}
		close(next)
		wg.Wait()
		if first == nil && ctx.Err() != nil {
			first = ctx.Err()
		}
		return first
	}

	err := parallelDo("namespaces", len(snap.Namespaces), func(client kubernetes.Interface, i int) error {
		ns := snap.Namespaces[i].DeepCopy()
		delete(ns.Labels, corev1.LabelMetadataName) // the API server's to set
		api := client.CoreV1().Namespaces()
		_, err := create(ctx, c,
			func() (*corev1.Namespace, error) { return api.Create(ctx, ns, metav1.CreateOptions{}) },
			func() (*corev1.Namespace, error) { return api.Get(ctx, ns.Name, metav1.GetOptions{}) })
		return err
	})
	if err == nil {
		err = parallelDo("nodes", len(snap.Nodes), func(client kubernetes.Interface, i int) error {
			n := snap.Nodes[i]
			api := client.CoreV1().Nodes()
			created, err := create(ctx, c,
				func() (*corev1.Node, error) { return api.Create(ctx, n, metav1.CreateOptions{}) },
				func() (*corev1.Node, error) { return api.Get(ctx, n.Name, metav1.GetOptions{}) })
			if err != nil {
				return err
			}
			created.Status = n.Status
			return c.retry(ctx, func(bool) error {
				_, err := api.UpdateStatus(ctx, created, metav1.UpdateOptions{})
				return err
			})
		})
	}
	if err == nil {
		err = parallelDo("pods", len(snap.Pods), func(client kubernetes.Interface, i int) error {
			return createPod(ctx, c, client, snap.Pods[i])
		})
	}
	if err == nil {
		err = parallelDo("policies", len(snap.Policies), func(client kubernetes.Interface, i int) error {
			np := snap.Policies[i]
			api := client.NetworkingV1().NetworkPolicies(np.Namespace)
			_, err := create(ctx, c,
				func() (*networkingv1.NetworkPolicy, error) { return api.Create(ctx, np, metav1.CreateOptions{}) },
				func() (*networkingv1.NetworkPolicy, error) { return api.Get(ctx, np.Name, metav1.GetOptions{}) })
			return err
		})
	}
	if err != nil {
		return err
	}
	res.createTime, res.createObjects = time.Since(start), int(c.total)
	fmt.Fprintf(out, "created %d namespaces, %d nodes, %d pods, %d policies in %s: %.0f objects/s (%.0f writes/s: nodes and pods take two); %d writes retried\n",
		len(snap.Namespaces), len(snap.Nodes), len(snap.Pods), len(snap.Policies), seconds(res.createTime),
		float64(c.total)/res.createTime.Seconds(),
		float64(c.total+int64(len(snap.Nodes)+len(snap.Pods)))/res.createTime.Seconds(), c.retries.Load())
	return nil
}

// createPod creates p (an image is required; it is never pulled) and then
// sets its status, addresses included.
func createPod(ctx context.Context, c *creation, client kubernetes.Interface, p *corev1.Pod) error {
	api := client.CoreV1().Pods(p.Namespace)
	q := podForCreate(p)
	created, err := create(ctx, c,
		func() (*corev1.Pod, error) { return api.Create(ctx, q, metav1.CreateOptions{}) },
		func() (*corev1.Pod, error) { return api.Get(ctx, p.Name, metav1.GetOptions{}) })
	if err != nil {
		return err
	}
	created.Status = p.Status
	if len(p.Status.PodIPs) > 0 {
		created.Status.PodIP = p.Status.PodIPs[0].IP
	}
	return c.retry(ctx, func(bool) error {
		_, err := api.UpdateStatus(ctx, created, metav1.UpdateOptions{})
		return err
	})
}

// podForCreate is a copy of p that the API server accepts: containers
// need an image.
func podForCreate(p *corev1.Pod) *corev1.Pod {
	p = p.DeepCopy()
	for j := range p.Spec.Containers {
		p.Spec.Containers[j].Image = "registry.invalid/none"
	}
	return p
}
