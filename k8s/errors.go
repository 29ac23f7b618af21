package k8s

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

var (
	// ErrUnsupportedKind marks an ObjectError for a document whose kind the
	// manifests source does not read (a Service, a Deployment, ...). Callers
	// that share a directory with other manifests may log these at a lower
	// level than real mistakes: errors.Is(err, ErrUnsupportedKind).
	ErrUnsupportedKind = errors.New("unsupported kind")

	// ErrDuplicate marks an ObjectError for each definition of an object
	// (same kind, namespace and name) that is defined more than once, with
	// definitions that differ or are not all valid. No definition is used:
	// see the package documentation for what is kept.
	ErrDuplicate = errors.New("duplicate object")

	// ErrIdenticalDuplicate marks an ObjectError for each definition of an
	// object that is defined more than once, every definition valid and
	// equal to the others after defaulting (a copied file): the object is
	// used once. It is a warning: the Snapshot holds what the files say.
	ErrIdenticalDuplicate = errors.New("identical duplicate object")
)

// An ObjectError is one manifest document, or one item of a List document,
// that the manifests source rejected or warns about. Unless it is a
// Warning, the Snapshot does not hold what the document says: the object
// is left out, or (KeptLastGood) an earlier version stays in its place.
// Every other object is still in the Snapshot.
//
// Its Error string names where the object was and what it was before the
// reason, e.g.
//
//	policies.yaml doc 2: NetworkPolicy x/bad: spec.ingress[0].from[1].ipBlock.except[0]: "10.1.0.0/16" is not inside cidr "10.0.0.0/16"
type ObjectError struct {
	// File is the file name, relative to the directory that was loaded.
	File string
	// Doc is the 0-based index of the document within File. Empty
	// documents (only whitespace and comments) are not counted.
	Doc int
	// Item is the 0-based index within the items of a List document, or -1
	// when the document is not a List.
	Item int

	// Kind, Namespace and Name identify the object as far as the document
	// could be read; any of them may be empty. Namespace is already defaulted
	// ("default" for a namespaced kind) and empty for cluster-scoped kinds.
	Kind      string
	Namespace string
	Name      string

	// Err is the reason. Validation failures are a FieldErrors; see also
	// ErrUnsupportedKind, ErrDuplicate and ErrIdenticalDuplicate.
	Err error

	// KeptLastGood is set by WatchDir when, instead of what the document
	// says, the Snapshot holds the last good version of the object (or of
	// objects the file held before, when the document cannot be told
	// apart from them); Err then ends by saying which.
	KeptLastGood bool

	// StandIn is set when, instead of what the document says, the
	// Snapshot holds a stand-in that fails closed and no last good version
	// was kept: a NetworkPolicy that isolates and allows nothing, or a Pod
	// with the labels that can be trusted (quarantined, see
	// Snapshot.Quarantined, when one is missing); Err then ends by saying
	// which. An error with neither StandIn nor KeptLastGood that is not a
	// Warning left its object out.
	StandIn bool
}

// Warning reports whether e leaves the Snapshot as the files say: a kind
// the manifests source does not read, or a definition that repeats another
// one exactly. Any other ObjectError means what is enforced differs from
// the files.
func (e *ObjectError) Warning() bool {
	return !e.KeptLastGood && !e.StandIn && (errors.Is(e.Err, ErrUnsupportedKind) || errors.Is(e.Err, ErrIdenticalDuplicate))
}

// Lost reports whether e may have left objects out of the Snapshot that
// nothing stands for: it is no Warning, and neither a last good version
// (KeptLastGood) nor a stand-in (StandIn) is in effect in their place. A
// document whose kind or name cannot be read, a kind typo, a rejected Node
// with no earlier version, or an object whose stand-in cannot be made (an
// invalid name, a Pod whose place cannot be read) are such errors: what
// they define is not in the Snapshot, and leaving it out can open pods.
func (e *ObjectError) Lost() bool {
	return !e.Warning() && !e.KeptLastGood && !e.StandIn
}

// Location returns where the object was found: "policies.yaml doc 2", or
// "pods.yaml doc 0 item 3" for an item of a List.
func (e *ObjectError) Location() string {
	return location(e.File, e.Doc, e.Item)
}

func location(file string, doc, item int) string {
	if item < 0 {
		return fmt.Sprintf("%s doc %d", file, doc)
	}
	return fmt.Sprintf("%s doc %d item %d", file, doc, item)
}

// Object returns "Kind namespace/name", "Kind name" for cluster-scoped
// objects, or as much of it as is known ("object name" without a kind).
func (e *ObjectError) Object() string {
	name := e.Name
	if e.Namespace != "" {
		name = e.Namespace + "/" + e.Name
	}
	kind := e.Kind
	if kind == "" && name != "" {
		kind = "object"
	}
	return strings.TrimSpace(kind + " " + name)
}

func (e *ObjectError) Error() string {
	if obj := e.Object(); obj != "" {
		return e.Location() + ": " + obj + ": " + e.Err.Error()
	}
	return e.Location() + ": " + e.Err.Error()
}

func (e *ObjectError) Unwrap() error { return e.Err }

// A FieldErrors is every validation failure of one object, each a
// *field.Error naming the field path the way the API server does
// (spec.ingress[0].ports[1].endPort). It renders each error as
// "path: value reason" and joins them with "; ".
type FieldErrors field.ErrorList

func (fe FieldErrors) Error() string {
	msgs := make([]string, len(fe))
	for i, e := range fe {
		msgs[i] = renderFieldError(e)
	}
	return strings.Join(msgs, "; ")
}

// Unwrap lets errors.As find the individual *field.Error values.
func (fe FieldErrors) Unwrap() []error {
	errs := make([]error, len(fe))
	for i, e := range fe {
		errs[i] = e
	}
	return errs
}

// renderFieldError writes a field.Error the way this package's own messages
// are phrased ("path: value must ..."), which is shorter than upstream's
// "path: Invalid value: value: must ..." but keeps its field path and detail.
func renderFieldError(e *field.Error) string {
	switch e.Type {
	case field.ErrorTypeInvalid:
		value := renderValue(e.BadValue)
		if startsWithVerb(e.Detail) {
			return fmt.Sprintf("%s: %s %s", e.Field, value, e.Detail)
		}
		return fmt.Sprintf("%s: %s is invalid: %s", e.Field, value, e.Detail)
	case field.ErrorTypeRequired:
		if e.Detail == "" {
			return e.Field + ": is required"
		}
		return e.Field + ": is required: " + e.Detail
	case field.ErrorTypeForbidden:
		if e.Detail == "" {
			return e.Field + ": is forbidden"
		}
		return e.Field + ": " + e.Detail
	case field.ErrorTypeNotSupported:
		return fmt.Sprintf("%s: %s is not supported (%s)", e.Field, renderValue(e.BadValue), e.Detail)
	case field.ErrorTypeDuplicate:
		return fmt.Sprintf("%s: %s is a duplicate", e.Field, renderValue(e.BadValue))
	case field.ErrorTypeTooMany:
		return fmt.Sprintf("%s: has %v items, %s", e.Field, renderValue(e.BadValue), e.Detail)
	default:
		return e.Error()
	}
}

// startsWithVerb reports whether an upstream detail reads as a predicate
// ("must be ...", "is not ...") that can follow the bad value directly.
func startsWithVerb(detail string) bool {
	for _, p := range []string{"must ", "is ", "may ", "has "} {
		if strings.HasPrefix(detail, p) {
			return true
		}
	}
	return false
}

// renderValue quotes anything string-like (including named string types such
// as corev1.Protocol) and prints numbers as they are.
func renderValue(v any) string {
	rv := reflect.ValueOf(v)
	for rv.IsValid() && rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return "null"
		}
		rv = rv.Elem()
	}
	if !rv.IsValid() {
		return "null"
	}
	if rv.Kind() == reflect.String {
		return strconv.Quote(rv.String())
	}
	return fmt.Sprint(rv.Interface())
}

// joinedErrors is several errors about one object (strict decoding reports
// every unknown field at once), joined on one line.
type joinedErrors []error

func (je joinedErrors) Error() string {
	msgs := make([]string, len(je))
	for i, e := range je {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

func (je joinedErrors) Unwrap() []error { return je }
