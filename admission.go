package seckill

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// errNotAdmitted marks an admission refused before the script ran (the
// cache server could not be checked, or the voucher could not be rebuilt):
// an unavailable answer whose outcome is known, so nobody looks up the
// buyer's order after it.
var errNotAdmitted = errors.New("not admitted")

// admitFunc runs the admission script once, for the voucher's generation.
type admitFunc func(ctx context.Context, gen int64) error

// admit runs an admission to the voucher with the recoveries it may need,
// for every caller (a buy, a dead letter's retry): the voucher's
// generation comes from its row; a cache server not checked since it
// started (ErrCacheUnverified) is checked first (Recover); a voucher the
// cache lost (ErrVoucherNotLoaded) is rebuilt before admitting again,
// unless its sale has ended: then ErrEnded without a rebuild (its keys may
// have been deleted after the retention). Only the outcome of the last run
// of the script is returned as it is.
func (s *VoucherService) admit(ctx context.Context, voucherID int64, admit admitFunc) error {
	v, err := s.voucher(ctx, voucherID)
	if err != nil {
		if errors.Is(err, ErrVoucherNotFound) {
			return err
		}
		s.Logger.Warn("admission waits: the voucher could not be read from the database", "voucher", voucherID, "err", err)
		return restoring("the sale cannot be read right now; try again")
	}
	err = admit(ctx, v.Generation)
	if errors.Is(err, ErrCacheUnverified) {
		if rerr := s.Recover(ctx); rerr != nil {
			s.Logger.Warn("admission waits: Redis could not be checked", "voucher", voucherID, "err", rerr)
			return restoring("the sale is being restored after a Redis restart; try again")
		}
		err = admit(ctx, v.Generation)
	}
	if errors.Is(err, ErrCacheUnverified) {
		// Disarmed again at once: another check began.
		return restoring("the sale is being restored after a Redis restart; try again")
	}
	if !errors.Is(err, ErrVoucherNotLoaded) {
		return err
	}
	if !s.Now().Before(v.EndTime) {
		return Errorf(ErrEnded, "the sale of voucher %d has ended", voucherID)
	}
	if err := s.Rebuild(ctx, voucherID); err != nil {
		if errors.Is(err, ErrVoucherNotFound) {
			return err
		}
		s.Logger.Warn("admission waits: the voucher could not be rebuilt in Redis", "voucher", voucherID, "err", err)
		return restoring("the sale is being restored; try again")
	}
	if v, err = s.voucher(ctx, voucherID); err != nil {
		return restoring("the sale cannot be read right now; try again")
	}
	err = admit(ctx, v.Generation)
	if errors.Is(err, ErrVoucherNotLoaded) || errors.Is(err, ErrCacheUnverified) {
		// Rebuilt, and gone again at once: Redis is in trouble.
		return restoring("the sale is being restored; try again")
	}
	return err
}

// restoring is the answer to an admission that did not run: try again.
func restoring(msg string) error {
	return fmt.Errorf("%w: %w", errNotAdmitted, &Error{Kind: ErrUnavailable, Message: msg, RetryAfter: time.Second})
}
