package enforcer

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/nftpolicy/nftpolicy/conntrack"
	"github.com/nftpolicy/nftpolicy/nft"
)

// FollowConntrack makes established connections follow policy changes:
// after each write, the conntrack entries of flows the table before the
// write allowed and the new table denies are revoked through c (marked,
// when the table has Options.Revoke's rule, see revokeRule; otherwise
// deleted, so that their next packet is judged again), and the marks of
// flows it allows again are cleared (see package conntrack). The table
// must be compiled with Options.Revoke for a revoked flow to stay dead
// whichever end sends.
// Call it before Run; the Syncer does not close c.
func (s *Syncer) FollowConntrack(c *conntrack.Cleaner) {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.cleaner = c
}

// revokeRule is the first rule of the base chain with Options.Revoke:
//
//	ct mark & 0x00000004 == 0x00000004 drop
//
// with RevokedBit(MarkMask). The conntrack cleanup sets that bit on the
// entry of a connection a change no longer allows (package conntrack), and
// clears it when a later change allows the connection again. Deleting the
// entry instead left a gap: the next packet made a new entry in the
// orientation of whichever end sent it, and when that was the server
// (TCP picked up mid-stream with nf_conntrack_tcp_loose, or a UDP
// datagram), the policy judged a new connection server → client, which
// it usually allows, and the client's packets became its replies. A marked
// entry stays: every packet of the connection, from either end, belongs
// to it and is dropped here, before the established accept. New
// connections get an entry with mark 0, so the rule costs them, and the
// allowed ones, one load and compare per packet, nothing per policy.
//
// A marked entry lives as long as conntrack would keep the connection:
// the endpoints' packets (retransmissions, keepalives, a server's pushes)
// refresh its timeout though this rule drops them, since conntrack sees
// them first, at prerouting. That is accepted: it is one entry per
// revoked connection that existed anyway, its endpoints give up in
// minutes (TCP retransmissions, after which conntrack's retransmission
// timeout of 300 s applies) or close it (FIN, RST: short timeouts), and it
// is the entry that keeps the connection dead. Its timeout is not
// shortened on purpose: an entry gone early is the gap again. Once
// conntrack has forgotten an idle connection (5 days for TCP, 2 minutes
// for UDP), a packet the server sends is judged as a new connection of its
// own, server → client, like any other one: a policy that allows it
// allows that.
//
// An entry a helper expected from a revoked connection (FTP data, with an
// explicit `ct helper`) inherits the mark when it is created and is
// dropped too; it is never unmarked, as the cleanup skips entries with a
// master, and ends with its connection. Without Revoke (conntrack cleanup
// off) the rule is absent and a mark left by an earlier run means nothing.
func (c *Compiler) revokeRule() nft.Rule {
	return nft.Rule{
		Exprs:   []nft.Expr{nft.CtMarkBitsSet{Bits: RevokedBit(c.opts.MarkMask)}, nft.Verdict{Kind: nft.Drop}},
		Comment: "a connection the policy no longer allows, whichever end sends",
	}
}

// cleanConntrack revokes the flows the change from the table last cleaned
// for (s.cleaned) to table narrowed. Nothing cleaned for (the daemon just
// started, or a repair or a take-back, when anything could start) means
// every flow table denies: a connection opened while no daemon ran, or
// under an older policy, is judged by today's. prev is the table programmed
// before this sync: when the write sent nothing and conntrack was in line
// with prev, nothing is new. On failure s.cleaned does not move, so the
// next sync's cleanup covers this change too; the sync reports the error,
// which makes the daemon unready and Run retry. syncMu is held.
func (s *Syncer) cleanConntrack(prev, table *nft.Table, wrote bool) error {
	if s.cleaner == nil {
		return nil
	}
	if !wrote && s.cleaned != nil && s.cleaned == prev {
		s.cleaned = table // the kernel did not change: nothing new to clean
		return nil
	}
	st, err := s.cleaner.Narrowed(s.cleaned, table)
	if err != nil {
		return fmt.Errorf("table programmed, but the conntrack entries of flows it no longer allows could not be deleted: %w", err)
	}
	s.cleaned = table
	if st.Narrowed > 0 || st.Restored > 0 {
		s.log.Info("conntrack follows the change: flows it no longer allows revoked, flows it allows again restored",
			zap.Int("narrowed", st.Narrowed), zap.Int("revoked", st.Revoked), zap.Int("deleted", st.Deleted),
			zap.Int("restored", st.Restored), zap.Int("gone", st.Gone),
			zap.Int("dumped", st.Dumped), zap.Duration("took", st.Total))
	}
	return nil
}
