package enforcer

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nftpolicy/nftpolicy/k8s"
)

// This file decides which pod an address belongs to when several pods
// claim it.
//
// Two pods can hold one IP for a while in a real cluster: the IP of a pod
// that is terminating (or whose object lingers after its node died) is
// handed to a new pod before the old object is gone. An address is one
// entry of a dispatch map and one member of a peer set, so it can speak
// for one pod only: two isolated pods of this node with one address made
// the kernel refuse every batch (EEXIST), and a peer set would let the new
// pod in under the old pod's labels.
//
// So each address is given to one claimant, the same whatever the order
// events arrived in:
//
//  1. a pod of this node wins over a pod of another node: an address this
//     node routes to one of its own pods is that pod's, whatever an object
//     elsewhere claims (a stale object, or a compromised kubelet on another
//     node, must not take a local pod's isolation away);
//  2. a pod whose place is known wins over an unsettled one
//     (k8s.Snapshot.Unsettled: its definitions disagree on its addresses,
//     node or phase, so it is quarantined at every address any of them
//     gives): a broken duplicate must not take a healthy pod's address,
//     and with it its policies, away. Rule 1 still comes first: on this
//     node an unsettled pod that a definition places here keeps an
//     address from a pod of another node, which isolates the address here
//     with nothing allowed (that pod keeps it on its own node), rather
//     than leave it open should this node be where the pod really is;
//  3. a pod that is not terminating wins over one that is: the IP has
//     been handed on, and the new holder is the one sending from it;
//  4. otherwise the newer pod (by creation time) wins;
//  5. otherwise the first by namespace/name, only so that the choice is
//     deterministic.
//
// The losers take part in policy with their other addresses only (a pod
// left without any takes no part), and each is reported as a Problem
// naming both pods. A terminating pod is otherwise an ordinary pod: its
// address stays isolated by its own policies, and counts as its labels
// say in peer sets, until another pod claims the address.

// A claim is a pod's view with all the addresses it reports, and what
// ranks it against another pod reporting one of them. It also holds the
// view the pod takes part in policy with, which is the same object unless
// another pod wins an address (one record per pod, not a map of views
// beside the claims: 10 MB at 150k pods).
type claim struct {
	view    *pod // every address the pod reports
	created time.Time
	// effective is the view resolvePod last gave the pod: view, view
	// without the addresses others won, or nil when none is left.
	effective   *pod
	terminating bool
	unsettled   bool // its definitions disagree on where it is (k8s.Snapshot.Unsettled)
	// withdrawn: the pod no longer claims anything (it went, or takes no
	// part); the claim stays in claimsByPod, out of the address index,
	// only until resolvePod takes its effective view out.
	withdrawn bool
}

// outranks reports whether a wins an address over b.
func (a *claim) outranks(b *claim) bool {
	if a.view.local != b.view.local {
		return a.view.local
	}
	if a.unsettled != b.unsettled {
		return b.unsettled
	}
	if a.terminating != b.terminating {
		return b.terminating
	}
	if !a.created.Equal(b.created) {
		return a.created.After(b.created)
	}
	return compareKeys(a.view.key, b.view.key) < 0
}

func (a *claim) equal(b *claim) bool {
	return a.terminating == b.terminating && a.unsettled == b.unsettled && a.created.Equal(b.created) && a.view.equal(b.view)
}

// addressClaims index the claims of every participating pod by address.
// Almost every address has one claimant, kept in first; the rare others
// are in more, so the index costs a pointer per address.
type addressClaims struct {
	first map[claimKey]*claim
	more  map[claimKey][]*claim
}

// A claimKey is an address as the index keys it: its 16 bytes, without
// the 8 of a netip.Addr's zone (at 150k dual-stack pods, 300k keys: 5 MB
// less). The compiler's addresses are unmapped (podOf), so an IPv4
// address and an IPv6 one never share a key; two spellings that differ
// in zone alone are one address to a set, and so to the index.
type claimKey [16]byte

func keyOf(ip netip.Addr) claimKey { return ip.As16() }

func newAddressClaims() addressClaims {
	return addressClaims{first: map[claimKey]*claim{}, more: map[claimKey][]*claim{}}
}

func (a *addressClaims) add(c *claim) {
	for _, ip := range c.view.ips {
		k := keyOf(ip)
		if a.first[k] == nil {
			a.first[k] = c
		} else {
			a.more[k] = append(a.more[k], c)
		}
	}
}

func (a *addressClaims) remove(c *claim) {
	for _, ip := range c.view.ips {
		k := keyOf(ip)
		more := a.more[k]
		if a.first[k] == c {
			if len(more) == 0 {
				delete(a.first, k)
				continue
			}
			a.first[k], more = more[0], more[1:]
		} else {
			more = slices.DeleteFunc(more, func(o *claim) bool { return o == c })
		}
		if len(more) == 0 {
			delete(a.more, k)
		} else {
			a.more[k] = slices.Clip(more)
		}
	}
}

// contested reports whether another pod claims one of ips too.
func (a *addressClaims) contested(ips []netip.Addr) bool {
	for _, ip := range ips {
		if len(a.more[keyOf(ip)]) > 0 {
			return true
		}
	}
	return false
}

// claimants lists every claim of ip.
func (a *addressClaims) claimants(ip netip.Addr) []*claim {
	k := keyOf(ip)
	if a.first[k] == nil {
		return nil
	}
	return append([]*claim{a.first[k]}, a.more[k]...)
}

// winner is the claim ip belongs to, nil when nobody claims it.
func (a *addressClaims) winner(ip netip.Addr) *claim {
	k := keyOf(ip)
	best := a.first[k]
	for _, o := range a.more[k] {
		if o.outranks(best) {
			best = o
		}
	}
	return best
}

// resolveAddresses brings the pods whose claims changed, and every pod
// claiming one of the addresses involved, to the view they take part in
// policy with: their own addresses only.
func (c *Compiler) resolveAddresses(keys map[objKey]bool, addrs map[netip.Addr]bool, ch *changes) {
	for ip := range addrs {
		for _, o := range c.claims.claimants(ip) {
			keys[o.view.key] = true
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(keys), compareKeys) {
		c.resolvePod(k, ch)
	}
}

// resolvePod brings the pod of k to the view it takes part in policy with,
// as its claim (if any) and the others on its addresses decide.
func (c *Compiler) resolvePod(k objKey, ch *changes) {
	delete(c.addrProblems, k)
	cl := c.claimsByPod[k]
	if cl == nil {
		return // no claim, and none withdrawn: it took no part, and takes none
	}
	old := cl.effective
	var view *pod
	if cl.withdrawn {
		delete(c.claimsByPod, k)
	} else {
		view = c.effectiveView(cl)
	}
	switch {
	case old == nil && view == nil:
		return
	case old != nil && view != nil && old.equal(view):
		return // keep the object: what was built from it stays valid
	}
	cl.effective = view
	c.podChanged(old, view, ch)
}

// effectiveView is cl's view without the addresses another pod wins, nil
// when none is left. Each address lost is a problem of cl's pod.
func (c *Compiler) effectiveView(cl *claim) *pod {
	var kept []netip.Addr
	for _, ip := range cl.view.ips {
		w := c.claims.winner(ip)
		if w == cl {
			kept = append(kept, ip)
			continue
		}
		why := "newer"
		switch {
		case w.view.local && !cl.view.local:
			why = "on this node"
		case cl.unsettled && !w.unsettled:
			why = "its definitions agree on where it is, this pod's do not"
		case cl.terminating && !w.terminating:
			why = "not terminating"
		case w.created.Equal(cl.created):
			why = "first by name"
		}
		c.addrProblems[cl.view.key] = append(c.addrProblems[cl.view.key], Problem{
			Object: "Pod " + cl.view.key.String(),
			Err: fmt.Errorf("pod IP %s is also held by Pod %s, which wins it (%s): policy treats the address as that pod's",
				ip, w.view.key, why),
		})
	}
	switch len(kept) {
	case len(cl.view.ips):
		return cl.view
	case 0:
		return nil
	}
	v := *cl.view
	v.ips = kept
	return &v
}

// syncUnsettled takes the snapshot's unsettled pods (k8s.Snapshot.Unsettled)
// and returns those whose entry changed, which the caller looks at again
// even when the source hands out the same Pod object for them.
func (c *Compiler) syncUnsettled(list []k8s.UnsettledPod) []objKey {
	next := make(map[objKey]*k8s.UnsettledPod, len(list))
	for i := range list {
		next[objKey{list[i].Namespace, list[i].Name}] = &list[i]
	}
	var changed []objKey
	for k, u := range next {
		if o := c.unsettled[k]; o == nil || !slices.Equal(o.Nodes, u.Nodes) || !slices.Equal(o.IPs, u.IPs) {
			changed = append(changed, k)
		}
	}
	for k := range c.unsettled {
		if next[k] == nil {
			changed = append(changed, k)
		}
	}
	c.unsettled = next
	return changed
}

// placed returns p as the compiler takes it part in policy. That is p,
// unless p is unsettled (its definitions disagree on where it is): then a
// copy at every address its entry gives, on this node if a definition
// names this node (whatever the others say), and taking part whatever a
// definition said of its phase or hostNetwork (those with hostNetwork gave
// no address). The source quarantines such a pod, so it is isolated both
// ways with nothing allowed and selected by nothing; an address another
// pod holds stays that pod's (claim.outranks).
func (c *Compiler) placed(k objKey, p *k8s.Pod) *k8s.Pod {
	u := c.unsettled[k]
	if u == nil {
		return p
	}
	q := p.DeepCopy()
	q.Spec.HostNetwork = false
	q.Status.Phase = corev1.PodRunning
	switch {
	case slices.Contains(u.Nodes, c.opts.Node):
		q.Spec.NodeName = c.opts.Node
	case len(u.Nodes) > 0:
		q.Spec.NodeName = u.Nodes[0] // another node: not this one
	default:
		q.Spec.NodeName = ""
	}
	q.Status.PodIPs = nil
	for _, ip := range u.IPs {
		q.Status.PodIPs = append(q.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return q
}
