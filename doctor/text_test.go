package doctor

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nftpolicy/nftpolicy/nft"
)

// Names that try to forge the text report: a table whose name writes a
// fake [our table] section saying our table is there and sound, a chain
// whose name clears the terminal, one whose name ends in a fake [ours],
// and a device whose name starts a hook of its own.
const (
	forgedTable  = "x\n\n[our table]\npresent: yes\ncontent: matches the table compiled from manifests\n\n[kernel features]\nx"
	forgedChain  = "c\x1b[2J"
	forgedOurs   = "filter-forward: type filter, policy accept, nftpolicy [ours]\n  -5  inet nftpolicy filter-forward: type filter, policy accept, nftpolicy [ours]"
	forgedHeader = "[our table]"
	forgedDevice = "eth0\nhook forward (ip ip6 inet):"
)

// checkUnforged checks a text report holds nothing a name could forge:
// no control character but the line ends, its sections once each and in
// order, each hook once, no [ours] when our table is missing, and no line
// saying it is present or matches.
func checkUnforged(t *testing.T, text string) {
	t.Helper()
	for i := 0; i < len(text); i++ {
		if c := text[i]; (c < ' ' && c != '\n') || c >= 0x7f {
			t.Errorf("byte %#x at %d of the report:\n%s", c, i, text)
			break
		}
	}
	var sections []string
	hooks := map[string]int{}
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "[") {
			sections = append(sections, line)
		}
		if strings.HasPrefix(line, "hook ") {
			hooks[line]++
		}
		if strings.HasSuffix(line, "[ours]") || line == "present: yes" || strings.HasPrefix(line, "content: matches") || hooks[line] > 1 {
			t.Errorf("forged line %q in:\n%s", line, text)
		}
	}
	want := "[base chains] [marks] [our table] [kernel features] [warnings]"
	if got := strings.Join(sections, " "); got != want {
		t.Errorf("sections %q, want %q, in:\n%s", got, want, text)
	}
}

// TestTextNames builds the report of a namespace without our table whose
// other tables carry forging names, and checks the text quotes them while
// ordinary names print as they are.
func TestTextNames(t *testing.T) {
	in := &nft.Inspection{Generation: 3, Tables: []nft.InspectedTable{
		{Family: "inet", Name: forgedHeader, Chains: []nft.InspectedChain{base(forgedOurs, "filter", "forward", -5)}},
		{Family: "ip", Name: "kube-proxy", Chains: []nft.InspectedChain{base("filter-forward", "filter", "forward", -110)},
			Marks: []nft.MarkUse{{Chain: "mark-for-masquerade", Kind: nft.MetaMark, Write: true, Bits: 0x4000, Value: 0x4000, Via: "nft"}}},
		{Family: "ip", Name: forgedTable, Chains: []nft.InspectedChain{base(forgedChain, "filter", "forward", -5)},
			Marks:  []nft.MarkUse{{Chain: forgedChain, Kind: nft.CtMark, Write: true, Bits: 0x4, Via: "nft"}},
			Errors: []string{"chain " + forgedChain + ": \x1b[31merror\n[warnings]"}},
		{Family: "netdev", Name: "n", Chains: []nft.InspectedChain{{Name: "in", Hook: &nft.InspectedHook{Type: "filter", Hook: "ingress", Device: forgedDevice}}}},
	}}
	r := Build(Facts{Inspection: in, GenAfter: 3}, Options{})
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	checkUnforged(t, text)
	for _, want := range []string{
		"       -110  ip kube-proxy filter-forward: type filter, policy accept, kube-proxy\n",
		"table ip kube-proxy (kube-proxy):\n",
		"  chain mark-for-masquerade rule 0: write meta mark bits 0x00004000 value 0x00004000 (nft)\n",
		`inet "[our table]" "filter-forward: type filter, policy accept, nftpolicy [ours]\n  -5  inet nftpolicy`,
		`ip "x\n\n[our table]\npresent: yes\n`,
		` "c\x1b[2J": type filter`,
		`  chain "c\x1b[2J" rule 0: write ct mark bits 0x00000004`,
		`hook ingress device "eth0\nhook forward (ip ip6 inet):" (netdev):`,
		`unreadable: ip "x\n\n[our table]`,
		`\n[kernel features]\nx" chain c\x1b[2J: \x1b[31merror\n[warnings]: its marks are not counted`,
		"present: no\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in:\n%s", want, text)
		}
	}
	// JSON keeps the names as they are; encoding/json escapes them.
	j, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(string(j), "\n\x1b") || !strings.Contains(string(j), `"chain":"c\u001b[2J"`) {
		t.Errorf("JSON: %s", j)
	}
}

func TestQuoteName(t *testing.T) {
	for name, want := range map[string]string{
		"filter-forward":                                  "filter-forward",
		"ingress-0123abcd-ns1/allow-web":                  "ingress-0123abcd-ns1/allow-web",
		"endpoint-AB12CD34-ns/svc/tcp/p80__fd00:10::1/80": "endpoint-AB12CD34-ns/svc/tcp/p80__fd00:10::1/80",
		"KUBE-SVC-XGLOHA7QRQ3V22RZ":                       "KUBE-SVC-XGLOHA7QRQ3V22RZ",
		"":                                                `""`,
		"a b":                                             `"a b"`,
		"a\nb":                                            `"a\nb"`,
		"\x1b[2J":                                         `"\x1b[2J"`,
		"[our table]":                                     `"[our table]"`,
		"[ours]":                                          `"[ours]"`,
		`"x"`:                                             `"\"x\""`,
		"caf\u00e9":                                       `"caf\u00e9"`,
		"a\u202eb":                                        `"a\u202eb"`,
		"\xff":                                            `"\xff"`,
	} {
		if got := quoteName(name); got != want {
			t.Errorf("quoteName(%q) = %s, want %s", name, got, want)
		}
	}
	if got, want := printable("a \"b\" \\n \x1b[2J\t\u00e9\xff"), `a "b" \n \x1b[2J\t\u00e9\xff`; got != want {
		t.Errorf("printable = %s, want %s", got, want)
	}
}
