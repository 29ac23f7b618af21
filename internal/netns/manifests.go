package netns

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// servedPorts returns the container ports every pod declares in Manifests, each
// named serve-<port>-<protocol> (serve-80-tcp, serve-81-udp, serve-80-sctp,
// ...), for every TCP and UDP port of Options and, for SCTP, the TCP ports.
// NetworkPolicies refer to them as named ports.
func (c *Cluster) servedPorts() []string {
	var ports []string
	if c.opts.ContainerPorts != nil {
		for _, p := range c.opts.ContainerPorts {
			ports = append(ports, fmt.Sprintf("{name: %q, containerPort: %d, protocol: %s}", p.Name, p.Port, p.Protocol))
		}
		return ports
	}
	add := func(list []int, protos ...string) {
		for _, port := range list {
			for _, proto := range protos {
				ports = append(ports, fmt.Sprintf("{name: serve-%d-%s, containerPort: %d, protocol: %s}",
					port, strings.ToLower(proto), port, proto))
			}
		}
	}
	add(c.opts.TCPPorts, "TCP", "SCTP")
	add(c.opts.UDPPorts, "UDP")
	return ports
}

// SetNamespaceLabels replaces the labels Manifests gives namespace ns
// (default ns=<name>). A nil map restores the default. The namespace need not
// have a pod yet.
func (c *Cluster) SetNamespaceLabels(ns string, labels map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if labels == nil {
		delete(c.nsLabels, ns)
		return
	}
	if c.nsLabels == nil {
		c.nsLabels = map[string]map[string]string{}
	}
	c.nsLabels[ns] = maps.Clone(labels)
}

// SetPodLabels replaces the labels Manifests gives pod key ("namespace/name",
// default pod=<name>). A nil map restores the default.
func (c *Cluster) SetPodLabels(key string, labels map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if labels == nil {
		delete(c.podLabels, key)
		return
	}
	if c.podLabels == nil {
		c.podLabels = map[string]map[string]string{}
	}
	c.podLabels[key] = maps.Clone(labels)
}

// SetNodeLabels sets the labels Manifests gives node name (default none),
// e.g. kubernetes.io/os=linux, which the kubelet sets and node selectors of
// ClusterNetworkPolicy read. A nil map restores the default. ResetLabels
// leaves them alone.
func (c *Cluster) SetNodeLabels(name string, labels map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if labels == nil {
		delete(c.nodeLabels, name)
		return
	}
	if c.nodeLabels == nil {
		c.nodeLabels = map[string]map[string]string{}
	}
	c.nodeLabels[name] = maps.Clone(labels)
}

// ResetLabels restores the default labels of every namespace and pod.
func (c *Cluster) ResetLabels() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nsLabels, c.podLabels = nil, nil
}

// Manifests returns the cluster as the manifests source of nftpolicy reads
// it (one multi-document YAML): a Node per node with its underlay addresses
// (and the labels of SetNodeLabels);
// a Namespace per pod namespace, labelled ns=<name> unless
// SetNamespaceLabels said otherwise; and a running Pod per pod, labelled
// pod=<name> unless SetPodLabels said otherwise, with spec.nodeName,
// status.podIPs (IPv4 first) and one container declaring the ports of
// servedPorts. Every string is quoted, so that namespace "y" stays a string
// and never becomes YAML's boolean.
func (c *Cluster) Manifests() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, n := range c.nodes {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Node\nmetadata:\n  name: %q\n", n.name)
		writeLabels(&b, c.nodeLabels, n.name, nil)
		var addrs []string
		for _, ip := range []string{addrString(n.ip4), addrString(n.ip6)} {
			if ip != "" {
				addrs = append(addrs, fmt.Sprintf("    - {type: InternalIP, address: %q}\n", ip))
			}
		}
		if len(addrs) > 0 {
			b.WriteString("status:\n  addresses:\n" + strings.Join(addrs, ""))
		}
	}
	seen := map[string]bool{}
	for _, p := range c.pods {
		if seen[p.namespace] {
			continue
		}
		seen[p.namespace] = true
		b.WriteString("---\napiVersion: v1\nkind: Namespace\nmetadata:\n")
		fmt.Fprintf(&b, "  name: %q\n", p.namespace)
		writeLabels(&b, c.nsLabels, p.namespace, map[string]string{"ns": p.namespace})
	}
	ports := c.servedPorts()
	for _, p := range c.pods {
		b.WriteString("---\napiVersion: v1\nkind: Pod\nmetadata:\n")
		fmt.Fprintf(&b, "  namespace: %q\n  name: %q\n", p.namespace, p.name)
		writeLabels(&b, c.podLabels, p.Key(), map[string]string{"pod": p.name})
		fmt.Fprintf(&b, "spec:\n  nodeName: %q\n  containers:\n    - name: server\n      ports:\n", p.node.name)
		for _, port := range ports {
			b.WriteString("        - " + port + "\n")
		}
		b.WriteString("status:\n  phase: Running\n  podIPs:\n")
		for _, ip := range p.IPs() {
			fmt.Fprintf(&b, "    - ip: %q\n", ip)
		}
	}
	return b.String()
}

func writeLabels(b *strings.Builder, overrides map[string]map[string]string, key string, def map[string]string) {
	labels, ok := overrides[key]
	if !ok {
		labels = def
	}
	if len(labels) == 0 {
		return
	}
	b.WriteString("  labels:\n")
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		fmt.Fprintf(b, "    %q: %q\n", k, labels[k])
	}
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}
