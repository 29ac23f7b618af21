// Package k8s turns cluster state into Snapshots for the enforcer.
//
// A Snapshot holds every Namespace, Pod, Node, NetworkPolicy and
// ClusterNetworkPolicy a source knows, defaulted and validated as the API
// server would have done, each slice sorted by namespace and name. Sources never edit a Snapshot they
// have handed out.
//
// Pods are records (Pod), not corev1.Pods: every node holds every pod of
// the cluster, so a pod is the unit of the daemon's memory. A record keeps
// what the compiler reads (identity, labels, node, hostNetwork, phase,
// addresses, the ports of containers and sidecars) with the field paths of
// corev1.Pod, and shares what repeats between pods (strings, label maps,
// port lists) through interning tables that forget what no pod asked for
// over a generation. A Pod is validated as the corev1.Pod it came from,
// then recorded (NewPod); Core goes back.
//
// # Manifests source
//
// LoadDir (and LoadFS, its io/fs form) reads a directory of ordinary
// Kubernetes manifests, for bare-metal nodes, demos and tests:
//
//   - every *.yaml, *.yml and *.json file directly in the directory, in name
//     order; names starting with a dot are skipped, and symlinks are
//     followed, so a mounted ConfigMap (its ..data link and timestamped
//     directories are dot names) works. An entry with such a name that is
//     not a regular file or a link to one (a directory, a FIFO, a dangling
//     link) cannot be read, never skipped: skipping would drop its
//     objects without a word;
//   - YAML files may hold several documents separated by "---"; a JSON file
//     may hold a stream of values; empty documents are skipped and not
//     counted;
//   - a document may be a "kind: List" (v1) or a typed list (PodList, ...)
//     whose items are read one by one;
//   - the kinds read are Namespace, Pod and Node (v1), NetworkPolicy
//     (networking.k8s.io/v1) and ClusterNetworkPolicy
//     (policy.networking.k8s.io/v1beta1, or v1alpha2, which has the same
//     schema; both become v1beta1 objects). Any other kind is reported
//     with ErrUnsupportedKind, which a caller may treat as a warning,
//     except in those API groups, where it is an error (a typo of a kind
//     read, or AdminNetworkPolicy, which is not read).
//
// Decoding is strict, like `kubectl apply --validate=strict`: YAML is
// converted to JSON (sigs.k8s.io/yaml) and decoded with sigs.k8s.io/json,
// so field names are case sensitive and an unknown or duplicate field is an
// error for that object. An absent or null list stays nil and "[]" stays an
// empty slice: the compiler reads an absent or empty ingress list as "allow
// nothing" but an absent or empty from list as "every peer", so the two must
// never be confused by the decoder.
//
// Each object that cannot be used is reported as an ObjectError naming file,
// document (and List item), kind, namespace/name and the reason, and is
// skipped or replaced by what fails closed (below); all other objects are
// still returned. The namespace and name in the error are as the file
// writes them, even when YAML 1.1 reads them as something else (an
// unquoted namespace y is a boolean). LoadDir fails as a whole only when
// the directory or a manifest file cannot be read.
//
// A rejected object with no last good version to keep (LoadDir, a
// watcher's first load, an object new to it) is what a restart with a
// broken edit on disk looks like, so it fails closed rather than vanish:
//
//   - a NetworkPolicy whose namespace and name are valid becomes a
//     stand-in with no rules, which allows nothing, isolating what its
//     podSelector selects if that reads as a valid selector, else every pod
//     of its namespace, for the policyTypes it states if they are valid (as
//     defaulted when none are stated), else both directions. Left out, it
//     would open the pods it isolated;
//   - a Pod stays, at its addresses and node, with only its labels that
//     are valid strings and no containers (a named port matches nothing on
//     it). Left out, it would be no target at all and its address no pod's,
//     which opens it. When every label it has is kept, policies select it
//     by them as usual. When one is left out (invalid or unreadable), its
//     true labels are not known, and a selector on the absence of a label
//     (NotIn, DoesNotExist) would match the stand-in where the pod's
//     labels would not: it is then quarantined (Snapshot.Quarantined),
//     which the compiler enforces as isolated for ingress and egress with
//     nothing allowed, selected by no policy and named by no pod selector
//     as a peer (ipBlock peers still match its addresses). If its node,
//     hostNetwork, phase or addresses cannot be read or are invalid it is
//     left out, as it is when the compiler would ignore it anyway (no
//     address, hostNetwork, finished): a guess there could make a node's
//     address a pod's;
//   - a Namespace stays with only its labels that are valid strings (and
//     its name label). Left out, it would carry only its name label, and a
//     namespace selector on the absence of a label would name its pods as
//     peers where its true labels would not: with env: prod next to an
//     invalid label, a rule allowing "env NotIn [prod]" let its pods in.
//     When every label it has is kept (it was rejected for an annotation,
//     or its apiVersion), selectors read it as usual. When one is left
//     out, it is quarantined (Snapshot.QuarantinedNamespaces): no
//     namespace selector names its pods as peers, except one that reads
//     nothing but the kubernetes.io/metadata.name label, which is always
//     the namespace's name. That includes the empty selector
//     (namespaceSelector: {}), which names every namespace whatever its
//     labels: not knowing them changes nothing it decides, and refusing it
//     would deny what its author allowed for no safety. A selector on a
//     label the stand-in kept (env In [prod]) does not name it either: the
//     rest of its labels are not known, and failing closed is one rule
//     where two would invite a mistake. Policies of the namespace still
//     select its pods by their own labels, which are known, and a
//     podSelector peer alone still names them within it. It is left out
//     only when its name is invalid;
//   - a Node is left out, which fails closed: its addresses are not
//     allowed;
//   - a ClusterNetworkPolicy is left out with nothing in its place
//     (ObjectError.Lost). No stand-in fails closed for it: left out, an
//     Admin or Baseline policy's Deny rules are gone, and one that denied
//     everything to its subject would cut off pods it never meant to. So
//     it is treated as a document that cannot be read: a restarted daemon
//     holds its table, and /readyz names it. A ClusterNetworkPolicy
//     defined twice, differently, has a stand-in (denyOnly): the Deny
//     rules of every definition that validates, in the Admin tier at the
//     first priority, for the subject they agree on or every pod; nothing
//     is accepted or passed. When no definition validates it is lost as
//     above (or keeps its last good version under WatchDir).
//
// Each is still an error (not a Warning), so what is enforced is not taken
// for what the files say; ObjectError.StandIn says a stand-in is in
// effect, and ObjectError.Lost that the object is left out with nothing in
// its place (a Node, a stand-in that cannot be made, or a document whose
// kind or name cannot be read), which a caller holding an earlier state
// may choose not to program.
//
// When the same kind, namespace and name is defined more than once, in one
// file or across files, and every definition is valid and equal to the
// others after defaulting (a copied file: cp pods.yaml pods-backup.yaml),
// the object is used once and each definition gets a warning wrapping
// ErrIdenticalDuplicate that names the other places (ObjectError.Warning):
// dropping the copies would open every duplicated pod. Otherwise every
// definition is an error wrapping ErrDuplicate that names the other places,
// and none is used: a file that sorts first could shadow a policy
// unnoticed. What is kept fails closed: a duplicated NetworkPolicy becomes
// one with no rules that isolates the pods its definitions select (all pods
// of the namespace when they select differently; a rejected definition
// counts with its stand-in), so its pods stay isolated but nothing it
// allowed is allowed; a duplicated ClusterNetworkPolicy becomes its
// definitions' Deny rules (above); a duplicated Pod, Namespace or Node keeps its last
// good version under WatchDir (below). Without one (LoadDir, or an object
// new to the watcher) a Pod keeps the addresses, node and phase its
// definitions agree on, with the labels they all have alike (the
// containers only if they agree), as above, quarantined when they
// disagree on its labels. A Namespace keeps the labels its definitions
// have alike, quarantined when they disagree on one (as above); a Node is
// left out.
//
// When a Pod's definitions disagree on where it is (its addresses, node,
// phase or hostNetwork) no one place can be trusted, but the pod certainly
// exists, and left out it would be no target and its address no pod's,
// which opens it. So it is unsettled (Snapshot.Unsettled): quarantined at
// every address any definition gives, and on every node one of those
// definitions names. The compiler of each such node isolates it there
// both ways with nothing allowed, whatever the other definitions say of
// the node; no policy selects it and no pod selector names it as a peer.
// Where an address is another known pod's, the compiler's
// one-pod-per-address rules leave it to that pod on the same node (a
// broken duplicate must not take a healthy pod's address, and with it its
// policies, away), while a pod this node runs still wins an address over
// a pod of another node (isolating the address here is what fails
// closed). A hostNetwork definition gives no address (its addresses are
// its node's), nor does a rejected one whose place cannot be read; a
// finished one's addresses count, as the pod may be running there as
// another says. The Pod in the Snapshot is one definition's place, for
// readers that do not know Unsettled. If no definition gives an address
// it is left out, as the compiler would ignore it anyway.
//
// # What fails open at a fresh start
//
// Nothing can stand in for what cannot be read at all: a document whose
// kind or name cannot be read, a kind typo (kind: NetworkPolicyy), a file
// that does not parse (from the error on), a rename to an invalid name,
// a NetworkPolicy or Namespace whose name is invalid, a Pod whose node,
// addresses, phase or hostNetwork cannot be read, and a rejected Node.
// Under WatchDir such a document keeps what its file held before (below),
// and a daemon restarted over the table it programmed holds that table
// until the files load (ObjectError.Lost, DirUpdate.Err). But at a fresh
// start with no table to hold (a new node, after cleanup, or a held table
// someone deleted) what they define is simply missing, and that fails
// open: a NetworkPolicy that cannot be read isolates nothing, so the pods
// only it isolated are open; a Pod that cannot be placed is no target and
// its address no pod's; a Namespace that cannot be named carries only its
// name label, so selectors on the absence of a label name its pods. Each
// is an error, never a Warning, and the daemon's /readyz answers 503 and
// names them (the first few), so that such a node is not taken for one
// enforcing what the files say. Validate manifests before they reach the
// directory (kubectl apply --dry-run=server --validate=strict).
//
// # Watching a directory
//
// WatchDir follows a directory with inotify and sends a snapshot when its
// content changes, never with a file caught while it is written: a YAML
// file cut short after "from:" is a valid policy whose null from list
// allows every peer. Writers should replace files atomically: write the new
// content to a temporary name in the same directory that is not read (a
// dot name such as .policies.yaml.tmp, or another extension), then rename
// it over the old file; such a file is read twice alike and loaded at once.
// A mounted ConfigMap is updated this way, by swapping its ..data link. A
// file written in place is loaded once it was closed after its last write
// and left untouched for one poll interval, which is what the two-poll rule
// of the polling days guaranteed. A slow rescan reads every file for what
// inotify does not report (another machine writing a network filesystem, a
// link into another directory, an overflowing event queue); where inotify
// cannot be set up, WatchDir polls as it always did.
//
// State is kept per file: a removed file drops its objects, and a file that
// can no longer be read (a dangling link, a link loop, no permission, a
// directory or FIFO in its place) or parsed keeps the objects of its last
// good version while the other files keep updating. DirUpdate.Err then says which file and why, and the update
// is repeated with backoff while the problem lasts. A directory that cannot
// be listed keeps every object (DirUpdate.Unlisted). An empty directory is
// an empty snapshot: whether to program it is the caller's decision.
//
// State is also kept per object, as the API server keeps it: an object
// whose new definition is rejected (it does not decode or validate, or has
// a wrong apiVersion such as networking.k8s.io/v1beta1) keeps the version
// in effect, and its ObjectError says so (KeptLastGood); dropping it would
// open the pods it isolates, or the pod itself. An invalid object that was
// not in effect gets its stand-in, as on a fresh load (above); a kept
// stand-in stays quarantined if it was. A rejected
// document that cannot be pinned to an object in effect (no readable kind
// or name, a kind typo, a rename to an invalid name) might stand for any
// object its file held, so the file also keeps every object it held that
// no file defines any more; its valid documents still apply. Differing
// duplicates of a Pod, Namespace or Node keep the version in effect too.
//
// # Defaulting
//
// Admit applies, before validation, what the API server applies on create
// (DefaultNamespace, DefaultPod, DefaultNode, DefaultNetworkPolicy):
//
//   - metadata.namespace "default" for pods and policies without one, as
//     kubectl would send them; cleared for namespaces and nodes, which are
//     cluster-scoped;
//   - the namespace label kubernetes.io/metadata.name=<name>, always
//     overwriting any value given;
//   - protocol TCP for NetworkPolicy ports and container ports without one;
//   - policyTypes [Ingress], plus Egress if spec.egress has a rule, when
//     policyTypes is empty;
//   - status.podIPs from status.podIP and back; spec.podCIDRs of a node
//     from spec.podCIDR and back.
//
// After a successful validation Admit also normalizes addresses so the
// compiler sees one spelling of each: pod and node IPs in canonical form,
// ipBlock cidr and except values (and node pod CIDRs) masked to their prefix
// (10.0.0.1/24 becomes 10.0.0.0/24; the API server accepts such values
// with a warning and means the masked network).
//
// # Validation
//
// ValidateNamespace, ValidatePod, ValidateNode and ValidateNetworkPolicy
// follow the API server's validation and return its field paths
// (spec.ingress[0].ports[1].endPort):
//
//   - metadata: name required, a DNS label for namespaces and a DNS
//     subdomain otherwise, namespace a DNS label, labels and annotations
//     valid;
//   - selectors: label keys and values valid, operator In, NotIn, Exists or
//     DoesNotExist, values present for In/NotIn and absent otherwise, and
//     the selector converts with metav1.LabelSelectorAsSelector;
//   - peers: at least one of podSelector, namespaceSelector, ipBlock, and
//     ipBlock alone; cidr and every except parse (IPv4 or IPv6, no leading
//     zeros, no IPv4-mapped IPv6), and every except is of the cidr's family
//     and strictly inside it;
//   - ports: protocol TCP, UDP or SCTP; a numeric port 1-65535; a named
//     port a valid IANA_SVC_NAME; endPort only with a numeric port, 1-65535
//     and not below port;
//   - policyTypes: Ingress and Egress only, each at most once;
//   - pods: container port numbers, names and protocols; status.podIPs
//     parse, at most one per IP family, and status.podIP equals the first
//     (upstream silently prefers podIP; here a disagreement is an error).
//     Any phase is accepted: the compiler decides what a phase means;
//   - nodes: spec.podCIDRs and the InternalIP and ExternalIP addresses
//     parse.
//
// A pod or policy whose namespace has no Namespace object is still
// accepted and nothing is synthesized for it: the compiler treats such a
// namespace as one that carries only its kubernetes.io/metadata.name label.
//
// # ClusterNetworkPolicy
//
// ValidateClusterNetworkPolicy checks what the v0.3.0 CRD's OpenAPI
// schema and CEL rules demand (experimental channel, a superset of
// standard; see its doc for the list): tier, priority 0-1000, exactly one
// field in a subject, peer, protocol and port, list sizes, rule names,
// actions, masked CIDRs without repeats, domain names, port numbers and
// ranges, and no destinationNamedPort next to a networks, nodes or
// domainNames peer; plus valid selectors, and no metadata.namespace
// (the API server would clear it; here it is an error, as the author
// probably meant a namespaced policy). domainNames are valid, though the
// compiler does not enforce them. A peer with no field this version knows
// is an error here, as the schema's MinProperties makes it one for the API
// server (the compiler, which may meet one from a newer CRD, fails closed
// on it). The manifests source also reads the JSON itself for what the Go
// type cannot tell: an absent spec.priority or podSelector, a number: 0,
// a destinationNamedPort: "". Admit normalizes networks to canonical
// form.
//
// # Informer source
//
// NewInformers follows an API server with client-go shared informers on
// pods, namespaces, networkpolicies and nodes. Start returns once the caches
// hold a complete list, so the first sync never programs a partial cluster.
// Objects are trimmed on arrival to the fields the compiler reads and run
// through Admit, the same defaulting and validation as the manifests source.
// Pods and nodes are trimmed before that, as they are decoded, given the
// client NewSlimClient makes (InformerOptions.Slim): it reads from the
// API server's protobuf only the fields the daemon keeps, and skips the
// rest (managed fields, volumes, container statuses, a node's images)
// unparsed; a pod of a watch event that Admit accepts is decoded straight
// to its record (the same one the transform makes), in a scratch pod
// reused from pod to pod, and any other pod whole for the transform to
// judge. A node's status.addresses, which the API server does not
// check, are read as Kubernetes' components read them (readNodeAddresses),
// so that one odd address never drops the whole node;
// objects Admit rejects are logged and left out. Watch sends a snapshot
// built from the caches now and after changes, one whenever the previous
// one was taken (the Syncer coalesces, nothing here waits); updates that
// change nothing the compiler reads,
// such as pod conditions or node heartbeats, send nothing. While the API
// server is away the caches, and so the snapshots, keep the last state;
// client-go relists on reconnect and the caches replace, never duplicate.
// Health says so meanwhile: from the first list or watch request that fails
// it returns an error naming the API server, the resources and the last
// error, until every informer has caught up again (a complete list, or a
// watch resumed without a gap); the failure is logged at once, then with
// backoff, and the recovery once.
//
// ClusterNetworkPolicies (v1beta1) are followed too, given a client of
// their group (InformerOptions.Policy, NewPolicyClient), while the API
// server serves them. Their CRD may be missing: Start asks discovery
// first, and without it logs once that ClusterNetworkPolicy is not served
// and returns as soon as the other caches are synced. Discovery is asked
// again every InformerOptions.ClusterPolicyCheck (30s): once the CRD is
// installed an informer starts and the first Snapshot after its first
// list holds them (none before: a partial list is never handed out); once
// it is removed (the API server deletes every object first) the informer
// stops and its cache is dropped, so its 404s are not an outage in
// Health. A reflector error handler could see the 404s, but not a CRD
// that appears; discovery tells both. Objects are slimmed (no annotations,
// managed fields or status) and run through Admit; one that is rejected
// (an old CRD, or a selector the CRD takes but the compiler cannot use)
// is logged naming it and left out, as for the other kinds.
package k8s
