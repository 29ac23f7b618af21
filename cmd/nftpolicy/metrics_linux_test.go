package main

import (
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nftpolicy/nftpolicy/internal/netns"
	"github.com/nftpolicy/nftpolicy/internal/testbin"
)

// scrape reads /metrics at addr: each series (name and labels, as
// exposed) with its value.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d %v\n%s", resp.StatusCode, err, body)
	}
	out := map[string]float64{}
	line := regexp.MustCompile(`^(\S+(?:\{[^}]*\})?) (\S+)$`)
	for _, l := range strings.Split(string(body), "\n") {
		if m := line.FindStringSubmatch(l); m != nil && !strings.HasPrefix(l, "#") {
			v, _ := strconv.ParseFloat(m[2], 64)
			out[m[1]] = v
		}
	}
	return out
}

// The metrics of a running daemon after real packets: one allowed and
// one denied connection move exactly their series; the syncs, their
// durations and the programmed table show; and a drift check that reads
// the counted table back finds no drift in the counts.
//
// By default a pod chain counts what it allowed per pod; with
// --walk-policies each policy counts what it allowed.
func TestIntegrationMetrics(t *testing.T) {
	for _, tc := range []struct {
		name                string
		args                []string
		allowed, allowedNot string
	}{
		{"per pod", nil,
			`nftpolicy_pod_allowed_connections_total{direction="ingress",namespace="x",pod="a"}`,
			`nftpolicy_pod_allowed_connections_total{direction="ingress",namespace="x",pod="b"}`},
		{"per policy", []string{"--walk-policies"},
			`nftpolicy_policy_allowed_connections_total{direction="ingress",namespace="x",policy="allow-y-80"}`,
			`nftpolicy_policy_allowed_connections_total{direction="ingress",namespace="x",policy="deny-ingress"}`},
	} {
		t.Run(tc.name, func(t *testing.T) { testMetrics(t, tc.args, tc.allowed, tc.allowedNot) })
	}
}

func testMetrics(t *testing.T, args []string, allowed, allowedNot string) {
	c, node, dir := packetCluster(t)
	writeFile(t, filepath.Join(dir, "deny.yaml"), denyIngressX)
	writeFile(t, filepath.Join(dir, "allow.yaml"), allowYToXA80)
	addr, err := testbin.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, append([]string{"--manifests", dir, "--node", "node-1", "--netns", node.NetnsName(), "--metrics-addr", addr}, args...)...)
	d.waitGeneration(t, 0)
	const (
		deniedA = `nftpolicy_pod_denied_connections_total{direction="ingress",namespace="x",pod="a"}`
		deniedB = `nftpolicy_pod_denied_connections_total{direction="ingress",namespace="x",pod="b"}`
	)
	before := scrape(t, addr)
	for _, s := range []string{allowed, allowedNot, deniedA, deniedB} {
		if v, ok := before[s]; !ok || v != 0 {
			t.Errorf("before any packet: %s = %v (present %v), want 0", s, v, ok)
		}
	}
	checkProbes(t, c, []packetProbe{
		{"y/a", "x/a", netns.IPv4, netns.TCP, 80, true},
		{"y/a", "x/a", netns.IPv4, netns.TCP, 81, false},
	})
	after := scrape(t, addr)
	for s, want := range map[string]float64{allowed: 1, allowedNot: 0, deniedA: 1, deniedB: 0} {
		if got := after[s] - before[s]; got != want {
			t.Errorf("%s grew by %v, want %v", s, got, want)
		}
	}
	for s, want := range map[string]float64{
		`nftpolicy_syncs_total{result="success"}`: 1,
		`nftpolicy_syncs_total{result="failure"}`: 0,
		`nftpolicy_batches_refused_total`:         0,
		`nftpolicy_drift_repairs_total`:           0,
		`nftpolicy_isolated_pods`:                 2, // x/a, x/b
	} {
		if got := after[s]; got != want {
			t.Errorf("%s = %v, want %v", s, got, want)
		}
	}
	for _, s := range []string{
		`nftpolicy_sync_duration_seconds_count{phase="compile"}`,
		`nftpolicy_sync_duration_seconds_count{phase="write"}`,
		`nftpolicy_programmed_chains`, `nftpolicy_programmed_rules`, `nftpolicy_programmed_sets`, `nftpolicy_programmed_elements`,
	} {
		if after[s] < 1 {
			t.Errorf("%s = %v, want at least 1", s, after[s])
		}
	}
	if ts := after[`nftpolicy_last_successful_sync_timestamp_seconds`]; time.Since(time.Unix(int64(ts), 0)) > time.Minute {
		t.Errorf("last successful sync at %v, not within the last minute", ts)
	}

	// A policy change rewrites the pod chains and their counters: the
	// sums go on from where they were.
	writeFile(t, filepath.Join(dir, "allow.yaml"), strings.Replace(allowYToXA80, "port: 80}", "port: 81}", 1))
	d.waitGeneration(t, 1)
	checkProbes(t, c, []packetProbe{
		{"y/a", "x/a", netns.IPv4, netns.TCP, 81, true},
		{"y/a", "x/a", netns.IPv4, netns.TCP, 80, false},
	})
	final := scrape(t, addr)
	for s, want := range map[string]float64{allowed: 2, deniedA: 2, deniedB: 0} {
		if got := final[s] - before[s]; got != want {
			t.Errorf("after a policy change: %s grew by %v in all, want %v", s, got, want)
		}
	}
	if got := final[`nftpolicy_syncs_total{result="success"}`]; got != 2 {
		t.Errorf("syncs = %v after a change, want 2", got)
	}
}
