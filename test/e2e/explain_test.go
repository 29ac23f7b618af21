package e2e

import (
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/nftpolicy/nftpolicy/internal/netns"
	"github.com/nftpolicy/nftpolicy/internal/testbin"
)

// explainPolicies mix what explain must tell apart: a default deny, a rule
// by namespace and named port, a rule by pod and port range, an ipBlock
// with an except, and an egress policy.
const explainPolicies = `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: "x", name: default-deny}
spec:
  podSelector: {}
  policyTypes: [Ingress]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: "x", name: from-y}
spec:
  podSelector: {matchLabels: {pod: a}}
  ingress:
    - from: [{namespaceSelector: {matchLabels: {ns: "y"}}}]
      ports: [{port: serve-80-tcp}]
    - from: [{podSelector: {matchLabels: {pod: b}}}]
      ports: [{protocol: UDP, port: 80, endPort: 81}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: "y", name: egress}
spec:
  podSelector: {matchLabels: {pod: b}}
  egress:
    - to: [{ipBlock: {cidr: 0.0.0.0/0, except: [%s/32]}}, {ipBlock: {cidr: "::/0"}}]
`

// verdictRE finds the verdict line of `nftpolicy explain`.
var verdictRE = regexp.MustCompile(`(?m)^verdict: (accept|drop)$`)

// Every verdict `nftpolicy explain` gives is the verdict real packets get:
// a whole matrix of flows, both families, TCP and UDP, explained one by one
// with the binary and the manifests the daemon follows, then probed. Each
// cell of the probed matrix must match the explained one (a blocked probe
// of an allowed cell is retried once; a leak never is).
func TestDataPlaneExplainMatchesPackets(t *testing.T) {
	t.Parallel()
	s := newSmall(t, netns.Options{Name: "e2e-expl"}, nil, "x/a", "x/b", "y/a", "y/b")
	pods := []*netns.Pod{s.pods["x/a"], s.pods["x/b"], s.pods["y/a"], s.pods["y/b"]}
	s.apply(t, strings.Replace(explainPolicies, "%s", s.pods["x/b"].IPv4().String(), 1))
	bin := testbin.Nftpolicy(t)
	keys := netns.Keys(pods)
	explained := 0
	for _, check := range []struct {
		proto string
		port  int
	}{{netns.TCP, 80}, {netns.UDP, 81}, {netns.TCP, 81}} {
		for _, fam := range []string{netns.IPv4, netns.IPv6} {
			want := netns.NewMatrix(keys, true)
			var mu sync.Mutex
			var wg sync.WaitGroup
			for _, from := range pods {
				for _, to := range pods {
					if from == to {
						continue
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						out, err := exec.Command(bin, "explain", "--manifests", s.d.Dir(), "--node", s.node.Name(),
							"--from", from.Addr(fam).String(), "--to", to.Addr(fam).String(),
							"--proto", check.proto, "--port", strconv.Itoa(check.port)).CombinedOutput()
						m := verdictRE.FindSubmatch(out)
						mu.Lock()
						defer mu.Unlock()
						if err != nil || m == nil {
							t.Errorf("explain %s → %s %s %s/%d: %v\n%s", from.Key(), to.Key(), fam, check.proto, check.port, err, out)
							return
						}
						explained++
						want.Set(from.Key(), to.Key(), string(m[1]) == "accept")
					}()
				}
			}
			wg.Wait()
			got := s.c.ProbeMatrixExpect(pods, fam, check.proto, check.port, want)
			if d := got.Diff(want); d != "" {
				t.Errorf("%s %s/%d: packets (observed) differ from explain (expected):\n%s", fam, check.proto, check.port, d)
			}
			if a, b := want.Count(); a == 0 || b == 0 {
				t.Errorf("%s %s/%d: explain allows %d and drops %d cells; the case proves little", fam, check.proto, check.port, a, b)
			}
		}
	}
	t.Logf("%d flows explained, each matching real packets", explained)
}
