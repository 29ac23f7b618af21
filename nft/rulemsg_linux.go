package nft

import (
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Rule messages (NEWRULE) are encoded here rather than by google/nftables,
// for the same reason as element messages (elemmsg_linux.go): the
// library marshals every level of a rule into a new buffer and copies it
// twice more into the message, about 5 kB of garbage a rule, 60 MB of it
// for the 12k rules of 10k policies at the first sync of 150k pods, where
// the collector runs at a quarter of the live heap. Each expression is
// still encoded by the library (expr.Marshal); appendRuleMessage writes
// the rest straight into one buffer that serves rule after rule.
// TestRuleMessageIsTheLibrarys holds it to the library's encoding, byte
// for byte, for every rule of the sample and scale tables.

// ruleMessageType and ruleMessageFlags are those of the library's
// AddRule: a rule appended to its chain. (The batch drops the ack and
// echo flags of every message: batchTransport.add.)
const (
	ruleMessageType  = netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWRULE)
	ruleMessageFlags = netlink.Request | netlink.Acknowledge | netlink.Create | unix.NLM_F_ECHO | unix.NLM_F_APPEND
)

// appendRuleMessage appends to buf the body of a NEWRULE message (the
// nfgenmsg header and the attributes) that appends a rule of exprs, with
// userData if not nil, to chain of table, as google/nftables v0.3.0
// encodes it (Conn.AddRule, newRule). The library's compat attribute
// (for xtables matches and targets) is never needed: encodeRule makes
// neither, and an expression of another kind than it makes is refused.
func appendRuleMessage(buf []byte, table *nftables.Table, chain string, exprs []expr.Any, userData []byte) ([]byte, error) {
	fam := byte(table.Family)
	buf = append(buf, fam, unix.NFNETLINK_V0, 0, 0) // nfgenmsg, res_id 0
	buf = appendStringAttr(buf, unix.NFTA_RULE_TABLE, table.Name)
	buf = appendStringAttr(buf, unix.NFTA_RULE_CHAIN, chain)
	list := beginNested(&buf, unix.NFTA_RULE_EXPRESSIONS)
	for i, e := range exprs {
		switch e.(type) {
		case *expr.Match, *expr.Target:
			return nil, fmt.Errorf("expression %d: %T is not encoded here", i, e)
		}
		data, err := expr.Marshal(fam, e)
		if err != nil {
			return nil, fmt.Errorf("expression %d (%T): %w", i, e, err)
		}
		buf = appendAttr(buf, unix.NLA_F_NESTED|unix.NFTA_LIST_ELEM, data)
	}
	if len(buf)-list > 0xffff {
		return nil, fmt.Errorf("%d expressions do not fit one netlink attribute (%d bytes)", len(exprs), len(buf)-list)
	}
	endNested(buf, list)
	if userData != nil {
		buf = appendAttr(buf, unix.NFTA_RULE_USERDATA, userData)
	}
	return buf, nil
}
