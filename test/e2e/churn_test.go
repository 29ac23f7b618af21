package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nftpolicy/nftpolicy/conntrack"
	"github.com/nftpolicy/nftpolicy/enforcer"
	"github.com/nftpolicy/nftpolicy/internal/netns"
	"github.com/nftpolicy/nftpolicy/internal/reference"
	"github.com/nftpolicy/nftpolicy/internal/testbin"
	"github.com/nftpolicy/nftpolicy/k8s"
	"github.com/nftpolicy/nftpolicy/nft"
)

// The churn tests keep a prober running while the policy changes under it
// (random edits, kill -9, an upgrade between table layouts) and judge
// every probe against the states that could have been in force while it
// ran (netns.Timeline): no probe may get through that every such state
// denies, and none may be blocked that every such state allows. What each
// state allows comes from the reference evaluator (internal/reference),
// which is written from the API documentation, not from the compiler.

// churnKeys are the pods of a churn cluster, all on node1: both directions
// of every connection are enforced by the one syncer.
var churnKeys = []string{"x/a", "x/b", "y/a", "y/b", "z/a"}

// churnProbeTimeout bounds a probe of the churn tests. A blocked probe lasts
// this long, so it also sets how many states a blocked probe spans; below
// the first SYN retransmission (1s), each probe is one packet.
const churnProbeTimeout = 500 * time.Millisecond

// churnWorkers probe at once with churnProbeTimeout, and as many again
// with churnLeakTimeout (netns.StartLeakProber). The first spend most of
// their time in blocked probes, each the whole timeout; the second start a
// probe every few milliseconds, so a gap of a few milliseconds in
// enforcement meets some of them.
const (
	churnWorkers     = 32
	churnLeakTimeout = 30 * time.Millisecond
)

// A churn is a one-node cluster whose labels and policies change at random.
type churn struct {
	t        *testing.T
	c        *netns.Cluster
	node     *netns.Node
	pods     []*netns.Pod
	targets  []netns.ProbeTarget
	rnd      *rand.Rand
	policies map[string]*networkingv1.NetworkPolicy // by namespace/name
	edits    map[string]int                         // edits made, by kind
}

func newChurn(t *testing.T, seed uint64) *churn {
	t.Helper()
	netns.RequireRoot(t)
	ch := &churn{
		t:        t,
		c:        netns.NewTestCluster(t, netns.Options{Name: "churn", Timeout: churnProbeTimeout}),
		rnd:      rand.New(rand.NewPCG(seed, 0x6e667470)),
		policies: map[string]*networkingv1.NetworkPolicy{},
		edits:    map[string]int{},
	}
	var err error
	if ch.node, err = ch.c.AddNode("node1"); err != nil {
		t.Fatal(err)
	}
	// Every probe is a new connection, thousands a second. With conntrack's
	// default timeouts (a closed TCP connection 120 s in TIME_WAIT, a UDP
	// one 30 s) the node's entries pass nf_conntrack_max, which the whole
	// host shares, within a minute, and a full table drops every new
	// connection on the host: blocked probes the policy allows (seen in a
	// full run). The node forgets a finished probe within a second or two.
	if out, err := ch.node.Exec("sysctl", "-w",
		"net.netfilter.nf_conntrack_tcp_timeout_time_wait=1", "net.netfilter.nf_conntrack_tcp_timeout_close=1",
		"net.netfilter.nf_conntrack_tcp_timeout_close_wait=1", "net.netfilter.nf_conntrack_tcp_timeout_fin_wait=1",
		"net.netfilter.nf_conntrack_tcp_timeout_last_ack=1",
		"net.netfilter.nf_conntrack_udp_timeout=1", "net.netfilter.nf_conntrack_udp_timeout_stream=2"); err != nil {
		t.Fatalf("conntrack timeouts: %v\n%s", err, out)
	}
	for _, k := range churnKeys {
		ns, name, _ := strings.Cut(k, "/")
		p, err := ch.c.AddPod(ch.node, ns, name)
		if err != nil {
			t.Fatal(err)
		}
		ch.pods = append(ch.pods, p)
	}
	// Every ordered pair of distinct pods, both families, TCP 80 and UDP 81.
	for _, from := range ch.pods {
		for _, to := range ch.pods {
			if from == to {
				continue
			}
			for _, fam := range []string{netns.IPv4, netns.IPv6} {
				ch.targets = append(ch.targets,
					netns.ProbeTarget{From: from, To: to, Family: fam, Proto: netns.TCP, Port: 80},
					netns.ProbeTarget{From: from, To: to, Family: fam, Proto: netns.UDP, Port: 81})
			}
		}
	}
	return ch
}

// files are the manifests of the current state: the cluster, and the
// policies as JSON documents (JSON is YAML).
func (ch *churn) files() (cluster, policies string) {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(ch.policies)) {
		data, err := json.Marshal(ch.policies[k])
		if err != nil {
			ch.t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(data)
		b.WriteString("\n")
	}
	return ch.c.Manifests(), b.String()
}

// snapshot loads the current state as the daemon would, and fails the test
// on any object error: the generator makes valid objects only.
func (ch *churn) snapshot() *k8s.Snapshot {
	ch.t.Helper()
	cluster, policies := ch.files()
	snap, objErrs, err := k8s.LoadFS(fstest.MapFS{
		clusterFile:  {Data: []byte(cluster)},
		policiesFile: {Data: []byte(policies)},
	})
	if err != nil {
		ch.t.Fatal(err)
	}
	for _, e := range objErrs {
		ch.t.Errorf("generated object rejected: %v\n%s", e, policies)
	}
	if len(objErrs) > 0 {
		ch.t.FailNow()
	}
	return snap
}

// allowed is what snap allows per target, by the reference evaluator.
func (ch *churn) allowed(snap *k8s.Snapshot) []bool {
	ref := reference.New(snap, ch.node.Name())
	out := make([]bool, len(ch.targets))
	for i, t := range ch.targets {
		proto := nft.ProtoTCP
		if t.Proto == netns.UDP {
			proto = nft.ProtoUDP
		}
		out[i] = ref.Allowed(reference.Conn{Src: t.From.Addr(t.Family), Dst: t.Dst(), Proto: proto, Port: uint16(t.Port)})
	}
	return out
}

// edit makes one random change: a pod's labels, a namespace's labels, or
// a policy added, replaced or deleted. It returns what it did.
func (ch *churn) edit() string {
	r := ch.rnd
	switch n := r.IntN(10); {
	case n < 2:
		p := ch.pods[r.IntN(len(ch.pods))]
		labels := map[string]string{"app": pick(r, "a", "b", "c")}
		if r.IntN(2) == 0 {
			labels["tier"] = pick(r, "web", "db")
		}
		ch.c.SetPodLabels(p.Key(), labels)
		ch.edits["pod labels"]++
		return fmt.Sprintf("pod %s labels %v", p.Key(), labels)
	case n < 4:
		ns := pick(r, "x", "y", "z")
		labels := map[string]string{}
		if r.IntN(3) > 0 {
			labels["team"] = pick(r, "red", "blue")
		}
		ch.c.SetNamespaceLabels(ns, labels)
		ch.edits["namespace labels"]++
		return fmt.Sprintf("namespace %s labels %v", ns, labels)
	default:
		return ch.editPolicy()
	}
}

// editPolicy adds, replaces or deletes a policy at random.
func (ch *churn) editPolicy() string {
	r := ch.rnd
	{
		key := fmt.Sprintf("%s/p%d", pick(r, "x", "y", "z"), r.IntN(3))
		if _, ok := ch.policies[key]; ok && r.IntN(3) == 0 {
			delete(ch.policies, key)
			ch.edits["policy deleted"]++
			return "delete policy " + key
		}
		ns, name, _ := strings.Cut(key, "/")
		ch.policies[key] = ch.randomPolicy(ns, name)
		ch.edits["policy written"]++
		return "write policy " + key
	}
}

func pick[T any](r *rand.Rand, choices ...T) T { return choices[r.IntN(len(choices))] }

// randomPolicy draws a policy over the labels edit hands out, the pods'
// addresses and the served ports, named and numbered.
func (ch *churn) randomPolicy(ns, name string) *networkingv1.NetworkPolicy {
	r := ch.rnd
	np := &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       networkingv1.NetworkPolicySpec{PodSelector: *ch.randomPodSelector(true)},
	}
	ingress, egress := true, r.IntN(2) == 0
	switch r.IntN(4) {
	case 0: // policyTypes left to the defaults: Ingress, and Egress if egress rules
	case 1:
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		egress = false
	case 2:
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
		ingress, egress = false, true
	case 3:
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
		egress = true
	}
	if ingress {
		for range r.IntN(3) {
			np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: ch.randomPeers(), Ports: ch.randomPorts()})
		}
	}
	if egress {
		for range r.IntN(3) {
			np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: ch.randomPeers(), Ports: ch.randomPorts()})
		}
	}
	return np
}

// randomPodSelector selects all pods (empty: true allowed), by app, or by
// an expression on tier.
func (ch *churn) randomPodSelector(empty bool) *metav1.LabelSelector {
	r := ch.rnd
	switch r.IntN(3) {
	case 0:
		if empty {
			return &metav1.LabelSelector{}
		}
		fallthrough
	case 1:
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": pick(r, "a", "b", "c")}}
	}
	req := metav1.LabelSelectorRequirement{Key: "tier", Operator: pick(r,
		metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn, metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist)}
	if req.Operator == metav1.LabelSelectorOpIn || req.Operator == metav1.LabelSelectorOpNotIn {
		req.Values = []string{pick(r, "web", "db")}
	}
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{req}}
}

// randomPeers is nil (every peer) a quarter of the time, else one or two
// peers: pods of the policy's namespace, pods of selected namespaces,
// both, or an ipBlock.
func (ch *churn) randomPeers() []networkingv1.NetworkPolicyPeer {
	r := ch.rnd
	if r.IntN(4) == 0 {
		return nil
	}
	var peers []networkingv1.NetworkPolicyPeer
	for range 1 + r.IntN(2) {
		var p networkingv1.NetworkPolicyPeer
		switch r.IntN(4) {
		case 0:
			p.PodSelector = ch.randomPodSelector(false)
		case 1:
			p.NamespaceSelector = ch.randomNamespaceSelector()
		case 2:
			p.PodSelector = ch.randomPodSelector(true)
			p.NamespaceSelector = ch.randomNamespaceSelector()
		case 3:
			p.IPBlock = ch.randomIPBlock()
		}
		peers = append(peers, p)
	}
	return peers
}

func (ch *churn) randomNamespaceSelector() *metav1.LabelSelector {
	r := ch.rnd
	switch r.IntN(3) {
	case 0:
		return &metav1.LabelSelector{}
	case 1:
		return &metav1.LabelSelector{MatchLabels: map[string]string{"team": pick(r, "red", "blue")}}
	}
	return &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": pick(r, "x", "y", "z")}}
}

// randomIPBlock is one pod's address, or the node's pod CIDR of one family
// except one pod's address.
func (ch *churn) randomIPBlock() *networkingv1.IPBlock {
	r := ch.rnd
	fam := pick(r, netns.IPv4, netns.IPv6)
	pod := ch.pods[r.IntN(len(ch.pods))]
	host := netip.PrefixFrom(pod.Addr(fam), pod.Addr(fam).BitLen())
	if r.IntN(2) == 0 {
		return &networkingv1.IPBlock{CIDR: host.String()}
	}
	cidr := ch.node.PodCIDRv4()
	if fam == netns.IPv6 {
		cidr = ch.node.PodCIDRv6()
	}
	return &networkingv1.IPBlock{CIDR: cidr.String(), Except: []string{host.String()}}
}

// randomPorts is nil (every port) a third of the time, else one port: a
// number with or without protocol, a named port, or a range.
func (ch *churn) randomPorts() []networkingv1.NetworkPolicyPort {
	r := ch.rnd
	if r.IntN(3) == 0 {
		return nil
	}
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	num := func(n int) *intstr.IntOrString { v := intstr.FromInt32(int32(n)); return &v }
	named := func(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
	end := int32(81)
	switch r.IntN(6) {
	case 0:
		return []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: num(80)}}
	case 1:
		return []networkingv1.NetworkPolicyPort{{Port: num(pick(r, 80, 81))}} // TCP by default
	case 2:
		return []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: num(pick(r, 80, 81))}}
	case 3:
		return []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: named("serve-81-udp")}}
	case 4:
		return []networkingv1.NetworkPolicyPort{{Port: named("serve-80-tcp")}}
	}
	return []networkingv1.NetworkPolicyPort{{Protocol: pick(r, &tcp, &udp), Port: num(79), EndPort: &end}}
}

// probers are the two probers of a churn test, see churnWorkers.
type probers struct{ full, leaks *netns.Prober }

func (ch *churn) startProbers() probers {
	return probers{
		full:  ch.c.StartProber(ch.targets, churnWorkers, churnProbeTimeout),
		leaks: ch.c.StartLeakProber(ch.targets, churnWorkers, churnLeakTimeout),
	}
}

// stop stops both and returns their records.
func (p probers) stop() ([]netns.ProbeRecord, error) {
	full, err1 := p.full.Stop()
	leaks, err2 := p.leaks.Stop()
	return append(full, leaks...), errors.Join(err1, err2)
}

// judge stops the probers and fails the test on every wrong verdict; it
// logs the figures of the closing note.
func (ch *churn) judge(p probers, tl *netns.Timeline, what string) {
	ch.t.Helper()
	records, err := p.stop()
	if err != nil {
		ch.t.Fatal(err)
	}
	wrong, across := tl.Check(ch.targets, records)
	ch.t.Logf("%s: %s over %d targets, %d states, %d probes across a change, %d wrong verdicts",
		what, netns.Summary(records), len(ch.targets), tl.Len(), across, len(wrong))
	if len(records) < len(ch.targets) {
		ch.t.Errorf("only %d probes: not every target was probed", len(records))
	}
	if len(wrong) > 0 {
		ch.t.Errorf("%d wrong verdicts:\n%s", len(wrong), netns.FormatWrong(wrong, 20))
	}
}

// churnSeed is the seed of a churn test's edits: $NFTPOLICY_CHURN_SEED to
// replay a failure, else a new one each run, logged.
func churnSeed(t *testing.T) uint64 {
	t.Helper()
	if s := os.Getenv("NFTPOLICY_CHURN_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("NFTPOLICY_CHURN_SEED: %v", err)
		}
		return seed
	}
	seed := rand.Uint64()
	t.Logf("seed %d (replay with NFTPOLICY_CHURN_SEED=%d)", seed, seed)
	return seed
}

// churnEdits is how many random edits TestChurnEditsUnderProbing syncs.
const churnEdits = 1000

// 1,000 random edits of pod labels, namespace labels and policies, each
// synced on its own through the daemon's Syncer (conntrack cleanup on),
// while churnWorkers probe every pair of pods, both families, TCP and UDP,
// with new connections. Every sync is one commit in the kernel in which
// the rules switch (nft.Conn.WriteDeltaAt writes the interval sets a
// delta creates ahead of it, see nft/handover_linux.go), so a packet sees
// the state before or the state after; the test holds that to every probe.
// Between edits, a random pause of up to 40ms lets probes start and end
// inside a state.
func TestChurnEditsUnderProbing(t *testing.T) {
	ch := newChurn(t, churnSeed(t))
	conn, err := nft.Open(ch.node.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s := enforcer.NewSyncer(conn, enforcer.Options{Node: ch.node.Name(), Table: enforcer.DefaultTable},
		enforcer.PrioritySetting{Auto: true}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	defer s.Close()
	cl, err := conntrack.Open(ch.node.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	s.FollowConntrack(cl)

	for range 3 {
		ch.edit()
	}
	snap := ch.snapshot()
	if _, err := s.Sync(snap); err != nil {
		t.Fatal(err)
	}
	tl := netns.NewTimeline(ch.allowed(snap))
	p := ch.startProbers()
	var changed int
	prev := ch.allowed(snap)
	for i := range churnEdits {
		what := ch.edit()
		snap := ch.snapshot()
		allowed := ch.allowed(snap)
		if !slices.Equal(allowed, prev) {
			changed++
		}
		prev = allowed
		tl.Begin()
		_, err := s.Sync(snap)
		tl.Settle(allowed)
		if err != nil {
			p.stop()
			t.Fatalf("edit %d (%s): %v", i, what, err)
		}
		time.Sleep(time.Duration(ch.rnd.IntN(40)) * time.Millisecond)
	}
	t.Logf("edits: %v; %d of %d changed what some target may reach", ch.edits, changed, churnEdits)
	ch.judge(p, tl, fmt.Sprintf("%d edits", churnEdits))
}

// nftpolicy killed with SIGKILL and started again 10 times, every other
// time with the policies edited while it was down, then moved to a build
// of the previous table layout and back, while the prober runs. A daemon
// that starts writes the whole table, whatever the kernel held (see
// enforcer.Layout), through a dormant handover table (nft.HandoverTable),
// so the kernel holds the old state until the new daemon's commits and
// the new state from them. Written in one batch, interval sets empty
// until the commit's end blocked a probe here once in CI.
func TestChurnRestartsAndUpgradeUnderProbing(t *testing.T) {
	ch := newChurn(t, churnSeed(t))
	// Start from policies that allow some targets and deny others.
	for {
		ch.edit()
		allowed := ch.allowed(ch.snapshot())
		if slices.Contains(allowed, true) && slices.Contains(allowed, false) {
			break
		}
	}
	dir := t.TempDir()
	write := func() {
		t.Helper()
		cluster, policies := ch.files()
		for name, content := range map[string]string{clusterFile: cluster, policiesFile: policies} {
			if err := netns.WriteFileAtomic(filepath.Join(dir, name), []byte(content)); err != nil {
				t.Fatal(err)
			}
		}
	}
	write()
	previous, err := testbin.Build(t.TempDir(), "-X github.com/nftpolicy/nftpolicy/enforcer.previousLayout=yes")
	if err != nil {
		t.Fatal(err)
	}
	d := netns.StartTestDaemons(t, ch.c, dir, netns.DaemonOptions{})
	tl := netns.NewTimeline(ch.allowed(ch.snapshot()))
	p := ch.startProbers()
	// settle lets the prober probe every target a few times in a state.
	settle := func() {
		for n := p.full.Count(); p.full.Count() < n+2*len(ch.targets); {
			time.Sleep(20 * time.Millisecond)
		}
	}
	settle()
	restart := func(binary string) {
		t.Helper()
		var err error
		if d, err = ch.c.StartDaemons(dir, netns.DaemonOptions{Binary: binary}); err != nil {
			p.stop()
			t.Fatal(err)
		}
		t.Cleanup(d.Stop)
	}
	kills, edited := 0, 0
	for i := range 10 {
		d.Kill()
		kills++
		if i%2 == 1 {
			// Edited while no daemon runs: the kernel keeps the old
			// state until the next daemon's first commit.
			tl.Begin()
			ch.edit()
			write()
			edited++
			restart("")
			tl.Settle(ch.allowed(ch.snapshot()))
		} else {
			restart("")
		}
		settle()
	}
	for _, b := range []struct {
		binary, chain string
		layout        int
	}{
		{previous, "chain forward {", enforcer.Layout - 1},
		{"", "chain filter-forward {", enforcer.Layout},
	} {
		d.Kill()
		kills++
		restart(b.binary)
		out, err := ch.node.Exec("nft", "list", "table", "inet", enforcer.DefaultTable)
		if err != nil {
			t.Fatalf("nft list: %v\n%s", err, out)
		}
		if want := fmt.Sprintf(" layout=%d\"", b.layout); !strings.Contains(string(out), want) || !strings.Contains(string(out), b.chain) {
			t.Errorf("after starting the build of layout %d, the table does not record %q or has no %q:\n%s", b.layout, want, b.chain, out)
		}
		settle()
	}
	t.Logf("restarts: %d kill -9, %d with the policies edited while down, 2 across table layouts", kills, edited)
	ch.judge(p, tl, "restarts")
}
