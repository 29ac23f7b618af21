package k8s

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	yamlv3 "go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	sigsjson "sigs.k8s.io/json"
	policyv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
	"sigs.k8s.io/yaml"
)

// LoadDir reads the manifests in dir into a Snapshot. See the package
// documentation for which files and objects it reads and what it defaults
// and validates.
//
// Every object that cannot be used becomes an ObjectError and is left out,
// or replaced by what fails closed (see the package documentation); all
// the others are still returned. The error is non-nil only when the
// directory or one of its manifest files cannot be read (an entry with a
// manifest name that is not a regular file included): the caller then has
// no complete view and should keep what it had.
func LoadDir(dir string) (*Snapshot, []*ObjectError, error) {
	snap, objErrs, err := LoadFS(manifestDir(dir))
	if err != nil {
		return nil, nil, fmt.Errorf("load manifests: %w", inDir(dir, err))
	}
	return snap, objErrs, nil
}

// LoadFS is LoadDir for the root directory of fsys. ObjectError.File is the
// file's name within fsys.
func LoadFS(fsys fs.FS) (*Snapshot, []*ObjectError, error) {
	entries, err := manifestFiles(fsys)
	if err != nil {
		return nil, nil, err
	}
	// One file at a time: only one file's bytes are held at once, and a
	// decoded file is small next to its YAML.
	loads := make([]*fileLoad, 0, len(entries))
	for _, e := range entries {
		if e.err != nil {
			return nil, nil, e.err
		}
		data, err := fs.ReadFile(fsys, e.name)
		if err != nil {
			return nil, nil, err
		}
		loads = append(loads, loadFile(e.name, data))
	}
	snap, objErrs := merge(loads)
	return snap, objErrs, nil
}

// A manifestEntry is a file of the directory that is read, or a name that
// would be read but is not a regular file or cannot be followed to one
// (err: a dangling link, a loop, a directory, a FIFO).
type manifestEntry struct {
	name string
	err  error
}

// errNotRegular is the error of an entry with a manifest name that is not a
// regular file, nor a link to one.
var errNotRegular = errors.New("not a regular file")

// manifestFiles lists the entries of the root of fsys with a manifest name,
// in name order. Only a directory that cannot be listed is an error; an
// entry that is not a regular file, or a symlink to one, carries its own,
// so that a caller may keep the rest. A name that says manifest is one:
// if it is a directory, a FIFO or a device now (a link retargeted, a
// directory made by mistake), skipping it would drop the objects it held
// without a word, which opens their pods.
func manifestFiles(fsys fs.FS) ([]manifestEntry, error) {
	entries, err := fs.ReadDir(fsys, ".") // sorted by name
	if err != nil {
		return nil, err
	}
	var files []manifestEntry
	for _, e := range entries {
		name := e.Name()
		if !isManifestName(name) {
			continue
		}
		mode := e.Type()
		if mode&fs.ModeSymlink != 0 {
			// A ConfigMap volume is a directory of symlinks into ..data;
			// follow them. (..data itself is a dot name, never read.)
			fi, err := fs.Stat(fsys, name)
			if err != nil {
				files = append(files, manifestEntry{name: name, err: err})
				continue
			}
			mode = fi.Mode()
		}
		if !mode.IsRegular() {
			// Never opened: opening a FIFO blocks until a writer comes.
			err := &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w (%s)", errNotRegular, fileType(mode))}
			files = append(files, manifestEntry{name: name, err: err})
			continue
		}
		files = append(files, manifestEntry{name: name})
	}
	return files, nil
}

// fileType names the type of a file that is not a regular one.
func fileType(mode fs.FileMode) string {
	switch {
	case mode.IsDir():
		return "a directory"
	case mode&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case mode&fs.ModeSocket != 0:
		return "a socket"
	case mode&fs.ModeDevice != 0:
		return "a device"
	}
	return "type " + mode.Type().String()
}

// isManifestName reports whether a directory entry is read: a .yaml, .yml or
// .json file whose name does not start with a dot. Dot files are editor swap
// and backup files, and the ..data / ..<timestamp> internals of a mounted
// ConfigMap, whose files are reached through the top-level symlinks.
func isManifestName(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	switch path.Ext(name) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// A kindInfo is what the loader knows about one kind it reads.
type kindInfo struct {
	apiVersion string
	namespaced bool
	list       string // the kind of a typed list of it, e.g. PodList
	new        func() runtime.Object
	// also are further apiVersions read as apiVersion: another served
	// version with the same schema.
	also []string
}

var kinds = map[string]kindInfo{
	"Namespace":     {"v1", false, "NamespaceList", func() runtime.Object { return &corev1.Namespace{} }, nil},
	"Pod":           {"v1", true, "PodList", func() runtime.Object { return &corev1.Pod{} }, nil},
	"Node":          {"v1", false, "NodeList", func() runtime.Object { return &corev1.Node{} }, nil},
	"NetworkPolicy": {"networking.k8s.io/v1", true, "NetworkPolicyList", func() runtime.Object { return &networkingv1.NetworkPolicy{} }, nil},
	// Cluster scoped, and its namespace is not cleared but rejected (see
	// ValidateClusterNetworkPolicy): namespaced is false for the name an
	// error gives it.
	"ClusterNetworkPolicy": {clusterPolicyAPIVersions[0], false, "ClusterNetworkPolicyList",
		func() runtime.Object { return &policyv1beta1.ClusterNetworkPolicy{} }, clusterPolicyAPIVersions[1:]},
}

// reads reports whether the kind is read in apiVersion.
func (info kindInfo) reads(apiVersion string) bool {
	return apiVersion == info.apiVersion || slices.Contains(info.also, apiVersion)
}

// wants names the apiVersions the kind is read in, for errors.
func (info kindInfo) wants() string {
	quoted := []string{strconv.Quote(info.apiVersion)}
	for _, v := range info.also {
		quoted = append(quoted, strconv.Quote(v))
	}
	return strings.Join(quoted, " or ")
}

// readKinds names the kinds the manifests source reads, for errors.
const readKinds = "Namespace, Pod and Node of v1, NetworkPolicy of networking.k8s.io/v1 and ClusterNetworkPolicy of policy.networking.k8s.io/v1beta1 or v1alpha2"

// listElem returns the kind of the items of a list kind: "" for the untyped
// v1 List, whose items name their own kind.
func listElem(kind string) (elem string, ok bool) {
	if kind == "List" {
		return "", true
	}
	for k, info := range kinds {
		if info.list == kind {
			return k, true
		}
	}
	return "", false
}

// An objectKey identifies an object for duplicate detection.
type objectKey struct{ kind, namespace, name string }

// A definition is one document (or List item) that names an object. obj is
// the admitted object, or nil when the document was rejected: err is then
// its error, also in the fileLoad's errs, and standin what fails closed in
// its place when no last good version is kept (see standIn), or nil;
// quarantined says that standin is a pod whose true labels are not known.
type definition struct {
	key         objectKey
	loc         docLoc
	obj         runtime.Object
	err         *ObjectError
	standin     runtime.Object
	quarantined bool
}

// A fileLoad is what one manifest file holds, read on its own: duplicates
// across files are resolved later, by merge, so that a watcher can keep one
// file's last good load while the others change.
type fileLoad struct {
	defs []definition
	errs []*ObjectError
	// syntax is the first document that could not be parsed at all
	// (invalid YAML or JSON, or not a mapping), nil when all were. A file
	// caught while it is being written looks like this.
	syntax *ObjectError
}

// A loader reads one file into a fileLoad.
type loader struct {
	fileLoad
}

// A docLoc is where a document or list item is.
type docLoc struct {
	file      string
	doc, item int
}

// A header is what can be read of a document without decoding it into a
// type, leniently, so that even a broken object is named in its error.
type header struct {
	apiVersion, kind, namespace, name string
	nonString                         bool // one of them was not a string in the JSON
}

// named returns h with the namespace the object will have once admitted:
// "default" when a namespaced kind has none, none for a cluster-scoped kind.
func (h header) named() header {
	info, ok := kinds[h.kind]
	switch {
	case !ok:
	case !info.namespaced:
		h.namespace = ""
	case h.namespace == "":
		h.namespace = metav1.NamespaceDefault
	}
	return h
}

func (l *loader) fail(loc docLoc, h header, err error) *ObjectError {
	h = h.named()
	e := &ObjectError{
		File: loc.file, Doc: loc.doc, Item: loc.item,
		Kind: h.kind, Namespace: h.namespace, Name: h.name,
		Err: err,
	}
	l.errs = append(l.errs, e)
	return e
}

// failSyntax is fail for a document that could not be parsed at all.
func (l *loader) failSyntax(loc docLoc, h header, err error) *ObjectError {
	e := l.fail(loc, h, err)
	if l.syntax == nil {
		l.syntax = e
	}
	return e
}

var utf8BOM = []byte("\xef\xbb\xbf")

// loadFile reads one manifest file on its own.
func loadFile(name string, data []byte) *fileLoad {
	l := &loader{}
	data = bytes.TrimPrefix(data, utf8BOM)
	if path.Ext(name) == ".json" {
		l.loadJSONFile(name, data)
	} else {
		l.loadYAMLFile(name, data)
	}
	return &l.fileLoad
}

func (l *loader) loadYAMLFile(name string, data []byte) {
	doc := 0
	docs := splitYAML(data)
	converted := toJSON(docs)
	for i, d := range docs {
		loc := docLoc{file: name, doc: doc, item: -1}
		j, err := converted(i)
		if err != nil {
			// The strict conversion also fails on duplicate keys. If the
			// lenient one works, that was the problem, and the header can
			// still name the object.
			var h header
			lenient, lerr := yaml.YAMLToJSON(d.data)
			if lerr == nil {
				if isNull(lenient) {
					continue
				}
				h, _ = readHeader(lenient)
				h = literalHeader(h, d.data, -1)
			}
			e := l.failSyntax(loc, h, fmt.Errorf("invalid YAML: %w", yamlErrorInFile(d, err)))
			if lerr == nil {
				// A duplicate key: the object is named, and what it
				// leaves out must fail closed like any rejected one.
				l.defineRejected(loc, h, lenient, e)
			}
			doc++
			continue
		}
		if isNull(j) {
			// Only whitespace and comments, or a stray "---".
			continue
		}
		l.loadDocument(loc, j, d.data)
		doc++
	}
}

// toJSON converts YAML documents to JSON on every CPU, a chunk at a time,
// and returns them in order through at(i), to be called with i = 0, 1, …
// Converting is most of the cost of reading manifests (yaml.v2 parses
// each document into a generic tree first), and documents are
// independent; chunks bound the JSON held at once.
func toJSON(docs []yamlDoc) (at func(i int) ([]byte, error)) {
	const chunk = 256
	type result struct {
		json []byte
		err  error
	}
	results := make([]result, min(chunk, len(docs)))
	base := -1
	return func(i int) ([]byte, error) {
		if base < 0 || i >= base+chunk {
			base = i - i%chunk
			n := min(chunk, len(docs)-base)
			var wg sync.WaitGroup
			next := atomic.Int64{}
			for range min(goruntime.GOMAXPROCS(0), n) {
				wg.Go(func() {
					for k := int(next.Add(1)) - 1; k < n; k = int(next.Add(1)) - 1 {
						j, err := yaml.YAMLToJSONStrict(docs[base+k].data)
						results[k] = result{j, err}
					}
				})
			}
			wg.Wait()
		}
		r := results[i-base]
		return r.json, r.err
	}
}

// loadJSONFile reads a stream of JSON values, usually just one. A syntax
// error ends the file: unlike YAML's "---", nothing marks where the next
// value would start.
func (l *loader) loadJSONFile(name string, data []byte) {
	dec := json.NewDecoder(bytes.NewReader(data))
	for doc := 0; ; {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return
		}
		loc := docLoc{file: name, doc: doc, item: -1}
		if err != nil {
			var se *json.SyntaxError
			if errors.As(err, &se) {
				err = fmt.Errorf("at byte %d: %w", se.Offset, err)
			}
			l.failSyntax(loc, header{}, fmt.Errorf("invalid JSON, rest of file skipped: %w", err))
			return
		}
		if isNull(raw) {
			continue
		}
		l.loadDocument(loc, raw, nil)
		doc++
	}
}

// yamlErrorInFile returns the error of converting d again, with d moved down
// to the line it starts on, so that the line numbers in the parser's message
// are lines of the file rather than of the document (only the error path
// pays for the copy), and on one line.
func yamlErrorInFile(d yamlDoc, err error) error {
	shifted := append(bytes.Repeat([]byte("\n"), d.line-1), d.data...)
	if _, serr := yaml.YAMLToJSONStrict(shifted); serr != nil {
		err = serr
	}
	// yaml.v2 lists several problems on indented lines of their own; an
	// ObjectError is one log line.
	if msg := err.Error(); strings.Contains(msg, "\n") {
		return errors.New(strings.Join(strings.Fields(strings.ReplaceAll(msg, "\n", " ")), " "))
	}
	return err
}

func isNull(j []byte) bool {
	return bytes.Equal(bytes.TrimSpace(j), []byte("null"))
}

// loadDocument reads one document, j in JSON; src is its YAML source, nil
// for a JSON file.
func (l *loader) loadDocument(loc docLoc, j, src []byte) {
	h, err := readHeader(j)
	if err != nil {
		// A scalar where a mapping belongs is what a file cut short in its
		// first key looks like ("apiVer").
		l.failSyntax(loc, header{}, err)
		return
	}
	h = literalHeader(h, src, -1)
	if elem, ok := listElem(h.kind); ok {
		l.loadList(loc, j, src, h, elem)
		return
	}
	l.loadObject(loc, j, h)
}

// readHeader reads apiVersion, kind, metadata.namespace and metadata.name
// from a JSON object, ignoring anything that is not a string.
func readHeader(j []byte) (header, error) {
	var m map[string]any
	if err := json.Unmarshal(j, &m); err != nil || m == nil {
		return header{}, errors.New("document is not a Kubernetes object (a YAML or JSON mapping)")
	}
	h := header{}
	str := func(m map[string]any, k string) string {
		switch v := m[k].(type) {
		case string:
			return v
		case bool, float64:
			// What YAML made of an unquoted y or 80: the object is still
			// named by it, not by a default (literalHeader restores the
			// text the file has).
			h.nonString = true
			return fmt.Sprint(v)
		}
		return ""
	}
	h.apiVersion, h.kind = str(m, "apiVersion"), str(m, "kind")
	if md, ok := m["metadata"].(map[string]any); ok {
		h.namespace, h.name = str(md, "namespace"), str(md, "name")
	}
	return h, nil
}

// literalHeader returns h with the namespace and name spelled as in src, the
// YAML source of the document (item: of its List item, or -1), when YAML 1.1
// turned them into something else: "namespace: y" is a boolean to
// sigs.k8s.io/yaml, but the file says y, and an error must name the object
// y/name rather than true/name or default/name. YAML 1.2 (yaml.v3) keeps
// the scalar's text.
func literalHeader(h header, src []byte, item int) header {
	if !h.nonString || src == nil {
		return h
	}
	var doc yamlv3.Node
	if yamlv3.Unmarshal(src, &doc) != nil || len(doc.Content) == 0 {
		return h
	}
	n := doc.Content[0]
	if item >= 0 {
		if n = mappingValue(n, "items"); n == nil || n.Kind != yamlv3.SequenceNode || item >= len(n.Content) {
			return h
		}
		n = n.Content[item]
	}
	md := mappingValue(n, "metadata")
	if v := mappingValue(md, "namespace"); v != nil && v.Kind == yamlv3.ScalarNode {
		h.namespace = v.Value
	}
	if v := mappingValue(md, "name"); v != nil && v.Kind == yamlv3.ScalarNode {
		h.name = v.Value
	}
	return h
}

// mappingValue returns the value of key in a YAML mapping node, or nil.
func mappingValue(n *yamlv3.Node, key string) *yamlv3.Node {
	if n == nil || n.Kind != yamlv3.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// A list is a v1 List or a typed list such as PodList, as printed by
// `kubectl get -o yaml`.
type list struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []json.RawMessage `json:"items"`
}

func (l *loader) loadList(loc docLoc, j, src []byte, h header, elem string) {
	info := kindInfo{apiVersion: "v1"}
	if elem != "" {
		info = kinds[elem]
	}
	if !info.reads(h.apiVersion) {
		l.fail(loc, h, fmt.Errorf("apiVersion %q is not supported for %s, want %s", h.apiVersion, h.kind, info.wants()))
		return
	}
	want := h.apiVersion
	var ls list
	strict, err := sigsjson.UnmarshalStrict(j, &ls)
	if err == nil && len(strict) != 0 {
		err = joinedErrors(strict)
	}
	if err != nil {
		l.fail(loc, h, err)
		return
	}
	for i, item := range ls.Items {
		iloc := loc
		iloc.item = i
		ih, err := readHeader(item)
		if err != nil {
			l.fail(iloc, header{}, err)
			continue
		}
		ih = literalHeader(ih, src, i)
		if elem != "" {
			// Items of a typed list need not repeat their kind.
			if ih.kind == "" && ih.apiVersion == "" {
				ih.kind, ih.apiVersion = elem, want
			}
			if ih.kind != elem {
				l.fail(iloc, ih, fmt.Errorf("item of a %s must be a %s", h.kind, elem))
				continue
			}
		}
		if _, isList := listElem(ih.kind); isList {
			l.fail(iloc, ih, errors.New("a list inside a list is not supported"))
			continue
		}
		l.loadObject(iloc, item, ih)
	}
}

func (l *loader) loadObject(loc docLoc, j []byte, h header) {
	info, ok := kinds[h.kind]
	if !ok {
		if h.kind == "" {
			l.fail(loc, h, errors.New("kind is required"))
			return
		}
		if !knownOtherKind(h.apiVersion, h.kind) {
			// Not a kind of the API groups nftpolicy reads: a typo of one
			// of its kinds (NetworkPolicyy) would drop what the document
			// defines as quietly as a Service is ignored. An error, then.
			l.fail(loc, h, fmt.Errorf("unknown kind %s of %s (a typo? nftpolicy reads %s)", h.kind, h.apiVersion, readKinds))
			return
		}
		l.fail(loc, h, fmt.Errorf("%w %s (reads %s)", ErrUnsupportedKind, h.kind, readKinds))
		return
	}
	h = h.named()
	// Every definition is recorded, valid or not, so that merge can tell a
	// duplicate even when one definition is broken, and WatchDir can keep
	// the last good version of an object whose edit is rejected (a wrong
	// apiVersion, such as networking.k8s.io/v1beta1, included).
	var def *definition
	if h.name != "" {
		l.defs = append(l.defs, definition{key: objectKey{h.kind, h.namespace, h.name}, loc: loc})
		def = &l.defs[len(l.defs)-1]
	}
	reject := func(err error) {
		e := l.fail(loc, h, err)
		if def != nil {
			def.err = e
			def.standin, def.quarantined = standIn(def.key, j)
		}
	}
	if !info.reads(h.apiVersion) {
		reject(fmt.Errorf("apiVersion %q is not supported for %s, want %s", h.apiVersion, h.kind, info.wants()))
		return
	}

	obj := info.new()
	// Strict as `kubectl apply --validate=strict`: field names are case
	// sensitive, unknown and duplicate fields are errors. Absent or null
	// lists stay nil and [] stays empty, which the compiler relies on.
	strict, err := sigsjson.UnmarshalStrict(j, obj)
	if err == nil && len(strict) != 0 {
		err = joinedErrors(strict)
	}
	if err != nil {
		reject(withYAMLHint(err))
		return
	}
	errs := Admit(obj)
	if _, ok := obj.(*policyv1beta1.ClusterNetworkPolicy); ok {
		errs = withShapeErrors(errs, validateCNPShape(j))
	}
	if len(errs) != 0 {
		reject(FieldErrors(errs))
		return
	}
	obj.GetObjectKind().SetGroupVersionKind(schema.FromAPIVersionAndKind(info.apiVersion, h.kind))
	if def != nil {
		def.obj = obj
	}
}

// defineRejected records a definition of the object h names that was
// rejected with e before it could be decoded; j is what can be read of it.
func (l *loader) defineRejected(loc docLoc, h header, j []byte, e *ObjectError) {
	if _, ok := kinds[h.kind]; !ok || h.name == "" {
		return
	}
	h = h.named()
	key := objectKey{h.kind, h.namespace, h.name}
	standin, quarantined := standIn(key, j)
	l.defs = append(l.defs, definition{key: key, loc: loc, err: e, standin: standin, quarantined: quarantined})
}

// withYAMLHint explains the most common surprise of YAML 1.1, which
// sigs.k8s.io/yaml (like kubectl) implements: an unquoted y, yes, on, n, no
// or off is a boolean and an unquoted 80 a number, so "namespace: y" or a
// label "version: 2" cannot be decoded into a string. The namespaces of the
// upstream netpol matrix are x, y and z. The decoder's error type is
// internal to sigs.k8s.io/json, hence the match on its text.
func withYAMLHint(err error) error {
	msg := err.Error()
	if !strings.HasSuffix(msg, "of type string") {
		return err
	}
	switch {
	case strings.Contains(msg, "cannot unmarshal bool into"):
		return fmt.Errorf("%w (an unquoted y, yes, on, n, no or off is a YAML boolean: quote it)", err)
	case strings.Contains(msg, "cannot unmarshal number into"):
		return fmt.Errorf("%w (quote a number meant as a string)", err)
	}
	return err
}

// A yamlDoc is one document of a YAML stream and the 1-based line of the
// file on which it starts.
type yamlDoc struct {
	data []byte
	line int
}

// splitYAML splits a YAML stream on "---" lines (optionally followed by
// blanks and a comment), as kubectl does. Unlike apimachinery's YAMLReader it
// never fails: a malformed separator stays inside its document, so only that
// document is reported as invalid.
func splitYAML(data []byte) []yamlDoc {
	var docs []yamlDoc
	start, startLine, line := 0, 1, 1
	for off := 0; off < len(data); line++ {
		end := bytes.IndexByte(data[off:], '\n')
		next := len(data)
		if end >= 0 {
			next = off + end + 1
		}
		if isSeparator(data[off:next]) {
			docs = append(docs, yamlDoc{data: data[start:off], line: startLine})
			start, startLine = next, line+1
		}
		off = next
	}
	return append(docs, yamlDoc{data: data[start:], line: startLine})
}

func isSeparator(line []byte) bool {
	line = bytes.TrimRight(line, "\r\n")
	rest, ok := bytes.CutPrefix(line, []byte("---"))
	if !ok {
		return false
	}
	if len(rest) == 0 {
		return true
	}
	if rest[0] != ' ' && rest[0] != '\t' {
		return false
	}
	rest = bytes.TrimSpace(rest)
	return len(rest) == 0 || rest[0] == '#'
}

// otherKinds are the kinds of the core and networking.k8s.io groups that
// nftpolicy does not read: a manifests directory may well hold them, and
// they are ignored with a warning. Any other kind in those groups is an
// error (see loadObject); kinds of other groups (apps/v1 Deployments, CRDs)
// are ignored.
var otherKinds = map[string]map[string]bool{
	"v1": {"Service": true, "ConfigMap": true, "Secret": true, "ServiceAccount": true, "Endpoints": true,
		"PersistentVolume": true, "PersistentVolumeClaim": true, "ResourceQuota": true, "LimitRange": true,
		"ReplicationController": true, "PodTemplate": true, "Event": true, "Binding": true, "ComponentStatus": true},
	"networking.k8s.io": {"Ingress": true, "IngressClass": true, "ServiceCIDR": true, "IPAddress": true},
	// Every other kind of the group is an error: AdminNetworkPolicy and
	// BaselineAdminNetworkPolicy (v1alpha1) are not read, and ignoring
	// one with a warning would drop its denies without a word.
	ClusterPolicyGroup: {},
}

// knownOtherKind reports whether kind of apiVersion may be ignored as a
// kind nftpolicy does not read.
func knownOtherKind(apiVersion, kind string) bool {
	group := apiVersion
	if i := strings.LastIndex(apiVersion, "/"); i >= 0 {
		group = apiVersion[:i]
	}
	known, ours := otherKinds[group]
	return !ours || known[kind]
}
