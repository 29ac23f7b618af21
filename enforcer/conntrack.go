package enforcer

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/nftpolicy/nftpolicy/conntrack"
	"github.com/nftpolicy/nftpolicy/nft"
)

// FollowConntrack makes established connections follow policy changes:
// after each write, the conntrack entries of flows the table before the
// write allowed and the new table denies are deleted through c (see
// package conntrack), so their next packet is judged again, and dropped.
// Call it before Run; the Syncer does not close c.
func (s *Syncer) FollowConntrack(c *conntrack.Cleaner) {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.cleaner = c
}

// cleanConntrack deletes the flows the change from the table last cleaned
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
	if st.Deleted > 0 || st.Narrowed > 0 {
		s.log.Info("deleted the conntrack entries of flows the change no longer allows",
			zap.Int("narrowed", st.Narrowed), zap.Int("deleted", st.Deleted), zap.Int("gone", st.Gone),
			zap.Int("dumped", st.Dumped), zap.Duration("took", st.Total))
	}
	return nil
}
