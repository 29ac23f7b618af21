package k8s

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"
)

// decode builds a test object from YAML, so that fixtures read like the
// manifests they stand for.
func decode[T any](t *testing.T, doc string) *T {
	t.Helper()
	obj := new(T)
	if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
		t.Fatalf("decode %T: %v\n%s", obj, err, doc)
	}
	return obj
}

func TestDefaultNetworkPolicy(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{
			name: "namespace, policyTypes",
			in:   "metadata: {name: p}",
			want: "metadata: {name: p, namespace: default}\nspec: {podSelector: {}, policyTypes: [Ingress]}",
		},
		{
			name: "egress rule adds Egress",
			in:   "metadata: {name: p, namespace: x}\nspec: {egress: [{}]}",
			want: "metadata: {name: p, namespace: x}\nspec: {podSelector: {}, egress: [{}], policyTypes: [Ingress, Egress]}",
		},
		{
			name: "empty egress list does not add Egress",
			in:   "metadata: {name: p, namespace: x}\nspec: {egress: []}",
			want: "metadata: {name: p, namespace: x}\nspec: {podSelector: {}, egress: [], policyTypes: [Ingress]}",
		},
		{
			name: "explicit policyTypes are kept",
			in:   "metadata: {name: p, namespace: x}\nspec: {egress: [{}], policyTypes: [Egress]}",
			want: "metadata: {name: p, namespace: x}\nspec: {podSelector: {}, egress: [{}], policyTypes: [Egress]}",
		},
		{
			name: "port protocol defaults to TCP, explicit protocol kept",
			in: "metadata: {name: p, namespace: x}\nspec:\n  ingress: [{ports: [{port: 80}, {port: dns, protocol: UDP}, {}]}]\n" +
				"  egress: [{ports: [{port: 443}]}]",
			want: "metadata: {name: p, namespace: x}\nspec:\n  podSelector: {}\n" +
				"  ingress: [{ports: [{port: 80, protocol: TCP}, {port: dns, protocol: UDP}, {protocol: TCP}]}]\n" +
				"  egress: [{ports: [{port: 443, protocol: TCP}]}]\n  policyTypes: [Ingress, Egress]",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decode[networkingv1.NetworkPolicy](t, tt.in)
			DefaultNetworkPolicy(got)
			want := decode[networkingv1.NetworkPolicy](t, tt.want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("DefaultNetworkPolicy (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDefaultPod(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{
			name: "namespace",
			in:   "metadata: {name: p}",
			want: "metadata: {name: p, namespace: default}",
		},
		{
			name: "podIPs from podIP",
			in:   "metadata: {name: p, namespace: x}\nstatus: {podIP: 10.0.0.1}",
			want: "metadata: {name: p, namespace: x}\nstatus: {podIP: 10.0.0.1, podIPs: [{ip: 10.0.0.1}]}",
		},
		{
			name: "podIP from podIPs",
			in:   "metadata: {name: p, namespace: x}\nstatus: {podIPs: [{ip: 'fd00::1'}, {ip: 10.0.0.1}]}",
			want: "metadata: {name: p, namespace: x}\nstatus: {podIP: 'fd00::1', podIPs: [{ip: 'fd00::1'}, {ip: 10.0.0.1}]}",
		},
		{
			name: "disagreeing podIP and podIPs are left for validation",
			in:   "metadata: {name: p, namespace: x}\nstatus: {podIP: 10.0.0.2, podIPs: [{ip: 10.0.0.1}]}",
			want: "metadata: {name: p, namespace: x}\nstatus: {podIP: 10.0.0.2, podIPs: [{ip: 10.0.0.1}]}",
		},
		{
			name: "container port protocol",
			in: "metadata: {name: p, namespace: x}\nspec:\n  initContainers: [{name: i, ports: [{containerPort: 1}]}]\n" +
				"  containers: [{name: c, ports: [{containerPort: 80}, {containerPort: 53, protocol: UDP}]}]",
			want: "metadata: {name: p, namespace: x}\nspec:\n  initContainers: [{name: i, ports: [{containerPort: 1, protocol: TCP}]}]\n" +
				"  containers: [{name: c, ports: [{containerPort: 80, protocol: TCP}, {containerPort: 53, protocol: UDP}]}]",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decode[corev1.Pod](t, tt.in)
			DefaultPod(got)
			want := decode[corev1.Pod](t, tt.want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("DefaultPod (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDefaultNamespace(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{
			name: "label and phase",
			in:   "metadata: {name: x}",
			want: "metadata: {name: x, labels: {kubernetes.io/metadata.name: x}}\nstatus: {phase: Active}",
		},
		{
			name: "label overwritten, other labels and phase kept, namespace cleared",
			in:   "metadata: {name: x, namespace: other, labels: {kubernetes.io/metadata.name: z, team: a}}\nstatus: {phase: Terminating}",
			want: "metadata: {name: x, labels: {kubernetes.io/metadata.name: x, team: a}}\nstatus: {phase: Terminating}",
		},
		{
			name: "no name, no label",
			in:   "metadata: {}",
			want: "status: {phase: Active}",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decode[corev1.Namespace](t, tt.in)
			DefaultNamespace(got)
			want := decode[corev1.Namespace](t, tt.want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("DefaultNamespace (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDefaultNode(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{
			name: "podCIDRs from podCIDR, namespace cleared",
			in:   "metadata: {name: n, namespace: x}\nspec: {podCIDR: 10.0.1.0/24}",
			want: "metadata: {name: n}\nspec: {podCIDR: 10.0.1.0/24, podCIDRs: [10.0.1.0/24]}",
		},
		{
			name: "podCIDR from podCIDRs",
			in:   "metadata: {name: n}\nspec: {podCIDRs: ['fd00:1::/64', 10.0.1.0/24]}",
			want: "metadata: {name: n}\nspec: {podCIDR: 'fd00:1::/64', podCIDRs: ['fd00:1::/64', 10.0.1.0/24]}",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decode[corev1.Node](t, tt.in)
			DefaultNode(got)
			want := decode[corev1.Node](t, tt.want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("DefaultNode (-want +got):\n%s", diff)
			}
		})
	}
}
