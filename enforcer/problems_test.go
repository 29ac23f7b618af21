package enforcer

import (
	"errors"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A problem is logged once when it appears and once when it goes, not at
// every sync; names are cut to a readable length.
func TestProblemsAreReportedOnce(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	s := &Syncer{log: zap.New(core)}
	dup := Problem{Object: "Pod x/old", Err: errors.New("pod IP 10.0.1.1 is also held by Pod x/new")}
	long := Problem{Object: "NetworkPolicy x/" + strings.Repeat("n", 20000), Err: errors.New("bad")}

	s.reportProblems([]Problem{dup})
	s.reportProblems([]Problem{dup})
	s.reportProblems([]Problem{dup, long})
	s.reportProblems([]Problem{long})

	var got []string
	for _, e := range logs.All() {
		line := e.Message
		for _, f := range e.Context {
			line += " " + f.Key + "=" + f.String
			if len(f.String) > 1024 {
				t.Errorf("field %s is %d bytes long", f.Key, len(f.String))
			}
		}
		got = append(got, line)
	}
	want := []string{
		"skipped part of the snapshot object=Pod x/old error=pod IP 10.0.1.1",
		"skipped part of the snapshot object=NetworkPolicy x/nnnnnnnnnnn",
		"no longer skipped error=Pod x/old: pod IP 10.0.1.1 is also held",
	}
	same := len(got) == len(want)
	for i := 0; same && i < len(got); i++ {
		same = strings.HasPrefix(got[i], want[i])
	}
	if !same {
		t.Errorf("logged:\n%s\nwant lines starting:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
