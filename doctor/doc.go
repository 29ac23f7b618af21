// Package doctor reads a network namespace's whole nftables ruleset and
// says whether nftpolicy can do its job there: `nftpolicy doctor`. It only
// reads; the one write it makes goes to a namespace of its own (the
// feature checks, see nft.ProbeFeatures).
//
// # What it checks
//
//   - Every base chain on each hook, in every table and family, in the
//     order packets meet them (priority, then family, table and chain
//     name), ours marked. The ip, ip6 and inet chains of a hook are one
//     list: an inet chain sees the packets of both.
//   - A warning (same-priority) for another base chain at our exact
//     priority on our hook, whose order with ours is undefined, and one
//     (runs-ahead) for a filter chain of kube-proxy, Calico or
//     iptables-nft that runs before ours.
//   - The mark bits every other table reads and writes, decoded rule by
//     rule (nft.MarkUses: native meta and ct mark expressions, and the
//     xtables MARK, CONNMARK, mark and connmark extensions iptables-nft
//     leaves in its rules; a copy of one mark into the other, such as
//     `ct mark set meta mark & 0x4`, reads the bits it copies and writes
//     all 32), against our mask, in the packet mark and the
//     conntrack mark alike (our revoked bit lives in the latter); and the
//     known components (enforcer.KnownMarkUsers) whose bits the mask
//     overlaps. Exact compares of the whole mark (`meta mark 0x4000`) are
//     listed apart: they hold as long as our bits are clear when our chain
//     ends, which nftpolicy guarantees.
//   - Our table: its owner record (nft.Owner), whether that owner runs
//     (nft.Conn.Alive), its layout against this build's (enforcer.Layout),
//     the ruleset generation, and, given a source, whether its content is
//     the table the daemon would compile now (nft.Conn.Drift).
//   - The kernel features the table relies on, each written for real in
//     a throwaway namespace: verdict maps, interval sets, concatenated
//     sets, conntrack and fib expressions, masked mark writes, and
//     concatenated interval sets (not used by the layout of this build, checked for what
//     comes next).
//
// # Who wrote a table
//
// Nothing in the kernel names a table's writer; the doctor goes by names
// (classify):
//
//   - inet <--table> is ours (nftpolicy), and so is inet <--table>-handover,
//     which a whole write that stopped half way left (the next one removes it);
//   - a table named kube-proxy, of any family, is kube-proxy's nftables
//     mode; one named calico (or calico-*) is Calico's nftables data
//     plane; firewalld is firewalld;
//   - filter, nat, mangle, raw and security in ip and ip6 (filter in arp;
//     filter, nat and broute in bridge) whose base chains all carry the
//     built-in names (PREROUTING, INPUT, FORWARD, OUTPUT, POSTROUTING,
//     BROUTING) are iptables-nft's (arptables-nft, ebtables-nft). When
//     they hold KUBE-* chains (kube-proxy in iptables mode) or cali-*
//     chains (Calico in iptables mode), those are named too:
//     "iptables-nft (kube-proxy)";
//   - any other table holding cali-* chains is Calico's; the rest are
//     "other".
//
// A hand-written `table ip filter` with lower-case base chains is not
// taken for iptables-nft; one with built-in names is.
//
// # Text
//
// The text layout is stable, for people and for golden tests: a header
// (netns, table, mark mask, ruleset generation), then the sections
// [base chains], [marks], [our table], [kernel features] and [warnings],
// one fact per line, ending with "warnings: N". Every line with a
// variable part (the generation, the owner's id and time) names it first.
//
// Names come from the kernel, and netlink takes any bytes in them, nft's
// parser aside: newlines, terminal escapes, spaces, brackets. A name of
// table, chain or device, and an owner id, prints as it is when it is
// plain, printable ASCII with no space, quote, backslash or bracket, as
// every name nftpolicy, kube-proxy, Calico and the xtables tools write
// is; any other is quoted in Go syntax, ASCII only ("x\n[our table]",
// "c\x1b[2J"), in the text and in the warning messages (the JSON's too).
// Whatever else a line holds (a kernel error, a drift description) is
// escaped the same way where it is not printable ASCII. So no name can
// make a line, a section or an [ours] of its own, and the layout of an
// ordinary namespace does not change. JSON holds the names as they are:
// encoding/json escapes them.
//
// # JSON
//
// --json prints the Report, with these fields:
//
//	netns, table, markMask ("0x00000004"), generation
//	hooks[]:        families ("ip ip6 inet", "bridge", ...), hook, device,
//	                chains[]: priority, family, table, chain, type, policy, component, ours
//	marks:          knownUsers[] ("kube-proxy 0x00004000"),
//	                tables[]: family, table, component, metaRead, metaWrite, ctRead,
//	                ctWrite, exact[], overlap, uses[]: chain, handle, mark
//	                ("meta mark", "ct mark"), access ("read", "write"), bits,
//	                value, exact, via ("nft", "xt MARK rev 2"), undecoded
//	ours:           present, comment, owner {id, since, layout, alive, aliveError},
//	                layout (this build's), source, content ("matches", the first
//	                difference, or "" when not compared)
//	features[]:     name, used, ok, error
//	warnings[]:     kind (same-priority, runs-ahead, mark-overlap, mark-known,
//	                mark-undecoded, no-table, owner, layout, content, feature,
//	                unreadable, changed), message
//
// Marks and masks are hexadecimal strings of 8 digits.
package doctor
