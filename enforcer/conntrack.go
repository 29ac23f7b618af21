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
// whichever end sends. Run also judges every flow again at each drift
// check (RecheckConntrack).
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
			zap.Int("restored", st.Restored), zap.Int("hairpins", st.Hairpins), zap.Int("gone", st.Gone),
			zap.Int("dumped", st.Dumped), zap.Duration("took", st.Total))
	}
	return nil
}

// RecheckConntrack judges every established flow again by the table
// programmed (conntrack.Cleaner.Recheck) and revokes those it drops. A
// change revokes only the flows it narrowed, so a revoked connection whose
// mark someone else cleared afterwards would otherwise pass for good:
// another table writing the conntrack mark (`ct mark set meta mark`, the
// connmark-save pattern, run before our chain) clears the revoked bit, and
// the connection is established again. Run calls it at every drift check
// that repaired nothing (a repair judges every flow already): a flow
// revived so is revoked again within Timing.DriftCheck (30 s in the
// daemon) plus one pass (0.1 s at 10k conntrack entries, 0.3 s when every
// one is traced: BenchmarkKernelRecheck10k) once nothing clears its mark
// any more. While a rule clears it at every
// packet, no mark holds: each check finds the flow revived again and
// warns, naming the likely cause, and `nftpolicy doctor` names the tables
// that write the mark.
//
// It does nothing until conntrack was brought in line with the table
// programmed (the sync or repair that failed to do so is retried, and
// judges what it must). Run reports a failure as a failed drift check (not
// ready until the sync it brings), and the next check tries again.
func (s *Syncer) RecheckConntrack() error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.mu.Lock()
	last := s.last
	s.mu.Unlock()
	if s.cleaner == nil || last == nil || s.cleaned != last || s.stopped() != nil || s.takenOver() != nil {
		return nil
	}
	st, err := s.cleaner.Recheck(last)
	if err != nil {
		return fmt.Errorf("conntrack recheck: %w", err)
	}
	fields := []zap.Field{zap.Int("revived", st.Revived), zap.Int("revoked", st.Revoked), zap.Int("deleted", st.Deleted),
		zap.Int("restored", st.Restored), zap.Int("gone", st.Gone), zap.Int("dumped", st.Dumped), zap.Duration("took", st.Total)}
	switch {
	case st.Revived > 0:
		s.log.Warn("established connections the policy denies were passing: their conntrack mark lost the revoked bit "+
			"(another table writes the conntrack mark, e.g. `ct mark set meta mark`, or the entries were made around our table); revoked them again",
			fields...)
	case st.Deleted > 0 || st.Restored > 0:
		s.log.Info("conntrack recheck: flows judged again by the table", fields...)
	default:
		s.log.Debug("conntrack recheck", fields...)
	}
	return nil
}
