package k8s

import (
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	netutils "k8s.io/utils/net"
)

// Hostile round 12: ValidatePod (with its hand-written fast path since
// 73daa05) against an oracle written from the upstream rules themselves,
// not from validatePodFully: ValidateObjectMeta with NameIsDNSSubdomain,
// IsDNS1123Subdomain for spec.nodeName, upstream's validateContainerPorts
// (k8s.io/kubernetes pkg/apis/core/validation, v1.37) for containers and
// init containers, and upstream's validatePodIPs with strict IP
// validation (ParseIPSloppy, then no leading zeros and no IPv4-mapped
// IPv6), plus the documented rule that podIP equals podIPs[0].

var r12Protocols = sets.New(corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP)

// r12UpstreamPorts is upstream validateContainerPorts, as in v1.37.
func r12UpstreamPorts(ports []corev1.ContainerPort) bool {
	ok := true
	names := sets.Set[string]{}
	for _, p := range ports {
		if p.Name != "" {
			if len(validation.IsValidPortName(p.Name)) != 0 {
				ok = false
			} else if names.Has(p.Name) {
				ok = false
			} else {
				names.Insert(p.Name)
			}
		}
		if p.ContainerPort == 0 || len(validation.IsValidPortNum(int(p.ContainerPort))) != 0 {
			ok = false
		}
		if p.HostPort != 0 && len(validation.IsValidPortNum(int(p.HostPort))) != 0 {
			ok = false
		}
		if p.Protocol == "" || !r12Protocols.Has(p.Protocol) {
			ok = false
		}
	}
	return ok
}

// r12UpstreamIP is IsValidIPForLegacyField with strict validation.
func r12UpstreamIP(s string) bool {
	if netutils.ParseIPSloppy(s) == nil {
		return false
	}
	a, err := netip.ParseAddr(s)
	return err == nil && !a.Is4In6()
}

// r12UpstreamPodIPs is upstream validatePodIPs of a new pod, with podIP
// and podIPs as the v1 conversion and DefaultPod leave them.
func r12UpstreamPodIPs(st *corev1.PodStatus) bool {
	ok := true
	var ips []string
	for _, ip := range st.PodIPs {
		if !r12UpstreamIP(ip.IP) {
			ok = false
		}
		ips = append(ips, ip.IP)
	}
	if len(ips) > 1 {
		dual, err := netutils.IsDualStackIPStrings(ips)
		if err != nil || !dual || len(ips) > 2 {
			ok = false
		}
	}
	switch hasIP, hasIPs := st.PodIP != "", len(st.PodIPs) > 0; {
	case hasIP != hasIPs:
		ok = false
	case hasIPs && st.PodIP != st.PodIPs[0].IP:
		ok = false
	}
	return ok
}

// r12Upstream: would the upstream rules accept the defaulted pod?
func r12Upstream(p *corev1.Pod) bool {
	ok := len(apivalidation.ValidateObjectMeta(&p.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))) == 0
	if p.Spec.NodeName != "" && len(validation.IsDNS1123Subdomain(p.Spec.NodeName)) != 0 {
		ok = false
	}
	for _, c := range p.Spec.InitContainers {
		ok = r12UpstreamPorts(c.Ports) && ok
	}
	for _, c := range p.Spec.Containers {
		ok = r12UpstreamPorts(c.Ports) && ok
	}
	return r12UpstreamPodIPs(&p.Status) && ok
}

// r12Check runs ValidatePod on a defaulted copy of p and holds it to the
// oracle, to the full check, and to errors that name their field.
func r12Check(t *testing.T, p *corev1.Pod) {
	t.Helper()
	p = p.DeepCopy()
	DefaultPod(p)
	errs := ValidatePod(p.DeepCopy())
	full := validatePodFully(p.DeepCopy())
	want := r12Upstream(p)
	switch {
	case len(errs) == 0 && !want:
		t.Errorf("ValidatePod accepted a pod the upstream rules reject:\n%#v", p)
	case len(errs) != 0 && want:
		t.Errorf("ValidatePod rejected a pod the upstream rules accept (%v):\n%#v", errs, p)
	}
	if (len(errs) == 0) != (len(full) == 0) {
		t.Errorf("ValidatePod %v, full check %v, on\n%#v", errs, full, p)
	}
	for _, e := range errs {
		if !strings.HasPrefix(e.Field, "metadata.") && !strings.HasPrefix(e.Field, "spec.") &&
			!strings.HasPrefix(e.Field, "status.") {
			t.Errorf("error %q names no field of the pod", e.Error())
		}
	}
}

type r12PodInput struct {
	name, namespace, labelKey, labelValue, nodeName string
	portA, portB, proto                             string
	cportA, cportB, hostPort                        int32
	ip1, ip2, podIP                                 string
	mode                                            uint16
}

const (
	r12SameContainer = 1 << iota
	r12InitContainer
	r12ExplicitPodIP
	r12GenerateName
	r12Annotation
	r12Finalizer
	r12NegativeGeneration
	r12SecondIP
	r12OwnerRef
	r12NoIPs
	r12PortBUnnamed
	r12SidecarInit
)

func (in r12PodInput) pod() *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: in.name, Namespace: in.namespace,
		Labels: map[string]string{in.labelKey: in.labelValue, "app": "web"}},
		Spec: corev1.PodSpec{NodeName: in.nodeName}}
	m := in.mode
	if m&r12GenerateName != 0 {
		p.GenerateName = in.name
	}
	if m&r12Annotation != 0 {
		p.Annotations = map[string]string{in.labelKey: in.labelValue}
	}
	if m&r12Finalizer != 0 {
		p.Finalizers = []string{in.labelKey}
	}
	if m&r12NegativeGeneration != 0 {
		p.Generation = -1
	}
	if m&r12OwnerRef != 0 {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: in.labelValue, UID: "u"}}
	}
	a := corev1.ContainerPort{Name: in.portA, ContainerPort: in.cportA, HostPort: in.hostPort, Protocol: corev1.Protocol(in.proto)}
	b := corev1.ContainerPort{Name: in.portB, ContainerPort: in.cportB, Protocol: corev1.ProtocolUDP}
	if m&r12PortBUnnamed != 0 {
		b.Name = ""
	}
	if m&r12SameContainer != 0 {
		p.Spec.Containers = []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{a, b}}}
	} else {
		p.Spec.Containers = []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{a}}}
		other := corev1.Container{Name: "d", Ports: []corev1.ContainerPort{b}}
		if m&r12InitContainer != 0 {
			if m&r12SidecarInit != 0 {
				always := corev1.ContainerRestartPolicyAlways
				other.RestartPolicy = &always
			}
			p.Spec.InitContainers = []corev1.Container{other}
		} else {
			p.Spec.Containers = append(p.Spec.Containers, other)
		}
	}
	if m&r12NoIPs == 0 {
		p.Status.PodIPs = []corev1.PodIP{{IP: in.ip1}}
		if m&r12SecondIP != 0 {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: in.ip2})
		}
	}
	if m&r12ExplicitPodIP != 0 {
		p.Status.PodIP = in.podIP
	}
	return p
}

func r12Valid() r12PodInput {
	return r12PodInput{name: "web-1", namespace: "ns-1", labelKey: "example.com/tier", labelValue: "front",
		nodeName: "node-1", portA: "http", portB: "dns", proto: "TCP", cportA: 80, cportB: 53,
		ip1: "10.0.0.1", ip2: "fd00::1", podIP: "10.0.0.1", mode: r12SecondIP}
}

// r12Edges are the single changes to a valid pod most likely to part a
// hand-written check from upstream.
func r12Edges() []r12PodInput {
	var out []r12PodInput
	add := func(f func(*r12PodInput)) {
		in := r12Valid()
		f(&in)
		out = append(out, in)
	}
	strs := []string{"", "a", "A", "-", "a-", "-a", "a.b", "a..b", ".a", "a.", "a_b", "a/b", "/a", "a/", "a//b", "a/b/c",
		"Example.com/x", "x.com/-y", "a\n", "a\x00", "a b", "é", "a\u00e9", "\xff", "abc\u200b",
		strings.Repeat("a", 15), strings.Repeat("a", 16), strings.Repeat("a", 63), strings.Repeat("a", 64),
		strings.Repeat("a", 253), strings.Repeat("a", 254), strings.Repeat("a.", 126) + "a", strings.Repeat("a.", 126) + "ab",
		strings.Repeat("a", 253) + "/x", strings.Repeat("a", 254) + "/x", "x/" + strings.Repeat("a", 63), "x/" + strings.Repeat("a", 64),
		"1", "12", "a--b", "a-1", "1-a", "Http", "http-", "-http", "h1", "kubernetes.io/x", "x.kubernetes.io/y", "k8s.io/y"}
	for _, s := range strs {
		add(func(in *r12PodInput) { in.name = s })
		add(func(in *r12PodInput) { in.namespace = s })
		add(func(in *r12PodInput) { in.labelKey = s })
		add(func(in *r12PodInput) { in.labelValue = s })
		add(func(in *r12PodInput) { in.nodeName = s })
		add(func(in *r12PodInput) { in.portA = s })
		add(func(in *r12PodInput) { in.portB = s; in.mode |= r12SameContainer })
		add(func(in *r12PodInput) { in.name = s; in.mode |= r12GenerateName })
		add(func(in *r12PodInput) { in.labelKey = s; in.mode |= r12Annotation })
		add(func(in *r12PodInput) { in.labelKey = s; in.mode |= r12Finalizer })
		add(func(in *r12PodInput) { in.labelValue = s; in.mode |= r12OwnerRef })
	}
	for _, ip := range []string{"", "10.0.0.01", "010.0.0.1", "1.2.3.4", "::ffff:1.2.3.4", "::1.2.3.4", "fe80::1%eth0", "fe80::1%",
		"FD00::1", "fd00:0:0:0:0:0:0:1", "0.0.0.0", "::", "255.255.255.255", "1.2.3", "1.2.3.4.5", " 1.2.3.4", "1.2.3.4 ",
		"1.2.3.4\n", "::ffff:0:1.2.3.4", "64:ff9b::1.2.3.4", "2001:db8::1/64", "1.2.3.4:80"} {
		add(func(in *r12PodInput) { in.ip1 = ip; in.podIP = ip })
		add(func(in *r12PodInput) { in.ip2 = ip })
		add(func(in *r12PodInput) { in.ip1 = ip; in.mode &^= r12SecondIP })
		add(func(in *r12PodInput) { in.podIP = ip; in.mode |= r12ExplicitPodIP })
	}
	for _, n := range []int32{-1, 0, 1, 65535, 65536, -65536, 1<<31 - 1, -1 << 31} {
		add(func(in *r12PodInput) { in.cportA = n })
		add(func(in *r12PodInput) { in.hostPort = n })
		add(func(in *r12PodInput) { in.cportB = n; in.mode |= r12InitContainer })
	}
	for _, pr := range []string{"", "tcp", "Tcp", "TCP ", "ICMP", "SCTP", "UDP"} {
		add(func(in *r12PodInput) { in.proto = pr })
	}
	// Duplicate port names: within one container, across containers, with
	// an init container, with a sidecar.
	for _, m := range []uint16{r12SameContainer, 0, r12InitContainer, r12InitContainer | r12SidecarInit, r12SameContainer | r12PortBUnnamed} {
		add(func(in *r12PodInput) { in.portB = in.portA; in.mode |= m })
	}
	add(func(in *r12PodInput) { in.ip2 = "10.0.0.2" })
	add(func(in *r12PodInput) { in.ip1, in.ip2 = "fd00::1", "fd00::1" })
	add(func(in *r12PodInput) { in.ip1, in.ip2, in.podIP = "fd00::1", "10.0.0.1", "fd00::1" })
	add(func(in *r12PodInput) { in.mode |= r12NoIPs | r12ExplicitPodIP })
	add(func(in *r12PodInput) { in.mode |= r12NoIPs | r12ExplicitPodIP; in.podIP = "x" })
	add(func(in *r12PodInput) { in.mode |= r12NoIPs })
	add(func(in *r12PodInput) { in.mode |= r12NegativeGeneration })
	return out
}

// TestHostileRound12ValidatePodEdges: each edge case alone, on a valid pod.
func TestHostileRound12ValidatePodEdges(t *testing.T) {
	if errs := ValidatePod(func() *corev1.Pod { p := r12Valid().pod(); DefaultPod(p); return p }()); len(errs) != 0 {
		t.Fatalf("the valid pod: %v", errs)
	}
	accepted, rejected := 0, 0
	for _, in := range r12Edges() {
		p := in.pod()
		r12Check(t, p)
		q := p.DeepCopy()
		DefaultPod(q)
		if len(ValidatePod(q)) == 0 {
			accepted++
		} else {
			rejected++
		}
	}
	t.Logf("%d edge pods accepted, %d rejected", accepted, rejected)
}

// FuzzHostileRound12ValidatePod: go test -fuzz FuzzHostileRound12ValidatePod ./k8s
func FuzzHostileRound12ValidatePod(f *testing.F) {
	for _, in := range r12Edges() {
		f.Add(in.name, in.namespace, in.labelKey, in.labelValue, in.nodeName, in.portA, in.portB, in.proto,
			in.cportA, in.cportB, in.hostPort, in.ip1, in.ip2, in.podIP, in.mode)
	}
	f.Fuzz(func(t *testing.T, name, namespace, labelKey, labelValue, nodeName, portA, portB, proto string,
		cportA, cportB, hostPort int32, ip1, ip2, podIP string, mode uint16) {
		in := r12PodInput{name, namespace, labelKey, labelValue, nodeName, portA, portB, proto,
			cportA, cportB, hostPort, ip1, ip2, podIP, mode}
		r12Check(t, in.pod())
	})
}

// TestHostileRound12ValidatePodChecksPodIPAlone: ValidatePod is exported
// and says it checks status.podIPs "each an IP ... podIP equal to the
// first", but it reads status.podIP only against podIPs[0]: on a pod that
// DefaultPod has not seen, a podIP given alone is not checked at all, and
// NewPod then takes it as the pod's address (podIPs puts podIP first).
// Upstream rejects a podIP without podIPs ("podIP and podIPs must either
// both be set or both be unset"), and an invalid podIP in any case.
func TestHostileRound12ValidatePodChecksPodIPAlone(t *testing.T) {
	for _, ip := range []string{"not-an-ip", "010.0.0.1", "::ffff:10.0.0.1", "fe80::1%eth0"} {
		p := r12Valid().pod()
		p.Status.PodIPs = nil
		p.Status.PodIP = ip
		errs := ValidatePod(p)
		if len(errs) == 0 {
			rec := NewPod(p)
			t.Errorf("ValidatePod accepted status.podIP %q with no status.podIPs (upstream rejects it); the record's addresses: %v",
				ip, rec.Status.PodIPs)
		}
	}
}

// TestHostileRound12ValidatePodCombos: pods that combine the fields of
// several edge cases at random (50k of them), held to the oracle as
// the edge cases are: invalid parts that might hide each other, and
// valid ones that might be refused together.
func TestHostileRound12ValidatePodCombos(t *testing.T) {
	edges := r12Edges()
	r := rand.New(rand.NewPCG(12, 12))
	pick := func() r12PodInput { return edges[r.IntN(len(edges))] }
	valid := 0
	for range 50_000 {
		in := r12Valid()
		for range 1 + r.IntN(3) {
			e := pick()
			switch r.IntN(8) {
			case 0:
				in.name, in.namespace = e.name, e.namespace
			case 1:
				in.labelKey, in.labelValue = e.labelKey, e.labelValue
			case 2:
				in.nodeName = e.nodeName
			case 3:
				in.portA, in.portB, in.proto = e.portA, e.portB, e.proto
			case 4:
				in.cportA, in.cportB, in.hostPort = e.cportA, e.cportB, e.hostPort
			case 5:
				in.ip1, in.ip2, in.podIP = e.ip1, e.ip2, e.podIP
			}
			in.mode ^= e.mode &^ r12Valid().mode
		}
		p := in.pod()
		r12Check(t, p)
		if t.Failed() {
			t.FailNow()
		}
		DefaultPod(p)
		if len(ValidatePod(p)) == 0 {
			valid++
		}
	}
	t.Logf("%d of 50000 combined pods valid", valid)
}
