package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nftpolicy/nftpolicy/internal/netns"
	"github.com/nftpolicy/nftpolicy/internal/testns"
)

const denyIngressY = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: "y", name: deny-ingress}
spec:
  podSelector: {}
  policyTypes: [Ingress]
`

// flowLines returns the flow lines of a JSON log, without their time.
func flowLines(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(logs, "\n") {
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["msg"] == "flow" {
			delete(m, "ts")
			delete(m, "sport") // ephemeral
			out = append(out, m)
		}
	}
	return out
}

// Real packets through a daemon: with namespace x annotated for flow
// logs, one allowed and one denied connection to x/a each give exactly
// one line, naming the policy and rule or the default deny, the 5-tuple
// and both pods; a denied connection to namespace y, isolated but not
// annotated, gives none.
func TestIntegrationFlowLog(t *testing.T) {
	c, node, dir := packetCluster(t)
	annotated := strings.Replace(c.Manifests(), "kind: Namespace\nmetadata:\n  name: \"x\"\n",
		"kind: Namespace\nmetadata:\n  name: \"x\"\n  annotations: {\"nftpolicy.io/flow-log\": \"true\"}\n", 1)
	if annotated == c.Manifests() {
		t.Fatal("namespace x not found in the manifests")
	}
	writeFile(t, filepath.Join(dir, "cluster.yaml"), annotated)
	writeFile(t, filepath.Join(dir, "deny.yaml"), denyIngressX)
	writeFile(t, filepath.Join(dir, "allow.yaml"), allowYToXA80)
	writeFile(t, filepath.Join(dir, "deny-y.yaml"), denyIngressY)
	d := startDaemon(t, "--manifests", dir, "--node", "node-1", "--netns", node.NetnsName(), "--log-format", "json", "--metrics-addr", "")
	d.waitGeneration(t, 0)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(d.Logs(), "flow log: reading the nflog group") {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon does not read the flow log group:\n%s", d.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	listing := testns.ListTable(t, node.NetnsName(), "nftpolicy")
	for _, bad := range []string{"unknown", "unsupported"} {
		if strings.Contains(listing, bad) {
			t.Errorf("nft lists %q:\n%s", bad, listing)
		}
	}

	checkProbes(t, c, []packetProbe{
		{"y/a", "x/a", netns.IPv4, netns.TCP, 80, true},
		{"y/a", "x/a", netns.IPv4, netns.TCP, 81, false},
		{"x/a", "y/a", netns.IPv4, netns.TCP, 80, false}, // y is not annotated
	})
	// Lines come once their merge window (1s) closed.
	time.Sleep(2 * time.Second)
	ya, xa := c.Pod("y/a").Addr(netns.IPv4).String(), c.Pod("x/a").Addr(netns.IPv4).String()
	want := []map[string]any{{
		"level": "info", "msg": "flow", "verdict": "allow", "direction": "ingress", "policy": "x/allow-y-80", "rule": 0.0,
		"proto": "tcp", "src": ya, "dst": xa, "dport": 80.0, "srcPod": "y/a", "dstPod": "x/a", "count": 1.0,
	}, {
		"level": "info", "msg": "flow", "verdict": "deny", "direction": "ingress",
		"proto": "tcp", "src": ya, "dst": xa, "dport": 81.0, "srcPod": "y/a", "dstPod": "x/a", "count": 1.0,
	}}
	got := flowLines(t, d.Logs())
	for _, l := range strings.Split(d.Logs(), "\n") {
		if strings.Contains(l, `"msg":"flow"`) {
			t.Log(l)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("flow lines (-want +got):\n%s", diff)
	}
	if r, err := d.Readyz(); err != nil || !r.Ready {
		t.Errorf("not ready with flow logs: %+v %v", r, err)
	}
}
