package k8s

import (
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"testing"
	"testing/fstest"
	"text/template"

	"sigs.k8s.io/network-policy-api/conformance"
)

// cnpDoc returns a ClusterNetworkPolicy document named name of apiVersion
// with spec (its lines indented by two spaces).
func cnpDoc(apiVersion, name, spec string) string {
	return fmt.Sprintf("apiVersion: %s\nkind: ClusterNetworkPolicy\nmetadata:\n  name: %s\nspec:\n%s\n", apiVersion, name, spec)
}

// cnpHead is the start of a valid spec, to which a case adds rules.
const cnpHead = "  tier: Admin\n  priority: 10\n  subject: {namespaces: {}}\n"

// loadCNP loads one file of data and returns the snapshot and errors.
func loadCNP(t *testing.T, data string) (*Snapshot, []*ObjectError) {
	t.Helper()
	snap, objErrs, err := LoadFS(fstest.MapFS{"cnp.yaml": {Data: []byte(data)}})
	if err != nil {
		t.Fatal(err)
	}
	return snap, objErrs
}

func TestValidateClusterNetworkPolicy(t *testing.T) {
	// Every rule of the v0.3.0 CRD (experimental channel), each broken
	// once. spec replaces the whole spec; want is the error after the
	// object's name, "" for a valid policy.
	long := strings.Repeat("x", 101)
	var nets []string
	for i := range 26 {
		nets = append(nets, fmt.Sprintf("10.%d.0.0/16", i))
	}
	nets26 := "[" + strings.Join(nets, ", ") + "]"
	many := func(n int, item string) string {
		return "[" + strings.TrimSuffix(strings.Repeat(item+", ", n), ", ") + "]"
	}
	tests := []struct {
		name string
		spec string
		want string
	}{
		{"minimal", cnpHead, ""},
		{"baseline pods subject", "  tier: Baseline\n  priority: 0\n  subject: {pods: {namespaceSelector: {}, podSelector: {matchLabels: {a: b}}}}", ""},
		{"every peer and protocol", cnpHead + `  ingress:
  - {name: in, action: Accept, from: [{namespaces: {}}, {pods: {namespaceSelector: {}, podSelector: {}}}],
     protocols: [{tcp: {destinationPort: {number: 80}}}, {udp: {destinationPort: {range: {start: 1, end: 65535}}}}, {sctp: {destinationPort: {number: 9}}}, {destinationNamedPort: http}]}
  egress:
  - {action: Deny, to: [{nodes: {}}, {networks: [10.0.0.0/8, "2001:db8::/32"]}]}
  - {action: Pass, to: [{domainNames: [example.com, "*.example.org", "a.b."]}]}
  - {action: Accept, to: [{pods: {namespaceSelector: {}, podSelector: {}}}], protocols: [{destinationNamedPort: dns}]}`, ""},
		{"priority 1000", "  tier: Admin\n  priority: 1000\n  subject: {namespaces: {}}", ""},
		{"25 rules, 25 peers, 25 protocols", cnpHead + "  egress: " + many(25, "{action: Deny, to: "+many(25, "{namespaces: {}}")+", protocols: "+many(25, "{tcp: {destinationPort: {number: 1}}}")+"}"), ""},
		{"100-character rule name", cnpHead + "  ingress: [{name: " + long[1:] + ", action: Deny, from: [{namespaces: {}}]}]", ""},

		{"tier missing", "  priority: 1\n  subject: {namespaces: {}}", "spec.tier: is required: must be Admin or Baseline"},
		{"tier unknown", "  tier: admin\n  priority: 1\n  subject: {namespaces: {}}", `spec.tier: "admin" is not supported (supported values: "Admin", "Baseline")`},
		{"priority missing", "  tier: Admin\n  subject: {namespaces: {}}", "spec.priority: is required"},
		{"priority above 1000", "  tier: Admin\n  priority: 1001\n  subject: {namespaces: {}}", "spec.priority: 1001 must be between 0 and 1000, inclusive"},
		{"priority negative", "  tier: Admin\n  priority: -1\n  subject: {namespaces: {}}", "spec.priority: -1 must be between 0 and 1000, inclusive"},
		{"subject missing", "  tier: Admin\n  priority: 1", "spec.subject: is required: must specify exactly one of namespaces or pods"},
		{"subject empty", "  tier: Admin\n  priority: 1\n  subject: {}", "spec.subject: is required: must specify exactly one of namespaces or pods"},
		{"subject both", "  tier: Admin\n  priority: 1\n  subject: {namespaces: {}, pods: {namespaceSelector: {}, podSelector: {}}}", "spec.subject: must specify exactly one of namespaces or pods, not 2"},
		{"subject pods without podSelector", "  tier: Admin\n  priority: 1\n  subject: {pods: {namespaceSelector: {}}}", "spec.subject.pods.podSelector: is required"},
		{"subject selector invalid", "  tier: Admin\n  priority: 1\n  subject: {namespaces: {matchExpressions: [{key: a, operator: In}]}}", "spec.subject.namespaces.matchExpressions[0].values: is required: must be specified when `operator` is 'In' or 'NotIn'"},
		{"26 ingress rules", cnpHead + "  ingress: " + many(26, "{action: Deny, from: [{namespaces: {}}]}"), "spec.ingress: has 26 items, must have at most 25 items"},
		{"26 egress rules", cnpHead + "  egress: " + many(26, "{action: Deny, to: [{namespaces: {}}]}"), "spec.egress: has 26 items, must have at most 25 items"},
		{"rule name too long", cnpHead + "  ingress: [{name: " + long + ", action: Deny, from: [{namespaces: {}}]}]", `spec.ingress[0].name: "` + long + `" must be no more than 100 characters, not 101`},
		{"action missing", cnpHead + "  ingress: [{from: [{namespaces: {}}]}]", "spec.ingress[0].action: is required: must be Accept, Deny or Pass"},
		{"action unknown", cnpHead + "  egress: [{action: Allow, to: [{namespaces: {}}]}]", `spec.egress[0].action: "Allow" is not supported (supported values: "Accept", "Deny", "Pass")`},
		{"from missing", cnpHead + "  ingress: [{action: Deny}]", "spec.ingress[0].from: is required"},
		{"from empty", cnpHead + "  ingress: [{action: Deny, from: []}]", "spec.ingress[0].from: is required: must have at least 1 item"},
		{"to empty", cnpHead + "  egress: [{action: Deny, to: []}]", "spec.egress[0].to: is required: must have at least 1 item"},
		{"26 peers", cnpHead + "  ingress: [{action: Deny, from: " + many(26, "{namespaces: {}}") + "}]", "spec.ingress[0].from: has 26 items, must have at most 25 items"},
		{"ingress peer empty", cnpHead + "  ingress: [{action: Deny, from: [{}]}]", "spec.ingress[0].from[0]: is required: must specify exactly one of namespaces or pods"},
		{"egress peer empty", cnpHead + "  egress: [{action: Deny, to: [{namespaces: {}}, {}]}]", "spec.egress[0].to[1]: is required: must specify exactly one of namespaces, pods, nodes, networks or domainNames"},
		{"egress peer two fields", cnpHead + "  egress: [{action: Deny, to: [{namespaces: {}, networks: [10.0.0.0/8]}]}]", "spec.egress[0].to[0]: must specify exactly one of namespaces, pods, nodes, networks or domainNames, not 2"},
		{"ingress peer unknown field", cnpHead + "  ingress: [{action: Deny, from: [{networks: [10.0.0.0/8]}]}]", `unknown field "spec.ingress[0].from[0].networks"`},
		{"peer pods without podSelector", cnpHead + "  ingress: [{action: Accept, from: [{pods: {namespaceSelector: {}}}]}]", "spec.ingress[0].from[0].pods.podSelector: is required"},
		{"peer selector invalid", cnpHead + "  egress: [{action: Deny, to: [{nodes: {matchLabels: {'a b': c}}}]}]", `spec.egress[0].to[0].nodes.matchLabels: "a b" is invalid: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`},
		{"networks empty", cnpHead + "  egress: [{action: Deny, to: [{networks: []}]}]", "spec.egress[0].to[0].networks: is required: must have at least 1 item"},
		{"26 networks", cnpHead + "  egress: [{action: Deny, to: [{networks: " + nets26 + "}]}]", "spec.egress[0].to[0].networks: has 26 items, must have at most 25 items"},
		{"network not a CIDR", cnpHead + "  egress: [{action: Deny, to: [{networks: [10.0.0.0/8, 10.1.0.0]}]}]", `spec.egress[0].to[0].networks[1]: "10.1.0.0" must be a valid CIDR (e.g. 10.9.8.0/24 or 2001:db8::/64)`},
		{"network not masked", cnpHead + "  egress: [{action: Deny, to: [{networks: [10.0.0.1/8]}]}]", `spec.egress[0].to[0].networks[0]: "10.0.0.1/8" must be a masked CIDR (10.0.0.0/8): host bits beyond the prefix are not allowed`},
		{"network IPv4-mapped", cnpHead + "  egress: [{action: Deny, to: [{networks: ['::ffff:10.0.0.0/104']}]}]", `spec.egress[0].to[0].networks[0]: "::ffff:10.0.0.0/104" must not be an IPv4-mapped IPv6 address`},
		{"network too long", cnpHead + "  egress: [{action: Deny, to: [{networks: ['2001:0db8:0000:0000:0000:0000:0000:0000/128x']}]}]", `spec.egress[0].to[0].networks[0]: "2001:0db8:0000:0000:0000:0000:0000:0000/128x" must be no more than 43 characters`},
		{"network twice", cnpHead + "  egress: [{action: Deny, to: [{networks: [10.0.0.0/8, 10.0.0.0/8]}]}]", `spec.egress[0].to[0].networks[1]: "10.0.0.0/8" is a duplicate`},
		{"domain name invalid", cnpHead + "  egress: [{action: Accept, to: [{domainNames: [example.com, 'a.*.example.com']}]}]", `spec.egress[0].to[0].domainNames[1]: "a.*.example.com" must be a domain name, optionally starting with *. (pattern ` + domainNamePattern.String() + ")"},
		{"domain name without a dot", cnpHead + "  egress: [{action: Accept, to: [{domainNames: [localhost]}]}]", `spec.egress[0].to[0].domainNames[0]: "localhost" must be a domain name, optionally starting with *. (pattern ` + domainNamePattern.String() + ")"},
		{"domain name twice", cnpHead + "  egress: [{action: Accept, to: [{domainNames: [example.com, example.com]}]}]", `spec.egress[0].to[0].domainNames[1]: "example.com" is a duplicate`},
		{"domain names empty", cnpHead + "  egress: [{action: Accept, to: [{domainNames: []}]}]", "spec.egress[0].to[0].domainNames: is required: must have at least 1 item"},
		{"protocols empty", cnpHead + "  ingress: [{action: Deny, from: [{namespaces: {}}], protocols: []}]", "spec.ingress[0].protocols: is required: must have at least 1 item"},
		{"26 protocols", cnpHead + "  ingress: [{action: Deny, from: [{namespaces: {}}], protocols: " + many(26, "{tcp: {destinationPort: {number: 1}}}") + "}]", "spec.ingress[0].protocols: has 26 items, must have at most 25 items"},
		{"protocol empty", cnpHead + "  ingress: [{action: Deny, from: [{namespaces: {}}], protocols: [{}]}]", "spec.ingress[0].protocols[0]: is required: must specify exactly one of tcp, udp, sctp or destinationNamedPort"},
		{"protocol two fields", cnpHead + "  ingress: [{action: Deny, from: [{namespaces: {}}], protocols: [{tcp: {destinationPort: {number: 1}}, udp: {destinationPort: {number: 1}}}]}]", "spec.ingress[0].protocols[0]: must specify exactly one of tcp, udp, sctp or destinationNamedPort, not 2"},
		{"protocol with an empty named port", cnpHead + "  ingress: [{action: Deny, from: [{namespaces: {}}], protocols: [{tcp: {destinationPort: {number: 1}}, destinationNamedPort: ''}]}]", "spec.ingress[0].protocols[0]: must specify exactly one of tcp, udp, sctp or destinationNamedPort, not 2"},
		{"tcp without destinationPort", cnpHead + "  ingress: [{action: Deny, from: [{namespaces: {}}], protocols: [{tcp: {}}]}]", "spec.ingress[0].protocols[0].tcp.destinationPort: is required"},
		{"udp port empty", cnpHead + "  ingress: [{action: Deny, from: [{namespaces: {}}], protocols: [{udp: {destinationPort: {}}}]}]", "spec.ingress[0].protocols[0].udp.destinationPort: is required: must specify exactly one of number or range"},
		{"sctp port number and range", cnpHead + "  egress: [{action: Deny, to: [{namespaces: {}}], protocols: [{sctp: {destinationPort: {number: 5, range: {start: 1, end: 2}}}}]}]", "spec.egress[0].protocols[0].sctp.destinationPort: must specify exactly one of number or range, not 2"},
		{"port number 0", cnpHead + "  egress: [{action: Deny, to: [{namespaces: {}}], protocols: [{tcp: {destinationPort: {number: 0}}}]}]", "spec.egress[0].protocols[0].tcp.destinationPort: is required: must specify exactly one of number or range; spec.egress[0].protocols[0].tcp.destinationPort.number: 0 must be between 1 and 65535, inclusive"},
		{"port number 0 and a range", cnpHead + "  egress: [{action: Deny, to: [{namespaces: {}}], protocols: [{tcp: {destinationPort: {number: 0, range: {start: 1, end: 2}}}}]}]", "spec.egress[0].protocols[0].tcp.destinationPort.number: 0 must be between 1 and 65535, inclusive; spec.egress[0].protocols[0].tcp.destinationPort: must specify exactly one of number or range, not 2"},
		{"port number above 65535", cnpHead + "  egress: [{action: Deny, to: [{namespaces: {}}], protocols: [{tcp: {destinationPort: {number: 65536}}}]}]", "spec.egress[0].protocols[0].tcp.destinationPort.number: 65536 must be between 1 and 65535, inclusive"},
		{"range start equals end", cnpHead + "  egress: [{action: Deny, to: [{namespaces: {}}], protocols: [{udp: {destinationPort: {range: {start: 80, end: 80}}}}]}]", `spec.egress[0].protocols[0].udp.destinationPort.range: "80-80" must have start less than end (Start port must be less than End port)`},
		{"range start missing", cnpHead + "  egress: [{action: Deny, to: [{namespaces: {}}], protocols: [{udp: {destinationPort: {range: {end: 80}}}}]}]", "spec.egress[0].protocols[0].udp.destinationPort.range.start: is required"},
		{"range end above 65535", cnpHead + "  egress: [{action: Deny, to: [{namespaces: {}}], protocols: [{udp: {destinationPort: {range: {start: 80, end: 70000}}}}]}]", "spec.egress[0].protocols[0].udp.destinationPort.range.end: 70000 must be between 1 and 65535, inclusive"},
		{"named port with networks", cnpHead + "  egress: [{action: Accept, to: [{pods: {namespaceSelector: {}, podSelector: {}}}, {networks: [10.0.0.0/8]}], protocols: [{destinationNamedPort: http}]}]", "spec.egress[0]: " + cnpNamedPortMessage},
		{"named port with nodes", cnpHead + "  egress: [{action: Accept, to: [{nodes: {}}], protocols: [{tcp: {destinationPort: {number: 1}}}, {destinationNamedPort: http}]}]", "spec.egress[0]: " + cnpNamedPortMessage},
		{"named port with domain names", cnpHead + "  egress: [{action: Accept, to: [{domainNames: [example.com]}], protocols: [{destinationNamedPort: http}]}]", "spec.egress[0]: " + cnpNamedPortMessage},
		{"unknown spec field", cnpHead + "  egres: []", `unknown field "spec.egres"`},
	}
	for _, apiVersion := range clusterPolicyAPIVersions {
		for _, tt := range tests {
			t.Run(apiVersion+"/"+tt.name, func(t *testing.T) {
				snap, objErrs := loadCNP(t, cnpDoc(apiVersion, "c", tt.spec))
				if tt.want == "" {
					for _, e := range objErrs {
						t.Errorf("unexpected error: %v", e)
					}
					if len(snap.ClusterPolicies) != 1 {
						t.Fatalf("got %d ClusterNetworkPolicies, want 1", len(snap.ClusterPolicies))
					}
					if gv := snap.ClusterPolicies[0].APIVersion; gv != clusterPolicyAPIVersions[0] {
						t.Errorf("apiVersion %q, want %q", gv, clusterPolicyAPIVersions[0])
					}
					checkAdmitted(t, "snapshot", snap.ClusterPolicies[0])
					return
				}
				if len(objErrs) != 1 {
					t.Fatalf("got %d errors, want 1: %v", len(objErrs), objErrs)
				}
				e := objErrs[0]
				if got, want := e.Error(), "cnp.yaml doc 0: ClusterNetworkPolicy c: "+tt.want; got != want {
					t.Errorf("error:\ngot  %s\nwant %s", got, want)
				}
				// Nothing fails closed in a rejected ClusterNetworkPolicy's
				// place: it is lost, and holds a table at start-up.
				if !e.Lost() || e.StandIn || e.Warning() {
					t.Errorf("Lost=%v StandIn=%v Warning=%v, want lost", e.Lost(), e.StandIn, e.Warning())
				}
				if len(snap.ClusterPolicies) != 0 {
					t.Errorf("a rejected ClusterNetworkPolicy is in the snapshot")
				}
			})
		}
	}
}

func TestClusterNetworkPolicyMetadata(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"namespace given", "apiVersion: policy.networking.k8s.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: c, namespace: team-a}\nspec:\n" + cnpHead,
			"cnp.yaml doc 0: ClusterNetworkPolicy c: metadata.namespace: not allowed on this type"},
		{"name not a DNS subdomain", "apiVersion: policy.networking.k8s.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: Deny_All}\nspec:\n" + cnpHead,
			`cnp.yaml doc 0: ClusterNetworkPolicy Deny_All: metadata.name: "Deny_All" is invalid: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`},
		{"name missing", "apiVersion: policy.networking.k8s.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {}\nspec:\n" + cnpHead,
			"cnp.yaml doc 0: ClusterNetworkPolicy: metadata.name: is required: name or generateName is required"},
		{"v1alpha1", "apiVersion: policy.networking.k8s.io/v1alpha1\nkind: ClusterNetworkPolicy\nmetadata: {name: c}\nspec:\n" + cnpHead,
			`cnp.yaml doc 0: ClusterNetworkPolicy c: apiVersion "policy.networking.k8s.io/v1alpha1" is not supported for ClusterNetworkPolicy, want "policy.networking.k8s.io/v1beta1" or "policy.networking.k8s.io/v1alpha2"`},
		{"AdminNetworkPolicy is no warning", "apiVersion: policy.networking.k8s.io/v1alpha1\nkind: AdminNetworkPolicy\nmetadata: {name: c}\nspec: {}\n",
			"cnp.yaml doc 0: AdminNetworkPolicy c: unknown kind AdminNetworkPolicy of policy.networking.k8s.io/v1alpha1 (a typo? nftpolicy reads " + readKinds + ")"},
		{"status is dropped", "apiVersion: policy.networking.k8s.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: c}\nspec:\n" + cnpHead + "status: {conditions: []}\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap, objErrs := loadCNP(t, tt.doc)
			var got []string
			for _, e := range objErrs {
				got = append(got, e.Error())
				if !e.Lost() {
					t.Errorf("%v: not lost", e)
				}
			}
			if strings.Join(got, "\n") != tt.want {
				t.Errorf("errors:\ngot  %s\nwant %s", strings.Join(got, "\n"), tt.want)
			}
			if tt.want == "" {
				if len(snap.ClusterPolicies) != 1 || snap.ClusterPolicies[0].Status.Conditions != nil {
					t.Errorf("ClusterPolicies %+v, want one without status", snap.ClusterPolicies)
				}
			} else if len(snap.ClusterPolicies) != 0 {
				t.Errorf("ClusterPolicies %v, want none", snap.ClusterPolicies)
			}
		})
	}
}

// TestClusterNetworkPolicyList reads a typed list, a v1 List of both
// versions, and normalizes networks.
func TestClusterNetworkPolicyList(t *testing.T) {
	data := `apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicyList
items:
- metadata: {name: a}
  spec: {tier: Baseline, priority: 3, subject: {namespaces: {}}, egress: [{action: Deny, to: [{networks: ["2001:DB8::/32"]}]}]}
---
apiVersion: v1
kind: List
items:
- apiVersion: policy.networking.k8s.io/v1beta1
  kind: ClusterNetworkPolicy
  metadata: {name: b}
  spec: {tier: Admin, priority: 3, subject: {namespaces: {}}}
`
	snap, objErrs := loadCNP(t, data)
	for _, e := range objErrs {
		t.Errorf("unexpected error: %v", e)
	}
	if len(snap.ClusterPolicies) != 2 || snap.ClusterPolicies[0].Name != "a" || snap.ClusterPolicies[1].Name != "b" {
		t.Fatalf("ClusterPolicies %v, want a and b", snap.ClusterPolicies)
	}
	if got := snap.ClusterPolicies[0].Spec.Egress[0].To[0].Networks[0]; got != "2001:db8::/32" {
		t.Errorf("network %q, want the canonical 2001:db8::/32", got)
	}
}

// TestClusterNetworkPolicyDuplicate: a ClusterNetworkPolicy defined twice,
// differently, is stood in for by the Deny rules of both, in the Admin
// tier at the first priority: dropping it would drop its Denies, and one
// definition's Pass or Accept could open what the other denies. Defined
// twice alike it is used once.
func TestClusterNetworkPolicyDuplicate(t *testing.T) {
	a := cnpDoc(clusterPolicyAPIVersions[0], "c", cnpHead+"  ingress: [{action: Deny, from: [{namespaces: {matchLabels: {team: a}}}]}, {action: Accept, from: [{namespaces: {}}]}]")
	b := cnpDoc(clusterPolicyAPIVersions[1], "c", strings.Replace(cnpHead, "tier: Admin", "tier: Baseline", 1)+"  ingress: [{action: Pass, from: [{namespaces: {}}]}]\n  egress: [{action: Deny, to: [{networks: [10.0.0.0/8]}]}]")

	snap, objErrs := loadCNP(t, a+"---\n"+b)
	if len(snap.ClusterPolicies) != 1 {
		t.Fatalf("ClusterPolicies %v, want the stand-in", snap.ClusterPolicies)
	}
	got := snap.ClusterPolicies[0].Spec
	if got.Tier != "Admin" || len(got.Ingress) != 1 || got.Ingress[0].Action != "Deny" ||
		len(got.Egress) != 1 || got.Egress[0].Action != "Deny" || got.Subject.Namespaces == nil {
		t.Errorf("stand-in spec %+v, want the Deny rules of both, Admin tier", got)
	}
	if len(objErrs) != 2 {
		t.Fatalf("errors %v, want 2", objErrs)
	}
	for _, e := range objErrs {
		if !strings.HasPrefix(e.Error(), fmt.Sprintf("cnp.yaml doc %d: ClusterNetworkPolicy c: duplicate object, also defined at", e.Doc)) || !e.StandIn || e.Lost() {
			t.Errorf("%v (stand-in %v), want a duplicate with a stand-in", e, e.StandIn)
		}
	}

	// A definition that cannot be read adds nothing, and takes nothing
	// away: the valid one's Deny rules stand (a typo in a copy must not
	// drop the guard on a fresh start).
	bad := cnpDoc(clusterPolicyAPIVersions[1], "c", cnpHead+"  ingress: [{action: Deny, from: []}]")
	snap, _ = loadCNP(t, a+"---\n"+bad)
	if len(snap.ClusterPolicies) != 1 || len(snap.ClusterPolicies[0].Spec.Ingress) != 1 || snap.ClusterPolicies[0].Spec.Ingress[0].Action != "Deny" {
		t.Errorf("ClusterPolicies %v, want the valid definition's Deny rule", snap.ClusterPolicies)
	}

	snap, objErrs = loadCNP(t, a+"---\n"+strings.Replace(a, clusterPolicyAPIVersions[0], clusterPolicyAPIVersions[1], 1))
	if len(snap.ClusterPolicies) != 1 {
		t.Errorf("ClusterPolicies %v, want one", snap.ClusterPolicies)
	}
	for _, e := range objErrs {
		if !e.Warning() {
			t.Errorf("%v: want a warning", e)
		}
	}
}

// TestClusterNetworkPolicyKeptLastGood: under WatchDir a rejected edit
// keeps the version in effect.
func TestClusterNetworkPolicyKeptLastGood(t *testing.T) {
	good := cnpDoc(clusterPolicyAPIVersions[0], "c", cnpHead+"  ingress: [{action: Deny, from: [{namespaces: {}}]}]")
	bad := cnpDoc(clusterPolicyAPIVersions[0], "c", cnpHead+"  ingress: [{action: Deny, from: []}]")
	snap, _, held := mergeOver([]*fileLoad{loadFile("cnp.yaml", []byte(good))}, nil)
	prev := previousOf(snap)
	prev.held = held
	snap, objErrs, _ := mergeOver([]*fileLoad{loadFile("cnp.yaml", []byte(bad))}, prev)
	if len(snap.ClusterPolicies) != 1 || snap.ClusterPolicies[0].Spec.Ingress[0].From == nil || len(snap.ClusterPolicies[0].Spec.Ingress[0].From) != 1 {
		t.Errorf("ClusterPolicies %v, want the last good one", snap.ClusterPolicies)
	}
	if len(objErrs) != 1 || !objErrs[0].KeptLastGood || objErrs[0].Lost() {
		t.Errorf("errors %v, want one that keeps the last good version", objErrs)
	}
}

// TestConformanceClusterNetworkPolicies loads every manifest of the
// network-policy-api conformance suite (conformance/base), templates
// filled in as the suite does, and expects every ClusterNetworkPolicy in
// it to be accepted.
func TestConformanceClusterNetworkPolicies(t *testing.T) {
	data := struct{ HostNetworkPorts []int }{HostNetworkPorts: []int{34345, 34346, 34347, 34348, 34349, 34350, 34351, 34352}}
	files := fstest.MapFS{}
	want := 0
	err := fs.WalkDir(conformance.Manifests, "base", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Ext(p) != ".yaml" {
			return err
		}
		raw, err := fs.ReadFile(conformance.Manifests, p)
		if err != nil {
			return err
		}
		tmpl, err := template.New(p).Option("missingkey=error").Parse(string(raw))
		if err != nil {
			return err
		}
		var out bytes.Buffer
		if err := tmpl.Execute(&out, data); err != nil {
			return err
		}
		want += strings.Count(out.String(), "\nkind: ClusterNetworkPolicy\n")
		// One directory per file: the suite applies them one test at a
		// time, and names repeat across tests.
		files[strings.ReplaceAll(p, "/", "_")] = &fstest.MapFile{Data: out.Bytes()}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want < 30 {
		t.Fatalf("found only %d ClusterNetworkPolicies in the conformance manifests", want)
	}
	got := 0
	for name, f := range files {
		snap, objErrs, err := LoadFS(fstest.MapFS{name: f})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range objErrs {
			if !e.Warning() {
				t.Errorf("%v", e)
			}
		}
		got += len(snap.ClusterPolicies)
		for _, cnp := range snap.ClusterPolicies {
			checkAdmitted(t, name, cnp)
		}
	}
	if got != want {
		t.Errorf("accepted %d ClusterNetworkPolicies, want all %d", got, want)
	}
}
