package seckill

import (
	"context"
	"errors"
	"time"
)

// buyerSlots reads which order holds a buyer's slot of a voucher in the
// cache ([OrderCache.BuyerOrder]).
type buyerSlots interface {
	BuyerOrder(ctx context.Context, userID, voucherID int64) (int64, error)
}

// heldOrder returns the order the buyer's slot of the voucher holds in the
// cache, or 0.
func heldOrder(ctx context.Context, slots buyerSlots, userID, voucherID int64) (int64, error) {
	return slots.BuyerOrder(ctx, userID, voucherID)
}

// admit runs the admission a (run: the cache's Admit, or Reserve in the
// queue mode) with the recoveries it may need, for every caller (a buy, a
// dead letter's retry): the voucher's generation comes from its row; a
// cache server not checked since it started (ErrCacheUnverified) is checked
// first (Recover); a voucher the cache lost (ErrVoucherNotLoaded) is
// rebuilt before admitting again, unless its sale has ended: then ErrEnded
// without a rebuild (its keys may have been deleted after the retention).
//
// A run whose answer was lost (ErrUnavailable: the script may have run) is
// settled by reading the buyer's slot, for up to lookup (default 1s):
// admission records the buyer with the order, so a slot holding a.OrderID
// means admitted (nil), one holding another order is that order
// (ErrDuplicateOrder); an empty or unreadable slot is ErrUnavailable with
// RetryAfter, as is an admission that could not run. A run that answers an
// *Error of kind ErrUnavailable itself (an admission not yet on enough
// replicas) is answered as it is, unsettled.
func (s *VoucherService) admit(ctx context.Context, a Admission, run func(context.Context, Admission) error, slots buyerSlots, lookup time.Duration) error {
	voucherID := a.VoucherID
	admit := func(ctx context.Context, gen int64) error {
		a.Generation = gen
		err := run(ctx, a)
		var final *Error
		if errors.As(err, &final) && final.Kind == ErrUnavailable {
			// The cache's own answer (an admission not yet on enough
			// replicas): reading the slot back would answer admitted.
			return err
		}
		if errors.Is(err, ErrUnavailable) {
			return s.settle(ctx, a, slots, lookup, err)
		}
		return err
	}
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

// settle answers an admission whose answer was lost (cause) from the
// buyer's slot (see admit).
func (s *VoucherService) settle(ctx context.Context, a Admission, slots buyerSlots, lookup time.Duration, cause error) error {
	if lookup <= 0 {
		lookup = time.Second
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lookup)
	defer cancel()
	existing, err := heldOrder(lctx, slots, a.UserID, a.VoucherID)
	switch {
	case err != nil:
		s.Logger.Warn("admission outcome unknown", "voucher", a.VoucherID, "user", a.UserID, "err", cause, "lookup_err", err)
		return &Error{Kind: ErrUnavailable, Message: "your order's outcome is not known yet; try again, you will not buy twice", RetryAfter: time.Second}
	case existing == 0:
		return &Error{Kind: ErrUnavailable, Message: "your order was not taken; try again", RetryAfter: time.Second}
	case existing != a.OrderID:
		return duplicate(existing)
	}
	return nil
}

// restoring is the answer to an admission that did not run: try again.
func restoring(msg string) error {
	return &Error{Kind: ErrUnavailable, Message: msg, RetryAfter: time.Second}
}
