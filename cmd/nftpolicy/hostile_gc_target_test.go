package main

import (
	"fmt"
	"runtime/debug"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestHostileGCTargetHonoursGOGC: whatever GOGC says (a number, off, a
// value the runtime reads as the default), collectorTarget leaves the
// collector target the runtime took from it, and its log says so; with
// GOGC unset (or empty, which the runtime reads as unset) it applies
// firstSyncGCPercent, and its log says which target applies too.
func TestHostileGCTargetHonoursGOGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	for _, tc := range []struct {
		env     string
		runtime int // the target the runtime took from env at start
		want    int
	}{
		{"75", 75, 75},
		{"off", -1, -1},
		{"100", 100, 100},
		{"200", 200, 200},
		{"", 100, firstSyncGCPercent},
	} {
		t.Run(fmt.Sprintf("GOGC=%q", tc.env), func(t *testing.T) {
			t.Setenv("GOGC", tc.env)
			debug.SetGCPercent(tc.runtime)
			core, logs := observer.New(zapcore.DebugLevel)
			collectorTarget(zap.New(core))
			if got := debug.SetGCPercent(100); got != tc.want {
				t.Errorf("GOGC=%q: the collector target is %d, want %d", tc.env, got, tc.want)
			}
			said := false
			for _, e := range logs.All() {
				line := e.Message
				for k, v := range e.ContextMap() {
					line += fmt.Sprintf(" %s=%v", k, v)
				}
				if want := fmt.Sprint(tc.want); strings.Contains(line, want) || (tc.want == -1 && strings.Contains(line, "off")) {
					said = true
				}
			}
			if !said {
				t.Errorf("GOGC=%q: no log line says the collector target (%d) applies; logged: %v", tc.env, tc.want, logs.All())
			}
		})
	}
}
