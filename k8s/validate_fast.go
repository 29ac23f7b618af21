package k8s

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podSurelyValid reports, without a regular expression or an error value,
// that validatePodFully would find nothing wrong with pod. It is the common
// case by far: every pod of a 150k-pod cluster passes through ValidatePod
// at start, and the API server's name and label checks (regular
// expressions, and field paths built for every container and address)
// were a tenth of the daemon's CPU before its first sync.
//
// False means only "not sure": validatePodFully then decides, and says
// why. So this may refuse more than the full check, never less; the
// checks below follow the upstream ones they stand for exactly
// (TestFastChecksMatchUpstream), and a pod with anything they do not
// cover (generateName, annotations, owner references, finalizers,
// managed fields) goes to the full check.
func podSurelyValid(pod *corev1.Pod) bool {
	if !metaSurelyValid(&pod.ObjectMeta) {
		return false
	}
	if pod.Spec.NodeName != "" && !isDNS1123Subdomain(pod.Spec.NodeName) {
		return false
	}
	for _, c := range pod.Spec.InitContainers {
		if !portsSurelyValid(c.Ports) {
			return false
		}
	}
	for _, c := range pod.Spec.Containers {
		if !portsSurelyValid(c.Ports) {
			return false
		}
	}
	return podIPsSurelyValid(&pod.Status)
}

// metaSurelyValid: what apivalidation.ValidateObjectMeta checks of a
// namespaced object named as a DNS subdomain.
func metaSurelyValid(m *metav1.ObjectMeta) bool {
	if m.GenerateName != "" || len(m.Annotations) != 0 || len(m.OwnerReferences) != 0 ||
		len(m.Finalizers) != 0 || len(m.ManagedFields) != 0 || m.Generation < 0 {
		return false
	}
	if !isDNS1123Subdomain(m.Name) || !isDNS1123Label(m.Namespace) {
		return false
	}
	for k, v := range m.Labels {
		if !isLabelKey(k) || !isLabelValue(v) {
			return false
		}
	}
	return true
}

// portsSurelyValid: what validateContainerPorts checks.
func portsSurelyValid(ports []corev1.ContainerPort) bool {
	for i, p := range ports {
		if p.Name != "" {
			if !isPortName(p.Name) {
				return false
			}
			for _, q := range ports[:i] {
				if q.Name == p.Name {
					return false
				}
			}
		}
		if p.ContainerPort < 1 || p.ContainerPort > 65535 || p.HostPort < 0 || p.HostPort > 65535 {
			return false
		}
		switch p.Protocol {
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		default:
			return false
		}
	}
	return true
}

// podIPsSurelyValid: what validatePodIPs checks.
func podIPsSurelyValid(st *corev1.PodStatus) bool {
	var families familySet
	for _, ip := range st.PodIPs {
		// parseAddr's rules, and no error built unless one is found.
		a, errs := parseAddr(nil, ip.IP)
		if len(errs) != 0 || !families.add(a) {
			return false
		}
	}
	if len(st.PodIPs) == 0 {
		return st.PodIP == "" // a podIP alone (not defaulted): the full check
	}
	return st.PodIP == st.PodIPs[0].IP
}

// isDNS1123Label is validation.IsDNS1123Label finding nothing: 1 to 63 of
// [a-z0-9-], starting and ending with [a-z0-9].
func isDNS1123Label(s string) bool {
	return len(s) <= 63 && isDNSLabelChars(s)
}

// isDNS1123Subdomain is validation.IsDNS1123Subdomain finding nothing: at
// most 253 bytes of labels joined by dots, each label as in isDNS1123Label
// but for its length, which the subdomain's pattern does not bound.
func isDNS1123Subdomain(s string) bool {
	if len(s) > 253 {
		return false
	}
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			if !isDNSLabelChars(s[start:i]) {
				return false
			}
			start = i + 1
		}
	}
	return true
}

// isDNSLabelChars: [a-z0-9]([-a-z0-9]*[a-z0-9])?, any length.
func isDNSLabelChars(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// isLabelKey is validation.IsQualifiedName finding nothing: a name of 1 to
// 63 bytes as in isLabelName, after an optional DNS subdomain prefix and
// one slash.
func isLabelKey(s string) bool {
	name := s
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			if !isDNS1123Subdomain(s[:i]) {
				return false // an empty prefix included
			}
			name = s[i+1:]
			break
		}
	}
	return name != "" && len(name) <= 63 && isLabelName(name)
}

// isLabelValue is validation.IsValidLabelValue finding nothing: empty, or
// up to 63 bytes as in isLabelName.
func isLabelValue(s string) bool {
	return s == "" || len(s) <= 63 && isLabelName(s)
}

// isLabelName: ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9], any length. A
// second slash fails here, as it does upstream.
func isLabelName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case (c == '-' || c == '_' || c == '.') && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// isPortName is validation.IsValidPortName finding nothing: 1 to 15 of
// [a-z0-9-], at least one letter, no "--", no hyphen first or last.
func isPortName(s string) bool {
	if s == "" || len(s) > 15 {
		return false
	}
	letter := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z':
			letter = true
		case '0' <= c && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1 && s[i-1] != '-':
		default:
			return false
		}
	}
	return letter
}
