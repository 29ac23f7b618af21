package k8s

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"unicode/utf8"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	policyv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
)

// The ClusterNetworkPolicy group and the versions the sources read. Both
// versions are served by the v0.3.0 CRD with one schema; v1beta1 is stored.
const (
	ClusterPolicyGroup    = "policy.networking.k8s.io"
	clusterPolicyResource = "clusternetworkpolicies"
)

// clusterPolicyAPIVersions are the apiVersions of a ClusterNetworkPolicy
// the manifests source reads, decoded alike into v1beta1.
var clusterPolicyAPIVersions = []string{ClusterPolicyGroup + "/v1beta1", ClusterPolicyGroup + "/v1alpha2"}

// Limits of the v0.3.0 CRD's schema.
const (
	cnpMaxPriority = 1000
	cnpMaxRules    = 25 // ingress, egress
	cnpMaxItems    = 25 // from, to, protocols, networks, domainNames
	cnpMaxRuleName = 100
	cnpMaxCIDR     = 43
)

var (
	cnpTiers   = []policyv1beta1.Tier{policyv1beta1.AdminTier, policyv1beta1.BaselineTier}
	cnpActions = []policyv1beta1.ClusterNetworkPolicyRuleAction{policyv1beta1.ClusterNetworkPolicyRuleActionAccept,
		policyv1beta1.ClusterNetworkPolicyRuleActionDeny, policyv1beta1.ClusterNetworkPolicyRuleActionPass}
	// domainNamePattern is the CRD's pattern of a DomainName.
	domainNamePattern = regexp.MustCompile(`^(\*\.)?([a-zA-Z0-9]([-a-zA-Z0-9_]*[a-zA-Z0-9])?\.)+[a-zA-Z0-9]([-a-zA-Z0-9_]*[a-zA-Z0-9])?\.?$`)
)

// cnpNamedPortMessage is the message of the CRD's CEL rule on an egress
// rule, as the API server gives it.
const cnpNamedPortMessage = "networks/nodes/domainNames peer cannot be set with namedPorts since there are no namedPorts for networks/nodes/domainNames"

// DefaultClusterNetworkPolicy does what the API server does to a
// ClusterNetworkPolicy on create: the CRD has no defaults, and its status
// subresource makes the API server drop any status written with the
// object. metadata.namespace is left as it is: ValidateClusterNetworkPolicy
// rejects one (see there).
func DefaultClusterNetworkPolicy(cnp *policyv1beta1.ClusterNetworkPolicy) {
	cnp.Status = policyv1beta1.ClusterNetworkPolicyStatus{}
}

// ValidateClusterNetworkPolicy checks a ClusterNetworkPolicy against what
// the CRD of network-policy-api v0.3.0 (experimental channel, a superset
// of standard) demands of it, its OpenAPI schema and its CEL rules, with
// the API server's field paths (spec.egress[2].to[0].networks[1]):
//
//   - metadata: name a DNS subdomain, labels and annotations valid;
//   - spec.tier Admin or Baseline; spec.priority 0 to 1000;
//   - spec.subject: exactly one of namespaces and pods;
//   - spec.ingress and spec.egress: at most 25 rules each; a rule's name
//     at most 100 characters, its action Accept, Deny or Pass, its from or
//     to 1 to 25 peers, its protocols (when given) 1 to 25 entries;
//   - a peer: exactly one field (namespaces or pods; for egress also
//     nodes, networks or domainNames); networks 1 to 25 CIDRs, each at
//     most 43 characters, valid (isCIDR: no IPv4-mapped IPv6) and masked
//     (cidr(self) == cidr(self).masked()), no two equal (listType=set);
//     domainNames 1 to 25, each matching the CRD's pattern, no two equal;
//   - a protocol: exactly one of tcp, udp, sctp and destinationNamedPort;
//     tcp, udp and sctp need a destinationPort, which is exactly one of a
//     number (1-65535) and a range (start and end 1-65535, start < end);
//   - an egress rule may not combine a destinationNamedPort with a
//     networks, nodes or domainNames peer (the CRD's CEL rule);
//   - every label selector valid and convertible, as for NetworkPolicy.
//
// Two checks are stricter than the API server: a selector must be valid
// (the CRD takes any strings; the compiler could not use it), and a
// metadata.namespace is an error where the API server silently clears it
// for a cluster-scoped object: a ClusterNetworkPolicy written with a
// namespace was most likely meant to apply to that namespace only, and
// its subject is cluster-wide.
//
// A peer with none of the fields this version knows fails validation here,
// as the schema's MinProperties makes the API server reject it.
func ValidateClusterNetworkPolicy(cnp *policyv1beta1.ClusterNetworkPolicy) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&cnp.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))

	spec := field.NewPath("spec")
	switch t := cnp.Spec.Tier; {
	case t == "":
		errs = append(errs, field.Required(spec.Child("tier"), "must be Admin or Baseline"))
	case !slices.Contains(cnpTiers, t):
		errs = append(errs, field.NotSupported(spec.Child("tier"), t, cnpTiers))
	}
	if p := cnp.Spec.Priority; p < 0 || p > cnpMaxPriority {
		errs = append(errs, field.Invalid(spec.Child("priority"), p, fmt.Sprintf("must be between 0 and %d, inclusive", cnpMaxPriority)))
	}
	errs = append(errs, validateCNPSubject(&cnp.Spec.Subject, spec.Child("subject"))...)

	if n := len(cnp.Spec.Ingress); n > cnpMaxRules {
		errs = append(errs, field.TooMany(spec.Child("ingress"), n, cnpMaxRules))
	}
	for i := range cnp.Spec.Ingress {
		r := &cnp.Spec.Ingress[i]
		path := spec.Child("ingress").Index(i)
		errs = append(errs, validateCNPRuleHead(r.Name, r.Action, path)...)
		errs = append(errs, validateCNPCount(len(r.From), r.From == nil, path.Child("from"))...)
		for j := range r.From {
			p := &r.From[j]
			errs = append(errs, validateCNPPeer(p.Namespaces, p.Pods, nil, nil, nil, false, path.Child("from").Index(j))...)
		}
		errs = append(errs, validateCNPProtocols(r.Protocols, path.Child("protocols"))...)
	}

	if n := len(cnp.Spec.Egress); n > cnpMaxRules {
		errs = append(errs, field.TooMany(spec.Child("egress"), n, cnpMaxRules))
	}
	for i := range cnp.Spec.Egress {
		r := &cnp.Spec.Egress[i]
		path := spec.Child("egress").Index(i)
		errs = append(errs, validateCNPRuleHead(r.Name, r.Action, path)...)
		errs = append(errs, validateCNPCount(len(r.To), r.To == nil, path.Child("to"))...)
		noNamedPorts := false
		for j := range r.To {
			p := &r.To[j]
			errs = append(errs, validateCNPPeer(p.Namespaces, p.Pods, p.Nodes, p.Networks, p.DomainNames, true, path.Child("to").Index(j))...)
			noNamedPorts = noNamedPorts || p.Networks != nil || p.Nodes != nil || p.DomainNames != nil
		}
		errs = append(errs, validateCNPProtocols(r.Protocols, path.Child("protocols"))...)
		if noNamedPorts && slices.ContainsFunc(r.Protocols, func(p policyv1beta1.ClusterNetworkPolicyProtocol) bool { return p.DestinationNamedPort != "" }) {
			errs = append(errs, field.Forbidden(path, cnpNamedPortMessage))
		}
	}
	return sortWithinField(errs)
}

// validateCNPSubject checks spec.subject: exactly one of namespaces and
// pods, each a valid selector.
func validateCNPSubject(s *policyv1beta1.ClusterNetworkPolicySubject, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	n := 0
	if s.Namespaces != nil {
		n++
		errs = append(errs, validateSelector(s.Namespaces, path.Child("namespaces"))...)
	}
	if s.Pods != nil {
		n++
		errs = append(errs, validateNamespacedPod(s.Pods, path.Child("pods"))...)
	}
	errs = append(errs, exactlyOne(n, path, "namespaces or pods")...)
	return errs
}

// exactlyOne reports an object with n of its fields set that must have
// exactly one (the schema's MinProperties=1, MaxProperties=1).
func exactlyOne(n int, path *field.Path, fields string) field.ErrorList {
	switch {
	case n == 0:
		return field.ErrorList{field.Required(path, "must specify exactly one of "+fields)}
	case n > 1:
		return field.ErrorList{field.Forbidden(path, fmt.Sprintf("must specify exactly one of %s, not %d", fields, n))}
	}
	return nil
}

func validateNamespacedPod(p *policyv1beta1.NamespacedPod, path *field.Path) field.ErrorList {
	errs := validateSelector(&p.NamespaceSelector, path.Child("namespaceSelector"))
	return append(errs, validateSelector(&p.PodSelector, path.Child("podSelector"))...)
}

// validateCNPRuleHead checks a rule's name and action.
func validateCNPRuleHead(name string, action policyv1beta1.ClusterNetworkPolicyRuleAction, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if n := utf8.RuneCountInString(name); n > cnpMaxRuleName {
		errs = append(errs, field.Invalid(path.Child("name"), Shorten(name, 120), fmt.Sprintf("must be no more than %d characters, not %d", cnpMaxRuleName, n)))
	}
	switch {
	case action == "":
		errs = append(errs, field.Required(path.Child("action"), "must be Accept, Deny or Pass"))
	case !slices.Contains(cnpActions, action):
		errs = append(errs, field.NotSupported(path.Child("action"), action, cnpActions))
	}
	return errs
}

// validateCNPCount checks a list of 1 to 25 items; absent says whether it
// is absent (nil) rather than empty.
func validateCNPCount(n int, absent bool, path *field.Path) field.ErrorList {
	switch {
	case absent:
		return field.ErrorList{field.Required(path, "")}
	case n == 0:
		return field.ErrorList{field.Required(path, "must have at least 1 item")}
	case n > cnpMaxItems:
		return field.ErrorList{field.TooMany(path, n, cnpMaxItems)}
	}
	return nil
}

// validateCNPPeer checks one peer of a rule: exactly one field set, each
// valid. egress says which fields the peer has (an ingress peer has only
// namespaces and pods).
func validateCNPPeer(namespaces *metav1.LabelSelector, pods *policyv1beta1.NamespacedPod, nodes *metav1.LabelSelector,
	networks []policyv1beta1.CIDR, domainNames []policyv1beta1.DomainName, egress bool, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	n := 0
	if namespaces != nil {
		n++
		errs = append(errs, validateSelector(namespaces, path.Child("namespaces"))...)
	}
	if pods != nil {
		n++
		errs = append(errs, validateNamespacedPod(pods, path.Child("pods"))...)
	}
	if nodes != nil {
		n++
		errs = append(errs, validateSelector(nodes, path.Child("nodes"))...)
	}
	if networks != nil {
		n++
		errs = append(errs, validateCNPNetworks(networks, path.Child("networks"))...)
	}
	if domainNames != nil {
		n++
		errs = append(errs, validateCNPDomainNames(domainNames, path.Child("domainNames"))...)
	}
	fields := "namespaces or pods"
	if egress {
		fields = "namespaces, pods, nodes, networks or domainNames"
	}
	return append(errs, exactlyOne(n, path, fields)...)
}

// validateCNPNetworks checks a networks peer: 1 to 25 CIDRs, each valid as
// the CRD's CEL isCIDR (netip, no IPv4-mapped IPv6), masked, at most 43
// characters, and no two equal.
func validateCNPNetworks(networks []policyv1beta1.CIDR, path *field.Path) field.ErrorList {
	errs := validateCNPCount(len(networks), false, path)
	for i, c := range networks {
		p := path.Index(i)
		s := string(c)
		if len(s) > cnpMaxCIDR {
			errs = append(errs, field.Invalid(p, Shorten(s, 64), fmt.Sprintf("must be no more than %d characters", cnpMaxCIDR)))
			continue
		}
		if slices.Contains(networks[:i], c) {
			errs = append(errs, field.Duplicate(p, s))
			continue
		}
		prefix, perrs := parsePrefix(p, s)
		if len(perrs) != 0 {
			errs = append(errs, perrs...)
			continue
		}
		if m := prefix.Masked(); m != prefix {
			errs = append(errs, field.Invalid(p, s, fmt.Sprintf("must be a masked CIDR (%s): host bits beyond the prefix are not allowed", m)))
		}
	}
	return errs
}

// validateCNPDomainNames checks a domainNames peer: 1 to 25 names, each
// matching the CRD's pattern, no two equal. The compiler does not enforce
// domain names (it warns); they are valid all the same.
func validateCNPDomainNames(names []policyv1beta1.DomainName, path *field.Path) field.ErrorList {
	errs := validateCNPCount(len(names), false, path)
	for i, d := range names {
		p := path.Index(i)
		switch {
		case !domainNamePattern.MatchString(string(d)):
			errs = append(errs, field.Invalid(p, Shorten(string(d), 256), "must be a domain name, optionally starting with *. (pattern "+domainNamePattern.String()+")"))
		case slices.Contains(names[:i], d):
			errs = append(errs, field.Duplicate(p, string(d)))
		}
	}
	return errs
}

// validateCNPProtocols checks a rule's protocols, nil when not given.
func validateCNPProtocols(protocols []policyv1beta1.ClusterNetworkPolicyProtocol, path *field.Path) field.ErrorList {
	if protocols == nil {
		return nil
	}
	errs := validateCNPCount(len(protocols), false, path)
	for i := range protocols {
		pr := &protocols[i]
		p := path.Index(i)
		n := 0
		if pr.TCP != nil {
			n++
			errs = append(errs, validateCNPPort(pr.TCP.DestinationPort, p.Child("tcp", "destinationPort"))...)
		}
		if pr.UDP != nil {
			n++
			errs = append(errs, validateCNPPort(pr.UDP.DestinationPort, p.Child("udp", "destinationPort"))...)
		}
		if pr.SCTP != nil {
			n++
			errs = append(errs, validateCNPPort(pr.SCTP.DestinationPort, p.Child("sctp", "destinationPort"))...)
		}
		if pr.DestinationNamedPort != "" {
			n++
		}
		errs = append(errs, exactlyOne(n, p, "tcp, udp, sctp or destinationNamedPort")...)
	}
	return errs
}

// validateCNPPort checks the destinationPort of tcp, udp or sctp, which
// is required (their MinProperties=1): exactly one of number (1-65535)
// and range (start and end 1-65535, start < end). A number of 0 is
// absent in the Go type; validateCNPShape sees one written in a manifest.
func validateCNPPort(port *policyv1beta1.Port, path *field.Path) field.ErrorList {
	if port == nil {
		return field.ErrorList{field.Required(path, "")}
	}
	var errs field.ErrorList
	n := 0
	if port.Number != 0 {
		n++
		errs = append(errs, validateCNPPortNumber(port.Number, path.Child("number"))...)
	}
	if r := port.Range; r != nil {
		n++
		rp := path.Child("range")
		for _, e := range []struct {
			name string
			v    int32
		}{{"start", r.Start}, {"end", r.End}} {
			if e.v == 0 {
				errs = append(errs, field.Required(rp.Child(e.name), ""))
			} else {
				errs = append(errs, validateCNPPortNumber(e.v, rp.Child(e.name))...)
			}
		}
		if r.Start != 0 && r.End != 0 && r.Start >= r.End {
			errs = append(errs, field.Invalid(rp, fmt.Sprintf("%d-%d", r.Start, r.End), "must have start less than end (Start port must be less than End port)"))
		}
	}
	return append(errs, exactlyOne(n, path, "number or range")...)
}

func validateCNPPortNumber(v int32, path *field.Path) field.ErrorList {
	if v < 1 || v > 65535 {
		return field.ErrorList{field.Invalid(path, v, "must be between 1 and 65535, inclusive")}
	}
	return nil
}

// normalizeClusterNetworkPolicy writes every network in canonical form
// (2001:DB8::/32 becomes 2001:db8::/32), after validation made sure each
// is a masked CIDR.
func normalizeClusterNetworkPolicy(cnp *policyv1beta1.ClusterNetworkPolicy) {
	for _, r := range cnp.Spec.Egress {
		for _, p := range r.To {
			for i, c := range p.Networks {
				p.Networks[i] = policyv1beta1.CIDR(canonicalCIDR(string(c)))
			}
		}
	}
}

// validateCNPShape checks what of a ClusterNetworkPolicy document j the
// Go type cannot tell, as the API server reads the JSON itself: a
// required field that is absent (spec.priority, a podSelector of pods),
// and a field written with its zero value, which the Go type takes for
// absent but the schema counts as a property (number: 0 is below the
// minimum, and with a range makes two; destinationNamedPort: "" makes a
// second protocol, and counts for the egress CEL rule). j decoded
// strictly into the type, so its shape is known to be right; null is
// absent, as the API server prunes it before validation.
//
// Only the manifests source calls it: an object from the API server
// passed these checks there.
func validateCNPShape(j []byte) field.ErrorList {
	type obj = map[string]json.RawMessage
	type rule struct {
		From, To  []obj
		Protocols []obj
	}
	var doc struct {
		Spec struct {
			Priority, Subject json.RawMessage
			Ingress, Egress   []rule
		}
	}
	if json.Unmarshal(j, &doc) != nil {
		return nil
	}
	present := func(v json.RawMessage) bool { return len(v) != 0 && string(v) != "null" }
	has := func(m obj, k string) bool { return present(m[k]) }
	sub := func(raw json.RawMessage) obj {
		var m obj
		_ = json.Unmarshal(raw, &m)
		return m
	}
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if !present(doc.Spec.Priority) {
		errs = append(errs, field.Required(spec.Child("priority"), ""))
	}
	podSelector := func(m obj, path *field.Path) {
		if has(m, "pods") && !has(sub(m["pods"]), "podSelector") {
			errs = append(errs, field.Required(path.Child("pods", "podSelector"), ""))
		}
	}
	podSelector(sub(doc.Spec.Subject), spec.Child("subject"))
	protocols := func(ps []obj, path *field.Path) (namedPort bool) {
		for i, pr := range ps {
			p := path.Index(i)
			n := 0
			for _, k := range []string{"tcp", "udp", "sctp", "destinationNamedPort"} {
				if has(pr, k) {
					n++
				}
				if k == "destinationNamedPort" || !has(pr, k) {
					continue
				}
				port := sub(sub(pr[k])["destinationPort"])
				pp := p.Child(k, "destinationPort")
				if has(port, "number") {
					if v, err := strconv.Atoi(string(port["number"])); err == nil && v == 0 {
						errs = append(errs, field.Invalid(pp.Child("number"), 0, "must be between 1 and 65535, inclusive"))
					}
				}
				if has(port, "number") && has(port, "range") {
					errs = append(errs, exactlyOne(2, pp, "number or range")...)
				}
			}
			errs = append(errs, exactlyOne(n, p, "tcp, udp, sctp or destinationNamedPort")...)
			namedPort = namedPort || has(pr, "destinationNamedPort")
		}
		return namedPort
	}
	for i, r := range doc.Spec.Ingress {
		path := spec.Child("ingress").Index(i)
		for j, peer := range r.From {
			podSelector(peer, path.Child("from").Index(j))
		}
		protocols(r.Protocols, path.Child("protocols"))
	}
	for i, r := range doc.Spec.Egress {
		path := spec.Child("egress").Index(i)
		noNamedPorts := false
		for j, peer := range r.To {
			podSelector(peer, path.Child("to").Index(j))
			noNamedPorts = noNamedPorts || has(peer, "networks") || has(peer, "nodes") || has(peer, "domainNames")
		}
		if protocols(r.Protocols, path.Child("protocols")) && noNamedPorts {
			errs = append(errs, field.Forbidden(path, cnpNamedPortMessage))
		}
	}
	return errs
}

// withShapeErrors adds to errs, the errors of the Go type's validation,
// those of validateCNPShape whose field has none there yet.
func withShapeErrors(errs, shape field.ErrorList) field.ErrorList {
	for _, e := range shape {
		if !slices.ContainsFunc(errs, func(o *field.Error) bool { return o.Field == e.Field }) {
			errs = append(errs, e)
		}
	}
	return errs
}
