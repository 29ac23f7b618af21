package nft

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/nftpolicy/nftpolicy/internal/testns"
)

// TestKernelUpdate walks a table through a series of changes with Update,
// each in one batch, and after every step requires the kernel to list
// exactly what nft -f of the whole desired table lists, and Drift to find
// nothing.
func TestKernelUpdate(t *testing.T) {
	a := netip.MustParseAddr
	steps := []struct {
		name     string
		change   func(*Table)
		wantFull bool
	}{
		{"no change", func(*Table) {}, false},
		{"add an address to an interval set", func(t *Table) {
			s := setNamed(t, "peers-v4")
			s.Elements = slices.Insert(s.Elements, len(s.Elements)-1, Element{Addr: a("10.3.0.1")}) // sorted, as Validate wants
		}, false},
		{"grow a range and drop another", func(t *Table) {
			s := setNamed(t, "peers-v4")
			s.Elements = []Element{
				{Addr: a("10.0.0.0"), Last: a("10.0.1.255")},
				{Addr: a("10.1.0.1")},
				{Addr: a("10.3.0.1")},
				{Addr: a("10.255.255.255"), Last: a("255.255.255.255")},
			}
		}, false},
		{"first range starts at zero", func(t *Table) {
			s := setNamed(t, "peers-v4")
			s.Elements = append([]Element{{Addr: a("0.0.0.0"), Last: a("1.0.0.0")}}, s.Elements...)
		}, false},
		{"split a range (a pod left the middle of it)", func(t *Table) {
			s := setNamed(t, "peers-v4")
			s.Elements[1] = Element{Addr: a("0.0.0.0"), Last: a("10.0.0.9")} // after the zero range above
			s.Elements = slices.Insert(s.Elements, 2, Element{Addr: a("10.0.0.11"), Last: a("10.0.1.255")})
			s.Elements = slices.Delete(s.Elements, 0, 1)
		}, false},
		{"merge them again", func(t *Table) {
			s := setNamed(t, "peers-v4")
			s.Elements = slices.Replace(s.Elements, 0, 2, Element{Addr: a("0.0.0.0"), Last: a("10.0.1.255")})
		}, false},
		{"first range no longer starts at zero", func(t *Table) {
			setNamed(t, "peers-v4").Elements[0].Addr = a("10.0.0.0")
		}, false},
		{"empty an interval set", func(t *Table) { setNamed(t, "peers-v6").Elements = nil }, false},
		{"named-port elements", func(t *Table) {
			s := setNamed(t, "np-v4")
			s.Elements = []Element{{Addr: a("10.0.0.2"), Proto: ProtoUDP, Port: 53}, {Addr: a("10.0.0.1"), Proto: ProtoTCP, Port: 8080}}
		}, false},
		{"new chain and a map element jumping to it", func(t *Table) {
			t.Chains = append(t.Chains, &Chain{Name: "pod-x/b", Rules: []Rule{{Exprs: []Expr{Verdict{Kind: Drop}}}}})
			s := setNamed(t, "pods-v4")
			s.Elements = append(s.Elements, Element{Addr: a("10.0.0.2"), Verdict: Verdict{Kind: Jump, Chain: "pod-x/b"}})
		}, false},
		{"map element changes its verdict", func(t *Table) {
			s := setNamed(t, "pods-v4")
			s.Elements[0].Verdict.Chain = "pod-x/b"
		}, false},
		{"rewrite a chain", func(t *Table) {
			c := chainNamed(t, "np-x/allow")
			c.Rules = c.Rules[1:]
		}, false},
		{"new set used by a rewritten chain", func(t *Table) {
			t.Sets = append(t.Sets, &Set{Name: "extra-v6", Key: KeyIPv6, Interval: true, Elements: []Element{{Addr: a("fd00::"), Last: a("fd00::ff")}}})
			c := chainNamed(t, "pod-x/b")
			c.Rules = append([]Rule{{Exprs: []Expr{AddrInSet{Family: IPv6, Field: Saddr, Set: "extra-v6"}, Verdict{Kind: Return}}}}, c.Rules...)
		}, false},
		{"delete the chain pod-x/a and its map element", func(t *Table) {
			t.Chains = slices.DeleteFunc(t.Chains, func(c *Chain) bool { return c.Name == "pod-x/a" })
			c := chainNamed(t, "np-x/allow")
			c.Rules = slices.DeleteFunc(c.Rules, func(r Rule) bool {
				return slices.Contains(r.Exprs, Expr(Verdict{Kind: Goto, Chain: "pod-x/a"}))
			})
			s := setNamed(t, "pods-v4")
			s.Elements = slices.DeleteFunc(s.Elements, func(e Element) bool { return e.Verdict.Chain == "pod-x/a" })
		}, false},
		{"delete a set no rule uses", func(t *Table) {
			t.Sets = slices.DeleteFunc(t.Sets, func(s *Set) bool { return s.Name == "plain-v4" })
			c := chainNamed(t, "np-x/allow")
			c.Rules = slices.DeleteFunc(c.Rules, func(r Rule) bool {
				return slices.Contains(r.Exprs, Expr(AddrInSet{Family: IPv4, Field: Daddr, Set: "plain-v4"}))
			})
		}, false},
		{"two chains, one jumping to the other", func(t *Table) {
			t.Chains = append(t.Chains,
				&Chain{Name: "np-y/target", Rules: []Rule{{Exprs: []Expr{Verdict{Kind: Return}}}}},
				&Chain{Name: "pod-y/referrer", Rules: []Rule{{Exprs: []Expr{Verdict{Kind: Jump, Chain: "np-y/target"}}}}})
		}, false},
		// The target is listed (and sorts) before its referrer: deleting it
		// first, while the referrer's rule still jumps to it, is EBUSY.
		{"delete both in one batch", func(t *Table) {
			t.Chains = slices.DeleteFunc(t.Chains, func(c *Chain) bool {
				return strings.HasSuffix(c.Name, "-y/target") || strings.HasSuffix(c.Name, "-y/referrer")
			})
		}, false},
		{"change the base chain priority", func(t *Table) { chainNamed(t, "filter-forward").Hook.Priority = -20 }, true},
	}

	ns, c := openTestNS(t)
	cur := sampleTable()
	chainNamed(cur, "pod-x/a").Rules[2] = Rule{Exprs: []Expr{Verdict{Kind: Jump, Chain: "np-x/allow"}}}
	if _, err := c.Apply(cur); err != nil {
		t.Fatal(err)
	}
	for _, step := range steps {
		next := clone(cur)
		// Hooks are pointers: copy the one a step may change.
		for _, ch := range next.Chains {
			if ch.Hook != nil {
				h := *ch.Hook
				ch.Hook = &h
			}
		}
		step.change(next)
		stats, err := c.Update(cur, next)
		if err != nil {
			t.Fatalf("%s: Update: %v", step.name, err)
		}
		if stats.Full != step.wantFull {
			t.Errorf("%s: full replace = %v, want %v", step.name, stats.Full, step.wantFull)
		}
		oracle := testns.New(t, "nftpt")
		testns.Nft(t, oracle, Render(next), "-f", "-")
		if got, want := testns.ListTable(t, ns, next.Name), testns.ListTable(t, oracle, next.Name); got != want {
			t.Fatalf("%s: kernel after Update differs from nft -f of the desired table\n--- nft -f:\n%s\n--- Update:\n%s", step.name, want, got)
		}
		if d, err := c.Drift(next); err != nil || d != "" {
			t.Errorf("%s: Drift = %q, %v; want none", step.name, d, err)
		}
		cur = next
	}
}

// TestKernelDrift tampers with a programmed table from outside, with nft,
// and requires Drift to see each change by content: a verdict or an
// element swapped keeps every count and comment as it was.
func TestKernelDrift(t *testing.T) {
	nft := func(cmd string) func(*testing.T, string) {
		return func(t *testing.T, ns string) { testns.Nft(t, ns, cmd, "-f", "-") }
	}
	for _, tc := range []struct {
		name    string
		tamper  func(t *testing.T, ns string)
		wantAny bool
	}{
		{"untouched", func(*testing.T, string) {}, false},
		{"chain flushed", nft("flush chain inet nftpolicy np-x/allow"), true},
		{"element deleted", nft("delete element inet nftpolicy np-v4 { 10.0.0.1 . tcp . 8080 }"), true},
		{"rule added", nft("add rule inet nftpolicy leaf accept"), true},
		{"table deleted", nft("delete table inet nftpolicy"), true},
		{"drop replaced with accept under the same comment", func(t *testing.T, ns string) {
			h := ruleHandle(t, ns, "pod-x/a", "no policy allows")
			testns.Nft(t, ns, `replace rule inet nftpolicy pod-x/a handle `+h+` accept comment "x/a: no policy allows"`, "-f", "-")
		}, true},
		{"dispatch vmap rule replaced", func(t *testing.T, ns string) {
			h := ruleHandle(t, ns, "filter-forward", "ip daddr vmap @pods-v4")
			testns.Nft(t, ns, "replace rule inet nftpolicy filter-forward handle "+h+" ip saddr vmap @pods-v4", "-f", "-")
		}, true},
		{"jump rule replaced", func(t *testing.T, ns string) {
			h := ruleHandle(t, ns, "pod-x/a", "jump np-x/allow")
			testns.Nft(t, ns, "replace rule inet nftpolicy pod-x/a handle "+h+" jump leaf", "-f", "-")
		}, true},
		{"map element verdict swapped", nft(`delete element inet nftpolicy pods-v4 { 10.0.0.1 }
add element inet nftpolicy pods-v4 { 10.0.0.1 : accept }`), true},
		{"element replaced by another", nft(`delete element inet nftpolicy plain-v4 { 10.9.9.9 }
add element inet nftpolicy plain-v4 { 10.9.9.8 }`), true},
		{"interval replaced by another", nft(`delete element inet nftpolicy peers-v4 { 10.1.0.1 }
add element inet nftpolicy peers-v4 { 10.1.0.3 }`), true},
		{"named-port element replaced by another", nft(`delete element inet nftpolicy np-v4 { 10.0.0.1 . tcp . 8080 }
add element inet nftpolicy np-v4 { 10.0.0.1 . udp . 8080 }`), true},
		{"catch-all element added to a map", nft("add element inet nftpolicy pods-v4 { * : accept }"), true},
		{"rule looks up another set", func(t *testing.T, ns string) {
			h := ruleHandle(t, ns, "np-x/allow", "ip daddr @plain-v4")
			testns.Nft(t, ns, "replace rule inet nftpolicy np-x/allow handle "+h+" ip daddr @peers-v4 goto leaf", "-f", "-")
		}, true},
		{"table dormant", nft("add table inet nftpolicy { flags dormant; }"), true},
		{"base chain policy drop", nft("add chain inet nftpolicy filter-forward { type filter hook forward priority -1; policy drop; }"), true},
		{"base chain priority changed", func(t *testing.T, ns string) {
			// The kernel refuses to move a live base chain: the table is
			// replaced by one that differs in that priority only.
			changed := sampleTable()
			chainNamed(changed, "filter-forward").Hook.Priority = 5
			testns.Nft(t, ns, "delete table inet nftpolicy\n"+Render(changed), "-f", "-")
		}, true},
		{"base chain hook changed", func(t *testing.T, ns string) {
			changed := sampleTable()
			chainNamed(changed, "filter-forward").Hook.Hook = "input"
			testns.Nft(t, ns, "delete table inet nftpolicy\n"+Render(changed), "-f", "-")
		}, true},
		{"whole table rewritten as it was", func(t *testing.T, ns string) {
			testns.Nft(t, ns, "delete table inet nftpolicy\n"+Render(sampleTable()), "-f", "-")
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := testns.New(t, "nftpt")
			c, err := Open(ns)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			table := sampleTable()
			if _, err := c.Apply(table); err != nil {
				t.Fatal(err)
			}
			tc.tamper(t, ns)
			d, err := c.Drift(table)
			if err != nil {
				t.Fatal(err)
			}
			if (d != "") != tc.wantAny {
				t.Errorf("Drift = %q, want drift: %v", d, tc.wantAny)
			}
			t.Logf("Drift = %q", d)
		})
	}
}

// ruleHandle returns the handle of the rule of chain whose `nft -a list`
// line contains text.
func ruleHandle(t *testing.T, ns, chain, text string) string {
	t.Helper()
	for _, line := range strings.Split(testns.Nft(t, ns, "", "-a", "list", "chain", "inet", "nftpolicy", chain), "\n") {
		if strings.Contains(line, text) {
			if _, h, ok := strings.Cut(line, "# handle "); ok {
				return strings.TrimSpace(h)
			}
		}
	}
	t.Fatalf("no rule with %q in chain %s", text, chain)
	return ""
}
