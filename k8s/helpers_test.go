package k8s

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// policyShape renders the parts of a policy whose nil-versus-empty
// distinction and defaults matter to the compiler, e.g.
//
//	types=[Ingress Egress] ingress=[] egress=[{to=[] ports=[SCTP/8000-8080]}]
//
// A nil list is "nil", an empty one "[]".
func policyShape(np *networkingv1.NetworkPolicy) string {
	rules := func(dir string, n int, peers func(int) []networkingv1.NetworkPolicyPeer, ports func(int) []networkingv1.NetworkPolicyPort, isNil bool) string {
		if isNil {
			return "nil"
		}
		var out []string
		for i := 0; i < n; i++ {
			out = append(out, fmt.Sprintf("{%s=%s ports=%s}", dir, peerShape(peers(i)), portShape(ports(i))))
		}
		return "[" + strings.Join(out, " ") + "]"
	}
	in, eg := np.Spec.Ingress, np.Spec.Egress
	return fmt.Sprintf("types=%v ingress=%s egress=%s", np.Spec.PolicyTypes,
		rules("from", len(in), func(i int) []networkingv1.NetworkPolicyPeer { return in[i].From },
			func(i int) []networkingv1.NetworkPolicyPort { return in[i].Ports }, in == nil),
		rules("to", len(eg), func(i int) []networkingv1.NetworkPolicyPeer { return eg[i].To },
			func(i int) []networkingv1.NetworkPolicyPort { return eg[i].Ports }, eg == nil))
}

func peerShape(peers []networkingv1.NetworkPolicyPeer) string {
	if peers == nil {
		return "nil"
	}
	var out []string
	for _, p := range peers {
		if p.IPBlock != nil {
			out = append(out, strings.Join(append([]string{p.IPBlock.CIDR}, p.IPBlock.Except...), "-"))
			continue
		}
		out = append(out, "selectors")
	}
	return "[" + strings.Join(out, " ") + "]"
}

func portShape(ports []networkingv1.NetworkPolicyPort) string {
	if ports == nil {
		return "nil"
	}
	var out []string
	for _, p := range ports {
		proto := "nil"
		if p.Protocol != nil {
			proto = string(*p.Protocol)
		}
		port := "*"
		if p.Port != nil {
			port = p.Port.String()
		}
		if p.EndPort != nil {
			port += fmt.Sprintf("-%d", *p.EndPort)
		}
		out = append(out, proto+"/"+port)
	}
	return "[" + strings.Join(out, " ") + "]"
}

func objectMeta(namespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: namespace, Name: name}
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: objectMeta("", name)}
}

func pod(namespace, name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: objectMeta(namespace, name)}
}
