package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/go-logr/zapr"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
)

// --log-format json makes every line a JSON object, client-go's klog
// lines included (through zapr), and its verbose lines stay out.
func TestLogFormatJSON(t *testing.T) {
	var b bytes.Buffer
	log := newLogger(&b, zapcore.DebugLevel, "json")
	klog.SetLogger(zapr.NewLogger(log))
	defer klog.ClearLogger()
	log.Info("ours")
	klog.InfoS("from client-go", "resource", "pods")
	klog.V(4).InfoS("verbose client-go")
	klog.Flush()
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want ours and client-go's:\n%s", len(lines), b.String())
	}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Errorf("not JSON: %q: %v", l, err)
		}
	}
	if !strings.Contains(lines[1], `"msg":"from client-go"`) || !strings.Contains(lines[1], `"resource":"pods"`) {
		t.Errorf("klog line %q lacks its message or field", lines[1])
	}
}

func TestLogFormatFlag(t *testing.T) {
	if _, err := parseFlags("dump", []string{"--manifests", "x", "--node", "n", "--log-format", "yaml"}, io.Discard); err == nil {
		t.Error("--log-format yaml accepted")
	}
	cfg, err := parseFlags("dump", []string{"--manifests", "x", "--node", "n", "--log-format", "json"}, io.Discard)
	if err != nil || cfg.logFormat != "json" {
		t.Errorf("--log-format json: %v, %+v", err, cfg)
	}
}
