package netns

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A Wiring says how pods are attached to their node.
type Wiring int

const (
	// Routed gives every pod a point-to-point veth: the pod holds a /32 and a
	// /128 and a default route via a link-local gateway on the node side, the
	// node holds a host route per pod (Calico style).
	Routed Wiring = iota
	// Bridged plugs every pod's veth into bridge br0 of its node, with
	// br_netfilter calling the IP hooks for bridged traffic (kubenet style).
	Bridged
)

func (w Wiring) String() string {
	switch w {
	case Routed:
		return "routed"
	case Bridged:
		return "bridged"
	}
	return "Wiring(" + strconv.Itoa(int(w)) + ")"
}

// A Via says how ConnectNodes carries pod traffic between two nodes.
type Via int

const (
	// Link routes each node's pod subnet via the other node's underlay address.
	Link Via = iota
	// VXLAN routes each node's pod subnet through a VXLAN overlay (vxlan0,
	// VNI 1, UDP 4789) on top of the underlay.
	VXLAN
)

func (v Via) String() string {
	switch v {
	case Link:
		return "link"
	case VXLAN:
		return "vxlan"
	}
	return "Via(" + strconv.Itoa(int(v)) + ")"
}

// Families and protocols as ProbeMatrix and Probe spell them.
const (
	IPv4 = "ipv4"
	IPv6 = "ipv6"

	TCP  = "tcp"
	UDP  = "udp"
	SCTP = "sctp"
)

// NettoolEnv names the environment variable that may hold the path of a
// prebuilt nettool binary; when it is empty the harness builds one.
const NettoolEnv = "NFTPOLICY_NETTOOL"

// Options configure a Cluster. The zero value is a dual-stack routed cluster
// serving TCP and UDP on ports 80 and 81.
type Options struct {
	// Name prefixes every network namespace name; a random suffix is added so
	// that parallel runs never collide. Default "np".
	Name string
	// Wiring of pods to nodes. Default Routed.
	Wiring Wiring
	// IPv4 and IPv6 select the address families to configure. If neither is
	// set, both are.
	IPv4, IPv6 bool
	// TCPPorts and UDPPorts are served by every pod (UDP echoes). Default 80, 81.
	TCPPorts, UDPPorts []int
	// Timeout of one probe attempt in ProbeMatrix and ProbeSCTP. Default 1s.
	Timeout time.Duration
	// Concurrency bounds the probes ProbeMatrix runs at once. Default 32.
	Concurrency int
	// ExecProbes runs every probe as a process, `ip netns exec NS nettool
	// probe ...`, instead of in-process on a thread switched into the source
	// namespace. Slower (a process per probe), same results.
	ExecProbes bool
	// Nettool is the path of a prebuilt nettool binary. Default: $NFTPOLICY_NETTOOL,
	// else built once per process with `go build`.
	Nettool string
	// ContainerPorts, when set, are the container ports every pod declares
	// in Manifests instead of the serve-<port>-<protocol> ones (named ports
	// of policies resolve against them), e.g. the network-policy-api
	// conformance pods' {web, 80, TCP} and {dns, 53, UDP}. What the pods
	// serve is still TCPPorts and UDPPorts.
	ContainerPorts []ContainerPort
}

// A ContainerPort is one entry of a pod's spec.containers[].ports in
// Manifests.
type ContainerPort struct {
	Name     string
	Port     int
	Protocol string // "TCP", "UDP" or "SCTP"
}

func (o *Options) setDefaults() {
	if o.Name == "" {
		o.Name = "np"
	}
	if !o.IPv4 && !o.IPv6 {
		o.IPv4, o.IPv6 = true, true
	}
	if o.TCPPorts == nil {
		o.TCPPorts = []int{80, 81}
	}
	if o.UDPPorts == nil {
		o.UDPPorts = []int{80, 81}
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 32
	}
	if o.Nettool == "" {
		o.Nettool = os.Getenv(NettoolEnv)
	}
}

// A Cluster is a set of nodes and pods, each a network namespace it created.
// Close removes all of them and stops every process started in them.
type Cluster struct {
	opts Options
	id   string
	tool *tool

	mu         sync.Mutex
	closed     bool
	underlay   string   // netns name of the underlay switch, "" until the first node
	created    []string // every netns created, in creation order
	servers    []*server
	daemons    []*Daemons // see StartDaemons; stopped first by Close
	nodes      []*Node
	pods       []*Pod
	podByKey   map[string]*Pod
	podByAddr  map[netip.Addr]*Pod
	connected  map[[2]int]Via
	nsLabels   map[string]map[string]string // see SetNamespaceLabels
	podLabels  map[string]map[string]string // see SetPodLabels
	nodeLabels map[string]map[string]string // see SetNodeLabels

	sport atomic.Uint32 // SCTP source ports handed out, see ProbeSCTP
}

// A Node is a network namespace that forwards between its pods and the other
// nodes.
type Node struct {
	c        *Cluster
	name     string
	index    int // N of the address plan
	netns    string
	ip4, ip6 netip.Addr
	cidr4    netip.Prefix
	cidr6    netip.Prefix
	nextHost int  // host number of the next pod
	vxlan    bool // vxlan0 exists
	serving  bool // see ServeOnNode
}

// A Pod is a network namespace with one veth (eth0) to its node, running
// nettool servers.
type Pod struct {
	c         *Cluster
	node      *Node
	namespace string
	name      string
	netns     string
	hostVeth  string
	host      int // k of the address plan
	ip4, ip6  netip.Addr

	mu         sync.Mutex
	probeTable bool // table inet probe installed, see ProbeSCTP
}

const (
	setupTimeout = 30 * time.Second
	underlayMTU  = 1600 // leaves room for the VXLAN header under a 1500 pod MTU
	podGateway4  = "169.254.1.1"
	podGateway6  = "fe80::1"
	vxlanVNI     = 1
	vxlanPort    = 4789
	maxNodes     = 254
	maxPodsNode  = 253 // hosts .2 to .254
)

// dnsName is what node, namespace and pod names (and Options.Name) may look like:
// they end up in network namespace names, so keep them tame.
var dnsName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$`)

// NewCluster creates an empty cluster: it resolves (or builds) nettool but
// creates no namespace until AddNode.
func NewCluster(opts Options) (*Cluster, error) {
	opts.setDefaults()
	if !dnsName.MatchString(opts.Name) || len(opts.Name) > 32 {
		return nil, fmt.Errorf("netns: bad cluster name %q", opts.Name)
	}
	if opts.Wiring != Routed && opts.Wiring != Bridged {
		return nil, fmt.Errorf("netns: unknown wiring %v", opts.Wiring)
	}
	for _, p := range append(append([]int(nil), opts.TCPPorts...), opts.UDPPorts...) {
		if p < 1 || p > 65535 {
			return nil, fmt.Errorf("netns: bad port %d", p)
		}
	}
	t, err := nettool(opts.Nettool)
	if err != nil {
		return nil, err
	}
	var rnd [3]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	c := &Cluster{
		opts:      opts,
		id:        opts.Name + "-" + hex.EncodeToString(rnd[:]),
		tool:      t,
		podByKey:  map[string]*Pod{},
		podByAddr: map[netip.Addr]*Pod{},
		connected: map[[2]int]Via{},
	}
	var s [2]byte
	_, _ = rand.Read(s[:])
	c.sport.Store(uint32(s[0])<<8 | uint32(s[1]))
	return c, nil
}

// ID is the prefix of every network namespace name of the cluster, e.g. "np-3fa2c1".
func (c *Cluster) ID() string { return c.id }

// Options returns the options in effect, defaults filled in.
func (c *Cluster) Options() Options { return c.opts }

// Nodes returns the nodes in the order they were added.
func (c *Cluster) Nodes() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Node(nil), c.nodes...)
}

// Pods returns the pods in the order they were added.
func (c *Cluster) Pods() []*Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Pod(nil), c.pods...)
}

// Pod returns the pod with key "namespace/name", or nil.
func (c *Cluster) Pod(key string) *Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.podByKey[key]
}

// PodByIP returns the pod holding addr, or nil.
func (c *Cluster) PodByIP(addr netip.Addr) *Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.podByAddr[addr.Unmap()]
}

// Close stops every process the cluster started and deletes every network
// namespace it created (which removes their links). It is safe to call twice.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	servers, created, daemons := c.servers, c.created, c.daemons
	c.mu.Unlock()

	var errs []error
	var wg sync.WaitGroup
	for _, d := range daemons {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.Stop()
		}()
	}
	for _, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.stop()
		}()
	}
	wg.Wait()
	// Pods, then nodes, then the underlay: the reverse of creation.
	for i := len(created) - 1; i >= 0; i-- {
		if _, err := os.Stat(netnsPath(created[i])); errors.Is(err, os.ErrNotExist) {
			continue // deleted already (a test's fault injection)
		}
		if _, err := run(nil, "ip", "netns", "delete", created[i]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *Cluster) v4() bool { return c.opts.IPv4 }
func (c *Cluster) v6() bool { return c.opts.IPv6 }

// addNetns creates a network namespace and records it for Close before
// anything can fail, then applies the sysctls every namespace of the harness
// gets. Called with c.mu held.
func (c *Cluster) addNetns(name string, sysctls ...string) error {
	if c.closed {
		return errors.New("netns: cluster is closed")
	}
	if _, err := run(nil, "ip", "netns", "add", name); err != nil {
		return err
	}
	c.created = append(c.created, name)
	// Duplicate address detection keeps fresh IPv6 addresses (link-local ones
	// included) tentative for about a second, during which probes fail at
	// random: there are no duplicates here, so switch it off before any link
	// exists in the namespace.
	all := append([]string{
		"net.ipv6.conf.all.accept_dad=0",
		"net.ipv6.conf.default.accept_dad=0",
		"net.ipv6.conf.default.accept_ra=0",
	}, sysctls...)
	return sysctl(name, all...)
}

// AddNode creates a node: a network namespace that forwards IPv4 and IPv6,
// attached to the underlay with its node address, and in a Bridged cluster
// holding bridge br0 with the gateway addresses of its pod subnet.
func (c *Cluster) AddNode(name string) (*Node, error) {
	if !dnsName.MatchString(name) {
		return nil, fmt.Errorf("netns: bad node name %q", name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.name == name {
			return nil, fmt.Errorf("netns: node %q exists", name)
		}
	}
	if len(c.nodes) >= maxNodes {
		return nil, fmt.Errorf("netns: at most %d nodes", maxNodes)
	}
	if err := c.ensureUnderlay(); err != nil {
		return nil, fmt.Errorf("add node %s: %w", name, err)
	}
	idx := len(c.nodes) + 1
	n := &Node{
		c:        c,
		name:     name,
		index:    idx,
		netns:    c.id + "-n-" + name,
		ip4:      netip.AddrFrom4([4]byte{192, 168, 255, byte(idx)}),
		ip6:      v6Host(netip.MustParseAddr("fd00:ffff::"), idx),
		cidr4:    netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(idx), 0}), 24),
		cidr6:    netip.PrefixFrom(v6Subnet(idx), 64),
		nextHost: 2,
	}
	if err := c.setupNode(n); err != nil {
		return nil, fmt.Errorf("add node %s: %w", name, err)
	}
	c.nodes = append(c.nodes, n)
	return n, nil
}

func (c *Cluster) ensureUnderlay() error {
	if c.underlay != "" {
		return nil
	}
	ns := c.id + "-underlay"
	if err := c.addNetns(ns); err != nil {
		return err
	}
	c.underlay = ns
	err := ipBatch(ns,
		"link set lo up",
		fmt.Sprintf("link add sw0 mtu %d type bridge stp_state 0 mcast_snooping 0", underlayMTU),
		"link set sw0 up",
	)
	if err != nil {
		return err
	}
	// The underlay is a plain switch: keep the IP hooks out of it.
	return sysctl(ns, "net.bridge.bridge-nf-call-iptables=0", "net.bridge.bridge-nf-call-ip6tables=0")
}

func (c *Cluster) setupNode(n *Node) error {
	err := c.addNetns(n.netns,
		"net.ipv4.ip_forward=1",
		"net.ipv6.conf.all.forwarding=1",
		"net.ipv4.conf.all.rp_filter=0",
		"net.ipv4.conf.default.rp_filter=0",
	)
	if err != nil {
		return err
	}
	port := "n" + strconv.Itoa(n.index)
	// The underlay-side end is created in the underlay, the other end straight
	// into the node: a link moved between namespaces later would lose its
	// per-namespace defaults (accept_dad).
	if err := ipBatch(c.underlay,
		fmt.Sprintf("link add %s mtu %d type veth peer name eth0 mtu %d netns %s", port, underlayMTU, underlayMTU, n.netns),
		fmt.Sprintf("link set %s master sw0 up", port),
	); err != nil {
		return err
	}
	cmds := []string{"link set lo up", "link set eth0 up"}
	if c.v4() {
		cmds = append(cmds, fmt.Sprintf("addr add %s/24 dev eth0", n.ip4))
	}
	if c.v6() {
		cmds = append(cmds, fmt.Sprintf("addr add %s/64 dev eth0 nodad", n.ip6))
	}
	if c.opts.Wiring == Bridged {
		// A bridge takes the lowest MAC of its ports unless told otherwise, so
		// its MAC would change under the pods' neighbour caches as pods come.
		cmds = append(cmds,
			fmt.Sprintf("link add br0 address 02:bb:00:00:00:%02x type bridge stp_state 0 mcast_snooping 0", n.index),
			"link set br0 up")
		if c.v4() {
			cmds = append(cmds, fmt.Sprintf("addr add %s/24 dev br0", n.GatewayIPv4()))
		}
		if c.v6() {
			cmds = append(cmds, fmt.Sprintf("addr add %s/64 dev br0 nodad", n.GatewayIPv6()))
		}
	}
	if err := ipBatch(n.netns, cmds...); err != nil {
		return err
	}
	if c.opts.Wiring == Bridged {
		if err := enableBrNetfilter(n.netns); err != nil {
			return err
		}
	}
	return nil
}

// enableBrNetfilter makes bridged IPv4 and IPv6 traffic traverse the inet
// hooks of the node, as kubelet requires of bridge-based network plugins.
// The sysctls are per network namespace (Linux 5.3+).
func enableBrNetfilter(ns string) error {
	if _, err := os.Stat("/proc/sys/net/bridge"); err != nil {
		// Not built in and not loaded: try to load it; the sysctl below says
		// clearly if that failed.
		_, _ = run(nil, "modprobe", "br_netfilter")
	}
	if err := sysctl(ns, "net.bridge.bridge-nf-call-iptables=1", "net.bridge.bridge-nf-call-ip6tables=1"); err != nil {
		return fmt.Errorf("br_netfilter: %w", err)
	}
	return nil
}

// AddPod creates pod namespace/name on node: a network namespace with eth0
// wired to the node, addresses of the node's pod subnet, and nettool serving
// the configured TCP and UDP ports. It returns once the servers listen.
func (c *Cluster) AddPod(node *Node, namespace, name string) (*Pod, error) {
	if !dnsName.MatchString(namespace) || strings.Contains(namespace, ".") {
		return nil, fmt.Errorf("netns: bad namespace name %q", namespace)
	}
	if !dnsName.MatchString(name) {
		return nil, fmt.Errorf("netns: bad pod name %q", name)
	}
	if node == nil || node.c != c {
		return nil, errors.New("netns: node is not of this cluster")
	}
	key := namespace + "/" + name
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.podByKey[key] != nil {
		return nil, fmt.Errorf("netns: pod %s exists", key)
	}
	if node.nextHost-2 >= maxPodsNode {
		return nil, fmt.Errorf("netns: at most %d pods per node", maxPodsNode)
	}
	host := node.nextHost
	node.nextHost++
	p := &Pod{
		c:         c,
		node:      node,
		namespace: namespace,
		name:      name,
		netns:     c.id + "-p-" + namespace + "." + name,
		hostVeth:  "vpod" + strconv.Itoa(len(c.pods)),
		host:      host,
	}
	if c.v4() {
		b := node.cidr4.Addr().As4()
		b[3] = byte(host)
		p.ip4 = netip.AddrFrom4(b)
	}
	if c.v6() {
		p.ip6 = v6Host(node.cidr6.Addr(), host)
	}
	if err := c.setupPod(p); err != nil {
		return nil, fmt.Errorf("add pod %s: %w", key, err)
	}
	c.pods = append(c.pods, p)
	c.podByKey[key] = p
	for _, a := range p.IPs() {
		c.podByAddr[a] = p
	}
	return p, nil
}

// mac is the MAC address of a Bridged pod's eth0, 02:42:0a:f4:N:k (locally
// administered), fixed so that a capture or a neighbour table reads the same
// in every run.
func (p *Pod) mac() string {
	return fmt.Sprintf("02:42:0a:f4:%02x:%02x", p.node.index, p.host)
}

func (c *Cluster) setupPod(p *Pod) error {
	n := p.node
	if err := c.addNetns(p.netns); err != nil {
		return err
	}
	if err := ipBatch(n.netns,
		fmt.Sprintf("link add %s type veth peer name eth0 netns %s", p.hostVeth, p.netns),
	); err != nil {
		return err
	}
	pod := []string{"link set lo up", "link set eth0 up"}
	node := []string{}
	switch c.opts.Wiring {
	case Routed:
		// The gateway is a link-local address on the node side of every veth,
		// the same on all of them. Node-to-pod traffic must not borrow it as
		// its source, hence src on the host routes.
		node = append(node, fmt.Sprintf("link set %s up", p.hostVeth))
		if c.v4() {
			pod = append(pod,
				fmt.Sprintf("addr add %s/32 dev eth0", p.ip4),
				fmt.Sprintf("route add 0.0.0.0/0 via %s dev eth0 onlink", podGateway4))
			node = append(node,
				fmt.Sprintf("addr add %s/32 dev %s scope link", podGateway4, p.hostVeth),
				fmt.Sprintf("route add %s/32 dev %s src %s", p.ip4, p.hostVeth, n.ip4))
		}
		if c.v6() {
			pod = append(pod,
				fmt.Sprintf("addr add %s/128 dev eth0 nodad", p.ip6),
				fmt.Sprintf("route add ::/0 via %s dev eth0", podGateway6))
			node = append(node,
				fmt.Sprintf("addr add %s/64 dev %s nodad", podGateway6, p.hostVeth),
				fmt.Sprintf("route add %s/128 dev %s src %s", p.ip6, p.hostVeth, n.ip6))
		}
	case Bridged:
		node = append(node, fmt.Sprintf("link set %s master br0 up", p.hostVeth))
		pod = append([]string{fmt.Sprintf("link set eth0 address %s", p.mac())}, pod...)
		if c.v4() {
			pod = append(pod,
				fmt.Sprintf("addr add %s/24 dev eth0", p.ip4),
				fmt.Sprintf("route add 0.0.0.0/0 via %s dev eth0", n.GatewayIPv4()))
		}
		if c.v6() {
			pod = append(pod,
				fmt.Sprintf("addr add %s/64 dev eth0 nodad", p.ip6),
				fmt.Sprintf("route add ::/0 via %s dev eth0", n.GatewayIPv6()))
		}
	}
	// Node side first: the pod's routes need its peer up (onlink or not).
	if err := ipBatch(n.netns, node...); err != nil {
		return err
	}
	if err := ipBatch(p.netns, pod...); err != nil {
		return err
	}
	s, err := c.startServer(p.netns)
	if err != nil {
		return err
	}
	c.servers = append(c.servers, s)
	return nil
}

// ConnectNodes makes the pods of a and b reach each other: via Link, each node
// routes the other's pod subnet via the other's underlay address; via VXLAN,
// via the other's vxlan0 address, the packets travelling VXLAN-encapsulated
// over the underlay.
func (c *Cluster) ConnectNodes(a, b *Node, via Via) error {
	if a == nil || b == nil || a.c != c || b.c != c {
		return errors.New("netns: node is not of this cluster")
	}
	if a == b {
		return errors.New("netns: cannot connect a node to itself")
	}
	if via != Link && via != VXLAN {
		return fmt.Errorf("netns: unknown via %v", via)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	pair := [2]int{min(a.index, b.index), max(a.index, b.index)}
	if v, ok := c.connected[pair]; ok {
		return fmt.Errorf("netns: nodes %s and %s already connected via %v", a.name, b.name, v)
	}
	for _, e := range [][2]*Node{{a, b}, {b, a}} {
		if err := c.route(e[0], e[1], via); err != nil {
			return fmt.Errorf("connect %s to %s via %v: %w", e[0].name, e[1].name, via, err)
		}
	}
	c.connected[pair] = via
	return nil
}

// ServeOnNode runs nettool in the node's own network namespace, serving
// Options.TCPPorts and Options.UDPPorts on the node addresses as a
// hostNetwork pod would, so that pods can probe the node (Probe to
// Node.IPv4 or Node.IPv6). It returns once the servers listen; Close stops
// them. Serving a node twice is an error.
func (c *Cluster) ServeOnNode(n *Node) error {
	if n == nil || n.c != c {
		return errors.New("netns: node is not of this cluster")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n.serving {
		return fmt.Errorf("netns: node %s already serves", n.name)
	}
	s, err := c.startServer(n.netns)
	if err != nil {
		return fmt.Errorf("serve on node %s: %w", n.name, err)
	}
	c.servers = append(c.servers, s)
	n.serving = true
	return nil
}

// route installs on n the routes to the pod subnet of peer.
func (c *Cluster) route(n, peer *Node, via Via) error {
	var cmds []string
	switch via {
	case Link:
		if c.v4() {
			cmds = append(cmds, fmt.Sprintf("route add %s via %s dev eth0", peer.cidr4, peer.ip4))
		}
		if c.v6() {
			cmds = append(cmds, fmt.Sprintf("route add %s via %s dev eth0", peer.cidr6, peer.ip6))
		}
	case VXLAN:
		if err := c.ensureVXLAN(n); err != nil {
			return err
		}
		// Head-end replication of broadcast and unknown unicast (ARP, ND) to
		// the peer; the bridge learns the rest.
		if _, err := run(nil, "bridge", "-n", n.netns, "fdb", "append", "00:00:00:00:00:00",
			"dev", "vxlan0", "dst", vtep(peer).String()); err != nil {
			return err
		}
		if c.v4() {
			cmds = append(cmds, fmt.Sprintf("route add %s via %s dev vxlan0", peer.cidr4, overlay4(peer)))
		}
		if c.v6() {
			cmds = append(cmds, fmt.Sprintf("route add %s via %s dev vxlan0", peer.cidr6, overlay6(peer)))
		}
	}
	return ipBatch(n.netns, cmds...)
}

func (c *Cluster) ensureVXLAN(n *Node) error {
	if n.vxlan {
		return nil
	}
	cmds := []string{
		fmt.Sprintf("link add vxlan0 address 02:bc:00:00:00:%02x mtu 1500 type vxlan id %d dstport %d local %s dev eth0",
			n.index, vxlanVNI, vxlanPort, vtep(n)),
		"link set vxlan0 up",
	}
	if c.v4() {
		cmds = append(cmds, fmt.Sprintf("addr add %s/24 dev vxlan0", overlay4(n)))
	}
	if c.v6() {
		cmds = append(cmds, fmt.Sprintf("addr add %s/64 dev vxlan0 nodad", overlay6(n)))
	}
	if err := ipBatch(n.netns, cmds...); err != nil {
		return err
	}
	n.vxlan = true
	return nil
}

// vtep is the underlay address VXLAN packets of n come from: IPv4 when the
// cluster has it.
func vtep(n *Node) netip.Addr {
	if n.c.v4() {
		return n.ip4
	}
	return n.ip6
}

func overlay4(n *Node) netip.Addr { return netip.AddrFrom4([4]byte{192, 168, 254, byte(n.index)}) }
func overlay6(n *Node) netip.Addr { return v6Host(netip.MustParseAddr("fd00:fffe::"), n.index) }

// v6Subnet returns fd00:10:244:N::.
func v6Subnet(n int) netip.Addr {
	a := netip.MustParseAddr("fd00:10:244::").As16()
	a[6], a[7] = byte(n>>8), byte(n)
	return netip.AddrFrom16(a)
}

// v6Host returns prefix with its last 16 bits set to host.
func v6Host(prefix netip.Addr, host int) netip.Addr {
	a := prefix.As16()
	a[14], a[15] = byte(host>>8), byte(host)
	return netip.AddrFrom16(a)
}

// Name is the node's name as given to AddNode.
func (n *Node) Name() string { return n.name }

// Index is N of the address plan: 1 for the first node added.
func (n *Node) Index() int { return n.index }

// NetnsName is the name of the node's network namespace (ip netns).
func (n *Node) NetnsName() string { return n.netns }

// NetnsPath is the bind-mounted path of the node's network namespace.
func (n *Node) NetnsPath() string { return netnsPath(n.netns) }

// IPv4 is the node address on the underlay (192.168.255.N), invalid when the
// cluster has no IPv4.
func (n *Node) IPv4() netip.Addr { return n.ip4 }

// IPv6 is the node address on the underlay (fd00:ffff::N), invalid when the
// cluster has no IPv6.
func (n *Node) IPv6() netip.Addr { return n.ip6 }

// PodCIDRv4 is the node's IPv4 pod subnet, 10.244.N.0/24.
func (n *Node) PodCIDRv4() netip.Prefix { return n.cidr4 }

// PodCIDRv6 is the node's IPv6 pod subnet, fd00:10:244:N::/64.
func (n *Node) PodCIDRv6() netip.Prefix { return n.cidr6 }

// GatewayIPv4 is the address pods use as their IPv4 default gateway:
// 169.254.1.1 on every host-side veth when Routed, 10.244.N.1 on br0 when
// Bridged (which is then also the source of node-to-pod traffic).
func (n *Node) GatewayIPv4() netip.Addr {
	if n.c.opts.Wiring == Bridged {
		b := n.cidr4.Addr().As4()
		b[3] = 1
		return netip.AddrFrom4(b)
	}
	return netip.MustParseAddr(podGateway4)
}

// GatewayIPv6 is the IPv6 counterpart of GatewayIPv4: fe80::1 when Routed,
// fd00:10:244:N::1 on br0 when Bridged.
func (n *Node) GatewayIPv6() netip.Addr {
	if n.c.opts.Wiring == Bridged {
		return v6Host(n.cidr6.Addr(), 1)
	}
	return netip.MustParseAddr(podGateway6)
}

// Exec runs a command in the node's network namespace and returns its
// standard output; the error carries standard error.
func (n *Node) Exec(args ...string) ([]byte, error) { return execIn(n.netns, nil, args...) }

// ExecInput is Exec with data on standard input, e.g.
// n.ExecInput([]byte(ruleset), "nft", "-f", "-").
func (n *Node) ExecInput(stdin []byte, args ...string) ([]byte, error) {
	return execIn(n.netns, stdin, args...)
}

// Namespace is the pod's Kubernetes namespace.
func (p *Pod) Namespace() string { return p.namespace }

// Name is the pod's name.
func (p *Pod) Name() string { return p.name }

// Key is "namespace/name", the row and column label of a Matrix.
func (p *Pod) Key() string { return p.namespace + "/" + p.name }

// Node is the node the pod runs on.
func (p *Pod) Node() *Node { return p.node }

// NetnsName is the name of the pod's network namespace (ip netns).
func (p *Pod) NetnsName() string { return p.netns }

// NetnsPath is the bind-mounted path of the pod's network namespace.
func (p *Pod) NetnsPath() string { return netnsPath(p.netns) }

// HostVeth is the name of the node-side end of the pod's veth, in the node's
// namespace.
func (p *Pod) HostVeth() string { return p.hostVeth }

// IPv4 is the pod's IPv4 address, invalid when the cluster has no IPv4.
func (p *Pod) IPv4() netip.Addr { return p.ip4 }

// IPv6 is the pod's IPv6 address, invalid when the cluster has no IPv6.
func (p *Pod) IPv6() netip.Addr { return p.ip6 }

// IPs are the pod's valid addresses, IPv4 first (as in status.podIPs).
func (p *Pod) IPs() []netip.Addr {
	var ips []netip.Addr
	for _, a := range []netip.Addr{p.ip4, p.ip6} {
		if a.IsValid() {
			ips = append(ips, a)
		}
	}
	return ips
}

// Addr returns the pod's address of family (IPv4 or IPv6); it panics on any
// other family.
func (p *Pod) Addr(family string) netip.Addr {
	switch family {
	case IPv4:
		return p.ip4
	case IPv6:
		return p.ip6
	}
	panic(fmt.Sprintf("netns: unknown family %q (want %q or %q)", family, IPv4, IPv6))
}

// Exec runs a command in the pod's network namespace, like Node.Exec.
func (p *Pod) Exec(args ...string) ([]byte, error) { return execIn(p.netns, nil, args...) }

// ExecInput is Exec with data on standard input.
func (p *Pod) ExecInput(stdin []byte, args ...string) ([]byte, error) {
	return execIn(p.netns, stdin, args...)
}

func netnsPath(name string) string { return "/run/netns/" + name }

func execIn(ns string, stdin []byte, args ...string) ([]byte, error) {
	if len(args) == 0 {
		return nil, errors.New("netns: exec: no command")
	}
	return run(stdin, "ip", append([]string{"netns", "exec", ns}, args...)...)
}

func sysctl(ns string, kv ...string) error {
	_, err := execIn(ns, nil, append([]string{"sysctl", "-q", "-w"}, kv...)...)
	return err
}

// ipBatch runs ip commands in namespace ns with one process.
func ipBatch(ns string, cmds ...string) error {
	if len(cmds) == 0 {
		return nil
	}
	_, err := run([]byte(strings.Join(cmds, "\n")+"\n"), "ip", "-n", ns, "-batch", "-")
	if err != nil {
		return fmt.Errorf("%w\nbatch:\n\t%s", err, strings.Join(cmds, "\n\t"))
	}
	return nil
}

// run runs a command with the setup timeout and returns its standard output.
func run(stdin []byte, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	return runCtx(ctx, stdin, name, args...)
}
