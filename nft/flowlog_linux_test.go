package nft

import (
	"strings"
	"testing"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// The statements of flow logging are content: a log rule of ours whose
// group, prefix, rate or burst someone else changed, or whose mark check
// they turned around, is drift (the sample table holds them: a clean
// read-back of it is checked by TestKernelRenderDeltaIsWhatIsSent).
func TestKernelFlowLogRulesDrift(t *testing.T) {
	// As nft lists it.
	const allow = `meta mark & 0x00000040 == 0x00000000 ip saddr @peers-v4 tcp dport 80 limit rate 20/second burst 40 packets log prefix "nftpolicy:allow:1a2b3c4d:0" group 100`
	for _, tc := range []struct{ name, old, new string }{
		{"group", `group 100`, `group 101`},
		{"prefix", `allow:1a2b3c4d:0`, `allow:1a2b3c4d:1`},
		{"rate", `rate 20/second`, `rate 21/second`},
		{"burst", `burst 40 packets`, `burst 41 packets`},
		{"mark", `== 0x00000000`, `== 0x00000040`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, c := openTestNS(t)
			table := sampleTable()
			if _, err := c.Apply(table); err != nil {
				t.Fatal(err)
			}
			if d, err := c.Drift(table); err != nil || d != "" {
				t.Fatalf("drift right after Apply: %q, %v", d, err)
			}
			changed := strings.Replace(allow, tc.old, tc.new, 1)
			if changed == allow {
				t.Fatalf("%q is not in the rule", tc.old)
			}
			handle := ruleHandle(t, ns, "np-x/allow", allow)
			testns.Nft(t, ns, "", "replace", "rule", "inet", table.Name, "np-x/allow", "handle", handle, changed)
			if d, err := c.Drift(table); err != nil || d == "" {
				t.Errorf("%s changed by nft: drift %q, %v; want drift", tc.name, d, err)
			}
		})
	}
}
