package main

import (
	"io"
	"strings"
	"testing"
)

// The source of run, apply and dump: --manifests, --kubeconfig, or the
// in-cluster configuration when the kubelet set KUBERNETES_SERVICE_HOST.
func TestSourceSelection(t *testing.T) {
	for _, c := range []struct {
		name    string
		args    []string
		host    string
		source  string // want, from config.source
		wantErr string
	}{
		{name: "manifests", args: []string{"--manifests", "dir"}, source: "manifests dir"},
		{name: "manifests win over in-cluster", args: []string{"--manifests", "dir"}, host: "10.96.0.1", source: "manifests dir"},
		{name: "kubeconfig", args: []string{"--kubeconfig", "kc"}, source: "kubeconfig kc"},
		{name: "kubeconfig wins over in-cluster", args: []string{"--kubeconfig", "kc"}, host: "10.96.0.1", source: "kubeconfig kc"},
		{name: "in-cluster", host: "10.96.0.1", source: "in-cluster API server"},
		{name: "nothing outside a cluster", wantErr: "--manifests is required (or --kubeconfig"},
		{name: "both", args: []string{"--manifests", "dir", "--kubeconfig", "kc"}, wantErr: "exclusive"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("KUBERNETES_SERVICE_HOST", c.host)
			for _, cmd := range []string{"run", "apply", "dump"} {
				cfg, err := parseFlags(cmd, append([]string{"--node", "n1"}, c.args...), io.Discard)
				if c.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), c.wantErr) {
						t.Errorf("%s: error %v, want %q", cmd, err, c.wantErr)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", cmd, err)
				}
				if got := cfg.source(); got != c.source {
					t.Errorf("%s: source %q, want %q", cmd, got, c.source)
				}
			}
		})
	}
}

// With a kubeconfig that points nowhere, run fails instead of hanging, and
// names the file.
func TestKubeconfigMissing(t *testing.T) {
	var stderr strings.Builder
	code := run([]string{"dump", "--kubeconfig", "/nonexistent/kubeconfig", "--node", "n1"}, io.Discard, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "/nonexistent/kubeconfig") {
		t.Errorf("exit %d, stderr %q; want 1 and the file named", code, stderr.String())
	}
}
