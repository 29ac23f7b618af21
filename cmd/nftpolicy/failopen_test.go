package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every duration and number flag is checked when parsed: a zero --poll
// once reached time.NewTicker and panicked.
func TestFlagValues(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cmd     string
		args    []string
		wantErr string // "" when the flags are fine
	}{
		{"defaults", "run", nil, ""},
		{"poll zero", "run", []string{"--poll", "0"}, "--poll 0s: want a positive duration"},
		{"poll negative", "run", []string{"--poll", "-1s"}, "--poll -1s: want a positive duration"},
		{"rescan zero", "run", []string{"--rescan", "0"}, "--rescan 0s: want a positive duration"},
		{"debounce zero", "run", []string{"--debounce", "0"}, ""},
		{"debounce negative", "run", []string{"--debounce", "-5ms"}, "--debounce -5ms: want a zero or positive duration"},
		{"max-delay negative", "run", []string{"--max-delay", "-1s"}, "--max-delay -1s"},
		{"drift-check off", "run", []string{"--drift-check", "0"}, ""},
		{"drift-check negative", "run", []string{"--drift-check", "-30s"}, "--drift-check -30s: want a zero or positive duration (0 turns it off)"},
		{"priority below conntrack's", "apply", []string{"--priority", "-300"}, ""},
		{"priority too large", "apply", []string{"--priority", "3000000000"}, `--priority "3000000000": out of range`},
		{"priority not a number", "dump", []string{"--priority", "first"}, "want auto or a number"},
		{"mark mask not a number", "dump", []string{"--mark-mask", "bits"}, `--mark-mask "bits": want a 32-bit mask`},
		{"empty node", "apply", []string{"--node", ""}, "--node is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("NODE_NAME", "n1")
			_, err := parseFlags(tc.cmd, append([]string{"--manifests", "dir"}, tc.args...), io.Discard)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("%q: %v", tc.args, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("%q: error %v, want %q", tc.args, err, tc.wantErr)
			}
		})
	}
}

// The node name: --node, else $NODE_NAME, else the hostname; a $NODE_NAME
// that is set but empty (the systemd environment file as shipped) is
// refused rather than replaced by the hostname.
func TestNodeName(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Skip(err)
	}
	for _, tc := range []struct {
		name    string
		env     *string
		args    []string
		want    string
		wantErr string
	}{
		{name: "flag", env: ptr("env"), args: []string{"--node", "flag"}, want: "flag"},
		{name: "env", env: ptr("env"), want: "env"},
		{name: "hostname", want: host},
		{name: "empty env", env: ptr(""), wantErr: "$NODE_NAME is set but empty"},
		{name: "empty env, flag given", env: ptr(""), args: []string{"--node", "flag"}, want: "flag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("NODE_NAME", "")
			if tc.env == nil {
				os.Unsetenv("NODE_NAME")
			} else {
				os.Setenv("NODE_NAME", *tc.env)
			}
			cfg, err := parseFlags("run", append([]string{"--manifests", "dir"}, tc.args...), io.Discard)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("error %v, want %q", err, tc.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case cfg.node != tc.want:
				t.Errorf("node %q, want %q", cfg.node, tc.want)
			}
		})
	}
}

func ptr(s string) *string { return &s }

// dump (and apply, which shares its loading) refuses to compile nothing,
// and exits 3 after leaving something out, naming each thing.
func TestDumpFailsLoudly(t *testing.T) {
	cluster := func(t *testing.T, extra map[string]string) string {
		dir := t.TempDir()
		for _, f := range []string{"namespaces.yaml", "pods.yaml", "policies.yaml"} {
			b, err := os.ReadFile(filepath.Join("testdata/cluster", f))
			if err != nil {
				t.Fatal(err)
			}
			extra[f] = string(b)
		}
		for name, content := range extra {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	empty := func(files map[string]string) func(t *testing.T) string {
		return func(t *testing.T) string {
			dir := t.TempDir()
			for name, content := range files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			return dir
		}
	}
	for _, tc := range []struct {
		name   string
		dir    func(t *testing.T) string
		args   []string
		code   int
		want   []string // in stderr
		output bool     // the ruleset is printed
	}{
		{name: "empty directory", dir: empty(nil), code: 1, want: []string{"holds no objects (0 skipped): an empty table enforces nothing; give --allow-empty"}},
		{name: "no manifest files", dir: empty(map[string]string{"notes.txt": "x", ".hidden.yaml": "x"}), code: 1, want: []string{"holds no objects"}},
		{name: "only broken objects", dir: empty(map[string]string{"a.yaml": "apiVersion: v1\nkind: Namespace\nmetadata: {name: Bad}\n"}), code: 1, want: []string{"holds no objects (1 skipped)"}},
		{name: "empty, allowed", dir: empty(nil), args: []string{"--allow-empty"}, code: 0, want: []string{"the table enforces nothing (--allow-empty)"}, output: true},
		{name: "a good cluster", dir: func(t *testing.T) string { return cluster(t, map[string]string{}) }, code: 0, output: true},
		{name: "a broken object and a duplicate", dir: func(t *testing.T) string {
			return cluster(t, map[string]string{
				"broken.yaml": "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {namespace: \"y\", name: bad-cidr}\nspec:\n  podSelector: {}\n  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/33}}]}]\n",
				"zz.yaml":     "apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: s}\n",
			})
		}, code: 3, output: true, want: []string{
			"nftpolicy dump: 3 skipped (the rest is in effect):\n" +
				"  broken.yaml doc 0: NetworkPolicy y/bad-cidr: spec.ingress[0].from[0].ipBlock.cidr: \"10.0.0.0/33\" must be a valid CIDR",
			"  namespaces.yaml doc 0: Namespace x: duplicate object, also defined at zz.yaml doc 0; no earlier version is known, so the namespace keeps the labels every definition agrees on, quarantined",
			"  zz.yaml doc 0: Namespace x: duplicate object, also defined at namespaces.yaml doc 0; no earlier version is known, so the namespace keeps the labels every definition agrees on, quarantined",
		}},
		{name: "a copied file", dir: func(t *testing.T) string {
			b, err := os.ReadFile(filepath.Join("testdata/cluster", "pods.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			return cluster(t, map[string]string{"pods-backup.yaml": string(b)})
		}, code: 0, output: true, want: []string{"identically"}},
		{name: "unknown node", dir: func(t *testing.T) string { return cluster(t, map[string]string{}) }, args: []string{"--node", "node-3"},
			code: 3, output: true, want: []string{`nftpolicy dump: node "node-3" matches no Node and no pod, so nothing is enforced on it; check --node or $NODE_NAME (nodes known: "node-1", "node-2")`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append([]string{"dump", "--manifests", tc.dir(t), "--node", "node-1"}, tc.args...)
			code := run(args, &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.code, stderr.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
			if got := strings.Contains(stdout.String(), "table inet nftpolicy"); got != tc.output {
				t.Errorf("ruleset printed: %v, want %v", got, tc.output)
			}
		})
	}
}

// Names in logs and summaries are cut short.
func TestLongNamesAreCut(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("n", 20000)
	doc := "apiVersion: v1\nkind: Namespace\nmetadata: {name: ok}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: " + long + "}\n"
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	code := run([]string{"dump", "--manifests", dir, "--node", long}, io.Discard, &stderr)
	if code != 3 {
		t.Errorf("exit %d, want 3: %.2000s", code, stderr.String())
	}
	for i, line := range strings.Split(stderr.String(), "\n") {
		if len(line) > 2000 {
			t.Errorf("stderr line %d is %d bytes: %.300s...", i, len(line), line)
		}
	}
	if !strings.Contains(stderr.String(), "more bytes]") {
		t.Errorf("no cut marker:\n%.3000s", stderr.String())
	}
}
