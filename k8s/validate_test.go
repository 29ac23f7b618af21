package k8s

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// checkAdmit admits obj and compares the rendered errors with want: "" for
// a valid object, otherwise the exact FieldErrors text.
func checkAdmit(t *testing.T, obj runtime.Object, want string) {
	t.Helper()
	got := ""
	if errs := Admit(obj); len(errs) != 0 {
		got = FieldErrors(errs).Error()
	}
	if got != want {
		t.Errorf("Admit:\ngot  %s\nwant %s", got, want)
	}
}

func TestValidateNetworkPolicy(t *testing.T) {
	tests := []struct {
		name string
		spec string // the spec, indented by two spaces
		want string
	}{
		{"minimal", "  podSelector: {}", ""},
		{"both selectors in one peer", "  ingress: [{from: [{podSelector: {}, namespaceSelector: {matchLabels: {a: b}}}]}]", ""},
		{"ipv6 ipBlock", "  ingress: [{from: [{ipBlock: {cidr: '2001:db8::/32', except: ['2001:db8:1::/48']}}]}]", ""},
		{"host bits set", "  ingress: [{from: [{ipBlock: {cidr: 10.0.0.1/24, except: [10.0.0.129/25]}}]}]", ""},
		{"single-address except", "  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/24, except: [10.0.0.1/32]}}]}]", ""},
		{"endPort equal to port", "  egress: [{ports: [{port: 80, endPort: 80}]}]", ""},
		{"named port", "  ingress: [{ports: [{port: serve-80-udp, protocol: UDP}]}]", ""},
		{"port without number, any protocol", "  ingress: [{ports: [{protocol: SCTP}]}]", ""},
		{
			"except equal to cidr",
			"  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/24, except: [10.0.0.0/24]}}]}]",
			`spec.ingress[0].from[0].ipBlock.except[0]: "10.0.0.0/24" is not strictly inside cidr "10.0.0.0/24"`,
		},
		{
			"except wider than cidr",
			"  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/24, except: [10.0.0.0/8]}}]}]",
			`spec.ingress[0].from[0].ipBlock.except[0]: "10.0.0.0/8" is not strictly inside cidr "10.0.0.0/24"`,
		},
		{
			"except does not parse",
			"  egress: [{to: [{ipBlock: {cidr: 10.0.0.0/8, except: [10.0.0.0]}}]}]",
			`spec.egress[0].to[0].ipBlock.except[0]: "10.0.0.0" must be a valid CIDR (e.g. 10.9.8.0/24 or 2001:db8::/64)`,
		},
		{
			"leading zeros are ambiguous",
			"  ingress: [{from: [{ipBlock: {cidr: 010.0.0.0/8}}]}]",
			`spec.ingress[0].from[0].ipBlock.cidr: "010.0.0.0/8" must be a valid CIDR (e.g. 10.9.8.0/24 or 2001:db8::/64)`,
		},
		{
			"IPv4-mapped IPv6",
			"  ingress: [{from: [{ipBlock: {cidr: '::ffff:10.0.0.0/104'}}]}]",
			`spec.ingress[0].from[0].ipBlock.cidr: "::ffff:10.0.0.0/104" must not be an IPv4-mapped IPv6 address`,
		},
		{
			"empty cidr",
			"  ingress: [{from: [{ipBlock: {cidr: ''}}]}]",
			`spec.ingress[0].from[0].ipBlock.cidr: is required`,
		},
		{
			"empty peer",
			"  ingress: [{from: [{}]}]",
			`spec.ingress[0].from[0]: is required: must specify podSelector, namespaceSelector or ipBlock`,
		},
		{
			"ipBlock with namespaceSelector",
			"  egress: [{to: [{ipBlock: {cidr: 10.0.0.0/8}, namespaceSelector: {}}]}]",
			`spec.egress[0].to[0]: may not combine ipBlock with podSelector or namespaceSelector`,
		},
		{
			"Exists with values",
			"  podSelector: {matchExpressions: [{key: a, operator: Exists, values: [b]}]}",
			"spec.podSelector.matchExpressions[0].values: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
		},
		{
			"NotIn without values",
			"  ingress: [{from: [{podSelector: {matchExpressions: [{key: a, operator: NotIn}]}}]}]",
			"spec.ingress[0].from[0].podSelector.matchExpressions[0].values: is required: must be specified when `operator` is 'In' or 'NotIn'",
		},
		{
			"bad label key",
			"  podSelector: {matchLabels: {'bad key': a}}",
			`spec.podSelector.matchLabels: "bad key" is invalid: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`,
		},
		{
			"several bad label values come out sorted",
			"  podSelector: {matchLabels: {c: 'c!', a: 'a!', b: 'b!'}}",
			`spec.podSelector.matchLabels: "a!" is invalid: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?'); ` +
				`spec.podSelector.matchLabels: "b!" is invalid: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?'); ` +
				`spec.podSelector.matchLabels: "c!" is invalid: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`,
		},
		{
			"endPort without port",
			"  ingress: [{ports: [{endPort: 80}]}]",
			`spec.ingress[0].ports[0].endPort: may not be specified without port`,
		},
		{
			"endPort out of range",
			"  ingress: [{ports: [{port: 80, endPort: 70000}]}]",
			`spec.ingress[0].ports[0].endPort: 70000 must be between 1 and 65535, inclusive`,
		},
		{
			"named port with an underscore",
			"  ingress: [{ports: [{port: http_alt}]}]",
			`spec.ingress[0].ports[0].port: "http_alt" must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)`,
		},
		{
			"quoted number is a (bad) named port",
			"  ingress: [{ports: [{port: '80'}]}]",
			`spec.ingress[0].ports[0].port: "80" must contain at least one letter (a-z)`,
		},
		{
			"protocol is case sensitive",
			"  egress: [{ports: [{protocol: tcp}]}]",
			`spec.egress[0].ports[0].protocol: "tcp" is not supported (supported values: "TCP", "UDP", "SCTP")`,
		},
		{
			"policyTypes repeated",
			"  policyTypes: [Ingress, Egress, Ingress]",
			`spec.policyTypes[2]: "Ingress" is a duplicate`,
		},
		{
			"errors keep field order",
			"  ingress: [{ports: [{port: 0}], from: [{}]}]\n  policyTypes: [ingress]",
			`spec.ingress[0].ports[0].port: 0 must be between 1 and 65535, inclusive; ` +
				`spec.ingress[0].from[0]: is required: must specify podSelector, namespaceSelector or ipBlock; ` +
				`spec.policyTypes[0]: "ingress" is not supported (supported values: "Ingress", "Egress")`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			np := decode[networkingv1.NetworkPolicy](t, "metadata: {name: p, namespace: x}\nspec:\n"+tt.spec)
			checkAdmit(t, np, tt.want)
		})
	}
}

func TestValidateMetadata(t *testing.T) {
	tests := []struct {
		name string
		obj  runtime.Object
		want string
	}{
		{"namespace name is a DNS label", &corev1.Namespace{}, "metadata.name: is required: name or generateName is required"},
		{"namespace name may not have dots", namespace("a.b"), `metadata.name: "a.b" must not contain dots`},
		{"pod name may have dots", pod("x", "a.b"), ""},
		{"pod namespace is a DNS label", pod("X", "a"), `metadata.namespace: "X" is invalid: a lowercase RFC 1123 label must consist of`},
		{"policy namespace is a DNS label", &networkingv1.NetworkPolicy{ObjectMeta: objectMeta("a.b", "p")}, `metadata.namespace: "a.b" must not contain dots`},
		{"node name may have dots", &corev1.Node{ObjectMeta: objectMeta("", "node-1.example")}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if errs := Admit(tt.obj); len(errs) != 0 {
				got = FieldErrors(errs).Error()
			}
			if (tt.want == "") != (got == "") || !strings.HasPrefix(got, tt.want) {
				t.Errorf("Admit:\ngot  %s\nwant %s...", got, tt.want)
			}
		})
	}
}

func TestValidatePod(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want string
	}{
		{"dual-stack", "status: {podIPs: [{ip: 10.0.0.1}, {ip: 'fd00::1'}]}", ""},
		{"any phase", "status: {phase: Unheard-Of, podIP: 10.0.0.1}", ""},
		{"no IP", "status: {phase: Pending}", ""},
		{
			"podIP disagrees with podIPs",
			"status: {podIP: 10.0.0.2, podIPs: [{ip: 10.0.0.1}]}",
			`status.podIP: "10.0.0.2" must equal status.podIPs[0].ip "10.0.0.1"`,
		},
		{
			"bad podIP alone is reported where it was defaulted to",
			"status: {podIP: 10.0.0.256}",
			`status.podIPs[0].ip: "10.0.0.256" must be a valid IP address (e.g. 10.9.8.7 or 2001:db8::ffff)`,
		},
		{
			"two IPv6",
			"status: {podIPs: [{ip: 'fd00::1'}, {ip: 10.0.0.1}, {ip: 'fd00::2'}]}",
			`status.podIPs[2].ip: "fd00::2" must not be a second IPv6 address (at most one pod IP per family)`,
		},
		{
			"zone",
			"status: {podIPs: [{ip: 'fe80::1%eth0'}]}",
			`status.podIPs[0].ip: "fe80::1%eth0" must not have an IPv6 zone`,
		},
		{
			"leading zeros",
			"status: {podIPs: [{ip: 010.0.0.1}]}",
			`status.podIPs[0].ip: "010.0.0.1" must be a valid IP address (e.g. 10.9.8.7 or 2001:db8::ffff)`,
		},
		{
			"IPv4-mapped",
			"status: {podIPs: [{ip: '::ffff:10.0.0.1'}]}",
			`status.podIPs[0].ip: "::ffff:10.0.0.1" must not be an IPv4-mapped IPv6 address`,
		},
		{
			"container ports",
			"spec:\n  nodeName: Node_1\n  initContainers: [{name: i, ports: [{containerPort: 70000}]}]\n" +
				"  containers: [{name: c, ports: [{name: web, containerPort: 80}, {name: web, containerPort: 81, hostPort: 70000, protocol: ICMP}, {name: Web_1}]}]",
			`spec.nodeName: "Node_1" is invalid: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*'); ` +
				`spec.initContainers[0].ports[0].containerPort: 70000 must be between 1 and 65535, inclusive; ` +
				`spec.containers[0].ports[1].name: "web" is a duplicate; ` +
				`spec.containers[0].ports[1].hostPort: 70000 must be between 1 and 65535, inclusive; ` +
				`spec.containers[0].ports[1].protocol: "ICMP" is not supported (supported values: "TCP", "UDP", "SCTP"); ` +
				`spec.containers[0].ports[2].name: "Web_1" must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-); ` +
				`spec.containers[0].ports[2].containerPort: is required`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := decode[corev1.Pod](t, "metadata: {name: p, namespace: x}\n"+tt.doc)
			checkAdmit(t, p, tt.want)
		})
	}
}

func TestValidateNode(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want string
	}{
		{"dual-stack", "spec: {podCIDRs: [10.0.1.0/24, 'fd00:1::/64']}\nstatus: {addresses: [{type: InternalIP, address: 10.1.0.1}, {type: Hostname, address: n}]}", ""},
		{
			"two IPv4 pod CIDRs",
			"spec: {podCIDRs: [10.0.1.0/24, 10.0.2.0/24]}",
			`spec.podCIDRs[1]: "10.0.2.0/24" must not be a second IPv4 CIDR (at most one per IP family)`,
		},
		{
			"podCIDR disagrees",
			"spec: {podCIDR: 10.0.2.0/24, podCIDRs: [10.0.1.0/24]}",
			`spec.podCIDR: "10.0.2.0/24" must equal spec.podCIDRs[0] "10.0.1.0/24"`,
		},
		{
			"address that is not an IP",
			"status: {addresses: [{type: ExternalIP, address: n.example}]}",
			`status.addresses[0].address: "n.example" must be a valid IP address (e.g. 10.9.8.7 or 2001:db8::ffff)`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := decode[corev1.Node](t, "metadata: {name: n}\n"+tt.doc)
			checkAdmit(t, n, tt.want)
		})
	}
}

// TestAdmitNormalizes checks that valid objects come out with one spelling
// per address.
func TestAdmitNormalizes(t *testing.T) {
	np := decode[networkingv1.NetworkPolicy](t, "metadata: {name: p}\nspec:\n"+
		"  ingress: [{from: [{ipBlock: {cidr: 10.0.0.1/24, except: [10.0.0.129/25]}}]}]\n"+
		"  egress: [{to: [{ipBlock: {cidr: '2001:DB8:0:0::1/32', except: ['2001:db8:1::1/48']}}]}]")
	pod := decode[corev1.Pod](t, "metadata: {name: p}\nstatus: {podIPs: [{ip: 'FD00:0::1'}, {ip: 10.0.0.1}]}")
	node := decode[corev1.Node](t, "metadata: {name: n}\nspec: {podCIDR: 10.0.1.1/24}\n"+
		"status: {addresses: [{type: InternalIP, address: '2001:DB8::1'}, {type: Hostname, address: host-n}]}")
	for _, obj := range []runtime.Object{np, pod, node} {
		if errs := Admit(obj); len(errs) != 0 {
			t.Fatalf("Admit(%T): %v", obj, FieldErrors(errs))
		}
	}
	in, eg := np.Spec.Ingress[0].From[0].IPBlock, np.Spec.Egress[0].To[0].IPBlock
	tests := []struct {
		name, got, want string
	}{
		{"cidr masked", in.CIDR, "10.0.0.0/24"},
		{"except masked", in.Except[0], "10.0.0.128/25"},
		{"ipv6 cidr canonical", eg.CIDR, "2001:db8::/32"},
		{"ipv6 except masked", eg.Except[0], "2001:db8:1::/48"},
		{"podIP canonical", pod.Status.PodIP, "fd00::1"},
		{"podIPs canonical", pod.Status.PodIPs[0].IP, "fd00::1"},
		{"node podCIDR masked", node.Spec.PodCIDR, "10.0.1.0/24"},
		{"node podCIDRs masked", node.Spec.PodCIDRs[0], "10.0.1.0/24"},
		{"node IP canonical", node.Status.Addresses[0].Address, "2001:db8::1"},
		{"hostname untouched", node.Status.Addresses[1].Address, "host-n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %q, want %q", tt.got, tt.want)
			}
		})
	}

	// An invalid object is defaulted but not normalized: its error quotes
	// what the manifest says.
	bad := decode[networkingv1.NetworkPolicy](t, "metadata: {name: p}\nspec:\n"+
		"  ingress: [{from: [{ipBlock: {cidr: 10.0.0.1/24, except: [10.0.1.5/24]}}]}]")
	checkAdmit(t, bad, `spec.ingress[0].from[0].ipBlock.except[0]: "10.0.1.5/24" is not inside cidr "10.0.0.1/24"`)
	if got := bad.Spec.Ingress[0].From[0].IPBlock.CIDR; got != "10.0.0.1/24" {
		t.Errorf("invalid policy's cidr rewritten to %q", got)
	}
}

func TestAdmitUnsupportedType(t *testing.T) {
	errs := Admit(&corev1.Service{})
	if len(errs) != 1 || errs[0].Type != field.ErrorTypeInternal {
		t.Errorf("Admit(*Service) = %v, want one internal error", errs)
	}
}
