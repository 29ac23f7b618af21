package enforcer

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	ktypes "k8s.io/apimachinery/pkg/types"

	"github.com/nftpolicy/nftpolicy/k8s"
)

// This file keeps the compiler's view of namespaces and pods in step with
// each snapshot and records what changed.

// An nsChange is a namespace whose labels or quarantine changed (or that
// appeared or went).
type nsChange struct {
	name     string
	old, new nsView
}

// An nsView is what namespace selectors read of a namespace: its labels,
// and whether they are known (see namespaceSelected).
type nsView struct {
	labels labels.Set
	// quarantined: its true labels are not known
	// (k8s.Snapshot.QuarantinedNamespaces).
	quarantined bool
}

func (v nsView) equal(o nsView) bool {
	return v.quarantined == o.quarantined && maps.Equal(v.labels, o.labels)
}

// selectedBy reports whether the namespace selector sel names the pods of
// the namespace name, whose view v is. A quarantined namespace is named
// only by a selector that reads nothing but the kubernetes.io/metadata.name
// label (the empty selector, which names every namespace whatever its
// labels, included): that label is always the namespace's name, so such a
// selector matches it as it would the true labels. Any other selector may
// read a label the stand-in lacks, and one on the absence of a label
// (NotIn, DoesNotExist) would name the namespace where its true labels
// would not; a positive one (In, Exists) would read labels kept from a
// rejected object. Both fail closed: its pods are not those rules' peers.
func (v nsView) selectedBy(sel labels.Selector, name string) bool {
	if !v.quarantined {
		return sel.Matches(v.labels)
	}
	reqs, selectable := sel.Requirements()
	if !selectable {
		return false
	}
	for _, r := range reqs {
		if r.Key() != corev1.LabelMetadataName {
			return false
		}
	}
	return sel.Matches(labels.Set{corev1.LabelMetadataName: name})
}

// mayBeSelectedBy is selectedBy for a rule that must fail closed the other
// way: a ClusterNetworkPolicy's Deny rule, which would open what it denies
// if it named too few. A quarantined namespace may be named by any
// selector that reads a label other than its name, as its true labels
// are not known.
func (v nsView) mayBeSelectedBy(sel labels.Selector, name string) bool {
	if !v.quarantined || v.selectedBy(sel, name) {
		return v.selectedBy(sel, name)
	}
	reqs, selectable := sel.Requirements()
	return selectable && slices.ContainsFunc(reqs, func(r labels.Requirement) bool { return r.Key() != corev1.LabelMetadataName })
}

// selects is selectedBy, or mayBeSelectedBy for a selector of a rule that
// must name every namespace it may.
func (v nsView) selects(s peerSelector, name string) bool {
	if s.mayBe {
		return v.mayBeSelectedBy(s.namespaces, name)
	}
	return v.selectedBy(s.namespaces, name)
}

// namespaceLabels of a namespace the snapshot has no object for is just the
// name label the API server would have given it.
func (c *Compiler) namespaceLabels(ns string) labels.Set {
	if l, ok := c.namespaces[ns]; ok {
		return l
	}
	return labels.Set{corev1.LabelMetadataName: ns}
}

// namespaceView is what namespace selectors read of ns (see nsView).
func (c *Compiler) namespaceView(ns string) nsView {
	return nsView{labels: c.namespaceLabels(ns), quarantined: c.quarantinedNS[ns]}
}

// namespaceSelected reports whether the namespace selector sel names the
// pods of namespace ns (see nsView.selectedBy).
func (c *Compiler) namespaceSelected(sel labels.Selector, ns string) bool {
	return c.namespaceView(ns).selectedBy(sel, ns)
}

func (c *Compiler) syncNamespaces(nss []*corev1.Namespace, quarantine []string, ch *changes) {
	// A namespace that enters or leaves quarantine changes what selectors
	// name even when the source hands out the same object for it.
	quarantined := make(map[string]bool, len(quarantine))
	for _, ns := range quarantine {
		quarantined[ns] = true
	}
	before := map[string]nsView{}
	note := func(ns string) {
		if _, ok := before[ns]; !ok {
			before[ns] = c.namespaceView(ns)
		}
	}
	for ns := range quarantined {
		if !c.quarantinedNS[ns] {
			note(ns)
		}
	}
	for ns := range c.quarantinedNS {
		if !quarantined[ns] {
			note(ns)
		}
	}
	key := func(ns *corev1.Namespace) objKey { return objKey{name: ns.Name} }
	c.nsList = walkChanges(c.nsList, nss, key, func(k objKey, _, ns *corev1.Namespace) {
		note(k.name)
		if logged := k8s.FlowLogged(ns); logged != c.flowNS[k.name] {
			if logged {
				c.flowNS[k.name] = true
			} else {
				delete(c.flowNS, k.name)
			}
			if c.opts.FlowLog.Group != 0 && !c.opts.FlowLog.All {
				ch.flowLogNS[k.name] = true // its chains gain or lose their log rules
			}
		}
		if ns == nil {
			delete(c.namespaces, k.name)
		} else {
			set := make(labels.Set, len(ns.Labels)+1)
			maps.Copy(set, ns.Labels)
			// The API server always sets this label; manifests may not.
			set[corev1.LabelMetadataName] = ns.Name
			c.namespaces[k.name] = set
		}
	})
	c.quarantinedNS = quarantined
	for _, ns := range slices.Sorted(maps.Keys(before)) {
		if after := c.namespaceView(ns); !before[ns].equal(after) {
			ch.namespaces = append(ch.namespaces, nsChange{ns, before[ns], after})
		}
	}
}

// A pod is what the compiler needs of a Pod that takes part in policy.
// Views are immutable: a pod that changes gets a new one.
type pod struct {
	key    objKey // its namespace and name
	labels labels.Set
	ips    []netip.Addr
	ports  []corev1.ContainerPort
	local  bool // on this node
	// quarantined: its true labels are not known (k8s.Snapshot.Quarantined).
	// It is selected by no policy and named by no pod selector, and on
	// this node it is isolated both ways with nothing allowed.
	quarantined bool
}

func (p *pod) equal(o *pod) bool {
	return p.key == o.key && p.local == o.local && p.quarantined == o.quarantined && maps.Equal(p.labels, o.labels) &&
		slices.Equal(p.ips, o.ips) && slices.Equal(p.ports, o.ports)
}

// matchedBy reports whether sel selects p, as a policy's target or as a
// peer. A quarantined pod is selected by nothing: the labels it has are not
// all it has, so a selector on the absence of a label (NotIn, DoesNotExist)
// could match it where its true labels would not.
func (p *pod) matchedBy(sel labels.Selector) bool {
	return !p.quarantined && sel.Matches(p.labels)
}

// A podChange is a pod whose view changed; old or new is nil when the pod
// started or stopped taking part in policy.
type podChange struct{ old, new *pod }

func (c *Compiler) syncPods(pods []*k8s.Pod, quarantine []ktypes.NamespacedName, unsettled []k8s.UnsettledPod, ch *changes) {
	key := func(p *k8s.Pod) objKey { return objKey{p.Namespace, p.Name} }
	quarantined := make(map[objKey]bool, len(quarantine))
	for _, q := range quarantine {
		quarantined[objKey{q.Namespace, q.Name}] = true
	}
	// A pod that enters or leaves quarantine is looked at again even when
	// the source hands out the same object for it.
	var requarantined map[objKey]bool
	for k := range quarantined {
		if !c.quarantined[k] {
			requarantined = addKey(requarantined, k)
		}
	}
	for k := range c.quarantined {
		if !quarantined[k] {
			requarantined = addKey(requarantined, k)
		}
	}
	c.quarantined = quarantined
	for _, k := range c.syncUnsettled(unsettled) {
		requarantined = addKey(requarantined, k)
		// Its pod chains read whether it is unsettled (selfRules), even
		// where its view, and so its claim, stay the same.
		ch.podChainNS[k.namespace] = true
	}
	// A pod whose addresses nobody else claims, before or after, is
	// brought to its view at once. Where an address is contested, the
	// pods that changed and the addresses involved are resolved once every
	// claim is in (see resolveAddresses); maps only for those, as a full
	// compile would otherwise build two entries per pod of the cluster.
	var keys map[objKey]bool
	var addrs map[netip.Addr]bool
	if len(c.claimsByPod) == 0 && len(c.claims.first) == 0 && len(pods) > 0 {
		// The first compile (or one after every pod left): the maps are
		// made at their size at once, not grown through a dozen doublings,
		// each a copy (at 150k pods, ~15 MB of garbage and 0.1 s).
		c.claimsByPod = make(map[objKey]*claim, len(pods))
		c.claims.first = make(map[claimKey]*claim, len(pods))
	}
	update := func(k objKey, p *k8s.Pod) {
		old := c.claimsByPod[k]
		delete(c.podProblems, k)
		var cl *claim
		if p != nil {
			view, problems := c.podOf(c.placed(k, p), quarantined[k])
			if len(problems) > 0 {
				c.podProblems[k] = problems
			}
			if view != nil {
				cl = &claim{view: view, terminating: p.DeletionTimestamp != nil, created: p.CreationTimestamp.Time, unsettled: c.unsettled[k] != nil}
			}
		}
		if old != nil && cl != nil && old.equal(cl) {
			return // the same claim: what was built from it stays valid
		}
		contested := old != nil && c.claims.contested(old.view.ips)
		if old != nil {
			c.claims.remove(old)
		}
		switch {
		case cl != nil:
			if old != nil {
				cl.effective = old.effective // what resolvePod compares with
			}
			c.claims.add(cl)
			c.claimsByPod[k] = cl
			contested = contested || c.claims.contested(cl.view.ips)
		case old != nil:
			old.withdrawn = true // resolvePod takes its view out
		}
		if !contested {
			c.resolvePod(k, ch)
			return
		}
		if keys == nil {
			keys, addrs = map[objKey]bool{}, map[netip.Addr]bool{}
		}
		keys[k] = true
		for _, o := range []*claim{old, cl} {
			if o != nil {
				for _, ip := range o.view.ips {
					addrs[ip] = true
				}
			}
		}
	}
	c.podList = walkChanges(c.podList, pods, key, func(k objKey, _, p *k8s.Pod) {
		delete(requarantined, k)
		update(k, p)
	})
	for _, k := range slices.SortedFunc(maps.Keys(requarantined), compareKeys) {
		i, ok := slices.BinarySearchFunc(c.podList, k, func(p *k8s.Pod, k objKey) int { return compareKeys(key(p), k) })
		if ok {
			update(k, c.podList[i])
		}
	}
	if keys != nil {
		c.resolveAddresses(keys, addrs, ch)
	}
}

// podChanged updates the indexes for a pod whose view changed from old to
// new and records the change.
func (c *Compiler) podChanged(old, new *pod, ch *changes) {
	pd := new
	if pd == nil {
		pd = old
	}
	ns := pd.key.namespace
	ch.pods[ns] = append(ch.pods[ns], podChange{old, new})
	c.every = nil

	hadPods := len(c.byNS[ns]) > 0
	c.byNS[ns] = replacePod(c.byNS[ns], old, new)
	switch has := len(c.byNS[ns]) > 0; {
	case has && !hadPods:
		i, _ := slices.BinarySearch(c.nsNames, ns)
		c.nsNames = slices.Insert(c.nsNames, i, ns)
	case !has && hadPods:
		i, _ := slices.BinarySearch(c.nsNames, ns)
		c.nsNames = slices.Delete(c.nsNames, i, i+1)
		delete(c.byNS, ns)
	}

	if (old != nil && old.local) || (new != nil && new.local) {
		var oldLocal, newLocal *pod
		if old != nil && old.local {
			oldLocal = old
		}
		if new != nil && new.local {
			newLocal = new
		}
		if oldLocal != nil && newLocal == nil {
			ch.goneLocal = append(ch.goneLocal, old.key)
		}
		c.localByNS[ns] = replacePod(c.localByNS[ns], oldLocal, newLocal)
		ch.localPods = true
		if len(c.localByNS[ns]) == 0 {
			delete(c.localByNS, ns)
		}
		ch.targetsNS[ns] = true
		ch.podChainNS[ns] = true
	}
}

// replacePod removes old from and inserts new into a slice sorted by name.
func replacePod(pods []*pod, old, new *pod) []*pod {
	if old != nil {
		if i, ok := slices.BinarySearchFunc(pods, old.key.name, podByName); ok {
			pods = slices.Delete(pods, i, i+1)
		}
	}
	if new != nil {
		i, _ := slices.BinarySearchFunc(pods, new.key.name, podByName)
		pods = slices.Insert(pods, i, new)
	}
	return pods
}

func podByName(p *pod, name string) int { return strings.Compare(p.key.name, name) }

// everyPod lists every participating pod, sorted by namespace and name.
func (c *Compiler) everyPod() []*pod {
	if c.every == nil {
		c.every = []*pod{}
		for _, ns := range c.nsNames {
			c.every = append(c.every, c.byNS[ns]...)
		}
	}
	return c.every
}

// podOf returns the policy view of a pod, quarantined or not, or nil for a
// pod that takes no part in policy: host-network pods (their IPs are the
// node's), pods that have finished, and pods without an IP yet.
func (c *Compiler) podOf(p *k8s.Pod, quarantined bool) (*pod, []Problem) {
	if p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return nil, nil
	}
	key := objKey{p.Namespace, p.Name}
	pd := &pod{key: key, labels: labels.Set(p.Labels), local: p.Spec.NodeName == c.opts.Node,
		quarantined: quarantined}
	var problems []Problem
	seen := map[netip.Addr]bool{}
	pd.ips = make([]netip.Addr, 0, len(p.Status.PodIPs)) // exact: one per pod of the cluster
	add := func(s string) {
		if s == "" {
			return
		}
		ip, err := netip.ParseAddr(s)
		if err != nil {
			problems = append(problems, Problem{Object: "Pod " + key.String(), Err: fmt.Errorf("pod IP %q: %w", s, err)})
			return
		}
		ip = ip.Unmap()
		if !seen[ip] {
			seen[ip] = true
			pd.ips = append(pd.ips, ip)
		}
	}
	for _, ip := range p.Status.PodIPs {
		add(ip.IP)
	}
	if len(pd.ips) == 0 {
		return nil, problems
	}
	slices.SortFunc(pd.ips, netip.Addr.Compare)
	pd.ports = p.Spec.Ports // shared with the record: neither is edited
	return pd, problems
}

// addKey adds k to set, making it when nil.
func addKey(set map[objKey]bool, k objKey) map[objKey]bool {
	if set == nil {
		set = map[objKey]bool{}
	}
	set[k] = true
	return set
}
