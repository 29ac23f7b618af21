package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/nftables"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/nftpolicy/nftpolicy/enforcer"
	"github.com/nftpolicy/nftpolicy/internal/scale"
)

// A plan is the events of a run, chosen from the cluster before it is
// created, so that a cluster they cannot be drawn from fails at once.
type plan struct {
	// adds are new pods on other nodes, with their addresses, each a peer
	// of the rule whose peer set has the comment in addSets: those of the
	// first daemon run; addsOf gives a later run's.
	adds    []*corev1.Pod
	addSets []string
	// relabels are pods on other nodes, each a peer of one active rule,
	// whose label key takes them out of its peer set when set to
	// noneValue.
	relabels []relabelPlan
	// edit is an active policy whose first ingress rule's first port is
	// a number.
	edit *networkingv1.NetworkPolicy
}

type relabelPlan struct {
	pod      *corev1.Pod
	set      string // the peer set's comment
	key, was string
}

// noneValue is a label value no selector names.
const noneValue = "bench-none"

// planEvents draws n events of each kind from snap. A policy is active
// when it selects a pod of the node under test, so its rules are in the
// table; a peer of one of its ingress rules on another node is in the
// rule's peer set, whose comment is "peers " and the key the enforcer
// gives the rule's peer list (enforcer.PeerSetComment).
func planEvents(snap *scale.APICluster, n int) (*plan, error) {
	nsLabels := map[string]labels.Set{}
	for _, ns := range snap.Namespaces {
		nsLabels[ns.Name] = withNameLabel(ns)
	}
	byNS := map[string][]*corev1.Pod{}
	local := map[string][]*corev1.Pod{}
	for _, p := range snap.Pods {
		byNS[p.Namespace] = append(byNS[p.Namespace], p)
		if p.Spec.NodeName == node {
			local[p.Namespace] = append(local[p.Namespace], p)
		}
	}
	// The remote peers of each active rule's peer set, by its comment.
	peers := map[string][]*corev1.Pod{}
	selectors := map[string][]selectorPeer{}
	fromOf := map[string][]networkingv1.NetworkPolicyPeer{} // the peer list each comment was planned for
	ambiguous := map[string]bool{}                          // comments two peer lists share
	pl := &plan{}
	for _, np := range snap.Policies {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !slices.ContainsFunc(local[np.Namespace], func(p *corev1.Pod) bool { return sel.Matches(labels.Set(p.Labels)) }) {
			continue
		}
		if pl.edit == nil && firstPort(np) != nil {
			pl.edit = np
		}
		for _, rule := range np.Spec.Ingress {
			if len(rule.From) == 0 {
				continue
			}
			comment := enforcer.PeerSetComment(np.Namespace, rule.From)
			if from, done := fromOf[comment]; done {
				if !equality.Semantic.DeepEqual(from, rule.From) {
					ambiguous[comment] = true // a long key cut short: see ipv4Sets
				}
				continue
			}
			fromOf[comment] = rule.From
			peers[comment] = nil
			sps, err := parseSelectorPeers(np.Namespace, rule.From)
			if err != nil {
				return nil, fmt.Errorf("policy %s/%s: %w", np.Namespace, np.Name, err)
			}
			selectors[comment] = sps
			for _, ns := range snap.Namespaces {
				for _, p := range byNS[ns.Name] {
					if p.Spec.NodeName != node && len(p.Status.PodIPs) > 0 && selectedBy(sps, ns.Name, nsLabels[ns.Name], p.Labels) {
						peers[comment] = append(peers[comment], p)
					}
				}
			}
		}
	}
	if pl.edit == nil {
		return nil, fmt.Errorf("no policy that selects a pod of %s has a numeric first ingress port to edit (%d pods of %d on %s)", node, countLocal(local), len(snap.Pods), node)
	}
	var sets []string
	for comment, ps := range peers {
		if len(ps) > 0 && !ambiguous[comment] {
			sets = append(sets, comment)
		}
	}
	if len(sets) == 0 {
		return nil, fmt.Errorf("no pod on another node is a peer of a policy that selects a pod of %s", node)
	}
	slices.Sort(sets)

	for i := range n {
		set := sets[i%len(sets)]
		ps := peers[set]
		p := ps[(i/len(sets))%len(ps)].DeepCopy()
		setAdded(p, i)
		pl.adds = append(pl.adds, p)
		pl.addSets = append(pl.addSets, set)
	}

	// A relabel takes a pod out of a set and the next puts it back: one
	// pod for two events.
	used := map[*corev1.Pod]bool{}
	cursor := map[string]int{}
	for j := range (n + 1) / 2 {
		var r relabelPlan
		for tries := 0; r.pod == nil && tries < len(sets); tries++ {
			set := sets[(j+tries)%len(sets)]
			for ; r.pod == nil && cursor[set] < len(peers[set]); cursor[set]++ {
				p := peers[set][cursor[set]]
				if used[p] {
					continue
				}
				key, ok := leavingKey(selectors[set], p)
				if !ok {
					continue
				}
				used[p] = true
				r = relabelPlan{pod: p, set: set, key: key, was: p.Labels[key]}
			}
		}
		if r.pod == nil {
			return nil, fmt.Errorf("pod label change #%d: no peer pod left whose label change takes it out of a peer set; lower -events", 2*j)
		}
		pl.relabels = append(pl.relabels, r)
	}
	return pl, nil
}

func countLocal(local map[string][]*corev1.Pod) int {
	n := 0
	for _, ps := range local {
		n += len(ps)
	}
	return n
}

// withNameLabel is the namespace's labels with the name label the API
// server sets.
func withNameLabel(ns *corev1.Namespace) labels.Set {
	out := labels.Set{corev1.LabelMetadataName: ns.Name}
	maps.Copy(out, ns.Labels)
	return out
}

// A selectorPeer is one pod/namespace selector peer of a rule; namespaces
// nil means the policy's own namespace.
type selectorPeer struct {
	ownNS      string
	namespaces labels.Selector
	pods       labels.Selector
	podsSel    *metav1.LabelSelector
}

func parseSelectorPeers(ns string, from []networkingv1.NetworkPolicyPeer) ([]selectorPeer, error) {
	var out []selectorPeer
	for _, peer := range from {
		if peer.IPBlock != nil {
			continue
		}
		sp := selectorPeer{ownNS: ns, pods: labels.Everything(), podsSel: peer.PodSelector}
		var err error
		if peer.PodSelector != nil {
			if sp.pods, err = metav1.LabelSelectorAsSelector(peer.PodSelector); err != nil {
				return nil, err
			}
		}
		if peer.NamespaceSelector != nil {
			if sp.namespaces, err = metav1.LabelSelectorAsSelector(peer.NamespaceSelector); err != nil {
				return nil, err
			}
		}
		out = append(out, sp)
	}
	return out, nil
}

// selectedBy reports whether a pod with podLabels in namespace ns is
// selected by one of sps.
func selectedBy(sps []selectorPeer, ns string, nsLabels labels.Set, podLabels map[string]string) bool {
	for _, sp := range sps {
		nsOK := sp.namespaces == nil && ns == sp.ownNS || sp.namespaces != nil && sp.namespaces.Matches(nsLabels)
		if nsOK && sp.pods.Matches(labels.Set(podLabels)) {
			return true
		}
	}
	return false
}

// leavingKey returns a label key of p's that a pod selector of sps reads
// and that, set to noneValue, leaves p selected by none of them.
func leavingKey(sps []selectorPeer, p *corev1.Pod) (string, bool) {
	for _, sp := range sps {
		if sp.podsSel == nil {
			continue
		}
		var keys []string
		for k := range sp.podsSel.MatchLabels {
			keys = append(keys, k)
		}
		for _, r := range sp.podsSel.MatchExpressions {
			keys = append(keys, r.Key)
		}
		for _, key := range keys {
			if _, has := p.Labels[key]; !has {
				continue
			}
			relabelled := withLabel(p.Labels, key, noneValue)
			still := false
			for _, other := range sps {
				still = still || other.pods.Matches(labels.Set(relabelled))
			}
			if !still {
				return key, true
			}
		}
	}
	return "", false
}

// withLabel returns a copy of the labels m with key set to value.
func withLabel(m map[string]string, key, value string) map[string]string {
	out := maps.Clone(m)
	out[key] = value
	return out
}

// firstPort returns the port of the first ingress rule's first port if
// it is a single number, else nil.
func firstPort(np *networkingv1.NetworkPolicy) *intstr.IntOrString {
	if len(np.Spec.Ingress) == 0 || len(np.Spec.Ingress[0].Ports) == 0 {
		return nil
	}
	p := np.Spec.Ingress[0].Ports[0]
	if p.Port == nil || p.Port.Type != intstr.Int || p.EndPort != nil {
		return nil
	}
	return np.Spec.Ingress[0].Ports[0].Port
}

// addsOf returns the pods daemon run k (from 0) adds: the plan's, named
// and addressed after those of the runs before it, so that none meets a
// pod an earlier run left, and each address is new to its set even if an
// earlier daemon's delete had not reached the API server.
func (pl *plan) addsOf(k int) []*corev1.Pod {
	out := make([]*corev1.Pod, len(pl.adds))
	for i, p := range pl.adds {
		out[i] = p.DeepCopy()
		setAdded(out[i], k*len(pl.adds)+i)
	}
	return out
}

// setAdded names p as the i-th added pod and gives it its addresses.
func setAdded(p *corev1.Pod, i int) {
	p.Name = fmt.Sprintf("bench-add-%d", i)
	v4, v6 := addedPodIPs(i)
	p.Status.PodIP = v4.String()
	p.Status.PodIPs = []corev1.PodIP{{IP: v4.String()}, {IP: v6.String()}}
}

// maxAdded is how many pods addedPodIPs can address: 100.64.0.0/10.
const maxAdded = 1 << 22

// addedPodIPs are the addresses of added pod i (below maxAdded), outside
// the ranges of the cluster's pods (10/8, fd00::/104) and nodes.
func addedPodIPs(i int) (netip.Addr, netip.Addr) {
	v4 := netip.AddrFrom4([4]byte{100, 64 | byte(i>>16)&0x3f, byte(i >> 8), byte(i)})
	v6 := netip.AddrFrom16([16]byte{0xfd, 0, 0, 0, 0, 0, 0, 1, 12: byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)})
	return v4, v6
}

func podAddr(p *corev1.Pod) netip.Addr {
	a, _ := netip.ParseAddr(p.Status.PodIPs[0].IP)
	return a
}

// An eventRunner writes events to the API server and times them until
// the kernel holds them.
type eventRunner struct {
	ctx       context.Context
	client    kubernetes.Interface
	k         *kernel
	d         *daemon
	gap       time.Duration
	out       io.Writer
	lastAt    time.Time // when the kernel held the previous event
	sets      map[string]*nftables.Set
	daemonRun int // from 0: its pods and ports are its own
}

type kindResult struct {
	name string
	took []time.Duration
}

// pollInterval is the pause between two reads of the ruleset generation
// while an event is on its way: a netlink round trip of tens of
// microseconds, so the figures are this precise, without taking a core
// from the daemon and the API server.
const pollInterval = 200 * time.Microsecond

func (r *eventRunner) run(pl *plan) ([]kindResult, error) {
	var err error
	if r.sets, err = r.k.ipv4Sets(); err != nil {
		return nil, err
	}
	set := func(comment string) (*nftables.Set, error) {
		if s := r.sets[comment]; s != nil {
			return s, nil
		}
		var have []string
		for c := range r.sets {
			have = append(have, fmt.Sprintf("%q", c))
		}
		slices.Sort(have)
		return nil, fmt.Errorf("no IPv4 set with the comment %q in the table; it has %s", comment, strings.Join(have, ", "))
	}
	ctx, out := r.ctx, r.out
	var results []kindResult
	report := func(k kindResult) {
		fmt.Fprintf(out, "event %s: %d, p50 %s ms, p99 %s ms, max %s ms\n", k.name, len(k.took),
			millis(percentile(k.took, 0.50)), millis(percentile(k.took, 0.99)), millis(percentile(k.took, 1)))
		results = append(results, k)
	}
	pods := r.client.CoreV1()
	adds := pl.addsOf(r.daemonRun)

	// pod_add. The pods are created first, without addresses: the API
	// server would drop them anyway.
	created := make([]*corev1.Pod, len(adds))
	var wg sync.WaitGroup
	errs := make([]error, len(adds))
	sem := make(chan struct{}, 16)
	for i, p := range adds {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			q := podForCreate(p)
			q.Status = corev1.PodStatus{}
			created[i], errs[i] = pods.Pods(p.Namespace).Create(ctx, q, metav1.CreateOptions{})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("pod_add #%d: create: %w", i, err)
		}
	}
	// Those creates change nothing in the kernel; let the daemon's syncs
	// of them end before the first timed event.
	if err := sleep(ctx, time.Second+r.gap); err != nil {
		return nil, err
	}
	r.lastAt = time.Now()
	k := kindResult{name: "pod_add"}
	for i, p := range adds {
		s, err := set(pl.addSets[i])
		if err != nil {
			return nil, err
		}
		c := created[i]
		c.Status = p.Status
		d, err := r.timed("pod_add", i, func() error {
			_, err := pods.Pods(p.Namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{})
			return err
		}, func() (bool, error) { return r.k.setHas(s, podAddr(p)) })
		if err != nil {
			return nil, err
		}
		k.took = append(k.took, d)
	}
	report(k)

	// pod_delete: the pods just added.
	k = kindResult{name: "pod_delete"}
	zero := int64(0)
	for i, p := range adds {
		s, _ := set(pl.addSets[i])
		d, err := r.timed("pod_delete", i, func() error {
			return pods.Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}, func() (bool, error) {
			has, err := r.k.setHas(s, podAddr(p))
			return !has, err
		})
		if err != nil {
			return nil, err
		}
		k.took = append(k.took, d)
	}
	report(k)

	// pod_label_change: out of the set, then back in.
	k = kindResult{name: "pod_label_change"}
	for i := range len(adds) {
		rl := pl.relabels[i/2]
		s, err := set(rl.set)
		if err != nil {
			return nil, err
		}
		value, in := noneValue, false
		if i%2 == 1 {
			value, in = rl.was, true
		}
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, rl.key, value)
		d, err := r.timed("pod_label_change", i, func() error {
			_, err := pods.Pods(rl.pod.Namespace).Patch(ctx, rl.pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		}, func() (bool, error) {
			has, err := r.k.setHas(s, podAddr(rl.pod))
			return has == in, err
		})
		if err != nil {
			return nil, err
		}
		k.took = append(k.took, d)
	}
	report(k)

	// policy_edit: a new port each time, never the one the policy has (a
	// write that changes nothing reaches no kernel); a daemon run takes
	// the ports after those of the runs before it.
	policies := r.client.NetworkingV1().NetworkPolicies(pl.edit.Namespace)
	np, err := policies.Get(ctx, pl.edit.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if firstPort(np) == nil {
		return nil, fmt.Errorf("policy_edit: policy %s/%s has no numeric first ingress port", np.Namespace, np.Name)
	}
	chain, err := r.k.Chain("ingress-", "-"+np.Namespace+"/"+np.Name)
	if err != nil {
		return nil, err
	}
	k = kindResult{name: "policy_edit"}
	seq := r.daemonRun * len(adds)
	for i := range len(adds) {
		port := editPort(seq)
		seq++
		if int(port) == firstPort(np).IntValue() {
			port = editPort(seq)
			seq++
		}
		next := np.DeepCopy()
		*firstPort(next) = intstr.FromInt32(int32(port))
		d, err := r.timed("policy_edit", i, func() error {
			var err error
			np, err = policies.Update(ctx, next, metav1.UpdateOptions{})
			return err
		}, func() (bool, error) { return r.k.ComparesPort(chain, port) })
		if err != nil {
			return nil, err
		}
		k.took = append(k.took, d)
	}
	report(k)
	return results, nil
}

// timed waits until the gap since the kernel held the previous event has
// passed, writes an event, and returns the time from just before the write
// to the first commit after which holds (a read of the kernel) is true. A
// commit seen is read once; if another came meanwhile, the time of the
// read is taken, never an earlier one.
func (r *eventRunner) timed(kind string, i int, write func() error, holds func() (bool, error)) (time.Duration, error) {
	if err := sleep(r.ctx, time.Until(r.lastAt.Add(r.gap))); err != nil {
		return 0, err
	}
	gen, err := r.k.generation()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := write(); err != nil {
		return 0, fmt.Errorf("%s #%d: %w", kind, i, err)
	}
	for deadline := start.Add(30 * time.Second); ; {
		g, err := r.k.generation()
		if err != nil {
			return 0, err
		}
		if g != gen {
			at := time.Now()
			gen = g
			ok, err := holds()
			if err != nil {
				return 0, fmt.Errorf("%s #%d: %w", kind, i, err)
			}
			if ok {
				if g2, err := r.k.generation(); err != nil {
					return 0, err
				} else if g2 != g {
					at = time.Now()
				}
				r.lastAt = at
				return at.Sub(start), nil
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s #%d: not in the kernel 30 s after the API write (generation %d)", kind, i, gen)
		}
		if err := r.d.Exited(); err != nil {
			return 0, err
		}
		if err := r.ctx.Err(); err != nil {
			return 0, err
		}
		time.Sleep(pollInterval)
	}
}

// editPort is the port of policy edit seq (counted over all daemon runs):
// 20000 to 59999, round and round.
func editPort(seq int) uint16 { return uint16(20000 + seq%40000) }

// restoreCluster puts back what the n events of each kind of a daemon run
// left changed, so that the next daemon meets the cluster the first one
// met: the label of a pod whose last label event took it out of its set
// (n odd: the label events come in out-and-back pairs), and the policy's
// first port. The added pods are gone already: pod_delete deleted them.
func restoreCluster(ctx context.Context, client kubernetes.Interface, pl *plan, n int) error {
	for j, rl := range pl.relabels {
		if 2*j+1 < n {
			continue // its second event gave the label back
		}
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, rl.key, rl.was)
		if _, err := client.CoreV1().Pods(rl.pod.Namespace).Patch(ctx, rl.pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("give pod %s/%s its label %s back: %w", rl.pod.Namespace, rl.pod.Name, rl.key, err)
		}
	}
	policies := client.NetworkingV1().NetworkPolicies(pl.edit.Namespace)
	np, err := policies.Get(ctx, pl.edit.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if port := firstPort(np); port == nil {
		return fmt.Errorf("policy %s/%s has no numeric first ingress port", np.Namespace, np.Name)
	} else if *port != *firstPort(pl.edit) {
		*port = *firstPort(pl.edit)
		if _, err := policies.Update(ctx, np, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("give policy %s/%s its port back: %w", np.Namespace, np.Name, err)
		}
	}
	return nil
}

// verifyCluster checks that the API server holds the pods of snap and no
// other, each with its labels and addresses, and the edited policy its
// first port as created: no event of a daemon run is left over for the
// next. (The policy's port alone: the API server defaults other fields of
// its rules.) The pods are listed in pages, so that 150k of them do not
// sit in this process at once.
func verifyCluster(ctx context.Context, client kubernetes.Interface, snap *scale.APICluster, pl *plan) error {
	want := make(map[types.NamespacedName]*corev1.Pod, len(snap.Pods))
	for _, p := range snap.Pods {
		want[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = p
	}
	var problems []string
	problem := func(format string, args ...any) {
		if len(problems) < 10 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	seen, extra := 0, 0
	opts := metav1.ListOptions{Limit: 1000}
	for {
		list, err := client.CoreV1().Pods("").List(ctx, opts)
		if err != nil {
			return fmt.Errorf("list pods: %w", err)
		}
		for i := range list.Items {
			got := &list.Items[i]
			w := want[types.NamespacedName{Namespace: got.Namespace, Name: got.Name}]
			if w == nil {
				extra++
				problem("pod %s/%s is not the cluster's", got.Namespace, got.Name)
				continue
			}
			seen++
			if !maps.Equal(got.Labels, w.Labels) {
				problem("pod %s/%s has labels %v, not %v", got.Namespace, got.Name, got.Labels, w.Labels)
			}
			if !slices.Equal(got.Status.PodIPs, w.Status.PodIPs) {
				problem("pod %s/%s has addresses %v, not %v", got.Namespace, got.Name, got.Status.PodIPs, w.Status.PodIPs)
			}
		}
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	if seen != len(want) {
		problem("%d of the cluster's %d pods are missing", len(want)-seen, len(want))
	}
	np, err := client.NetworkingV1().NetworkPolicies(pl.edit.Namespace).Get(ctx, pl.edit.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if port, was := firstPort(np), firstPort(pl.edit); port == nil || *port != *was {
		problem("policy %s/%s's first port is %v, not %s", np.Namespace, np.Name, port, was)
	}
	if len(problems) > 0 {
		return fmt.Errorf("the cluster is not as created (%d pods not its own): %s", extra, strings.Join(problems, "; "))
	}
	return nil
}
