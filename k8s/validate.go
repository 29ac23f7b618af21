package k8s

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	policyv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
)

// Admit does to obj what the API server does before storing it: default it,
// then validate it. When it is valid, Admit also normalizes its addresses
// (canonical IPs, CIDRs masked to their prefix) and returns nil; otherwise
// obj is only defaulted and the errors say why it must be dropped.
//
// obj is a *corev1.Namespace, *corev1.Pod, *Pod (admitted as the Pod it
// stands for, Core), *corev1.Node, *networkingv1.NetworkPolicy or
// *policyv1beta1.ClusterNetworkPolicy; anything else is an internal error.
func Admit(obj runtime.Object) field.ErrorList {
	var errs field.ErrorList
	switch o := obj.(type) {
	case *corev1.Namespace:
		DefaultNamespace(o)
		errs = ValidateNamespace(o)
	case *corev1.Pod:
		DefaultPod(o)
		if errs = ValidatePod(o); len(errs) == 0 {
			normalizePod(o)
		}
	case *Pod:
		core := o.Core()
		errs = Admit(core)
		*o = *NewPod(core)
	case *corev1.Node:
		DefaultNode(o)
		if errs = ValidateNode(o); len(errs) == 0 {
			normalizeNode(o)
		}
	case *networkingv1.NetworkPolicy:
		DefaultNetworkPolicy(o)
		if errs = ValidateNetworkPolicy(o); len(errs) == 0 {
			normalizeNetworkPolicy(o)
		}
	case *policyv1beta1.ClusterNetworkPolicy:
		DefaultClusterNetworkPolicy(o)
		if errs = ValidateClusterNetworkPolicy(o); len(errs) == 0 {
			normalizeClusterNetworkPolicy(o)
		}
	default:
		errs = field.ErrorList{field.InternalError(nil, fmt.Errorf("k8s.Admit: unsupported type %T", obj))}
	}
	return errs
}

// ValidateNamespace checks a defaulted namespace: metadata as the API server
// checks it, with the name a DNS label.
func ValidateNamespace(ns *corev1.Namespace) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&ns.ObjectMeta, false, apivalidation.NameIsDNSLabel, field.NewPath("metadata"))
	return sortWithinField(errs)
}

// ValidateNode checks a defaulted node: metadata (name a DNS subdomain),
// spec.podCIDRs (each a CIDR, at most one per family, podCIDR equal to the
// first) and the IP-typed status.addresses (InternalIP, ExternalIP), which
// the compiler reads.
func ValidateNode(node *corev1.Node) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&node.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))

	spec := field.NewPath("spec")
	var families familySet
	for i, s := range node.Spec.PodCIDRs {
		path := spec.Child("podCIDRs").Index(i)
		p, perrs := parsePrefix(path, s)
		if len(perrs) != 0 {
			errs = append(errs, perrs...)
			continue
		}
		if !families.add(p.Addr()) {
			errs = append(errs, field.Invalid(path, s, fmt.Sprintf("must not be a second %s CIDR (at most one per IP family)", familyName(p.Addr()))))
		}
	}
	if len(node.Spec.PodCIDRs) != 0 && node.Spec.PodCIDR != node.Spec.PodCIDRs[0] {
		errs = append(errs, field.Invalid(spec.Child("podCIDR"), node.Spec.PodCIDR,
			fmt.Sprintf("must equal spec.podCIDRs[0] %q", node.Spec.PodCIDRs[0])))
	}

	addrs := field.NewPath("status", "addresses")
	for i, a := range node.Status.Addresses {
		if isIPAddressType(a.Type) {
			_, aerrs := parseAddr(addrs.Index(i).Child("address"), a.Address)
			errs = append(errs, aerrs...)
		}
	}
	return sortWithinField(errs)
}

func isIPAddressType(t corev1.NodeAddressType) bool {
	return t == corev1.NodeInternalIP || t == corev1.NodeExternalIP
}

// ValidatePod checks what of a defaulted pod the compiler relies on, with the
// API server's rules: metadata (name a DNS subdomain, namespace a DNS
// label), spec.nodeName, every container's and init container's ports, and
// status.podIPs (each an IP, at most one per family, podIP equal to the
// first). It does not check the rest of the pod spec (images, volumes, ...)
// because nothing here uses it. Any status.phase is accepted.
func ValidatePod(pod *corev1.Pod) field.ErrorList {
	if podSurelyValid(pod) {
		return nil
	}
	return validatePodFully(pod)
}

// validatePodFully is ValidatePod with the API server's own checks, which
// say what is wrong: for the pods podSurelyValid is not sure of.
func validatePodFully(pod *corev1.Pod) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&pod.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))

	spec := field.NewPath("spec")
	if pod.Spec.NodeName != "" {
		for _, msg := range apivalidation.NameIsDNSSubdomain(pod.Spec.NodeName, false) {
			errs = append(errs, field.Invalid(spec.Child("nodeName"), pod.Spec.NodeName, msg))
		}
	}
	for i, c := range pod.Spec.InitContainers {
		errs = append(errs, validateContainerPorts(c.Ports, spec.Child("initContainers").Index(i).Child("ports"))...)
	}
	for i, c := range pod.Spec.Containers {
		errs = append(errs, validateContainerPorts(c.Ports, spec.Child("containers").Index(i).Child("ports"))...)
	}
	errs = append(errs, validatePodIPs(&pod.Status, field.NewPath("status"))...)
	return sortWithinField(errs)
}

var supportedProtocols = []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}

// validateContainerPorts follows upstream validateContainerPorts: a named
// port is a valid IANA_SVC_NAME unique within its container, the port number
// is 1-65535, a hostPort, if any, too.
func validateContainerPorts(ports []corev1.ContainerPort, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := map[string]bool{}
	for i, p := range ports {
		idx := path.Index(i)
		if p.Name != "" {
			msgs := validation.IsValidPortName(p.Name)
			for _, msg := range msgs {
				errs = append(errs, field.Invalid(idx.Child("name"), p.Name, msg))
			}
			if len(msgs) == 0 && names[p.Name] {
				errs = append(errs, field.Duplicate(idx.Child("name"), p.Name))
			}
			names[p.Name] = true
		}
		if p.ContainerPort == 0 {
			errs = append(errs, field.Required(idx.Child("containerPort"), ""))
		} else {
			for _, msg := range validation.IsValidPortNum(int(p.ContainerPort)) {
				errs = append(errs, field.Invalid(idx.Child("containerPort"), p.ContainerPort, msg))
			}
		}
		if p.HostPort != 0 {
			for _, msg := range validation.IsValidPortNum(int(p.HostPort)) {
				errs = append(errs, field.Invalid(idx.Child("hostPort"), p.HostPort, msg))
			}
		}
		if !slices.Contains(supportedProtocols, p.Protocol) {
			errs = append(errs, field.NotSupported(idx.Child("protocol"), p.Protocol, supportedProtocols))
		}
	}
	return errs
}

// validatePodIPs checks status.podIPs after DefaultPod made status.podIP and
// status.podIPs fill each other, so a bad podIP given alone is reported at
// status.podIPs[0].ip, as upstream does (its internal type has only podIPs).
// Upstream's conversion silently lets podIP win when the two disagree; a
// manifest that disagrees with itself is more likely a typo, so here it is
// an error.
func validatePodIPs(st *corev1.PodStatus, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	var families familySet
	for i, ip := range st.PodIPs {
		p := path.Child("podIPs").Index(i).Child("ip")
		a, perrs := parseAddr(p, ip.IP)
		if len(perrs) != 0 {
			errs = append(errs, perrs...)
			continue
		}
		if !families.add(a) {
			errs = append(errs, field.Invalid(p, ip.IP, fmt.Sprintf("must not be a second %s address (at most one pod IP per family)", familyName(a))))
		}
	}
	if len(st.PodIPs) == 0 && st.PodIP != "" {
		// Not defaulted (DefaultPod makes it podIPs[0]), yet NewPod takes
		// it as the pod's address: it is checked as one.
		_, perrs := parseAddr(path.Child("podIP"), st.PodIP)
		errs = append(errs, perrs...)
	}
	if len(st.PodIPs) != 0 && st.PodIP != st.PodIPs[0].IP {
		errs = append(errs, field.Invalid(path.Child("podIP"), st.PodIP, fmt.Sprintf("must equal status.podIPs[0].ip %q", st.PodIPs[0].IP)))
	}
	return errs
}

// ValidateNetworkPolicy checks a defaulted NetworkPolicy the way the API
// server's ValidateNetworkPolicy does (pkg/apis/networking/validation), with
// a few deliberate differences, all stricter:
//
//   - cidr and except are parsed with net/netip: leading zeros ("010.0.0.0/8",
//     ambiguous between decimal and octal) and IPv4-mapped IPv6 addresses are
//     rejected, as upstream does with StrictIPCIDRValidation. Host bits
//     beyond the prefix (10.0.0.1/24) are accepted, as upstream does by
//     default, and masked away by Admit.
//   - an except must be the same IP family as its cidr and strictly inside
//     it; upstream's single "strict subset" message is split in two.
//   - policyTypes may not repeat a value.
//   - every selector must also convert with metav1.LabelSelectorAsSelector,
//     which is what the compiler will call.
func ValidateNetworkPolicy(np *networkingv1.NetworkPolicy) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&np.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))

	spec := field.NewPath("spec")
	errs = append(errs, validateSelector(&np.Spec.PodSelector, spec.Child("podSelector"))...)
	for i, r := range np.Spec.Ingress {
		rule := spec.Child("ingress").Index(i)
		for j := range r.Ports {
			errs = append(errs, validatePolicyPort(&r.Ports[j], rule.Child("ports").Index(j))...)
		}
		for j := range r.From {
			errs = append(errs, validatePeer(&r.From[j], rule.Child("from").Index(j))...)
		}
	}
	for i, r := range np.Spec.Egress {
		rule := spec.Child("egress").Index(i)
		for j := range r.Ports {
			errs = append(errs, validatePolicyPort(&r.Ports[j], rule.Child("ports").Index(j))...)
		}
		for j := range r.To {
			errs = append(errs, validatePeer(&r.To[j], rule.Child("to").Index(j))...)
		}
	}
	errs = append(errs, validatePolicyTypes(np.Spec.PolicyTypes, spec.Child("policyTypes"))...)
	return sortWithinField(errs)
}

// validateSelector runs upstream's selector validation (operators, values
// present for In/NotIn and absent for Exists/DoesNotExist, label keys and
// values) and then converts the selector the way the compiler will, so that
// nothing the compiler trips over gets past here.
func validateSelector(sel *metav1.LabelSelector, path *field.Path) field.ErrorList {
	errs := metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{}, path)
	if len(errs) == 0 {
		if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
			errs = append(errs, field.Invalid(path, metav1.FormatLabelSelector(sel), err.Error()))
		}
	}
	return errs
}

// validatePolicyPort follows upstream ValidateNetworkPolicyPort. Protocol is
// nil only if the policy was not defaulted; nil means TCP.
func validatePolicyPort(port *networkingv1.NetworkPolicyPort, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if port.Protocol != nil && !slices.Contains(supportedProtocols, *port.Protocol) {
		errs = append(errs, field.NotSupported(path.Child("protocol"), *port.Protocol, supportedProtocols))
	}
	switch {
	case port.Port == nil:
		if port.EndPort != nil {
			errs = append(errs, field.Forbidden(path.Child("endPort"), "may not be specified without port"))
		}
	case port.Port.Type == intstr.Int:
		for _, msg := range validation.IsValidPortNum(int(port.Port.IntVal)) {
			errs = append(errs, field.Invalid(path.Child("port"), port.Port.IntVal, msg))
		}
		if port.EndPort != nil {
			for _, msg := range validation.IsValidPortNum(int(*port.EndPort)) {
				errs = append(errs, field.Invalid(path.Child("endPort"), *port.EndPort, msg))
			}
			if *port.EndPort < port.Port.IntVal {
				errs = append(errs, field.Invalid(path.Child("endPort"), *port.EndPort,
					fmt.Sprintf("must be greater than or equal to port %d", port.Port.IntVal)))
			}
		}
	default:
		for _, msg := range validation.IsValidPortName(port.Port.StrVal) {
			errs = append(errs, field.Invalid(path.Child("port"), port.Port.StrVal, msg))
		}
		if port.EndPort != nil {
			errs = append(errs, field.Forbidden(path.Child("endPort"),
				fmt.Sprintf("may not be specified when port is a named port (%q)", port.Port.StrVal)))
		}
	}
	return errs
}

// validatePeer follows upstream ValidateNetworkPolicyPeer: at least one of
// podSelector, namespaceSelector, ipBlock; ipBlock alone.
func validatePeer(peer *networkingv1.NetworkPolicyPeer, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	n := 0
	if peer.PodSelector != nil {
		n++
		errs = append(errs, validateSelector(peer.PodSelector, path.Child("podSelector"))...)
	}
	if peer.NamespaceSelector != nil {
		n++
		errs = append(errs, validateSelector(peer.NamespaceSelector, path.Child("namespaceSelector"))...)
	}
	if peer.IPBlock != nil {
		n++
		errs = append(errs, validateIPBlock(peer.IPBlock, path.Child("ipBlock"))...)
	}
	switch {
	case n == 0:
		errs = append(errs, field.Required(path, "must specify podSelector, namespaceSelector or ipBlock"))
	case n > 1 && peer.IPBlock != nil:
		errs = append(errs, field.Forbidden(path, "may not combine ipBlock with podSelector or namespaceSelector"))
	}
	return errs
}

// validateIPBlock checks that cidr parses and that every except parses, is
// of the same family and lies strictly inside cidr (after masking both).
func validateIPBlock(b *networkingv1.IPBlock, path *field.Path) field.ErrorList {
	if b.CIDR == "" {
		return field.ErrorList{field.Required(path.Child("cidr"), "")}
	}
	cidr, errs := parsePrefix(path.Child("cidr"), b.CIDR)
	if len(errs) != 0 {
		// Without a cidr the excepts cannot be judged; upstream stops here too.
		return errs
	}
	cidr = cidr.Masked()
	for i, s := range b.Except {
		p := path.Child("except").Index(i)
		ex, perrs := parsePrefix(p, s)
		if len(perrs) != 0 {
			errs = append(errs, perrs...)
			continue
		}
		ex = ex.Masked()
		switch {
		case ex.Addr().Is4() != cidr.Addr().Is4():
			errs = append(errs, field.Invalid(p, s, fmt.Sprintf("is not of the same IP family as cidr %q", b.CIDR)))
		case !cidr.Contains(ex.Addr()):
			errs = append(errs, field.Invalid(p, s, fmt.Sprintf("is not inside cidr %q", b.CIDR)))
		case ex.Bits() <= cidr.Bits():
			errs = append(errs, field.Invalid(p, s, fmt.Sprintf("is not strictly inside cidr %q", b.CIDR)))
		}
	}
	return errs
}

var policyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}

// validatePolicyTypes accepts Ingress and Egress, each at most once.
// Upstream only rejects more than two entries, so [Ingress, Ingress] passes
// there; it means the same as [Ingress] but is surely not what was meant.
func validatePolicyTypes(types []networkingv1.PolicyType, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, t := range types {
		switch {
		case !slices.Contains(policyTypes, t):
			errs = append(errs, field.NotSupported(path.Index(i), t, policyTypes))
		case slices.Contains(types[:i], t):
			errs = append(errs, field.Duplicate(path.Index(i), t))
		}
	}
	return errs
}

// parseAddr parses an IP address the way upstream's strict IP validation
// does: no leading zeros, no IPv4-mapped IPv6, and no IPv6 zone.
func parseAddr(path *field.Path, s string) (netip.Addr, field.ErrorList) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return a, field.ErrorList{field.Invalid(path, s, "must be a valid IP address (e.g. 10.9.8.7 or 2001:db8::ffff)")}
	case a.Is4In6():
		return a, field.ErrorList{field.Invalid(path, s, "must not be an IPv4-mapped IPv6 address")}
	case a.Zone() != "":
		return a, field.ErrorList{field.Invalid(path, s, "must not have an IPv6 zone")}
	}
	return a, nil
}

// parsePrefix parses a CIDR like parseAddr parses an address. Host bits
// beyond the prefix length are allowed; callers mask them.
func parsePrefix(path *field.Path, s string) (netip.Prefix, field.ErrorList) {
	p, err := netip.ParsePrefix(s)
	switch {
	case err != nil:
		return p, field.ErrorList{field.Invalid(path, s, "must be a valid CIDR (e.g. 10.9.8.0/24 or 2001:db8::/64)")}
	case p.Addr().Is4In6():
		return p, field.ErrorList{field.Invalid(path, s, "must not be an IPv4-mapped IPv6 address")}
	}
	return p, nil
}

// A familySet records which IP families have been seen.
type familySet struct{ v4, v6 bool }

// add records a's family and reports whether it was new.
func (f *familySet) add(a netip.Addr) bool {
	seen := &f.v6
	if a.Is4() {
		seen = &f.v4
	}
	if *seen {
		return false
	}
	*seen = true
	return true
}

func familyName(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// sortWithinField makes an error list deterministic. Upstream validates
// labels and annotations by ranging over a map, so their errors, which all
// share one field path (metadata.labels), come out in random order. Errors
// keep the order in which their field first appears; errors of one field are
// sorted by their text.
func sortWithinField(errs field.ErrorList) field.ErrorList {
	if len(errs) < 2 {
		return errs
	}
	byField := map[string]field.ErrorList{}
	var order []string
	for _, e := range errs {
		if _, ok := byField[e.Field]; !ok {
			order = append(order, e.Field)
		}
		byField[e.Field] = append(byField[e.Field], e)
	}
	out := make(field.ErrorList, 0, len(errs))
	for _, f := range order {
		group := byField[f]
		slices.SortStableFunc(group, func(a, b *field.Error) int {
			return strings.Compare(renderFieldError(a), renderFieldError(b))
		})
		out = append(out, group...)
	}
	return out
}
