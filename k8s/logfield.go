package k8s

import (
	"fmt"
	"unicode/utf8"

	"go.uber.org/zap"
)

// Longest name, and longest error, that goes into a log field whole. Object
// names come from manifests and API objects, which a mistake (or a test of
// limits) can make 20 KB long; a log line per object must stay readable,
// and the validation error already says the name is too long.
const (
	maxLogName  = 256
	maxLogError = 1024
)

// Shorten returns s cut to at most max bytes, at a character boundary, with
// a marker saying how much was left out: "abc…[17 more bytes]".
func Shorten(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…[%d more bytes]", s[:cut], len(s)-cut)
}

// NameField is zap.String for an object name or anything else a user
// wrote, shortened for the log.
func NameField(key, name string) zap.Field {
	return zap.String(key, Shorten(name, maxLogName))
}

// ErrorField is zap.Error for an error that may quote user input (a name,
// a label value), shortened for the log.
func ErrorField(err error) zap.Field {
	if err == nil {
		return zap.Skip()
	}
	return zap.String("error", Shorten(err.Error(), maxLogError))
}
